"""Data access: per-row log-likelihoods and gradients compiled from a PyMC model.

This module, together with :mod:`pymc_dp.mechanisms`, is the only code that evaluates
anything depending on the observed data. It returns *raw* per-row values; callers must pass
them through a mechanism (clip + noise) before anything leaves a step method.

The model must be made of rows: every observed variable has a leading row axis of the
same length N, rows are conditionally independent given the parameters (checked on the graph
against an allow-list of row-wise operations, see docs/data.md), and the prior does not read
row data. Potentials are allowed only when they do not read data (they are then
part of the prior).

Rows are addressed on the flat unconstrained parameter vector θ, in the order of the value
variables given (sorted into model order), exactly as PyMC's ``RaveledVars`` lays it out.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
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

from pymc_dp._errors import withholds_chains
from pymc_dp.prior import PriorDensity, prior_graph

__all__ = [
    "ModelStructureError",
    "PriorDensity",
    "RowLikelihood",
    "check_prior_reads_no_data",
    "data_dependent_deterministics",
    "row_loglik",
    "sorted_value_vars",
]


#: Default memory limit of one chunk of a full-data gradient pass, in bytes (256 MiB); see
#: :attr:`RowLikelihood.chunk_rows`. Change it here, or per object with ``chunk_bytes``.
CHUNK_BYTES = 256 * 2**20


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


def _equal_array(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a, b)


def _observed_value(model, rv) -> Variable:
    return model.rvs_to_values[rv]


def _row_structure(model, neighbouring: str | None = None) -> tuple[int, str | None, list[Variable]]:
    """N, the row dim name, and the observed value variables; raises on non-row models.

    The lengths of the observed variables appear in an error message only under the
    substitute relation, where N is public; otherwise (``neighbouring`` "add_remove" or not
    given) the message names the variables alone.
    """
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


# -- row independence ---------------------------------------------------------------------------
#
# Per-row clipping bounds one row's influence only if row i's log-likelihood depends on row i's
# data alone. Two things break that in ordinary PyMC graphs: ``check_parameters`` reduces its
# conditions over *all* rows (one invalid row makes every row −∞), and models may aggregate
# data in the graph (``x - x.mean()``). The first is rewritten row-wise
# (:func:`_rowwise_checks`), the second refused by an allow-list walk (:func:`_check_rowwise`)
# and, as a last line of defence, by a one-row perturbation probe (:func:`_perturbation_probe`).

try:  # PyMC 5.x and 6.x both define it here; older releases in dist_math
    from pymc.logprob.utils import CheckParameterValue as _CheckParameterValue
except ImportError:  # pragma: no cover
    from pymc.distributions.dist_math import CheckParameterValue as _CheckParameterValue


def _split_conditions(cond: Variable) -> list[Variable]:
    """The tensors ``check_parameters`` reduced into one scalar: ``all([all(c) for c in conds])``."""
    from pytensor.tensor.basic import MakeVector, ScalarFromTensor
    from pytensor.tensor.math import All

    node = cond.owner
    if node is not None and isinstance(node.op, ScalarFromTensor):
        cond = node.inputs[0]
        node = cond.owner
    else:
        cond = pt.as_tensor_variable(cond)
        node = cond.owner
    if node is None or not isinstance(node.op, All) or node.op.axis is not None:
        return [cond]
    inner = node.inputs[0]
    parts = inner.owner.inputs if inner.owner is not None and isinstance(inner.owner.op, MakeVector) else [inner]
    out = []
    for part in parts:
        if part.owner is not None and isinstance(part.owner.op, All) and part.owner.op.axis is None:
            out.append(part.owner.inputs[0])
        else:
            out.append(part)
    return out


def _rowwise_checks(term: Variable) -> tuple[Variable, list[Variable]]:
    """``term`` without its ``CheckParameterValue`` nodes, and the conditions they held."""
    conds: list[Variable] = []
    while True:
        node = next(
            (
                v.owner
                for v in ancestors([term, *conds])
                if v.owner is not None and isinstance(v.owner.op, _CheckParameterValue)
            ),
            None,
        )
        if node is None:
            return term, conds
        new_conds = _split_conditions(node.inputs[1])
        outs = graph_replace([term, *conds, *new_conds], {node.outputs[0]: node.inputs[0]}, strict=False)
        term, conds = outs[0], list(outs[1:])


def _row_term(term: Variable, row_inputs: Sequence[Variable]) -> Variable:
    """Per-row log-likelihood of one observed variable, with parameter checks applied row-wise.

    Each condition of a ``CheckParameterValue`` that reads row data (``row_inputs``) is
    reduced over its non-row axes only (a per-row mask, or a length-1 mask broadcast to all
    rows); a data-free condition is reduced fully (it depends on θ alone). Rows whose
    mask is false get −∞ (the mechanisms clip them). If a condition did mix rows the walk of
    :func:`_check_rowwise` on the result refuses the model.
    """
    value, conds = _rowwise_checks(term)
    row = _rowsum(value)
    if not conds:
        return row
    masks = []
    row_ids = {id(v) for v in row_inputs}
    for c in conds:
        c = pt.as_tensor_variable(c)
        if c.ndim >= 1 and any(id(v) in row_ids for v in ancestors([c])):
            masks.append(c.all(axis=tuple(range(1, c.ndim))) if c.ndim > 1 else c)
        else:
            masks.append(pt.all(c))
    ok = masks[0]
    for m in masks[1:]:
        ok = pt.and_(ok, m)
    return pt.switch(ok, row, pt.constant(-np.inf, dtype=row.dtype))


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


def _rowwise_axes(node, axes: list[int | None], var_name: str, n_private: bool = False) -> list[int | None]:
    """Row axis of each output of ``node`` given its inputs' row axes (allow-list; raises otherwise).

    With ``n_private`` (add/remove neighbours) reading the length of the row axis from a shape
    gives an N mark (:func:`_n_axes` decides where it may go) instead of a data-free value.
    """
    from pytensor.tensor.basic import Alloc, Join
    from pytensor.tensor.blockwise import Blockwise
    from pytensor.tensor.elemwise import CAReduce, DimShuffle, Elemwise
    from pytensor.tensor.math import Dot
    from pytensor.tensor.shape import Reshape, Shape, Shape_i, SpecifyShape
    from pytensor.tensor.subtensor import AdvancedSubtensor, Subtensor

    try:  # PyTensor 2 (PyMC 5); PyTensor 3 has only AdvancedSubtensor
        from pytensor.tensor.subtensor import AdvancedSubtensor1
    except ImportError:
        AdvancedSubtensor1 = AdvancedSubtensor

    op = node.op
    outs = node.outputs
    row = [a for a in axes if a is not None]
    from pytensor.compile.ops import DeepCopyOp, ViewOp

    if isinstance(op, ViewOp | DeepCopyOp):
        # Identity (pm.Deterministic's copy of its expression on PyTensor 3): the row axis is kept.
        return [axes[0]]
    if isinstance(op, Shape | Shape_i):
        # Only the shape is read, no row value. Under substitute neighbours N is public: the
        # output is data-free. Under add/remove N is private: the row axis's length is marked.
        if not n_private:
            return [None] * len(outs)
        (a,) = row
        if isinstance(op, Shape_i):
            return [_N if op.i == a else None]
        return [_N if node.inputs[0].ndim == 1 else ("shape", a)]
    if isinstance(op, Elemwise):
        # Inputs of an Elemwise have equal ndim; element i of the output reads element i of each input.
        if len(set(row)) != 1:
            raise _refuse(node, var_name, "combines row-indexed inputs along different axes")
        for inp, a in zip(node.inputs, axes, strict=True):
            if a is not None and inp.type.broadcastable[a] and not all(o.type.broadcastable[a] for o in outs):
                raise _refuse(node, var_name, "broadcasts one row against all rows")
        return [row[0]] * len(outs)
    if isinstance(op, DimShuffle):
        (a,) = row
        if a not in op.new_order:
            raise _refuse(node, var_name, "drops the row axis")
        return [list(op.new_order).index(a)]
    try:  # PyTensor 3 (PyMC 6) has a LogSumExp op; PyTensor 2 builds it from max/exp/sum/log
        from pytensor.tensor.special import LogSumExp
    except ImportError:
        LogSumExp = CAReduce
    if isinstance(op, CAReduce | LogSumExp) and len(node.inputs) == 1:
        # A reduction over ``op.axis`` only (LogSumExp: log Σ exp over those axes, keepdims by a
        # DimShuffle after it): row-wise when the row axis is not among them.
        (a,) = row
        reduced = tuple(range(node.inputs[0].ndim)) if op.axis is None else tuple(op.axis)
        if a in reduced:
            raise _refuse(node, var_name, "reduces over the row axis (it aggregates rows)")
        return [a - sum(1 for r in reduced if r < a)]
    if isinstance(op, Dot):
        x, y = node.inputs
        ax, ay = axes
        if ax is not None and ay is None and x.ndim == 2 and ax == 0:
            return [0]
        if ay is not None and ax is None and y.ndim == 2 and ay == 1:
            return [x.ndim - 1]
        raise _refuse(node, var_name, "contracts over the row axis or multiplies two row-indexed tensors")
    if isinstance(op, Blockwise):
        # A Blockwise applies its core op to each batch element independently: row-wise along
        # batch axes. Along core axes only a Dot-like core (X @ β, β data-free) is accepted.
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
    if isinstance(op, AdvancedSubtensor1 | AdvancedSubtensor):
        x, *idx = node.inputs
        if axes[0] is not None:
            raise _refuse(node, var_name, "indexes a row-indexed tensor (only full slices keep rows apart)")
        idx_list = getattr(op, "idx_list", None)  # PyTensor 3 keeps slices here, not as inputs
        first_is_slice = bool(idx_list) and isinstance(idx_list[0], slice)
        if not idx or first_is_slice or axes[1] != 0 or idx[0].ndim != 1:
            raise _refuse(node, var_name, "indexes with a row-indexed array other than as the first 1-d index")
        if any(a is not None and (a != 0 or i.ndim != 1) for i, a in zip(idx, axes[1:], strict=True)):
            raise _refuse(node, var_name, "indexes with row-indexed arrays of different shapes")
        return [0]
    if isinstance(op, Subtensor):
        a = axes[0]
        if a is None or any(b is not None for b in axes[1:]):
            raise _refuse(node, var_name, "indexes with a row-dependent index")
        idx_list = list(op.idx_list)
        if a < len(idx_list) and not _idx_is_full_slice(idx_list[a]):
            raise _refuse(node, var_name, "selects part of the row axis (only a full slice keeps all rows)")
        dropped = sum(1 for e in idx_list[:a] if not isinstance(e, slice))
        return [a - dropped]
    if isinstance(op, Alloc):
        a = axes[0]
        if a is None or any(b is not None for b in axes[1:]):
            raise _refuse(node, var_name, "allocates a shape read from row data")
        return [a + outs[0].ndim - node.inputs[0].ndim]
    if isinstance(op, SpecifyShape):
        if axes[0] is None or any(b is not None for b in axes[1:]):
            raise _refuse(node, var_name, "specifies a shape read from row data")
        return [axes[0]]
    if isinstance(op, Reshape):
        x = node.inputs[0]
        if (
            axes[0] == 0
            and axes[1] is None
            and x.type.shape[0] is not None
            and outs[0].type.shape[0] == x.type.shape[0]
        ):
            return [0]
        raise _refuse(node, var_name, "reshapes the row axis")
    if isinstance(op, Join):
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
    from pytensor.tensor.random.op import RandomVariable

    if isinstance(op, RandomVariable):
        # Component distributions handed to pm.Censored / pm.Mixture (seen in the parameter
        # graphs only): batch element i is drawn from the parameters' element i.
        rng_and_size = len(node.inputs) - len(op.ndims_params)
        out = outs[-1]
        out_batch = out.ndim - op.ndim_supp
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


def _index_positions(node) -> list[tuple[int, int]]:
    """(input position, indexed axis) of each tensor index of an advanced-indexing node."""
    idx_list = getattr(node.op, "idx_list", None)
    if idx_list:  # PyTensor 3: slices in idx_list, tensor indices as inputs numbered by their entry
        return [(1 + entry, axis) for axis, entry in enumerate(idx_list) if not isinstance(entry, slice)]
    return list(zip(range(1, len(node.inputs)), range(len(node.inputs) - 1), strict=True))


def _guard_row_indexing(row: Variable, row_inputs: Sequence[Variable]) -> Variable:
    """``row`` with every index read from the rows kept in range, and a row whose index was not made NaN.

    The walk accepts a data-free tensor indexed by a row-indexed integer vector
    (``alpha[group_idx]``, ``mu[(x > t) * 2]``). An index outside its axis would make the
    whole evaluation raise (PyTensor's ``IndexError``, which quotes the index: a raw value),
    or, in some compiled modes, read another entry. Here each such index ``i`` into an axis
    of length n is replaced by ``switch(-n <= i < n, i, 0)``, and the row's log-likelihood
    by NaN where any of its indices was out of range: the row then counts as a row that
    cannot be computed (clipped to the bound, left out of clipped sums), a function of that
    row alone, on every backend and in one-posterior sampling alike. In-range indices are
    unchanged, so the values of every other row are too.
    """
    from pytensor.tensor.subtensor import AdvancedSubtensor

    try:  # PyTensor 2 (PyMC 5); PyTensor 3 has only AdvancedSubtensor
        from pytensor.tensor.subtensor import AdvancedSubtensor1
    except ImportError:  # pragma: no cover - PyTensor 3
        AdvancedSubtensor1 = AdvancedSubtensor
    row_data = set(row_inputs)
    replace: dict[Variable, Variable] = {}
    invalid: list[Variable] = []
    for node in _toposort_nodes([row]):
        if not isinstance(node.op, AdvancedSubtensor1 | AdvancedSubtensor):
            continue
        inputs = list(node.inputs)
        for position, axis in _index_positions(node):
            index = inputs[position]
            if (
                getattr(index, "ndim", None) != 1
                or not np.issubdtype(np.dtype(index.dtype), np.integer)
                or not row_data.intersection(ancestors([index]))
            ):
                continue
            length = pt.cast(inputs[0].shape[axis], index.dtype)
            in_range = pt.and_(pt.ge(index, -length), pt.lt(index, length))
            inputs[position] = pt.switch(in_range, index, 0)
            invalid.append(pt.invert(in_range))
        if inputs != list(node.inputs):
            replace[node.outputs[0]] = node.op.make_node(*inputs).outputs[0]
    if not replace:
        return row
    guarded = graph_replace(row, replace, strict=False)
    out_of_range = functools.reduce(pt.or_, invalid)
    return pt.switch(out_of_range, pt.as_tensor(np.nan, dtype=row.dtype), guarded)


def row_loglik(
    model, *, neighbouring: str = "substitute", initial_point: dict[str, np.ndarray] | None = None
) -> tuple[Variable, int, str | None, list[Variable]]:
    """The model's per-row log-likelihood graph, checked row-wise.

    Returns the vector (N,) of per-row log-likelihoods summed over all observed variables,
    as a function of the model's value variables, with every ``check_parameters`` condition
    applied row by row; N; the row dimension name; and the row-indexed roots of the graph.
    Every entry point that reads rows (:class:`RowLikelihood`, hence every step and DPADVI;
    :func:`pymc_dp.one_posterior_sample`) gets its per-row graph here, so every one of them
    gets all three checks: the row-wise parameter checks, the allow-list walk and the one-row
    perturbation probe.

    Parameters
    ----------
    model : pm.Model
        The model.
    neighbouring : {"substitute", "add_remove"}, default "substitute"
        Under add/remove N is private: a per-row value that depends on the number of rows
        (read from a shape or from the row dim's length) is refused, and error messages
        never show a length.
    initial_point : dict, optional
        Parameter values for the perturbation probe (default: PyMC's default initial point,
        every ``initval=`` ignored: :func:`pymc_dp.starts.public_initial_point`). Must be
        public: the probe's outcome depends on it.

    Raises
    ------
    ModelStructureError
        When a row's term could read another row's data (see docs/data.md), the model is not
        made of rows, or (add/remove) a row's term reads N. Messages name the variable and the
        operation, never data values.

    Notes
    -----
    Neighbouring relation: substitute or add/remove of one row. Per-row clipping bounds the
    sensitivity only if row i's value depends on row i's data alone (and, under add/remove,
    not on how many other rows there are); this function checks that on the graph (an
    allow-list of row-wise operations) and with a probe that changes one row. It cannot see
    constants computed from the data in NumPy before the model was built (e.g. a scalar
    ``x.mean()``).

    References
    ----------
    .. [1] Dwork, C. and Roth, A. (2014). The algorithmic foundations of differential privacy.
       Foundations and Trends in Theoretical Computer Science 9(3–4), §2.3 (neighbouring data
       sets, sensitivity).
    """
    from pymc_dp._validation import check_neighbouring

    neighbouring = check_neighbouring("neighbouring", neighbouring)
    n_private = neighbouring == "add_remove"
    n_rows, row_dim, observed_values = _row_structure(model, neighbouring)
    n_roots = _row_dim_lengths(model, n_rows) if n_private else []
    terms = model.logp(vars=model.observed_RVs, sum=False)
    rows = []
    for rv, term in zip(model.observed_RVs, terms, strict=True):
        if term.ndim == 0:
            raise ModelStructureError(
                f"Observed variable `{rv.name}` has a log-likelihood without a row axis (a scalar)."
            )
        _check_rowwise_params(rv, model, n_rows, row_dim, observed_values, n_private)
        row = _row_term(term, _model_row_inputs(model, [term], n_rows, row_dim, observed_values, rv.name))
        row_inputs = _model_row_inputs(model, [row], n_rows, row_dim, observed_values, rv.name)
        _check_rowwise(row, row_inputs, rv.name, n_private, n_roots)
        rows.append(_guard_row_indexing(row, row_inputs))
    lik = pt.add(*rows) if len(rows) > 1 else rows[0]
    row_data = _model_row_inputs(model, [lik], n_rows, row_dim, observed_values)
    lik_ancestors = set(ancestors([lik]))
    row_data = [v for v in row_data if v in lik_ancestors]
    # The probe's points are public: PyMC's default point, never an initval= (it may come from the data).
    from pymc_dp.starts import public_initial_point

    point = public_initial_point(model) if initial_point is None else initial_point
    _perturbation_probe(model.value_vars, lik, [np.asarray(point[v.name]) for v in model.value_vars], row_data, n_rows)
    return lik, n_rows, row_dim, row_data


def _model_row_inputs(model, graph_outputs, n_rows, row_dim, observed_values, var_name=None) -> list[Variable]:
    """:func:`_row_inputs` with the model's observed values first.

    A ``pm.Data`` container with an axis of length N is row data whatever the names of its
    dims (a first dim named otherwise no longer hides it from the checks).
    """
    obs = [v for v in observed_values if isinstance(v, Constant | SharedVariable)]
    return _row_inputs(graph_outputs, n_rows, obs, var_name)


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


def _probe_points(values: Sequence[np.ndarray]) -> list[list[np.ndarray]]:
    """``values`` and a deterministic shift of its floating-point entries (data-free probe points)."""
    shifted = []
    for value in values:
        value = np.asarray(value)
        if np.issubdtype(value.dtype, np.floating):
            offsets = 0.5 * np.cos(np.arange(1, value.size + 1, dtype=float)).reshape(value.shape)
            value = (value + offsets).astype(value.dtype)
        shifted.append(value)
    return [list(values), shifted]


def _synthetic_rows(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """Data-free stand-in rows of the given shape and dtype (never computed from the data).

    Floating-point entries are spread over (0.25, 0.75), inside the support of most
    likelihoods (bounded, positive and real-valued alike); integer entries are 0 (a valid
    index, count and category code); booleans alternate. The construction probes
    (:func:`_perturbation_probe`, :meth:`RowLikelihood._build_index_mode`) evaluate these
    instead of the real rows, so that whether a model is accepted never depends on the data.
    """
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    if np.issubdtype(dtype, np.bool_):
        return (np.arange(size) % 2 == 0).reshape(shape)
    if np.issubdtype(dtype, np.integer):
        return np.zeros(shape, dtype=dtype)
    if np.issubdtype(dtype, np.complexfloating) or np.issubdtype(dtype, np.floating):
        spread = 0.25 + 0.5 * ((np.arange(size, dtype=np.float64) * 0.6180339887498949) % 1.0)
        return spread.reshape(shape).astype(dtype)
    return np.zeros(shape, dtype=dtype)


def _perturbed_row(rows: np.ndarray) -> np.ndarray:
    """A copy of synthetic ``rows`` with row 0 changed (integers to 1, booleans negated, floats to row 1's value)."""
    copy = np.array(rows, copy=True)
    if copy.shape[0] < 2:
        return copy
    if np.issubdtype(copy.dtype, np.bool_):
        copy[0] = ~copy[0]
    elif np.issubdtype(copy.dtype, np.integer):
        copy[0] = 1
    else:
        copy[0] = copy[1]
    return copy


@contextlib.contextmanager
def _synthetic_values(shared: Sequence[SharedVariable]) -> Iterator[None]:
    """Hold synthetic rows (:func:`_synthetic_rows`) in ``shared`` for the body, then the data again."""
    saved = [v.get_value(borrow=True) for v in shared]
    try:
        for v, value in zip(shared, saved, strict=True):
            v.set_value(_synthetic_rows(np.shape(value), np.asarray(value).dtype), borrow=True)
        yield
    finally:
        for v, value in zip(shared, saved, strict=True):
            v.set_value(value, borrow=True)


def _perturbation_probe(
    inputs: Sequence[Variable], lik: Variable, values: Sequence[np.ndarray], row_data: Sequence[Variable], n_rows: int
) -> None:
    """Change one synthetic row and check no other row's log-likelihood moves.

    The probe never reads the real rows: every row-indexed array is replaced by data-free
    synthetic rows of its shape and dtype (:func:`_synthetic_rows`), and row 0 of each is
    changed (:func:`_perturbed_row`). Whether a model is refused therefore depends on the
    model's graph alone, never on the data (privacy contract, rule 5). The check runs at
    ``values`` and at a second, shifted point (:func:`_probe_points`): at a start where a
    coefficient is zero, ``b * (x - x.mean())`` would not show that it mixes rows.

    A graph that cannot be evaluated on the synthetic rows (an index computed from a row that
    falls outside its array, say) is not probed: the same on every data set. At run time such
    a row contributes its clipped bound or nothing (:func:`evaluate_rowwise`).
    """
    if n_rows < 2 or not row_data:
        return
    placeholders = [d.type() for d in row_data]
    probe_graph = graph_replace(lik, dict(zip(row_data, placeholders, strict=True)), strict=False)
    fn = pytensor.function([*inputs, *placeholders], probe_graph, mode="FAST_COMPILE", on_unused_input="ignore")
    synthetic = [_synthetic_rows(_array_shape(d), d.dtype) for d in row_data]
    # Every array with row 0 changed; if that cannot be evaluated (an integer code 1 out of range),
    # the floating-point arrays alone. Both choices depend on the graph only.
    candidates = [
        [_perturbed_row(s) for s in synthetic],
        [_perturbed_row(s) if np.issubdtype(s.dtype, np.inexact) else s for s in synthetic],
    ]
    moved = False
    for point in _probe_points(values):
        try:
            with np.errstate(all="ignore"):
                before = np.asarray(fn(*point, *synthetic), dtype=float)
        except Exception:  # not evaluable on the synthetic rows here: nothing to compare (data-free)
            continue
        for perturbed in candidates:
            try:
                with np.errstate(all="ignore"):
                    after = np.asarray(fn(*point, *perturbed), dtype=float)
            except Exception:
                continue
            moved = moved or not np.allclose(before[1:], after[1:], rtol=1e-12, atol=1e-12, equal_nan=True)
            break
    if moved:
        raise ModelStructureError(
            "Changing one row's data changed other rows' log-likelihoods: the likelihood is not computed row "
            "by row (see docs/data.md)."
        )


def evaluate_rowwise(
    fn: Callable[..., Any], args: Sequence[Any], rows: Sequence[np.ndarray], *, tail: tuple[int, ...], summed: bool
) -> np.ndarray:
    """``fn(*args, *rows)``, where a row whose evaluation raises counts as a row that cannot be computed.

    ``rows`` are the row-indexed inputs of one batch (axis 0 the rows: gathered data, or an
    index array). If the call raises, the batch is halved and each half evaluated the same
    way, down to single rows; a row that still raises gets NaN as its per-row value (the
    mechanisms clip NaN to a bound or leave the row out, as for any row that cannot be
    computed) or, for a ``summed`` output, contributes nothing.

    Parameters
    ----------
    fn : callable
        A compiled function of ``*args, *rows``: per-row values of shape ``(B, *tail)``, or
        (``summed``) their sum of shape ``tail``.
    args : sequence
        The inputs that are not row-indexed (θ, a bound).
    rows : sequence of arrays
        The row-indexed inputs, all with the same number of rows B.
    tail : tuple of int
        The shape of one row's value (``()`` for log-likelihoods, ``(P,)`` for gradients).
    summed : bool
        Whether ``fn`` returns a sum over the rows rather than per-row values.

    Notes
    -----
    Neighbouring relation: substitute or add/remove of one row. Whether a run fails must
    not depend on the rows (privacy contract, rule 5): an error raised by one row's data (an
    index computed from a row that falls outside its array, say) would otherwise end the run,
    a bit about that row released at no price. Here the row's term is what it is for any row
    that cannot be computed, a function of that row alone, so the sensitivity argument of
    the mechanism that consumes the values holds unchanged. Nothing of the error is kept.
    The extra evaluations cost O(k log B) calls for k failing rows; their time is not
    released.
    """
    try:
        return np.asarray(fn(*args, *rows))
    except Exception:  # handled below, outside the handler: nothing of the error is kept or chained
        pass
    n = int(np.shape(rows[0])[0]) if rows else 0
    if n <= 1:
        return np.zeros(tail) if summed else np.full((n, *tail), np.nan)
    half = n // 2
    first = evaluate_rowwise(fn, args, [r[:half] for r in rows], tail=tail, summed=summed)
    second = evaluate_rowwise(fn, args, [r[half:] for r in rows], tail=tail, summed=summed)
    return first + second if summed else np.concatenate([first, second])


# -- the per-row gradient mode's cost model -------------------------------------------------------

#: Rows of the data-free batch (zeros of the row data's shapes and types) on which the cost model
#: evaluates the shapes of the two compiled gradient functions (:func:`_graph_cost`).
COST_PROBE_ROWS = 256

# Relative costs, in elementary operations per element, of the scalar operations inside an
# elementwise node (by the scalar op's class name; anything not listed costs ``_SCALAR_DEFAULT``),
# and of the other kinds of node (:func:`_node_cost`). Set once from benchmarks/gradient_modes.py
# (both PyMC lines, single-threaded BLAS); public constants, so the choice depends on the graph,
# its shapes and the backend only. A model whose two modes the estimate ranks wrongly can force
# one with ``gradient_mode=``.
_SCALAR_CHEAP = frozenset(
    "Add Sub Mul Neg Identity Cast Switch Second Abs Sqr Maximum Minimum Sign EQ NEQ LT GT LE GE "
    "AND OR XOR Invert Clip Floor Ceil RoundHalfToEven Composite ScalarizedComposite".split()
)
_SCALAR_DIVISION = frozenset("TrueDiv IntDiv Reciprocal Mod".split())
_SCALAR_SPECIAL = frozenset(
    "Gammaln GammaLn Psi TriGamma PolyGamma GammaInc GammaIncC GammaIncInv GammaIncCInv GammaU GammaL "
    "BetaInc BetaIncInv Iv Ive I0 I1 Kv Jv J0 J1 Erfinv Erfcinv Erfcx Hyp2F1 Gamma Log1mexp".split()
)
_SCALAR_COSTS = {"cheap": 1.0, "division": 4.0, "special": 50.0}
_SCALAR_DEFAULT = 12.0  # transcendental: exp, log, log1p, expm1, sqrt, pow, tanh, sigmoid, softplus, erf, ...
_VIEW_OPS = frozenset(
    "DimShuffle Reshape Shape Shape_i SpecifyShape Subtensor Squeeze MatrixTranspose Unbroadcast "
    "ScalarFromTensor TensorFromScalar MakeVector Assert CheckAndRaise DeepCopyOp Split".split()
)
_PRODUCT_OPS = frozenset("Dot Dot22 Dot22Scalar Gemm Gemv Ger CGemv CGer BatchedDot Matmul".split())
_SOLVE_OPS = frozenset("SolveTriangular Solve CholeskySolve SolveBase".split())
_FACTOR_OPS = frozenset("Cholesky MatrixInverse MatrixPinv Det SLogDet Eig Eigh LU".split())
#: Cost of one multiply-add in a matrix product or solve (BLAS-blocked), relative to a cheap scalar op.
_PRODUCT_COST = 0.25
#: Cost of each of a ``BatchedDot``'s products (a call of a small matrix product per batch entry), by
#: backend: measured about five times dearer in the Numba backend's loop than in the C one's.
_PRODUCT_LOOP_COST = {"c": 100.0, "numba": 500.0}
#: Cost per element of each input of an elementwise loop, by backend: PyTensor's C loops advance every
#: input's (possibly broadcast) iterator per element, measured at about 0.4 ns each (a 12-tangent
#: forward-mode node with 20 inputs: 14 ns per element); Numba's fused loops hoist broadcast reads.
_INPUT_COST = {"c": 2.0, "numba": 0.0}
#: Cost of each iteration of a ``Blockwise`` loop (an op without a vectorised form, run once per batch entry).
_LOOP_COST = 2000.0


def _scalar_cost(scalar_op) -> float:
    """Elementary operations per element of one scalar op (a ``Composite``: the sum over its inner graph)."""
    inner = getattr(scalar_op, "fgraph", None)
    if inner is not None:
        return sum(_scalar_cost(node.op) for node in inner.apply_nodes)
    name = type(scalar_op).__name__
    if name in _SCALAR_CHEAP:
        return _SCALAR_COSTS["cheap"]
    if name in _SCALAR_DIVISION:
        return _SCALAR_COSTS["division"]
    if name in _SCALAR_SPECIAL:
        return _SCALAR_COSTS["special"]
    return _SCALAR_DEFAULT


def _node_cost(node, shapes: Mapping[Variable, tuple[int, ...]], backend: str = "c") -> float:
    """Estimated elementary operations of one node of a compiled graph, from its op and its shapes."""
    from pytensor.tensor.blockwise import Blockwise
    from pytensor.tensor.elemwise import CAReduce, Elemwise

    def size(var) -> float:
        return float(np.prod(shapes.get(var, ()), dtype=float))

    out = sum(size(o) for o in node.outputs)
    op = node.op
    name = type(op).__name__
    try:  # the inputs' broadcast shape: the loop of an elementwise node, or of a fused loop with a reduction
        work = max(out, float(np.prod(np.broadcast_shapes(*(shapes[i] for i in node.inputs)), dtype=float)))
    except (KeyError, ValueError):
        work = out
    reads = _INPUT_COST[backend] * len(node.inputs)  # each input's iterator, advanced per element
    if isinstance(op, Elemwise):
        return work * (1.0 + reads + _scalar_cost(op.scalar_op))
    inner = getattr(op, "fgraph", None)
    if inner is not None:  # a fused loop (an OpFromGraph of elementwise ops and reductions)
        scalar_ops = [n.op.scalar_op if isinstance(n.op, Elemwise) else None for n in inner.apply_nodes]
        return work * (1.0 + reads + sum(1.0 if s is None else _scalar_cost(s) for s in scalar_ops))
    if isinstance(op, CAReduce):
        return sum(size(i) for i in node.inputs)
    if isinstance(op, Blockwise):
        core_ndim = len(op.outputs_sig[0]) if getattr(op, "outputs_sig", None) else 0
        out_shape = shapes.get(node.outputs[0], ())
        loops = float(np.prod(out_shape[: len(out_shape) - core_ndim], dtype=float))
        return loops * _LOOP_COST + out
    if name in _VIEW_OPS:
        return 0.0
    if name in _PRODUCT_OPS:
        # The left factor: the first input, or Gemm's and Gemv's matrix (their inputs are z, α, A, x, β).
        first = shapes.get(node.inputs[2 if name in ("Gemm", "Gemv", "CGemv") else 0], ())
        inner = first[-1] if first and name not in ("Ger", "CGer") else 1
        loops = first[0] if name == "BatchedDot" and first else 0  # one small product per batch entry
        return _PRODUCT_COST * out * inner + loops * _PRODUCT_LOOP_COST[backend]
    if name in _SOLVE_OPS:
        first = shapes.get(node.inputs[0], ())
        n = first[-1] if first else 1
        return _PRODUCT_COST * out * n + (_PRODUCT_COST * n**3 / 3 if name != "SolveTriangular" else 0.0)
    if name in _FACTOR_OPS:
        first = shapes.get(node.inputs[0], ())
        n = first[-1] if first else 1
        return _PRODUCT_COST * size(node.inputs[0]) * n / 3
    return out  # gathers, scatters, allocations: one write per element


def _compiled_backend(fn) -> str:
    """``"numba"`` for a function compiled by PyTensor's Numba backend, else ``"c"`` (C or Python)."""
    return "numba" if "numba" in type(fn.maker.linker).__name__.lower() else "c"


def _graph_cost(fgraph, inputs: Sequence[Sequence[np.ndarray]], backend: str = "c") -> list[float]:
    """Estimated elementary operations of one call of the compiled graph ``fgraph`` on each set of ``inputs``.

    The sum of :func:`_node_cost` over the nodes of a copy of ``fgraph``, with every
    variable's shape from PyTensor's shape inference (graphs of the inputs' shapes) evaluated
    on the inputs without rewrites or a C or Numba compilation. The inputs are data-free (a
    public point θ and batches of zeros of the row data's shapes and types), so the estimate
    depends on the graph and the shapes only, never on data values or on time.
    """
    from pytensor.compile.mode import Mode
    from pytensor.graph.fg import FunctionGraph
    from pytensor.tensor.rewriting.shape import ShapeFeature

    copy = FunctionGraph(fgraph.inputs, fgraph.outputs, clone=True)
    feature = ShapeFeature()
    copy.attach_feature(feature)
    nodes = copy.toposort()
    variables = [o for node in nodes for o in node.outputs if getattr(o.type, "ndim", None)]
    symbolic = [feature.get_shape(v, i) for v in variables for i in range(v.type.ndim)]
    evaluate = pytensor.function(
        copy.inputs,
        symbolic,
        mode=Mode(linker="py", optimizer=None),
        on_unused_input="ignore",
        accept_inplace=True,
    )
    costs = []
    for values in inputs:
        with np.errstate(all="ignore"):
            flat = [int(s) for s in evaluate(*values)] if symbolic else []
        shapes: dict[Variable, tuple[int, ...]] = {}
        for v in variables:
            shapes[v], flat = tuple(flat[: v.type.ndim]), flat[v.type.ndim :]
        for v, value in zip(copy.inputs, values, strict=True):
            shapes[v] = tuple(int(s) for s in np.shape(value))
        for node in nodes:
            shapes.update({c: np.shape(c.data) for c in node.inputs if isinstance(c, Constant)})
        costs.append(sum(_node_cost(node, shapes, backend) for node in nodes))
    return costs


def _indexable(data: Variable, k: int) -> Variable:
    """A row-indexed array as a shared variable (itself if it is one; a numpy constant wrapped, not copied)."""
    if isinstance(data, SharedVariable):
        return data
    value = np.asarray(data.data)
    shape = (None, *data.type.shape[1:])  # keep the static non-row axes (broadcastable ones stay so)
    return pytensor.shared(value, name=data.name or f"row_data_{k}", borrow=True, shape=shape)


def _retyped(graph: Variable, replace: Mapping[Variable, Variable]) -> Variable:
    """``graph`` with ``replace`` applied, its nodes rebuilt for the new (less static) types.

    ``graph_replace`` would pin a constant's static row count on its replacement with a
    ``SpecifyShape``; rebuilding the nodes lets the graph take any number of rows.
    """
    from pytensor.graph.replace import clone_replace

    replace = {old: new for old, new in replace.items() if old is not new}
    return clone_replace(graph, replace, rebuild_strict=False) if replace else graph


def _batch_placeholder(var: Variable) -> Variable:
    """An input for a gathered batch of ``var``'s rows (static shape of the non-row axes kept)."""
    return pt.tensor(f"{var.name}_batch", dtype=var.dtype, shape=(None, *var.type.shape[1:]))


def _check_row_settings(gradient_mode: str, chunk_bytes: int | None) -> None:
    """Refuse a bad ``gradient_mode`` or ``chunk_bytes`` of :class:`RowLikelihood`, naming it (public settings only)."""
    if gradient_mode not in ("auto", "forward", "reverse"):
        raise ValueError(f"`gradient_mode` must be 'auto', 'forward' or 'reverse'. Found {gradient_mode!r}.")
    if chunk_bytes is not None and (
        isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int | np.integer) or chunk_bytes <= 0
    ):
        raise ValueError(f"`chunk_bytes` must be a positive integer number of bytes or None. Found {chunk_bytes!r}.")


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
    neighbouring : {"substitute", "add_remove"}, default "substitute"
        The relation of the mechanisms built on these rows. Under add/remove N is private:
        a per-row log-likelihood that depends on the number of rows is refused and no
        message shows N (:func:`row_loglik`).
    gradient_mode : {"auto", "forward", "reverse"}, default "auto"
        How the per-row gradient matrix is computed (see the property :attr:`gradient_mode`).
    reproducible : bool, default False
        Resolve ``gradient_mode="auto"`` to forward mode, so that two runs take the same
        arithmetic path and give bit-identical results on any PyTensor version and backend.
        Set by the step methods and DPADVI when ``reproducible_noise=True``: the two modes
        agree only to rounding, and the cost model's choice may differ between backends.
    chunk_bytes : int, optional
        Memory limit of one chunk of a full-data gradient pass (default :data:`CHUNK_BYTES`).

    Attributes
    ----------
    n_rows : int
        N, the length of the shared row axis.
    n_params : int
        Length of θ.
    row_dim : str or None
        Name of the row dimension when the observed variables have dims.
    subset_mode : {"index", "slice"}
        "index": a subset of B rows gathers those rows of every row-indexed array and
        computes B terms, O(B), whether the rows are ``pm.Data`` containers or numpy arrays
        baked into the graph (``observed=np.array``, ``X @ beta``, ``alpha[group_idx]``: they
        are wrapped as indexable inputs, without a copy). "slice" only when the graph fixes
        the number of rows in a shape or (numpy rows) reads it other than as a shape (see
        :meth:`_build_index_mode`): a subset is then computed on all rows and sliced.

    Raises
    ------
    ModelStructureError
        For models that cannot be split into rows; the message names the variable (and the
        operation, for graphs that mix rows). Construction builds the per-row graph with
        :func:`row_loglik` (parameter checks row by row, allow-list walk, one-row
        perturbation probe) and runs :func:`check_prior_reads_no_data`; in index mode a
        subset that differs from the same rows of the full vector, or a graph that cannot be
        evaluated on a subset for any other reason than a fixed row count, is also an error.

    Notes
    -----
    The per-row gradient matrix is computed in forward mode (one Jacobian-vector product
    vectorised over the P unit tangents) or in reverse mode (one row's log-likelihood with a
    per-row copy of θ, vectorised over the rows: what ``vmap(grad(row_loglik))`` does),
    whichever a cost model of the two compiled graphs estimates cheaper (:attr:`gradient_mode`); in
    index mode one compiled function of θ and a batch of rows serves subsets, chunks and all
    rows. Full-data passes go in row chunks of at most :attr:`chunk_rows` rows (a memory
    limit, ``chunk_bytes`` or :data:`CHUNK_BYTES`), so no more than one chunk's per-row matrix
    exists at a time. ``pytensor.gradient.jacobian`` (quadratic in N) is never used. Figures:
    docs/data.md and ``benchmarks/bench_data_layer.py``.
    """

    @withholds_chains
    def __init__(
        self,
        model=None,
        vars: Sequence | None = None,
        shared_inputs: dict | None = None,
        *,
        initial_point: dict[str, np.ndarray] | None = None,
        compile_kwargs: dict[str, Any] | None = None,
        neighbouring: str = "substitute",
        gradient_mode: str = "auto",
        chunk_bytes: int | None = None,
        reproducible: bool = False,
    ) -> None:
        _check_row_settings(gradient_mode, chunk_bytes)
        # pm.compile keeps or removes parameter checks by the model context open when it runs (not by
        # `model`): recorded, so that another backend compiles these graphs as they are compiled here.
        try:
            self.check_bounds = bool(modelcontext(None).check_bounds)
        except TypeError:  # no model context: pm.compile keeps the checks
            self.check_bounds = True
        model = modelcontext(model)
        self.model = model
        self.value_vars = sorted_value_vars(model, vars)
        if not self.value_vars:
            raise ValueError("`vars` must name at least one free variable of the model. Found none.")
        initial_point = model.initial_point() if initial_point is None else initial_point
        if shared_inputs is None:
            shared_inputs = make_shared_replacements(initial_point, self.value_vars, model)
        self._compile_kwargs = dict(compile_kwargs or {})

        # Row-wise checks, walk and perturbation probe (row_loglik); then the prior and potentials.
        # The construction probes run at a public point (PyMC's default, initvals ignored), never at
        # `initial_point`, which may hold an initval= computed from the data.
        lik, self.n_rows, self.row_dim, row_data = row_loglik(model, neighbouring=neighbouring)
        self.neighbouring = neighbouring
        check_prior_reads_no_data(model, self.n_rows)
        prior = prior_graph(model)  # data-free: checked

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
        self._f_grad_batch = None
        # The two modes agree only to rounding, and the cost model's choice may differ between PyTensor
        # versions and backends: reproducible noise keeps the one arithmetic path it always had.
        self._gradient_mode_setting = "forward" if reproducible and gradient_mode == "auto" else gradient_mode
        self._gradient_mode: str | None = None
        self._gradient_mode_costs: dict[str, float] = {}  # per row, by mode (_choose_gradient_function)
        self._chunk_bytes = None if chunk_bytes is None else int(chunk_bytes)
        self._f_ratio_batch = None
        self._f_clipped_sum = None
        self._f_clipped_sum_safe = None
        self._clipped_sum_mode: str | None = None
        self._row_data_vars = row_data
        # The row data as indexable inputs and the per-row graph on them (_build_index_mode
        # wraps numpy constants: observed values, covariates, group indices baked into the graph).
        self._row_index_vars = list(row_data)
        self._lik_index = lik_flat
        self._row_dim_length = None
        if self.row_dim is not None and isinstance(model.dim_lengths.get(self.row_dim), SharedVariable):
            self._row_dim_length = model.dim_lengths[self.row_dim]
        self._theta_initial = self._flat_initial(initial_point)
        self.prior = PriorDensity(
            value_vars=self.value_vars,
            n_rows=self.n_rows,
            row_dim=self.row_dim,
            initial_theta=self._theta_initial,
            theta=theta,
            graph=prior_flat,
            f_prior=self._f_prior,
            continuous=self._continuous,
            compile_kwargs=self._compile_kwargs,
        )

    @property
    def subset_mode(self) -> str:
        """ "index" when a subset of B rows costs O(B), else "slice" (computed on all rows, then sliced)."""
        if self._subset_mode is None:
            self._subset_mode = "slice"
            if self._row_data_vars:
                self._build_index_mode()
        return self._subset_mode

    @property
    def _all_pm_data(self) -> bool:
        return all(isinstance(d, SharedVariable) for d in self._row_data_vars)

    def _index_numpy_rows(self) -> bool:
        """Turn numpy row constants into indexable inputs (``_lik_index``); False if it cannot be done.

        The graph is first simplified (PyTensor's ``canonicalize``: with constant rows, PyMC's
        logp broadcasts to a shape folded to the constant N, which the simplification drops
        where it is provably the row data's own shape), then every array with a row axis of
        length N — the constants the user passed and any constant folded from them — is
        wrapped, without a copy, in a shared variable whose row axis has no fixed length. It
        cannot be done when the graph then reads N other than to set a shape (the walk of
        add/remove neighbours, :func:`_row_axes`): indexed by a batch, it would read B.
        """
        from pytensor.graph.fg import FunctionGraph
        from pytensor.graph.rewriting.utils import rewrite_graph

        try:
            fgraph = FunctionGraph(outputs=[self._lik_flat], clone=True, copy_inputs=False, copy_orphans=False)
            [graph] = rewrite_graph(fgraph, include=("canonicalize",)).outputs
            data = _row_inputs([graph], self.n_rows, [])
            index_vars = [_indexable(d, k) for k, d in enumerate(data)]
            lik_index = _retyped(graph, dict(zip(data, index_vars, strict=True)))
            n_roots = [self._row_dim_length] if self._row_dim_length is not None else []
            [axis] = _row_axes([lik_index], index_vars, "", True, n_roots)
        except Exception:  # any failure: subsets are computed on all rows, as before
            return False
        if _is_n_mark(axis) or axis != 0 or not index_vars:
            return False
        self._row_index_vars, self._lik_index = index_vars, lik_index
        return True

    def _build_index_mode(self) -> None:
        """Compile the O(B) subset function and check it against the full vector; else slice mode.

        The subset-vs-slice probe evaluates rows ``[0, N - 1]`` through the index path at two
        parameter points and compares them with the same rows of the full vector, all on
        synthetic rows of the data's shapes and types (:func:`_synthetic_rows`), never on the
        data: whether the index path is used, or the model refused, depends on the graph alone.
        With numpy row arrays the full vector is the index path on all rows (the full graph
        holds the data as constants).

        When every row-indexed array is a ``pm.Data`` container, a difference is a
        :class:`ModelStructureError`, and exactly one case falls back to slice mode: the graph
        fixes the number of rows in a shape (``pt.specify_shape(x, (N,))``, a reshape to a
        constant shape), so that a strict subset cannot be evaluated, while the index path on
        *all* rows evaluates and equals the full vector (checked). Slice mode then computes
        every subset on all rows, which that check covers. Any other failure (the graph cannot
        be re-indexed or compiled, or fails on all rows too) is a :class:`ModelStructureError`
        naming only the error's type: its text may hold values.

        When some row data are numpy constants (``observed=np.array``, a covariate array), N is
        a constant of the graph the user wrote, and the model was accepted with it. The index
        path is used when it provably computes what the full vector does: the graph reads N
        only to set shapes (the walk of add/remove neighbours, :func:`_row_axes`) and the
        probe agrees. Otherwise, or if it cannot be built or evaluated, every subset is
        computed on all rows and sliced (slice mode), as before.
        """
        from pymc_dp.starts import public_initial_point

        lenient = not self._all_pm_data
        if lenient and not self._index_numpy_rows():
            return
        replace = {v: v[self._rows_input] for v in self._row_index_vars}
        if self._row_dim_length is not None:
            dim_length = self._row_dim_length
            replace[dim_length] = pt.cast(self._rows_input.shape[0], dim_length.dtype)
        try:
            lik_idx = graph_replace(self._lik_index, replace, strict=False)
            f_idx = self._compile([self._theta, self._rows_input], lik_idx)
        except Exception as error:  # any failure to build: refused, its text withheld
            failure = error
        else:
            failure = None
        if failure is not None:  # raised outside the handler: nothing chains to the withheld error
            if lenient:
                return
            raise self._not_indexable(failure)
        probe = np.array([0, self.n_rows - 1], dtype=np.int64)
        everything = np.arange(self.n_rows, dtype=np.int64)
        fixed_length = False
        # Evaluated on synthetic rows (the shared arrays hold them for the probe, then the data again):
        # whether the index path is used, or the model refused, depends on the graph, never on the data.
        with _synthetic_values(self._row_index_vars), np.errstate(all="ignore"):
            for [theta] in _probe_points([self._flat_initial(public_initial_point(self.model))]):
                theta = np.asarray(theta, dtype=np.float64)
                try:
                    # With numpy rows the full graph holds the data as constants: the index path on all
                    # rows stands in for it (the walk proved it reads N only to set shapes).
                    full = np.asarray(self._f_lik(theta) if not lenient else f_idx(theta, everything))
                except Exception:  # not evaluable on the synthetic rows here (data-free): nothing to compare
                    continue
                try:
                    subset = np.asarray(f_idx(theta, probe))
                except (AssertionError, ValueError):  # the documented case, if all rows evaluate (below)
                    fixed_length, subset = True, full[probe]
                except Exception as error:  # not the documented case: refused, text withheld
                    failure = error
                else:
                    failure = None
                if failure is not None:
                    if lenient:
                        return
                    raise self._not_indexable(failure)
                try:
                    all_rows = np.asarray(f_idx(theta, everything))
                except Exception as error:  # not the documented case: refused, text withheld
                    failure = error
                if failure is not None:
                    if lenient:
                        return
                    raise self._not_indexable(failure)
                if not (
                    np.allclose(subset, full[probe], equal_nan=True) and np.allclose(all_rows, full, equal_nan=True)
                ):
                    if lenient:
                        return
                    raise ModelStructureError(
                        "The log-likelihood of a subset of rows differs from the same rows computed on all rows: the "
                        "likelihood is not computed row by row, or it reads the number of rows from a shape or a "
                        "dim length (a subset has fewer rows). See docs/data.md; with the row arrays passed as numpy "
                        "arrays such a subset is computed on all rows."
                    )
        if fixed_length:  # the graph fixes the row count: every subset is computed on all rows and sliced
            return
        self._f_lik_idx, self._subset_mode = f_idx, "index"

    @staticmethod
    def _not_indexable(error: BaseException) -> ModelStructureError:
        return ModelStructureError(
            f"The log-likelihood cannot be evaluated on a subset of rows ({type(error).__name__} while indexing the "
            "row data; its message is withheld, it may hold data values). Only a graph that fixes the number of rows "
            "in a shape falls back to computing every subset on all rows (see docs/data.md); with the row arrays "
            "passed as numpy arrays a subset that cannot be indexed is computed on all rows."
        )

    # -- construction helpers -------------------------------------------------------------
    def _compile(self, inputs, outputs):
        fn = pm_compile(inputs, outputs, **self._compile_kwargs)
        fn.trust_input = True
        return fn

    def _flat_initial(self, initial_point) -> np.ndarray:
        return np.concatenate([np.asarray(initial_point[v.name], dtype=float).ravel() for v in self.value_vars])

    def _check_theta(self, theta: np.ndarray) -> np.ndarray:
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (self.n_params,):
            raise ValueError(f"`theta` must be a flat vector of length {self.n_params}. Found shape {theta.shape}.")
        return theta

    def _check_rows(self, rows) -> np.ndarray:
        rows = np.asarray(rows)
        if rows.ndim != 1 or not np.issubdtype(rows.dtype, np.integer):
            raise ValueError(f"`rows` must be a 1-d integer index array. Found dtype {rows.dtype}, shape {rows.shape}.")
        if rows.size and (rows.min() < 0 or rows.max() >= self.n_rows):  # N is not shown: private under add/remove
            raise ValueError("`rows` must index rows of the data (0 <= index < N). Found an index out of that range.")
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
            return self._full_loglik(theta)
        rows = self._check_rows(rows)
        if self.subset_mode == "index":
            return evaluate_rowwise(self._f_lik_idx, [theta], [rows], tail=(), summed=False)
        return self._full_loglik(theta)[rows]

    def _full_loglik(self, theta: np.ndarray) -> np.ndarray:
        """All rows' log-likelihoods; in index mode a row that cannot be evaluated is NaN (:func:`evaluate_rowwise`).

        In slice mode (the graph fixes N in a shape) no row can be evaluated on its own, and
        an error raised by the data ends the run (docs/privacy.md, "What the guarantee does
        not cover").
        """
        try:
            return np.asarray(self._f_lik(theta))
        except Exception:
            if self.subset_mode != "index":
                raise
        everything = np.arange(self.n_rows, dtype=np.int64)
        return evaluate_rowwise(self._f_lik_idx, [theta], [everything], tail=(), summed=False)

    def grad_rows(self, theta: np.ndarray, rows: np.ndarray | slice | None = None) -> np.ndarray:
        """Per-row gradient matrix (B, P) of the log-likelihood w.r.t. θ. Raw data: pass it to a mechanism.

        ``rows`` is an index array, a slice of rows (one of :meth:`row_chunks`: in index mode
        a view of the row data, not a copy) or None for all rows. Computed in the
        :attr:`gradient_mode` chosen for the model.
        """
        self._require_continuous()
        theta = self._check_theta(theta)
        if isinstance(rows, slice):
            rows = self._check_slice(rows)
        elif rows is not None:
            rows = self._check_rows(rows)
        if self.subset_mode == "index":
            self.warm_gradient()
            if rows is None:
                data = [v.get_value(borrow=True) for v in self._row_index_vars]
            elif isinstance(rows, slice):
                data = [v.get_value(borrow=True)[rows] for v in self._row_index_vars]
            else:
                data = self._gather(rows)
            return evaluate_rowwise(self._f_grad_batch, [theta], data, tail=(self.n_params,), summed=False)
        self.warm_gradient()
        jac = np.asarray(self._f_grad_full(theta))
        return jac if rows is None else jac[rows]

    def row_chunks(self, rows: np.ndarray | None = None) -> list[slice] | list[np.ndarray]:
        """Row selections whose per-row gradient matrices each fit the memory limit.

        For all rows (``rows=None``) contiguous slices; for an index array, consecutive
        pieces of it. Each chunk holds at most :attr:`chunk_rows` rows. A chunk is a row
        selection only (no data); pass it to :meth:`grad_rows`. In slice mode (the graph
        fixes N) all rows are one chunk: a subset cannot be evaluated on its own.
        """
        size = self.chunk_rows
        if rows is None:
            if self.subset_mode != "index":
                return [slice(0, self.n_rows)]
            return [slice(start, min(start + size, self.n_rows)) for start in range(0, self.n_rows, size)]
        rows = self._check_rows(rows)
        return [rows[start : start + size] for start in range(0, rows.size, size)] or [rows]

    @property
    def chunk_rows(self) -> int:
        """Rows per chunk of a full-data pass: the memory limit ÷ the bytes of one row's gradient work.

        One row costs 8 bytes × P × 4 (the per-row gradient matrix and the intermediates of
        its graph that have its size) plus the row's data; the limit is ``chunk_bytes``
        (default :data:`CHUNK_BYTES`, 256 MiB). At least 64 rows.
        """
        limit = CHUNK_BYTES if self._chunk_bytes is None else self._chunk_bytes
        _ = self.subset_mode  # the row data as indexed
        data_bytes = sum(_value_of(v)[:1].nbytes for v in self._row_index_vars)
        per_row = 8 * self.n_params * 4 + data_bytes
        return max(64, int(limit // per_row))

    def _check_slice(self, rows: slice) -> slice:
        start, stop, step = rows.indices(self.n_rows)
        if step != 1 or rows.start is None or rows.stop is None or not 0 <= start <= stop <= self.n_rows:
            raise ValueError("`rows` as a slice must be `slice(start, stop)` within the rows. Found another slice.")
        return slice(start, stop)

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
            return self._full_loglik(theta_new)[rows] - self._full_loglik(theta)[rows]
        if self._f_ratio_batch is None:
            self._f_ratio_batch = self._compile_batch_ratio()
        return evaluate_rowwise(self._f_ratio_batch, [theta, theta_new], self._gather(rows), tail=(), summed=False)

    def _gather(self, rows: np.ndarray) -> list[np.ndarray]:
        """The row-indexed arrays at ``rows`` (``np.take``: about 4x faster than fancy indexing)."""
        return [np.take(v.get_value(borrow=True), rows, axis=0) for v in self._row_index_vars]

    def _batch_graph(self) -> tuple[list[Variable], Variable]:
        """Placeholders for gathered batches of the row data, and the per-row graph on them."""
        batch = [_batch_placeholder(v) for v in self._row_index_vars]
        replace = dict(zip(self._row_index_vars, batch, strict=True))
        if self._row_dim_length is not None:
            replace[self._row_dim_length] = pt.cast(batch[0].shape[0], self._row_dim_length.dtype)
        return batch, graph_replace(self._lik_index, replace, strict=False)

    def _compile_batch_ratio(self):
        """Ratio of the log-likelihood at two points on a gathered batch of rows."""
        batch, lik_batch = self._batch_graph()
        theta_new = self._theta.type("theta_new")
        ratio = graph_replace(lik_batch, {self._theta: theta_new}, strict=False) - lik_batch
        return self._compile([self._theta, theta_new, *batch], ratio)

    def warm_gradient(self) -> None:
        """Build the per-row gradient function now (raises if the likelihood is not differentiable).

        In index mode this chooses :attr:`gradient_mode` (``"auto"``: a cost model, see there)
        and compiles one function of θ and a batch of rows, used for subsets, chunks and all
        rows alike; in slice mode the all-rows forward-mode Jacobian.
        """
        self._require_continuous()
        if self.subset_mode == "index":
            if self._f_grad_batch is None:
                self._gradient_mode, self._f_grad_batch = self._choose_gradient_function()
        elif self._f_grad_full is None:
            self._gradient_mode = "forward"
            self._f_grad_full = self._compile_forward_grad()

    @property
    def gradient_mode(self) -> str:
        """How the per-row gradient matrix is computed: ``"forward"`` or ``"reverse"`` (chosen on first use).

        - ``"forward"``: one Jacobian-vector product vectorised over the P unit tangents; its
          cost is about P passes through the tangent graph, cheap where θ enters through a dot
          product (GLMs).
        - ``"reverse"``: what ``vmap(grad(row_loglik))`` does: one row's log-likelihood, its
          θ replaced by a per-row copy Θ (B × P) and vectorised over the rows; the gradient of
          the summed log-likelihood with respect to Θ is the per-row gradient matrix, at the
          cost of about one reverse pass (triangular solves, special functions).

        ``gradient_mode="auto"`` (the default) compiles both as functions of θ and a batch of
        rows and keeps the one a cost model estimates cheaper per row (forward on a tie): the
        elementary operations of every node of each compiled graph, from its op and the
        backend (elementwise scalar ops weighted by kind, and in C by the inputs read; matrix
        products and solves by their multiply-adds; a ``BatchedDot`` or ``Blockwise`` loop per
        iteration; views free) and its shapes, which PyTensor's shape
        inference gives for a batch of :data:`COST_PROBE_ROWS` rows of zeros (data-free inputs
        of the data's shapes and types). Nothing is timed and no data value is read, so the
        same model gets the same mode on any machine and under any load. The reverse form is
        dropped if it cannot be built, compiled or run on that batch, or warns (an op without a
        vectorised form); if the cost of either cannot be estimated, forward mode. Slice mode
        is always forward. Both give the same matrix (tested to 1e-10), but only to rounding:
        with ``reproducible=True`` (reproducible noise) ``"auto"`` is forward mode, so that
        reruns are bit-identical. Figures: ``benchmarks/gradient_modes.py``.
        """
        self.warm_gradient()
        return self._gradient_mode

    def _choose_gradient_function(self):
        """(mode, compiled function of θ and a batch of rows) for the per-row gradient matrix.

        ``"auto"``: the mode whose compiled graph :func:`_graph_cost` estimates cheaper per row
        (:attr:`_gradient_mode_costs`), forward on a tie; never timed, so the same model gives
        the same mode on any machine and under any load. The reverse form is dropped (forward
        mode) when it cannot be built, compiled or run on a data-free batch, or warns.
        """
        forward = None
        if self._gradient_mode_setting in ("auto", "forward"):
            forward = self._compile_batch_grad("forward")
            if self._gradient_mode_setting == "forward":
                return "forward", forward
        theta = self._public_theta()
        probe = [theta, *self._probe_batch(COST_PROBE_ROWS)]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # e.g. Numba's object mode for an op without a vectorised form
                reverse = self._compile_batch_grad("reverse")
                with np.errstate(all="ignore"):
                    reverse(*probe)
        except Exception:  # no reverse form for this graph: forward mode
            if forward is None:
                forward = self._compile_batch_grad("forward")
            return "forward", forward
        if forward is None:
            return "reverse", reverse
        self._gradient_mode_costs = self._estimate_costs({"forward": forward, "reverse": reverse}, theta)
        cheaper = self._gradient_mode_costs["reverse"] < self._gradient_mode_costs["forward"]
        return ("reverse", reverse) if cheaper else ("forward", forward)

    def _estimate_costs(self, functions: Mapping[str, Any], theta: np.ndarray) -> dict[str, float]:
        """Estimated elementary operations per row of each compiled gradient function (:func:`_graph_cost`).

        The marginal cost of a row: the estimate on 2B rows of zeros less that on B rows
        (B = :data:`COST_PROBE_ROWS`), divided by B. Nodes whose work does not grow with the
        rows (shape checks, scalar pieces of θ) cancel: the compiled graph can hold a few more
        or fewer of them depending on which constants PyTensor merged, and they must not tip
        the choice. An estimate that cannot be made (an op without shape inference or a
        Python implementation) is infinite for both modes, so that the choice falls to
        forward mode.
        """
        sizes = (COST_PROBE_ROWS, 2 * COST_PROBE_ROWS)
        probes = [[theta, *self._probe_batch(size)] for size in sizes]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                costs = {
                    mode: _graph_cost(fn.maker.fgraph, probes, _compiled_backend(fn)) for mode, fn in functions.items()
                }
        except Exception:
            return dict.fromkeys(functions, np.inf)
        return {mode: (large - small) / COST_PROBE_ROWS for mode, (small, large) in costs.items()}

    def _public_theta(self) -> np.ndarray:
        """θ at PyMC's default initial point, every ``initval=`` ignored (never the data's)."""
        from pymc_dp.starts import public_initial_point

        return self._flat_initial(public_initial_point(self.model))

    def _probe_batch(self, size: int = COST_PROBE_ROWS) -> list[np.ndarray]:
        """Data-free inputs of the row data's shapes and types (zeros), for the cost model and compile checks."""
        return [np.zeros((size, *np.shape(v.get_value(borrow=True))[1:]), dtype=v.dtype) for v in self._row_index_vars]

    def _compile_batch_grad(self, mode: str):
        """Per-row gradient matrix of θ and a batch of rows, in forward or reverse mode."""
        batch, lik_batch = self._batch_graph()
        if mode == "forward":
            return self._compile([self._theta, *batch], self._forward_jacobian(lik_batch))
        return self._compile([self._theta, *batch], self._reverse_jacobian(batch, lik_batch))

    def _reverse_jacobian(self, batch: Sequence[Variable], lik_batch: Variable) -> Variable:
        """(rows × P) Jacobian of ``lik_batch`` in reverse mode, vectorised over rows with a per-row θ.

        One row's log-likelihood (each batch input replaced by one row, kept as a 1-row batch)
        is vectorised over the rows with θ replaced by Θ, θ repeated per row; the gradient of
        the summed result with respect to Θ has row i = ∇θ log p(xᵢ | θ).
        """
        one = [pt.tensor(f"{b.name}_row", dtype=b.dtype, shape=b.type.shape[1:]) for b in batch]
        lik_one = graph_replace(lik_batch, {b: r[None] for b, r in zip(batch, one, strict=True)}, strict=False)[0]
        per_row_theta = pt.alloc(self._theta, batch[0].shape[0], self.n_params)
        replace = {**dict(zip(one, batch, strict=True)), self._theta: per_row_theta}
        lik_rows = vectorize_graph(lik_one, replace)
        return pytensor.grad(lik_rows.sum(), per_row_theta)

    def _forward_jacobian(self, lik: Variable) -> Variable:
        """(rows × P) Jacobian of the per-row vector ``lik`` w.r.t. θ: one JVP vectorised over the unit tangents."""
        tangent = pt.vector("tangent", dtype=self._theta.dtype)
        jvp = _jvp(lik, self._theta, tangent)
        return vectorize_graph(jvp, {tangent: pt.eye(self.n_params, dtype=self._theta.dtype)}).T

    # -- clipped gradient sums ------------------------------------------------------------
    def clipped_grad_sum(self, theta: np.ndarray, bound: float, rows: np.ndarray | slice | None = None) -> np.ndarray:
        """Σᵢ clip_L2(∇θ log p(xᵢ | θ), bound) over ``rows``, shape (P,). Raw data: pass it to a mechanism.

        Equal to ``clipped_sum_l2(self.grad_rows(theta, rows), bound)``
        (:func:`pymc_dp.mechanisms.clipping.clipped_sum_l2`: each row's gradient scaled to L2
        norm at most ``bound``, rows with a non-finite gradient left out); for a model with a
        linear predictor in one compiled pass that never forms the per-row matrix
        (:attr:`clipped_sum_mode`). ``rows`` as for :meth:`grad_rows`; pass one of
        :meth:`row_chunks` at a time to bound memory.
        """
        from pymc_dp.clip_math import _check_bound, clipped_sum_l2

        self._require_continuous()
        theta = self._check_theta(theta)
        bound = _check_bound("bound", bound)
        if self.subset_mode != "index":
            return clipped_sum_l2(self.grad_rows(theta, rows), bound)
        if isinstance(rows, slice):
            data = [v.get_value(borrow=True)[self._check_slice(rows)] for v in self._row_index_vars]
        elif rows is None:
            data = [v.get_value(borrow=True) for v in self._row_index_vars]
        else:
            data = self._gather(self._check_rows(rows))
        if self._clipped_sum_mode is None:
            self._clipped_sum_mode, self._f_clipped_sum = self._choose_clipped_sum_function()
        tail = (self.n_params,)
        if self._f_clipped_sum is None:
            return clipped_sum_l2(evaluate_rowwise(self._f_grad_batch, [theta], data, tail=tail, summed=False), bound)
        bound_arg = np.asarray(bound, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):  # inf × 0 from a left-out row: checked below
            total = evaluate_rowwise(self._f_clipped_sum, [theta, bound_arg], data, tail=tail, summed=True)
        if not np.all(np.isfinite(total)):  # a left-out row with a non-finite covariate: rows zeroed first
            if self._f_clipped_sum_safe is None:
                self._f_clipped_sum_safe = self._compile_linear_clipped_sum(safe=True)
            total = evaluate_rowwise(self._f_clipped_sum_safe, [theta, bound_arg], data, tail=tail, summed=True)
        return total

    @property
    def clipped_sum_mode(self) -> str:
        """How :meth:`clipped_grad_sum` computes the clipped sum (chosen from the graph on first use).

        - ``"linear"``: the model reads some parameter blocks only through products
          ``A @ w`` of row data ``A`` (B × K) with a block ``w`` of θ (``X @ beta``: GLMs,
          linear predictors). Row i's gradient with respect to such a block is
          gᵢ ⊗ Aᵢ, with gᵢ the row's gradient with respect to its own ``(A @ w)ᵢ``, so its
          squared norm is ‖gᵢ‖²‖Aᵢ‖² (the "ghost norm" of DP-SGD for linear layers); the
          other blocks get per-row copies (reverse mode, vectorised over rows). No (B × P)
          matrix is formed: one pass gives every row's gradient norm, hence its clip factor
          cᵢ, and the clipped sum, the vector–Jacobian product Σᵢ cᵢ ∇θ log p(xᵢ | θ), is
          assembled from the same per-row pieces in the same compiled function. Used when
          the blocks so read and the others are disjoint parts of θ (checked on the graph).
        - ``"forward"`` or ``"reverse"``: otherwise, the per-row gradient matrix of one chunk
          in :attr:`gradient_mode` (:meth:`grad_rows`), clipped and summed by
          :func:`~pymc_dp.mechanisms.clipping.clipped_sum_l2`.

        Both give :func:`pymc_dp.mechanisms.clipping.clipped_sum_l2` of :meth:`grad_rows`
        (tested to 1e-10). The choice depends on the graph only, never on data values.
        """
        if self.subset_mode != "index":
            self.warm_gradient()
            return self._gradient_mode
        if self._clipped_sum_mode is None:
            self._clipped_sum_mode, self._f_clipped_sum = self._choose_clipped_sum_function()
        return self._clipped_sum_mode

    def _choose_clipped_sum_function(self):
        """(mode, compiled function of θ, the bound and a batch of rows) for :meth:`clipped_grad_sum`."""
        self._require_continuous()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                fn = self._compile_linear_clipped_sum(safe=False)
                fn(self._theta_initial, np.asarray(1.0), *self._probe_batch(64))
            return "linear", fn
        except Exception:  # _NotLinear, or the linear form cannot be built or compiled here: the per-row matrix
            pass
        # The per-row matrix of the chunk, clipped and summed in NumPy: measured faster than the same
        # steps compiled into the matrix's graph (one more B × P temporary there).
        return self.gradient_mode, None

    def _compile_linear_clipped_sum(self, safe: bool):
        """The linear form of the clipped sum, a function of θ, the bound and a batch (:func:`_linear_clipped_sum`)."""
        bound = pt.dscalar("bound")
        batch, lik_batch = self._batch_graph()
        total = _linear_clipped_sum(self._theta, self.n_params, batch, lik_batch, bound, safe=safe)
        return self._compile([self._theta, bound, *batch], total)

    def _compile_forward_grad(self):
        """Full-data Jacobian in forward mode: one JVP vectorised over the P unit tangents."""
        return self._compile([self._theta], self._forward_jacobian(self._lik_flat))

    def prior_logp(self, theta: np.ndarray) -> float:
        """log prior + log|Jacobian| of the transforms (+ data-free potentials). Data-free."""
        return self.prior.prior_logp(theta)

    def prior_logp_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """:meth:`prior_logp` and its gradient w.r.t. θ. Data-free."""
        return self.prior.prior_logp_and_grad(theta)


class _NotLinear(Exception):
    """The graph has no parameter block read only through ``A @ w`` products (see :func:`_linear_clipped_sum`)."""


_REARRANGING_OPS: tuple[type, ...] | None = None


def _rearranging_ops() -> tuple[type, ...]:
    """Ops that only select or rearrange their first input's elements (no arithmetic)."""
    global _REARRANGING_OPS
    if _REARRANGING_OPS is None:
        from pytensor.compile.ops import DeepCopyOp, ViewOp
        from pytensor.tensor.elemwise import DimShuffle
        from pytensor.tensor.shape import Reshape, SpecifyShape
        from pytensor.tensor.subtensor import Subtensor

        _REARRANGING_OPS = (Subtensor, Reshape, SpecifyShape, DimShuffle, ViewOp, DeepCopyOp)
    return _REARRANGING_OPS


def _selection_coordinates(var: Variable, theta: Variable, n_params: int) -> np.ndarray | None:
    """The coordinates of θ that ``var`` holds, if ``var`` only selects and rearranges θ's elements, else None.

    ``var`` qualifies when every op from θ to it is a basic slice, reshape, shape check or
    dimension shuffle whose other inputs do not depend on θ; its coordinates are then read
    by evaluating it at θ = (0, 1, …, P − 1) (data-free). Repeated coordinates: None.
    """
    v = var
    while v is not theta:
        node = v.owner
        if node is None or not isinstance(node.op, _rearranging_ops()) or v is not node.outputs[0]:
            return None
        if any(theta in ancestors([i]) for i in node.inputs[1:]):
            return None
        v = node.inputs[0]
    fn = pytensor.function([theta], var, mode="FAST_COMPILE", on_unused_input="ignore")
    coords = np.asarray(fn(np.arange(n_params, dtype=theta.dtype))).ravel()
    if coords.size != np.unique(coords).size:
        return None
    return coords.astype(np.int64)


def _is_matrix_product(node) -> bool:
    from pytensor.tensor.blockwise import Blockwise
    from pytensor.tensor.math import Dot

    op = node.op
    core = op.core_op if isinstance(op, Blockwise) else op
    return isinstance(core, Dot) and len(node.inputs) == 2 and node.inputs[0].ndim == 2


def _depends(outputs: Sequence[Variable], roots: Sequence[Variable]) -> set[Variable]:
    """The variables among ``outputs``' ancestors that depend on any of ``roots`` (roots included)."""
    from pytensor.graph.traversal import toposort

    found = set(roots)
    for node in toposort(list(outputs)):
        if any(i in found for i in node.inputs):
            found.update(node.outputs)
    return found


def _squares_per_row(x: Variable) -> Variable:
    return (x**2).sum(axis=tuple(range(1, x.ndim))) if x.ndim > 1 else x**2


def _linear_clipped_sum(
    theta: Variable,
    n_params: int,
    batch: Sequence[Variable],
    lik: Variable,
    bound: Variable,
    safe: bool = True,
    precomputed: bool = False,
) -> Variable | tuple[Variable, list[tuple[Variable, Variable, Variable, Variable]]]:
    """Σᵢ clip_L2(∇θ log p(xᵢ | θ), bound) over the rows of ``batch``, without the (B × P) gradient matrix.

    Finds the products ``z = A @ w`` with ``A`` (B × K) computed from the rows alone and ``w``
    (K or K × m) a selection of θ's coordinates; cuts the graph there (``z`` becomes an input
    Z); gives every remaining maximal selection ``s`` of θ a per-row copy (B × |s|) and
    vectorises one row's log-likelihood over the rows (reverse mode). Row i's gradient is
    then gᵢ ⊗ Aᵢ on the coordinates of each ``w`` (gᵢ = ∂ log p(xᵢ)/∂Zᵢ) and the row of the
    per-row copy's gradient on those of each ``s``; when all these coordinate sets are
    disjoint, the squared norm is Σ_w ‖gᵢ‖²‖Aᵢ‖² + Σ_s ‖∂ log p(xᵢ)/∂sᵢ‖². With the clip
    factors cᵢ of those norms (:func:`pymc_dp.mechanisms.clipping.clip_weights_graph`, 0 for
    a non-finite norm) the clipped sum is Aᵀ(c ⊙ g) on each ``w``'s coordinates and
    Σᵢ cᵢ ∂ log p(xᵢ)/∂sᵢ on each ``s``'s: the vector–Jacobian product with weights c, from
    the same per-row pieces (rows left out are set to zero, never multiplied by 0). With
    ``safe=False`` the rows of A are not set to zero first (one pass over A less): the result
    is the same unless a left-out row has a non-finite entry in A, and then it is not finite.

    With ``precomputed=True`` each ``A`` and its per-row squared norms ‖Aᵢ‖² — functions of
    the rows alone — become inputs of the graph, to be computed once per run instead of on
    every release (the JAX backend, :mod:`pymc_dp.backends.jax_rows`): two passes over A
    per release (``A @ w`` and Aᵀ(c ⊙ g)) instead of four. Returns ``(total, pieces)`` with
    ``pieces`` a list of ``(A, ‖A‖², A input, ‖A‖² input)``: the expressions in the rows and
    the inputs to feed them to, A's input with every non-finite row set to zero (such a row's
    norm input stays non-finite, so the row is left out as with ``safe=True``).

    Raises
    ------
    _NotLinear
        No such product, or the coordinate sets overlap, or θ reaches the log-likelihood
        some other way than through selections.
    """
    rowwise = _depends([lik], list(batch))
    with_theta = _depends([lik], [theta])
    linear, products = [], []  # (z, A, coordinates of w); the product nodes
    for node in _toposort_nodes([lik]):
        if not _is_matrix_product(node):
            continue
        a, w = node.inputs
        if a in with_theta or a not in rowwise or w in rowwise or w not in with_theta or w.ndim not in (1, 2):
            continue
        coords = _selection_coordinates(w, theta, n_params)
        if coords is not None:
            linear.append((node.outputs[0], a, coords))
            products.append(node)
    if not linear:
        raise _NotLinear
    z_inputs = [z.type() for z, _, _ in linear]
    [cut] = graph_replace([lik], {z: zi for (z, _, _), zi in zip(linear, z_inputs, strict=True)}, strict=False)
    # The remaining ways θ enters: its maximal selections (each used by something that is not a rearrangement).
    cut_rowwise, cut_theta = _depends([cut], [*batch, *z_inputs]), _depends([cut], [theta])
    selections, seen = [], set()
    for node in _toposort_nodes([cut]):
        for inp in node.inputs:
            if inp in seen or inp not in cut_theta or inp in cut_rowwise:
                continue
            keeps_selecting = isinstance(node.op, _rearranging_ops()) and inp is node.inputs[0]
            if keeps_selecting and node.outputs[0] not in cut_rowwise:
                continue  # its output (or one further down) is the maximal selection
            coords = _selection_coordinates(inp, theta, n_params)
            if coords is not None:  # else computed from selections met earlier in this walk
                seen.add(inp)
                selections.append((inp, coords))
    all_coords = np.concatenate([c for _, _, c in linear] + [c for _, c in selections])
    if all_coords.size != np.unique(all_coords).size:
        raise _NotLinear
    placeholders = [s.type() for s, _ in selections]
    [cut] = graph_replace([cut], dict(zip([s for s, _ in selections], placeholders, strict=True)), strict=False)
    if theta in ancestors([cut]):
        raise _NotLinear
    # One row, vectorised over the rows with per-row copies of the selections.
    one = [pt.tensor(dtype=b.dtype, shape=b.type.shape[1:]) for b in batch]
    z_one = [pt.tensor(dtype=z.dtype, shape=z.type.shape[1:]) for z in z_inputs]
    first = {**{b: r[None] for b, r in zip(batch, one, strict=True)}}
    first.update({z: r[None] for z, r in zip(z_inputs, z_one, strict=True)})
    lik_one = graph_replace(cut, first, strict=False)[0]
    n_rows = batch[0].shape[0]
    copies = [pt.alloc(s, n_rows, *s.shape) for s, _ in selections]
    replace = {**dict(zip(one, batch, strict=True)), **dict(zip(z_one, z_inputs, strict=True))}
    replace.update(dict(zip(placeholders, copies, strict=True)))
    lik_rows = vectorize_graph(lik_one, replace)
    grads = pytensor.grad(lik_rows.sum(), [*copies, *z_inputs], disconnected_inputs="ignore")
    per_row = [g if g.ndim == 2 else g.reshape((g.shape[0], -1)) for g in grads]  # (B, |s|) and (B, m)
    if precomputed:  # A and ‖Aᵢ‖² as inputs, computed once per run
        a_inputs = [a.type() for _, a, _ in linear]
        squares = [_squares_per_row(a) for _, a, _ in linear]
        square_inputs = [sq.type() for sq in squares]
    else:
        a_inputs = [a for _, a, _ in linear]
        square_inputs = [_squares_per_row(a) for _, a, _ in linear]
    norms_sq = pt.zeros_like(lik, dtype=lik.dtype)
    for g in per_row[: len(copies)]:
        norms_sq = norms_sq + _squares_per_row(g)
    for g, square in zip(per_row[len(copies) :], square_inputs, strict=True):
        norms_sq = norms_sq + _squares_per_row(g) * square
    from pymc_dp.clip_math import clip_weights_graph

    weights, finite = clip_weights_graph(norms_sq, bound)
    kept = finite[:, None]
    total = pt.zeros((n_params,), dtype=theta.dtype)
    for g, (_, coords) in zip(per_row[: len(copies)], selections, strict=True):
        part = pt.switch(kept, g * weights[:, None], 0.0).sum(axis=0)
        total = pt.inc_subtensor(total[pt.constant(coords)], part)
    for g, a, (_, _, coords) in zip(per_row[len(copies) :], a_inputs, linear, strict=True):
        scaled = pt.switch(kept, g * weights[:, None], 0.0)  # (B, m)
        if safe and not precomputed:  # rows left out set to zero in A too: a non-finite Aᵢ is never multiplied by 0
            a = pt.switch(kept, a, 0.0)
        part = pt.dot(a.T, scaled)  # (K, m), w's layout
        total = pt.inc_subtensor(total[pt.constant(coords)], part.ravel())
    if not precomputed:
        return graph_replace(total, {zi: z for (z, _, _), zi in zip(linear, z_inputs, strict=True)}, strict=False)
    # z = A @ w read from A's input (its non-finite rows are zero there, and left out by their norms)
    z_from_inputs = [
        node.op.make_node(a_in, node.inputs[1]).outputs[0] for node, a_in in zip(products, a_inputs, strict=True)
    ]
    total = graph_replace(total, dict(zip(z_inputs, z_from_inputs, strict=True)), strict=False)
    pieces = [
        (a, sq, a_in, sq_in)
        for (_, a, _), sq, a_in, sq_in in zip(linear, squares, a_inputs, square_inputs, strict=True)
    ]
    return total, pieces


def _toposort_nodes(outputs: Sequence[Variable]) -> list:
    from pytensor.graph.traversal import toposort

    return list(toposort(list(outputs)))
