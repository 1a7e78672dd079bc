"""Whether a count regression's noise-aware likelihood is read too far from its last anchor.

The noise-aware Poisson and negative-binomial likelihoods
(:func:`pymc_dp.exponential_family.counts.count_regression_loglik`) expand the clipped counts'
mean function around the last anchor β̂, F(β) ≈ F̂ + Ĥ(β − β̂), and drop the terms of third and
higher order. Near β̂ that costs O(1/√N) of a posterior sd; read far from β̂ the expansion's
mode is off by far more than its intervals show. A run whose anchors stopped short of the mode
(each anchor's Newton step is capped at one nat,
:data:`~pymc_dp.exponential_family.counts.MAX_ANCHOR_STEP`) was measured 100–200 posterior sds
off and came back usable: a binary covariate at 10 % prevalence with rate ratio 10, N = 4,000,
ε = 1000, two anchors.

**The bound.** For an intercept alone (λ = e^β, no clipping) the expansion's mode lies
Δ = e^{δ*} − 1 from β̂ when the exact one lies δ* from it, so it is off by
Δ − log(1 + Δ): one Newton step's error, at most b(δ) = −δ − log(1 − δ) for |Δ| ≤ δ (infinite
from δ = 1). With covariates, row i's linear predictor moves uᵢ = xᵢᵀ(β̃ − β̂), |uᵢ| ≤ δ over
the public covariate box, and the mode's error is Ĥ⁻¹Σᵢ λᵢxᵢρᵢ with |ρᵢ| ≤ |uᵢ|·b(δ)/δ; a
weighted least-squares projection, so in Ĥ's metric (the exact posterior's sds) it is at most
b(δ)/δ · (Σᵢ λᵢuᵢ²)^½ = b(δ)/δ · ‖β̃ − β̂‖_Ĥ. In the published posterior's sds it is smaller by
the release noise's widening, at least √((Ĥ⁻¹)ⱼⱼ / Cⱼⱼ) for the least widened coefficient j,
C = Ĥ⁻¹(Ĥ + s²I)Ĥ⁻¹ the likelihood's covariance (s² the release noise plus the Hessian noise at
β̃). Exact for an intercept alone; with clipping (λ near ``y_max``) the mean function bends
sooner and the bound is rough.

:func:`expansion_reach` computes it from the release only (post-processing, no privacy cost):
the expansion's own mode β̃ = β̂ + Ĥ⁺(V̂ − F̂), on the eigen-directions Ĥ resolves; the
result is flagged (:func:`expansion_reach_problem`) when the bound exceeds
:data:`EXPANSION_BIAS_LIMIT` posterior sds. Measured (P = 5, x ~ N(0, 1) on [−2, 2], N = 10⁴,
one anchor): at ε = 1, bounds 0.24–0.39 sds for errors within 1.6 DP sds, and 1.9 for one
release whose errors reached 2.0; at ε = 4, 0.27–0.79. The binary case above: unbounded.

Neighbouring relation: substitute (the release's). Nothing here reads a row.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pymc_dp.exponential_family.densities import ReleaseReading

__all__ = ["EXPANSION_BIAS_LIMIT", "expansion_reach", "expansion_reach_problem"]

#: The largest bound on the expansion mode's error, in posterior sds, that a result may carry unflagged.
EXPANSION_BIAS_LIMIT = 1.0

#: Eigenvalues of the released Hessian below this share of its largest are directions it does not resolve.
_UNRESOLVED = 1e-9


def _worst_bias(reach: float) -> float:
    """b(δ) = −δ − log(1 − δ): an intercept's error after one Newton step of at most δ nats (infinite from 1)."""
    return math.inf if reach >= 1.0 else -reach - math.log1p(-reach)


def expansion_reach(release: Any) -> dict[str, Any] | None:
    """How far the noise-aware count likelihood of ``release`` is read from its last anchor (public).

    Returns None for a release without an anchor or of a family that is not a count regression;
    else a dict with the expansion's mode ``mode`` (β̃), its ``reach`` δ in nats of the linear
    predictor over the covariate box, ``bias`` b(δ) in nats, the ``distance`` ‖β̃ − β̂‖_Ĥ, and
    ``bias_in_sds``: the bound on the mode's error in posterior sds (module docstring).
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
    bias = _worst_bias(reach)
    bias_in_sds = math.inf if math.isinf(bias) else (0.0 if reach == 0.0 else bias / reach * distance * inflation)
    return {
        "mode": [float(v) for v in np.asarray(anchor_beta, dtype=float) + step],
        "reach": reach,
        "bias": bias,
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
    bias = "an unbounded amount" if not math.isfinite(bound) else f"up to {bound:.3g} of the posterior's sds"
    return (
        f"anchor reach: the noise-aware count likelihood's mode lies {reach['reach']:.3g} nats of the linear "
        f"predictor from its last anchor over the covariate box, where the dropped terms of its expansion can move "
        f"the mode by {bias}; the posterior can be far from the exact one without its intervals "
        "showing it (docs/exponential_family.md, count models). Release with more covariate anchors "
        "(covariate_anchors), or a larger ε, so that the last anchor lands near the mode"
    )
