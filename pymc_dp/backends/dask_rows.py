"""Released statistics on rows that never sit on the client: per-partition sums of Dask arrays, noise on the client.

``pmdp.release_statistics(family, (X, y), ...)`` with ``X`` and ``y`` given as ``dask.array``
arrays (for example a Parquet table's columns, ``ddf[cols].to_dask_array(lengths=True)``) runs
here. Each partition of the rows computes, on the worker that holds it, the same per-row work
as the in-memory release (:func:`pymc_dp.mechanisms.sufficient_statistics.row_sums`: the
family's clamping, then each row's statistic rounded to the noise grid on its own, the integers
summed exactly); Dask's tree reduction adds the partition sums on the workers (integer sums are
exact and associative, so the total equals the in-memory one exactly, however the rows are
partitioned); only the final vector of d sums reaches the client, where the mechanism
(:class:`~pymc_dp.mechanisms.PrivateSufficientStatistics`) adds the noise once.

N is public under substitute neighbours and is read from the arrays' chunk sizes (metadata),
never counted from the rows: arrays whose chunk sizes are unknown are refused. The mechanism is
built without reading a row (:meth:`~pymc_dp.mechanisms.PrivateSufficientStatistics.deferred`);
the partitions are read at its first release, after ``release_statistics`` has charged the
budget, so that a worker lost during the release leaves the charge in place.

The one-call route (``pmdp.sample(epsilon=..., rows={"X": ..., "y": ...})``, :mod:`pymc_dp.routes`)
releases the same statistics from a model built on :func:`row_placeholder` arrays of the rows' shape
and dtype (the model holds no row; the rows replace the placeholders at the release), and the
clipping check's weighted count of clipped rows is summed per partition the same way
(:func:`partitioned_clipped_count`).

On a ``distributed`` cluster the decoded blocks are kept on the workers between releases
(:func:`_kept_arrays`): the first release of a pair of arrays (after its charge) computes their
blocks where Dask places them and keeps them there (``Client.persist``), so that the covariate
anchors, the clipping check and later releases of the same array objects read them from the
workers' memory instead of decoding the files again. They are kept only while the arrays given are
alive and while they fit in :data:`KEEP_SHARE` of the workers' memory limits; nothing of them is
sent to the client.

Dask is imported only when Dask collections are given (the ``dask`` extra); this module imports
nothing of it at import time.

Neighbouring relation: substitute (one row replaced, N public), as the in-memory release.
"""

from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from pymc_dp.mechanisms.clipped_rows import (
    CLIPPED_ROW_FULL_WEIGHT,
    ClippedUnits,
    PrivateClippedCount,
    clipped_units,
)
from pymc_dp.mechanisms.sufficient_statistics import (
    PrivateSufficientStatistics,
    RowSums,
    _is_partitioned,
    is_partitioned,  # re-exported: the dispatch's question, asked where the in-memory mechanism refuses too
    row_sums,
)
from pymc_dp.row_graph import ROW_PLACEHOLDER_NAME, reads_row_placeholder

__all__ = [
    "KEEP_SHARE",
    "ROW_PLACEHOLDER_NAME",
    "PartitionError",
    "check_partitioned_release",
    "check_rows",
    "holds_row_placeholders",
    "is_partitioned",
    "partitioned_clipped_count",
    "partitioned_n_rows",
    "partitioned_row_sums",
    "private_statistics",
    "row_placeholder",
    "with_ones_column",
]


class PartitionError(RuntimeError):
    """A partition's sums failed on a worker; only the exception's type crosses the network, never its text."""


def _arrays(data: Any) -> tuple[Any, ...]:
    """The Dask arrays of ``data``, refused (naming ``data``) when mixed with in-memory arrays or not arrays."""
    parts = tuple(data) if isinstance(data, tuple | list) else (data,)
    kinds = [f"{type(part).__module__}.{type(part).__name__}" for part in parts]
    if not all(_is_partitioned(part) for part in parts):
        raise TypeError(
            "`data` must be all Dask arrays or all in-memory arrays: a release cannot join rows on the client to "
            f"rows on a cluster. Found {', '.join(kinds)}."
        )
    if not all(type(part).__name__ == "Array" and type(part).__module__.startswith("dask.array") for part in parts):
        raise TypeError(
            "`data` given as Dask collections must be dask.array arrays: convert a dask dataframe's columns with "
            "`ddf[columns].to_dask_array(lengths=True)` (lengths=True reads the partitions' lengths). Found "
            f"{', '.join(kinds)}."
        )
    return parts


def partitioned_n_rows(data: Any) -> int:
    """N of rows given as Dask arrays, from their chunk sizes (metadata), never from the rows.

    Raises
    ------
    ValueError
        Naming ``data``, when a chunk size along the rows is unknown (``nan``: a dask dataframe
        converted without ``lengths=True``, or an array filtered by a mask), or when the arrays'
        lengths differ. Nothing is read.

    Notes
    -----
    Neighbouring relation: substitute. N is public under substitute neighbours (the budget and
    the sensitivity are stated for data sets of that size), so reading it from the partitions'
    lengths releases nothing; it must not be counted from the rows inside the release.
    """
    arrays = _arrays(data)
    lengths = []
    for array in arrays:
        rows = array.chunks[0] if array.ndim else ()
        if not array.ndim or any(isinstance(size, float) and math.isnan(size) for size in rows):
            raise ValueError(
                "`data` given as Dask arrays must have known chunk sizes along the rows: N is public and is read from "
                "them, never counted from the rows. Found unknown sizes (nan); convert a dask dataframe with "
                "`to_dask_array(lengths=True)` or call `array.compute_chunk_sizes()` first (on rows selected by public "
                "attributes only: a filter on private values makes N private, which this release does not cover)."
            )
        if array.dtype.kind not in "biuf":
            raise TypeError(
                "`data` given as Dask arrays must hold booleans, integers or floats (their dtype is metadata; a "
                "value that is not a number would otherwise fail on a worker after the charge). "
                f"Found dtype {array.dtype}."
            )
        lengths.append(int(sum(rows)))
    if len(set(lengths)) > 1:
        raise ValueError(f"`data` must give every array the same number of rows. Found lengths {lengths}.")
    return lengths[-1]


def check_partitioned_release(data: Any, *, out_of_bounds: str = "clamp") -> None:
    """Refuse, before anything is priced or charged, a release of Dask data this route cannot run.

    A no-op for in-memory data. For Dask arrays: their kinds and chunk sizes
    (:func:`partitioned_n_rows`); that Dask can build their joint graph
    (:func:`check_graphs_compute_together`); ``out_of_bounds`` must be ``"clamp"`` (``"raise"``
    would answer from the rows, on the workers, after the charge). Reads metadata only.
    """
    if not is_partitioned(data):
        return
    partitioned_n_rows(data)
    check_graphs_compute_together(data)
    if out_of_bounds != "clamp":
        raise ValueError(
            "`out_of_bounds` must be 'clamp' for rows given as Dask arrays: 'raise' would refuse from the rows, on the "
            f"workers, after the release was charged. Found {out_of_bounds!r}."
        )


def _missing_dependencies(collection: Any) -> set:
    """Keys the optimised graph of ``collection`` depends on but does not hold: graph metadata, nothing computed.

    An empty set where Dask's graph internals (``dask._task_spec``, Dask ≥ 2024.12) are not
    there to ask: the probe then checks nothing rather than refusing a working graph.
    """
    try:
        from dask._task_spec import convert_legacy_graph
        from dask.base import collections_to_expr
    except ImportError:  # pragma: no cover - another Dask: nothing to probe with
        return set()
    graph = convert_legacy_graph(dict(collections_to_expr([collection], optimize_graph=True).__dask_graph__()))
    return {key for task in graph.values() for key in task.dependencies if key not in graph}


def check_graphs_compute_together(data: Any) -> None:
    """Refuse, before the charge, Dask arrays whose joint per-partition graph Dask cannot build: reads nothing.

    The release combines every partition's blocks of all the arrays in one task graph. With
    dask 2026.8.0 two ``to_dask_array`` conversions of one ``read_parquet`` frame (the natural
    ``X = frame[covariates].to_dask_array(...)``, ``y = frame["y"].to_dask_array(...)``) build
    a graph that lacks one of its own tasks, and fails with "Missing dependency" when computed:
    after the charge, as a ``PrivateRunError``. This probe builds the same blockwise combination
    (one tiny task per partition over every array's block, never run), optimises it as a compute
    would and checks that each task's dependencies are in the graph: the failure shows in the
    graph's keys, before any task runs and whatever the rows hold.

    Raises
    ------
    ValueError
        Naming ``data``, with the workaround (convert the columns once and slice).
    """
    arrays = _arrays(data)
    if len(arrays) < 2:
        return
    import dask.array as da

    blocks = [a if a.ndim == 1 else a.reshape((a.shape[0], -1)) for a in arrays]
    blocks = [(b[:, None] if b.ndim == 1 else b).rechunk({0: arrays[0].chunks[0], 1: -1}) for b in blocks]
    probe = da.map_blocks(_probe_block, *blocks, drop_axis=1, chunks=((1,) * len(blocks[0].chunks[0]),), dtype=float)
    missing = _missing_dependencies(probe)
    if missing:
        raise ValueError(
            "`data` given as Dask arrays must be computable together. Found arrays whose joint graph lacks "
            f"{len(missing)} of its own tasks (Dask's 'Missing dependency': with dask 2026.8.0, two to_dask_array "
            "conversions of one read_parquet frame). Convert the columns once and slice: "
            'a = frame[[*covariates, "y"]].to_dask_array(lengths=lengths), then a[:, :-1] and a[:, -1] '
            "(docs/dask.md, From Parquet). Nothing was read or charged."
        )


def _probe_block(*blocks: np.ndarray) -> np.ndarray:  # pragma: no cover - never run: its graph is inspected only
    return np.zeros(1)


def _zero_row(data: Any) -> Any:
    """One row of zeros in ``data``'s trailing shapes and dtypes: the family's shape checks, with no data read."""
    row = tuple(np.zeros((1, *array.shape[1:]), dtype=array.dtype) for array in _arrays(data))
    return row if isinstance(data, tuple | list) else row[0]


def _no_sums(family: Any, exponent: int | None) -> RowSums:
    """The sums of an empty partition (Dask may align chunks into empty blocks)."""
    width = np.asarray(family.intervals()[0]).size
    return RowSums(0, np.zeros(width), None if exponent is None else [0] * width)


def _partition_value(leaf: Any, paired: bool, *blocks) -> np.ndarray:
    """``leaf(data)`` of one partition as a (1, 1) object array: the reduction's leaf (runs on a worker).

    A failure carries the exception's type only: its text may quote the rows.
    """
    try:
        value = leaf(blocks if paired else blocks[0], np.shape(blocks[0])[0])  # the partition's length: metadata
    except Exception as error:
        raise PartitionError(f"{type(error).__name__} in a partition's sums (message withheld)") from None
    out = np.empty((1, 1), dtype=object)
    out[0, 0] = value
    return out


def _add_sums(values: Any, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """Σ of partition values (object arrays of :class:`RowSums` or counts, or lists of them): Dask's combine and
    aggregate."""
    if isinstance(values, list):  # concatenate=False hands the tree's children as a (nested) list
        values = np.concatenate([np.asarray(_add_sums(v, axis, True), dtype=object).reshape(-1) for v in values])
    flat = np.asarray(values, dtype=object).reshape(-1)
    total = functools.reduce(lambda a, b: a + b, flat[1:], flat[0])
    out = np.empty((1, 1) if keepdims else (), dtype=object)
    out[...] = total
    return out


#: The share of a cluster's worker memory (the sum of its workers' memory limits) that the decoded blocks of released
#: rows may hold between releases: the rest is left to the releases' own work and to Dask's spilling, which starts
#: at 60 % of a worker's limit. Rows that do not fit are decoded at every release, as without keeping them.
KEEP_SHARE = 0.25


@dataclass
class _Kept:
    """Arrays' decoded blocks kept on a cluster's workers (futures: the client holds their keys, not their rows)."""

    client: Any
    arrays: tuple
    nbytes: int


#: Kept blocks by the ids of the arrays given (each entry is dropped when one of those arrays is garbage-collected).
_KEPT: dict[tuple[int, ...], _Kept] = {}


def _owned(block: np.ndarray) -> np.ndarray:
    """``block`` as an array that owns its memory (a view would keep its whole base alive: a frame's other columns)."""
    block = np.asarray(block)
    return block if block.base is None else block.copy()


def _distributed_client(arrays: tuple) -> Any:
    """The ``distributed.Client`` that computes ``arrays`` (Dask's default scheduler), or None (threads, processes)."""
    import dask.base

    client = getattr(dask.base.get_scheduler(collections=list(arrays)), "__self__", None)
    kind = type(client)
    return client if kind.__name__ == "Client" and kind.__module__.startswith("distributed") else None


def _forget(key: tuple[int, ...]) -> None:
    """Drop the kept blocks of ``key``: their futures are released, and the workers free the blocks."""
    _KEPT.pop(key, None)


def _kept_arrays(arrays: tuple) -> tuple[tuple, tuple[int, ...] | None]:
    """``arrays`` to compute a release on, with their decoded blocks kept on the workers; and the cache key (or None).

    Called inside a release, after its charge. With a ``distributed.Client`` as the scheduler and
    every worker given a memory limit, the arrays' blocks (made owning, so that a view keeps no
    other column alive) are persisted where Dask computes them, at most :data:`KEEP_SHARE` of the
    workers' memory limits in all (least recently used blocks are released first; arrays that do
    not fit are returned as they are); later releases of the same array objects on the same
    client compute on the kept blocks. Only futures reach the client, never a block. The
    decision reads metadata only (the arrays' shapes and dtypes, the workers' memory limits).
    Under Dask's local schedulers nothing is kept (the blocks would sit in this process).
    """
    key = tuple(id(array) for array in arrays)
    client = _distributed_client(arrays)
    entry = _KEPT.get(key)
    if entry is not None and entry.client is client and getattr(client, "status", None) == "running":
        _KEPT[key] = _KEPT.pop(key)  # the most recently used last
        return entry.arrays, key
    _forget(key)
    if client is None:
        return arrays, None
    limits = [int(worker.get("memory_limit") or 0) for worker in client.scheduler_info()["workers"].values()]
    nbytes = int(sum(array.nbytes for array in arrays))
    room = KEEP_SHARE * sum(limits)
    if not limits or min(limits) <= 0 or nbytes > room:
        return arrays, None
    while True:
        held = sum(e.nbytes for e in _KEPT.values() if e.client is client)
        oldest = next((k for k, e in _KEPT.items() if e.client is client), None)
        if held + nbytes <= room or oldest is None:
            break
        _forget(oldest)
    owned = [array.map_blocks(_owned, dtype=array.dtype) for array in arrays]
    _KEPT[key] = _Kept(client, tuple(client.persist(owned)), nbytes)
    for array in arrays:
        weakref.finalize(array, _forget, key)
    return _KEPT[key].arrays, key


def _tree_total(leaf: Any, data: Any, split_every: Any, name: str) -> Any:
    """Σ over the partitions of ``leaf(partition, length)``: each on its worker, added by Dask's tree on the workers.

    The blocks of rows are the arrays' row chunks (aligned by Dask where they differ);
    :func:`dask.array.reduction` adds the values ``split_every`` at a time (Dask's default when
    None), so the client receives one value whatever the number of partitions. Computed with
    the scheduler in force (a ``distributed.Client`` when one is the default).
    """
    import dask.array as da

    arrays, kept = _kept_arrays(_arrays(data))
    indexed = []
    for array in arrays:
        index = ("i", *(f"k{position}" for position in range(1, array.ndim)))
        indexed += [array, index]
    partials = da.blockwise(
        functools.partial(_partition_value, leaf, isinstance(data, tuple | list)),
        ("i", "j"),
        *indexed,
        new_axes={"j": 1},
        adjust_chunks={"i": 1},
        concatenate=True,
        dtype=object,
        meta=np.empty((0, 0), dtype=object),
    )
    total = da.reduction(
        partials,
        _add_sums,
        _add_sums,
        axis=(0, 1),
        keepdims=False,
        dtype=object,
        split_every=split_every,
        combine=_add_sums,
        concatenate=False,
        meta=np.empty((), dtype=object),
        name=name,
    )
    try:
        return np.asarray(total.compute(), dtype=object).reshape(()).item()
    except BaseException:
        if kept is not None:
            _forget(kept)  # a block that failed stays failed in the cluster: a later release computes them again
        raise


def _row_sums_leaf(family: Any, out_of_bounds: str, exponent: int | None, data: Any, length: int) -> RowSums:
    """One partition's :class:`RowSums` (an empty one's are zeros: Dask may align chunks into empty blocks)."""
    return _no_sums(family, exponent) if length == 0 else row_sums(family, data, out_of_bounds, exponent)


def partitioned_row_sums(family: Any, data: Any, out_of_bounds: str, exponent: int | None, split_every=None) -> RowSums:
    """The :class:`RowSums` of rows given as Dask arrays: each partition's on its worker, added by Dask's tree.

    Each block of rows runs :func:`~pymc_dp.mechanisms.sufficient_statistics.row_sums`
    (:func:`_tree_total`), so the client receives one :class:`RowSums` whatever the number of
    partitions.

    Notes
    -----
    Neighbouring relation: substitute. The integer sums are exact and associative, so the total
    is the in-memory release's exactly; nothing row-level leaves a worker.
    """
    leaf = functools.partial(_row_sums_leaf, family, out_of_bounds, exponent)
    return _tree_total(leaf, data, split_every, "pymc-dp-row-sums")


def _clipped_units_leaf(family: Any, data: Any, length: int) -> ClippedUnits:
    """One partition's exact weighted count of clipped rows: the in-memory mechanism's count on its rows."""
    return ClippedUnits(0, 0) if length == 0 else clipped_units(family, data, CLIPPED_ROW_FULL_WEIGHT)


def partitioned_clipped_count(family: Any, data: Any, split_every=None) -> PrivateClippedCount:
    """The clipping check's count mechanism for rows given as Dask arrays: each partition counted on its worker.

    Each partition runs :class:`~pymc_dp.mechanisms.clipped_rows.PrivateClippedCount` on its own
    rows (a pure function of one row at a time, summed as exact integers) and Dask's tree adds
    the counts on the workers; the client receives the total inside the returned mechanism, which
    adds the noise as the in-memory one does. Call inside the run that priced the check (after
    the charge): the partitions are read here.

    Notes
    -----
    Neighbouring relation: substitute (N public, from the chunk sizes). Each row adds its own
    weight in [0, 1] whatever partition holds it, so the total, and the count's sensitivity (1
    row), are those of the in-memory mechanism.
    """
    total = _tree_total(functools.partial(_clipped_units_leaf, family), data, split_every, "pymc-dp-clipped-rows")
    if total.n_rows != partitioned_n_rows(data):
        raise PartitionError("The partitions' lengths differ from their chunk sizes (message withheld)")
    return PrivateClippedCount.from_units(total)  # the in-memory mechanism, its rows already counted


def private_statistics(
    family: Any, data: Any, out_of_bounds: str = "clamp", grid_scale: float | None = None
) -> PrivateSufficientStatistics:
    """The statistics mechanism for ``data``: in memory, or on the partitions of Dask arrays, read at the first release.

    In-memory data: :class:`~pymc_dp.mechanisms.PrivateSufficientStatistics` (reads the rows
    now). Dask arrays: its :meth:`~pymc_dp.mechanisms.PrivateSufficientStatistics.deferred` form
    with N from the chunk sizes (:func:`partitioned_n_rows`), whose first release computes
    :func:`partitioned_row_sums` on the cluster; nothing is read here.

    Parameters
    ----------
    family : ExponentialFamily
        The statistics and their public bounds.
    data : array, (X, y), or the same as Dask arrays
        The rows.
    out_of_bounds : {"clamp", "raise"}
        ``"clamp"`` only for Dask arrays (:func:`check_partitioned_release`).
    grid_scale : float, optional
        The noise scale of a discrete-noise release (see the mechanism).

    Notes
    -----
    Neighbouring relation: substitute (N public). The same per-row code, sensitivity, noise and
    accounting as in memory: only where the sums are computed changes.
    """
    if not is_partitioned(data):
        return PrivateSufficientStatistics(family, data, out_of_bounds, grid_scale=grid_scale)
    check_partitioned_release(data, out_of_bounds=out_of_bounds)
    family.check_data(_zero_row(data), out_of_bounds)  # shapes and dtypes, before anything is charged

    def read_sums(exponent: int | None) -> RowSums:
        return partitioned_row_sums(family, data, out_of_bounds, exponent)

    return PrivateSufficientStatistics.deferred(
        family, partitioned_n_rows(data), read_sums, out_of_bounds, grid_scale=grid_scale
    )


def row_placeholder(rows: Any) -> Any:
    """A stand-in for ``rows`` (a Dask array) in a PyMC model: zeros of its shape and dtype that hold no memory.

    A PyMC model cannot hold a Dask array without reading it on the client. Build the model on
    ``row_placeholder(X)`` and ``row_placeholder(y)`` (a PyTensor constant over a NumPy view with
    zero strides: one element, whatever N), then give the Dask arrays to
    ``pmdp.sample(epsilon=..., rows={"X": X, "y": y})``, which releases them in place of the
    placeholders, or to ``pmdp.DPADVI(..., backend=pmdp.DaskBackend(client, rows=...))``, which
    fits on them (``docs/dask.md``). The constant records the array's Dask name (``tag.dask_name``),
    by which DPADVI matches each placeholder to its array. Reads the shape, dtype, chunk sizes
    and name only.

    Parameters
    ----------
    rows : dask.array.Array
        The rows, with known chunk sizes (N is read from them).

    Returns
    -------
    TensorConstant
        Zeros of ``rows.shape`` and ``rows.dtype`` (read-only, not contiguous: use it in the
        model's graph, not as data to compute with).

    Notes
    -----
    Neighbouring relation: substitute (N public). The shape and dtype are metadata; no row is read.
    """
    import pytensor.tensor as pt

    n_rows = partitioned_n_rows(rows)  # refuses unknown chunk sizes and non-numbers, naming `data`
    zeros = np.broadcast_to(np.zeros((), dtype=rows.dtype), (n_rows, *rows.shape[1:]))
    placeholder = pt.constant(zeros, name=ROW_PLACEHOLDER_NAME)  # its dtype (`dtype=` would copy the zeros out)
    placeholder.tag.dask_name = rows.name  # which array it stands for (DPADVI's rows= match it): metadata
    return placeholder


def holds_row_placeholders(model: Any) -> bool:
    """Whether ``model``'s likelihood reads a :func:`row_placeholder` (by the constant's name: nothing read).

    Such a model has no rows of its own: releasing or sampling it without the Dask rows would
    fit the zeros (a confidently wrong posterior), so the caller refuses it
    (:func:`pymc_dp.row_graph.reads_row_placeholder`, which every reader of a model's rows calls).
    """
    return reads_row_placeholder(model)


def with_ones_column(covariates: Any, n_rows: int, like: Any) -> Any:
    """``[1, x]`` per row as a Dask array (the intercept's column of ones, made on the workers), or the ones alone.

    ``covariates`` is None for a model with an intercept only; ``like`` gives the row chunks then.
    The in-memory route's ``np.column_stack([np.ones(N), X])``, partition by partition.
    """
    import dask.array as da

    chunks = (covariates if covariates is not None else like).chunks[0]
    ones = da.ones((n_rows, 1), chunks=(chunks, 1), dtype=float)
    return ones if covariates is None else da.concatenate([ones, covariates], axis=1)


def check_rows(rows: Any) -> dict[str, Any]:
    """``rows`` checked from metadata only: a dict of Dask arrays by role, known chunk sizes, numbers, equal lengths.

    Raises
    ------
    TypeError, ValueError
        Naming ``rows``; nothing is read.

    Notes
    -----
    Neighbouring relation: substitute (N public, read from the chunk sizes) or add/remove (the
    lengths are compared, never shown).
    """
    if not isinstance(rows, dict) or not rows or not all(isinstance(key, str) for key in rows):
        found = sorted(map(repr, rows)) if isinstance(rows, dict) else type(rows).__name__
        raise TypeError(
            '`rows` must be a non-empty dict of Dask arrays by role ({"X": covariates, "y": outcome}, each the array '
            f"a row placeholder of the model was made from). Found {found}."
        )
    lengths = set()
    for role, array in rows.items():
        kind = f"{type(array).__module__}.{type(array).__name__}"
        if not (is_partitioned(array) and type(array).__name__ == "Array" and kind.startswith("dask.array")):
            raise TypeError(
                f'`rows["{role}"]` must be a dask.array array (rows that stay on the cluster; convert a dask '
                f"dataframe's columns with to_dask_array(lengths=True)). Found {kind}."
            )
        sizes = array.chunks[0] if array.ndim else ()
        if not array.ndim or any(isinstance(size, float) and math.isnan(size) for size in sizes):
            raise ValueError(
                f'`rows["{role}"]` must have known chunk sizes along the rows: N is public and is read from them, '
                "never counted from the rows. Found unknown sizes (nan); use to_dask_array(lengths=True) or "
                "compute_chunk_sizes() on rows selected by public attributes only."
            )
        if array.dtype.kind not in "biuf":
            raise TypeError(f'`rows["{role}"]` must hold booleans, integers or floats. Found dtype {array.dtype}.')
        lengths.add(int(sum(sizes)))
    if len(lengths) > 1:
        raise ValueError("`rows` must give every array the same number of rows. Found arrays of different lengths.")
    return dict(rows)
