"""Whether a grouped linear release's covariates spread differently within its groups than its likelihood allows.

The grouped noise-aware likelihood (:mod:`pymc_dp.exponential_family.grouped_likelihood`) gives
group g's covariates their own latent mean μ_g (:mod:`pymc_dp.exponential_family.group_moments`,
issue 34) but one within-group covariance Σ_w shared by all groups. A shift of the covariates'
means between groups is therefore modelled (the check this module made before did flag it:
``diamonds``, whose log carat differs between clarity grades by 0.38 of its sd, was 15–80 NUTS
sds off under the shared-mean likelihood; with per-group means every NUTS mean lies in the
one-call 94 % intervals at ε = 1 and 4). What is still misspecified is a group whose covariates
spread differently: the cells' Σ x̃_g y ≈ n_g·(Σ_g + μ_gμ_gᵀ)b is then read through Σ_w instead of
the group's own Σ_g, and the slopes and σ absorb the difference.

:func:`group_covariate_spread` reads the released cells only (post-processing, no privacy cost):
the within-group least-squares slopes β̂ and residual sd σ̂ from the pooled within-group sums,
each group's noisy within-group covariance Σ̂_g and the pooled one Σ̂_w, and the variance of the
fitted response within each group, v_g = β̂ᵀΣ̂_gβ̂, against the pooled v = β̂ᵀΣ̂_wβ̂. Under the
shared-covariance model (Gaussian covariates) v_g − v has variance 2v²/n̂_g plus the release
noise's s²·(Σⱼβ̂ⱼ⁴ + 4Σ_{j<k}β̂ⱼ²β̂ₖ²)/n̂_g². The misfit that matters is how far the group's
y-covariate cross-moment along β̂ moves, n̂_g·|v_g − v|, in sds of that released sum (its sampling
sd √n̂_g·σ̂·√v and the noise's √(s²·Σⱼβ̂ⱼ²) together). The check needs
both: a χ² test of the v_g against that variance at level 10⁻³, and a root-mean-square misfit
beyond chance above :data:`GROUP_SPREAD_LIMIT` (two sds). The noise in β̂ and σ̂ is not taken
out, so the check is rough where N·ε is small, and where the fitted response's spread Σ_g n̂_g·v_g is
within three noise sds of zero it is not made (None); the covariates' higher moments (non-Gaussian
shapes) are not checked.

Neighbouring relation: substitute (the release's). Nothing here reads a row.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import chi2

from pymc_dp.exponential_family.densities import _release_noise_variance
from pymc_dp.exponential_family.grouped_likelihood import _product_positions

__all__ = ["GROUP_SPREAD_LIMIT", "group_covariate_problem", "group_covariate_spread"]

#: The largest root-mean-square misfit (in sds of a group's cross-moments) that the shared within-group covariance
#: is let pass.
GROUP_SPREAD_LIMIT = 2.0


def _within_group_sums(family: Any, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(n̂ G, within-group Σ(x − x̄)(x − x̄)ᵀ G × p × p, Σ(x − x̄)(y − ȳ) G × p, Σ(y − ȳ)² G) from released cells."""
    position, p = _product_positions(family), family.n_features
    y = p + 1
    n = np.maximum(cells[:, position[(0, 0)]], 1.0)
    sx = cells[:, [position[(0, j)] for j in range(1, p + 1)]]
    sy = cells[:, position[(0, y)]]
    sxx = np.stack([cells[:, [position[(min(j, k), max(j, k))] for k in range(1, p + 1)]] for j in range(1, p + 1)], 1)
    sxy = cells[:, [position[(j, y)] for j in range(1, p + 1)]]
    within_xx = sxx - sx[:, :, None] * sx[:, None, :] / n[:, None, None]
    within_xy = sxy - sx * (sy / n)[:, None]
    return n, within_xx, within_xy, cells[:, position[(y, y)]] - sy**2 / n


def group_covariate_spread(family: Any, noisy: np.ndarray, scale: float, noise_variance: float | None) -> float | None:
    """The root-mean-square misfit beyond chance (in sds) of the groups' within-group covariate spread, or 0.0.

    0.0 where the χ² test does not reject a shared within-group covariance at level 10⁻³.
    ``family`` a grouped linear regression, ``noisy`` its released vector (unprojected),
    ``scale`` the Laplace scale or ``noise_variance`` a Gaussian release's σ². None for other
    families, or where the released within-group sums cannot be solved (post-processing of
    released values).
    """
    if getattr(family, "base", None) != "linear_regression" or not getattr(family, "n_features", 0):
        return None
    n, within_xx, within_xy, within_yy = _within_group_sums(family, family.cells(noisy))
    try:
        slopes = np.linalg.solve(within_xx.sum(axis=0), within_xy.sum(axis=0))
    except np.linalg.LinAlgError:
        return None
    dof = max(float(n.sum()) - family.n_groups - family.n_features, 1.0)
    noise_variance = _release_noise_variance(scale, noise_variance)
    squares = slopes**2
    noise_weight = float(np.sum(squares**2) + 2.0 * (np.sum(squares) ** 2 - np.sum(squares**2)))
    residual = float(within_yy.sum() - slopes @ within_xy.sum(axis=0))
    fitted = float(slopes @ within_xx.sum(axis=0) @ slopes)
    if not fitted > 3.0 * math.sqrt(family.n_groups * noise_variance * noise_weight):  # v lost in the noise
        return None
    sigma2, pooled = max(residual, 0.0) / dof, fitted / dof  # σ̂² (the noise term below keeps σ̂ = 0 finite), v
    own = np.einsum("j,gjk,k->g", slopes, within_xx, slopes) / n  # v_g
    expected = 2.0 * pooled**2 / n + noise_variance * noise_weight / n**2  # var(v_g − v), shared covariance
    statistic = float(np.sum((own - pooled) ** 2 / expected))
    # n_g·(v_g − v) in sds of the released β̂ᵀΣ x̃y_g it moves: its sampling sd √n_g·σ·√v and the noise's.
    to_sds = n**2 / (n * sigma2 * pooled + noise_variance * float(np.sum(squares)))
    excess = float(np.mean(((own - pooled) ** 2 - expected) * to_sds))
    if not (math.isfinite(statistic) and math.isfinite(excess)) or chi2.sf(statistic, family.n_groups - 1) >= 1e-3:
        return 0.0 if math.isfinite(statistic) else None
    return math.sqrt(max(excess, 0.0))


def group_covariate_problem(release: Any) -> str | None:
    """A plain-words problem when a grouped linear release's covariates' spread differs between groups, else None."""
    if release.noisy_statistics is None:
        return None
    noise_variance = None if release.mechanism == "laplace" else release.noise_variance
    misfit = group_covariate_spread(release.family, release.noisy_statistics, release.scale, noise_variance)
    if misfit is None or misfit <= GROUP_SPREAD_LIMIT:
        return None
    return (
        f"group covariates: the covariates' released spread within groups differs between groups enough to move a "
        f"group's covariate-response sums by about {misfit:.3g} sds, but the grouped likelihood gives every group the "
        "same within-group covariance (each group's covariate mean is modelled), so the slopes and σ can be biased "
        "beyond their intervals (docs/exponential_family.md, grouped releases): release an ungrouped linear "
        "regression with the group indicators as covariates instead, or covariates scaled within their groups "
        "from public information"
    )
