"""Whether a grouped linear release could let the intercepts' prior carry the slopes to the between-group slope.

The grouped noise-aware likelihood (:mod:`pymc_dp.exponential_family.grouped_likelihood`) gives
each group its own latent covariate mean (:mod:`pymc_dp.exponential_family.grouped_moments`), so
covariates that shift between groups (``diamonds``: log carat differs between clarity grades by
0.38 of its sd) are read through each group's own mean; the mean-shift flag that guarded the
earlier shared-mean likelihood is gone. What the model still cannot tell apart is the case of
:mod:`~pymc_dp.exponential_family.grouped_moments`: intercepts tied to the covariates' group
means (Mundlak 1978). The groups' mean responses then follow a *between-group* slope β_B that
differs from the within-group slope β_W; an exchangeable prior on the intercepts favours β_B,
which makes them nearly equal (a small τ), and the release's within-group information, mostly
noise in Σ x̃y, may not outweigh that (measured: 8 groups of 500, ε = 20, slope 0.935 ± 0.007
against the true 0.8, σ at a fifth of the truth; NUTS on the rows reads β_W).

:func:`between_group_pull` reads the released cells only (post-processing, no privacy cost):
each group's mean response ȳ_g = Σ̂y_g/n̂_g and covariate means x̄_g = Σ̂x_g/n̂_g, the within-group
slopes β̂_W from the pooled within-group sums with their covariance V_W (the residual sd's and
the release noise's in the within sums: ν per released coordinate, G cells, W⁻¹(σ̂²W +
Gν((1 + ‖β̂‖²)I + β̂β̂ᵀ))W⁻¹), and the β that maximises the release's random-intercepts fit in
the Gaussian approximation: −½(β − β̂_W)ᵀV_W⁻¹(β − β̂_W) plus the profile log-likelihood of
ȳ_g − x̄_gᵀβ ~ N(μ, τ² + v_g) over μ and τ (v_g = σ̂²/n̂_g plus the noise's), searched from β̂_W
and from the between-group slope β̂_B, the best kept (the fit can be bimodal). Its distance from
β̂_W in V_W's sds is the pull: where the intercepts are exchangeable it is below one sd (V_W
against the between-group estimate's larger variance); a pull above :data:`BETWEEN_PULL_LIMIT`
flags the result. A rule of thumb, not the posterior (the user's priors on μ, τ are left out),
and it understates the posterior's pull where the between-group fit is sharp: ``diamonds`` at
ε = 1 read 1.8–2.1 while a one-call posterior was 119 NUTS sds off, NUTS's means not covered;
hence the limit of one sd, not two.

Measured, three Laplace releases each (the utility grid's bounds): the counterexample above 2.9,
4.1, 5.1 (flagged); group means shifted 0.5 sd with exchangeable intercepts, ε = 4: 0.05–0.11;
``diamonds`` ε = 4: 0.33–2.33 over 27 Laplace and Gaussian releases (4 above one: flagged),
ε = 1: 1.76–2.07; ``fair`` ε = 4: 0.10–0.41, ε = 1: 0.45–0.76 (not checked: below).

The result is also flagged (pull infinite) where the between-group slope is a rival fit the
release cannot overrule (:func:`_close_between_fit`): ``diamonds`` at ε = 1 in 12 of 12 releases
(Laplace and Gaussian), the counterexample in 3 of 3, exchangeable intercepts in none.
:func:`group_covariate_problem` checks only releases whose likelihood gives each group its own
covariate mean (group means shifted beyond chance); with one shared mean (``fair``) the group
means hardly move and the between-group slope has little leverage, so such a release is flagged
only where the between-group slope is a rival fit (an infinite pull). That closes the hole of a
release whose shift statistic reads 0 because its within-group slopes are noise (``diamonds`` at
ε = 1, about 1 release in 4, read with the shared mean): measured over 6 Laplace and 6 Gaussian
releases per cell, ``diamonds`` ε = 1 is flagged in 12 of 12 (one of them read with the shared
mean, pull infinite), ``fair`` (shared mean in 22 of 24, finite pulls 0.04–1.25) in 0 of 24 at
ε = 4 and ε = 1. It needs G > p + 1 groups
(else None: the between-group regression interpolates) and is linear regression's only.

Neighbouring relation: substitute (the release's). Nothing here reads a row.

References
----------
.. [1] Mundlak, Y. (1978). On the pooling of time series and cross section data.
   Econometrica 46(1), 69–85.
.. [2] Hausman, J. A. (1978). Specification tests in econometrics. Econometrica 46(6),
   1251–1271 (within against random-effects estimates).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from pymc_dp.exponential_family.densities import _release_noise_variance
from pymc_dp.exponential_family.grouped_likelihood import _per_group_means, _product_positions
from pymc_dp.exponential_family.grouped_moments import group_cell_sums

__all__ = ["BETWEEN_PULL_LIMIT", "between_group_pull", "group_covariate_problem"]

#: How close (in nats of the Gaussian approximation) a distinct between-group fit may come to the within-group one.
BETWEEN_FIT_MARGIN = 5.0

#: The largest pull (in sds of the within-group slopes) of the random-intercepts fit that a result is let pass with.
BETWEEN_PULL_LIMIT = 1.0


def _spread(values: np.ndarray, weights: np.ndarray, variances: np.ndarray) -> float:
    """τ²: the weighted spread of ``values`` around their weighted mean beyond their own ``variances`` (≥ 0)."""
    centre = float(np.sum(weights * values) / np.sum(weights))
    return max(float(np.sum(weights * ((values - centre) ** 2 - variances)) / np.sum(weights)), 0.0)


def _profile(residuals: np.ndarray, variances: np.ndarray) -> float:
    """max over μ and τ of Σ_g log N(r_g; μ, τ² + v_g): the intercepts' random-effects fit of the residuals."""

    def negative(log_tau2: float) -> float:
        total = np.exp(log_tau2) + variances
        weights = 1.0 / total
        centre = np.sum(weights * residuals) / np.sum(weights)
        return 0.5 * float(np.sum(np.log(total) + (residuals - centre) ** 2 * weights))

    scale = max(float(np.var(residuals)), float(variances.min()), 1e-300)
    grid = np.log(scale) + np.linspace(-25.0, 2.0, 55)
    best = grid[int(np.argmin([negative(t) for t in grid]))]
    found = minimize_scalar(negative, bracket=(best - 0.5, best + 0.5))
    return -min(float(found.fun), negative(best))


def between_group_pull(family: Any, noisy: np.ndarray, scale: float, noise_variance: float | None) -> float | None:
    """How far the intercepts' random-effects fit carries the slopes from the within-group slope (module docstring).

    The largest Mahalanobis distance, in the within-group estimate's own sds, from β̂_W to the β
    that maximises −½(β − β̂_W)ᵀV_W⁻¹(β − β̂_W) plus the profile log-likelihood of the groups' mean
    responses ȳ_g − x̄_gᵀβ ~ N(μ, τ² + v_g) (over μ and τ), searched from β̂_W and from the
    between-group slope β̂_B. ``family`` a grouped linear regression, ``noisy`` its released vector
    (unprojected), ``scale`` the Laplace scale or ``noise_variance`` a Gaussian release's σ². None
    for other families, with G ≤ p + 1 groups, or where the released sums cannot be solved
    (post-processing of released values).
    """
    if getattr(family, "base", None) != "linear_regression" or not getattr(family, "n_features", 0):
        return None
    p, groups = family.n_features, family.n_groups
    if groups <= p + 1:
        return None
    n, sx, sy, sxx, sxy, syy = group_cell_sums(family.cells(noisy), _product_positions(family), p)
    nu = _release_noise_variance(scale, noise_variance)
    within_xx = np.sum(sxx - sx[:, :, None] * sx[:, None, :] / n[:, None, None], axis=0)
    within_xy = np.sum(sxy - sx * (sy / n)[:, None], axis=0)
    design, ybar = sx / n[:, None], sy / n
    with_intercept = np.column_stack([np.ones(groups), design])
    try:
        slopes = np.linalg.solve(within_xx, within_xy)
        residual = float(np.sum(syy - sy**2 / n) - slopes @ within_xy)
        sigma2 = max(residual / max(float(n.sum()) - groups - p, 1.0), 1e-12)
        inverse = np.linalg.inv(within_xx)
        spread = sigma2 * within_xx + groups * nu * ((1.0 + slopes @ slopes) * np.eye(p) + np.outer(slopes, slopes))
        precision = np.linalg.inv(inverse @ spread @ inverse)
        between = np.linalg.solve(with_intercept.T @ (n[:, None] * with_intercept), with_intercept.T @ (n * ybar))[1:]
    except np.linalg.LinAlgError:
        return None
    variances = sigma2 / n + nu * (1.0 + slopes @ slopes) / n**2  # of ȳ_g − x̄_gᵀβ given the group's covariates

    def negative(beta: np.ndarray) -> float:
        gap = beta - slopes
        return 0.5 * float(gap @ precision @ gap) - _profile(ybar - design @ beta, variances)

    fits = [minimize(negative, start, method="Nelder-Mead") for start in (slopes, between)]
    best = min(fits, key=lambda fit: fit.fun).x
    pull = math.sqrt(max(float((best - slopes) @ precision @ (best - slopes)), 0.0))
    if _close_between_fit(negative, slopes, between, (with_intercept, ybar, variances, precision)):
        pull = math.inf
    return pull if not math.isnan(pull) else None


def _close_between_fit(negative: Any, slopes: np.ndarray, between: np.ndarray, parts: tuple[np.ndarray, ...]) -> bool:
    """Whether the between-group slope is a rival fit that the release's within-group information cannot overrule.

    Rival: within :data:`BETWEEN_FIT_MARGIN` nats of the within-group slope's fit, and the
    between-group regression's information about the slopes (weights 1/(τ_B² + v_g), the intercept
    profiled out) at least V_W⁻¹'s in some direction. The posterior then rests on the intercepts'
    exchangeability, which the release cannot test (``diamonds`` at ε = 1: the within-group
    estimate of depth's slope is noise). Exchangeable intercepts with shifted covariates (ε = 4):
    between-group information about a twentieth of the within-group's, so this does not fire.
    """
    design, ybar, variances, precision = parts
    if negative(between) - negative(slopes) > BETWEEN_FIT_MARGIN:
        return False
    residuals = ybar - design @ np.linalg.lstsq(design, ybar, rcond=None)[0]
    weights = 1.0 / (_spread(residuals, 1.0 / variances, variances) + variances)
    information = design.T @ (weights[:, None] * design)
    try:
        between_info = information[1:, 1:] - np.outer(information[1:, 0], information[0, 1:]) / information[0, 0]
        root = np.linalg.cholesky(np.linalg.inv(precision))
        ratio = float(np.max(np.linalg.eigvalsh(root.T @ between_info @ root)))
    except np.linalg.LinAlgError:
        return False
    return math.isfinite(ratio) and ratio >= 1.0


def group_covariate_problem(release: Any) -> str | None:
    """A plain-words problem when a grouped linear release's between-group slope is not ruled out (else None)."""
    if release.noisy_statistics is None:
        return None
    noise_variance = None if release.mechanism == "laplace" else release.noise_variance
    family = release.family
    if getattr(family, "base", None) != "linear_regression" or not getattr(family, "n_features", 0):
        return None
    noise = _release_noise_variance(release.scale, noise_variance)
    shared = not _per_group_means(family, family.cells(release.noisy_statistics), _product_positions(family), noise)
    pull = between_group_pull(release.family, release.noisy_statistics, release.scale, noise_variance)
    # One shared covariate mean: group means that hardly shift give the between slope little leverage, so only a
    # rival between-group fit (infinite pull) flags it; the gate's noisy slopes can read 0 where the means do shift.
    if pull is None or not (math.isinf(pull) if shared else pull > BETWEEN_PULL_LIMIT):
        return None
    remedy = (
        "(docs/exponential_family.md, grouped releases). Add the covariates' group means as a group-level predictor "
        "of the intercepts, or release at a larger ε"
    )
    if math.isinf(pull):  # a rival fit: what the release cannot test, not a measured pull
        read = " (read with one covariate mean shared by the groups)" if shared else ""
        return (
            "group covariates: the slope that fits the groups' mean responses on the covariates' group means is a "
            f"rival to the within-group slope that this release{read} cannot rule out, so the result rests on the "
            "intercepts being independent of the covariates' group means, which the release cannot test " + remedy
        )
    return (
        f"group covariates: a random-intercepts fit of this release moves the slopes about {pull:.3g} sds of their "
        f"within-group estimate (above {BETWEEN_PULL_LIMIT:g}) towards the slope of the groups' mean responses on the "
        "covariates' group means: the intercepts' exchangeable prior can carry the slopes there, with σ and the "
        "intervals too small " + remedy
    )
