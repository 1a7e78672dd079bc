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

Dask is imported only when Dask collections are given (the ``dask`` extra); this module imports
nothing of it at import time.

Neighbouring relation: substitute (one row replaced, N public), as the in-memory release.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from pymc_dp.mechanisms.sufficient_statistics import (
    PrivateSufficientStatistics,
    RowSums,
    _is_partitioned,
    is_partitioned,  # re-exported: the dispatch's question, asked where the in-memory mechanism refuses too
    row_sums,
)

__all__ = [
    "PartitionError",
    "check_partitioned_release",
    "is_partitioned",
    "partitioned_n_rows",
    "partitioned_row_sums",
    "private_statistics",
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


def check_partitioned_release(data: Any, *, out_of_bounds: str = "clamp", clipping_check: bool = False) -> None:
    """Refuse, before anything is priced or charged, a release of Dask data this route cannot run.

    A no-op for in-memory data. For Dask arrays: their kinds and chunk sizes
    (:func:`partitioned_n_rows`); ``out_of_bounds`` must be ``"clamp"`` (``"raise"`` would answer
    from the rows, on the workers, after the charge); ``clipping_check`` must be False (its count
    of clipped rows is not yet computed per partition). Reads metadata only.
    """
    if not is_partitioned(data):
        return
    partitioned_n_rows(data)
    if out_of_bounds != "clamp":
        raise ValueError(
            "`out_of_bounds` must be 'clamp' for rows given as Dask arrays: 'raise' would refuse from the rows, on the "
            f"workers, after the release was charged. Found {out_of_bounds!r}."
        )
    if clipping_check:
        raise ValueError(
            "`clipping_check` must be False for rows given as Dask arrays: the count of clipped rows is not computed "
            f"on the workers yet (issue 37). Found {clipping_check!r}."
        )


def _zero_row(data: Any) -> Any:
    """One row of zeros in ``data``'s trailing shapes and dtypes: the family's shape checks, with no data read."""
    row = tuple(np.zeros((1, *array.shape[1:]), dtype=array.dtype) for array in _arrays(data))
    return row if isinstance(data, tuple | list) else row[0]


def _no_sums(family: Any, exponent: int | None) -> RowSums:
    """The sums of an empty partition (Dask may align chunks into empty blocks)."""
    width = np.asarray(family.intervals()[0]).size
    return RowSums(0, np.zeros(width), None if exponent is None else [0] * width)


def _partition_sums(family: Any, out_of_bounds: str, exponent: int | None, paired: bool, *blocks) -> np.ndarray:
    """One partition's :class:`RowSums` as a (1, 1) object array: the reduction's leaf (runs on a worker).

    A failure carries the exception's type only: its text may quote the rows.
    """
    try:
        data = blocks if paired else blocks[0]
        empty = np.shape(blocks[0])[0] == 0  # the partition's length: metadata
        sums = _no_sums(family, exponent) if empty else row_sums(family, data, out_of_bounds, exponent)
    except Exception as error:
        raise PartitionError(f"{type(error).__name__} in a partition's sums (message withheld)") from None
    out = np.empty((1, 1), dtype=object)
    out[0, 0] = sums
    return out


def _add_sums(values: Any, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """Σ of partition sums (object arrays of :class:`RowSums`, or lists of them): Dask's combine and aggregate."""
    if isinstance(values, list):  # concatenate=False hands the tree's children as a (nested) list
        values = np.concatenate([np.asarray(_add_sums(v, axis, True), dtype=object).reshape(-1) for v in values])
    flat = np.asarray(values, dtype=object).reshape(-1)
    total = functools.reduce(lambda a, b: a + b, flat[1:], flat[0])
    out = np.empty((1, 1) if keepdims else (), dtype=object)
    out[...] = total
    return out


def partitioned_row_sums(family: Any, data: Any, out_of_bounds: str, exponent: int | None, split_every=None) -> RowSums:
    """The :class:`RowSums` of rows given as Dask arrays: each partition's on its worker, added by Dask's tree.

    Each block of rows (the arrays' row chunks, aligned by Dask where they differ) runs
    :func:`~pymc_dp.mechanisms.sufficient_statistics.row_sums`; :func:`dask.array.reduction`
    adds them ``split_every`` at a time on the workers (Dask's default when None), so the
    client receives one :class:`RowSums` whatever the number of partitions. Computed with the
    scheduler in force (a ``distributed.Client`` when one is the default).

    Notes
    -----
    Neighbouring relation: substitute. The integer sums are exact and associative, so the total
    is the in-memory release's exactly; nothing row-level leaves a worker.
    """
    import dask.array as da

    arrays = _arrays(data)
    indexed = []
    for array in arrays:
        index = ("i", *(f"k{position}" for position in range(1, array.ndim)))
        indexed += [array, index]
    leaf = functools.partial(_partition_sums, family, out_of_bounds, exponent, isinstance(data, tuple | list))
    partials = da.blockwise(
        leaf,
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
        name="pymc-dp-row-sums",
    )
    return np.asarray(total.compute(), dtype=object).reshape(()).item()


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
