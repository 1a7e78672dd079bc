"""Planning a DP run from public quantities: what each method can deliver at a given (ε, δ).

A DP sampler cannot mix better than its noise allows, whatever the number of iterations.
:func:`plan` says before any data access — from N, the number of parameters P, the clip
bounds, the chains and a public guess of the posterior standard deviation — how much
effective sample size (ESS) each method can deliver, with how many iterations, and
recommends one. :func:`pymc_dp.sample` uses it for ``draws="auto"``.

The trade-off for the penalty test (DPPenaltyMH; Yıldırım & Ermiş 2019)
------------------------------------------------------------------------
A random-walk step θ′ = θ + Δ releases the clipped log-likelihood ratio with Gaussian noise
of standard deviation σ = τ κ b ‖Δ‖ (κ = 2 under substitute neighbours, 1 under add/remove;
b = ``llr_clip``), and the penalty test subtracts σ²/2 from the log acceptance. For a
posterior that is close to Gaussian with standard deviation s in each of P coordinates, and
a proposal of size ‖Δ‖ = ℓ s, the log acceptance is about N(−(ℓ² + σ²)/2, ℓ² + σ²) with
σ² = c² ℓ², c = τ κ b s, so the acceptance is 2Φ(−ℓ√(1 + c²)/2). The diffusion limit of
random-walk Metropolis (Roberts, Gelman & Gilks 1997) gives an effective sample size per
iteration of h/(4P) with speed h = ℓ² · acceptance; the best ℓ gives h = 1.325/(1 + c²)
at an acceptance of 0.234 whatever c, hence

    ESS per draw ≈ 0.331 / (P (1 + c²)).

Every one of the chains × k iterations (tuning included) is one Gaussian release at
μ = 1/(2τ²), so τ² = C k / (2 μ*) for the μ* that (ε, δ) allows, and
c² = κ² b² s² C k / (2 μ*). With a fraction f of the k iterations spent on tuning, the ESS of
one chain is

    ESS(k) ≈ 0.331 (1 − f) k / (P (1 + κ² b² s² C k / (2 μ*))),

which grows with k but never beyond 0.331 (1 − f) 2 μ* / (P κ² b² s² C) per chain: about
μ*/(b²s²) in all, the bound the honest-results issue states. The planner takes the k at
which ESS reaches 90 % of that limit (c² = 9): more iterations cost time and buy little.

The posterior standard deviation s is not public. Without ``posterior_sd`` and ``llr_clip`` the
planner guesses s = 1/√N per unconstrained parameter ("unit information": each row carries about
one unit of Fisher information per parameter, as for data and coefficients of order one; on the
README's linear regression, N = 100,000, the exact posterior sds are 0.0022–0.0032, root mean
square 0.0027, against the guess 0.0032, and the released-statistics posterior's are 1.3–1.8×
those), and takes the samplers' clip bound b as twice a typical row's score norm, √P at unit
information, so b = 2√P. With ``llr_clip`` given, s = 2√P / (b √N), the value when the per-row
score has norm about b/2 (a clip bound twice the typical per-row score, a common choice that
keeps clipping rare). Either way b²s² = 4P/N and the limit is about 0.04 μ* N / P² under
substitute neighbours — the product N·ε (through μ*) is what buys a posterior. A clip bound
further above the typical score makes this optimistic
(the quick start's b = 2.5 is about 3.5 typical scores: its measured ESS was 3× below the
plan); pass the standard deviations of a DP initial approximation (``approx.std``) for a
sharper plan.

Measured (``benchmarks/planner_check.py``: Gaussian linear model, N = 2,000, known s, chains
started in the posterior, 4 chains × 3,000 draws): measured ÷ predicted ESS was 0.54–0.67 at
P = 1 and 0.80–0.88 at P = 3 for c² from 0.1 to 16 — the 1/(1 + c²) law holds, and the
constant 0.331 is the large-P value (optimistic for small P).

DP-HMC (Räisä et al. 2021)
--------------------------
One iteration releases L + 1 clipped gradient sums (noise τ_g) and one log-likelihood ratio
(noise τ_l); μ = 1/(2τ_l²) + (L + 1)/(2τ_g²). The planner splits the budget as the step does
(``grad_budget_share``, half by default) between the gradients and the test, and models a
tuned trajectory as moving about ‖Δ‖ ≈ s √P (half a period of the Gaussian), with
acceptance 2Φ(−c_l/2), c_l = τ_l κ b ‖Δ‖, and every accepted proposal an independent draw,
so ESS per draw ≈ acceptance; the best k maximises k · 2Φ(−c_l(k)/2). Unvalidated, and
optimistic: on the quick start (N = 100,000, ε = 4) it predicted 81 ESS per chain where the
run measured 2–3. The recommendation never rests on it. This is a rougher model than the
random walk's: it ignores the gradient noise's effect on the trajectory.

DPADVI (Jälkö et al. 2017)
--------------------------
The gradient noise moves the fitted mean: its expected error is about 2σκ/(q√N√(T/2))
posterior standard deviations after averaging the second half of T iterates
(:func:`dpadvi_mean_error`; the "NSR" column). Above 0.5 the fit is not a usable posterior.

References
----------
.. [1] Roberts, G. O., Gelman, A. and Gilks, W. R. (1997). Weak convergence and optimal
   scaling of random walk Metropolis algorithms. Ann. Appl. Probab. 7, 110–120.
.. [2] Yıldırım, S. and Ermiş, B. (2019). Exact MCMC with differentially private moves.
   Statistics and Computing 29, Algorithm 1.
.. [3] Räisä, O., Koskela, A. and Honkela, A. (2021). Differentially private Hamiltonian
   Monte Carlo, §3 and §4 (iteration budgets).
.. [4] Jälkö, J., Dikmen, O. and Honkela, A. (2017). Differentially private variational
   inference for non-conjugate models. UAI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from pymc.model import modelcontext
from scipy import special

from pymc_dp._errors import withholds_chains
from pymc_dp._validation import (
    check_bounds_pair,
    check_finite_positive,
    check_neighbouring,
    check_positive_int,
    check_unit_interval_open,
)
from pymc_dp.accounting.calibrate import CALIBRATION_MARGIN, poisson_gaussian_noise_multiplier
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.centred_predictions import (
    centred_rows,
    centring_bound_and_lipschitz,
    default_dpadvi_sampling_rate,  # re-exported: its home is below the planner, beside the centred prediction
)
from pymc_dp.data import observed_rows
from pymc_dp.mechanisms.clipping import sensitivity_of_clipped_sum
from pymc_dp.regression_graph import RegressionParts, regression_parts, released_statistics_route, unroutable_note
from pymc_dp.route_predictions import (
    RELEASE_ONCE_MAX_SD_RATIO,
    RELEASE_ROUTES,
    gaussian_to_laplace_variance,
    linear_once_reason,
    linear_route_row,
    one_call_route,
    release_once_row,
    released_statistics_row,
)
from pymc_dp.usability import DPADVI_MAX_MEAN_ERROR, MIN_USEFUL_ESS, dpadvi_mean_error

__all__ = [
    "DPADVI_MAX_MEAN_ERROR",
    "MIN_USEFUL_ESS",
    "ONE_CALL_ROUTES",
    "MethodPlan",
    "Plan",
    "RegressionParts",
    "default_dpadvi_sampling_rate",
    "dpadvi_mean_error",
    "gaussian_to_laplace_variance",
    "one_call_route",
    "penalty_ess",
    "penalty_ess_from_noise",
    "penalty_ess_limit",
    "penalty_iterations",
    "plan",
    "plan_from_settings",
    "regression_parts",
    "released_statistics_route",
    "with_linear_route",
]

#: ESS per iteration of random-walk Metropolis at the optimal scale, times P (Roberts et al. 1997).
_RWM_EFFICIENCY = 0.331
#: Optimal speed ℓ² · 2Φ(−ℓ/2) of random-walk Metropolis, at ℓ = 2.38.
_RWM_SPEED = 1.325
#: Fraction of the iterations the plan spends on tuning.
TUNE_FRACTION = 0.25
#: c² at which ESS reaches 90 % of its limit (c² / (1 + c²) = 0.9).
_KNEE = 9.0


def _sensitivity_factor(neighbouring: str) -> float:
    """κ: the sensitivity of a sum of rows clipped to norm 1 (2 under substitute, 1 under add/remove)."""
    return sensitivity_of_clipped_sum(1.0, neighbouring)


def penalty_ess(iterations: int, **setting: Any) -> float:
    """Expected bulk ESS of one DPPenaltyMH chain of ``iterations`` (tuning included).

    ``setting``: the keywords of :func:`penalty_ess_limit` (``mu_total``, ``llr_clip``,
    ``posterior_sd``, ``n_params``, ``chains``, optionally ``neighbouring`` and
    ``tune_fraction``). ESS ≈ 0.331 (1 − f) k / (P (1 + c²)) with c² = κ² b² s² C k / (2 μ*):
    see the module docstring for the derivation.
    """
    penalty_ess_limit(**setting)  # the keywords checked: the same setting as the limit's
    return penalty_ess_from_noise(
        (1.0 - setting.get("tune_fraction", TUNE_FRACTION)) * iterations,
        noise_multiplier=math.sqrt(setting["chains"] * iterations / (2 * setting["mu_total"])),  # τ² = C k / (2 μ*)
        llr_clip=setting["llr_clip"],
        posterior_sd=setting["posterior_sd"],
        n_params=setting["n_params"],
        neighbouring=setting.get("neighbouring", "substitute"),
    )


def penalty_ess_from_noise(
    draws: float,
    *,
    noise_multiplier: float,
    llr_clip: float,
    posterior_sd: float,
    n_params: int,
    neighbouring: str = "substitute",
) -> float:
    """Expected bulk ESS of ``draws`` DPPenaltyMH draws at a given noise multiplier τ.

    0.331 · draws / (P (1 + c²)) with c = κ τ b s (module docstring).
    """
    c2 = (_sensitivity_factor(neighbouring) * noise_multiplier * llr_clip * posterior_sd) ** 2
    return _RWM_EFFICIENCY * draws / (n_params * (1.0 + c2))


def penalty_ess_limit(
    *,
    mu_total: float,
    llr_clip: float,
    posterior_sd: float,
    n_params: int,
    chains: int,
    neighbouring: str = "substitute",
    tune_fraction: float = TUNE_FRACTION,
) -> float:
    """The ESS of one DPPenaltyMH chain as its iterations grow without bound (the noise's ceiling)."""
    kappa2 = _sensitivity_factor(neighbouring) ** 2
    return (
        _RWM_EFFICIENCY * (1.0 - tune_fraction) * 2 * mu_total / (n_params * kappa2 * llr_clip**2 * posterior_sd**2)
    ) / chains


def penalty_iterations(
    *, mu_total: float, llr_clip: float, posterior_sd: float, chains: int, neighbouring: str = "substitute"
) -> int:
    """Iterations per chain at which the expected ESS reaches 90 % of its limit (c² = 9)."""
    kappa2 = _sensitivity_factor(neighbouring) ** 2
    return max(1, math.ceil(_KNEE * 2 * mu_total / (kappa2 * llr_clip**2 * posterior_sd**2 * chains)))


@dataclass(frozen=True)
class MethodPlan:
    """What one method can deliver at the plan's (ε, δ).

    Attributes
    ----------
    method : str
        ``"DPPenaltyMH"``, ``"DPHMC"``, ``"DPADVI"``, ``"release_once"`` or ``"release_statistics"``.
    iterations : int
        Iterations per chain (tuning included) for samplers; optimisation steps for DPADVI;
        Newton anchors for release_once; releases (the statistics and their covariate anchors)
        for release_statistics.
    tune, draws : int
        The split of ``iterations`` for samplers (0 for DPADVI).
    noise : dict
        The noise multipliers that spend exactly the target over ``iterations`` (τ; τ_l and
        τ_g; σ).
    expected_acceptance : float or None
        Acceptance rate the model predicts (samplers).
    expected_ess : float or None
        Expected bulk ESS per chain over the draws (samplers).
    ess_limit : float or None
        The ESS per chain no number of iterations can exceed at this (ε, δ).
    noise_to_signal : float or None
        The expected error of the posterior mean from the noise, in non-private posterior sds
        (DPADVI; release_once, whose widened intervals cover it).
    usable : bool
        Whether the prediction reaches :data:`MIN_USEFUL_ESS` in all chains together
        (samplers), an expected mean error below :data:`DPADVI_MAX_MEAN_ERROR` (DPADVI), a
        widened sd of at most 3 non-private sds with the curvature resolved (release_once;
        :func:`pymc_dp.route_predictions.release_once_prediction`); release_statistics is
        usable as measured on regressions (``docs/exponential_family.md``), not predicted.
    note : str
        What the prediction assumes and what to change when it is not usable.
    """

    method: str
    iterations: int
    tune: int
    draws: int
    noise: dict[str, float]
    expected_acceptance: float | None
    expected_ess: float | None
    ess_limit: float | None
    noise_to_signal: float | None
    usable: bool
    note: str
    #: The predicted posterior sd over a non-private one's (release_once), else None.
    sd_ratio: float | None = None


@dataclass(frozen=True)
class Plan:
    """Per-method predictions for one (ε, δ) and the method recommended.

    Built by :func:`plan` from public quantities only; printing it shows a table.
    """

    epsilon: float
    delta: float
    neighbouring: str
    n_rows: int
    n_params: int
    chains: int
    posterior_sd: float
    posterior_sd_source: str
    methods: tuple[MethodPlan, ...]
    recommendation: str
    details: dict[str, Any] = field(default_factory=dict)
    #: The method the recommendation names: ``"release_statistics"`` for a regression the releases
    #: describe (``released_statistics`` below; Bambi's models too),
    #: else a DP sampler when one can deliver 100 effective draws, else ``"release_once"`` when its
    #: predicted posterior is usable, else ``"DPADVI"`` when its expected mean error is below half a
    #: posterior sd, else ``None`` (no route here: more ε, more rows, or
    #: released statistics for a conjugate model).
    recommended: str | None = None
    #: The :func:`pymc_dp.release_statistics` family that describes the model's likelihood
    #: (:data:`pymc_dp.regression_graph.ROUTABLE_FAMILIES`: linear, logistic, Poisson,
    #: negative-binomial, grouped linear or logistic regression), found from the graph by
    #: :func:`plan`; ``None`` otherwise. Either route is then the recommendation (the logistic
    #: one with two covariate anchors).
    released_statistics: str | None = None
    #: The route ``pmdp.sample(epsilon=..., delta=...)`` takes without a ``step``
    #: (:func:`one_call_route`; :func:`with_linear_route`): ``"release_statistics"``, ``"release_once_linear"``,
    #: ``"DPPenaltyMH"``, ``"release_once"``, ``"DPADVI"``, or
    #: ``None`` when it refuses (nothing usable at this N·ε).
    one_call_route: str | None = None
    #: Why, in one line, from public quantities only.
    one_call_reason: str = ""

    def method(self, name: str) -> MethodPlan:
        """The plan of one method, by name."""
        for m in self.methods:
            if m.method == name:
                return m
        raise KeyError(f"`name` must be one of {[m.method for m in self.methods]}. Found {name!r}.")

    def _header(self) -> str:
        """The first line: the setting and the posterior sd the samplers' rows assume, in words."""
        if self.posterior_sd_source == "given":
            sd = f"the posterior sd you gave, ≈ {self.posterior_sd:.3g}"
        elif self.posterior_sd_source == "unit information":
            sd = (
                f"a posterior sd of ≈ {self.posterior_sd:.3g} per parameter (1/√N: a guess from N alone, as if each "
                "row carried about one unit of information per parameter, i.e. data and coefficients of order one; "
                "pass posterior_sd= if you know it better)"
            )
        else:
            sd = (
                f"a posterior sd of ≈ {self.posterior_sd:.3g} per parameter, a guess from N, P and the clip bound "
                "(each row's score about half the bound; pass posterior_sd= if you know it better)"
            )
        rows = {"substitute": "one row replaced", "add_remove": "one row added or removed"}.get(self.neighbouring)
        return (
            f"Plan at ε = {self.epsilon:g}, δ = {self.delta:g} (neighbours: {rows or self.neighbouring}) for "
            f"N = {self.n_rows} rows, P = {self.n_params} parameter{'s' if self.n_params != 1 else ''} and "
            f"{self.chains} chain{'s' if self.chains != 1 else ''}, assuming {sd}."
        )

    def __str__(self) -> str:
        w = max(18, *(len(m.method) for m in self.methods))  # a centred row's name is longer
        lines = [
            self._header(),
            f"{'method':<{w}} {'iterations':>10} {'accept':>7} {'ESS/chain':>10} {'ESS limit':>10} {'mean error':>10} "
            f"{'sd ×':>6}  usable",
        ]
        notes: dict[str, list[str]] = {"-": [], "?": [], "<0.01": []}

        def cell(value: float | None, kind: str, why: str = "") -> str:
            if kind == "-":
                return "-"
            if value is None:
                if why and why not in notes["?"]:
                    notes["?"].append(why)
                return "?"
            if kind == "ess" and value < 0.01:
                notes["<0.01"].append("")
                return "<0.01"
            return f"{value:.2f}" if kind == "acc" else f"{value:.3g}"

        for m in self.methods:
            sampler = m.method.split(" ")[0] in ("DPPenaltyMH", "DPHMC")
            released = m.method == "release_statistics"
            unpredicted = _CENTRED_UNPREDICTED if "(centred)" in m.method else ""
            acc = cell(m.expected_acceptance, "acc" if sampler else "-", unpredicted)
            ess = cell(m.expected_ess, "ess" if sampler else "-", unpredicted)
            lim = cell(m.ess_limit, "ess" if sampler else "-", f"{m.method}'s ESS limit has no closed form")
            err = cell(m.noise_to_signal, "-" if sampler else "err", _RELEASED_UNPREDICTED if released else "")
            sdx = cell(m.sd_ratio, "err" if released or m.method.startswith("release_once") else "-")
            usable = "yes" if m.usable else "no"
            lines.append(
                f"{m.method:<{w}} {m.iterations:>10} {acc:>7} {ess:>10} {lim:>10} {err:>10} {sdx:>6}  {usable}"
            )
        lines += [
            "iterations: per chain for the samplers, optimisation steps for DPADVI, noisy Newton anchors for "
            "release_once, releases for release_statistics. ESS/chain: expected effective draws per chain; ESS "
            "limit: the most any number of iterations can give at this ε; mean error: the expected error of the "
            "posterior mean caused by the noise, in non-private posterior sds (release_once's wider intervals cover "
            "it); sd ×: the predicted posterior sd over a non-private one's.",
            f"usable: at least {MIN_USEFUL_ESS:g} effective draws in all (samplers); mean error below "
            f"{DPADVI_MAX_MEAN_ERROR:g} (DPADVI); sd × at most {RELEASE_ONCE_MAX_SD_RATIO:g} with the curvature "
            "resolved (release_once); release_statistics: as measured on regressions (docs/exponential_family.md).",
        ]
        if any(m.method.split(" ")[0] not in ("DPPenaltyMH", "DPHMC") for m in self.methods):
            lines.append(
                "-: does not apply (only the samplers have an acceptance rate and an ESS: DPADVI is an optimiser and "
                "the release routes draw independent samples; mean error and sd × are predicted for DPADVI and "
                "release_once only)."
            )
        if notes["?"]:
            lines.append(f"?: not predicted: {'; '.join(notes['?'])}.")
        if notes["<0.01"]:
            lines.append("<0.01: below 0.01 effective draws per chain: the chains would barely move from their start.")
        lines.append(f"Recommendation: {self.recommendation}")
        if self.one_call_reason:
            lines.append(f"pmdp.sample(epsilon=..., delta=...) without step= runs: {self.one_call_reason}")
        return "\n".join(lines)


#: Why a centred row may have no predicted ESS (the "?" of the printed plan).
_CENTRED_UNPREDICTED = (
    "a centred row's ESS where the noisy Newton steps cannot resolve the posterior's curvature (the row's note, "
    "Plan.method(...).note, says how far off)"
)

#: Why the released-statistics row has no predicted error (the "?" of the printed plan).
_RELEASED_UNPREDICTED = (
    "release_statistics' error and sd, as its noise relative to the posterior depends on the public bounds you "
    "give (x_bounds, y_bounds); the plan reads them only to weigh release_once_linear for a linear model "
    "(measured: docs/exponential_family.md)"
)


def _penalty_plan(mu_total, n_rows, n_params, chains, llr_clip, s, neighbouring, max_iterations) -> MethodPlan:
    common = dict(mu_total=mu_total, llr_clip=llr_clip, posterior_sd=s, chains=chains, neighbouring=neighbouring)
    k = min(max(penalty_iterations(**common), 200), max_iterations)
    common["n_params"] = n_params
    ess = penalty_ess(k, **common)
    limit = penalty_ess_limit(**common)
    tau = math.sqrt(chains * k / (2 * mu_total))
    usable = bool(ess * chains >= MIN_USEFUL_ESS)
    note = (
        "random walk with the penalty test; assumes a near-Gaussian, roughly isotropic posterior "
        "(a correlated one mixes slower by about its condition number)"
    )
    if not usable:
        note += f"; at most {limit * chains:.3g} ESS in all at this ε: more rows or more ε (N·ε), not more draws"
    tune = max(1, round(TUNE_FRACTION * k))
    return MethodPlan(
        "DPPenaltyMH", k, tune, k - tune, {"noise_multiplier": tau}, 0.234, ess, limit, None, usable, note
    )


def _hmc_plan(
    mu_total, n_params, chains, llr_clip, grad_clip, s, neighbouring, n_leapfrog, grad_budget_share, max_iterations
):
    kappa = _sensitivity_factor(neighbouring)
    jump = s * math.sqrt(n_params)  # a tuned trajectory: about one posterior width in every coordinate
    best = None
    for k in np.unique(np.geomspace(20, max_iterations, 60).astype(int)):
        mu_iteration = mu_total / (chains * k)
        tau_l = math.sqrt(1.0 / (2 * (1 - grad_budget_share) * mu_iteration))  # the test's share of μ
        c_l = tau_l * kappa * llr_clip * jump
        acceptance = float(2 * special.ndtr(-c_l / 2))
        ess = acceptance * (1 - TUNE_FRACTION) * k
        if best is None or ess > best[1] * 1.01:
            best = (int(k), ess, acceptance, tau_l)
    k, ess, acceptance, tau_l = best[0], float(best[1]), float(best[2]), float(best[3])
    tau_g = math.sqrt((n_leapfrog + 1) / (2 * grad_budget_share * mu_total / (chains * k)))  # the L+1 gradients
    # The ESS model is unvalidated and was 30x too optimistic where measured: the plan never calls DPHMC usable,
    # so a 'yes' in the table is always backed by a validated prediction.
    usable = False
    note = (
        "HMC with noisy gradients and the penalty test; rough, unvalidated model (a tuned trajectory moves about one "
        "posterior width, every accepted proposal an independent draw, gradient noise ignored): on the quick start "
        "(N = 100,000, ε = 4) it predicted 81 ESS per chain and the run measured 2-3, so it is never called usable "
        "or recommended; measure a run's own diagnostics instead"
    )
    tune = max(1, round(TUNE_FRACTION * k))
    noise = {"llr_noise_multiplier": tau_l, "grad_noise_multiplier": tau_g, "n_leapfrog": n_leapfrog}
    return MethodPlan("DPHMC", k, tune, k - tune, noise, acceptance, ess, None, None, usable, note)


def _dpadvi_plan(epsilon, delta, n_rows, grad_clip, neighbouring, sampling_rate, iterations) -> MethodPlan:
    sigma = poisson_gaussian_noise_multiplier(
        epsilon * (1.0 - CALIBRATION_MARGIN), delta, sampling_rate, iterations, neighbouring
    )
    nsr = dpadvi_mean_error(sigma, sampling_rate, n_rows, iterations, neighbouring)
    usable = bool(nsr < DPADVI_MAX_MEAN_ERROR)
    note = (
        "expected error of the averaged mean from the gradient noise, in posterior sds (per-row score ≈ clip/2); "
        "clipping adds a bias, and a mean-field fit under-states correlations"
    )
    noise = {"noise_multiplier": sigma, "sampling_rate": sampling_rate}
    return MethodPlan("DPADVI", iterations, 0, 0, noise, None, None, None, nsr, usable, note)


def _posterior_sd(posterior_sd: Any, n_params: int, n_rows: int, llr_clip: float | None) -> tuple[float, str]:
    """s and where it comes from: the root mean square of the sds given, or a guess from public quantities.

    Without ``llr_clip``: 1/√N ("unit information": each row carries about one unit of Fisher
    information per unconstrained parameter, as in a model on standardised data). With it:
    2√P/(b√N), each row's score norm about b/2. Either way b·s = 2√P/√N for the samplers, whose
    clip bound is taken as twice a typical row's score norm (√P at unit information).
    """
    if posterior_sd is None and llr_clip is None:
        return 1.0 / math.sqrt(n_rows), "unit information"
    if posterior_sd is None:
        return 2.0 * math.sqrt(n_params) / (llr_clip * math.sqrt(n_rows)), "clip bound"
    sd = np.asarray(posterior_sd, dtype=float)
    if sd.size == 0 or not np.all(np.isfinite(sd)) or np.any(sd <= 0):
        raise ValueError(f"`posterior_sd` must be positive and finite. Found {posterior_sd!r}.")
    return float(np.sqrt(np.mean(sd**2))), "given"


def _recommend(
    methods: tuple[MethodPlan, ...],
    chains: int,
    released_statistics: str | None,
    epsilon: float,
    delta: float,
    n_params: int,
) -> tuple[str | None, str]:
    """The method recommended (``Plan.recommended``) and the recommendation in words.

    In order: the released statistics (a regression they describe); DPPenaltyMH where it can
    deliver 100 effective draws (it samples the exact clipped posterior, non-Gaussian shapes
    included); release_once where its predicted posterior is usable; DPADVI where its expected
    mean error is below half a posterior sd; else None.
    """
    by_name = {m.method: m for m in methods}
    # Only the model checked against measured ESS (the random walk's) is used to recommend a sampler.
    best, dpadvi = by_name["DPPenaltyMH"], by_name["DPADVI"]
    once = by_name.get("release_once")
    once_usable = once is not None and once.usable
    recommended = best.method if best.usable else "release_once" if once_usable else "DPADVI" if dpadvi.usable else None
    if best.usable:
        recommendation = (
            f"{best.method} with {best.tune} tuning and {best.draws} draws per chain "
            f"(expected ESS ≈ {best.expected_ess * chains:.3g} in all)"
        )
    else:
        recommendation = (
            f"no DP sampler can deliver {MIN_USEFUL_ESS:g} effective draws here (best: {best.method}, "
            + (f"about {best.expected_ess * chains:.2g}" if best.expected_ess * chains >= 0.01 else "below 0.01")
            + (
                ")"  # a release route, said first, is the advice
                if released_statistics is not None or once_usable
                else "); with N·ε this small use more ε, more rows, released sufficient statistics with the "
                "noise-aware likelihood for a conjugate model or a linear or logistic regression "
                "(pmdp.release_statistics)"
            )
            + (", or DPADVI (its expected mean error is below half a posterior sd)" if dpadvi.usable else "")
        )
    if recommended == "release_once" and released_statistics is None:
        route = (
            f"release once: pmdp.release_once(model, epsilon={epsilon:g}, delta={delta:g}) releases clipped score "
            f"and Hessian sums at {once.iterations} noisy Newton anchors and draws from the Laplace posterior widened "
            f"by their noise (predicted sd ≈ {once.sd_ratio:.3g}× a non-private posterior's; docs/release_once.md)"
        )
        recommendation = f"{route}; {recommendation}"
    noise = ""
    if released_statistics is not None:
        ratio = gaussian_to_laplace_variance(released_statistics, n_params, epsilon, delta)
        if ratio < 1.0:
            noise = f", mechanism='gaussian', delta={delta:g}"
    if released_statistics is not None:  # one release, then any sampler at no further cost: recommended
        route = RELEASE_ROUTES[released_statistics].format(epsilon=epsilon, noise=noise)
        recommendation = f"{route}; otherwise {recommendation}" if recommended else f"{route}; {recommendation}"
        recommended = "release_statistics"
    return recommended, recommendation


#: The centred rows' posterior sd without a caller's: LOGISTIC_SD_FACTOR/√N (a logistic row's information is at
#: most ¼ per unit-variance coordinate, at p = ½).
LOGISTIC_SD_FACTOR = 2.0


def _centred_methods(
    centring: tuple[float, float] | None, epsilon: float, delta: float, setting: dict[str, Any], sd_source: str
) -> tuple[tuple[MethodPlan, ...], dict[str, Any]]:
    """The centred rows (:func:`pymc_dp.centred_predictions.centred_rows`) where ``pmdp.sample`` would centre, and the
    settings they assume (the plan's ``details``); none without (B, κ) or under add/remove (no DP start there).

    The centred rows are for a logistic regression, whose rows carry less information than the
    unit-information guess: at p = ½ and unit-variance covariates a row's Fisher information is
    ¼ per coordinate, so without a ``posterior_sd`` the rows take s = 2/√N
    (:data:`LOGISTIC_SD_FACTOR`; measured 2.3–2.5/√N on the benchmark's N(0, 1) covariates, where
    1/√N made the noise, which grows like s³, 10–15× too small).
    """
    if centring is None or setting["neighbouring"] != "substitute":
        return (), {}
    if sd_source == "unit information":
        setting = {**setting, "posterior_sd": LOGISTIC_SD_FACTOR / math.sqrt(setting["n_rows"])}
    setting = {**setting, "bound": centring[0], "lipschitz": centring[1], "tune_fraction": TUNE_FRACTION}
    rows, details = centred_rows(epsilon, delta, **setting)
    return tuple(MethodPlan(**row) for row in rows), {"centring": details}


def plan_from_settings(
    *,
    epsilon: float,
    delta: float,
    n_rows: int,
    n_params: int,
    chains: int = 4,
    llr_clip: float | None = None,
    grad_clip: float | None = None,
    posterior_sd: float | None = None,
    neighbouring: str = "substitute",
    n_leapfrog: int = 10,
    grad_budget_share: float = 0.5,
    dpadvi_sampling_rate: float | None = None,
    dpadvi_iterations: int = 2000,
    max_iterations: int = 20000,
    released_statistics: str | None = None,
    release_once: bool = True,
    centring: tuple[float, float] | None = None,
) -> Plan:
    """:func:`plan` from numbers alone (no model): every argument is public.

    Parameters are those of :func:`plan`, with ``n_rows`` and ``n_params`` given directly,
    ``released_statistics``: the release family that describes the model's likelihood
    (``"logistic_regression"``, ``"linear_regression"``, ``"poisson_regression"``), if any: its
    route is then recommended; and ``release_once``: whether the model can take
    :func:`pymc_dp.release_once` (continuous free variables), whose row is then predicted;
    ``centring``: (B, κ) of a logistic regression ``pmdp.sample`` would centre (public covariate
    bound and Lipschitz constant), whose centred DPHMC and DPPenaltyMH rows are then predicted
    (:func:`pymc_dp.centred_predictions.centred_rows`).
    """
    if released_statistics not in (None, *RELEASE_ROUTES):
        raise ValueError(
            f"`released_statistics` must be None or one of {sorted(RELEASE_ROUTES)}. Found {released_statistics!r}."
        )
    epsilon = check_finite_positive("epsilon", epsilon)
    delta = check_unit_interval_open("delta", delta)
    n_rows = check_positive_int("n_rows", n_rows)
    n_params = check_positive_int("n_params", n_params)
    chains = check_positive_int("chains", chains)
    s, source = _posterior_sd(
        posterior_sd, n_params, n_rows, None if llr_clip is None else check_finite_positive("llr_clip", llr_clip)
    )
    if llr_clip is None:  # b·s = 2√P/√N at the unit-information guess: a bound twice a typical row's score norm
        llr_clip = 2.0 * math.sqrt(n_params) if posterior_sd is None else 1.0
    grad_clip = llr_clip if grad_clip is None else check_finite_positive("grad_clip", grad_clip)
    neighbouring = check_neighbouring("neighbouring", neighbouring)
    n_leapfrog = check_positive_int("n_leapfrog", n_leapfrog)
    grad_budget_share = check_finite_positive("grad_budget_share", grad_budget_share)
    if grad_budget_share >= 1:
        raise ValueError(f"`grad_budget_share` must be in (0, 1). Found {grad_budget_share!r}.")
    dpadvi_iterations = check_positive_int("dpadvi_iterations", dpadvi_iterations)
    max_iterations = check_positive_int("max_iterations", max_iterations)
    if dpadvi_sampling_rate is None:
        dpadvi_sampling_rate = default_dpadvi_sampling_rate(n_rows)
    mu_total = gaussian_mu_for_target(epsilon * (1.0 - CALIBRATION_MARGIN), delta)
    methods = (
        _penalty_plan(mu_total, n_rows, n_params, chains, llr_clip, s, neighbouring, max_iterations),
        _hmc_plan(
            mu_total,
            n_params,
            chains,
            llr_clip,
            grad_clip,
            s,
            neighbouring,
            n_leapfrog,
            grad_budget_share,
            max_iterations,
        ),
        *([MethodPlan(**release_once_row(epsilon, delta, n_rows, n_params, neighbouring))] if release_once else []),
        _dpadvi_plan(epsilon, delta, n_rows, grad_clip, neighbouring, dpadvi_sampling_rate, dpadvi_iterations),
    )
    if released_statistics is not None:
        methods = (MethodPlan(**released_statistics_row(released_statistics, n_rows, epsilon)), *methods)
    setting = dict(n_rows=n_rows, n_params=n_params, chains=chains, posterior_sd=s, neighbouring=neighbouring)
    setting.update(n_leapfrog=n_leapfrog, grad_budget_share=grad_budget_share, max_iterations=max_iterations)
    centred, details = _centred_methods(centring, epsilon, delta, setting, source)
    methods = (*methods, *centred)
    recommended, recommendation = _recommend(methods, chains, released_statistics, epsilon, delta, n_params)
    fields = (epsilon, delta, neighbouring, n_rows, n_params, chains, s, source, methods, recommendation, details)
    the_plan = Plan(*fields, recommended=recommended, released_statistics=released_statistics)
    route, reason = one_call_route(the_plan)
    return replace(the_plan, one_call_route=route, one_call_reason=reason)


#: What ``pmdp.sample`` runs without a ``step`` (:func:`one_call_route`).
ONE_CALL_ROUTES = ("release_statistics", "release_once_linear", "DPPenaltyMH", "release_once", "DPADVI")


@withholds_chains
def plan(model: Any = None, *, epsilon: float, delta: float, chains: int = 4, **settings: Any) -> Plan:
    """Predict, per method, what a run at (ε, δ) can deliver, before any data access.

    Reads only public quantities of ``model``: its number of rows N (from the shape of the
    observed data, never its values) and the number of unconstrained parameters P.

    Parameters
    ----------
    model : pm.Model, optional
        From the context if omitted.
    epsilon, delta : float
        The target.
    chains : int, default 4
        Chains of the sampler; all share the budget.
    **settings
        The other keywords of :func:`plan_from_settings` but those read from the model, below.
    llr_clip : float, optional
        b of DPPenaltyMH/DPHMC: the per-row log-likelihood ratio bound per unit distance.
        Default: twice a typical row's score norm at the default posterior sd (2√P; see the
        module docstring).
    grad_clip : float, optional
        Per-row gradient clip of DPHMC and DPADVI (default: ``llr_clip``).
    posterior_sd : float or array, optional
        A public guess of the posterior standard deviation on the unconstrained scale (e.g.
        ``approx.std.eval()`` of a DP approximation, which is post-processing). Default:
        1/√N, or 2√P/(b√N) with ``llr_clip`` given (see the module docstring).
    neighbouring : {"substitute", "add_remove"}
        The relation the run will use.
    n_leapfrog : int, default 10
        L of DPHMC.
    grad_budget_share : float, default 0.5
        DPHMC's share of each iteration's μ spent on the L + 1 gradients (as the step's).
    dpadvi_sampling_rate : float, optional
        q of DPADVI (default min(1, 1000/N)).
    dpadvi_iterations : int, default 2000
        DPADVI's iterations.
    max_iterations : int, default 20000
        The most iterations per chain the plan proposes.
    y_bounds : optional
        A linear regression's public outcome bounds: with ``x_bounds``, the ``release_once_linear``
        row weighs the release against it (:func:`with_linear_route`), as ``pmdp.sample`` does.
    x_bounds, centre_lipschitz : optional
        With ``x_bounds``, a (grouped) linear regression gets a ``release_once_linear`` row and the
        one call's choice between it and the release (:func:`with_linear_route`).
        As for ``pmdp.sample(step=...)``: with either, a logistic regression the graph shows gets
        rows "DPHMC (centred)" and "DPPenaltyMH (centred)", what ``pmdp.sample`` runs by default
        there (a DPADVI start, the ``"auto"`` clip bound, a second-order anchor after noisy
        Newton steps; ``docs/centred.md``), predicted from public quantities only.

    Returns
    -------
    Plan
        Per-method noise, iterations, expected acceptance and ESS, and a recommendation. For
        a linear regression (:func:`released_statistics_route`, from the graph) the
        recommendation is the released-statistics route (``recommended ==
        "release_statistics"``): one Gaussian release of its sufficient statistics, then any
        sampler on the noise-aware likelihood at no further cost. For a logistic regression
        the same route with two covariate anchors (``covariate_anchors=2``), which remove
        the bias its Gaussian covariate model had on ``randhie`` and ``fair``
        (``docs/exponential_family.md``). ``one_call_route`` and ``one_call_reason`` (the
        last line of the printed plan) say what ``pmdp.sample(epsilon=..., delta=...)`` runs
        without a step, and why (:func:`one_call_route`). A model with continuous free
        variables also gets a release-once row (:func:`pymc_dp.release_once`, predicted by
        :func:`pymc_dp.route_predictions.release_once_prediction`), recommended where no
        released-statistics route applies, DPPenaltyMH cannot deliver 100 effective draws and
        its predicted posterior is usable; a released-statistics route gets its own row too.

    Notes
    -----
    Neighbouring relation: ``neighbouring``. The plan spends nothing: it reads no data and
    releases nothing. Under add/remove neighbours N is private; the plan uses the shape of
    the data, so do not publish a plan made under add/remove.
    """
    model = modelcontext(model)
    point = model.initial_point()
    n_params = int(sum(np.size(point[v.name]) for v in model.value_vars))
    parts = regression_parts(model)
    route = parts.family if parts is not None and parts.routable else None
    continuous = all(str(v.dtype).startswith("float") for v in model.value_vars)  # what release_once can take
    from_model = sorted(set(settings) & {"n_rows", "n_params", "released_statistics", "release_once", "centring"})
    if from_model:
        raise TypeError(f"`{from_model[0]}` must be left unset: pmdp.plan reads it from the model. Found it given.")
    x_bounds, centre_lipschitz = settings.pop("x_bounds", None), settings.pop("centre_lipschitz", None)
    y_bounds = settings.pop("y_bounds", None)  # a linear regression's: the release_once_linear row's prediction
    if y_bounds is not None:  # checked wherever given, also where no row reads it (contract 9)
        check_bounds_pair("y_bounds", y_bounds, 1)
    if x_bounds is not None or centre_lipschitz is not None:  # the centred rows: a logistic regression only
        kappa = None if centre_lipschitz is None else check_finite_positive("centre_lipschitz", centre_lipschitz)
        bound, lipschitz, _ = centring_bound_and_lipschitz(model, x_bounds, kappa)
        settings["centring"] = None if bound is None else (bound, lipschitz)
    the_plan = plan_from_settings(
        epsilon=epsilon,
        delta=delta,
        n_rows=observed_rows(model),
        n_params=max(n_params, 1),
        chains=chains,
        released_statistics=route,
        release_once=continuous and bool(model.observed_RVs),
        **settings,
    )
    note = unroutable_note(parts)  # a regression the graph shows but no release covers: say why
    if note is not None:
        reason = f"{the_plan.one_call_reason}; {note}"
        the_plan = replace(the_plan, recommendation=f"{the_plan.recommendation}; {note}", one_call_reason=reason)
    return with_linear_route(the_plan, parts, x_bounds, y_bounds)


def with_linear_route(the_plan: Plan, parts: RegressionParts | None, x_bounds: Any, y_bounds: Any) -> Plan:
    """``the_plan`` with a ``release_once_linear`` row for a (grouped) linear regression given ``x_bounds``, and the
    one call's route where it is predicted to beat the release (:func:`pymc_dp.route_predictions.linear_route_row`:
    public quantities only; the bounds are checked, naming them); unchanged otherwise."""
    p = the_plan
    row, route, why = linear_route_row(
        parts, epsilon=p.epsilon, delta=p.delta, n_rows=p.n_rows, x_bounds=x_bounds, y_bounds=y_bounds,
        neighbouring=p.neighbouring,
    )  # fmt: skip
    if row is None:
        return p
    p = replace(p, methods=(*p.methods, MethodPlan(**row)))
    if route != "release_once_linear":
        return replace(p, one_call_reason=f"{p.one_call_reason}; {why}")
    reason = linear_once_reason(why, p.n_rows, p.n_params, p.epsilon)
    recommendation = f"{reason}; otherwise {p.recommendation}"
    return replace(p, recommended=route, recommendation=recommendation, one_call_route=route, one_call_reason=reason)
