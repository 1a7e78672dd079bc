"""Data access: per-row log-likelihoods and gradients compiled from a PyMC model.

This module, together with :mod:`pymc_dp.mechanisms`, is the only code that evaluates
anything depending on the observed data. It returns *raw* per-row values; callers must pass
them through a mechanism (clip + noise) before anything leaves a step method.

The model must be made of rows: every observed variable has a leading row axis of the
same length N, rows are conditionally independent given the parameters, and the prior does
not read row data. Potentials are allowed only when they do not read data (they are then
part of the prior).

Rows are addressed on the flat unconstrained parameter vector θ, in the order of the value
variables given (sorted into model order), exactly as PyMC's ``RaveledVars`` lays it out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.model import modelcontext
from pymc.pytensorf import compile as pm_compile
from pymc.pytensorf import join_nonshared_inputs, make_shared_replacements
from pymc.util import get_value_vars_from_user_vars
from pymc.vartypes import continuous_types
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.traversal import ancestors

__all__ = ["ModelStructureError", "PriorDensity", "RowLikelihood", "data_dependent_deterministics", "sorted_value_vars"]


class ModelStructureError(ValueError):
    """The model cannot be split into independent rows (the message names the variable)."""


def sorted_value_vars(model, vars: Sequence | None) -> list[Variable]:
    """Value variables for ``vars`` (RVs or value vars), sorted into model order.

    Sorting matters: PyMC ravels a point in model order, so a step compiled for another
    order would silently read permuted parameters (a bug PyMC's own Metropolis has).
    """
    if vars is None:
        chosen = set(model.value_vars)
    else:
        chosen = set(get_value_vars_from_user_vars(vars, model))
    return [v for v in model.value_vars if v in chosen]


def _jvp(output: Variable, wrt: Variable, tangent: Variable) -> Variable:
    pushforward = getattr(pytensor.gradient, "pushforward", None)
    if pushforward is not None:  # PyTensor 3 (PyMC 6): Rop is deprecated
        return pushforward(output, wrt, tangent)
    return pytensor.gradient.Rop(output, wrt, tangent)


def _rowsum(term: Variable) -> Variable:
    return term if term.ndim <= 1 else term.sum(axis=tuple(range(1, term.ndim)))


def _leading_length(var: Variable) -> int | None:
    if isinstance(var, Constant):
        data = np.asarray(var.data)
        return int(data.shape[0]) if data.ndim >= 1 else None
    if isinstance(var, SharedVariable):
        value = np.asarray(var.get_value(borrow=True))
        return int(value.shape[0]) if value.ndim >= 1 else None
    if var.ndim == 0:
        return None
    return int(pytensor.function([], var.shape[0], on_unused_input="ignore")())


def _value_of(var: Variable) -> np.ndarray:
    if isinstance(var, Constant):
        return np.asarray(var.data)
    if isinstance(var, SharedVariable):
        return np.asarray(var.get_value(borrow=True))
    return np.asarray(pytensor.function([], var)())


def _same_data(a: Variable, b: Variable) -> bool:
    if a is b:
        return True
    if isinstance(a, Constant) and isinstance(b, Constant):
        da, db = np.asarray(a.data), np.asarray(b.data)
        return da.shape == db.shape and np.array_equal(da, db)
    return False


def _observed_value(model, rv) -> Variable:
    return model.rvs_to_values[rv]


def _row_structure(model) -> tuple[int, str | None, list[Variable]]:
    """N, the row dim name, and the observed value variables; raises on non-row models."""
    observed = list(model.observed_RVs)
    if not observed:
        raise ModelStructureError("The model has no observed variables: there is no data to protect.")
    lengths: dict[str, int] = {}
    first_dims: dict[str, str | None] = {}
    for rv in observed:
        op_name = type(rv.owner.op).__name__ if rv.owner is not None else ""
        if op_name == "MinibatchRandomVariable":
            raise ModelStructureError(
                f"Observed variable `{rv.name}` uses `total_size` (pm.Minibatch scaling). pymc-dp does its own row "
                "subsampling and accounting; build the model on the full data without `total_size`."
            )
        value = _observed_value(model, rv)
        length = _leading_length(value)
        if length is None:
            raise ModelStructureError(
                f"Observed variable `{rv.name}` has no row axis: it must have at least one dimension whose first "
                "axis indexes independent rows."
            )
        lengths[rv.name] = length
        dims = model.named_vars_to_dims.get(rv.name)
        first_dims[rv.name] = dims[0] if dims else None
    if len(set(lengths.values())) != 1:
        raise ModelStructureError(
            "Observed variables must share one row axis of the same length. Found lengths "
            + ", ".join(f"`{k}`: {v}" for k, v in lengths.items())
            + "."
        )
    named = {d for d in first_dims.values() if d is not None}
    if len(named) > 1:
        raise ModelStructureError(
            "Observed variables must share one row dimension. Found first dims "
            + ", ".join(f"`{k}`: {v!r}" for k, v in first_dims.items())
            + "."
        )
    row_dim = named.pop() if named else None
    return next(iter(lengths.values())), row_dim, [_observed_value(model, rv) for rv in observed]


def _data_in_graph(graph_outputs: Sequence[Variable], n_rows: int) -> list[Variable]:
    """Shared data and non-scalar constants with leading length N in a graph."""
    found = []
    for var in ancestors(list(graph_outputs)):
        if isinstance(var, Constant | SharedVariable) and getattr(var, "ndim", 0) >= 1:
            if _leading_length(var) == n_rows:
                found.append(var)
    return found


def _graph_roots(outputs: Sequence[Variable]) -> list[Variable]:
    return [v for v in ancestors(list(outputs)) if v.owner is None]


def data_dependent_deterministics(model) -> list[str]:
    """Names of deterministics that may read data; :func:`pymc_dp.sample` never stores them.

    A deterministic is kept only when, after replacing random variables by their values, its
    graph reads nothing but free value variables, scalar constants and constants that the
    prior itself uses (the prior is checked not to read row data). Everything else —
    observed variables, ``pm.Data`` containers, numpy arrays — counts as data. The check is
    conservative: a deterministic using a public array that is not in the prior is also left
    out. A scalar computed from the data in NumPy before building the model cannot be told
    apart from a public constant. A model without observed variables (the steps hold their
    own data) has its ``pm.Data`` containers counted as data.
    """
    free_values = set(model.value_vars)
    data = list(model.data_vars)
    if model.observed_RVs:
        n_rows, _, observed_values = _row_structure(model)
        lik_terms = model.logp(vars=model.observed_RVs, sum=False)
        data += list(observed_values) + _data_in_graph(lik_terms, n_rows)
    prior_constants = [
        v
        for v in _graph_roots([model.logp(vars=model.free_RVs, jacobian=True)])
        if isinstance(v, Constant | SharedVariable) and not any(_same_data(v, d) for d in data)
    ]
    names = []
    for det in model.deterministics:
        [graph] = model.replace_rvs_by_values([det])
        for root in _graph_roots([graph]):
            if root in free_values or (isinstance(root, Constant) and root.ndim == 0):
                if not any(_same_data(root, d) for d in data):
                    continue
            if isinstance(root, Constant | SharedVariable) and any(_same_data(root, c) for c in prior_constants):
                continue
            names.append(det.name)
            break
    return names


class RowLikelihood:
    """Per-row log-likelihood and gradients of a PyMC model.

    All functions take the flat unconstrained parameter vector θ of ``vars`` (sorted into
    model order) and an optional index array of rows; the other value variables are read
    from ``shared_inputs`` (the shared variables an ``ArrayStepShared`` keeps up to date).
    Nothing is recompiled between calls, whatever the subset.

    Parameters
    ----------
    model : pm.Model, optional
        Taken from the context if omitted.
    vars : list, optional
        Parameters to differentiate with respect to (RVs or value variables). Default: all
        value variables.
    shared_inputs : dict, optional
        Value variable → shared variable for every value variable not in ``vars``. Default:
        shared variables holding ``initial_point``.
    initial_point : dict, optional
        Used for shapes and for the default ``shared_inputs``.
    compile_kwargs : dict, optional
        Passed to ``pymc.pytensorf.compile`` (e.g. ``{"mode": "FAST_COMPILE"}``).

    Attributes
    ----------
    n_rows : int
        N, the length of the shared row axis.
    n_params : int
        Length of θ.
    row_dim : str or None
        Name of the row dimension when the observed variables have dims.
    subset_mode : {"index", "slice"}
        "index" when every row-indexed array is a ``pm.Data`` container: a subset of B rows
        costs O(B). "slice" when some row data are numpy constants baked into the graph
        (``observed=np.array``): a subset is computed on all rows and sliced.

    Raises
    ------
    ModelStructureError
        For models that cannot be split into rows; the message names the variable.

    Notes
    -----
    The per-row gradient matrix on all rows is computed in forward mode (one
    Jacobian-vector product vectorised over the P unit tangents), and so is the gradient
    on a subset of rows in "index" mode, on the gathered batch, which costs O(B P). Forward
    mode was the fastest in the PyMC integration study and in
    ``benchmarks/bench_data_layer.py`` (1.4x a total logp+gradient on PyMC 6/Numba, where
    the row-vectorised reverse mode is 2.6x). On a batch of 1,000 rows of a logistic
    regression (P = 11) it takes 0.076 ms on PyMC 5 and 0.053 ms on PyMC 6, where one row's
    gradient vectorised over the batch ("vmap over rows") took 3.6 and 2.3 ms: PyTensor
    runs that graph's ``Blockwise`` nodes row by row in Python. It never uses
    ``pytensor.gradient.jacobian`` (quadratic in N).
    """

    def __init__(
        self,
        model=None,
        vars: Sequence | None = None,
        shared_inputs: dict | None = None,
        *,
        initial_point: dict[str, np.ndarray] | None = None,
        compile_kwargs: dict[str, Any] | None = None,
    ) -> None:
        model = modelcontext(model)
        self.model = model
        self.value_vars = sorted_value_vars(model, vars)
        if not self.value_vars:
            raise ValueError("`vars` must name at least one free variable of the model. Found none.")
        initial_point = model.initial_point() if initial_point is None else initial_point
        if shared_inputs is None:
            shared_inputs = make_shared_replacements(initial_point, self.value_vars, model)
        self._compile_kwargs = dict(compile_kwargs or {})

        self.n_rows, self.row_dim, observed_values = _row_structure(model)
        lik_terms = model.logp(vars=model.observed_RVs, sum=False)
        for rv, term in zip(model.observed_RVs, lik_terms, strict=True):
            if term.ndim == 0:
                raise ModelStructureError(
                    f"Observed variable `{rv.name}` has a log-likelihood without a row axis (a scalar)."
                )
        lik = pt.add(*[_rowsum(t) for t in lik_terms]) if len(lik_terms) > 1 else _rowsum(lik_terms[0])

        row_data = self._row_data(model, lik_terms, observed_values)
        prior_terms = [model.logp(vars=model.free_RVs, jacobian=True, sum=True)]
        for pot in model.potentials:
            if self._reads(pot, row_data + list(model.data_vars) + observed_values):
                raise ModelStructureError(
                    f"Potential `{pot.name}` reads data and cannot be split into rows. Express it as an observed "
                    "variable with a row axis, or drop it."
                )
            prior_terms.append(model.logp(vars=[pot], sum=True))  # RVs replaced by value variables
        prior = pt.add(*prior_terms) if len(prior_terms) > 1 else prior_terms[0]
        if self._reads(prior, row_data):
            raise ModelStructureError(
                "The prior of the free variables reads row data; only the likelihood may depend on rows."
            )

        [lik_flat, prior_flat], theta = join_nonshared_inputs(
            point=initial_point, outputs=[lik, prior], inputs=self.value_vars, shared_inputs=shared_inputs
        )
        self._theta = theta
        self.n_params = int(sum(np.asarray(initial_point[v.name]).size for v in self.value_vars))
        self._continuous = all(v.dtype in continuous_types for v in self.value_vars)

        # Full-data functions.
        self._f_lik = self._compile([theta], lik_flat)
        self._f_prior = self._compile([theta], prior_flat)
        self._prior_flat = prior_flat
        self._lik_flat = lik_flat
        self._f_grad_full = None

        # Index-subset functions, when every row-indexed array is a shared variable; built on
        # first use so that full-data samplers never compile them.
        self._rows_input = pt.lvector("rows")
        self._subset_mode: str | None = None
        self._f_lik_idx = None
        self._f_grad_idx = None
        self._f_ratio_batch = None
        self._row_data_vars = row_data
        self._row_dim_length = None
        if self.row_dim is not None and isinstance(model.dim_lengths.get(self.row_dim), SharedVariable):
            self._row_dim_length = model.dim_lengths[self.row_dim]
        self._theta_initial = self._flat_initial(initial_point)
        self.prior = PriorDensity(self)

    @property
    def subset_mode(self) -> str:
        """ "index" when subsets cost O(B) (all row data are ``pm.Data``), else "slice"."""
        if self._subset_mode is None:
            self._subset_mode = "slice"
            if self._row_data_vars and all(isinstance(d, SharedVariable) for d in self._row_data_vars):
                self._build_index_mode()
        return self._subset_mode

    def _build_index_mode(self) -> None:
        replace = {d: d[self._rows_input] for d in self._row_data_vars}
        if self._row_dim_length is not None:
            dim_length = self._row_dim_length
            replace[dim_length] = pt.cast(self._rows_input.shape[0], dim_length.dtype)
        try:
            lik_idx = graph_replace(self._lik_flat, replace, strict=False)
            f_idx = self._compile([self._theta, self._rows_input], lik_idx)
            # Guard against arrays that only look row-indexed: a subset must equal the slice.
            probe = np.array([0, self.n_rows - 1], dtype=np.int64)
            theta0 = self._theta_initial
            if np.allclose(f_idx(theta0, probe), self._f_lik(theta0)[probe], equal_nan=True):
                self._f_lik_idx, self._subset_mode = f_idx, "index"
        except (AssertionError, TypeError, ValueError):  # the graph could not be re-indexed
            pass

    # -- construction helpers -------------------------------------------------------------
    def _compile(self, inputs, outputs):
        fn = pm_compile(inputs, outputs, **self._compile_kwargs)
        fn.trust_input = True
        return fn

    def _flat_initial(self, initial_point) -> np.ndarray:
        return np.concatenate([np.asarray(initial_point[v.name], dtype=float).ravel() for v in self.value_vars])

    def _row_data(self, model, lik_terms, observed_values) -> list[Variable]:
        n = self.n_rows
        found: list[Variable] = []
        candidates = [v for v in observed_values if isinstance(v, Constant | SharedVariable)]
        for var in candidates + _data_in_graph(lik_terms, n):
            if any(var is f for f in found):
                continue
            if isinstance(var, SharedVariable) and self.row_dim is not None:
                dims = model.named_vars_to_dims.get(var.name)
                if dims and dims[0] != self.row_dim:
                    continue
            found.append(var)
        return found

    @staticmethod
    def _reads(output: Variable, data: list[Variable]) -> bool:
        deps = [v for v in ancestors([output]) if isinstance(v, Constant | SharedVariable)]
        return any(_same_data(d, x) for d in deps for x in data)

    def _check_theta(self, theta: np.ndarray) -> np.ndarray:
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (self.n_params,):
            raise ValueError(f"`theta` must be a flat vector of length {self.n_params}. Found shape {theta.shape}.")
        return theta

    def _check_rows(self, rows) -> np.ndarray:
        rows = np.asarray(rows)
        if rows.ndim != 1 or not np.issubdtype(rows.dtype, np.integer):
            raise ValueError(f"`rows` must be a 1-d integer index array. Found dtype {rows.dtype}, shape {rows.shape}.")
        if rows.size and (rows.min() < 0 or rows.max() >= self.n_rows):
            raise ValueError(f"`rows` must index rows 0..{self.n_rows - 1}. Found an index out of that range.")
        return rows.astype(np.int64, copy=False)

    def _require_continuous(self) -> None:
        if not self._continuous:
            names = [v.name for v in self.value_vars if v.dtype not in continuous_types]
            raise ValueError(f"Gradients need continuous parameters. Found discrete: {names}.")

    # -- public evaluation ----------------------------------------------------------------
    def loglik_rows(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Per-row log-likelihood, shape (N,) or (len(rows),). Raw data: pass it to a mechanism."""
        theta = self._check_theta(theta)
        if rows is None:
            return np.asarray(self._f_lik(theta))
        rows = self._check_rows(rows)
        if self.subset_mode == "index":
            return np.asarray(self._f_lik_idx(theta, rows))
        return np.asarray(self._f_lik(theta))[rows]

    def grad_rows(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Per-row gradient matrix (B, P) of the log-likelihood w.r.t. θ. Raw data: pass it to a mechanism."""
        self._require_continuous()
        theta = self._check_theta(theta)
        if rows is not None:
            rows = self._check_rows(rows)
        if rows is not None and self.subset_mode == "index":
            if self._f_grad_idx is None:
                self._f_grad_idx = self._compile_batch_forward_grad()
            return np.asarray(self._f_grad_idx(theta, *self._gather(rows)))
        self.warm_gradient()
        jac = np.asarray(self._f_grad_full(theta))
        return jac if rows is None else jac[rows]

    def loglik_grad_rows(self, theta: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per-row log-likelihood (B,) and gradient matrix (B, P) w.r.t. θ. Raw data.

        Two compiled functions, not one: returning the log-likelihood from the Jacobian's
        graph stops PyTensor from fusing it and costs more than computing it separately.
        """
        return self.loglik_rows(theta, rows), self.grad_rows(theta, rows)

    def loglik_ratio_rows(self, theta: np.ndarray, theta_new: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Per-row log-likelihood ratios log p(xᵢ | θ′) − log p(xᵢ | θ) on ``rows``. Raw data.

        In "index" mode the rows are gathered once and both points evaluated on them in one
        compiled call (the gather from a large data set dominates the cost of a small batch).
        """
        theta, theta_new = self._check_theta(theta), self._check_theta(theta_new)
        rows = self._check_rows(rows)
        if self.subset_mode != "index":
            return np.asarray(self._f_lik(theta_new))[rows] - np.asarray(self._f_lik(theta))[rows]
        if self._f_ratio_batch is None:
            self._f_ratio_batch = self._compile_batch_ratio()
        return np.asarray(self._f_ratio_batch(theta, theta_new, *self._gather(rows)))

    def _gather(self, rows: np.ndarray) -> list[np.ndarray]:
        """The row-indexed arrays at ``rows`` (``np.take``: about 4x faster than fancy indexing)."""
        return [np.take(d.get_value(borrow=True), rows, axis=0) for d in self._row_data_vars]

    def _compile_batch_ratio(self):
        """Ratio of the log-likelihood at two points on a gathered batch of rows."""
        batch = [pt.tensor(f"{d.name}_batch", dtype=d.dtype, shape=(None,) * d.ndim) for d in self._row_data_vars]
        replace = dict(zip(self._row_data_vars, batch, strict=True))
        if self._row_dim_length is not None:
            replace[self._row_dim_length] = pt.cast(batch[0].shape[0], self._row_dim_length.dtype)
        lik_batch = graph_replace(self._lik_flat, replace, strict=False)
        theta_new = self._theta.type("theta_new")
        ratio = graph_replace(lik_batch, {self._theta: theta_new}, strict=False) - lik_batch
        return self._compile([self._theta, theta_new, *batch], ratio)

    def warm_gradient(self) -> None:
        """Build the all-rows gradient function now (raises if the likelihood is not differentiable)."""
        self._require_continuous()
        if self._f_grad_full is None:
            self._f_grad_full = self._compile_forward_grad()

    def _compile_batch_forward_grad(self):
        """Per-row gradient matrix on a gathered batch of rows, in forward mode (P JVPs, vectorised)."""
        batch = [pt.tensor(f"{d.name}_batch", dtype=d.dtype, shape=(None,) * d.ndim) for d in self._row_data_vars]
        replace = dict(zip(self._row_data_vars, batch, strict=True))
        if self._row_dim_length is not None:
            replace[self._row_dim_length] = pt.cast(batch[0].shape[0], self._row_dim_length.dtype)
        lik_batch = graph_replace(self._lik_flat, replace, strict=False)
        return self._compile([self._theta, *batch], self._forward_jacobian(lik_batch))

    def _forward_jacobian(self, lik: Variable) -> Variable:
        """(rows × P) Jacobian of the per-row vector ``lik`` w.r.t. θ: one JVP vectorised over the unit tangents."""
        tangent = pt.vector("tangent", dtype=self._theta.dtype)
        jvp = _jvp(lik, self._theta, tangent)
        return vectorize_graph(jvp, {tangent: pt.eye(self.n_params, dtype=self._theta.dtype)}).T

    def _compile_forward_grad(self):
        """Full-data Jacobian in forward mode: one JVP vectorised over the P unit tangents."""
        return self._compile([self._theta], self._forward_jacobian(self._lik_flat))

    def prior_logp(self, theta: np.ndarray) -> float:
        """log prior + log|Jacobian| of the transforms (+ data-free potentials). Data-free."""
        return self.prior.prior_logp(theta)

    def prior_logp_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """:meth:`prior_logp` and its gradient w.r.t. θ. Data-free."""
        return self.prior.prior_logp_and_grad(theta)


class PriorDensity:
    """The data-free part of a model: what step methods and DPADVI receive instead of the rows.

    Holds the prior + log|Jacobian| of the transforms + the potentials that read no data (all
    checked data-free when the :class:`RowLikelihood` it comes from was built), compiled as
    functions of the flat unconstrained θ, and the parameter layout. It holds no row-indexed
    array and no function of one: the per-row values stay with the :class:`RowLikelihood`,
    which only the mechanisms (:mod:`pymc_dp.mechanisms`) receive.

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
    """

    def __init__(self, rows: RowLikelihood) -> None:
        self.value_vars = list(rows.value_vars)
        self.n_params = rows.n_params
        self.n_rows = rows.n_rows
        self.row_dim = rows.row_dim
        self.initial_theta = np.array(rows._theta_initial, copy=True)
        self._continuous = rows._continuous
        self._compile = rows._compile
        self._theta, self._graph = rows._theta, rows._prior_flat
        self._f_prior = rows._f_prior
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
            self._f_prior_grad = self._compile([self._theta], [self._graph, grad])
        value, grad = self._f_prior_grad(self._check_theta(theta))
        return float(value), np.asarray(grad)
