"""Clipping in the mechanism layer: the clip math of :mod:`pymc_dp.clip_math`, re-exported.

The functions are pure (they release nothing), so they live below the data layer, where the
data layer's compiled clipped sums use them too; the mechanisms import them from here or from
:mod:`pymc_dp.clip_math` alike. See :mod:`pymc_dp.clip_math` for the neighbouring relation and
the sensitivity of a clipped sum.
"""

from pymc_dp import clip_math
from pymc_dp.clip_math import *  # noqa: F403  (every public name: clip_math.__all__)
from pymc_dp.clip_math import (  # noqa: F401  (mechanisms and backends validate bounds with these)
    _check_bound,
    _clip_factors,
)

__all__ = clip_math.__all__
