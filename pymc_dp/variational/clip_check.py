"""The public draws at which DPADVI's clipping check measures the quantity its releases clip.

Each iteration of a fit clips every batch row's mean_s gᵢ(θ_s) M_s, with θ_s = μ + L ε_s and
M_s the family's parameter Jacobian at ε_s (:func:`pymc_dp.step_methods.kernels.advi_gradient`).
The check takes K such sets of draws at the fitted parameters, from a generator that reads no
data, mapped exactly as the release maps them (θ in the data layer's order). Data-free.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["CLIP_CHECK_DRAW_SETS", "clip_check_draw_sets"]

#: Draw sets K the clipping check averages its histogram over (each row's weight is 1/K per set).
CLIP_CHECK_DRAW_SETS = 4


def clip_check_draw_sets(
    family: Any, packed: np.ndarray, to_rows: np.ndarray, n_mc: int, rng: np.random.Generator, count: int
) -> list[tuple[np.ndarray, list[np.ndarray]]]:
    """``count`` sets of (θ draws (n_mc × P), Jacobians M_s (P × D)) at ``packed``, as a release builds them."""
    sets = []
    for _ in range(count):
        eps = rng.standard_normal((n_mc, family.n_params))
        thetas = family.draws(packed, eps)[:, to_rows]
        jacobians = [family.parameter_jacobian(packed, eps[s])[to_rows] for s in range(n_mc)]
        sets.append((thetas, jacobians))
    return sets
