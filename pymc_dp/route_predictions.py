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

The centred samplers' prediction
--------------------------------
``pmdp.sample(step=DPHMC() or DPPenaltyMH(), x_bounds=...)`` centres a logistic regression on a
second-order anchor (``docs/centred.md``); its pure math lives here, below the step methods, for
:func:`pymc_dp.plan`'s rows (:func:`centred_chains_mu`, :func:`centred_ess`, :func:`centred_rows`).

Notes
-----
Neighbouring relation: substitute (one row replaced, N public; a centred run plans a DP start,
which is planned only under it). The anchor's score sum has L2 sensitivity 2B and its Hessian
sum Frobenius sensitivity 2·B²/4, each pilot's the same (clipped at the public B and B²/4).
What ε covers, as priced before any row is read: the DP start, the clip bound's three norm
histograms, the 2 × :data:`CENTRE_NEWTON_STEPS` pilot releases, the anchor's two releases and
every chain iteration. Nothing here releases or reads data: every value is a function of public
settings (ε, δ, N, P, the chains, the shares).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pymc_dp._validation import check_bounds_pair
from pymc_dp.accounting.calibrate import CALIBRATION_MARGIN, noise_multiplier_for_target
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.mechanisms.clip_bound import NoisyScoreNormHistogram
from pymc_dp.mechanisms.clipping import sensitivity_of_clipped_sum
from pymc_dp.mechanisms.gradient import NoisyClippedGradient
from pymc_dp.mechanisms.hessian import NoisyClippedHessian
from pymc_dp.mechanisms.poisson_gradient import NoisyPoissonGradientSum
from pymc_dp.regression_graph import regression_parts
from pymc_dp.usability import DPADVI_MAX_MEAN_ERROR, MIN_USEFUL_ESS

__all__ = [
    "CENTRE_ANCHOR_SHARE",
    "CENTRE_HESSIAN_SHARE",
    "CENTRE_MAX_CURVATURE_NOISE",
    "CENTRE_NEWTON_SHARE",
    "CENTRE_NEWTON_STEPS",
    "CENTRE_SD_SPREAD",
    "DPADVI_BATCH_ROWS",
    "DPHMC_TARGET_ACCEPT",
    "DP_START_ITERATIONS",
    "LOGISTIC_THIRD",
    "RELEASE_ONCE_CLIP_MARGIN",
    "RELEASE_ONCE_CLIP_QUANTILE",
    "RELEASE_ONCE_CLIP_SHARE",
    "RELEASE_ONCE_MAX_CURVATURE_NOISE",
    "RELEASE_ONCE_MAX_SD_RATIO",
    "RELEASE_ONCE_NEWTON_STEPS",
    "RELEASE_ROUTES",
    "centred_chains_mu",
    "centred_ess",
    "centred_prediction_at",
    "centred_rows",
    "centring_bound_and_lipschitz",
    "centring_curvature_noise",
    "centring_events",
    "centring_noise_multipliers",
    "default_dpadvi_sampling_rate",
    "gaussian_to_laplace_variance",
    "logistic_centring_bound",
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
        anchors = {
            "logistic_regression": " with two covariate anchors",
            "poisson_regression": " with one or two anchors",
            "negative_binomial_regression": " with two score anchors",
            "grouped_linear_regression": " per group",
            "grouped_logistic_regression": " per group",
        }
        anchors = anchors.get(family, "")
        return "release_statistics", (
            f"release the {family.replace('_', ' ')}'s statistics{anchors} once (Gaussian or Laplace mechanism, "
            f"whichever adds less noise at your bounds), then NUTS on their noise-aware likelihood at no further "
            f"cost: the graph is a {family.replace('_', ' ')} (give the public {bounds})"
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


# == the centred samplers (issue 36): centring by default in pmdp.sample(step=DPHMC or DPPenaltyMH) =================
#: The anchor's share of the μ left to the chains (the setting measured in ``docs/centred.md``).
CENTRE_ANCHOR_SHARE = 0.5
#: The Hessian release's share of the anchor's μ (``second_order_noise_multipliers``' default).
CENTRE_HESSIAN_SHARE = 0.25
#: The share of the anchor's μ spent on the noisy Newton steps that move it from the DP start (pilot releases).
CENTRE_NEWTON_SHARE = 0.6
#: Noisy Newton steps from the DP start before the anchor is released.
CENTRE_NEWTON_STEPS = 5
#: |w′| ≤ 1/(6√3) for w = p(1 − p) of the logistic function: κ = B³/(6√3) bounds a row's Hessian's Lipschitz constant.
LOGISTIC_THIRD = 1.0 / (6.0 * math.sqrt(3.0))
#: The centred rows are predicted only where a pilot's Hessian noise is at most this fraction of the posterior's
#: curvature (:func:`centring_curvature_noise`): measured in ``benchmarks/centred_planner_check.py``.
CENTRE_MAX_CURVATURE_NOISE = 0.5
#: The centred rows say what they would predict at this many times the posterior sd they assume, where that is
#: less than half (their noise grows like s³): on fair's [−1, 1]-scaled covariates s was 2.85× the 2/√N guess.
CENTRE_SD_SPREAD = 3.0
#: DPHMC's default ``target_accept`` (its step size's dual-averaging target), which the centred prediction models.
DPHMC_TARGET_ACCEPT = 0.65
#: The DPADVI start pmdp.sample plans (``init="dpadvi"``): its iterations (public constant).
DP_START_ITERATIONS = 1000
#: Expected rows per DPADVI batch when no sampling rate is given (the plan's and ``init="dpadvi"``'s).
DPADVI_BATCH_ROWS = 1000.0


def default_dpadvi_sampling_rate(n_rows: int) -> float:
    """q = min(1, 1000/N): Poisson batches of about 1,000 rows, the default of the plan and of init="dpadvi"."""
    return min(1.0, DPADVI_BATCH_ROWS / n_rows)


def centring_noise_multipliers(
    epsilon: float, delta: float, chain_share: float
) -> tuple[tuple[float, float], tuple[float, float]]:
    """((τ_G, τ_H) of the anchor, (τ_G, τ_H) of each pilot) of a centred ``pmdp.sample`` run (public settings only).

    μ_anchor = :data:`CENTRE_ANCHOR_SHARE` × μ(``chain_share`` × ε) (zCDP, at δ), of which
    :data:`CENTRE_NEWTON_SHARE` pays for the :data:`CENTRE_NEWTON_STEPS` pilots evenly and the rest for
    the anchor; each release pair gives :data:`CENTRE_HESSIAN_SHARE` of its μ to the Hessian. τ is
    rounded up (towards privacy) by 10⁻⁹ relative.
    """
    mu_anchor = CENTRE_ANCHOR_SHARE * gaussian_mu_for_target(chain_share * epsilon * (1.0 - CALIBRATION_MARGIN), delta)

    def pair(mu: float) -> tuple[float, float]:
        return (
            math.sqrt(0.5 / ((1.0 - CENTRE_HESSIAN_SHARE) * mu)) * (1 + 1e-9),
            math.sqrt(0.5 / (CENTRE_HESSIAN_SHARE * mu)) * (1 + 1e-9),
        )

    return pair((1.0 - CENTRE_NEWTON_SHARE) * mu_anchor), pair(CENTRE_NEWTON_SHARE * mu_anchor / CENTRE_NEWTON_STEPS)


def centred_ess(
    *,
    draws: int,
    n_params: int,
    posterior_sd: float,
    offset_sd: float,
    lipschitz: float,
    llr_noise_multiplier: float,
    grad_noise_multiplier: float | None = None,
    n_leapfrog: int | None = None,
    neighbouring: str = "substitute",
    target_accept: float = DPHMC_TARGET_ACCEPT,
) -> dict[str, Any]:
    """The predicted bulk ESS of one centred second-order chain (DPHMC with ``grad_noise_multiplier``, else
    DPPenaltyMH), from public quantities only.

    The chain's draws sit about R from θ̂, R² = P s²(1 + e²) (s the posterior sd, e the
    anchor's offset from the posterior mean in sds per coordinate).

    - **DPPenaltyMH**: the second-order ratio bound is ½κR² per unit of ‖Δθ‖, so the planner's
      random-walk law (:func:`pymc_dp.planning.penalty_ess_from_noise`) with b = ½κR²:
      ESS = 0.331 draws / (P (1 + c²)), c = f τ b s (f = 2 substitute, 1 add/remove).
    - **DPHMC**: a trajectory of x half-periods (T = xπ/2, whitened) moves ‖Δθ‖ ≈ x s√P; the
      test's noise is σ_l = f τ_l ½κ‖Δθ‖(R² − ‖Δθ‖²/6) (:func:`pymc_dp.mechanisms.centred.second_order_ratio_bound`),
      the gradients' (σ_g = f τ_g ½κR² per coordinate) perturb the energy by σ_H = x (π/2) s σ_g √(P/L);
      acceptance a(x) = 2Φ(−√(σ_l² + σ_H²)/2). Where a(1) < ``target_accept`` the step size's dual
      averaging shortens the steps until a(x) = target (small N·ε). ESS = a tan²(T/2) × draws (an AR(1)
      with lag-1 correlation 1 − a(1 − cos T) on a Gaussian): a × draws at the half period (optimistic where
      a fixed-L trajectory falls short of independence; antithetic longer ones give more), about a(T/2)²
      × draws for short trajectories.
    """
    from scipy import special

    f = sensitivity_of_clipped_sum(1.0, neighbouring)
    s, p = float(posterior_sd), int(n_params)
    r2 = p * s**2 * (1.0 + float(offset_sd) ** 2)
    if grad_noise_multiplier is None:
        c = f * llr_noise_multiplier * 0.5 * lipschitz * r2 * s
        ess = 0.331 * draws / (p * (1.0 + c**2))
        return {"method": "DPPenaltyMH", "ess_per_chain": ess, "c": c, "posterior_sd": s, "offset_sd": offset_sd}
    sigma_g = f * grad_noise_multiplier * 0.5 * lipschitz * r2

    def noise(x: float) -> tuple[float, float]:
        jump = x * s * math.sqrt(p)
        sigma_l = f * llr_noise_multiplier * 0.5 * lipschitz * jump * max(r2 - jump**2 / 6.0, 0.0)
        return sigma_l, x * 0.5 * math.pi * s * sigma_g * math.sqrt(p / n_leapfrog)

    def acceptance(x: float) -> float:
        return float(2.0 * special.ndtr(-math.hypot(*noise(x)) / 2.0))

    fraction = 1.0
    if acceptance(1.0) < target_accept:  # the adaptation shortens the steps: a(x) falls as x grows
        low, high = 0.0, 1.0
        for _ in range(60):
            middle = 0.5 * (low + high)
            low, high = (middle, high) if acceptance(middle) > target_accept else (low, middle)
        fraction = low
    accept = acceptance(fraction)
    sigma_l, sigma_h = noise(fraction)
    per_draw = accept if fraction == 1.0 else accept * math.tan(0.25 * math.pi * fraction) ** 2
    return {
        "method": "DPHMC",
        "ess_per_chain": per_draw * draws,
        "acceptance": accept,
        "trajectory_fraction": fraction,
        "ratio_noise_sd": sigma_l,
        "energy_noise_sd": sigma_h,
        "posterior_sd": s,
        "offset_sd": offset_sd,
    }


def logistic_centring_bound(model: Any, x_bounds: Any) -> tuple[float | None, str]:
    """(B, why): the public bound on ‖x̃ᵢ‖ of a recognised logistic regression, or (None, why not).

    Reads the graph only. B = √(1 + Σⱼ M_j²) with M_j = max(|lower_j|, |upper_j|) from
    ``x_bounds`` (the 1 for an intercept); ``x_bounds=None`` gives (nan, why): a logistic
    regression whose B needs a caller's κ.
    """
    from pytensor.compile.ops import ViewOp
    from pytensor.tensor.elemwise import CAReduce, DimShuffle

    parts = regression_parts(model)
    if parts is None or parts.family != "logistic_regression":
        return None, "not a logistic regression the graph shows (Bernoulli with logit_p = intercept + X @ coefficients)"

    def free(v: Any) -> bool:
        while v.owner is not None and isinstance(v.owner.op, DimShuffle | CAReduce | ViewOp):
            v = v.owner.inputs[0]
        return v in model.free_RVs and model.rvs_to_transforms.get(v) is None

    if not free(parts.coefficients) or (parts.intercept is not None and not free(parts.intercept)):
        return None, "the coefficients or the intercept are not free variables on their own scale (κ is for those)"
    if x_bounds is None:
        return math.nan, "no public covariate bound: give x_bounds (or a κ as centre_lipschitz)"
    width = parts.matrix.type.shape[1]
    if width is None:  # a pm.Data container's static shape may be unknown: its column count is public
        width = int(parts.matrix.shape[1].eval())
    lower, upper = check_bounds_pair("x_bounds", x_bounds, width)
    squares = float(np.sum(np.maximum(np.abs(lower), np.abs(upper)) ** 2))
    return math.sqrt(squares + (1.0 if parts.intercept is not None else 0.0)), "x_bounds"


def centring_bound_and_lipschitz(
    model: Any, x_bounds: Any, centre_lipschitz: float | None
) -> tuple[float | None, float | None, str]:
    """(B, κ, why) of a centred run on ``model``, or (None, None, why not): the graph and public settings only.

    B from ``x_bounds`` (:func:`logistic_centring_bound`), κ = B³/(6√3) unless the caller gives
    ``centre_lipschitz``; without ``x_bounds`` the B whose worst-case κ is the caller's.
    """
    bound, why = logistic_centring_bound(model, x_bounds)
    if bound is not None and math.isnan(bound):
        if centre_lipschitz is None:
            return None, None, why
        bound, why = (centre_lipschitz / LOGISTIC_THIRD) ** (1.0 / 3.0), "centre_lipschitz"
    if bound is None:
        return None, None, why
    return bound, (centre_lipschitz if centre_lipschitz is not None else LOGISTIC_THIRD * bound**3), why


def centring_events(
    anchor_taus: tuple[float, float], pilot_taus: tuple[float, float], who: str = "planned"
) -> tuple[Any, ...]:
    """The privacy events of a centred run's releases before its chains (public settings only).

    The :data:`CENTRE_NEWTON_STEPS` pilot pairs, then the anchor's pair: each a clipped score sum
    (τ_G) and a clipped Hessian sum (τ_H), priced by the mechanisms' own event builders. What
    :func:`pymc_dp.step_methods.centred_plan.plan_centring` charges in the run's plan and what
    :func:`centred_chains_mu` predicts with.
    """
    events: tuple[Any, ...] = ()
    for k in range(CENTRE_NEWTON_STEPS):
        label = f"{who} centring Newton step {k + 1}"
        events += (
            *NoisyClippedGradient.events(pilot_taus[0], 1, label),
            *NoisyClippedHessian.events(pilot_taus[1], 1, f"{label} (Hessian)"),
        )
    label = f"{who} centring anchor"
    return (
        *events,
        *NoisyClippedGradient.events(anchor_taus[0], 1, label),
        *NoisyClippedHessian.events(anchor_taus[1], 1, f"{label} (Hessian)"),
    )


class _ChainsMu:
    """A stand-in releaser for :func:`pymc_dp.accounting.calibrate.calibrate_releasers`: one Gaussian release of
    μ per iteration, so that one iteration's calibrated μ is the chains' whole μ (public settings only)."""

    needs_calibration = True
    mu = 0.0

    def set_noise_for_mu(self, mu_per_iteration: float) -> None:
        self.mu = mu_per_iteration

    def privacy_events(self, k: int) -> list[Any]:
        return NoisyClippedGradient.events(math.sqrt(0.5 / self.mu), int(k), "centred chains")


def centred_chains_mu(
    epsilon: float,
    delta: float,
    n_rows: int,
    neighbouring: str,
    init_share: float = 0.2,
    clip_share: float = 0.05,
) -> tuple[float, tuple[tuple[float, float], tuple[float, float]]]:
    """(the chains' μ, the anchor's and pilots' τ) of a centred ``pmdp.sample`` run at its defaults, before any run.

    The releases before the chains, as :func:`pymc_dp.sample_plan.plan_sample` prices them: the
    DPADVI start (:data:`DP_START_ITERATIONS` Poisson-subsampled releases on ``init_share`` of ε),
    the ``"auto"`` clip bound's three norm histograms (``clip_share`` of ε) and the anchor's and
    pilots' releases (:func:`centring_noise_multipliers`); the chains get what the run's
    calibration (:func:`pymc_dp.accounting.calibrate.calibrate_releasers`) leaves them.
    """
    from pymc_dp.accounting.calibrate import calibrate_releasers, poisson_gaussian_noise_multiplier

    rate = default_dpadvi_sampling_rate(n_rows)
    sigma = poisson_gaussian_noise_multiplier(
        init_share * epsilon * (1.0 - CALIBRATION_MARGIN), delta, rate, DP_START_ITERATIONS, neighbouring
    )
    tau_clip = math.sqrt(3 / (2.0 * gaussian_mu_for_target(clip_share * epsilon * (1.0 - CALIBRATION_MARGIN), delta)))
    anchor, pilot = centring_noise_multipliers(epsilon, delta, 1.0 - init_share - clip_share)
    # Each release priced by its mechanism's own event builder, as the run prices it (tests/test_run.py).
    earlier = (
        *NoisyPoissonGradientSum.events(sigma, rate, DP_START_ITERATIONS, neighbouring, "DP start"),
        *NoisyScoreNormHistogram.events(tau_clip, 3, "clip bound"),
        *centring_events(anchor, pilot),
    )
    (chains,) = calibrate_releasers([_ChainsMu()], 1, epsilon, delta, earlier)
    return chains.mu, (anchor, pilot)


def centred_prediction_at(
    method: str, iterations: int, tune: int, chain_mu: float, **setting: Any
) -> tuple[dict[str, float], dict[str, Any]]:
    """(noise, prediction) of one centred chain of ``iterations`` (``tune`` tuning) on μ ``chain_mu``, split per
    iteration as the step splits it, and :func:`centred_ess` of its draws; ``setting``: centred_ess's n_params,
    posterior_sd, offset_sd, lipschitz, neighbouring, and DPHMC's n_leapfrog (10) and grad_budget_share (0.5)."""
    mu = chain_mu / iterations
    n_leapfrog, grad_budget_share = setting.pop("n_leapfrog", 10), setting.pop("grad_budget_share", 0.5)
    if method == "DPHMC":
        noise = {
            "llr_noise_multiplier": math.sqrt(0.5 / ((1.0 - grad_budget_share) * mu)),
            "grad_noise_multiplier": math.sqrt((n_leapfrog + 1) * 0.5 / (grad_budget_share * mu)),
            "n_leapfrog": n_leapfrog,
        }
    elif method == "DPPenaltyMH":
        noise = {"llr_noise_multiplier": math.sqrt(0.5 / mu)}
    else:
        raise ValueError(f"`method` must be 'DPHMC' or 'DPPenaltyMH'. Found {method!r}.")
    return noise, centred_ess(draws=iterations - tune, **setting, **noise)


def centring_curvature_noise(
    pilot_hessian_noise_multiplier: float, bound: float, n_params: int, posterior_sd: float, neighbouring: str
) -> float:
    """h = f τ_H (B²/4) √(2P) s²: a pilot's Hessian noise (spectral norm; clip B²/4, f = 2 substitute, 1
    add/remove) over the curvature 1/s². Above :data:`CENTRE_MAX_CURVATURE_NOISE` the Newton steps cannot tell
    the curvature from noise, the anchor stays near the DP start, and no ESS is predicted. Public only."""
    f = sensitivity_of_clipped_sum(1.0, neighbouring)
    return f * pilot_hessian_noise_multiplier * bound**2 / 4.0 * math.sqrt(2.0 * n_params) * posterior_sd**2


def centred_rows(
    epsilon: float,
    delta: float,
    *,
    n_rows: int,
    n_params: int,
    chains: int,
    posterior_sd: float,
    neighbouring: str,
    n_leapfrog: int,
    grad_budget_share: float,
    bound: float,
    lipschitz: float,
    max_iterations: int,
    tune_fraction: float,
    chains_mu: float | None = None,
    pilot: tuple[float, float] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The planner's rows "DPHMC (centred)" and "DPPenaltyMH (centred)" (:class:`pymc_dp.planning.MethodPlan`'s
    fields), and the public settings they assume: what ``pmdp.sample(step=..., x_bounds=...)`` would run.

    The chains' noise is the run's calibration of what the DP start, the clip bound and the anchor leave
    (:func:`centred_chains_mu`), split per iteration as the steps split it; the prediction is :func:`centred_ess`
    with s = ``posterior_sd`` and the anchor's offset e = s·f·τ_pilot·B in sds (the last pilot's score noise
    moved through a posterior covariance of about s²). The iterations per chain maximise the predicted ESS on the
    planner's grid up to ``max_iterations`` (the noise grows with them). Usable: at least
    :data:`pymc_dp.usability.MIN_USEFUL_ESS` effective draws in all, predicted only where the Newton steps resolve
    the curvature (:func:`centring_curvature_noise`). ``chains_mu`` and ``pilot`` (the pilots' τ_G, τ_H), if given,
    replace :func:`centred_chains_mu`'s (``pmdp.sample(draws="auto")`` gives its own calibration's).
    """
    if chains_mu is None or pilot is None:
        chains_mu, (_, pilot) = centred_chains_mu(epsilon, delta, n_rows, neighbouring)
    f = sensitivity_of_clipped_sum(1.0, neighbouring)
    offset = posterior_sd * f * pilot[0] * bound
    curvature_noise = centring_curvature_noise(pilot[1], bound, n_params, posterior_sd, neighbouring)
    resolved = curvature_noise <= CENTRE_MAX_CURVATURE_NOISE
    common = dict(n_params=n_params, posterior_sd=posterior_sd, offset_sd=offset, lipschitz=lipschitz)
    hmc = dict(n_leapfrog=n_leapfrog, grad_budget_share=grad_budget_share)
    rows = []
    for method in ("DPHMC", "DPPenaltyMH"):
        best = None
        for k in sorted({max(2, int(v)) for v in np.geomspace(20, max_iterations, 60)}):
            tune = max(1, round(tune_fraction * k))
            noise, prediction = centred_prediction_at(
                method, k, tune, chains_mu / chains, neighbouring=neighbouring, **common, **hmc
            )
            if best is None or prediction["ess_per_chain"] > best[3]["ess_per_chain"] * 1.01:
                best = (k, tune, noise, prediction)
        k, tune, noise, prediction = best
        if method == "DPPenaltyMH":
            noise = {"noise_multiplier": noise["llr_noise_multiplier"]}
        ess = float(prediction["ess_per_chain"])
        sd_check = dict(chains_mu=chains_mu / chains, neighbouring=neighbouring, common=common, hmc=hmc, bound=bound)
        note = _centred_row_note(method, k, tune, ess, curvature_noise, sd_check)
        rows.append(
            {
                "method": f"{method} (centred)",
                "iterations": k,
                "tune": tune,
                "draws": k - tune,
                "noise": noise,
                "expected_acceptance": prediction.get("acceptance", 0.234) if resolved else None,
                "expected_ess": ess if resolved else None,
                "ess_limit": None,
                "noise_to_signal": None,
                "usable": bool(resolved and ess * chains >= MIN_USEFUL_ESS),
                "note": note,
            }
        )
    details = {"lipschitz": lipschitz, "bound": bound, "offset_sd": offset, "chains_mu": chains_mu}
    details.update(posterior_sd=posterior_sd, curvature_noise=curvature_noise, resolved=resolved)
    return rows, details


def _centred_row_note(
    method: str, k: int, tune: int, ess: float, curvature_noise: float, sd_check: dict[str, Any]
) -> str:
    """A centred row's note: its settings, and where its number rests on the guess s (public quantities only)."""
    common, hmc = sd_check["common"], sd_check["hmc"]
    posterior_sd, offset = common["posterior_sd"], common["offset_sd"]
    lipschitz, bound = common["lipschitz"], sd_check["bound"]
    resolved = curvature_noise <= CENTRE_MAX_CURVATURE_NOISE
    note = (
        f"centred on a second-order anchor after {CENTRE_NEWTON_STEPS} noisy Newton steps (pmdp.sample's "
        f"default with x_bounds or centre_lipschitz: κ = {lipschitz:.3g}, B = {bound:.3g}; "
        "docs/centred.md); the anchor's noise tilts the target, which the run's widened draws cover; "
        "predicted within 2× of the chains' measured ESS where the curvature is resolved "
        "(benchmarks/centred_planner_check.py, docs/centred.md)"
    )
    wider = {**common, "posterior_sd": CENTRE_SD_SPREAD * posterior_sd, "offset_sd": CENTRE_SD_SPREAD * offset}
    at_wider = centred_prediction_at(
        method, k, tune, sd_check["chains_mu"], neighbouring=sd_check["neighbouring"], **wider, **hmc
    )
    lost = curvature_noise * CENTRE_SD_SPREAD**2 > CENTRE_MAX_CURVATURE_NOISE  # unresolved at the wider sd
    if resolved and (lost or at_wider[1]["ess_per_chain"] < ess / 2):
        at = (
            "the Newton steps would not resolve the curvature"
            if lost
            else f"ESS {at_wider[1]['ess_per_chain']:.2g}/chain"
        )
        note += (
            f"; this rests on a posterior sd of {posterior_sd:.3g} (the noise grows like s³): at "
            f"{CENTRE_SD_SPREAD:g}× it (covariates of a third of unit sd, as [−1, 1]-scaled ones often are) {at}"
            "; give posterior_sd= (e.g. a DP fit's sds) for a firmer prediction"
        )
    if not resolved:
        note += (
            f"; not predicted here: the Newton steps' Hessian noise is {curvature_noise:.2g}× the posterior's "
            f"curvature (above {CENTRE_MAX_CURVATURE_NOISE:g}, at a posterior sd of about {posterior_sd:.3g}), "
            "so the anchor can stay many sds off and the chains may not mix (measured at N·ε ≤ 2,000: R-hat "
            "2–4, ESS about 1 per chain); more rows or more ε, or narrower public x_bounds"
        )
    return note
