"""The two-line Dask hook of ``release_statistics`` (issue 37), applied by monkeypatch while ``release.py`` lacks it.

``release.py`` belongs to another owner: the hook is ``check_partitioned_release(data, out_of_bounds=...,
clipping_check=...)`` before the clipping check is planned, and
:func:`pymc_dp.backends.dask_rows.private_statistics` in place of ``PrivateSufficientStatistics``. Once
``release.py`` imports ``private_statistics``, :func:`apply_release_hook` does nothing (delete this module then).
"""

from __future__ import annotations

from pymc_dp.backends.dask_rows import check_partitioned_release, private_statistics
from pymc_dp.exponential_family import release as release_module


def apply_release_hook(monkeypatch) -> None:
    """Route ``pmdp.release_statistics`` through :mod:`pymc_dp.backends.dask_rows` for this test."""
    if hasattr(release_module, "private_statistics"):
        return
    monkeypatch.setattr(release_module, "PrivateSufficientStatistics", private_statistics)
    plan = release_module.plan_clipping_check

    def checked_plan(clipping_check, out_of_bounds, mechanism, epsilon, delta, data):
        check_partitioned_release(data, out_of_bounds=out_of_bounds, clipping_check=clipping_check)
        return plan(clipping_check, out_of_bounds, mechanism, epsilon, delta, data)

    monkeypatch.setattr(release_module, "plan_clipping_check", checked_plan)
