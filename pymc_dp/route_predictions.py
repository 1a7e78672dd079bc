"""What the release routes can deliver, predicted from public quantities only (the planner's rows for them).

Two routes release once and then draw at no further cost: the released statistics of a linear,
logistic, Poisson or negative-binomial regression, or of a grouped linear or logistic regression
(:func:`pymc_dp.release_statistics`), and the general
release-once route (:func:`pymc_dp.release_once`). This module holds their settings as the
one-call route runs them, their recommendation texts and the release-once prediction that
:func:`pymc_dp.plan` prints; :mod:`pymc_dp.release_once` takes its noise split from here.

The release-once prediction
---------------------------
The last Newton step's score release carries noise of standard deviation σ_g = κ τ_g b_g per
coordinate (κ = 2 under substitute neighbours, 1 under add/remove; τ_g from the split of
:func:`release_once_noise_multipliers`), and the Newton step turns it into an error Â⁻¹ξ of the
mean. With the score clip b_g = m · (median per-row score norm) — the one-call route's
``"auto"`` bound, m = :data:`RELEASE_ONCE_CLIP_MARGIN` — and the per-row Fisher information
spread evenly over the P unconstrained coordinates, I ≈ E‖sᵢ‖²/P, with the root mean square
score norm taken as its median, the posterior sd is 1/√(N I) and the noise's error in units of
it is

    r_g = κ m τ_g √(P / N),

whatever the data's scale (the bound follows it). The widened posterior's sd is then about
√(1 + r_g²) times the non-private one, and its mean is off by about r_g of the non-private sds,
which the widening covers. The curvature's noise, 2√P κ τ_H b_H in spectral norm with b_H = m ·
(median per-row Hessian norm), relative to the curvature N · (median Hessian norm)/√P, is
h = 2 P κ m τ_H / N; above 1/2 the curvature is not resolved. The route is predicted usable
when √(1 + r_g²) ≤ :data:`RELEASE_ONCE_MAX_SD_RATIO` and h ≤
:data:`RELEASE_ONCE_MAX_CURVATURE_NOISE`. Checked against runs in ``docs/release_once.md``: a
logistic regression (P = 6, ε = 1) predicted 1.71 and 1.09 at N = 10⁴ and 10⁵ against measured
sd ratios of 1.57 and 1.08 (there with fixed bounds). A posterior far from Gaussian (small N,
several modes, heavy tails) is not seen by this prediction: the run's own diagnostics flag
what they can.

The centred samplers' prediction lives in :mod:`pymc_dp.centred_predictions` (the same floor).

Notes
-----
Nothing here releases or reads data: every value is a function of public settings (ε, δ, N, P,
the chains, the shares).
"""

from __future__ import annotations

import math
from typing import Any

from pymc_dp.accounting.calibrate import noise_multiplier_for_target
from pymc_dp.mechanisms.clipping import sensitivity_of_clipped_sum
from pymc_dp.usability import DPADVI_MAX_MEAN_ERROR, MIN_USEFUL_ESS

__all__ = [
    "COUNT_CLIP_CAVEAT",
    "RELEASE_ONCE_CLIP_MARGIN",
    "RELEASE_ONCE_CLIP_QUANTILE",
    "RELEASE_ONCE_CLIP_SHARE",
    "RELEASE_ONCE_MAX_CURVATURE_NOISE",
    "RELEASE_ONCE_MAX_SD_RATIO",
    "RELEASE_ONCE_NEWTON_STEPS",
    "RELEASE_ROUTES",
    "gaussian_to_laplace_variance",
    "one_call_route",
    "release_anchors",
    "release_once_noise_multipliers",
    "release_once_prediction",
    "release_once_row",
    "released_statistics_row",
]

#: ``grad_clip="auto"`` / ``hessian_clip="auto"`` of :func:`pymc_dp.release_once`: the quantile of the noisy norm
#: histogram read (the median: resolvable through the histogram's noise from a few hundred rows on at a 5 % share,
#: unlike a high quantile).
RELEASE_ONCE_CLIP_QUANTILE = 0.5
#: ... and the multiple of it taken as the bound: rows beyond 4 medians are rare for the scores and Hessians of
#: smooth likelihoods near the mode, and the release noise grows only linearly in the bound.
RELEASE_ONCE_CLIP_MARGIN = 4.0
#: ... and the share of the run's μ (zCDP) that pays for the histograms.
RELEASE_ONCE_CLIP_SHARE = 0.05
#: The release-once route is predicted usable when its widened sd is at most this many non-private sds ...
RELEASE_ONCE_MAX_SD_RATIO = 3.0
#: ... and the curvature's noise at most this fraction of the curvature.
RELEASE_ONCE_MAX_CURVATURE_NOISE = 0.5
#: The one-call route's Newton settings: pmdp.release_once's shares, and 6 anchors rather than its default 4 (measured
#: on a Student-t regression from PyMC's default start: at N = 10⁵ the fourth step still moved 11-28 posterior sds,
#: flagged, where the sixth moved about 2; the last step's noise, which sets the posterior, does not depend on it).
RELEASE_ONCE_NEWTON_STEPS = 6
_NEWTON_STEPS, _HESSIAN_SHARE, _FINAL_SHARE = RELEASE_ONCE_NEWTON_STEPS, 0.25, 0.5


def _step_shares(newton_steps: int, final_share: float) -> list[float]:
    """Each Newton step's share of the run's μ: ``final_share`` for the last, the rest split evenly."""
    if newton_steps == 1:
        return [1.0]
    early = (1.0 - final_share) / (newton_steps - 1)
    return [early] * (newton_steps - 1) + [final_share]


def release_once_noise_multipliers(
    epsilon: float,
    delta: float,
    newton_steps: int,
    hessian_share: float,
    final_share: float,
    clip_releases: int = 0,
    clip_share: float = RELEASE_ONCE_CLIP_SHARE,
) -> tuple[list[tuple[float, float]], float]:
    """Each Newton step's (τ_g, τ_H) and the norm histograms' τ (0 without), from public settings alone.

    The μ that (ε, δ) allows (one Gaussian release at τ₁, μ = 1/(2τ₁²), zCDP) is split: with
    ``clip_releases`` histograms, ``clip_share`` of it goes to them in equal parts; of the rest,
    step k gets sₖ (the last ``final_share``, the others equal parts), of which ``hessian_share``
    goes to the Hessian release and the rest to the score release. A release with share s has
    τ = τ₁/√s, so the μ add up to the total; τ is raised by 10⁻⁹ relative, towards privacy.
    """
    tau_one = noise_multiplier_for_target(epsilon, delta, 1)
    newton = 1.0 - clip_share if clip_releases else 1.0
    taus = [
        (
            tau_one / math.sqrt(share * newton * (1.0 - hessian_share)) * (1.0 + 1e-9),
            tau_one / math.sqrt(share * newton * hessian_share) * (1.0 + 1e-9),
        )
        for share in _step_shares(newton_steps, final_share)
    ]
    tau_clip = tau_one / math.sqrt(clip_share / clip_releases) * (1.0 + 1e-9) if clip_releases else 0.0
    return taus, tau_clip


def release_once_prediction(
    epsilon: float, delta: float, n_rows: int, n_params: int, neighbouring: str = "substitute"
) -> dict[str, Any]:
    """What the one-call release-once route (``"auto"`` bounds, 6 anchors) is predicted to give (module docstring).

    Returns the noise multipliers of the last step, ``mean_error`` (r_g: the noise's error of the
    mean in non-private posterior sds), ``sd_ratio`` (√(1 + r_g²)), ``curvature_noise`` (h) and
    ``usable``. Public quantities only.
    """
    taus, tau_clip = release_once_noise_multipliers(
        epsilon, delta, _NEWTON_STEPS, _HESSIAN_SHARE, _FINAL_SHARE, clip_releases=2 * _NEWTON_STEPS
    )  # the two "auto" bounds' histograms at every anchor (pmdp.release_once's clip_anchors)
    tau_g, tau_h = taus[-1]
    kappa = sensitivity_of_clipped_sum(1.0, neighbouring)
    mean_error = kappa * RELEASE_ONCE_CLIP_MARGIN * tau_g * math.sqrt(n_params / n_rows)
    curvature = 2.0 * n_params * kappa * RELEASE_ONCE_CLIP_MARGIN * tau_h / n_rows
    sd_ratio = math.sqrt(1.0 + mean_error**2)
    return {
        "score_noise_multiplier": tau_g,
        "hessian_noise_multiplier": tau_h,
        "clip_noise_multiplier": tau_clip,
        "newton_steps": _NEWTON_STEPS,
        "mean_error": mean_error,
        "sd_ratio": sd_ratio,
        "curvature_noise": curvature,
        "usable": bool(sd_ratio <= RELEASE_ONCE_MAX_SD_RATIO and curvature <= RELEASE_ONCE_MAX_CURVATURE_NOISE),
    }


def release_once_row(epsilon: float, delta: float, n_rows: int, n_params: int, neighbouring: str) -> dict[str, Any]:
    """The fields of the planner's release-once row (:class:`pymc_dp.planning.MethodPlan`), public quantities only."""
    pred = release_once_prediction(epsilon, delta, n_rows, n_params, neighbouring)
    note = (
        f"a Gaussian (Laplace) posterior from clipped score and Hessian sums released at {_NEWTON_STEPS} noisy "
        "Newton anchors, widened by the release noise; clip bounds 4× the noisy median of the rows' score and "
        "Hessian norms (5 % of the run's μ); assumes a near-Gaussian posterior (docs/release_once.md)"
    )
    if not pred["usable"]:  # one_call_route quotes this last clause
        note += (
            f"; predicted sd {pred['sd_ratio']:.3g}× a non-private one's and curvature noise "
            f"{pred['curvature_noise']:.2g} of the curvature: more rows or more ε"
        )
    noise = {k: pred[k] for k in ("score_noise_multiplier", "hessian_noise_multiplier", "clip_noise_multiplier")}
    return {
        "method": "release_once",
        "iterations": pred["newton_steps"],
        "tune": 0,
        "draws": 0,
        "noise": noise,
        "expected_acceptance": None,
        "expected_ess": None,
        "ess_limit": None,
        "noise_to_signal": pred["mean_error"],
        "usable": pred["usable"],
        "note": note,
        "sd_ratio": pred["sd_ratio"],
    }


def released_statistics_row(family: str, n_rows: int, epsilon: float) -> dict[str, Any]:
    """The fields of the planner's released-statistics row: one release (and its anchors), then NUTS."""
    note = (
        f"the {family.replace('_', ' ')}'s statistics released once, then NUTS on their noise-aware likelihood; its "
        "error is not predicted here (it depends on your public bounds) but measured (docs/exponential_family.md)"
    )
    return {
        "method": "release_statistics",
        "iterations": 1 + release_anchors(family, n_rows, epsilon),
        "tune": 0,
        "draws": 0,
        "noise": {},
        "expected_acceptance": None,
        "expected_ess": None,
        "ess_limit": None,
        "noise_to_signal": None,
        "usable": True,
        "note": note,
    }


def release_anchors(family: str, n_rows: int, epsilon: float) -> int:
    """The covariate anchors the one-call released-statistics route takes (public N and ε only).

    Linear regression and the grouped releases none (a grouped release takes no anchors);
    logistic two; negative binomial two, and Poisson one below N·ε = 50,000 (a Newton step on the
    noisy Hessian does not pay) and two up to 500,000; both count models four above, where anchors
    are cheap and a skewed covariate's start can lie nats from the mode, each anchor moving about
    one (docs/exponential_family.md, count models).
    """
    if family in ("linear_regression", "grouped_linear_regression", "grouped_logistic_regression"):
        return 0  # a grouped release takes no anchors
    if family in ("negative_binomial_regression", "poisson_regression") and n_rows * epsilon >= 500_000:
        return 4
    if family == "poisson_regression":
        return 1 if n_rows * epsilon < 50_000 else 2
    return 2


#: Recommendation text of the released-statistics route, per family.
RELEASE_ROUTES = {
    "logistic_regression": (
        "this is a logistic regression: release its statistics and two covariate anchors once, "
        "pmdp.release_statistics('logistic_regression', (X, y), epsilon={epsilon:g}{noise}, covariate_anchors=2, "
        "n_features=..., x_bounds=(public lower, public upper)), and sample the noise-aware likelihood with any "
        "sampler at no further cost (the anchors correct its Gaussian covariate model for binary or skewed "
        "covariates: docs/exponential_family.md)"
    ),
    "poisson_regression": (
        "this is a Poisson regression with a log link: release its polynomial statistics and covariate anchors "
        "once, pmdp.release_statistics('poisson_regression', (X, y), epsilon={epsilon:g}{noise}, "
        "covariate_anchors=1 (2 from N·ε = 50,000, 4 from 500,000), n_features=..., x_bounds=..., y_max=...), and "
        "sample the noise-aware likelihood with any sampler at no further cost (docs/exponential_family.md)"
    ),
    "negative_binomial_regression": (
        "this is a negative-binomial regression with a log link and a public dispersion alpha (a constant of the "
        "graph): release its polynomial statistics and score anchors once, "
        "pmdp.release_statistics('negative_binomial_regression', (X, y), epsilon={epsilon:g}{noise}, "
        "covariate_anchors=2 (4 from N·ε = 500,000), n_features=..., x_bounds=..., y_max=..., alpha=...), and "
        "sample the noise-aware likelihood with any sampler at no further cost (docs/exponential_family.md)"
    ),
    "grouped_linear_regression": (
        "this is a linear regression with varying intercepts by a group index: release its per-group sufficient "
        "statistics once (a row touches only its own group's cell, so one release covers every group and the group "
        "sizes stay private), pmdp.release_statistics('linear_regression', (X, y, groups), epsilon={epsilon:g}"
        "{noise}, n_groups=..., n_features=..., x_bounds=..., y_bounds=...), and sample the noise-aware likelihood "
        "(true statistics and group sizes latent) at no further cost (docs/exponential_family.md)"
    ),
    "grouped_logistic_regression": (
        "this is a logistic regression with varying intercepts by a group index: release its per-group statistics "
        "once (a row touches only its own group's cell, so one release covers every group and the group sizes stay "
        "private), pmdp.release_statistics('logistic_regression', (X, y, groups), epsilon={epsilon:g}{noise}, "
        "n_groups=..., n_features=..., x_bounds=...), and sample the noise-aware likelihood (true statistics and "
        "group sizes latent) at no further cost (docs/exponential_family.md)"
    ),
    "linear_regression": (
        "this is a linear regression: release its sufficient statistics once, "
        "pmdp.release_statistics('linear_regression', (X, y), epsilon={epsilon:g}{noise}, n_features=..., "
        "x_bounds=..., y_bounds=...), and sample the noise-aware likelihood with "
        "any sampler at no further cost (docs/exponential_family.md)"
    ),
}


def gaussian_to_laplace_variance(family: str, n_params: int, epsilon: float, delta: float) -> float:
    """The Gaussian release's noise variance over the Laplace release's, for a regression of ``n_params``.

    An intercept and n − 1 covariates on [−1, 1] (logistic regression: n = ``n_params``; Poisson
    regression: the same, with counts clipped to y_max = 10, and α = 1 for the negative binomial; a grouped
    regression: its ungrouped regression's, whose Δ₁ and Δ₂ are those of the G cells when the
    bounds are symmetric, as here, up to the constant column; linear
    regression: n = ``n_params`` − 1, the last parameter being σ, with y on [−1, 1]): (τΔ₂)²
    over 2(Δ₁/ε)², τ the (ε, δ) noise multiplier of one Gaussian release. About τ²ε²/(2d) for d
    statistics of equal width (Δ₂ = Δ₁/√d), so below 1 once the regression has a few
    coefficients; with other bounds the widths, and so the ratio, change (compare the
    ``noise_variance`` of the two releases).
    """
    from pymc_dp.exponential_family.families import get_family

    if family not in RELEASE_ROUTES:
        raise ValueError(f"`family` must be one of {sorted(RELEASE_ROUTES)}. Found {family!r}.")
    base = family.removeprefix("grouped_")
    n_features = max(n_params - (1 if base == "linear_regression" else 0), 1)
    bounds = ([1.0] + [-1.0] * (n_features - 1), [1.0] * n_features)
    extra = {
        "linear_regression": {"y_bounds": (-1.0, 1.0)},
        "poisson_regression": {"y_max": 10},
        "negative_binomial_regression": {"y_max": 10, "alpha": 1.0},
    }.get(base, {})
    fam = get_family(base, n_features=n_features, x_bounds=bounds, **extra)
    tau = noise_multiplier_for_target(epsilon, delta, 1)
    return (tau * fam.l2_sensitivity()) ** 2 / (2.0 * (fam.l1_sensitivity() / epsilon) ** 2)


_ANCHOR_WORDS = {1: "one", 2: "two", 4: "four"}
#: What the count routes' reason adds (public: the same for every count regression). Measured on randhie
#: (over-dispersed visits, N = 20,190, P = 7; benchmarks/count_clip_frontier.py, docs/exponential_family.md): the
#: clipped-count estimate with no noise at all lies 6.1, 2.4, 1.1 posterior sds off at y_max = 20, 30, 40, while noise
#: on Σ min(y, y_max)·x alone, taking the whole of ε = 4 with an exact Hessian, widens the sds 2.3, 3.2, 4.2×.
COUNT_CLIP_CAVEAT = (
    "; the counts are clipped to y_max before anything is summed, and the trade-off is yours: a y_max inside the "
    "counts' tail biases over-dispersed counts by posterior sds (the release's clipping check flags a material "
    "share), while the noise on Σ y·x grows in proportion to y_max, so for heavy-tailed counts no y_max may give "
    "sds within 2× a non-private posterior's at this ε (release_once's score clipping is biased by the same tail: "
    "docs/exponential_family.md, count models)"
)


def one_call_route(the_plan: Any) -> tuple[str | None, str]:
    """The route ``pmdp.sample(epsilon=..., delta=...)`` takes without a ``step``, and why (one line).

    ``the_plan`` is a :class:`pymc_dp.planning.Plan` (which calls this when it is made).

    Follows ``the_plan.recommended`` (public quantities only: the graph, N, P, ε, δ, the
    chains): the released statistics and NUTS on their noise-aware likelihood for a regression
    the releases describe (:data:`pymc_dp.regression_graph.ROUTABLE_FAMILIES`, PyMC or Bambi;
    preferred whenever the graph is one: its error depends on the public bounds against the
    rows' unknown scale, so it is measured, not predicted against release-once); else DPPenaltyMH for the planner's
    iterations when it can deliver 100 effective draws; else release-once
    (:func:`pymc_dp.release_once`, ``"auto"`` clip bounds) when its predicted sd is at most 3
    non-private sds with the curvature resolved; else DPADVI when its expected mean error is
    below half a posterior sd; else ``None`` (``pmdp.sample`` refuses before anything is
    spent).
    """
    n_eps = f"N = {the_plan.n_rows}, P = {the_plan.n_params}, ε = {the_plan.epsilon:g}"
    penalty, dpadvi = the_plan.method("DPPenaltyMH"), the_plan.method("DPADVI")
    once = next((m for m in the_plan.methods if m.method == "release_once"), None)
    # the release-once row's note ends with its prediction when it is not usable (_release_once_plan)
    once_verdict = f", release_once is not usable ({once.note.rsplit('; ', 1)[-1]})" if once and not once.usable else ""
    if the_plan.recommended == "release_statistics":
        family = the_plan.released_statistics or ""
        bounds = {
            "linear_regression": "x_bounds and y_bounds",
            "grouped_linear_regression": "x_bounds and y_bounds",
            "poisson_regression": "x_bounds and y_bounds=(0, y_max)",
            "negative_binomial_regression": "x_bounds and y_bounds=(0, y_max)",
        }
        bounds = bounds.get(family, "x_bounds")
        count = release_anchors(family, the_plan.n_rows, the_plan.epsilon)  # public N and ε, as the route runs it
        anchors = {
            "logistic_regression": " with two covariate anchors",
            "poisson_regression": f" with {_ANCHOR_WORDS.get(count, count)} anchor{'s' * (count != 1)}",
            "negative_binomial_regression": f" with {_ANCHOR_WORDS.get(count, count)} score anchors",
            "grouped_linear_regression": " per group",
            "grouped_logistic_regression": " per group",
        }
        anchors = anchors.get(family, "")
        caveat = COUNT_CLIP_CAVEAT if family in ("poisson_regression", "negative_binomial_regression") else ""
        return "release_statistics", (
            f"release the {family.replace('_', ' ')}'s statistics{anchors} once (Gaussian or Laplace mechanism, "
            f"whichever adds less noise at your bounds), then NUTS on their noise-aware likelihood at no further "
            f"cost: the graph is a {family.replace('_', ' ')} (give the public {bounds}){caveat}"
        )
    if the_plan.recommended == "DPPenaltyMH":
        return "DPPenaltyMH", (
            f"DPPenaltyMH for the planner's {penalty.iterations} iterations per chain (draws='auto'), private clip "
            f"bound, chains started from a DPADVI fit: expected ESS ≈ {penalty.expected_ess * the_plan.chains:.3g} "
            f"in all at {n_eps}, and the graph is not a regression with a release route"
        )
    if the_plan.recommended == "release_once":
        return "release_once", (
            f"release once (pmdp.release_once): clipped score and Hessian sums released at {once.iterations} noisy "
            "Newton anchors (clip bounds 4× the noisy median of the rows' norms, 5 % of the run's μ), then "
            "independent draws from the Laplace posterior widened by their noise: predicted sd ≈ "
            f"{once.sd_ratio:.3g}× a non-private posterior's, its mean off by about {once.noise_to_signal:.2g} of "
            "those sds from the noise, which the widened intervals cover, at "
            f"{n_eps}; no DP sampler reaches {MIN_USEFUL_ESS:g} effective draws, and the graph is not a regression "
            "with a released-statistics route"
        )
    if the_plan.recommended == "DPADVI":
        return "DPADVI", (
            f"DPADVI ({dpadvi.iterations} iterations, Adam, mean-field; draws from its fit widened by the "
            f"optimisation noise): no DP sampler reaches {MIN_USEFUL_ESS:g} effective draws at {n_eps}{once_verdict}, "
            "and its "
            f"expected mean error, {dpadvi.noise_to_signal:.2g} posterior sds, is below {DPADVI_MAX_MEAN_ERROR:g}"
        )
    return None, (
        f"none — refused before anything is spent: no DP sampler reaches {MIN_USEFUL_ESS:g} effective draws at "
        f"{n_eps}{once_verdict} and DPADVI's expected mean error, {dpadvi.noise_to_signal:.2g} posterior sds, is above "
        f"{DPADVI_MAX_MEAN_ERROR:g}; use more ε or more rows, or pass step= to run a DP sampler anyway (its result "
        "will be flagged)"
    )
