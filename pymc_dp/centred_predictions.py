"""The centred samplers' prediction (issue 36), from public quantities only: :func:`pymc_dp.plan`'s centred rows.

``pmdp.sample(step=DPHMC() or DPPenaltyMH(), x_bounds=...)`` centres a logistic regression on a
second-order anchor (``docs/centred.md``); its pure math lives here, on the planning floor below
the step methods, for :func:`pymc_dp.plan`'s rows (:func:`centred_chains_mu`, :func:`centred_ess`,
:func:`centred_rows`) and for the run's own prediction
(:class:`pymc_dp.step_methods.centred_plan.CentringPlan`). Moved out of
:mod:`pymc_dp.route_predictions` (which re-exports these names) in issue 36.

Notes
-----
Neighbouring relation: substitute (one row replaced, N public; a centred run plans a DP start,
which is planned only under it). The anchor's score sum has L2 sensitivity 2B and its Hessian
sum Frobenius sensitivity 2·B²/4, each pilot's the same (clipped at the public B and B²/4).
What ε covers, as priced before any row is read: the DP start, the clip bound's three norm
histograms, the 2 × :data:`CENTRE_NEWTON_STEPS` pilot releases, the anchor's two releases and
every chain iteration. Nothing here releases or reads data: every value is a function of public
settings (ε, δ, N, P, the chains, the shares) or, for the run's own prediction, of released values
(post-processing).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pymc_dp._validation import check_bounds_pair
from pymc_dp.accounting.calibrate import CALIBRATION_MARGIN
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.mechanisms.clip_bound import NoisyScoreNormHistogram
from pymc_dp.mechanisms.clipping import sensitivity_of_clipped_sum
from pymc_dp.mechanisms.gradient import NoisyClippedGradient
from pymc_dp.mechanisms.hessian import NoisyClippedHessian
from pymc_dp.mechanisms.poisson_gradient import NoisyPoissonGradientSum
from pymc_dp.regression_graph import regression_parts
from pymc_dp.usability import MIN_USEFUL_ESS

__all__ = [
    "CENTRE_ANCHOR_SHARE",
    "CENTRE_HESSIAN_SHARE",
    "CENTRE_LAST_PILOT_HESSIAN_SHARE",
    "CENTRE_MAX_CURVATURE_NOISE",
    "CENTRE_NEWTON_GROWTH",
    "CENTRE_NEWTON_SHARE",
    "CENTRE_NEWTON_STEPS",
    "CENTRE_RECENTRE_SHARE",
    "CENTRE_SD_SPREAD",
    "DPADVI_BATCH_ROWS",
    "DPHMC_TARGET_ACCEPT",
    "DP_START_ITERATIONS",
    "LOGISTIC_THIRD",
    "RANDOM_WALK_EFFICIENCY",
    "ar1_ess",
    "centred_chains_mu",
    "centred_ess",
    "centred_prediction_at",
    "centred_rows",
    "centring_bound_and_lipschitz",
    "centring_curvature_noise",
    "centring_events",
    "centring_noise_multipliers",
    "centring_pilot_schedule",
    "default_dpadvi_sampling_rate",
    "leapfrog_energy_variance",
    "logistic_centring_bound",
    "metric_spectrum",
    "newton_weights",
    "random_phase_ess",
    "recentring_noise_multipliers",
    "score_and_hessian_noise_multipliers",
    "worst_coordinate_ess",
]

#: The anchor's share f of the μ left to the chains after the DP start and the clip bound (pilots and anchor
#: together; was 0.5 until H36i). Derivation (``docs/centred.md``, "The anchor's share at a quantile of its
#: offset"): the chains' noise variance per iteration is ∝ τ²R⁴ with τ² ∝ 1/((1 − f)μ) and R² ∝ 1 + e², and the
#: anchor's offset e (its own score noise through Σ, mostly) has e² = a/f, so the noise is ∝ (1 + a/f)²/(1 − f),
#: least at f² + 3af − 2a = 0: f = 0.5 at e = 1, 0.60–0.64 at the 80th percentile of e on issue 36's ε = 4 cells
#: (e 2.0–3.2, ``benchmarks/centred_anchor_split.py``). Simulated there: the ESS law at that percentile 1.2–1.4×
#: f = 0.5's (fair and randhie at ε = 4, both samplers), at the median 0.94–1.0×. A public constant.
CENTRE_ANCHOR_SHARE = 0.65
#: The Hessian release's share of the anchor's μ (``second_order_noise_multipliers``' default).
CENTRE_HESSIAN_SHARE = 0.25
#: The share of the anchor's μ spent on the noisy Newton steps that move it from the DP start (pilot releases).
#: 0.5 (was 0.6 with even pilots): measured in ``benchmarks/centred_anchor_landing.py`` (``docs/centred.md``).
CENTRE_NEWTON_SHARE = 0.5
#: With ``centre="recentre"`` (H36i, opt-in): the re-centring release's share of the anchor's μ, taken from the
#: anchor proper (``docs/centred.md``, "Re-centring"; 0.05 and 0.15 simulated alike in
#: ``benchmarks/centred_recentre.py``: its clips ½κd² and κd are small, so little μ buys a small noise).
CENTRE_RECENTRE_SHARE = 0.05
#: Noisy Newton steps from the DP start before the anchor is released.
CENTRE_NEWTON_STEPS = 5
#: Each pilot gets this many times the μ of the one before (weights 1, 3, 9, 27, 81 over 121): the early steps
#: only need to head towards the mode, the last one sets where the anchor lands (its score noise, moved through
#: the posterior covariance, is the landing's error). Was 1 (even pilots).
CENTRE_NEWTON_GROWTH = 3.0
#: The last pilot's Hessian share of its μ (the earlier pilots' is :data:`CENTRE_HESSIAN_SHARE`): near the mode
#: the step's error is the score noise through Σ, and the Hessian's only scales it.
CENTRE_LAST_PILOT_HESSIAN_SHARE = 0.1
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


def newton_weights() -> tuple[float, ...]:
    """Each pilot's share of the pilots' μ, first to last: :data:`CENTRE_NEWTON_GROWTH`^k normalised (public)."""
    raw = [CENTRE_NEWTON_GROWTH**k for k in range(CENTRE_NEWTON_STEPS)]
    return tuple(w / sum(raw) for w in raw)


def centring_pilot_schedule(epsilon: float, delta: float, chain_share: float) -> tuple[tuple[float, float], ...]:
    """(τ_G, τ_H) of each pilot, first to last (:func:`centring_noise_multipliers`; public settings only)."""
    return centring_noise_multipliers(epsilon, delta, chain_share, schedule=True)[1]


def score_and_hessian_noise_multipliers(mu: float, hessian_share: float = CENTRE_HESSIAN_SHARE) -> tuple[float, float]:
    """(τ_G, τ_H) of one score and Hessian release pair that spends ``mu`` (zCDP), ``hessian_share`` of it on the
    Hessian: τ = √(1/(2μ_part)), each rounded up (towards privacy) by 10⁻⁹ relative."""
    return (
        math.sqrt(0.5 / ((1.0 - hessian_share) * mu)) * (1 + 1e-9),
        math.sqrt(0.5 / (hessian_share * mu)) * (1 + 1e-9),
    )


def _centring_mu_anchor(epsilon: float, delta: float, chain_share: float) -> float:
    """μ_anchor = :data:`CENTRE_ANCHOR_SHARE` × μ(``chain_share`` × ε) at δ (pilots, anchor and any re-centring)."""
    return CENTRE_ANCHOR_SHARE * gaussian_mu_for_target(chain_share * epsilon * (1.0 - CALIBRATION_MARGIN), delta)


def centring_noise_multipliers(
    epsilon: float, delta: float, chain_share: float, schedule: bool = False, recentre: bool = False
) -> tuple[tuple[float, float], Any]:
    """((τ_G, τ_H) of the anchor, (τ_G, τ_H) of the last pilot) of a centred ``pmdp.sample`` run (public settings
    only); with ``schedule`` every pilot's pair instead of the last's, first to last.

    μ_anchor = :data:`CENTRE_ANCHOR_SHARE` × μ(``chain_share`` × ε) (zCDP, at δ), of which
    :data:`CENTRE_NEWTON_SHARE` pays for the :data:`CENTRE_NEWTON_STEPS` pilots (pilot k gets
    :func:`newton_weights`' share: each :data:`CENTRE_NEWTON_GROWTH` times the one before) and the rest for
    the anchor; each release pair gives :data:`CENTRE_HESSIAN_SHARE` of its μ to the Hessian, the last
    pilot :data:`CENTRE_LAST_PILOT_HESSIAN_SHARE`. τ is rounded up (towards privacy) by 10⁻⁹ relative. With
    ``recentre`` the anchor proper gives :data:`CENTRE_RECENTRE_SHARE` of μ_anchor to the re-centring release
    (:func:`recentring_noise_multipliers`).
    """
    mu_anchor = _centring_mu_anchor(epsilon, delta, chain_share)
    weights = newton_weights()
    pilots = tuple(
        score_and_hessian_noise_multipliers(
            CENTRE_NEWTON_SHARE * mu_anchor * w,
            CENTRE_LAST_PILOT_HESSIAN_SHARE if k == len(weights) - 1 else CENTRE_HESSIAN_SHARE,
        )
        for k, w in enumerate(weights)
    )
    anchor_share = 1.0 - CENTRE_NEWTON_SHARE - (CENTRE_RECENTRE_SHARE if recentre else 0.0)
    return score_and_hessian_noise_multipliers(anchor_share * mu_anchor), (pilots if schedule else pilots[-1])


def recentring_noise_multipliers(epsilon: float, delta: float, chain_share: float) -> tuple[float, float]:
    """(τ_r, τ_rH) of ``centre="recentre"``'s re-centring release: :data:`CENTRE_RECENTRE_SHARE` of μ_anchor (as
    :func:`centring_noise_multipliers` computes it), :data:`CENTRE_HESSIAN_SHARE` of that to the Hessian change."""
    return score_and_hessian_noise_multipliers(CENTRE_RECENTRE_SHARE * _centring_mu_anchor(epsilon, delta, chain_share))


#: The random-walk law's constant: 0.331/P effective draws per iteration for a tuned isotropic random walk on a
#: P-dimensional Gaussian (Gelman, Roberts & Gilks 1996: speed 1.3/P, integrated autocorrelation time 4/speed).
RANDOM_WALK_EFFICIENCY = 0.331


def metric_spectrum(posterior_shape: Any, n_params: int, diagonal_metric: bool) -> tuple[np.ndarray, np.ndarray]:
    """(λ, W) of the posterior as a sampler's metric sees it: λ the eigenvalues of its covariance in that metric
    (mean 1), W[j, k] the share of coordinate j's variance along eigen-direction k (rows sum to 1).

    ``posterior_shape`` is the posterior covariance up to a factor (e.g. (−Ĥ)⁻¹ of a released anchor:
    post-processing), None for an isotropic one (what the planner assumes before any release). DPHMC's diagonal
    mass matrix (``diagonal_metric``) is adapted to the chains' variances, so it sees the correlation matrix;
    DPPenaltyMH's isotropic random walk sees the covariance itself.
    """
    if posterior_shape is None:
        return np.ones(n_params), np.eye(n_params)
    shape = np.asarray(posterior_shape, dtype=float)
    shape = 0.5 * (shape + shape.T)
    if diagonal_metric:
        scale = np.sqrt(np.diag(shape))
        shape = shape / np.outer(scale, scale)
    values, vectors = np.linalg.eigh(shape)
    values = np.maximum(values, 1e-12 * values.max())
    weights = vectors**2 * values
    return values / values.mean(), weights / weights.sum(axis=1, keepdims=True)


def worst_coordinate_ess(per_direction: np.ndarray, weights: np.ndarray) -> float:
    """Effective draws per iteration of the worst coordinate: a coordinate's autocorrelation on a Gaussian is the
    variance-weighted mix of its eigen-directions' (independent ones), so its integrated autocorrelation time is
    Σ_k W[j, k] / e_k, e_k the directions' effective draws per iteration."""
    return float(1.0 / np.max(weights @ (1.0 / np.asarray(per_direction, dtype=float))))


def ar1_ess(acceptance: float, angle: float | np.ndarray) -> float | np.ndarray:
    """Effective draws per iteration of HMC on a Gaussian direction whose trajectory turns ``angle`` (radians):
    each iteration moves x to x cos T + p sin T (fresh p) with probability a, so the draws are an AR(1) of lag-1
    correlation ρ = 1 − a(1 − cos T), and ESS per draw (1 − ρ)/(1 + ρ)."""
    moved = acceptance * (1.0 - np.cos(angle))
    return moved / (2.0 - moved)


def random_phase_ess(acceptance: float, directions: int) -> float:
    """The median over runs of the worst of ``directions`` HMC directions whose angles are uniform on a period.

    With the angle φ uniform, u = (1 − cos φ)/2 is arcsine-distributed, P(u ≤ t) = (2/π) arcsin √t, and ESS per
    draw a·u/(1 − a·u) (:func:`ar1_ess`) rises with u; the worst of n independent ones exceeds its median with
    probability ½ when each exceeds it with probability 2^(−1/n): t = sin²(π/2 · (1 − 2^(−1/n))).
    """
    t = math.sin(0.5 * math.pi * (1.0 - 2.0 ** (-1.0 / directions))) ** 2
    return acceptance * t / (1.0 - acceptance * t)


def leapfrog_energy_variance(step: float | np.ndarray) -> float | np.ndarray:
    """Variance of the energy error of leapfrog with whitened step h on a unit Gaussian direction, from the
    stationary start and averaged over the trajectory's angle.

    Leapfrog conserves Q = p² + c x², c = 1 − h²/4, so H = Q/2 + (h²/8) x² and the error is (h²/8)(x′² − x²), x′²
    = (Q/c) cos²ψ′ at a uniform angle ψ′: its variance is (h⁴/64)(3(3 + 2c + 3c²)/(8c²) − (1 + 3c)/c + 3)
    (h⁴/32 for small h); infinite from h = 2 (unstable).
    """
    h = np.asarray(step, dtype=float)
    c = 1.0 - h**2 / 4.0
    with np.errstate(divide="ignore", invalid="ignore"):
        moment = 3.0 * (3.0 + 2.0 * c + 3.0 * c**2) / (8.0 * c**2) - (1.0 + 3.0 * c) / c + 3.0
        return np.where(c > 0, h**4 / 64.0 * moment, np.inf)


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
    posterior_shape: Any = None,
    dense_proposal: bool = False,
    dense_mass: bool = False,
    step_size_jitter: float = 0.0,
    offset_distance: float | None = None,
) -> dict[str, Any]:
    """The predicted bulk ESS of the worst coordinate of one centred second-order chain (DPHMC with
    ``grad_noise_multiplier``, else DPPenaltyMH), from public quantities and released values only.

    The chain's draws sit about R from θ̂, R² = P s²(1 + e²) (s the posterior sd, e the
    anchor's offset from the posterior mean in sds per coordinate); with a shape, R is Euclidean:
    R² = Σⱼ sdⱼ²(1 + e²), and so is a whitened DPHMC trajectory's jump (s → the sds' RMS; on
    ``randhie``'s NUTS posterior 1.4× their geometric mean). With ``offset_distance`` (the released
    anchor's Euclidean distance from the mode it estimates, ‖(−Ĥ)⁻¹Ĝ‖: post-processing,
    :func:`pymc_dp.step_methods.centred_plan.anchor_offset_distance`) R² = Σⱼ sdⱼ² + that distance²
    instead (H36h): the offset is the anchor's score noise moved through Σ, so its covariance is
    ∝ Σ² and it leans towards the widest directions, where e²·Σⱼ sdⱼ² (e the RMS of its coordinates
    in sds) can undercount it. Measured (``benchmarks/centred_auto.py``, ``docs/centred.md``): in a
    DPHMC run on ``randhie`` at ε = 4 the chains' mean ‖θ − θ̂‖² was 1.89× the e-based R² (their
    spread 1.02× Σⱼ sdⱼ², their offset² 2.29× e²·Σⱼ sdⱼ²) and 0.85× this one; DPHMC's step
    settles where the noise, ∝ R², allows: 0.90× the law's whitened step with this R², where the
    e-based one had 0.6×. ``posterior_shape`` (the
    posterior covariance up to a factor, e.g. (−Ĥ)⁻¹ of the released anchor; None: isotropic, what
    :func:`pymc_dp.plan` assumes) gives the directions each sampler's metric sees
    (:func:`metric_spectrum`); a coordinate's ESS mixes its directions' (:func:`worst_coordinate_ess`).

    - **DPPenaltyMH**: the second-order ratio bound is ½κR² per unit of ‖Δθ‖, so the planner's
      random-walk law (:func:`pymc_dp.planning.penalty_ess_from_noise`) with b = ½κR², c = f τ b s
      (f = 2 substitute, 1 add/remove): ESS = 0.331 draws / (P (1 + c²)) on an isotropic posterior.
      The walk is isotropic, so on eigenvalues λ_k of the covariance its tuned scale is set by
      mean(1/λ) and direction k's autocorrelation time is P(1 + c²)/0.331 · λ_k mean(1/λ)
      (Roberts & Rosenthal 2001, §4: inhomogeneous scales). With ``dense_proposal`` (the walk
      s·Lz with LLᵀ ∝ the same ``posterior_shape``: :func:`pymc_dp.step_methods.penalty.dense_proposal_factor`)
      the shape is whitened, every λ_k = 1 as far as the shape is right, and the jump's length
      is set by the sds' RMS instead of their geometric mean (c uses it).
    - **DPHMC**: a trajectory of x quarter periods (T = xπ/2 whitened, step h = T/L) moves ‖Δθ‖ ≈
      min(x, 1) s√P; the test's noise is σ_l = f τ_l ½κ‖Δθ‖(R² − ‖Δθ‖²/6)
      (:func:`pymc_dp.mechanisms.centred.second_order_ratio_bound`), the gradients'
      (σ_g = f τ_g ½κR² per coordinate) perturb the energy by σ_H = x (π/2) s σ_g √(P/L), and
      leapfrog's own error by Σ_k :func:`leapfrog_energy_variance` (h/√λ_k) (λ_k: the correlation
      matrix's eigenvalues, which the adapted diagonal mass leaves); acceptance a(x) =
      2Φ(−√(σ_l² + σ_H² + v_leapfrog)/2). The step size's dual averaging settles where a(x) =
      ``target_accept``: below the quarter period where the noise forces it (small N·ε), far beyond
      it otherwise (leapfrog's error is small until h ≈ 1). Direction k then turns T_k =
      2L arcsin(h/(2√λ_k)); within the first period (T_k ≤ 2π) its draws are the AR(1) of
      :func:`ar1_ess` at that angle (antithetic, more than one effective draw per draw, between π/2
      and 3π/2); beyond, the run's adapted step and mass move its angle by a radian or more from
      run to run (±6 % between chains in the step at T ≈ 12, as measured), so the angle is taken
      as uniform over a period, independently per direction, and the worst of those directions as
      :func:`random_phase_ess` (the median over runs). This is not monotone in the noise: a chain
      whose noise keeps its trajectories short can mix better than a quieter one whose
      directions resonate. Checked against runs in ``docs/hmc.md`` ("The planner's ESS against
      measurement"). With ``dense_mass`` (M⁻¹ ∝ the same ``posterior_shape``:
      :meth:`pymc_dp.step_methods.hmc.DPHMC.dense_mass`) the shape is whitened, every λ_k = 1
      as far as the shape is right. With ``step_size_jitter`` j > 0 the step is h·u, u ~ U(1 − j,
      1 + j), averaged over a grid of u: the dual averaging settles where the mean acceptance is
      the target, and direction k's draws are an AR(1) of lag-1 correlation 1 − E_u[a(xu)(1 −
      cos T_k(u))] (the jitter spreads the angles instead of the random phase above).
    """
    f = sensitivity_of_clipped_sum(1.0, neighbouring)
    s, p = float(posterior_sd), int(n_params)
    rms = s  # R and a whitened trajectory's jump are Euclidean: Σⱼ sdⱼ² = P rms², rms ≥ s (the sds' geometric mean)
    if posterior_shape is not None:
        variances = np.diag(np.asarray(posterior_shape, dtype=float))
        rms = s * math.sqrt(float(np.mean(variances) / np.exp(np.mean(np.log(variances)))))
    r2 = p * rms**2 * (1.0 + float(offset_sd) ** 2)
    if offset_distance is not None:  # the released offset vector's own length: R² = Σⱼ sdⱼ² + ‖(−Ĥ)⁻¹Ĝ‖²
        r2 = p * rms**2 + float(offset_distance) ** 2
    hmc = grad_noise_multiplier is not None
    whitened = posterior_shape is not None and ((dense_proposal and not hmc) or (dense_mass and hmc))
    values, weights = metric_spectrum(None if whitened else posterior_shape, p, diagonal_metric=hmc)
    if not hmc:
        c = f * llr_noise_multiplier * 0.5 * lipschitz * r2 * (rms if whitened else s)
        per_direction = RANDOM_WALK_EFFICIENCY / (p * (1.0 + c**2) * values * np.mean(1.0 / values))
        ess = worst_coordinate_ess(per_direction, weights) * draws
        return {"method": "DPPenaltyMH", "ess_per_chain": ess, "c": c, "posterior_sd": s, "offset_sd": offset_sd}
    trajectory = _dphmc_trajectory(
        f * llr_noise_multiplier * 0.5 * lipschitz,
        f * grad_noise_multiplier * 0.5 * lipschitz * r2,
        r2,
        rms,
        p,
        int(n_leapfrog),
        values,
        target_accept,
        float(step_size_jitter),
    )
    accept, angles = trajectory["acceptance"], trajectory["angles"]
    if step_size_jitter > 0:
        moved = trajectory["moved"]
        per_direction = moved / (2.0 - moved)
    else:
        turning = angles > 2.0 * math.pi  # past a full period: the angle is taken as uniform over a period
        per_direction = np.where(turning, 1.0, ar1_ess(accept, angles))
        if np.any(turning):
            per_direction[turning] = random_phase_ess(accept, int(np.sum(turning)))
    return {
        "method": "DPHMC",
        "ess_per_chain": worst_coordinate_ess(per_direction, weights) * draws,
        "acceptance": accept,
        "trajectory_fraction": trajectory["fraction"],
        "step_size": trajectory["step"],
        "angles": [float(a) for a in angles],
        "ratio_noise_sd": trajectory["sigma_l"],
        "energy_noise_sd": trajectory["sigma_h"],
        "posterior_sd": s,
        "offset_sd": offset_sd,
        **({"mass": "dense", "step_size_jitter": float(step_size_jitter)} if whitened else {}),
    }


#: Points of the grid over the jitter factor u ~ U(1 − j, 1 + j) that the jittered DPHMC law averages over.
JITTER_GRID_POINTS = 33


def _dphmc_trajectory(
    llr_scale: float,
    sigma_g: float,
    r2: float,
    s: float,
    p: int,
    n_leapfrog: int,
    values: np.ndarray,
    target_accept: float,
    jitter: float = 0.0,
) -> dict[str, Any]:
    """The trajectory DPHMC's dual averaging settles on (:func:`centred_ess`): x quarter periods, whitened step
    h = xπ/(2L), acceptance a(x), and the angle each metric direction turns; with ``jitter`` the acceptance is the
    mean over the step's jitter factors and ``moved`` each direction's E_u[a(1 − cos T)]. Public and released values
    only."""
    from scipy import special

    factors = np.array([1.0])
    if jitter > 0:
        factors = 1.0 + jitter * (2.0 * (np.arange(JITTER_GRID_POINTS) + 0.5) / JITTER_GRID_POINTS - 1.0)

    def parts(x: float) -> tuple[float, float, float]:
        jump = min(x, 1.0) * s * math.sqrt(p)
        sigma_l = llr_scale * jump * max(r2 - jump**2 / 6.0, 0.0)
        h = x * 0.5 * math.pi / n_leapfrog
        leapfrog = float(np.sum(leapfrog_energy_variance(h / np.sqrt(values))))
        return sigma_l, x * 0.5 * math.pi * s * sigma_g * math.sqrt(p / n_leapfrog), leapfrog

    def fixed_acceptance(x: float) -> float:
        sigma_l, sigma_h, leapfrog = parts(x)
        return float(2.0 * special.ndtr(-math.sqrt(sigma_l**2 + sigma_h**2 + leapfrog) / 2.0))

    def acceptance(x: float) -> float:
        if jitter <= 0:
            return fixed_acceptance(x)
        return float(np.mean([fixed_acceptance(x * u) for u in factors]))

    # a(x) falls as x grows; leapfrog is unstable (a = 0) once the narrowest direction's h/√λ reaches 2.
    low, high = 0.0, 4.0 * n_leapfrog * math.sqrt(values.min()) / math.pi
    if acceptance(high * (1 - 1e-9)) >= target_accept:
        low = high * (1 - 1e-9)
    else:
        for _ in range(80):
            middle = 0.5 * (low + high)
            low, high = (middle, high) if acceptance(middle) > target_accept else (low, middle)
    h = low * 0.5 * math.pi / n_leapfrog
    sigma_l, sigma_h, _ = parts(low)
    angles = 2.0 * n_leapfrog * np.arcsin(np.minimum(h / (2.0 * np.sqrt(values)), 1.0))
    moved = np.zeros_like(values)
    if jitter > 0:
        for u in factors:
            turned = 2.0 * n_leapfrog * np.arcsin(np.minimum(h * u / (2.0 * np.sqrt(values)), 1.0))
            moved += fixed_acceptance(low * u) * (1.0 - np.cos(turned)) / factors.size
    return {
        "moved": moved,
        "fraction": low,
        "step": h,
        "acceptance": acceptance(low),
        "angles": angles,
        "sigma_l": sigma_l,
        "sigma_h": sigma_h,
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
    anchor_taus: tuple[float, float],
    pilot_schedule: tuple[tuple[float, float], ...],
    who: str = "planned",
    recentring_taus: tuple[float, float] | None = None,
) -> tuple[Any, ...]:
    """The privacy events of a centred run's releases before its chains (public settings only).

    The pilot pairs of ``pilot_schedule`` (:func:`centring_pilot_schedule`, first to last), then the
    anchor's pair: each a clipped score sum (τ_G) and a clipped Hessian sum (τ_H), priced by the
    mechanisms' own event builders. What :func:`pymc_dp.step_methods.centred_plan.plan_centring`
    charges in the run's plan and what :func:`centred_chains_mu` predicts with.
    """
    events: tuple[Any, ...] = ()
    for k, pilot_taus in enumerate(pilot_schedule):
        label = f"{who} centring Newton step {k + 1}"
        events += (
            *NoisyClippedGradient.events(pilot_taus[0], 1, label),
            *NoisyClippedHessian.events(pilot_taus[1], 1, f"{label} (Hessian)"),
        )
    label = f"{who} centring anchor"
    events += (
        *NoisyClippedGradient.events(anchor_taus[0], 1, label),
        *NoisyClippedHessian.events(anchor_taus[1], 1, f"{label} (Hessian)"),
    )
    if recentring_taus is not None:  # centre="recentre": the expansion's move, after the anchor
        label = f"{who} centring re-centring"
        events += (
            *NoisyClippedGradient.events(recentring_taus[0], 1, label),
            *NoisyClippedHessian.events(recentring_taus[1], 1, f"{label} (Hessian)"),
        )
    return events


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
    anchor, pilots = centring_noise_multipliers(epsilon, delta, 1.0 - init_share - clip_share, schedule=True)
    # Each release priced by its mechanism's own event builder, as the run prices it (tests/test_run.py).
    earlier = (
        *NoisyPoissonGradientSum.events(sigma, rate, DP_START_ITERATIONS, neighbouring, "DP start"),
        *NoisyScoreNormHistogram.events(tau_clip, 3, "clip bound"),
        *centring_events(anchor, pilots),
    )
    (chains,) = calibrate_releasers([_ChainsMu()], 1, epsilon, delta, earlier)
    return chains.mu, (anchor, pilots[-1])


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
    methods: tuple[str, ...] = ("DPHMC", "DPPenaltyMH"),
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The planner's rows "DPHMC (centred)" and "DPPenaltyMH (centred)" (:class:`pymc_dp.planning.MethodPlan`'s
    fields), and the public settings they assume: what ``pmdp.sample(step=..., x_bounds=...)`` would run.

    The chains' noise is the run's calibration of what the DP start, the clip bound and the anchor leave
    (:func:`centred_chains_mu`), split per iteration as the steps split it; the prediction is :func:`centred_ess`
    with s = ``posterior_sd`` and the anchor's offset e = s·f·τ_pilot·B in sds (the last pilot's score noise
    moved through a posterior covariance of about s²). The iterations per chain maximise the predicted ESS on the
    planner's grid up to ``max_iterations`` (the noise grows with them). Usable: at least
    :data:`pymc_dp.usability.MIN_USEFUL_ESS` effective draws in all, predicted only where the Newton steps resolve
    the curvature (:func:`centring_curvature_noise`). ``chains_mu`` and ``pilot`` (the last pilot's τ_G, τ_H), if given,
    replace :func:`centred_chains_mu`'s (``pmdp.sample(draws="auto")`` gives its own calibration's). ``methods``: the
    rows to compute, in this order (``draws="auto"`` asks for its step's only, at that step's cap).
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
    for method in methods:
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
