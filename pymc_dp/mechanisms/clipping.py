"""Clipping in the mechanism layer: the clip math of :mod:`pymc_dp.clip_math`, re-exported.

The functions are pure (they release nothing), so they live below the data layer, where the
data layer's compiled clipped sums use them too; the mechanisms import them from here or from
:mod:`pymc_dp.clip_math` alike. See :mod:`pymc_dp.clip_math` for the neighbouring relation and
the sensitivity of a clipped sum.
"""

from pymc_dp.clip_math import (
    _check_bound,  # noqa: F401  (mechanisms and backends validate bounds with it)
    _clip_factors,  # noqa: F401
    clip_l2,
    clip_values,
    clip_weights_graph,
    clipped_sum_l2,
    clipped_sum_l2_linear,
    row_chunks,
    sensitivity_of_clipped_sum,
)

__all__ = [
    "clip_l2",
    "clip_values",
    "clip_weights_graph",
    "clipped_sum_l2",
    "clipped_sum_l2_linear",
    "row_chunks",
    "sensitivity_of_clipped_sum",
]
