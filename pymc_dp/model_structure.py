"""The model's structure: which arrays are rows, and whether each row's term reads only its own row.

A model is made of rows when every observed variable has a leading row axis of the same length
N (:func:`observed_rows`, :func:`_row_structure`) and each row's log-likelihood depends on that
row's data alone. The second is checked on the graph by a walk that carries the row axis from
the row-indexed inputs to the output (:func:`_row_axes`, :func:`_check_rowwise`,
:func:`_check_rowwise_params`): each operation met must be on the allow-list of row-wise
operations, one rule per op type (:func:`_row_rules`); under add/remove neighbours the row count
N is tracked too (:func:`_n_axes`). Nothing here evaluates a row: the walk reads the graph and
the shapes of its arrays. The per-row graph itself, with the perturbation probe, is built by
:mod:`pymc_dp.row_graph`; the compiled rows live in :mod:`pymc_dp.data`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytensor
from pymc.util import get_value_vars_from_user_vars
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.traversal import ancestors

from pymc_dp._validation import BAMBI_CHECKED

__all__ = ["ModelStructureError", "data_dependent_deterministics", "observed_rows", "sorted_value_vars"]


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


def _array_shape(var: Variable) -> tuple[int, ...]:
    """Shape of a constant or shared array (``()`` for anything else)."""
    if isinstance(var, Constant):
        return tuple(np.shape(var.data))
    if isinstance(var, SharedVariable):
        return tuple(np.shape(var.get_value(borrow=True)))
    return ()


def _row_length_axes(var: Variable, n_rows: int | None) -> list[int]:
    """Axes of a constant or shared array whose length is N (row data if any; rows must be axis 0)."""
    if n_rows is None:
        return []
    return [axis for axis, length in enumerate(_array_shape(var)) if length == n_rows]


def _same_data(a: Variable, b: Variable) -> bool:
    if a is b:
        return True
    if isinstance(a, Constant) and isinstance(b, Constant):
        da, db = np.asarray(a.data), np.asarray(b.data)
        return da.shape == db.shape and np.array_equal(da, db)
    return False


def _equal_array(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a, b)


def _observed_value(model, rv) -> Variable:
    return model.rvs_to_values[rv]


def refuse_unchecked_bambi(model) -> None:
    """Refuse the PyMC model of a Bambi model that did not pass :func:`pymc_dp.from_bambi`.

    Bambi's defaults centre every predictor by its sample mean and scale the priors by the
    data's sds before the PyMC model exists, where the graph checks cannot see it: one row would
    move every row's term. Recognised from public structure only (Bambi's ``__obs__`` dim).
    """
    if "__obs__" in getattr(model, "coords", {}) and not getattr(model, BAMBI_CHECKED, False):
        raise ModelStructureError(
            "`model` must be passed through pmdp.from_bambi(bambi_model) first: it is a Bambi model's PyMC model "
            "(it has Bambi's `__obs__` dim), and Bambi's defaults (center_predictors, auto_scale) read every row "
            "before the model exists. Found a Bambi model that from_bambi has not checked."
        )


def _row_structure(model, neighbouring: str | None = None) -> tuple[int, str | None, list[Variable]]:
    """N, the row dim name, and the observed value variables; raises on non-row models.

    The lengths of the observed variables appear in an error message only under the
    substitute relation, where N is public; otherwise (``neighbouring`` "add_remove" or not
    given) the message names the variables alone. A Bambi model that :func:`pymc_dp.from_bambi`
    has not checked is refused (:func:`refuse_unchecked_bambi`).
    """
    refuse_unchecked_bambi(model)
    observed = list(model.observed_RVs)
    if not observed:
        raise ModelStructureError("The model has no observed variables: there is no data to protect.")
    _refuse_imputation(model)
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
        if neighbouring == "substitute":  # N is public: the lengths may be shown
            found = "Found lengths " + ", ".join(f"`{k}`: {v}" for k, v in lengths.items())
        else:  # N may be private (add/remove): name the variables, never a length
            found = "Found different lengths among " + ", ".join(f"`{k}`" for k in lengths)
        raise ModelStructureError(f"Observed variables must share one row axis of the same length. {found}.")
    named = {d for d in first_dims.values() if d is not None}
    if len(named) > 1:
        raise ModelStructureError(
            "Observed variables must share one row dimension. Found first dims "
            + ", ".join(f"`{k}`: {v!r}" for k, v in first_dims.items())
            + "."
        )
    row_dim = named.pop() if named else None
    return next(iter(lengths.values())), row_dim, [_observed_value(model, rv) for rv in observed]


def observed_rows(model, neighbouring: str | None = None) -> int:
    """N, the number of rows of the model's observed data: the shared length of the observed variables' row axis.

    The one public way for code outside the data layer to read N: the planner, the run's plan,
    DPADVI, one posterior sample and the regression reader use it before anything is released.

    Parameters
    ----------
    model : pm.Model
        A model made of rows: every observed variable has a leading row axis of the same length.
    neighbouring : {"substitute", "add_remove"}, optional
        The relation of the run. Only under ``"substitute"`` may an error message show the
        observed variables' lengths; otherwise it names the variables alone.

    Returns
    -------
    int
        N, read from the observed variables' shapes (never from their values).

    Raises
    ------
    ModelStructureError
        The model has no observed variable, one without a row axis, lengths that differ, more
        than one row dimension, ``total_size`` scaling, or imputed missing values.

    Notes
    -----
    Neighbouring relation: N is public under substitute neighbours (a neighbour has the same
    number of rows); under add/remove it is private, and a caller may use it only where the
    guarantee allows (a per-row bound, a budget check that reveals nothing) and must never
    release it or show it in a message.
    """
    return _row_structure(model, neighbouring)[0]


def _imputed_variables(model) -> list[tuple[str, str]]:
    """(observed name, imputed free variable) pairs of the observed variables PyMC split for missing values.

    Given NaN or masked entries in ``observed=``, PyMC 5 and 6 register the observed part as
    ``<name>_observed``, the missing entries as a free variable ``<name>_unobserved`` and their
    join as a deterministic ``<name>`` (``Model.make_obs_var``). Read from the model's
    structure (names and graph), never from the data values.
    """
    free = {rv.name: rv for rv in model.free_RVs}
    joins = {d.name: d for d in model.deterministics}
    found = []
    for rv in model.observed_RVs:
        if rv.name is None or not rv.name.endswith("_observed"):
            continue
        name = rv.name[: -len("_observed")]
        missing = free.get(f"{name}_unobserved")
        join = joins.get(name)
        if missing is not None and join is not None and {rv, missing} <= set(ancestors([join])):
            found.append((name, missing.name))
    return found


def _refuse_imputation(model) -> None:
    """Refuse a model in which PyMC imputes missing observed values (names only, never a count)."""
    imputed = _imputed_variables(model)
    if imputed:
        name, missing = imputed[0]
        raise ModelStructureError(
            f"Observed variable `{name}` has missing entries (NaN or masked values in `observed=`), which PyMC "
            f"imputes as the free variable `{missing}`: a run would publish how many rows are missing (its shape) "
            "and their imputed values, neither clipped nor noised. Drop or fill those rows before building the "
            "model (the number of rows left is then public under substitute neighbours), or make missingness part "
            "of each row (e.g. an observed indicator and a row-wise likelihood that ignores the missing value), "
            "with nothing imputed."
        )


def _data_in_graph(graph_outputs: Sequence[Variable], n_rows: int) -> list[Variable]:
    """Shared data and non-scalar constants with an axis of length N (any axis) in a graph."""
    found = []
    for var in ancestors(list(graph_outputs)):
        if isinstance(var, Constant | SharedVariable) and getattr(var, "ndim", 0) >= 1:
            if _row_length_axes(var, n_rows):
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


# -- row independence: the walk -------------------------------------------------------------------


def _op_label(node) -> str:
    return str(node.op)


def _refuse(node, var_name: str, what: str) -> ModelStructureError:
    return ModelStructureError(
        f"The log-likelihood of observed variable `{var_name}` is not computed row by row: operation "
        f"`{_op_label(node)}` {what}. Each row's log-likelihood may depend only on that row's data; "
        "see docs/data.md for the operations accepted."
    )


def _idx_is_full_slice(entry) -> bool:
    return isinstance(entry, slice) and entry.start is None and entry.stop is None and entry.step is None


#: Row-axis mark of a data-free value computed from the number of rows N (tracked only under
#: add/remove neighbours, where N is private). A shape vector whose element ``a`` is N is
#: marked ``("shape", a)``.
_N = "N"


def _is_n_mark(axis) -> bool:
    return axis == _N or isinstance(axis, tuple)


# -- the per-op rules of the row-axis walk --------------------------------------------------------
#
# One rule per kind of operation: ``rule(node, axes, var_name, n_private)`` returns the row axis
# of each output of ``node`` given its inputs' row axes (``None``: data-free), or raises
# :func:`_refuse`. :func:`_row_rules` maps each op type to its rule; :func:`_rowwise_axes` looks
# the op's class up along its MRO (the types in the table are unrelated, so the most specific
# match is the only one) and refuses an op that has no rule.


def _rows_of(axes: Sequence) -> list:
    return [a for a in axes if a is not None]


def _identity_rule(node, axes, var_name, n_private):
    """Identity (pm.Deterministic's copy of its expression on PyTensor 3): the row axis is kept."""
    return [axes[0]]


def _shape_rule(node, axes, var_name, n_private):
    """Only the shape is read, no row value.

    Under substitute neighbours N is public: the output is data-free. Under add/remove N is
    private: the row axis's length is marked.
    """
    if not n_private:
        return [None] * len(node.outputs)
    (a,) = _rows_of(axes)
    return [_N if node.inputs[0].ndim == 1 else ("shape", a)]


def _shape_i_rule(node, axes, var_name, n_private):
    """One entry of the shape: as :func:`_shape_rule`, the mark only for the row axis's length."""
    if not n_private:
        return [None] * len(node.outputs)
    (a,) = _rows_of(axes)
    return [_N if node.op.i == a else None]


def _elemwise_rule(node, axes, var_name, n_private):
    """Inputs of an Elemwise have equal ndim; element i of the output reads element i of each input."""
    row = _rows_of(axes)
    if len(set(row)) != 1:
        raise _refuse(node, var_name, "combines row-indexed inputs along different axes")
    for inp, a in zip(node.inputs, axes, strict=True):
        if a is not None and inp.type.broadcastable[a] and not all(o.type.broadcastable[a] for o in node.outputs):
            raise _refuse(node, var_name, "broadcasts one row against all rows")
    return [row[0]] * len(node.outputs)


def _dimshuffle_rule(node, axes, var_name, n_private):
    (a,) = _rows_of(axes)
    if a not in node.op.new_order:
        raise _refuse(node, var_name, "drops the row axis")
    return [list(node.op.new_order).index(a)]


def _reduction_rule(node, axes, var_name, n_private):
    """A reduction over ``op.axis`` only: row-wise when the row axis is not among them.

    ``LogSumExp`` (PyTensor 3; PyTensor 2 builds it from max/exp/sum/log) is log Σ exp over
    those axes, keepdims by a DimShuffle after it.
    """
    op = node.op
    if len(node.inputs) != 1:
        raise _refuse(node, var_name, "is not on the list of row-wise operations")
    (a,) = _rows_of(axes)
    reduced = tuple(range(node.inputs[0].ndim)) if op.axis is None else tuple(op.axis)
    if a in reduced:
        raise _refuse(node, var_name, "reduces over the row axis (it aggregates rows)")
    return [a - sum(1 for r in reduced if r < a)]


def _dot_rule(node, axes, var_name, n_private):
    """``X @ β`` with ``X`` row-indexed (rows on axis 0) or ``β @ Xᵀ`` with ``β`` data-free."""
    x, y = node.inputs
    ax, ay = axes
    if ax is not None and ay is None and x.ndim == 2 and ax == 0:
        return [0]
    if ay is not None and ax is None and y.ndim == 2 and ay == 1:
        return [x.ndim - 1]
    raise _refuse(node, var_name, "contracts over the row axis or multiplies two row-indexed tensors")


def _blockwise_rule(node, axes, var_name, n_private):
    """A Blockwise applies its core op to each batch element independently: row-wise along batch axes.

    Along core axes only a Dot-like core (X @ β, β data-free) is accepted.
    """
    from pytensor.tensor.math import Dot

    op, outs = node.op, node.outputs
    out_batch = outs[0].ndim - len(op.outputs_sig[0])
    out_axes = set()
    for inp, a, sig in zip(node.inputs, axes, op.inputs_sig, strict=True):
        if a is None:
            continue
        batch = inp.ndim - len(sig)
        if a < batch:
            if inp.type.broadcastable[a]:
                raise _refuse(node, var_name, "broadcasts one row against all rows")
            out_axes.add(a + out_batch - batch)
        elif isinstance(op.core_op, Dot) and inp is node.inputs[0] and a == batch and len(sig) == 2:
            if axes[1] is not None:
                raise _refuse(node, var_name, "multiplies two row-indexed tensors")
            out_axes.add(out_batch)
        else:
            raise _refuse(node, var_name, "reads the row axis inside its core operation")
    if len(out_axes) != 1:
        raise _refuse(node, var_name, "combines row-indexed inputs along different axes")
    (a,) = out_axes
    return [a] * len(outs)


def _advanced_index_rule(node, axes, var_name, n_private):
    """A data-free tensor indexed by row-indexed integer vectors (``alpha[group_idx]``): rows on axis 0."""
    _, *idx = node.inputs
    if axes[0] is not None:
        raise _refuse(node, var_name, "indexes a row-indexed tensor (only full slices keep rows apart)")
    idx_list = getattr(node.op, "idx_list", None)  # PyTensor 3 keeps slices here, not as inputs
    first_is_slice = bool(idx_list) and isinstance(idx_list[0], slice)
    if not idx or first_is_slice or axes[1] != 0 or idx[0].ndim != 1:
        raise _refuse(node, var_name, "indexes with a row-indexed array other than as the first 1-d index")
    if any(a is not None and (a != 0 or i.ndim != 1) for i, a in zip(idx, axes[1:], strict=True)):
        raise _refuse(node, var_name, "indexes with row-indexed arrays of different shapes")
    return [0]


def _subtensor_rule(node, axes, var_name, n_private):
    """Basic indexing of a row-indexed tensor: only a full slice of the row axis keeps all rows."""
    a = axes[0]
    if a is None or any(b is not None for b in axes[1:]):
        raise _refuse(node, var_name, "indexes with a row-dependent index")
    idx_list = list(node.op.idx_list)
    if a < len(idx_list) and not _idx_is_full_slice(idx_list[a]):
        raise _refuse(node, var_name, "selects part of the row axis (only a full slice keeps all rows)")
    dropped = sum(1 for e in idx_list[:a] if not isinstance(e, slice))
    return [a - dropped]


def _alloc_rule(node, axes, var_name, n_private):
    a = axes[0]
    if a is None or any(b is not None for b in axes[1:]):
        raise _refuse(node, var_name, "allocates a shape read from row data")
    return [a + node.outputs[0].ndim - node.inputs[0].ndim]


def _specify_shape_rule(node, axes, var_name, n_private):
    if axes[0] is None or any(b is not None for b in axes[1:]):
        raise _refuse(node, var_name, "specifies a shape read from row data")
    return [axes[0]]


def _reshape_rule(node, axes, var_name, n_private):
    """A reshape that keeps a row axis of known, unchanged length first."""
    x = node.inputs[0]
    if (
        axes[0] == 0
        and axes[1] is None
        and x.type.shape[0] is not None
        and node.outputs[0].type.shape[0] == x.type.shape[0]
    ):
        return [0]
    raise _refuse(node, var_name, "reshapes the row axis")


def _join_rule(node, axes, var_name, n_private):
    """Row-indexed tensors joined along a constant axis other than the row axis."""
    if axes[0] is not None:
        raise _refuse(node, var_name, "joins along a row-dependent axis")
    tensors, t_axes = node.inputs[1:], axes[1:]
    if any(a is None for a in t_axes) or len(set(t_axes)) != 1:
        raise _refuse(node, var_name, "joins row-indexed and row-free tensors")
    join_axis = node.inputs[0]
    if not isinstance(join_axis, Constant):
        raise _refuse(node, var_name, "joins along an axis unknown at build time")
    ja = int(join_axis.data) % tensors[0].ndim
    if ja == t_axes[0]:
        raise _refuse(node, var_name, "concatenates along the row axis")
    return [t_axes[0]]


def _random_variable_rule(node, axes, var_name, n_private):
    """Component distributions handed to pm.Censored / pm.Mixture (seen in the parameter graphs only).

    Batch element i is drawn from the parameters' element i.
    """
    op, outs = node.op, node.outputs
    rng_and_size = len(node.inputs) - len(op.ndims_params)
    out_batch = outs[-1].ndim - op.ndim_supp
    out_axes = set()
    for inp, a, core in zip(node.inputs[rng_and_size:], axes[rng_and_size:], op.ndims_params, strict=True):
        if a is None:
            continue
        batch = inp.ndim - core
        if a >= batch or inp.type.broadcastable[a]:
            raise _refuse(node, var_name, "reads the row axis as a core dimension")
        out_axes.add(a + out_batch - batch)
    if any(a is not None for a in axes[:rng_and_size]) or len(out_axes) != 1:
        raise _refuse(node, var_name, "combines row-indexed inputs along different axes")
    return [None] * (len(outs) - 1) + [out_axes.pop()]


@functools.cache
def _row_rules() -> dict[type, Callable]:
    """The allow-list of row-wise operations: op type → rule (built on first use, for the installed PyTensor)."""
    from pytensor.compile.ops import DeepCopyOp, ViewOp
    from pytensor.tensor.basic import Alloc, Join
    from pytensor.tensor.blockwise import Blockwise
    from pytensor.tensor.elemwise import CAReduce, DimShuffle, Elemwise
    from pytensor.tensor.math import Dot
    from pytensor.tensor.random.op import RandomVariable
    from pytensor.tensor.shape import Reshape, Shape, Shape_i, SpecifyShape
    from pytensor.tensor.subtensor import AdvancedSubtensor, Subtensor

    rules: dict[type, Callable] = {
        ViewOp: _identity_rule,
        DeepCopyOp: _identity_rule,
        Shape: _shape_rule,
        Shape_i: _shape_i_rule,
        Elemwise: _elemwise_rule,
        DimShuffle: _dimshuffle_rule,
        CAReduce: _reduction_rule,
        Dot: _dot_rule,
        Blockwise: _blockwise_rule,
        AdvancedSubtensor: _advanced_index_rule,
        Subtensor: _subtensor_rule,
        Alloc: _alloc_rule,
        SpecifyShape: _specify_shape_rule,
        Reshape: _reshape_rule,
        Join: _join_rule,
        RandomVariable: _random_variable_rule,
    }
    try:  # PyTensor 2 (PyMC 5); PyTensor 3 has only AdvancedSubtensor
        from pytensor.tensor.subtensor import AdvancedSubtensor1

        rules[AdvancedSubtensor1] = _advanced_index_rule
    except ImportError:  # pragma: no cover - PyTensor 3
        pass
    try:  # PyTensor 3 (PyMC 6) has a LogSumExp op; PyTensor 2 builds it from max/exp/sum/log
        from pytensor.tensor.special import LogSumExp

        rules[LogSumExp] = _reduction_rule
    except ImportError:  # pragma: no cover - PyTensor 2
        pass
    return rules


def _rowwise_axes(node, axes: list[int | None], var_name: str, n_private: bool = False) -> list[int | None]:
    """Row axis of each output of ``node`` given its inputs' row axes (allow-list; raises otherwise).

    The rule for the op's type (:func:`_row_rules`, looked up along the class's MRO) decides.
    With ``n_private`` (add/remove neighbours) reading the length of the row axis from a shape
    gives an N mark (:func:`_n_axes` decides where it may go) instead of a data-free value.
    """
    rules = _row_rules()
    for cls in type(node.op).__mro__:
        rule = rules.get(cls)
        if rule is not None:
            return rule(node, axes, var_name, n_private)
    raise _refuse(node, var_name, "is not on the list of row-wise operations")


_READS_N = "reads the number of rows N, which is private under add/remove neighbours"


def _n_axes(node, axes: list, var_name: str) -> list:
    """Row axes of the outputs of ``node`` when an input carries an N mark (add/remove neighbours).

    A data-free function of N stays marked; a tensor allocated with N along one axis and
    data-free entries (``pt.ones(x.shape[0])``) gets that axis as a row axis, so that summing
    it over rows is refused like any aggregation of rows. With row-indexed inputs, N may
    only set a shape (``Alloc``, ``SpecifyShape``, ``Reshape``, a random variable's size);
    anything else that reads it is refused.
    """
    from pytensor.tensor.basic import Alloc, MakeVector
    from pytensor.tensor.random.op import RandomVariable
    from pytensor.tensor.shape import Reshape, SpecifyShape
    from pytensor.tensor.subtensor import Subtensor, get_idx_list

    op = node.op
    if not any(isinstance(a, int) for a in axes):  # no row values: a data-free function of N
        if isinstance(op, Subtensor) and isinstance(axes[0], tuple) and all(a is None for a in axes[1:]):
            idx = get_idx_list(node.inputs, op.idx_list)
            length = node.inputs[0].type.shape[0]
            if len(idx) == 1 and isinstance(idx[0], Constant) and length is not None:
                return [_N if int(idx[0].data) % length == axes[0][1] else None]
        if isinstance(op, Alloc) and axes[0] is None and list(axes[1:]).count(_N) == 1:
            if all(a is None or a == _N for a in axes[1:]):
                return [list(axes[1:]).index(_N)]
        if isinstance(op, MakeVector) and list(axes).count(_N) == 1 and all(a is None or a == _N for a in axes):
            return [("shape", list(axes).index(_N))]  # a shape vector with N at one position
        if isinstance(op, RandomVariable):  # a component distribution (pm.Mixture) sized with N
            rng_and_size = len(node.inputs) - len(op.ndims_params)
            marks = [a for a in axes[:rng_and_size] if a is not None]
            if all(a is None for a in axes[rng_and_size:]) and len(marks) == 1 and isinstance(marks[0], tuple):
                # Batch axis k of length N, every entry drawn from the same data-free parameters.
                return [None] * (len(node.outputs) - 1) + [marks[0][1]]
        return [_N] * len(node.outputs)
    if isinstance(op, Reshape | Alloc | SpecifyShape):  # input 0 is the tensor, the others its shape
        cleared = None if _is_n_mark(axes[0]) else [axes[0]] + [None if _is_n_mark(a) else a for a in axes[1:]]
    elif isinstance(op, RandomVariable):
        rng_and_size = len(node.inputs) - len(op.ndims_params)
        cleared = [None if _is_n_mark(a) else a for a in axes[:rng_and_size]] + list(axes[rng_and_size:])
        if any(_is_n_mark(a) for a in axes[rng_and_size:]):
            cleared = None
    else:
        cleared = None
    if cleared is None:
        raise _refuse(node, var_name, _READS_N)
    return _rowwise_axes(node, cleared, var_name, n_private=True)


def _row_axes(
    outputs: Sequence[Variable],
    row_inputs: Sequence[Variable],
    var_name: str,
    n_private: bool = False,
    n_roots: Sequence[Variable] = (),
) -> list:
    """Row axis of each of ``outputs`` (None: data-free), propagated from ``row_inputs`` (axis 0).

    Raises on any operation of a row-indexed input that is not on the allow-list. Subgraphs
    without a row input among their ancestors are not checked. With ``n_private`` (add/remove
    neighbours), the row count read from a shape, or from ``n_roots`` (the row dim's length),
    is tracked too (:func:`_n_axes`); an output that depends on it is marked ``"N"``.
    """
    from pytensor.graph.traversal import io_toposort

    row_ids = {id(v) for v in row_inputs}
    n_ids = {id(v) for v in n_roots} if n_private else set()
    roots = [v for v in ancestors(list(outputs)) if v.owner is None]
    axis: dict[int, Any] = {id(v): (0 if id(v) in row_ids else _N if id(v) in n_ids else None) for v in roots}
    for node in io_toposort(roots, list(outputs)):
        in_axes = [axis.get(id(i)) for i in node.inputs]
        if all(a is None for a in in_axes):
            out_axes: list = [None] * len(node.outputs)
        elif any(_is_n_mark(a) for a in in_axes):
            out_axes = _n_axes(node, in_axes, var_name)
        else:
            out_axes = _rowwise_axes(node, in_axes, var_name, n_private)
        for o, a in zip(node.outputs, out_axes, strict=True):
            axis[id(o)] = a
    return [axis.get(id(o)) for o in outputs]


def _producer(var: Variable) -> str:
    """The operation that computed ``var``, for messages (no values)."""
    return f"operation `{_op_label(var.owner)}`" if var.owner is not None else "a data array given directly"


def _size_input(rv) -> Variable | None:
    """The ``size`` input of a random variable's node (it sets the shape only), if it has one."""
    size_param = getattr(rv.owner.op, "size_param", None)
    if size_param is None:
        return None
    try:
        return size_param(rv.owner)
    except (AttributeError, IndexError, TypeError, ValueError):
        return None


def _check_rowwise_params(rv, model, n_rows, row_dim, observed_values, n_private=False) -> None:
    """Walk the observed variable's parameter graphs as the user built them.

    ``model.logp`` constant-folds: ``np_x - np_x.mean()`` on a numpy array becomes one
    constant there, so the aggregation is visible only in the random variable's inputs.
    Each parameter must be data-free or carry the row axis first (and, under add/remove
    neighbours, not depend on N; the ``size`` input, which sets only the shape, may).
    """
    from pytensor.tensor.variable import TensorVariable

    size = _size_input(rv)
    params = [i for i in rv.owner.inputs if isinstance(i, TensorVariable) and i is not size]
    if not params:
        return
    params = model.replace_rvs_by_values(params)
    rows = _model_row_inputs(model, params, n_rows, row_dim, observed_values, rv.name)
    n_roots = _row_dim_lengths(model, n_rows)
    for p, a in zip(params, _row_axes(params, rows, rv.name, n_private, n_roots), strict=True):
        if _is_n_mark(a):
            raise ModelStructureError(
                f"A parameter of observed variable `{rv.name}` {_READS_N}: {_producer(p)} computes it from the row "
                "count. Each row's log-likelihood may not depend on how many rows there are."
            )
        if a not in (None, 0):
            raise ModelStructureError(
                f"A parameter of observed variable `{rv.name}` does not keep the row axis first: {_producer(p)} "
                f"returns it with the row axis at position {a}. Keep rows on the first axis (see docs/data.md)."
            )
        if a == 0 and p.ndim < rv.ndim:
            raise ModelStructureError(
                f"A parameter of observed variable `{rv.name}` does not keep the row axis first: {_producer(p)} "
                f"returns it with {p.ndim} axes where `{rv.name}` has {rv.ndim}, so broadcasting would align its "
                "row axis with another axis. Keep rows on the first axis of every parameter (see docs/data.md)."
            )


def _check_rowwise(
    output: Variable,
    row_inputs: Sequence[Variable],
    var_name: str,
    n_private: bool = False,
    n_roots: Sequence[Variable] = (),
) -> None:
    """Propagate the row axis from ``row_inputs`` (axis 0) to ``output``; raise unless row-wise.

    The output must be a vector whose only axis is the row axis, or data-free (and, under
    add/remove neighbours, independent of N).
    """
    [out_axis] = _row_axes([output], row_inputs, var_name, n_private, n_roots)
    if _is_n_mark(out_axis):
        raise ModelStructureError(
            f"The log-likelihood of observed variable `{var_name}` {_READS_N}: {_producer(output)} returns a value "
            "computed from the row count. Each row's log-likelihood may not depend on how many rows there are."
        )
    if out_axis not in (None, 0) or output.ndim != 1:
        where = "is lost" if out_axis is None else f"is at position {out_axis}"
        raise ModelStructureError(
            f"The log-likelihood of observed variable `{var_name}` does not keep the row axis first: after "
            f"{_producer(output)} the per-row vector has {output.ndim} axes and the row axis {where}."
        )


def _describe_array(var: Variable) -> str:
    return f"The array `{var.name}`" if getattr(var, "name", None) else "A constant array"


def _row_inputs(
    graph_outputs: Sequence[Variable], n_rows: int, extra: Sequence[Variable], var_name: str | None = None
) -> list[Variable]:
    """Row-indexed roots: observed values, pm.Data and constants with an axis of length N.

    Rows must be the first axis: an array whose only axes of length N are not the first one
    (a transposed covariate), or that has several axes of length N, is refused, naming the
    array (never its values or its shape).
    """
    found = list(extra)
    for var in ancestors(list(graph_outputs)):
        if var.owner is None and isinstance(var, Constant | SharedVariable) and getattr(var, "ndim", 0) >= 1:
            axes = _row_length_axes(var, n_rows)
            if not axes:
                continue
            if axes != [0]:
                used_by = f" read by the log-likelihood of observed variable `{var_name}`" if var_name else ""
                raise ModelStructureError(
                    f"{_describe_array(var)}{used_by} has an axis of the row length that is not its first "
                    "axis (or several such axes). Any array with an axis of the row length is treated as row data, "
                    "and rows must be its first axis: transpose it so that one row is one index of axis 0."
                )
            if not any(var is f for f in found):
                found.append(var)
    return found


def _row_dim_lengths(model, n_rows: int) -> list[Variable]:
    """The shared lengths of the model's dims that equal N (they hold the row count)."""
    out = []
    for length in model.dim_lengths.values():
        if isinstance(length, SharedVariable) and np.ndim(length.get_value(borrow=True)) == 0:
            if int(length.get_value(borrow=True)) == n_rows:
                out.append(length)
    return out


def _model_row_inputs(model, graph_outputs, n_rows, row_dim, observed_values, var_name=None) -> list[Variable]:
    """:func:`_row_inputs` with the model's observed values first.

    A ``pm.Data`` container with an axis of length N is row data whatever the names of its
    dims (a first dim named otherwise no longer hides it from the checks).
    """
    obs = [v for v in observed_values if isinstance(v, Constant | SharedVariable)]
    return _row_inputs(graph_outputs, n_rows, obs, var_name)
