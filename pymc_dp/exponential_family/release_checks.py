"""The checks a release makes of its own released values before its draws are published.

Each reads the release only (post-processing, no privacy cost) and returns a problem in plain
words, or None; :func:`pymc_dp.exponential_family.release.sample_releases` flags the result
with every problem found:

* :func:`~pymc_dp.exponential_family.group_covariates.group_covariate_problem`: a grouped linear
  release whose random-intercepts fit is pulled towards a between-group slope (intercepts tied to
  the covariates' group means), which the release cannot rule out;
* :func:`~pymc_dp.exponential_family.expansion_reach.expansion_reach_problem`: a count
  regression whose noise-aware likelihood is read too far from its last anchor.

Neighbouring relation: substitute or add/remove, the release's. Nothing here reads a row.
"""

from __future__ import annotations

from typing import Any

from pymc_dp.exponential_family.expansion_reach import expansion_reach_problem
from pymc_dp.exponential_family.group_covariates import group_covariate_problem

__all__ = ["release_problems"]

RELEASE_CHECKS = (group_covariate_problem, expansion_reach_problem)


def release_problems(releases: list[Any]) -> list[str]:
    """Every problem the releases' own checks find in their released values (in release order)."""
    return [problem for release in releases for check in RELEASE_CHECKS if (problem := check(release)) is not None]
