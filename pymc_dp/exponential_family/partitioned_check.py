"""The clipping check of a release whose rows are Dask arrays: the weighted count summed on the workers.

:func:`release_partitioned_clipping_check` is
:func:`pymc_dp.exponential_family.clipping_check.release_clipping_check` for rows that never sit
on the client (``docs/dask.md``): each partition counts its own clipped rows with the in-memory
mechanism (:func:`pymc_dp.backends.dask_rows.partitioned_clipped_count`), Dask's tree adds the
exact integers on the workers, and the client adds the noise once and writes the same record
(the in-memory function's, given the partitioned count).
``tests/test_dask_release.py`` checks that the record equals the in-memory one, key for key, with
the same reproducible noise.

Neighbouring relation: substitute (one row replaced, N public: read from the chunk sizes), the
release's; the weighted count's sensitivity is 1 row, as in memory.
"""

from __future__ import annotations

from typing import Any

from pymc_dp.backends.dask_rows import partitioned_clipped_count
from pymc_dp.exponential_family.clipping_check import release_clipping_check

__all__ = ["release_partitioned_clipping_check"]


def release_partitioned_clipping_check(
    family: Any, data: Any, mechanism: str, setting: float | None, share: float, source: Any
) -> dict[str, Any] | None:
    """Release the noisy weighted number of rows ``family``'s bounds clip, for rows given as Dask arrays.

    As :func:`~pymc_dp.exponential_family.clipping_check.release_clipping_check` (same arguments,
    same record): ``setting`` None (no check priced) reads nothing and returns None. Call inside
    the run that priced it (:func:`pymc_dp.release_statistics`): the partitions are read here,
    after the charge.

    Notes
    -----
    Neighbouring relation: substitute (N public). Sensitivity 1 row: each row adds its own weight
    in [0, 1] on the worker that holds it. ε covers one noisy count (discrete Laplace at ε_c, or
    discrete Gaussian at multiplier τ_c); the share and any flag are post-processing.

    References
    ----------
    .. [1] Canonne, C. L., Kamath, G. and Steinke, T. (2020). The discrete Gaussian for
       differential privacy. NeurIPS.
    """
    return release_clipping_check(family, data, mechanism, setting, share, source, partitioned_clipped_count)
