"""DPPenaltyMH: the penalty algorithm with a Gaussian-noised, clipped log-likelihood ratio."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pymc_dp._errors import withholds_chains
from pymc_dp._validation import (
    check_clip_bound,
    check_finite_positive,
    check_neighbouring,
)
from pymc_dp.accounting.events import PrivacyEvent
from pymc_dp.mechanisms import NoisyLogLikelihoodRatio
from pymc_dp.step_methods import kernels
from pymc_dp.step_methods.base import (
    DPStep,
    GaussianNoiseMultiplier,
    RandomWalkTuning,
    TransitionInfo,
    _row,
)
from pymc_dp.step_methods.centred import Centring
from pymc_dp.step_methods.kernels import penalty_log_acceptance

__all__ = ["DPPenaltyMH", "dense_proposal_factor", "penalty_log_acceptance", "target_metric_factor"]


def dense_proposal_factor(hessian: np.ndarray, hessian_std: float) -> np.ndarray | None:
    """A factor L (LLᵀ = C) of the posterior covariance estimate C = (−Ĥ)⁻¹ from a released Hessian sum Ĥ.

    −Ĥ is symmetrised and projected to positive definite: eigenvalues below the noise's spectral
    edge σ_H√(2P) (E's off-diagonal sd is σ_H/√2, so ‖E‖ ≈ 2(σ_H/√2)√P) are raised to it, so
    that a direction the noise may have made flat is not proposed along without limit. None
    where every eigenvalue is below that edge (the release says nothing about the shape: the
    walk stays isotropic). The prior's curvature is left out (the likelihood's dominates at the
    sample sizes a centred run plans for).

    Parameters
    ----------
    hessian : numpy.ndarray
        Ĥ, P × P, the anchor's released noisy clipped Hessian sum.
    hessian_std : float
        σ_H, the sd of Ĥ's diagonal noise (public: τ_H times the sensitivity).

    Returns
    -------
    numpy.ndarray or None
        L = V Λ^(-1/2) (P × P, the symmetric square root's eigen-factor), or None.

    Notes
    -----
    Post-processing of a released value (:class:`pymc_dp.mechanisms.centred.CentringAnchor`,
    priced once with the run under its neighbouring relation, substitute or add/remove): no
    privacy cost. The centred ratio's bound and sensitivity read only ‖θ′ − θ‖ and the distances
    to θ̂, whatever the proposal, so L changes no noise multiplier and no ε.
    """
    spectrum = _resolved_spectrum(hessian, hessian_std)
    if spectrum is None:
        return None
    values, vectors, edge = spectrum
    return vectors / np.sqrt(np.maximum(values, edge))


def _resolved_spectrum(curvature: np.ndarray, hessian_std: float) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(eigenvalues, eigenvectors, edge) of −``curvature`` symmetrised, edge = max(σ_H√(2P), 1e-8·max|λ|) the noise's
    spectral edge; None where no eigenvalue is above it (the release resolves no direction)."""
    symmetric = -0.5 * (np.asarray(curvature, dtype=float) + np.asarray(curvature, dtype=float).T)
    values, vectors = np.linalg.eigh(symmetric)
    edge = max(float(hessian_std) * math.sqrt(2.0 * symmetric.shape[0]), 1e-8 * float(np.max(np.abs(values))))
    if not np.isfinite(edge) or float(values.max()) <= edge:
        return None
    return values, vectors, edge


def target_metric_factor(curvature: np.ndarray, hessian_std: float) -> np.ndarray | None:
    """A factor L (LLᵀ = C) of the centred target's own covariance C = K⁻¹, K = −``curvature``, where K is positive.

    The centred chains sample the posterior tilted by the anchor's noise, whose quadratic part at
    θ̂ is exactly K = −TĤ − ∇²log p(θ̂) (the rows' residuals have no second-order term there). So the
    metric that whitens the target keeps every positive eigenvalue of K, however far the noise
    moved it: unlike :func:`dense_proposal_factor`, an eigenvalue below the noise's spectral edge
    σ_H√(2P) is not raised to it (that made the metric narrower than the target along its widest
    direction, by λ/edge: on ``fair`` at ε = 4 in most runs, ``docs/centred.md``, "H36j"). Only
    eigenvalues ≤ 0 (the quadratic part improper there) are raised to the edge. None where every
    eigenvalue is below the edge (the release says nothing about the shape), as
    :func:`dense_proposal_factor`.

    Parameters
    ----------
    curvature : numpy.ndarray
        TĤ + ∇²log p(θ̂), P × P: the target's Hessian at θ̂ from released values and the data-free prior.
    hessian_std : float
        Tσ_H, the sd of its diagonal noise (public).

    Returns
    -------
    numpy.ndarray or None
        L = V Λ^(-1/2), or None.

    Notes
    -----
    Post-processing of a released value and the prior (neighbouring relation: the anchor's,
    substitute or add/remove): no privacy cost, and the centred bounds read only θ, θ′ and θ̂, so
    no noise multiplier and no ε changes.
    """
    spectrum = _resolved_spectrum(curvature, hessian_std)
    if spectrum is None:
        return None
    values, vectors, edge = spectrum
    return vectors / np.sqrt(np.where(values > 0, values, edge))


class DPPenaltyMH(Centring, GaussianNoiseMultiplier, RandomWalkTuning, DPStep):
    """Differentially private random-walk Metropolis by the penalty algorithm.

    Each iteration proposes θ′ = θ + s·z (z ~ N(0, I) on the unconstrained scale), releases
    the log-likelihood ratio of the move through the Gaussian mechanism of
    :class:`pymc_dp.mechanisms.NoisyLogLikelihoodRatio` and accepts with probability
    min{1, exp(T λ̂ − (Tσ)²/2 + log p(θ′) − log p(θ))}. The prior and transform Jacobians
    are exact (they read no data).

    Parameters
    ----------
    vars : list, optional
        Continuous variables to sample (default: all free variables of the model).
    proposal_scale : float or array, optional
        Initial random-walk standard deviation s on the unconstrained scale, a scalar or one
        value per flat coordinate. Default 2.38/√(P·N), the optimal random-walk scale for a
        P-dimensional posterior whose rows carry unit Fisher information (N is public under
        substitute neighbours; under add/remove, where it is not, the default is 1.0). Tuned
        during tuning. Left unset on a step centred at second order, the walk is dense instead:
        θ′ = θ + s·L z with LLᵀ ∝ (−Ĥ)⁻¹ of the anchor (unit mean variance) and s starting at
        2.38/√P times the RMS of that covariance's sds (see *Dense proposal* below); given, the
        walk is always s·z.
    llr_clip : float or "auto", default "auto"
        b: each row's log-likelihood ratio is clipped to ±b‖θ′ − θ‖₂. ``"auto"``:
        :func:`pymc_dp.sample` chooses b privately for each run as a DP quantile
        (``clip_quantile``) of the per-row score norms ‖∇θ log p(xᵢ | θ)‖ at a public point,
        charged to the run (:mod:`pymc_dp.mechanisms.clip_bound`); a plain ``pm.sample`` needs
        a number, from public knowledge (a bound on ‖∇θ log p(x | θ)‖ over plausible rows and
        θ). The sampler is exact when no ratio is clipped; clipping biases it but never
        weakens privacy.
    noise_multiplier : float, optional
        τ: the noise standard deviation is σ = τ·Δ, Δ the sensitivity (2b‖θ′ − θ‖₂ under
        substitute neighbours). Leave unset to have :func:`pymc_dp.sample` calibrate it from
        a target ε.
    temperature : float, default 1.0
        T > 0: target p(θ) p(X | θ)^T.
    neighbouring : {"substitute", "add_remove"}, default "substitute"
        Neighbouring relation the sensitivity is computed for.
    reproducible_noise : bool, default False
        For testing; do not publish: derive the mechanism noise from the chain's
        seeded generator, so that a run is reproducible from ``random_seed`` — and whoever
        knows the seed can regenerate the noise and subtract it from the releases. By
        default it comes from the operating system's CSPRNG
        (:func:`pymc_dp.mechanisms.mechanism_rng`).
    anchor : CentringAnchor, optional
        Centre every release on a released anchor (:func:`pymc_dp.release_anchor`; issue 36):
        each iteration releases only the rows' residuals against their first-order expansion at
        θ̂, clipped at c = κ‖θ′ − θ‖·max(‖θ − θ̂‖, ‖θ′ − θ̂‖)
        (:class:`pymc_dp.mechanisms.centred.CentredLogLikelihoodRatio`), so the noise shrinks
        near θ̂ instead of staying b‖θ′ − θ‖. Needs ``centre_lipschitz`` and
        ``noise_multiplier``; ``llr_clip`` is then unused. The anchor's release is charged
        once, with the iterations.
    centre_lipschitz : float, optional
        κ, public. For a first-order anchor a per-row bound on the Lipschitz constant of the
        score (logistic regression with ‖xᵢ‖ ≤ B: B²/4); for a second-order anchor
        (``release_anchor(..., hessian_clip=...)``) on that of the Hessian in operator norm
        (logistic: B³/(6√3)), and each row is then centred on its second-order expansion at θ̂
        (bound ½κ‖Δθ‖R² instead of κ‖Δθ‖R). Rows that break it are clipped.
    tune : bool, default True
        Tune the proposal scale during the tuning iterations.
    tune_interval : int, default 100
        Iterations between tuning updates (PyMC's Metropolis rule applied to the privatized
        accept decisions).
    model, rng, initial_point, compile_kwargs, blocked
        As for PyMC step methods.

    Notes
    -----
    **Neighbouring relation.** Substitute by default: two data sets of the same public size
    N that differ in one row. Add/remove is available with ``neighbouring="add_remove"``.

    **Sensitivity.** With per-row ratios clipped to ±b‖θ′ − θ‖₂, replacing one row moves
    the clipped sum by at most Δ = 2b‖θ′ − θ‖₂ (b‖θ′ − θ‖₂ for add/remove). The noise is
    σ = τΔ, so every iteration is a Gaussian mechanism with Δ/σ = 1/τ, i.e. μ = 1/(2τ²)
    (Sommer et al. 2019, Lemma 12), independent of θ, θ′ and the data.

    **What ε covers.** Every iteration of every chain, tuning included: k iterations in all
    give total μ = k/(2τ²) and δ(ε) from the closed form (Räisä et al. 2021, Thm 3.3 with
    no gradient term). The released values are the noisy ratio λ̂ and what is computed from
    it (accept decisions, draws, the tuned proposal scale); the proposal and the prior are
    data-free. τ here equals Räisä et al.'s τ·√n.

    **Exactness.** Without clipping the chain leaves the posterior (tempered when T ≠ 1)
    exactly invariant (Yıldırım and Ermiş 2019, §2.1).

    **Centred** (``anchor=``). Sensitivity 2c (c under add/remove), c = κ‖θ′ − θ‖·max(‖θ − θ̂‖,
    ‖θ′ − θ̂‖), a function of public values; σ = τ·2c, so each iteration still costs
    μ = 1/(2τ²), and ε also covers the anchor's one release (μ = 1/(2τ_G²)). Without clipping
    the chain leaves p(θ | X)·exp(T ηᵀθ) invariant, η the anchor's noise (public covariance
    σ_G² I): see :func:`pymc_dp.mechanisms.centred.widen_for_anchor_noise` and
    ``docs/centred.md``.
    A second-order anchor (scores and Hessians) replaces the bound by ½κ‖Δθ‖·∫₀¹‖a + tΔθ‖²dt
    (a = θ − θ̂; the gradient's by ½κ‖θ − θ̂‖²), κ the Hessian's Lipschitz constant, adds
    ½(a′ᵀĤa′ − aᵀĤa) (Ĥ(θ − θ̂)) back, and ε also covers the Hessian's one release; the
    target's perturbation then has a quadratic part ½T(θ − θ̂)ᵀE(θ − θ̂) too.

    **Dense proposal** (second-order anchor, ``proposal_scale`` unset; issue 36). The increments
    are s·L z, z ~ N(0, I) from the chain's data-free generator, L = :func:`target_metric_factor`
    of the released Ĥ scaled to unit mean variance (C = LLᵀ = (−Ĥ)⁻¹, the target's own shape: only
    eigenvalues ≤ 0 raised to the Hessian noise's spectral edge; until H36j those below the edge
    were raised too): post-processing of a released value, no privacy cost.
    The proposal stays symmetric, so the penalty test is unchanged; the centred bound (and so
    the sensitivity, σ and every price) reads only ‖θ′ − θ‖ and the distances to θ̂, so ε is the
    same as with the isotropic walk and is still computed from public settings before sampling.
    Neighbouring relation: the anchor's and the step's (substitute, or add/remove).

    Sampler statistics (all privatized or public):

    - ``dp_accept``: the privatized acceptance probability min(1, exp(log α̂)).
    - ``dp_accepted``: whether the proposal was accepted.
    - ``dp_noisy_llr``: the released noisy log-likelihood ratio λ̂.
    - ``dp_proposal_scale``: the proposal scale used (mean over coordinates; s of the dense
      walk s·L z when it is used).
    - ``dp_mu_cumulative``: μ spent by this chain so far, tuning included (public: k/(2τ²)
      after k iterations); :func:`pymc_dp.privacy_spent` reads it.
    - ``dp_tuning``: whether the proposal scale was being tuned in this iteration.

    References
    ----------
    .. [1] Yıldırım, S. and Ermiş, B. (2019). Exact MCMC with differentially private moves.
       Statistics and Computing 29, Algorithm 1, Theorems 1–3.
    .. [2] Räisä, O., Koskela, A. and Honkela, A. (2021). Differentially private Hamiltonian
       Monte Carlo, §3 (DP-penalty) and Theorem 3.3.
    .. [3] Sommer, D. M., Meiser, S. and Mohammadi, E. (2019). Privacy loss classes. PoPETs,
       Lemma 12.
    """

    name = "dp_penalty_mh"
    mechanism_class = NoisyLogLikelihoodRatio
    noise_attributes = ("noise_multiplier",)
    clip_attributes = ("llr_clip",)
    #: Whether the caller gave ``proposal_scale`` (then the walk stays s·z even when centred).
    _proposal_scale_user_set: bool = True
    _dense_cache: tuple[Any, np.ndarray | None, tuple[np.ndarray, float] | None] = (None, None, None)

    @withholds_chains
    def __init__(
        self,
        vars=None,
        *,
        proposal_scale: float | np.ndarray | None = None,
        llr_clip: float | str = "auto",
        noise_multiplier: float | None = None,
        temperature: float = 1.0,
        neighbouring: str = "substitute",
        reproducible_noise: bool = False,
        anchor: Any = None,
        centre_lipschitz: float | None = None,
        tune: bool = True,
        tune_interval: int = 100,
        model=None,
        rng=None,
        initial_point: dict | None = None,
        compile_kwargs: dict | None = None,
        blocked: bool = True,
    ) -> None:
        # Validate every argument before building anything.
        self.llr_clip = check_clip_bound("llr_clip", llr_clip)
        self.noise_multiplier = (
            None if noise_multiplier is None else check_finite_positive("noise_multiplier", noise_multiplier)
        )
        self.temperature = check_finite_positive("temperature", temperature)
        self.neighbouring = check_neighbouring("neighbouring", neighbouring)
        tune, reproducible_noise, scale = self._check_walk(tune_interval, tune, reproducible_noise, proposal_scale)
        self._check_centring_arguments(anchor, centre_lipschitz, {"noise_multiplier": noise_multiplier})

        value_vars, shared, self._prior, self._row_mechanisms = self._data_access(
            vars, model, initial_point, compile_kwargs, "DPPenaltyMH", self.neighbouring, reproducible_noise
        )
        size = self._prior.n_params
        self._set_anchor(anchor, centre_lipschitz, size, [v.name for v in value_vars], shared)
        self.n_rows = self._prior.n_rows
        if proposal_scale is None and self.neighbouring == "substitute":
            scale = np.array([2.38 / math.sqrt(size * self.n_rows)])
        self._init_proposal(scale, size)
        self._proposal_scale_user_set = proposal_scale is not None
        self._dense_cache = (None, None, None)
        self._noise_user_set = noise_multiplier is not None
        self._mechanism: NoisyLogLikelihoodRatio | None = None
        self._start(value_vars, shared, tune=tune, reproducible_noise=reproducible_noise, blocked=blocked, rng=rng)

    # -- privacy interface ----------------------------------------------------------------
    def accountant_settings(self) -> dict[str, Any]:
        return self._settings_record(
            "gaussian: clipped log-likelihood ratio (penalty test)",
            noise_multiplier=self.noise_multiplier,
            llr_clip=self.llr_clip,
            temperature=self.temperature,
            neighbouring=self.neighbouring,
            reproducible_noise=self.reproducible_noise,
            releases_per_iteration=1,
            **self._centring_settings(),
        )

    def privacy_events(self, n_iterations: int) -> list[PrivacyEvent]:
        return super().privacy_events(n_iterations) + self._anchor_events()

    # -- sampling -------------------------------------------------------------------------
    def _reset_chain_state(self) -> None:
        self.forget_private_state()

    def forget_private_state(self) -> None:
        self._drop_block()
        if self._mechanism is not None:
            self._mechanism.forget()

    def _get_mechanism(self) -> NoisyLogLikelihoodRatio:
        mechanism = self._mechanism
        if self.anchor is not None:
            if mechanism is None or mechanism.noise_multiplier != self.noise_multiplier:
                self._check_ready()
                self._mechanism = self._row_mechanisms.centred_log_likelihood_ratio(
                    self.anchor, self.centre_lipschitz, self.noise_multiplier, self.neighbouring
                )
            return self._mechanism
        if mechanism is None or (mechanism.noise_multiplier, mechanism.llr_clip, mechanism.neighbouring) != (
            self.noise_multiplier,
            self.llr_clip,
            self.neighbouring,
        ):
            self._check_ready()
            self._check_clip_bounds()
            self._mechanism = self._row_mechanisms.log_likelihood_ratio(
                self.llr_clip, self.noise_multiplier, self.neighbouring
            )
        return self._mechanism

    @property
    def dense_proposal_factor(self) -> np.ndarray | None:
        """L of the dense proposal θ′ = θ + s·L z, or None where the walk is the plain s·z.

        Only a step centred at second order (an anchor with a released Hessian Ĥ) whose
        ``proposal_scale`` was not given proposes along the anchor's shape:
        :func:`target_metric_factor` of Ĥ (post-processing of a released value; no privacy cost).
        """
        anchor = self.anchor
        if anchor is None or anchor.hessian is None or self._proposal_scale_user_set:
            return None
        self._update_dense_cache(anchor)
        return self._dense_cache[1]

    def _update_dense_cache(self, anchor: Any) -> None:
        """L and its unit-mean-variance form for ``anchor``, computed once per anchor (not at every transition)."""
        if self._dense_cache[0] is anchor:
            return
        factor = target_metric_factor(anchor.hessian, anchor.hessian_std)
        unit = None
        if factor is not None:
            rms = math.sqrt(float(np.sum(factor**2)) / factor.shape[0])
            unit = (factor / rms, rms)
        self._dense_cache = (anchor, factor, unit)

    def _dense_unit_factor(self) -> tuple[np.ndarray, float] | None:
        """(L scaled to unit mean variance, the RMS sd √(tr C / P) it was divided by), or None (the plain walk)."""
        if self.dense_proposal_factor is None:  # also fills the cache for the current anchor
            return None
        return self._dense_cache[2]

    def _reset_tuned_settings(self) -> None:
        super()._reset_tuned_settings()
        dense = self._dense_unit_factor()
        if dense is not None:  # 2.38/√P on the whitened scale: s·L z then has the shape's RMS sd times 2.38/√P
            size = dense[0].shape[0]
            self.proposal_scale = np.full(size, 2.38 / math.sqrt(size) * dense[1])

    def _kernel_draws(self, theta: np.ndarray, count: int, adaptive: bool, rng: Any) -> kernels.PenaltyDraws:
        increments = np.empty((count, theta.size))
        log_uniforms = np.empty(count)
        dense = self._dense_unit_factor()
        unit = None if dense is None else dense[0]
        for k in range(count):  # the step's generator in the order of one transition
            if unit is None:
                increments[k] = rng.normal(size=theta.shape) * self.proposal_scale
            else:
                increments[k] = unit @ (rng.normal(size=theta.shape) * self.proposal_scale)
            log_uniforms[k] = np.log(rng.uniform())
        return kernels.PenaltyDraws(increments, log_uniforms)

    def _kernel_settings(self, adaptive: bool) -> float:
        return self.temperature

    def kernel_compilations(self, scan_iterations: int) -> list[tuple[Any, ...]]:
        if scan_iterations <= 1 or type(self) is not DPPenaltyMH or self.anchor is not None:
            return []
        theta = np.zeros(self._prior.n_params)
        draws = _row(self._kernel_draws(theta, 1, False, np.random.default_rng(0)), 0)  # shapes only
        return [(kernels.penalty_kernel, (("ratio", 1),), theta, draws, self.temperature, scan_iterations)]

    def transition(self, theta: np.ndarray) -> tuple[np.ndarray, TransitionInfo]:
        """Algorithm 1 of Yıldırım and Ermiş (2019): propose, release λ̂, the penalty test.

        :func:`pymc_dp.step_methods.kernels.penalty_kernel`, here or in the backend's blocks
        (after tuning, and within a tuning interval); a subclass's statistic (not a backend's
        mechanism) runs through the same kernel here, one call per iteration.
        """
        mechanism = self._get_mechanism()
        if self.shared:  # other parameters may have moved since our last step
            mechanism.forget()
        return self._kernel_transition(theta, kernels.penalty_kernel, {"ratio": mechanism})
