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

The linear prediction
---------------------
For a (grouped) Gaussian linear regression given ``x_bounds``, :func:`linear_route_prediction`
weighs the release against :func:`pymc_dp.release_once_linear.release_once_linear` (its
derivation is in its docstring): the release's fixed noise against residuals of sd σ, which only
σ's prior speaks of in public (:func:`residual_scale_guess`), against release_once_linear's score
noise, whose clip bound follows the residuals; :func:`linear_route_row` writes the plan's row
and the one call's choice.

The centred samplers' prediction lives in :mod:`pymc_dp.centred_predictions` (the same floor).

Notes
-----
Nothing here releases or reads data: every value is a function of public settings (ε, δ, N, P,
the chains, the shares).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special

from pymc_dp._validation import check_bounds_pair
from pymc_dp.accounting.calibrate import noise_multiplier_for_target
from pymc_dp.clip_math import partitioned_cell_sensitivities
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

# release_once_linear's settings (pymc_dp.release_once_linear runs them; the plan predicts them below).
#: Share of the run's μ (zCDP) spent on the one release of Σ zzᵀ (public). 30 %, as simulated on diamonds
#: (benchmarks/release_once_hierarchical.py --variant covariate_curvature): the Gram matrix is released once and
#: serves every anchor, while the last score release sets the posterior's noise; the scores share the rest.
GRAM_SHARE = 0.3
#: Fraction of ``gram_share`` spent on the noisy count of rows the box clamps (public): 1/30, so 1 % of the run's μ at
#: the default (its noise sd is 10 τ₁ rows, τ₁ the multiplier of one release at (ε, δ): 12 rows at ε = 4, δ = 10⁻⁶,
#: a tenth of the flag's threshold √N at N = 15,000); Σ zzᵀ keeps the rest. Taken from the Gram's share, whose τ
#: grows by 1.7 % (its noise is not what sets the slopes' width at the default settings).
CLAMPED_COUNT_FRACTION = 1.0 / 30.0
#: Anchors (score releases) of a run: the first moves ψ to the (clipped) least-squares fit and log σ to its maximiser
#: there; the others refine them while the clip bound follows the residuals' scale. Measured on diamonds at ε = 4
#: (docs/release_once.md): 4 anchors gave NUTS's depth sd 2.1–3.5× where 6 gave 2.3–3.6× (the earlier steps' share
#: of μ is larger with fewer of them, so the last step, on which the Gram noise acts, is shorter).
LINEAR_NEWTON_STEPS = 4
#: The released Σ zzᵀ is resolved when its smallest eigenvalue is at least this many noise sds σ_Z. For a fixed
#: unit direction u the noise's curvature uᵀEu is N(0, σ_Z²) exactly (isometric symmetric noise), and a simple
#: eigenvalue moves by uᵀEu to first order (second-order terms push the smallest one further down, towards a
#: flag): at 4 σ_Z the curvature along the weakest direction is known to about 25 % at 1 sd (its posterior sd to
#: about 12 %), and the step's error from it is carried into the covariance. Below, the eigenvalue is raised to
#: 4 σ_Z and the result flagged. (release_once's floor, 2√K σ_Z, is the worst direction's noise, the spectral norm:
#: on diamonds at ε = 4 it flagged every run, whose intervals covered NUTS's means.)
GRAM_RESOLVED_SDS = 4.0
#: The score clip bound is this many noisy medians of the rows' score norms. release_once's 4 clipped 1.5–3 % of
#: diamonds' rows at the mode (heavy-tailed residuals): σ's root came out 1–2 NUTS sds low and a depth slope 3.5–4.4
#: sds off with 1.7–1.9× sds, outside its interval in 2 of 6 runs (unflagged); at 6 none of 7 runs missed NUTS's
#: means, at the price of wider intervals (the noise grows with the bound).
LINEAR_CLIP_MARGIN = 6.0


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


def linear_noise_multipliers(
    epsilon: float, delta: float, newton_steps: int, gram_share: float, final_share: float, clip_share: float
) -> tuple[float, list[float], float, float]:
    """(τ of the Gram release, each step's score τ, the histograms' τ, the clamped count's τ) from public settings.

    The μ that (ε, δ) allows (one Gaussian release at τ₁, μ = 1/(2τ₁²)) is split: ``clip_share``
    to the K score-norm histograms in equal parts, ``gram_share`` to Σ zzᵀ and the clamped count
    (:data:`CLAMPED_COUNT_FRACTION` of it to the count), the rest to the K score releases (the last
    ``final_share`` of it, the others equal parts). A release with share s has τ = τ₁/√s, so the μ
    add up to the total; τ is raised by 10⁻⁹ relative, towards privacy.
    """
    tau_one = noise_multiplier_for_target(epsilon, delta, 1)
    raise_ = 1.0 + 1e-9
    scores = 1.0 - clip_share - gram_share
    shares = [1.0] if newton_steps == 1 else [(1.0 - final_share) / (newton_steps - 1)] * (newton_steps - 1)
    shares = shares if newton_steps == 1 else [*shares, final_share]
    taus = [tau_one / math.sqrt(share * scores) * raise_ for share in shares]
    tau_gram = tau_one / math.sqrt(gram_share * (1.0 - CLAMPED_COUNT_FRACTION)) * raise_
    tau_count = tau_one / math.sqrt(gram_share * CLAMPED_COUNT_FRACTION) * raise_
    return tau_gram, taus, tau_one / math.sqrt(clip_share / newton_steps) * raise_, tau_count


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


# -- Gaussian linear models: the grouped (or ungrouped) release against release_once_linear --------------------------

#: Draws of σ's prior whose median is the plan's residual scale (seeded: the same public number on every call).
_SIGMA_PRIOR_DRAWS, _SIGMA_PRIOR_SEED = 4001, 0
#: Standard normal quantiles (public) over which the median score norm of :func:`linear_route_prediction` is taken.
_NORMAL_QUANTILES = special.ndtri(np.arange(1, 4000) / 4000.0)


def residual_scale_guess(parts: Any, y_bounds: Any) -> tuple[float | None, str]:
    """σ̃, the residual sd the linear prediction assumes, and where it comes from (the graph and public bounds only).

    The median of σ's prior (``parts.sigma``, a graph of the model's free variables and constants:
    drawn from the prior, seeded), capped at half the outcome's public range ``y_bounds`` (no
    residual sd exceeds it). ``None`` when σ's graph reads anything but constants (a data
    container): then nothing is predicted.
    """
    import pymc as pm
    from pytensor.graph.basic import Constant
    from pytensor.graph.traversal import graph_inputs
    from pytensor.tensor.random.type import RandomType

    if parts is None or parts.sigma is None:
        return None, "no free σ"
    inputs = list(graph_inputs([parts.sigma]))
    if any(not isinstance(v, Constant) for v in inputs if not isinstance(v.type, RandomType)):
        return None, "σ's prior reads a data container"
    generators = [v for v in inputs if isinstance(v.type, RandomType)]
    states = [v.get_value(borrow=False) for v in generators]  # pm.draw reseeds the model's generators: put back
    try:
        draws = np.asarray(pm.draw(parts.sigma, draws=_SIGMA_PRIOR_DRAWS, random_seed=_SIGMA_PRIOR_SEED), dtype=float)
    finally:
        for generator, state in zip(generators, states, strict=True):
            generator.set_value(state, borrow=True)
    guess, source = float(np.median(draws)), "the median of σ's prior"
    if y_bounds is not None:
        half_range = 0.5 * float(np.subtract(*np.asarray(y_bounds, dtype=float)[::-1]))
        if half_range < guess:
            guess, source = half_range, "half the outcome's public range (y_bounds), below σ's prior median"
    if not (math.isfinite(guess) and guess > 0.0):
        return None, "σ's prior median is not a positive number"
    return guess, source


def _release_cell_noise(epsilon: float, delta: float, n_groups: int, x_bounds: tuple, y_bounds: Any) -> float:
    """The noise sd of each coordinate of the (grouped) linear release at these public bounds: the Gaussian or the
    Laplace mechanism, whichever adds less noise (the one call's rule), G cells priced as one."""
    from pymc_dp.exponential_family.families import get_family

    lower, upper = (np.concatenate([[1.0], np.asarray(side, dtype=float)]) for side in x_bounds)
    cell = get_family("linear_regression", n_features=lower.size, x_bounds=(lower, upper), y_bounds=tuple(y_bounds))
    if n_groups:  # as GroupedRegression.sensitivities (substitute)
        l1, l2 = partitioned_cell_sensitivities(*cell.intervals(), "substitute")
    else:
        l1, l2 = cell.l1_sensitivity(), cell.l2_sensitivity()
    tau = noise_multiplier_for_target(epsilon, delta, 1)
    return min(tau * l2, math.sqrt(2.0) * l1 / epsilon)


def _once_terms(epsilon: float, delta: float, x_bounds: tuple, indicator: bool, residual_sd: float) -> dict[str, float]:
    """release_once_linear's noise at these public settings: σ̃·b (b the score bound), the last two steps' score
    τ, and the Gram release's noise sd σ_Z (module docstring of :func:`linear_route_prediction`)."""
    lower, upper = (np.asarray(side, dtype=float) for side in x_bounds)
    tau_gram, taus, _, _ = linear_noise_multipliers(
        epsilon, delta, LINEAR_NEWTON_STEPS, GRAM_SHARE, 0.5, RELEASE_ONCE_CLIP_SHARE
    )
    mean_square = float(indicator) + float(np.sum((lower**2 + lower * upper + upper**2) / 3.0))  # E‖z‖², uniform box
    row_bound_sq = float(indicator) + float(np.sum(np.maximum(lower**2, upper**2)))
    return {
        "scaled_bound": _scaled_bound(mean_square, residual_sd),
        "tau_last": taus[-1],
        "tau_before": taus[-2] if len(taus) > 1 else taus[-1],
        "gram_noise_sd": tau_gram * math.sqrt(2.0) * row_bound_sq,
    }


def _scaled_bound(mean_square: float, residual_sd: float) -> float:
    """σ·b: :data:`LINEAR_CLIP_MARGIN` × the median over u ~ N(0, 1) of √(u²E‖z‖² + σ²(u² − 1)²) (a row's score norm
    ‖((r/σ²) z, r²/σ² − 1)‖ times σ, r = σu, ‖z‖² at its mean over the box)."""
    u2 = _NORMAL_QUANTILES**2
    return LINEAR_CLIP_MARGIN * float(np.median(np.sqrt(u2 * mean_square + residual_sd**2 * (u2 - 1.0) ** 2)))


def linear_route_prediction(
    *,
    epsilon: float,
    delta: float,
    n_rows: int,
    n_groups: int,
    x_bounds: tuple,
    y_bounds: Any,
    residual_sd: float,
    indicator: bool = True,
    neighbouring: str = "substitute",
) -> dict[str, Any]:
    """The global slopes' predicted sd, over a non-private posterior's, on the (grouped) linear release and on
    :func:`pymc_dp.release_once_linear.release_once_linear`, and the one call's choice (public quantities only).

    ``x_bounds``: the checked box (two arrays of the P covariates); ``y_bounds``: the outcome's
    public bounds or ``None`` (the release cannot run without them); ``residual_sd``: σ̃ of
    :func:`residual_scale_guess`; ``n_groups``: G, or 0 for an ungrouped regression (one cell);
    ``indicator``: whether z carries a group indicator or an intercept.

    Derivation (first order, both routes under the same assumptions). Write the within-group
    scatter of covariate j as N vⱼ; the non-private posterior variance of βⱼ is σ²/(N vⱼ).

    - The release adds noise of sd s_c (:func:`_release_cell_noise`: τ₁Δ₂ or √2Δ₁/ε, whichever is
      smaller, Δ of one cell of (1, x, y) over the public box and ``y_bounds``) to every
      coordinate of each of the G cells, and the slope reads Σ_g Σ x y_g: its error has variance
      at least G s_c²/(N vⱼ)², so r_rel² = G s_c²/(σ² N vⱼ). s_c is fixed by the public bounds,
      so r_rel grows as the residual sd σ shrinks against the outcome's public range.
    - release_once_linear's last step moves ψ by σ²(Σ zzᵀ)⁻¹ξ, ξ of sd κτ_K b per coordinate (κ = 2,
      τ_K the last score release's), b = 6 × the median score norm, which follows the residuals:
      σb = 6 · median √(u²‖z‖² + σ²(u² − 1)²) (:func:`_scaled_bound`), so r_once² = (κτ_K)²(σb)²/(N vⱼ),
      nearly free of σ; plus the Gram noise σ_Z acting on that step, r² += (σ_Z/λ)² r_prev² (K + 1)/2,
      λ = N vⱼ, r_prev the step before's error (its τ).
    - The ratio r_rel²/r_once² = G s_c² / (σ² (κτ_K)² (σb)²) does not depend on vⱼ: the choice rests
      on σ against the public range, and σ is private. The plan takes σ̃, the median of σ's prior
      capped at half the outcome's range (:func:`residual_scale_guess`), and states the crossing
      σ* at which the two predictions are equal: release_once_linear is predicted narrower for
      σ̃ < σ*.
    - The absolute sds take vⱼ = (upperⱼ − lowerⱼ)²/12 (covariates spread over the box: optimistic
      for a covariate that varies little within groups) and the worst j. release_once_linear is
      predicted usable when its sd ratio is at most :data:`RELEASE_ONCE_MAX_SD_RATIO` and Σ zzᵀ is
      resolved: N vⱼ and the typical group's rows N/G at least :data:`GRAM_RESOLVED_SDS` σ_Z. The
      smallest group's size is private: a group of fewer than 4 σ_Z rows leaves an eigenvalue
      unresolved and flags the run (the plan says how many rows that is).

    Heuristic where it is: group means of the covariates at the box's centre (both routes' errors
    grow with them), β's own noise term on the release (Σxxᵀ's noise times β) left out, the
    clipping check's share of ε left out, and σ̃ from the prior. Checked against the measured
    cells in ``docs/release_once.md`` (the one call's route for grouped linear models).
    """
    lower, upper = (np.asarray(side, dtype=float) for side in x_bounds)
    scatter = n_rows * float(np.min((upper - lower) ** 2 / 12.0))  # N v at the worst covariate
    groups = max(int(n_groups), 1)
    once = _once_terms(epsilon, delta, x_bounds, indicator, residual_sd)
    mean_square = float(indicator) + float(np.sum((lower**2 + lower * upper + upper**2) / 3.0))
    n_coef = (int(n_groups) if n_groups else int(indicator)) + lower.size
    kappa = sensitivity_of_clipped_sum(1.0, neighbouring)

    def once_error(sigma: float) -> float:
        last = (kappa * once["tau_last"] * _scaled_bound(mean_square, sigma)) ** 2 / scatter
        before = last * (once["tau_before"] / once["tau_last"]) ** 2
        return math.sqrt(last + (once["gram_noise_sd"] / scatter) ** 2 * before * (n_coef + 1) / 2.0)

    cell_noise = None if y_bounds is None else _release_cell_noise(epsilon, delta, n_groups, x_bounds, y_bounds)

    def release_error(sigma: float) -> float:
        return math.sqrt(groups * cell_noise**2 / (sigma**2 * scatter))

    r_once = once_error(residual_sd)
    smallest = min(scatter, n_rows / groups if n_groups else scatter)
    resolved = bool(smallest >= GRAM_RESOLVED_SDS * once["gram_noise_sd"])
    once_sd = math.sqrt(1.0 + r_once**2)
    usable = bool(resolved and once_sd <= RELEASE_ONCE_MAX_SD_RATIO and neighbouring == "substitute")
    out: dict[str, Any] = {
        "residual_sd": residual_sd,
        "release_once_linear": {
            "mean_error": r_once, "sd_ratio": once_sd, "gram_noise_sd": once["gram_noise_sd"],
            "score_noise_multiplier": once["tau_last"],
            "min_group_rows": math.ceil(GRAM_RESOLVED_SDS * once["gram_noise_sd"]),
            "resolved": resolved, "usable": usable,
        },
        "release": None, "crossing_residual_sd": None,
    }  # fmt: skip
    if cell_noise is not None:
        r_rel = release_error(residual_sd)
        out["release"] = {"noise_sd": cell_noise, "mean_error": r_rel, "sd_ratio": math.sqrt(1.0 + r_rel**2)}
        low, high = 1e-9, 1e9  # release_error/once_error falls as σ grows: one crossing, found on the log scale
        if release_error(low) > once_error(low) and release_error(high) < once_error(high):
            for _ in range(100):
                mid = math.sqrt(low * high)
                low, high = (mid, high) if release_error(mid) > once_error(mid) else (low, mid)
            out["crossing_residual_sd"] = math.sqrt(low * high)
    return out


#: The one call takes release_once_linear only where its predicted noise error of the slopes is at most this fraction
#: of the release's: the plan cannot see the smallest group (private), which leaves release_once_linear's Σ zzᵀ
#: unresolved and flags it (fair: a group of 41 rows against 45 at ε = 4) where the release falls back to the prior.
ONCE_LINEAR_ERROR_FRACTION = 0.5


def linear_route_row(
    parts: Any, *, epsilon: float, delta: float, n_rows: int, x_bounds: Any, y_bounds: Any, neighbouring: str
) -> tuple[dict[str, Any] | None, str | None, str]:
    """The plan's ``release_once_linear`` row (:class:`pymc_dp.planning.MethodPlan` fields), the route the one call
    takes for a (grouped) linear regression (``"release_once_linear"``, ``"release_statistics"`` or ``None`` when
    neither can run), and why in one clause. (None, None, "") for a model it does not apply to or without
    ``x_bounds``. Checks ``x_bounds`` and ``y_bounds`` (naming them) before anything is charged; reads no data."""
    from pymc_dp.mechanisms.covariate_gram import checked_box

    if parts is None or parts.base != "linear_regression" or x_bounds is None or parts.matrix is None:
        return None, None, ""
    width = parts.matrix.type.shape[1]
    width = int(parts.matrix.shape[1].eval()) if width is None else int(width)  # a pm.Data's column count: public
    box = checked_box(x_bounds, width)
    if y_bounds is not None:
        y_lower, y_upper = check_bounds_pair("y_bounds", y_bounds, 1)
        if not y_lower[0] < y_upper[0]:
            raise ValueError(f"`y_bounds` must have lower < upper. Found {y_bounds!r}.")
        y_bounds = (float(y_lower[0]), float(y_upper[0]))
    release = "the grouped release" if parts.groups is not None else "the released statistics"
    sigma, source = residual_scale_guess(parts, y_bounds)
    note = (
        "one release of Σ zzᵀ (z: the group indicator or intercept, and x clamped to x_bounds) serving "
        f"{LINEAR_NEWTON_STEPS} noisy Newton steps on clipped scores ('auto' bounds), then NUTS on your priors "
        "against the released Gaussian (docs/release_once.md)"
    )
    row: dict[str, Any] = {
        "method": "release_once_linear", "iterations": LINEAR_NEWTON_STEPS, "tune": 0, "draws": 0, "noise": {},
        "expected_acceptance": None, "expected_ess": None, "ess_limit": None, "noise_to_signal": None,
        "usable": False, "note": note,
    }  # fmt: skip
    if neighbouring != "substitute" or sigma is None:
        why = f"not predicted ({source})"
        if neighbouring != "substitute":
            why = "refuses add/remove neighbours (N, private there, enters its steps)"
        row["note"] += f"; {why}"
        return row, "release_statistics", f"release_once_linear {why}"
    groups = int(parts.n_groups or 0) if parts.groups is not None else 0
    pred = linear_route_prediction(
        epsilon=epsilon, delta=delta, n_rows=n_rows, n_groups=groups, x_bounds=box, y_bounds=y_bounds,
        residual_sd=sigma, indicator=parts.groups is not None or parts.intercept is not None,
    )  # fmt: skip
    once, rel = pred["release_once_linear"], pred["release"]
    row.update(noise_to_signal=once["mean_error"], usable=once["usable"], sd_ratio=once["sd_ratio"])
    row["noise"] = {"score_noise_multiplier": once["score_noise_multiplier"], "gram_noise_sd": once["gram_noise_sd"]}
    crossing = pred["crossing_residual_sd"]
    said = (
        f"release_once_linear predicted sd {once['sd_ratio']:.3g}× a non-private posterior's for the slopes"
        + (f" against {rel['sd_ratio']:.3g}× on {release}" if rel else "")
        + f" at a residual sd of {sigma:.3g} ({source})"
        + (f"; they cross at a residual sd of {crossing:.3g}" if crossing else "")
        + f"; groups of fewer than {once['min_group_rows']} rows flag it (Σ zzᵀ unresolved)" * bool(groups)
    )
    row["note"] += f"; {said}"
    if not once["resolved"]:
        row["note"] += "; Σ zzᵀ predicted unresolved: more rows or more ε"
    if rel is None:  # the release's noise is unknown without y_bounds: its error names them
        return row, "release_statistics", f"{said}; without y_bounds the release cannot be weighed against it"
    if not groups:  # the ungrouped release carries one cell's noise: measured usable (docs/exponential_family.md)
        return row, "release_statistics", f"{said}; the one call keeps the released statistics without groups"
    wins = once["usable"] and once["mean_error"] <= ONCE_LINEAR_ERROR_FRACTION * rel["mean_error"]
    return row, "release_once_linear" if wins else "release_statistics", said


def linear_once_reason(why: str, n_rows: int, n_params: int, epsilon: float) -> str:
    """The one call's reason when it takes release_once_linear (one line, public quantities only)."""
    return (
        f"release once over the Gaussian likelihood's parameters (release_once_linear): Σ zzᵀ released once, "
        f"{LINEAR_NEWTON_STEPS} noisy Newton steps on clipped scores, then NUTS on your priors against the released "
        f"Gaussian, at N = {n_rows}, P = {n_params}, ε = {epsilon:g}: {why}; its predicted noise error of the slopes "
        f"is at most {ONCE_LINEAR_ERROR_FRACTION:g} of the release's (give the public x_bounds; y_bounds only "
        "weighed the release)"
    )
