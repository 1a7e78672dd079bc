"""Whether a count regression's noise-aware likelihood is read too far from its last anchor.

The noise-aware Poisson and negative-binomial likelihoods
(:func:`pymc_dp.exponential_family.counts.count_regression_loglik`) expand the clipped counts'
mean function around the last anchor β̂, F(β) ≈ F̂ + Ĥ(β − β̂), and drop the terms of third and
higher order. Near β̂ that costs O(1/√N) of a posterior sd; read far from β̂ the expansion's
mode is off by far more than its intervals show. Two ways this was measured usable:

* anchors that stopped short of the mode (each anchor's Newton step is capped at one nat,
  :data:`~pymc_dp.exponential_family.counts.MAX_ANCHOR_STEP`): a binary covariate at 10 %
  prevalence with rate ratio 10, N = 4,000, ε = 1000, two anchors, 100–200 posterior sds off;
* counts clipped where the mean function bends (the privacy review's cases): y ~ Poisson(120)
  with ``y_max`` = 100, N = 10⁴, ε = 5, two anchors, 22.9 posterior sds off.

**The rule.** Row i's mean is g(ηᵢ) = m(e^{ηᵢ}), m the family's clipped-count mean (Poisson or
negative binomial, public ``y_max`` and α), with slope g′ = h. The expansion moves row i's mean
by g′(ηᵢ)·uᵢ, uᵢ = xᵢᵀ(β̃ − β̂); the exact mean moves that much when the linear predictor moves
vᵢ, g(ηᵢ + vᵢ) = g(ηᵢ) + g′(ηᵢ)uᵢ, so the expansion misplaces the row by ρᵢ = uᵢ − vᵢ. Its mode's
error is Ĥ⁻¹Σᵢ hᵢxᵢρᵢ, a weighted least-squares projection of the ρᵢ: with |ρᵢ| ≤ r·|uᵢ|, its
size in Ĥ's metric (the exact posterior's sds) is at most r·‖β̃ − β̂‖_Ĥ, and in the published
posterior's sds smaller by the release noise's widening, at least √((Ĥ⁻¹)ⱼⱼ / Cⱼⱼ) for the least
widened coefficient j, C = Ĥ⁻¹(Ĥ + s²I)Ĥ⁻¹ the likelihood's covariance (s² the release noise plus
the Hessian noise at β̃). r is the largest |u − v|/|u| over the linear predictors the public
covariate box allows at β̂ and |u| up to the reach δ = maxₓ |xᵀ(β̃ − β̂)| (infinite where no v
exists: the expansion asks for a mean outside (0, ``y_max``)). Without clipping g = exp,
v = log(1 + u) and r = b(δ)/δ with b(δ) = −δ − log(1 − δ), exact for an intercept alone (one
Newton step's error). It is a rule of thumb, not a proof: |ρᵢ| ≤ r·|uᵢ| holds row by row where
each row's exact move is its own vᵢ, as in an intercept alone or an intercept with one binary
covariate; measured without clipping over 2–5 binary, lognormal and uniform covariates with an
interaction, the error stayed within 0.8× the rule wherever it read 0.2–1 sds (privacy review).

:func:`expansion_reach` computes it from the release alone (post-processing, no privacy cost):
the expansion's own mode β̃ = β̂ + Ĥ⁺(V̂ − F̂), on the eigen-directions Ĥ resolves; the result is
flagged (:func:`expansion_reach_problem`) when the rule exceeds :data:`EXPANSION_BIAS_LIMIT`
posterior sds. Measured, unclipped (P = 5, x ~ N(0, 1) on [−2, 2], N = 10⁴, one anchor): at
ε = 1, 0.24–0.39 sds for errors within 1.6 DP sds, and 1.9 for one release whose errors reached
2.0; at ε = 4, 0.27–0.79. The binary case above: unbounded; the clipped one: flagged (tests).

Not covered: the published sds use Ĥ, the slope at β̂; where clipping bends the mean between β̂
and the mode they can be narrower than the exact posterior's (0.4–0.9× in the review's clipped
cases), which this rule does not measure.

Neighbouring relation: substitute (the release's). Nothing here reads a row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import optimize

from pymc_dp.exponential_family.counts import clamped_poisson_hessian_weight, clamped_poisson_mean
from pymc_dp.exponential_family.densities import ReleaseReading

__all__ = ["EXPANSION_BIAS_LIMIT", "expansion_reach", "expansion_reach_problem", "step_error_ratio"]

#: The largest bound on the expansion mode's error, in posterior sds, that a result may carry unflagged.
EXPANSION_BIAS_LIMIT = 1.0

#: Eigenvalues of the released Hessian below this share of its largest are directions it does not resolve.
_UNRESOLVED = 1e-9


def _clipped_mean(family: Any) -> tuple[Callable[[float], float], Callable[[float], float]]:
    """g(η) = m(e^η) and g′(η) = h(e^η), the family's clipped-count mean and its slope (public settings)."""
    if getattr(family, "alpha", None) is not None:  # negative binomial, α public
        from pymc_dp.exponential_family.negative_binomial import clamped_nb_hessian_weight, clamped_nb_mean

        def mean(eta: float) -> float:
            return float(clamped_nb_mean(np.exp([eta]), family.alpha, family.y_max)[0])

        def slope(eta: float) -> float:
            return float(clamped_nb_hessian_weight(np.exp([eta]), family.alpha, family.y_max)[0])

        return mean, slope

    def poisson_mean(eta: float) -> float:
        return float(clamped_poisson_mean(np.exp([eta]), family.y_max)[0])

    def poisson_slope(eta: float) -> float:
        return float(clamped_poisson_hessian_weight(np.exp([eta]), family.y_max)[0])

    return poisson_mean, poisson_slope


def step_error_ratio(family: Any, anchor_beta: np.ndarray, reach: float, points: int = 33) -> float:
    """r: the largest |u − v|/|u| of one linearised step, over the box's linear predictors at β̂ and |u| ≤ ``reach``.

    v solves g(η + v) = g(η) + g′(η)·u for the family's clipped-count mean g (module docstring);
    infinite where the linearised mean leaves (0, ``y_max``), or v lies beyond 40 nats. Public
    settings and released values only.
    """
    if reach <= 0.0:
        return 0.0
    lower, upper = (np.asarray(b, dtype=float) for b in family.x_bounds)
    beta = np.asarray(anchor_beta, dtype=float)
    low, high = float(np.minimum(lower * beta, upper * beta).sum()), float(np.maximum(lower * beta, upper * beta).sum())
    mean, slope = _clipped_mean(family)
    worst = 0.0
    for eta in np.linspace(low, high, points if high > low else 1):
        start, gradient = mean(eta), slope(eta)
        for step in (-reach, -reach / 2, reach / 2, reach):
            target = start + gradient * step
            if not 0.0 < target < float(family.y_max):
                return math.inf
            below, above = -max(1.0, 2 * reach), max(1.0, 2 * reach)
            while mean(eta + below) > target and below > -40.0:
                below *= 2
            while mean(eta + above) < target and above < 40.0:
                above *= 2
            if not mean(eta + below) <= target <= mean(eta + above):
                return math.inf
            move = optimize.brentq(lambda v, eta=eta, target=target: mean(eta + v) - target, below, above, xtol=1e-12)
            worst = max(worst, abs(step - move) / abs(step))
    return worst


def expansion_reach(release: Any) -> dict[str, Any] | None:
    """How far the noise-aware count likelihood of ``release`` is read from its last anchor (public).

    Returns None for a release without an anchor or of a family that is not a count regression;
    else a dict with the expansion's mode ``mode`` (β̃), its ``reach`` δ in nats of the linear
    predictor over the covariate box, the ``step_error_ratio`` r, the ``distance`` ‖β̃ − β̂‖_Ĥ, and
    ``bias_in_sds``: the rule's estimate of the mode's error in posterior sds (module docstring).
    Post-processing of released values: no ε.
    """
    family = release.family
    counts = hasattr(family, "_expansion_target")
    if not (counts and release.covariate_anchors and release.noisy_statistics is not None):
        return None
    noise_variance = None if release.mechanism == "laplace" else release.noise_variance
    anchor = release.covariate_anchors[-1].likelihood_anchor()
    reading = ReleaseReading(release.noisy_statistics, release.n_rows, release.scale, noise_variance, anchor)
    observed, offset, noise, (lower, upper) = family._expansion_target(reading)
    d = family.n_features
    keep = np.nonzero(upper[:d] > lower[:d])[0]
    anchor_beta, _, _, hessian, hessian_noise = anchor
    offset = np.zeros(d) if offset is None else np.asarray(getattr(offset, "data", offset), dtype=float)
    values, vectors = np.linalg.eigh(np.asarray(hessian, dtype=float)[np.ix_(keep, keep)])
    resolved = values > _UNRESOLVED * max(float(values.max(initial=0.0)), 1e-300)
    rotated = vectors.T @ (np.asarray(observed, dtype=float)[keep] - offset[keep])
    step = np.zeros(d)
    step[keep] = vectors[:, resolved] @ (rotated[resolved] / values[resolved])
    bounds_lower, bounds_upper = (np.asarray(b, dtype=float) for b in family.x_bounds)
    box = np.maximum(np.abs(bounds_lower), np.abs(bounds_upper))
    reach = float(np.abs(step) @ box)
    distance = math.sqrt(float(np.sum(rotated[resolved] ** 2 / values[resolved])))  # ‖β̃ − β̂‖ in Ĥ's metric
    spread = float(noise) + float(hessian_noise) * float(step @ step)
    weights = vectors[:, resolved] ** 2
    exact = weights @ (1.0 / values[resolved])  # (Ĥ⁺)ⱼⱼ: a coefficient's variance without the release noise
    noisy = weights @ ((values[resolved] + spread) / values[resolved] ** 2)  # the likelihood's, with it
    inflation = float(np.sqrt(np.max(exact / noisy, initial=0.0)))
    ratio = step_error_ratio(family, anchor_beta, reach)
    bias_in_sds = math.inf if math.isinf(ratio) else ratio * distance * inflation
    return {
        "mode": [float(v) for v in np.asarray(anchor_beta, dtype=float) + step],
        "reach": reach,
        "step_error_ratio": ratio,
        "distance": distance,
        "bias_in_sds": bias_in_sds,
        "limit": EXPANSION_BIAS_LIMIT,
    }


def expansion_reach_problem(release: Any) -> str | None:
    """A plain-words problem when the count likelihood's mode lies too far from its last anchor (else None)."""
    reach = expansion_reach(release)
    if reach is None or reach["bias_in_sds"] <= EXPANSION_BIAS_LIMIT:
        return None
    bound = reach["bias_in_sds"]
    bias = "an unbounded amount" if not math.isfinite(bound) else f"about {bound:.3g} of the posterior's sds"
    return (
        f"anchor reach: the noise-aware count likelihood's mode lies {reach['reach']:.3g} nats of the linear "
        f"predictor from its last anchor over the covariate box, where the dropped terms of its expansion can move "
        f"the mode by {bias}; the posterior can be far from the exact one without its intervals "
        "showing it (docs/exponential_family.md, count models). Release with more covariate anchors "
        "(covariate_anchors) or a larger ε, so that the last anchor lands near the mode, and with a y_max above "
        "most counts where clipping bends the mean"
    )
