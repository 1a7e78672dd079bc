"""Per-group covariate means for the grouped noise-aware likelihood (issue 34): partial pooling around one mean.

A grouped release's cells hold each group's Σ x̃ and Σ x̃x̃ᵀ next to its y statistics. With one
Gaussian covariate distribution N(μₓ, Σₓ) shared by all groups, a data set whose covariates
shift between groups (``diamonds``: log carat differs between clarity grades by 0.38 of its sd)
had its cells' Σ x̃_g, far from n_g·μₓ, read through the wrong mean: each group's intercept
absorbed the slope times its covariate shift, the slopes shrank and σ grew (15–80 NUTS sds off).

Design: group g's covariates are N(μ_g, Σ_w), its own latent mean μ_g and one within-group
covariance Σ_w shared by the groups (the covariance of
:func:`~pymc_dp.exponential_family.regression_likelihoods.gaussian_covariates`, whose mean μₓ
becomes the population mean), and the group means are partially pooled, non-centred:

    μ_gj = μₓj + τⱼ·u_gj,  u_gj ~ N(0, 1),  τⱼ ~ HalfNormal(hⱼ/4)

(``{name}_x_group_offset`` u, G × free features; ``{name}_x_group_sd`` τ; hⱼ the half-width of
feature j's public interval, the scale of the shared prior). Σ x̃_g ≈ n_g·μ_g to within √n_g
within-group sds plus the release noise, so a group of hundreds of rows pins its own μ_g and the
y statistics are read through that group's own covariates; a group whose cell is mostly noise
falls back to the population mean with τ as its width (wide, not confidently shifted). Latent
variables added: G·D + D (D the free features), O(1) in N. The within-group covariance stays
shared: a group whose covariates' spread differs from the others' is still misspecified.

What the model cannot tell apart. With the intercepts exchangeable (the user's hierarchical
prior, α_g independent of the covariates), the groups' mean responses ȳ_g = α_g + β·μ_g also
inform β *between* groups, and where the intercepts are tied to the covariates' group means
(Mundlak 1978) the between-group slope differs from the within-group one. On the raw rows the
within-group information dominates; in a release it is mostly noise in Σ x̃y (the first moments
keep theirs), so the prior's pull to equal intercepts can carry β to the between-group slope,
with a small τ and a confident interval. :mod:`~pymc_dp.exponential_family.group_covariates`
flags a release where the released within-group information does not rule that out.

Neighbouring relation: substitute (the release's). Post-processing of the release: no new
release, no ε, the sensitivity of the released cells unchanged (the cells already held Σ x̃_g);
nothing here reads a row, the start values read the released cells.

References
----------
.. [1] Bernstein, G. and Sheldon, D. (2019). Differentially private Bayesian linear
   regression. NeurIPS, §3 (the CLT likelihood with latent covariate moments).
.. [2] Mundlak, Y. (1978). On the pooling of time series and cross section data.
   Econometrica 46(1), 69–85 (random effects correlated with the covariates' group means).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytensor.tensor as pt

from pymc_dp.exponential_family.regression_likelihoods import X_PRIOR_FRACTION, gaussian_covariates

__all__ = [
    "GROUP_SHIFT_LIMIT",
    "group_cell_sums",
    "group_mean_shift",
    "group_mean_start",
    "grouped_gaussian_covariates",
    "within_group_sums",
]

#: Shifts of the groups' mean responses by their covariates' group means (in intercept sds) up to which the
#: grouped linear likelihood keeps one covariate mean shared by all groups (:func:`group_mean_shift`).
GROUP_SHIFT_LIMIT = 2.0


def group_cell_sums(cells: np.ndarray, position: dict[tuple[int, int], int], p: int) -> tuple[np.ndarray, ...]:
    """(n̂, Σx, Σy, Σxxᵀ, Σxy, Σy²) per group from a grouped linear release's cells (G, G × p, G, G × p × p,
    G × p, G), n̂ at least one row (released values only)."""
    y = p + 1
    n = np.maximum(cells[:, position[(0, 0)]], 1.0)
    sx = cells[:, [position[(0, j)] for j in range(1, p + 1)]]
    sxx = np.stack([cells[:, [position[(min(j, k), max(j, k))] for k in range(1, p + 1)]] for j in range(1, p + 1)], 1)
    sxy = cells[:, [position[(j, y)] for j in range(1, p + 1)]]
    return n, sx, cells[:, position[(0, y)]], sxx, sxy, cells[:, position[(y, y)]]


def group_mean_shift(
    cells: np.ndarray, position: dict[tuple[int, int], int], n_features: int, noise: float
) -> float | None:
    """How far the covariates' released group means move the groups' mean responses, in intercept sds (0 if chance).

    From the released cells only (post-processing): each group's noisy covariate means m̂_g = Σ̂x_g / n̂_g, the
    within-group least-squares slopes β̂ and residual sd σ̂ from the pooled within-group sums, and each group's
    shift |(m̂_g − m̄)·β̂| in units of its intercept sd σ̂/√n̂_g. Under one shared covariate mean the shifts are
    chance (variance β̂ᵀΣ̂β̂/n̂_g, Σ̂ the within-group covariance, plus the noise's, ``noise`` per coordinate): 0
    unless a χ² test rejects that at 10⁻³, else the root-mean-square shift beyond chance. None where the
    within-group sums cannot be solved. ``fair`` (covariate group means 0.09–0.11 sds apart): below
    :data:`GROUP_SHIFT_LIMIT`; ``diamonds`` far above.
    """
    from scipy.stats import chi2

    p = n_features
    n, sx, sy, sxx, sxy, syy = group_cell_sums(cells, position, p)
    within_xx = np.sum(sxx - sx[:, :, None] * sx[:, None, :] / n[:, None, None], axis=0)
    within_xy = np.sum(sxy - sx * (sy / n)[:, None], axis=0)
    try:
        slopes = np.linalg.solve(within_xx, within_xy)
    except np.linalg.LinAlgError:
        return None
    residual = np.sum(syy - sy**2 / n) - slopes @ within_xy
    dof = max(float(n.sum()) - cells.shape[0] - p, 1.0)
    sigma = math.sqrt(max(residual / dof, 1e-12))
    shift = (sx / n[:, None] - sx.sum(axis=0) / n.sum()) @ slopes
    expected = float(slopes @ (within_xx / dof) @ slopes) / n + noise * float(slopes @ slopes) / n**2
    statistic = float(np.sum(shift**2 / expected))
    excess = float(np.mean(shift**2 * n / sigma**2 - expected * n / sigma**2))
    if not (math.isfinite(statistic) and math.isfinite(excess)):
        return None
    if chi2.sf(statistic, cells.shape[0] - 1) >= 1e-3:
        return 0.0
    return math.sqrt(max(excess, 0.0))


def within_group_sums(cells: np.ndarray, position: dict[tuple[int, int], int], d: int) -> np.ndarray:
    """The cells' sum with its Σ x̃ⱼx̃ₖ replaced by the pooled within-group sums plus N·x̄x̄ᵀ (released values only).

    Σ_g (Σ x̃ⱼx̃ₖ_g − Σ x̃ⱼ_g·Σ x̃ₖ_g / n̂_g) + Σ x̃ⱼ·Σ x̃ₖ / N̂: the sum a release of one group with the
    groups' within spread would have, so that the shared covariance starts at the within-group
    covariance (not the total, which holds the between-group spread). Only where NUTS starts.
    """
    total = cells.sum(axis=0).copy()
    sizes = np.maximum(cells[:, position[(0, 0)]], 1.0)
    n = max(float(sizes.sum()), 1.0)
    for j in range(1, d):
        for k in range(j, d):
            sj, sk = cells[:, position[(0, j)]], cells[:, position[(0, k)]]
            within = float(np.sum(cells[:, position[(j, k)]] - sj * sk / sizes))
            total[position[(j, k)]] = within + float(sj.sum() * sk.sum()) / n
    return total


def group_mean_start(
    cells: np.ndarray, free: np.ndarray, position: dict[tuple[int, int], int], bounds: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """Each group's released covariate means Σ̂ x̃_gj / n̂_g (G × free), clipped into the public bounds.

    A group whose released size is below one row (a cell that is mostly noise) starts at the
    pooled mean Σ_g Σ̂ x̃_g / Σ_g n̂_g. Only where NUTS starts, not the model; public (the cells).
    """
    lower, upper = bounds
    sizes = cells[:, position[(0, 0)]]
    sums = cells[:, [position[(0, int(j))] for j in free]]
    pooled = sums.sum(axis=0) / max(float(sizes.sum()), 1.0)
    start = np.where((sizes >= 1.0)[:, None], sums / np.maximum(sizes, 1.0)[:, None], pooled[None, :])
    return np.clip(start, lower[free], upper[free])


def grouped_gaussian_covariates(
    cell: Any, cells: np.ndarray, n_rows: int, name: str, position: dict[tuple[int, int], int]
) -> tuple[Any, Any]:
    """(group means G × D, within-group covariance D × D) of the covariates x̃ = (1, x), latent (adds them to the model).

    ``cell`` the ungrouped regression of one cell (its ``x_bounds`` include the constant
    column), ``cells`` the G released cells (G × cell size), ``n_rows`` the public N, ``position``
    the index of Σ x̃ⱼx̃ₖ (j ≤ k) in a cell. The population mean and the within-group covariance
    are :func:`~pymc_dp.exponential_family.regression_likelihoods.gaussian_covariates`'s
    (``{name}_x_…``, started from the pooled within-group sums); the group means are the
    population mean plus ``{name}_x_group_sd`` times ``{name}_x_group_offset`` (standard normal)
    on the features whose bounds have positive width, a constant feature staying its constant.

    Notes
    -----
    Neighbouring relation: substitute (the release's). Post-processing of released values: no ε.
    """
    import pymc as pm

    lower, upper = (np.asarray(b, dtype=float) for b in cell.x_bounds)
    x_mean, x_cov = gaussian_covariates(cell, within_group_sums(cells, position, lower.size), n_rows, name, position)
    free = np.nonzero(upper > lower)[0]
    n_groups = cells.shape[0]
    means = pt.ones((n_groups, 1)) * x_mean[None, :]
    if not free.size:
        return means, x_cov
    half = X_PRIOR_FRACTION * (upper[free] - lower[free]) / 2.0
    start = group_mean_start(cells, free, position, (lower, upper))
    spread_start = np.clip(start.std(axis=0), 0.1 * half, 2.0 * half)
    spread = pm.HalfNormal(f"{name}_x_group_sd", sigma=half, shape=free.size, initval=spread_start)
    # Non-centred: a covariate whose group means hardly differ (τ of the order of the noise in each μ_g)
    # would put the centred form in its funnel. The offsets start at the released means, standardised.
    offset_start = np.clip((start - start.mean(axis=0)) / spread_start, -3.0, 3.0)
    offsets = pm.Normal(f"{name}_x_group_offset", 0.0, 1.0, shape=(n_groups, free.size), initval=offset_start)
    group_means = x_mean[free][None, :] + spread[None, :] * offsets
    return pt.set_subtensor(means[:, free], group_means), x_cov
