"""The data-free prior: what step methods and DPADVI receive instead of the rows.

:func:`prior_graph` builds the model's prior (log prior + log|Jacobian| of the transforms +
the potentials, every one checked not to read data by
:func:`pymc_dp.data.check_prior_reads_no_data` before the graph is used) and
:class:`PriorDensity` holds it compiled as a function of the flat unconstrained θ, with the
parameter layout. Nothing here reads a row: this module sits below the data layer
(:mod:`pymc_dp.data`, which builds a :class:`PriorDensity` next to the per-row functions) and
imports nothing of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.pytensorf import compile as pm_compile
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable

from pymc_dp.model_structure import (
    ModelStructureError,
    _array_shape,
    _equal_array,
    _row_length_axes,
    _row_structure,
    _same_data,
    data_dependent_deterministics,
)

__all__ = ["PriorDensity", "check_prior_reads_no_data", "prior_graph", "prior_model"]


def prior_model(model: Any, outcome: Any) -> Any:
    """A copy of ``model`` without its likelihood: no observed ``outcome``, data container or deterministic that
    reads data (PyMC's model graph, ``pymc.model.fgraph``); the priors and data-free potentials are kept.

    What the routes that sample a model's priors against a released likelihood run NUTS on (the one
    call's released-statistics route, :func:`pymc_dp.release_once_linear`). Reads no row.
    """
    from pymc.model.fgraph import fgraph_from_model, model_from_fgraph

    drop = {outcome.name, *data_dependent_deterministics(model), *(v.name for v in model.data_vars)}
    fgraph, _ = fgraph_from_model(model, inlined_views=True)
    for index in reversed(range(len(fgraph.outputs))):
        if fgraph.outputs[index].name in drop:
            fgraph.remove_output(index)
    return model_from_fgraph(fgraph, mutate_fgraph=True)


def prior_graph(model) -> Variable:
    """log prior + log|Jacobian| of the transforms + the potentials, as a graph of the value variables.

    Parameters
    ----------
    model : pm.Model
        The model. Its potentials must read no data (checked by
        :func:`pymc_dp.data.check_prior_reads_no_data` before the graph is compiled).

    Returns
    -------
    TensorVariable
        A scalar graph of the model's value variables.

    Notes
    -----
    Neighbouring relation: either. The graph is data-free once the check has passed; values
    computed from it are exact, neither clipped nor noised, and cost no privacy.
    """
    terms = [model.logp(vars=model.free_RVs, jacobian=True, sum=True)]
    terms += [model.logp(vars=[pot], sum=True) for pot in model.potentials]  # data-free: checked
    return pt.add(*terms) if len(terms) > 1 else terms[0]


def check_prior_reads_no_data(
    model,
    n_rows: int | None = None,
    public: Sequence[np.ndarray] = (),
    expressions: Mapping[str, Any] | None = None,
) -> None:
    """Refuse a prior, potential or parameter expression that reads data or a table that may be private.

    Only the likelihood may read data: everything else enters the computation exactly,
    neither clipped nor noised. Unless declared public (:func:`pymc_dp.public`, or
    ``public``):

    - a ``pm.Potential`` may read no non-scalar constant or shared variable at all;
    - a free variable's prior (its parameters as built, and its log density with transforms)
      may read non-scalar constants only as per-element parameters: none with an axis longer
      than the largest axis of the variable (``pm.Normal("b", np.zeros(3), 1, shape=3)`` and
      ``pm.MvNormal(..., cov=np.eye(3))`` pass; a scalar reading an 80-vector does not), and
      no non-scalar shared variable;
    - an expression (``expressions``) follows the prior's rule, against its own shape;
    - none reads observed values, ``pm.Data`` containers, or an array with an axis of length
      N (the number of rows).

    Integer arrays that only give shapes (a random variable's ``size``, a reshape's target)
    are not tables and pass.

    Parameters
    ----------
    model : pm.Model
        The model.
    n_rows : int, optional
        N; taken from the observed variables if omitted (a model without observed variables
        then only has its ``pm.Data`` containers checked).
    public : sequence of arrays, optional
        Arrays known to be public (e.g. released statistics) that may be read whatever their
        shape, compared by value; variables declared with :func:`pymc_dp.public` are public too.
    expressions : mapping of str to tensor, optional
        Further graphs that enter an exact (unclipped) computation, by the name the caller
        knows them by: e.g. :class:`pymc_dp.DPSuffStatsPenaltyMH`'s ``params``, whose
        natural parameters multiply the noisy statistics. Each must not read data either.

    Raises
    ------
    ModelStructureError
        Naming the potential, the prior or the expression, never a value or a shape.

    Notes
    -----
    Neighbouring relation: substitute or add/remove. No mechanism covers the prior or a
    potential; one reading a private table (the rows, or a second table of any length) would
    release it unclipped and unnoised. A table reduced in NumPy before the model was built (a
    scalar ``x.mean()`` baked into a prior) looks like a public constant and cannot be
    detected; nor can a per-element parameter computed from private data.
    """
    from pytensor.tensor.variable import TensorVariable

    from pymc_dp.public_data import graph_variables as _graph_variables
    from pymc_dp.public_data import is_public

    observed_values = []
    if model.observed_RVs:
        n_found, _, observed_values = _row_structure(model)
        n_rows = n_found if n_rows is None else n_rows
    data = [v for v in observed_values if isinstance(v, Constant | SharedVariable)] + list(model.data_vars)
    public = list(public)

    def declared(v: Variable) -> bool:
        return is_public(v) or (isinstance(v, Constant) and any(_equal_array(v.data, p) for p in public))

    def reads(graph: Variable, limit: int | None = None, strict: bool = False) -> bool:
        """Whether ``graph`` reads data; ``strict``: or any table longer than ``limit`` (None: any table)."""
        variables = _graph_variables([graph])
        public.extend(np.asarray(v.data) for v in variables if isinstance(v, Constant) and is_public(v))
        shape_only = _shape_only_constants([graph]) if strict else set()
        for v in variables:
            if not isinstance(v, Constant | SharedVariable) or is_public(v):
                continue
            if any(_same_data(v, d) for d in data):
                return True
            if declared(v):
                continue
            if getattr(v, "ndim", 0) >= 1 and _row_length_axes(v, n_rows):  # any axis of length N
                return True
            if strict and getattr(v, "ndim", 0) >= 1 and v not in shape_only:
                if isinstance(v, SharedVariable) or limit is None or max(_array_shape(v), default=0) > limit:
                    return True
        return False

    def reads_public(graphs: Sequence[Variable]) -> bool:
        return any(is_public(v) for v in _graph_variables(graphs))

    # The graphs as built, checked strictly (every table they read is in them, inner graphs
    # included); the log densities (model.logp constant-folds, so a derived constant may
    # appear there only) for data and arrays of length N, unless the built graph reads a
    # declared array (its folded derivatives are not marked).
    hint = "declare it with pmdp.public(array) if it is public"
    for pot in model.potentials:
        built = model.replace_rvs_by_values([pot])
        folded = [] if reads_public(built) else [model.logp(vars=[pot], sum=True)]
        if any(reads(g, strict=True) for g in built) or any(reads(g) for g in folded):
            raise ModelStructureError(
                f"Potential `{pot.name}` reads data or a non-scalar array (a table that may be private): it "
                "enters the posterior exactly, neither clipped nor noised. Express data as an observed variable "
                f"with a row axis; for an array, {hint}."
            )
    if model.free_RVs:
        shapes = model.eval_rv_shapes()
        for rv in model.free_RVs:
            params = [i for i in rv.owner.inputs if isinstance(i, TensorVariable)]
            built = model.replace_rvs_by_values(params) if params else []
            folded = [] if reads_public(built) else [model.logp(vars=[rv], jacobian=True, sum=True)]
            limit = max((int(d) for d in shapes.get(rv.name, ())), default=1)
            if any(reads(g, limit, strict=True) for g in built) or any(reads(g) for g in folded):
                raise ModelStructureError(
                    f"The prior of free variable `{rv.name}` reads row data or an array larger than the variable "
                    "(a table that may be private); a prior may read arrays only as per-element parameters, and "
                    f"only the likelihood may depend on rows. For a public array, {hint}."
                )
    for name, expression in (expressions or {}).items():
        [graph] = model.replace_rvs_by_values([pt.as_tensor_variable(expression)])
        limit = max(_static_or_evaluated_shape(model, graph), default=1)
        if reads(graph, limit, strict=True):
            raise ModelStructureError(
                f"`{name}` reads data or an array larger than itself: it enters the computation exactly, neither "
                f"clipped nor noised. Build it from the model's free variables and public constants only ({hint})."
            )


def _shape_only_constants(outputs: Sequence[Variable]) -> set[Variable]:
    """Integer constants whose every use is as a shape (a random variable's size, a reshape's or alloc's shape)."""
    from pytensor.tensor.basic import Alloc
    from pytensor.tensor.random.op import RandomVariable
    from pytensor.tensor.shape import Reshape, SpecifyShape

    from pymc_dp.public_data import graph_variables

    uses: dict[Variable, list[bool]] = {}
    for v in graph_variables(outputs):
        node = v.owner
        if node is None:
            continue
        for position, i in enumerate(node.inputs):
            if isinstance(i, Constant):
                op = node.op
                as_shape = (
                    (isinstance(op, RandomVariable) and position == 1)
                    or (isinstance(op, Reshape) and position == 1)
                    or (isinstance(op, Alloc | SpecifyShape) and position >= 1)
                )
                uses.setdefault(i, []).append(as_shape)
    integer = ("int", "uint")
    return {v for v, used in uses.items() if all(used) and str(getattr(v, "dtype", "")).startswith(integer)}


def _static_or_evaluated_shape(model, graph: Variable) -> tuple[int, ...]:
    """Shape of a graph from its static type, else evaluated at the model's initial point (shapes only)."""
    static = getattr(graph.type, "shape", ())
    if all(d is not None for d in static):
        return tuple(int(d) for d in static)
    point = model.initial_point()
    fn = pytensor.function(model.value_vars, graph.shape, on_unused_input="ignore")
    return tuple(int(d) for d in fn(*[point[v.name] for v in model.value_vars]))


def _compile_data_free(inputs, outputs, compile_kwargs: dict[str, Any]):
    """Compile a data-free graph (the prior) with the caller's compile options."""
    fn = pm_compile(inputs, outputs, **compile_kwargs)
    fn.trust_input = True
    return fn


class PriorDensity:
    """The data-free part of a model: what step methods and DPADVI receive instead of the rows.

    Holds the prior + log|Jacobian| of the transforms + the potentials that read no data (all
    checked data-free when the :class:`RowLikelihood` it comes from was built), compiled as
    functions of the flat unconstrained θ, and the parameter layout. It holds no row-indexed
    array, no function of one and no reference to the :class:`RowLikelihood` (not even
    through a bound method): the per-row values stay with the :class:`RowLikelihood`, which
    only the mechanisms (:mod:`pymc_dp.mechanisms`) receive.

    Parameters
    ----------
    value_vars : list
        The value variables θ is made of, in model order.
    n_rows : int
        N.
    row_dim : str or None
        Name of the row dimension.
    initial_theta : numpy.ndarray
        The model's initial point as a flat θ.
    theta : TensorVariable
        The flat θ input of ``graph``.
    graph : TensorVariable
        The prior + Jacobian + data-free potentials as a function of ``theta`` (data-free).
    f_prior : callable
        ``graph`` compiled (θ ↦ value).
    continuous : bool
        Whether every parameter is continuous (gradients available).
    compile_kwargs : dict, optional
        Used to compile the gradient on first use.

    Attributes
    ----------
    value_vars : list
        The value variables θ is made of, in model order.
    n_params : int
        Length of θ.
    n_rows : int
        N (public under substitute neighbours; never released under add/remove).
    row_dim : str or None
        Name of the row dimension.
    initial_theta : numpy.ndarray
        The model's initial point as a flat θ (data-free: the model's initial values).

    Notes
    -----
    Neighbouring relation: either. Nothing here reads a row, so nothing here is released
    about one (the prior and potentials were checked by :func:`check_prior_reads_no_data`);
    values computed from it are exact, neither clipped nor noised. ``n_rows`` is public only
    under substitute neighbours: under add/remove a step must not release it.

    References
    ----------
    .. [1] Dwork, C. and Roth, A. (2014). The algorithmic foundations of differential privacy.
       Foundations and Trends in Theoretical Computer Science 9(3–4), Proposition 2.1
       (post-processing).
    """

    def __init__(
        self,
        *,
        value_vars: Sequence[Variable],
        n_rows: int,
        row_dim: str | None,
        initial_theta: np.ndarray,
        theta: Variable,
        graph: Variable,
        f_prior,
        continuous: bool,
        compile_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.value_vars = list(value_vars)
        self.initial_theta = np.array(initial_theta, dtype=np.float64, copy=True)
        self.n_params = int(self.initial_theta.size)
        self.n_rows = int(n_rows)
        self.row_dim = row_dim
        self._continuous = bool(continuous)
        self._compile_kwargs = dict(compile_kwargs or {})
        self._theta, self._graph = theta, graph
        self._f_prior = f_prior
        self._f_prior_grad = None  # compiled on first use

    def _check_theta(self, theta: np.ndarray) -> np.ndarray:
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (self.n_params,):
            raise ValueError(f"`theta` must be a flat vector of length {self.n_params}. Found shape {theta.shape}.")
        return theta

    def prior_logp(self, theta: np.ndarray) -> float:
        """log prior + log|Jacobian| of the transforms (+ data-free potentials)."""
        return float(self._f_prior(self._check_theta(theta)))

    def prior_logp_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """:meth:`prior_logp` and its gradient w.r.t. θ."""
        if not self._continuous:
            raise ValueError("Gradients need continuous parameters. Found discrete parameters.")
        if self._f_prior_grad is None:
            grad = pytensor.grad(self._graph, self._theta)
            self._f_prior_grad = _compile_data_free([self._theta], [self._graph, grad], self._compile_kwargs)
        value, grad = self._f_prior_grad(self._check_theta(theta))
        return float(value), np.asarray(grad)
