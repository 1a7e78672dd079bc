"""Centring by default in ``pmdp.sample`` (issue 36): whether a run centres, the anchor's share of ε, its clips and κ.

:func:`plan_centring` decides from public quantities only — the model's graph, the public
covariate bounds ``x_bounds`` or a caller's κ, the steps, the start and the backend — whether
``pmdp.sample(step=DPHMC(...))`` (or ``DPPenaltyMH``) spends a planned share of ε on a
second-order centring anchor at the run's DP start and runs the centred step
(:mod:`pymc_dp.mechanisms.centred`), and says why not when it does not. The plan
(:class:`CentringPlan`) prices the anchor's releases before any row is read: ``newton_steps``
pilot second-order releases, the first at the DPADVI fit's mean and each later one at the
noisy Newton point computed from the previous pilot's released sums and the data-free prior
(:func:`newton_point`, post-processing), then the anchor's two releases at the last Newton
point; the run makes them inside its charge and attaches the anchor to the step for that run only.

**Where κ and the clips come from** (a recognised logistic regression, η = α + xᵢᵀβ with α and
β free variables on their own scale). With public bounds |x_ij| ≤ M_j (``x_bounds``), every
row's extended covariate x̃ᵢ = (1, xᵢ) has ‖x̃ᵢ‖ ≤ B = √(1 + Σⱼ M_j²) (no 1 without an
intercept). Its score (yᵢ − pᵢ)x̃ᵢ has norm at most B, its Hessian −wᵢx̃ᵢx̃ᵢᵀ (w = p(1 − p))
Frobenius norm at most B²/4, and the Hessian's Lipschitz constant is at most B³/(6√3)
(|w′| ≤ 1/(6√3)). So the anchor's clips are b_g = B and b_H = B²/4 and κ = B³/(6√3): no row
within the bounds is ever clipped. A caller's ``centre_lipschitz`` κ replaces the worst case
(rows beyond it are clipped: a bias, never a privacy loss); without ``x_bounds`` the clips are
then those of the B with B³/(6√3) = κ. These worst cases are loose where P is large (B grows
like √P, the typical row's norm too but its score and Hessian far less), so with the step's
``"auto"`` clip bound the run also releases, at the anchor's point (the last Newton point; the
pilots before it clip at the public B and B²/4), the histograms of the rows' score and Hessian
norms (:class:`pymc_dp.mechanisms.clip_bound.NoisyScoreNormHistogram`,
:class:`pymc_dp.mechanisms.hessian.NoisyHessianNormHistogram`, priced with the clip bound's
share of ε) and clips the anchor at ``clip_margin`` × their noisy ``clip_quantile`` where that
is below b_g or b_H (post-processing; the noise multipliers, and so ε, do not depend on it).

Notes
-----
**Neighbouring relation.** The run's (substitute: a DP start is planned only under it).

**Sensitivity.** The anchor's score sum: 2b_g (L2); its Hessian sum: 2b_H (Frobenius); each
row's term is clipped at these public bounds. The centred releases: :mod:`pymc_dp.mechanisms.centred`.

**What ε covers.** The anchor's two Gaussian releases and the 2 × ``newton_steps`` pilot
releases are priced here, with μ_anchor = ``anchor_share`` × the μ left to the chains after the
DP start and the clip bound (of it ``newton_share`` to the pilots together, each pilot
:data:`CENTRE_NEWTON_GROWTH` times the one before, and, within each release pair,
``hessian_share`` to the Hessian, :data:`CENTRE_LAST_PILOT_HESSIAN_SHARE` in the last pilot's),
and composed with the run's other releases in its one plan:
a run over its target or the budget is refused before any row is read. The chains are then
calibrated to what is left. Deciding to centre reads nothing (public quantities only).

**The anchor's share** (:data:`CENTRE_ANCHOR_SHARE`, 0.65 since H36i). A run's fate follows the
anchor's offset e from the mode in posterior sds (the chains sit about e from θ̂), and e is random:
mostly the anchor's own score noise moved through Σ, e² ≈ a/f for a share f. The centred chains'
noise variance per iteration is ∝ τ²R⁴, τ² ∝ 1/((1 − f)μ), R² ∝ 1 + e², so ∝ (1 + a/f)²/(1 − f),
least where f² + 3af − 2a = 0. Chosen at the 80th percentile of e rather than its median (a run
whose e lands in the tail is the one that fails): f = 0.60–0.64 on issue 36's ε = 4 cells, and in
``benchmarks/centred_anchor_split.py``'s simulation of the releases the ESS law at that percentile
is 1.2–1.4× f = 0.5's, 0.94–1.0× at the median. A constant: a function of no data, and of no
setting but through the μ it splits; priced with the rest before any row is read.

**Re-centring** (``centre="recentre"``, opt-in, H36i). After the anchor, the expansion moves to its own
Newton point θ̂₂ = θ̂ + (−Ĥ)⁻¹Ĝ (post-processing), where the chains sit, by one more release of each
row's change of expansion, clipped at ½κd² and κd (d = ‖θ̂₂ − θ̂‖, public):
:func:`pymc_dp.mechanisms.centred.recentring_release`, priced here with
:data:`pymc_dp.centred_predictions.CENTRE_RECENTRE_SHARE` of μ_anchor taken from the anchor proper (ε
unchanged). Simulated, it brings e ≤ 1.07 from 38 % to 98 % of runs on ``randhie`` at ε = 4
(``docs/centred.md``, "Re-centring").

**With ``draws`` and ``tune`` unset** a centred :func:`pymc_dp.sample` run takes ``draws="auto"``'s
iterations (:meth:`CentringPlan.auto_row`, capped by :func:`centred_auto_max_iterations`): public
settings only, since they set each iteration's noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pymc_dp._validation import AUTO_CLIP, check_finite_positive
from pymc_dp.accounting.events import PrivacyEvent
from pymc_dp.centred_predictions import (  # the pure math, on the planning floor (pmdp.plan's centred rows use it)
    CENTRE_ANCHOR_SHARE,
    CENTRE_HESSIAN_SHARE,
    CENTRE_LAST_PILOT_HESSIAN_SHARE,
    CENTRE_NEWTON_GROWTH,
    CENTRE_NEWTON_SHARE,
    CENTRE_NEWTON_STEPS,
    centred_ess,
    centred_rows,
    centring_bound_and_lipschitz,
    centring_events,
    centring_noise_multipliers,
    logistic_centring_bound,
    recentring_noise_multipliers,
)
from pymc_dp.mechanisms.centred import check_centre_lipschitz
from pymc_dp.mechanisms.clip_bound import NORM_GRID_EDGES, clipping_summary
from pymc_dp.step_methods.centred import prior_hessian
from pymc_dp.usability import CLIPPING_MARGIN_SDS

#: The most iterations per chain (tune + draws) ``draws="auto"`` gives a centred DPHMC run: pmdp.sample's default
#: 1,000 + 1,000. A centred DPHMC iteration reads every row's packed Hessian at each of its L + 1 gradients (about
#: 10× a plain gradient's work at P = 21): 2 × 2,000 iterations took 375-398 CPU s on ``randhie`` (N = 20,190,
#: P = 7, L = 10) on the shared 2-core machine (``docs/centred.md``), so the cap stays (public constant).
CENTRED_AUTO_MAX_ITERATIONS = 2000
#: A centred DPPenaltyMH iteration releases one residual ratio (no gradient): it reads each row's log-likelihood and
#: its packed Hessian, P(P + 1)/2 numbers. Measured (2 chains × 500 and × 2,500 iterations, the whole call's CPU s):
#: ``randhie`` (N = 20,190, P = 7: 565,320 packed entries) 15.5 and 43.2 s, 6.9 ms per chain iteration and 8.6 s
#: outside the chains; ``fair`` (N = 6,366, P = 5: 95,490) 7.2 and 9.9 s, 0.67 ms. ``draws="auto"`` gives it at
#: most this many packed entries read per chain (iterations × N × P(P + 1)/2): 3,980 iterations on ``randhie``, so
#: that pmdp.sample's default 4 chains stay within about 2 CPU minutes there (2 chains: 62-80 CPU s measured, the
#: whole call); 20,000 (the ceiling) on ``fair`` (2 chains: 44-47 CPU s). A public constant: N and P are public
#: under the substitute relation that ``draws="auto"`` needs.
CENTRED_PENALTY_AUTO_WORK = 2.25e9
#: The floor and ceiling of DPPenaltyMH's cap: DPHMC's, and :func:`pymc_dp.plan`'s default ``max_iterations``.
CENTRED_PENALTY_AUTO_ITERATION_RANGE = (CENTRED_AUTO_MAX_ITERATIONS, 20000)


def centred_auto_max_iterations(method: str, n_rows: int, n_params: int) -> int:
    """The most iterations per chain ``draws="auto"`` gives a centred ``method`` run (public settings only).

    DPHMC: :data:`CENTRED_AUTO_MAX_ITERATIONS`. DPPenaltyMH: :data:`CENTRED_PENALTY_AUTO_WORK` / (N P(P + 1)/2),
    within :data:`CENTRED_PENALTY_AUTO_ITERATION_RANGE` (its iteration reads no gradient: about 15× cheaper than
    DPHMC's at L = 10; its ESS grows with the draws where the noise is small: ``docs/centred.md``,
    "draws='auto'").
    """
    if method == "DPHMC":
        return CENTRED_AUTO_MAX_ITERATIONS
    low, high = CENTRED_PENALTY_AUTO_ITERATION_RANGE
    work = int(n_rows) * int(n_params) * (int(n_params) + 1) / 2.0
    return int(min(max(CENTRED_PENALTY_AUTO_WORK / work, low), high))


__all__ = [
    "CENTRED_AUTO_MAX_ITERATIONS",
    "CENTRED_PENALTY_AUTO_ITERATION_RANGE",
    "CENTRED_PENALTY_AUTO_WORK",
    "CENTRE_ANCHOR_SHARE",
    "CENTRE_HESSIAN_SHARE",
    "CENTRE_NEWTON_SHARE",
    "CENTRE_NEWTON_STEPS",
    "CentringPlan",
    "anchor_offset_distance",
    "anchor_posterior_scale",
    "anchor_posterior_shape",
    "centred_auto_max_iterations",
    "centred_ess",
    "logistic_centring_bound",
    "newton_point",
    "plan_centring",
]


def _grid_edge_at_or_above(value: float) -> float:
    """The histogram grid's first edge at or above ``value`` (public), or its last edge."""
    k = min(int(np.searchsorted(NORM_GRID_EDGES, value, side="left")), len(NORM_GRID_EDGES) - 1)
    return float(NORM_GRID_EDGES[k])


@dataclass
class CentringPlan:
    """A second-order centring anchor planned for one ``pmdp.sample`` run: its clips, noise, κ and events.

    Everything here is public (set before any row is read). :meth:`release` releases the anchor
    at the run's DP start (inside the run's charge) and makes the step centre on it.
    """

    lipschitz: float
    grad_clip: float
    hessian_clip: float
    noise_multiplier: float
    hessian_noise_multiplier: float
    source: str
    anchor_share: float = CENTRE_ANCHOR_SHARE
    hessian_share: float = CENTRE_HESSIAN_SHARE
    events: tuple[PrivacyEvent, ...] = ()
    anchor: Any = field(default=None, repr=False)
    prediction: dict[str, Any] | None = None
    clip_source: str = "public: B and B²/4"
    #: The step's clip bounds set by hand, which the centred bounds replace (public: the caller's values).
    replaced_clips: dict[str, Any] = field(default_factory=dict)
    #: The last pilot release's noise multipliers (score, Hessian): what sets where the anchor lands.
    newton_noise_multipliers: tuple[float, float] | None = None
    #: Every pilot's (score, Hessian) noise multipliers, first to last (:func:`centring_pilot_schedule`).
    newton_schedule: tuple[tuple[float, float], ...] = ()
    newton_steps: int = 0
    newton_share: float = 0.0
    #: The pilots' released values and the points they moved the anchor to (public), filled by :meth:`release`.
    path: list[dict[str, Any]] = field(default_factory=list)
    #: The point the score and Hessian norm histograms were released at (the anchor's), filled by :meth:`release`.
    clip_point: list[float] | None = None
    #: The public worst-case clips (B, B²/4) the pilots use: :meth:`clip` lowers only the anchor's.
    public_clips: tuple[float, float] = field(init=False)
    #: The posterior sd the ``draws="auto"`` prediction assumed (:meth:`auto_row`; public).
    prediction_sd: float | None = None
    #: ``centre="recentre"``: the re-centring release's (τ_r, τ_rH), priced with the anchor; None otherwise.
    recentring_noise_multipliers: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        self.public_clips = (self.grad_clip, self.hessian_clip)

    def predict(self, step: Any, draws: int, posterior_sd: float, offset_sd: float) -> dict[str, Any]:
        """The run's predicted ESS (:func:`centred_ess`) for the calibrated ``step``; kept for the record.

        Once the anchor is released, s and e come from it instead (post-processing of Ĝ and Ĥ:
        :func:`anchor_posterior_scale`), and so does the posterior's shape (−Ĥ)⁻¹, whose directions
        set how fast each sampler's metric moves (:func:`pymc_dp.centred_predictions.metric_spectrum`;
        whitened for DPPenaltyMH's dense walk along the anchor's shape);
        ``posterior_sd`` and ``offset_sd`` are the fallback (with an isotropic shape).
        """
        shape = distance = None
        if self.anchor is not None:
            posterior_sd, offset_sd = anchor_posterior_scale(self.anchor, posterior_sd, offset_sd)
            shape = anchor_posterior_shape(self.anchor)
            distance = anchor_offset_distance(self.anchor)
        hmc = hasattr(step, "grad_noise_multiplier")
        dense_mass = hmc and self._dense_mass(step)
        self.prediction = centred_ess(
            draws=draws,
            n_params=step._prior.n_params,
            posterior_sd=posterior_sd,
            offset_sd=offset_sd,
            lipschitz=self.lipschitz,
            llr_noise_multiplier=step.llr_noise_multiplier if hmc else step.noise_multiplier,
            grad_noise_multiplier=step.grad_noise_multiplier if hmc else None,
            n_leapfrog=step.n_leapfrog if hmc else None,
            neighbouring=step.neighbouring,
            posterior_shape=shape,
            dense_proposal=not hmc and self._dense_walk(step),
            dense_mass=dense_mass,
            step_size_jitter=_hmc_jitter(step, dense_mass) if hmc else 0.0,
            offset_distance=distance,
        )
        return self.prediction

    def _dense_mass(self, step: Any) -> bool:
        """Whether the run's DPHMC uses this anchor's dense mass (``step`` may be the calibrated copy, which carries
        no anchor): :meth:`pymc_dp.step_methods.hmc.DPHMC.dense_mass`'s rule on the released Ĥ and the prior."""
        from pymc_dp.step_methods.penalty import target_metric_factor

        anchor = self.anchor
        if anchor is None or anchor.hessian is None:
            return False
        curvature = step.temperature * np.asarray(anchor.hessian, dtype=float)
        curvature = curvature + prior_hessian(step._prior, np.asarray(anchor.point, dtype=float))
        return target_metric_factor(curvature, step.temperature * anchor.hessian_std) is not None

    def _dense_walk(self, step: Any) -> bool:
        """Whether the run's DPPenaltyMH walks along this anchor's shape (``step`` may be the calibrated copy, which
        carries no anchor): second order, ``proposal_scale`` unset and a Hessian above its noise's edge."""
        from pymc_dp.step_methods.penalty import target_metric_factor

        anchor = self.anchor
        if anchor is None or anchor.hessian is None or getattr(step, "_proposal_scale_user_set", True):
            return False
        return target_metric_factor(anchor.hessian, anchor.hessian_std) is not None

    def auto_row(self, step: Any, chains: int, chains_mu: float, epsilon: float, delta: float) -> Any:
        """The centred row (:class:`pymc_dp.planning.MethodPlan`) whose iterations ``draws="auto"`` takes.

        :func:`pymc_dp.centred_predictions.centred_rows` on the run's own chains' μ (its
        calibration's), this plan's pilot noise, B and κ, s = 2/√N (the planner's logistic
        guess) and at most :func:`centred_auto_max_iterations` per chain (DPHMC's 2,000; DPPenaltyMH's from
        a budget of packed Hessian entries read, 3,980 on ``randhie``). Public settings only (N is public
        under the substitute relation ``draws="auto"`` needs): the number of iterations reveals nothing
        about the rows.

        Why the guess and not the DP start's scale: the iterations set each iteration's noise
        multiplier (the chains' μ split over them), which :func:`pymc_dp.sample` commits before
        the run's charge, and so before the DPADVI start, the pilots and the anchor are released.
        Reading s off those releases (their sds, or (−Ĥ)⁻¹ as :meth:`predict` does afterwards)
        would be free post-processing only if the calibration were committed after them, inside
        the charge, with the chains' total μ unchanged. Measured (``benchmarks/centred_coverage.py``,
        covariates uniform on [−1, 1], N = 10⁴, P = 3): the true s is 3.2/√N against the guess's
        2/√N, and the iterations at ε = 1 and 4 are the cap (2,000) at either s, so the guess
        changes nothing there; at 5.7/√N (the ratio measured on ``fair``) in the same setting at
        ε = 1 they would fall to 25 for DPHMC (predicted unusable) and stay 2,000 for DPPenaltyMH.
        """
        from pymc_dp.planning import LOGISTIC_SD_FACTOR, TUNE_FRACTION, MethodPlan

        hmc = hasattr(step, "grad_noise_multiplier")
        self.prediction_sd = LOGISTIC_SD_FACTOR / math.sqrt(step.n_rows)
        rows, _ = centred_rows(
            epsilon,
            delta,
            n_rows=step.n_rows,
            n_params=step._prior.n_params,
            chains=chains,
            posterior_sd=self.prediction_sd,
            neighbouring=step.neighbouring,
            n_leapfrog=step.n_leapfrog if hmc else 10,
            grad_budget_share=step.grad_budget_share if hmc else 0.5,
            bound=self.public_clips[0],
            lipschitz=self.lipschitz,
            max_iterations=centred_auto_max_iterations(
                "DPHMC" if hmc else "DPPenaltyMH", step.n_rows, step._prior.n_params
            ),
            tune_fraction=TUNE_FRACTION,
            chains_mu=chains_mu,
            pilot=self.newton_noise_multipliers,
            methods=("DPHMC",) if hmc else ("DPPenaltyMH",),
        )
        return MethodPlan(**rows[0])

    def clip(self, grad_clip: float, hessian_clip: float) -> None:
        """Clip the anchor at released bounds where they are below the public ones (post-processing)."""
        if math.isfinite(grad_clip) and grad_clip > 0:
            self.grad_clip = min(self.grad_clip, float(grad_clip))
        if math.isfinite(hessian_clip) and hessian_clip > 0:
            self.hessian_clip = min(self.hessian_clip, float(hessian_clip))
        self.clip_source = (
            "released: margin × the noisy quantile of the norms at the anchor's point (the last Newton point), where "
            "below the public"
        )

    def release(self, step: Any, point: dict[str, Any], clip_plan: Any = None) -> Any:
        """Move from ``point`` by noisy Newton steps, release the anchor there and centre ``step`` on it.

        Each Newton step releases a pilot second-order anchor at the current point (clipped at
        the public worst cases B and B²/4, the pilot's noise multipliers; priced in the plan)
        and moves to :func:`newton_point` of it (post-processing). With ``clip_plan`` (the
        step's ``"auto"`` clip bound) the rows' score and Hessian norm histograms are then
        released at the last point, where the anchor sits, and clip the anchor
        (:meth:`clip`); the anchor is released there. Returns the undo function of
        :meth:`use_anchor`.
        """
        names = [v.name for v in step.vars]
        current, self.path = point, []
        for tau_g, tau_h in self.newton_schedule:
            pilot = step.release_run_anchor(current, self.public_clips[0], tau_g, self.public_clips[1], tau_h)
            moved = newton_point(pilot, step._prior)  # post-processing of the pilot's released Ĝ and Ĥ
            self.path.append({**pilot.record(), "newton_point": [float(v) for v in moved]})
            current = _unflatten(moved, point, names)
        if clip_plan is not None:  # the anchor's clips, read at the point it sits at (two priced histograms)
            where = "the centring anchor's point (the last Newton point)"
            self.clip(clip_plan.release(current, where), clip_plan.release_hessian(current, where))
            self.clip_point = [float(v) for name in names for v in np.ravel(current[name])]
        self.anchor = step.release_run_anchor(
            current, self.grad_clip, self.noise_multiplier, self.hessian_clip, self.hessian_noise_multiplier
        )
        if self.recentring_noise_multipliers is not None:  # move the expansion to the anchor's own Newton point
            target = newton_point(self.anchor, step._prior)  # post-processing of Ĝ, Ĥ and the data-free prior
            taus = self.recentring_noise_multipliers
            self.anchor = step.release_run_recentring(self.anchor, target, self.lipschitz, *taus)
        restore = step.use_anchor(self.anchor, self.lipschitz)
        step._anchor_priced_by_run = True  # this run's plan prices the anchor once: not in dp_mu_cumulative
        return restore

    def starts(self, point: dict[str, Any], names: list[str], chains: int, rng: Any) -> list[dict[str, Any]]:
        """One start per chain drawn from N(m̂, Σ̂), Σ̂ = (−Ĥ)⁻¹, m̂ = θ̂ + Σ̂Ĝ (released): the target's Laplace draws.

        The centred releases' noise grows like ‖θ − θ̂‖², so chains started far from θ̂ (at a
        DPADVI fit's widened draws) may never reach it. Until H36j the starts were N(θ̂, 4Σ̂), two
        sds out in every direction (R² ≈ 4 tr Σ̂, the noise's variance ≈ 16× the stationary one):
        in the kernel simulation on ``fair`` (``benchmarks/centred_law_sim.py``, 80 chains, e =
        0.5) 2 of 40 chain pairs stuck there (ESS ≤ 1.7 per chain, both seeds) and none from
        N(m̂, Σ̂), the medians unchanged (``docs/centred.md``, "What limits `fair`"). m̂ is the
        centred target's mode (its quadratic part at θ̂: the anchor's expansion), where the chains
        sit; the draws keep the chains apart by the target's own spread, so R-hat still compares
        them. Post-processing of the released anchor and data-free randomness (the prior's
        curvature, small at the sample sizes a centred run plans for, is left out, as in
        Σ̂). θ̂ itself where −Ĥ is not positive definite. Eigenvalues of −Ĥ below the Hessian noise's
        spectral edge σ_H√(2P) are read as the edge here (the release does not resolve them): a
        positive eigenvalue near 0 would otherwise put m̂ = θ̂ + Σ̂Ĝ millions of sds out (review 10).
        """
        hessian = np.asarray(self.anchor.hessian, dtype=float)
        eigenvalues, vectors = np.linalg.eigh(-0.5 * (hessian + hessian.T))
        centre = np.asarray(self.anchor.point, dtype=float)
        scale = np.zeros_like(hessian)
        if np.all(eigenvalues > 0):
            eigenvalues = np.maximum(eigenvalues, float(self.anchor.hessian_std) * math.sqrt(2.0 * hessian.shape[0]))
            scale = vectors / np.sqrt(eigenvalues)
            centre = centre + (vectors / eigenvalues) @ (vectors.T @ np.asarray(self.anchor.gradient, dtype=float))
        flats = centre + rng.standard_normal((chains, centre.size)) @ scale.T
        return [_unflatten(flat, point, names) for flat in flats]

    def clipping(self, clip_plan: Any) -> dict[str, Any]:
        """The anchor's clipping for the result's check (:func:`pymc_dp.diagnostics.attach_diagnostics`).

        ``clip_plan``'s last two releases (the anchor's score and Hessian norm histograms) read at
        the clips the anchor used (post-processing of released counts); the one further above its
        bias threshold is last, where the check reads it. A clip at the public worst case (below
        the released one) clips no row within the public bounds, so the quantile's resolution
        does not matter there; and since rows within the bounds can pile up just below that
        maximum, the share is read from the grid edge at or above it (no interpolation into the
        bin holding it, which counted such rows as clipped: measured on ``randhie``, 4 % ± 0.9 %
        at clips no row within the bounds can exceed). Rows beyond the bounds by less than that
        edge are then not counted.
        """
        n_rows = clip_plan.step.n_rows if clip_plan.step.neighbouring == "substitute" else None
        checks = []
        used = (self.grad_clip, self.hessian_clip)
        for counts, clip, release in zip(clip_plan.counts[-2:], used, clip_plan.releases[-2:], strict=True):
            public_maximum = clip < release["bound"]
            read_at = _grid_edge_at_or_above(clip) if public_maximum else clip
            summary = clipping_summary(counts, read_at, clip_plan.noise_std, n_rows, release["reference"])
            check = {**release, **summary, "bound": clip}
            if public_maximum:
                check.pop("resolvable", None)
                check["share_read_above"] = read_at
            checks.append(check)

        def excess(check: dict[str, Any]) -> tuple[bool, float]:
            margin = check["share_above_bound_at_reference"] - CLIPPING_MARGIN_SDS * check["share_above_bound_sd"]
            return check.get("resolvable") is False, margin - check["bias_threshold_share"]

        return {"releases": sorted(checks, key=excess), "note": "the centring anchor's score and Hessian clips"}

    def settings(self) -> dict[str, Any]:
        """The step record's ``centring`` entry (the anchor's released values once released)."""
        anchor = self.anchor.record() if self.anchor is not None else {}
        return {**anchor, "lipschitz": self.lipschitz}

    def record(self) -> dict[str, Any]:
        """The run record's ``centring`` entry: used, where κ came from, the shares and noise (public)."""
        return {
            "used": True,
            "order": 2,
            "lipschitz": self.lipschitz,
            "lipschitz_source": self.source,
            "grad_clip": self.grad_clip,
            "hessian_clip": self.hessian_clip,
            "clip_source": self.clip_source,
            "noise_multiplier": self.noise_multiplier,
            "hessian_noise_multiplier": self.hessian_noise_multiplier,
            "anchor_share": self.anchor_share,
            "hessian_share": self.hessian_share,
            "anchor": (
                f"{self.newton_steps} noisy Newton step(s) from the DPADVI start's mean"
                if self.newton_steps
                else "the DPADVI start's mean"
            ),
            "newton_steps": self.newton_steps,
            "newton_share": self.newton_share,
            **(
                {
                    # the last pilot's (where the anchor lands); every pilot's in newton_noise_multipliers
                    "newton_noise_multiplier": self.newton_noise_multipliers[0],
                    "newton_hessian_noise_multiplier": self.newton_noise_multipliers[1],
                    "newton_noise_multipliers": [list(pair) for pair in self.newton_schedule],
                    "newton_growth": CENTRE_NEWTON_GROWTH,
                    "newton_last_hessian_share": CENTRE_LAST_PILOT_HESSIAN_SHARE,
                }
                if self.newton_steps
                else {}
            ),
            **({"newton_path": list(self.path)} if self.path else {}),
            **({"newton_clips": list(self.public_clips)} if self.newton_steps else {}),
            **({"clip_histograms_point": list(self.clip_point)} if self.clip_point is not None else {}),
            **({"replaced_clip_bounds": dict(self.replaced_clips)} if self.replaced_clips else {}),
            **({"prediction": self.prediction} if self.prediction is not None else {}),
            **(
                {"recentring_noise_multipliers": list(self.recentring_noise_multipliers)}
                if self.recentring_noise_multipliers is not None
                else {}
            ),
        }


def _hmc_jitter(step: Any, dense_mass: bool) -> float:
    """The step-size jitter a DPHMC run uses: the caller's, else the dense mass's default (public settings)."""
    from pymc_dp.step_methods.hmc import DENSE_MASS_STEP_SIZE_JITTER

    if getattr(step, "_jitter_user_set", True) or not dense_mass:
        return float(step.step_size_jitter)
    return DENSE_MASS_STEP_SIZE_JITTER


def _unflatten(flat: np.ndarray, like: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """A flat vector as value-variable name → array shaped as in ``like``."""
    sizes = [np.asarray(like[name]).size for name in names]
    parts = np.split(np.asarray(flat, dtype=float), np.cumsum(sizes)[:-1])
    return {n: v.reshape(np.shape(like[n])) for n, v in zip(names, parts, strict=True)}


def newton_point(pilot: Any, prior: Any) -> np.ndarray:
    """θ₁ = θ₀ + A⁻¹(Ĝ + ∇log p(θ₀)), A = −Ĥ − ∇²log p(θ₀): one noisy Newton step from a released pilot anchor.

    Post-processing of the pilot's released Ĝ and Ĥ at its public point θ₀ and of the
    data-free prior. The noise E on Ĥ has spectral norm about σ_H√(2P), so A's eigenvalues are
    replaced by their absolute values floored there (a saddle-free Newton step, Dauphin et al.
    2014): a direction whose curvature the release cannot tell from noise takes a short step
    instead of a wild one. Not private in itself: it reads released values only.
    """
    theta = np.asarray(pilot.point, dtype=float)
    hessian = np.asarray(pilot.hessian, dtype=float)
    _, prior_gradient = prior.prior_logp_and_grad(theta)
    precision = -0.5 * (hessian + hessian.T) - prior_hessian(prior, theta)
    eigenvalues, vectors = np.linalg.eigh(0.5 * (precision + precision.T))
    floor = pilot.hessian_std * math.sqrt(2.0 * theta.size)
    eigenvalues = np.maximum(np.abs(eigenvalues), floor)
    score = np.asarray(pilot.gradient, dtype=float) + np.asarray(prior_gradient, dtype=float)
    return theta + vectors @ ((vectors.T @ score) / eigenvalues)


def anchor_posterior_scale(anchor: Any, fallback_sd: float, fallback_offset: float) -> tuple[float, float]:
    """(s, e) from a released second-order anchor: Σ ≈ (−Ĥ)⁻¹, s the geometric mean of its sds, e the RMS of
    the Newton step ΣĜ in those sds (how far θ̂ is from the mode). Post-processing of released values.

    The fallbacks are returned where −Ĥ is not positive definite (its noise dominates).
    """
    hessian = np.asarray(anchor.hessian, dtype=float)
    eigenvalues, vectors = np.linalg.eigh(-0.5 * (hessian + hessian.T))
    if not np.all(eigenvalues > 0):
        return fallback_sd, fallback_offset
    covariance = (vectors / eigenvalues) @ vectors.T
    sds = np.sqrt(np.diag(covariance))
    step = covariance @ np.asarray(anchor.gradient, dtype=float)
    return float(np.exp(np.mean(np.log(sds)))), float(np.sqrt(np.mean((step / sds) ** 2)))


def anchor_offset_distance(anchor: Any) -> float | None:
    """‖(−Ĥ)⁻¹Ĝ‖ of a released second-order anchor: its Euclidean distance from the mode it estimates (the
    chains sit about that far from θ̂, plus their spread), or None where −Ĥ is not positive definite.
    Post-processing of released values (:func:`pymc_dp.centred_predictions.centred_ess`'s ``offset_distance``)."""
    shape = anchor_posterior_shape(anchor)
    if shape is None:
        return None
    return float(np.linalg.norm(shape @ np.asarray(anchor.gradient, dtype=float)))


def anchor_posterior_shape(anchor: Any) -> np.ndarray | None:
    """(−Ĥ)⁻¹ of a released second-order anchor (the posterior covariance's shape), or None where −Ĥ is not
    positive definite (its noise dominates). Post-processing of a released value."""
    hessian = np.asarray(anchor.hessian, dtype=float)
    eigenvalues, vectors = np.linalg.eigh(-0.5 * (hessian + hessian.T))
    if not np.all(eigenvalues > 0):
        return None
    return (vectors / eigenvalues) @ vectors.T


def _not_applicable(steps: list[Any], dp_init: Any, device: Any, dask_backend: Any) -> str | None:
    """Why the run's steps, start or backend rule centring out (None when they do not)."""
    from pymc_dp.step_methods.hmc import DPHMC
    from pymc_dp.step_methods.penalty import DPPenaltyMH

    if len(steps) != 1 or not isinstance(steps[0], DPPenaltyMH | DPHMC):
        return "centring needs one DPPenaltyMH or DPHMC step covering every variable"
    if steps[0].anchor is not None:
        return "the step has its own anchor (released by the caller)"
    if not steps[0].needs_calibration:
        return "noise set by hand (the anchor's share of ε is planned with the chains' calibration)"
    if device is not None or dask_backend is not None:
        return "a JAX or Dask backend (the centred releases run on the default backend only)"
    if dp_init is None:
        return "no DP start to anchor at (centring anchors at the DPADVI start of init='auto' or 'dpadvi')"
    return None


def plan_centring(
    settings: dict[str, Any],
    steps: list[Any],
    model: Any,
    epsilon: float | None,
    delta: float,
    dp_init: Any = None,
    backends: tuple[Any, Any] = (None, None),
) -> tuple[CentringPlan | None, dict[str, Any]]:
    """(plan or None, record): whether the run centres, and its anchor's settings and events (public only).

    ``settings``: :func:`pymc_dp.sample`'s arguments. ``centre``: ``"auto"`` centres where it
    applies and records why not elsewhere; ``True`` refuses a run where it does not apply
    (``ValueError`` naming why); ``False`` never centres. ``centre_lipschitz``: a caller's κ;
    ``x_bounds``: the public covariate bounds. The anchor's μ is :data:`CENTRE_ANCHOR_SHARE` of
    that of the ε left after the DP start and the clip bound (``init_epsilon_share``,
    ``clip_epsilon_share``). ``dp_init``: the run's planned DPADVI start; ``backends``: the
    run's (JAX device, Dask backend), None each by default.
    """
    centre, centre_lipschitz, x_bounds = settings["centre"], settings["centre_lipschitz"], settings["x_bounds"]
    chain_share = 1.0 - settings["init_epsilon_share"] - settings["clip_epsilon_share"]
    if not (isinstance(centre, bool) or (isinstance(centre, str) and centre in ("auto", "recentre"))):
        raise ValueError(
            f"`centre` must be 'auto', True or False. Found {centre!r} (or 'recentre': centre=True with the "
            "re-centring release, docs/centred.md)."
        )
    recentre = isinstance(centre, str) and centre == "recentre"  # centre=True, with the re-centring release
    centre = True if recentre else centre
    if centre_lipschitz is not None:
        centre_lipschitz = check_centre_lipschitz(centre_lipschitz)
        if centre is False:
            raise ValueError(
                f"`centre_lipschitz` must be None with centre=False (it is the centred step's κ). Found "
                f"centre_lipschitz={centre_lipschitz!r}."
            )
    why = "centre=False" if centre is False else _not_applicable(steps, dp_init, *backends)
    bound = lipschitz = None
    if why is None:  # B from x_bounds (or the B whose worst-case κ is the caller's), κ the caller's or B³/(6√3)
        bound, lipschitz, why = centring_bound_and_lipschitz(model, x_bounds, centre_lipschitz)
    if bound is None:
        if centre is True:
            raise ValueError(f"`centre`=True needs centring to apply to this run. Found: {why}.")
        for name, value in (("x_bounds", x_bounds), ("centre_lipschitz", centre_lipschitz)):
            if value is not None:  # it would be silently ignored
                raise ValueError(
                    f"`{name}` must be None when `step` is given and the run does not centre ({why}). Found "
                    f"{name}={value!r}."
                )
        return None, {"used": False, "reason": why}
    source = "centre_lipschitz" if centre_lipschitz is not None else "x_bounds (worst case B³/(6√3))"
    share = check_finite_positive("chain_share", chain_share)
    (tau_g, tau_h), schedule = centring_noise_multipliers(epsilon, delta, share, schedule=True, recentre=recentre)
    recentring = recentring_noise_multipliers(epsilon, delta, share) if recentre else None
    who = f"{type(steps[0]).__name__}[{','.join(steps[0].var_names)}]"
    events = centring_events((tau_g, tau_h), schedule, who, recentring)  # all priced here, before any row is read
    # a caller's clip bounds are not used by a centred chain (it clips at the centring bounds): say so
    replaced = {name: getattr(steps[0], name) for name in type(steps[0]).clip_attributes}
    replaced = {name: value for name, value in replaced.items() if value != AUTO_CLIP}
    plan = CentringPlan(
        lipschitz,
        bound,
        bound**2 / 4.0,
        tau_g,
        tau_h,
        source,
        events=events,
        replaced_clips=replaced,
        newton_noise_multipliers=schedule[-1],
        newton_schedule=schedule,
        newton_steps=len(schedule),
        newton_share=CENTRE_NEWTON_SHARE,
        recentring_noise_multipliers=recentring,
    )
    return plan, plan.record()
