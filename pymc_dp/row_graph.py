"""The per-row log-likelihood graph, checked row-wise, and the data-free probes that test it.

:func:`row_loglik` builds the vector of per-row log-likelihoods from the model, applies every
``check_parameters`` condition row by row (:func:`_row_term`), runs the allow-list walk of
:mod:`pymc_dp.model_structure` and a one-row perturbation probe on synthetic rows
(:func:`_perturbation_probe`), and guards indices read from the rows (:func:`_guard_row_indexing`).
The graph holds the row data as inputs but nothing here evaluates the real rows, except
:func:`evaluate_rowwise`, which the data layer (:mod:`pymc_dp.data`) and its backends call with
the rows they hold. The helpers at the end rebuild the graph for a batch of rows and its
per-row Jacobians (forward and reverse mode).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.graph.traversal import ancestors

from pymc_dp.clip_graph import _toposort_nodes
from pymc_dp.model_structure import (
    ModelStructureError,
    _array_shape,
    _check_rowwise,
    _check_rowwise_params,
    _model_row_inputs,
    _row_dim_lengths,
    _row_structure,
)

__all__ = [
    "PROBE_ROWS",
    "ROW_PLACEHOLDER_NAME",
    "evaluate_rowwise",
    "probe_row_count",
    "reads_row_placeholder",
    "row_loglik",
]

#: The name every :func:`pymc_dp.row_placeholder` constant carries, so that a model built on placeholders is recognised.
ROW_PLACEHOLDER_NAME = "pymc_dp.row_placeholder"


def reads_row_placeholder(model: Any) -> bool:
    """Whether ``model``'s likelihood reads a :func:`pymc_dp.row_placeholder` (by the constant's name: nothing read).

    Such a model holds zeros of the rows' shape, not rows: fitting it would fit the zeros (a
    confidently wrong posterior). Only the one-call route with ``rows=`` releases in their place.
    """
    from pytensor.graph.traversal import ancestors

    observed = [*model.observed_RVs, *(model.rvs_to_values[rv] for rv in model.observed_RVs)]
    return any(getattr(v, "name", None) == ROW_PLACEHOLDER_NAME for v in ancestors(observed))


def _jvp(output: Variable, wrt: Variable, tangent: Variable) -> Variable:
    pushforward = getattr(pytensor.gradient, "pushforward", None)
    if pushforward is not None:  # PyTensor 3 (PyMC 6): Rop is deprecated
        return pushforward(output, wrt, tangent)
    return pytensor.gradient.Rop(output, wrt, tangent)


def _rowsum(term: Variable) -> Variable:
    return term if term.ndim <= 1 else term.sum(axis=tuple(range(1, term.ndim)))


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
    if reads_row_placeholder(model):  # from the graph's names: nothing read
        raise ModelStructureError(
            "`model` must hold its rows: its likelihood reads pmdp.row_placeholder stand-ins (zeros of the rows' "
            "shape), which would be fitted in place of the data. Rows that stay on a Dask cluster are read only by "
            'pmdp.sample(epsilon=..., rows={"X": ..., "y": ...}) without a step and by pmdp.DPADVI(..., '
            'backend=pmdp.DaskBackend(client, rows={"X": ..., "y": ...})) (docs/dask.md). Found a row placeholder in '
            "the likelihood."
        )
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


def _perturbed_row(rows: np.ndarray, row: int = 0) -> np.ndarray:
    """A copy of synthetic ``rows`` with ``row`` (0 or −1) changed (integers to 1, booleans negated, floats to the
    neighbouring row's value)."""
    copy = np.array(rows, copy=True)
    if copy.shape[0] < 2:
        return copy
    if np.issubdtype(copy.dtype, np.bool_):
        copy[row] = ~copy[row]
    elif np.issubdtype(copy.dtype, np.integer):
        copy[row] = 1
    else:
        copy[row] = copy[1 if row == 0 else -2]
    return copy


@contextlib.contextmanager
def _synthetic_values(shared: Sequence[SharedVariable], n_rows: int | None = None) -> Iterator[None]:
    """Hold synthetic rows (:func:`_synthetic_rows`) in ``shared`` for the body, then the data again.

    ``n_rows`` rows each (default: as many as each holds); the variables' types must then leave
    the number of rows open.
    """
    saved = [v.get_value(borrow=True) for v in shared]
    try:
        for v, value in zip(shared, saved, strict=True):
            shape = np.shape(value) if n_rows is None else (n_rows, *np.shape(value)[1:])
            v.set_value(_synthetic_rows(shape, np.asarray(value).dtype), borrow=True)
        yield
    finally:
        for v, value in zip(shared, saved, strict=True):
            v.set_value(value, borrow=True)


#: The most synthetic rows the perturbation probe evaluates (:func:`_perturbation_probe`): a graph whose row
#: count is left open is probed on this many, whatever N, so that the probe's memory and time do not grow with N.
#: Odd and prime, so that a parameter's length rarely equals it.
PROBE_ROWS = 257


def _probe_function(
    inputs: Sequence[Variable], lik: Variable, row_data: Sequence[Variable], open_rows: bool
) -> Callable[..., Any] | None:
    """The probe's compiled graph of ``inputs`` and stand-ins of ``row_data`` (None: it cannot be rebuilt so).

    With ``open_rows`` each stand-in leaves the number of rows open (a row array held as a
    constant fixes it in its type), and the graph is rebuilt for it; otherwise the stand-ins
    have the arrays' own types, as the rows have.
    """
    if open_rows:
        placeholders = [pt.tensor(dtype=d.dtype, shape=(None, *d.type.shape[1:])) for d in row_data]
        try:
            graph = _retyped(lik, dict(zip(row_data, placeholders, strict=True)))
        except Exception:  # a node that cannot take an open row count: probed on all N rows instead
            return None
    else:
        placeholders = [d.type() for d in row_data]
        graph = graph_replace(lik, dict(zip(row_data, placeholders, strict=True)), strict=False)
    return pytensor.function([*inputs, *placeholders], graph, mode="FAST_COMPILE", on_unused_input="ignore")


def _probe_moves(
    fn: Callable[..., Any], values: Sequence[np.ndarray], row_data: Sequence[Variable], n_probe: int
) -> bool | None:
    """Whether changing synthetic row 0, or the last row, moves another row's value (None: not evaluable on
    ``n_probe`` rows, or not finite on any row at any point, where a comparison would show nothing)."""
    synthetic = [_synthetic_rows((n_probe, *_array_shape(d)[1:]), d.dtype) for d in row_data]
    moved, evaluated = False, False
    for point in _probe_points(values):
        try:
            with np.errstate(all="ignore"):
                before = np.asarray(fn(*point, *synthetic), dtype=float)
        except Exception:  # not evaluable on the synthetic rows here (data-free): nothing to compare
            continue
        if not np.any(np.isfinite(before)):  # NaN or ±∞ on every row: equal_nan would hide any mixing
            continue
        for row in (0, -1):  # the first and the last row: a graph may mix only the rows past some index
            others = np.ones(before.shape[0], dtype=bool)
            others[row] = False
            # Every array with the row changed; if that cannot be evaluated (an integer code 1 out of range),
            # the floating-point arrays alone. Both choices depend on the graph only.
            candidates = [
                [_perturbed_row(s, row) for s in synthetic],
                [_perturbed_row(s, row) if np.issubdtype(s.dtype, np.inexact) else s for s in synthetic],
            ]
            for perturbed in candidates:
                try:
                    with np.errstate(all="ignore"):
                        after = np.asarray(fn(*point, *perturbed), dtype=float)
                except Exception:
                    continue
                evaluated = True
                same = np.allclose(before[others], after[others], rtol=1e-12, atol=1e-12, equal_nan=True)
                moved = moved or not same
                break
    return moved if evaluated else None


def probe_row_count(
    shared: Sequence[SharedVariable], n_rows: int, full_vector: Callable[..., Any], points: Sequence, indexed: bool
) -> int:
    """How many synthetic rows a construction probe of ``shared`` runs on: min(N, :data:`PROBE_ROWS`) or all N.

    The bounded count where ``full_vector`` (compiled on the rows ``shared`` holds: called with
    θ, and with ``indexed`` the indices of all rows too) evaluates on that many synthetic rows at
    one of ``points`` (:func:`_probe_points`); else N (the graph fixes N in a shape, or reads
    another array of N values). Data-free: the rows are :func:`_synthetic_rows`, so the count
    depends on the graph alone. Used by :meth:`pymc_dp.data.RowLikelihood._build_index_mode`.
    """
    bounded = min(n_rows, PROBE_ROWS)
    if bounded == n_rows or any(v.type.shape[0] is not None for v in shared):
        return n_rows
    with _synthetic_values(shared, bounded), np.errstate(all="ignore"):
        for [theta] in points:
            theta = np.asarray(theta, dtype=np.float64)
            try:
                full_vector(theta, np.arange(bounded, dtype=np.int64)) if indexed else full_vector(theta)
            except Exception:  # not evaluable on so few rows (data-free): try the next point, then all N rows
                continue
            return bounded
    return n_rows


def _perturbation_probe(
    inputs: Sequence[Variable], lik: Variable, values: Sequence[np.ndarray], row_data: Sequence[Variable], n_rows: int
) -> None:
    """Change one synthetic row and check no other row's log-likelihood moves.

    The probe never reads the real rows: every row-indexed array is replaced by data-free
    synthetic rows of its dtype and of its shape but the number of rows (:func:`_synthetic_rows`),
    and row 0 of each is changed, then the last row (:func:`_perturbed_row`). Whether a model is refused therefore
    depends on the model's graph alone, never on the data (privacy contract, rule 5). The check
    runs at ``values`` and at a second, shifted point (:func:`_probe_points`): at a start where a
    coefficient is zero, ``b * (x - x.mean())`` would not show that it mixes rows.

    The graph is probed on min(N, :data:`PROBE_ROWS`) rows, with the number of rows left open in
    its types, so that its memory and time do not grow with N (a model of ``row_placeholder``
    stand-ins of rows on a Dask cluster is checked on the client at N = 2·10⁷). Where that graph
    cannot be evaluated on so few rows (it fixes N in a shape, or holds another array of length N
    that is not row data: the allow-list walk, which runs first and reads the arrays' shapes,
    decides whether that array mixes rows), it is probed on all N rows, as before. A graph that
    cannot be evaluated on the synthetic rows at all (an index computed from a row that falls
    outside its array, say) is not probed: the same on every data set. At run time such a row
    contributes its clipped bound or nothing (:func:`evaluate_rowwise`). The bounded probe cannot
    see index arithmetic that depends on N (``pt.roll(x, N - 1)`` with N ≡ 1 mod 257, the rows
    past row 257 reading row 0): the allow-list walk refuses those ops (Subtensor, Join, roll's
    concatenation) before the probe runs; the probe is the last line of defence, not the first.
    """
    if n_rows < 2 or not row_data:
        return
    moved = None
    if n_rows > PROBE_ROWS:
        fn = _probe_function(inputs, lik, row_data, open_rows=True)
        moved = None if fn is None else _probe_moves(fn, values, row_data, PROBE_ROWS)
    if moved is None:
        moved = _probe_moves(_probe_function(inputs, lik, row_data, open_rows=False), values, row_data, n_rows)
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


def forward_jacobian(lik: Variable, theta: Variable, n_params: int) -> Variable:
    """(rows × P) Jacobian of the per-row vector ``lik`` w.r.t. θ: one JVP vectorised over the unit tangents."""
    tangent = pt.vector("tangent", dtype=theta.dtype)
    jvp = _jvp(lik, theta, tangent)
    return vectorize_graph(jvp, {tangent: pt.eye(n_params, dtype=theta.dtype)}).T


def reverse_jacobian(
    batch: Sequence[Variable], lik_batch: Variable, theta: Variable, n_params: int, *, summed_seed: bool = True
) -> Variable:
    """(rows × P) Jacobian of ``lik_batch`` in reverse mode: summed seed where it holds, else vectorised over rows.

    Where θ meets the rows only in elementwise broadcasts (an unknown mean, scale or shape of a
    distribution of the rows), the gradient of the summed log-likelihood with respect to
    per-row copies of those broadcasts (:func:`summed_seed_jacobian`): the graph of PyMC's own
    gradient before its sum over rows (on the 10-d Gaussian of ``benchmarks/bench_hmc.py``,
    N = 10⁵, Numba: 8.8 ms against 13.5 ms vectorised and 9.2 ms for ``model.compile_dlogp()``).
    Otherwise, or with ``summed_seed=False``, :func:`vectorised_reverse_jacobian`. Both give the
    same matrix to rounding (tested to 1e-10). :class:`pymc_dp.data.RowLikelihood` asks for the
    summed seed on the Numba backend only: on PyTensor's C backend (PyMC 5) the same graph was
    slower than the vectorised one (DPHMC on the Gaussian: 258 against 225 CPU ms per iteration),
    its solves getting the rows in the layout SciPy copies.
    """
    if not summed_seed:
        return vectorised_reverse_jacobian(batch, lik_batch, theta, n_params)
    try:
        return summed_seed_jacobian(batch, lik_batch, theta, n_params)
    except _NoSummedSeedForm:
        return vectorised_reverse_jacobian(batch, lik_batch, theta, n_params)


def vectorised_reverse_jacobian(
    batch: Sequence[Variable], lik_batch: Variable, theta: Variable, n_params: int
) -> Variable:
    """(rows × P) Jacobian of ``lik_batch`` in reverse mode, vectorised over rows with a per-row θ.

    One row's log-likelihood (each batch input replaced by one row, kept as a 1-row batch)
    is vectorised over the rows with θ replaced by Θ, θ repeated per row; the gradient of
    the summed result with respect to Θ has row i = ∇θ log p(xᵢ | θ).
    """
    one = [pt.tensor(f"{b.name}_row", dtype=b.dtype, shape=b.type.shape[1:]) for b in batch]
    lik_one = graph_replace(lik_batch, {b: r[None] for b, r in zip(batch, one, strict=True)}, strict=False)[0]
    per_row_theta = pt.alloc(theta, batch[0].shape[0], n_params)
    replace = {**dict(zip(one, batch, strict=True)), theta: per_row_theta}
    lik_rows = vectorize_graph(lik_one, replace)
    return pytensor.grad(lik_rows.sum(), per_row_theta)


class _NoSummedSeedForm(ValueError):
    """The graph reads θ other than through elementwise broadcasts along the row axis (:func:`summed_seed_jacobian`)."""


def _row_dependent(lik_batch: Variable, batch: Sequence[Variable]) -> set[Variable]:
    """The variables of ``lik_batch``'s graph that read a row input (its values or its shape), or whatever
    ``batch`` holds: ``batch`` and every output of a node with an input among them."""
    dependent: set[Variable] = set(batch)
    for node in _toposort_nodes([lik_batch]):
        if any(i in dependent for i in node.inputs):
            dependent.update(node.outputs)
    return dependent


def _broadcast_frontier(lik_batch: Variable, batch: Sequence[Variable], theta: Variable) -> list[tuple[Any, int]]:
    """(node, input position) of every place where a θ-dependent, row-free value meets the rows.

    Raises :class:`_NoSummedSeedForm` unless every such place is an elementwise node whose
    output has the rows on axis 0 and whose θ-dependent input is broadcast along it (length 1
    there), a floating-point value: then row i reads θ through its own row of the broadcast only.
    """
    dependent = _row_dependent(lik_batch, batch)
    reads_theta = _row_dependent(lik_batch, [theta])  # the same closure, from θ
    from pytensor.tensor.elemwise import Elemwise

    frontier = []
    for node in _toposort_nodes([lik_batch]):
        if not any(o in dependent for o in node.outputs):
            continue
        for position, value in enumerate(node.inputs):
            if value in dependent or value not in reads_theta:
                continue
            if not np.issubdtype(np.dtype(value.dtype), np.floating):
                continue  # integer or boolean: no gradient flows through it
            out = node.outputs[0]
            if not (
                isinstance(node.op, Elemwise)
                and value.type.ndim == out.type.ndim >= 1
                and value.type.broadcastable[0]
                and not out.type.broadcastable[0]
            ):
                raise _NoSummedSeedForm(f"θ reaches the rows through {type(node.op).__name__}")
            frontier.append((node, position))
    _check_rows_on_axis0([node.outputs[0] for node, _ in frontier], batch)
    return frontier


def _check_rows_on_axis0(outputs: Sequence[Variable], batch: Sequence[Variable]) -> None:
    """Raise :class:`_NoSummedSeedForm` unless each output's axis 0 has the length of the batch's rows.

    Read from PyTensor's shape inference, rewritten: the length of axis 0 must be the graph
    ``Shape_i{0}`` of a row input (the rows), not another axis of the data nor a constant. A
    graph only, never evaluated.
    """
    from pytensor.graph.basic import Constant
    from pytensor.graph.fg import FunctionGraph
    from pytensor.graph.rewriting.utils import rewrite_graph
    from pytensor.graph.traversal import graph_inputs
    from pytensor.tensor.rewriting.shape import ShapeFeature
    from pytensor.tensor.shape import Shape_i

    roots = [*batch, *(v for v in graph_inputs(outputs) if v not in batch and not isinstance(v, Constant))]
    graph = FunctionGraph(roots, list(outputs), clone=True)
    feature = ShapeFeature()
    graph.attach_feature(feature)
    rows = set(graph.inputs[: len(batch)])
    for out in graph.outputs:
        length = rewrite_graph(feature.get_shape(out, 0), include=("canonicalize",))
        node = length.owner
        if node is None or not isinstance(node.op, Shape_i) or node.op.i != 0 or node.inputs[0] not in rows:
            raise _NoSummedSeedForm("an elementwise node of θ and the rows has its rows on another axis")


def summed_seed_jacobian(batch: Sequence[Variable], lik_batch: Variable, theta: Variable, n_params: int) -> Variable:
    """(rows × P) Jacobian of ``lik_batch``: the model's own gradient graph of Σᵢ ℓᵢ, before its sum over rows.

    Where θ (or a value computed from θ alone, ``v``) meets the rows in an elementwise node,
    broadcast along the row axis, ``v`` is replaced there by a per-row copy V (its row axis
    allocated to the batch's length). Row i's log-likelihood then reads V's row i and no other,
    so the gradient of Σᵢ ℓᵢ with respect to V has row i = ∂ℓᵢ/∂v. The map from θ to each ``v``
    is data-free: its vector–Jacobian product is vectorised over those rows, giving row i =
    ∇θ ℓᵢ. No graph of the rows is vectorised, so the rows' part is the graph PyMC's own
    gradient would run, without the reshapes and copies of :func:`reverse_jacobian`'s one-row
    graph.

    Raises :class:`_NoSummedSeedForm` where θ reaches the rows any other way (a matrix
    product, a gather, a solve with a θ-dependent matrix): then only the vectorised form holds.

    Notes
    -----
    One row may influence only its own row of the result (privacy contract, rule 7): ℓᵢ reads
    V only through elementwise nodes whose output has the rows on axis 0 (checked on every
    such node here), so ∂ℓⱼ/∂Vᵢ = 0 for j ≠ i, and :func:`pymc_dp.row_graph.row_loglik` has
    already checked that ℓᵢ reads row i's data alone.
    """
    # θ's length made static, so that the rewrites see a slice of all of θ as θ itself.
    lik_batch = graph_replace(lik_batch, {theta: pt.specify_shape(theta, (n_params,))}, strict=False)
    frontier = _broadcast_frontier(lik_batch, batch, theta)
    if not frontier:
        raise _NoSummedSeedForm("θ does not reach the rows")
    n_rows = batch[0].shape[0]
    copies: dict[Variable, Variable] = {}
    for node, position in frontier:
        value = node.inputs[position]
        if value not in copies:
            copies[value] = pt.alloc(value, n_rows, *(value.shape[k] for k in range(1, value.type.ndim)))
    at_frontier = {node: {p for n, p in frontier if n is node} for node, _ in frontier}
    memo: dict[Variable, Variable] = {}
    for node in _toposort_nodes([lik_batch]):
        inputs = [memo.get(i, i) for i in node.inputs]
        for position in at_frontier.get(node, ()):
            inputs[position] = copies[node.inputs[position]]
        if any(a is not b for a, b in zip(inputs, node.inputs, strict=True)):
            new = node.op.make_node(*inputs)
            memo.update(zip(node.outputs, new.outputs, strict=True))
    lik_rows = memo.get(lik_batch, lik_batch)
    values = list(copies)
    row_grads = pytensor.grad(lik_rows.sum(), [copies[v] for v in values], disconnected_inputs="ignore")
    cotangents = [v.type() for v in values]
    # Σₖ ⟨vₖ, cₖ⟩: its gradient is the VJP Σₖ Jₖᵀcₖ, with the paths from one vₖ through another
    # added (``known_grads`` would take a given gradient of vₖ as its whole gradient).
    pairing = pt.add(*((v * c).sum() for v, c in zip(values, cotangents, strict=True)))
    vjp = pytensor.grad(pairing, theta, disconnected_inputs="ignore")
    # Row i's cotangent of v (shape (1, ...)): a batch axis of rows in front of v's own axes.
    per_row = {c: g[:, None] for c, g in zip(cotangents, row_grads, strict=True)}
    return _negations_out_of_solves(vectorize_graph(vjp, per_row))


def _negations_out_of_solves(jacobian: Variable) -> Variable:
    """``jacobian`` rewritten with each ``solve(A, −B)`` as ``−solve(A, B)``, so that negations cancel.

    The gradient of a Gaussian's quadratic form is ``−solve(Uᵀ, −solve(L, r))`` once PyTensor has
    rewritten it: two N × P negations around a triangular solve, which the compile's rewrites do
    not cancel, and the last of which copies the solve's output (a view of the rows in Fortran
    order, which the clipping reads faster) into a new array. The same values bit for bit: a
    solve's arithmetic commutes exactly with a change of sign. The graph is rewritten as a
    compile's first stages would (canonicalize, stabilize, specialize) and then by this rule; if
    that fails, ``jacobian`` unchanged.
    """
    from pytensor.graph.rewriting.basic import in2out
    from pytensor.graph.rewriting.utils import rewrite_graph

    if not any(_is_triangular_solve(node.op) for node in _toposort_nodes([jacobian])):
        return jacobian  # nothing to rewrite (and no rewrite passes run on this graph here)
    include = ("canonicalize", "stabilize", "specialize")
    try:
        return rewrite_graph(jacobian, include=include, custom_rewrite=in2out(_negation_out_of_solve))
    except Exception:  # a graph these stages cannot rewrite here: the compile rewrites it as before
        return jacobian


@node_rewriter(None)
def _negation_out_of_solve(fgraph, node):
    """``solve(A, −B)`` → ``−solve(A, B)`` for a triangular solve (its core op, or vectorised over a batch)."""
    from pytensor.scalar.basic import Neg
    from pytensor.tensor.elemwise import Elemwise

    if not _is_triangular_solve(node.op) or len(node.inputs) != 2:
        return None
    right = node.inputs[1].owner
    if right is None or not (isinstance(right.op, Elemwise) and isinstance(right.op.scalar_op, Neg)):
        return None
    return [pt.neg(node.op.make_node(node.inputs[0], right.inputs[0]).outputs[0])]


def _is_triangular_solve(op) -> bool:
    """Whether ``op`` is a triangular solve (its core op, or vectorised over a batch)."""
    from pytensor.tensor.blockwise import Blockwise

    core = op.core_op if isinstance(op, Blockwise) else op
    return type(core).__name__ == "SolveTriangular"
