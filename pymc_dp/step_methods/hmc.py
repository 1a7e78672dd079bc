"""DPHMC: Hamiltonian Monte Carlo with clipped noisy gradients and the penalty test."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from pymc_dp._errors import _raised_in_package, withholds_chains
from pymc_dp._validation import (
    _as_real,
    check_bool,
    check_clip_bound,
    check_finite_positive,
    check_neighbouring,
    check_positive_int,
    check_unit_interval_open,
)
from pymc_dp.accounting.calibrate import round_towards_privacy
from pymc_dp.accounting.events import PrivacyEvent
from pymc_dp.centred_predictions import DPHMC_TARGET_ACCEPT
from pymc_dp.mechanisms import NoisyClippedGradient, NoisyLogLikelihoodRatio
from pymc_dp.step_methods import kernels
from pymc_dp.step_methods.base import DPStep, TransitionInfo, _row
from pymc_dp.step_methods.centred import Centring, prior_hessian
from pymc_dp.step_methods.kernels import NUMPY_OPS, dual_averaging_update

__all__ = [
    "DENSE_MASS_STEP_SIZE_JITTER",
    "DPHMC",
    "DualAveraging",
    "dual_averaging_update",
    "kinetic_energy",
    "leapfrog",
]


class DualAveraging:
    """Dual averaging of DPHMC's step size η on the released acceptance probabilities.

    PyMC's ``DualAverageAdaptation`` rule (tested equal to it), with its constants γ = 0.05,
    κ = 0.75, t₀ = 10 and μ = log(10 η₀), written on :func:`dual_averaging_update` so that the
    same arithmetic runs on the host and in the JAX backend's tuning blocks. It reads only
    released values (the acceptance probabilities): no privacy cost.
    """

    gamma, k, t0 = 0.05, 0.75, 10

    def __init__(self, initial_step: float, target: float) -> None:
        self.target = float(target)
        self.mu = float(np.log(10 * initial_step))
        log_step = np.log(initial_step)
        self.state = (log_step, log_step, 0.0, 1)

    def current(self, tune: bool) -> float:
        """η while tuning (the iterate), else the average η̄ (what tuning ends with)."""
        return float(np.exp(self.state[0] if tune else self.state[1]))

    def update(self, accept: float) -> None:
        """One step on the acceptance probability of the last iteration."""
        self.state = dual_averaging_update(self.state, accept, self.mu, self.target, self.gamma, self.k, self.t0)

    def settings(self) -> np.ndarray:
        """(log η, log η̄, H̄, m, μ, δ, γ, κ, t₀) as floats, for a tuning block."""
        return np.array([*self.state, self.mu, self.target, self.gamma, self.k, self.t0], dtype=float)


def leapfrog(
    theta: np.ndarray,
    momentum: np.ndarray,
    step_size: float,
    n_steps: int,
    inv_mass: np.ndarray,
    gradient: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """``n_steps`` leapfrog steps for H(θ, p) = −log π(θ) + ½ pᵀ M⁻¹ p, on the host.

    :func:`pymc_dp.step_methods.kernels.leapfrog` with NumPy: ``gradient`` (θ ↦ an estimate of
    ∇ log π) is called ``n_steps + 1`` times, at the start point and after every position
    update (fewer if the trajectory diverges to a non-finite point, where it stops). Returns
    the end point and momentum (not negated).
    """
    return kernels.leapfrog(NUMPY_OPS, theta, momentum, step_size, n_steps, inv_mass, lambda point, _: gradient(point))


def kinetic_energy(momentum: np.ndarray, inv_mass: np.ndarray) -> float:
    """½ pᵀ M⁻¹ p: M⁻¹ a vector (diagonal mass) or P × P (a centred step's dense mass)."""
    return float(kernels.kinetic_energy(momentum, inv_mass))


@dataclass(frozen=True)
class HMCInfo(TransitionInfo):
    """A DPHMC transition's info: that of every step plus the (jittered) step size used."""

    step_size: float

    def statistics(self) -> dict[str, Any]:
        return {**super().statistics(), "dp_step_size": float(self.step_size)}


def _noise_pair(grad_noise_multiplier: Any, llr_noise_multiplier: Any) -> tuple[float | None, float | None]:
    """DPHMC's two noise multipliers: both positive and finite, or both None (left to calibration)."""
    if (grad_noise_multiplier is None) != (llr_noise_multiplier is None):
        raise ValueError(
            "`grad_noise_multiplier` and `llr_noise_multiplier` must be given together (or both left to "
            f"calibration). Found grad_noise_multiplier={grad_noise_multiplier!r}, "
            f"llr_noise_multiplier={llr_noise_multiplier!r}."
        )
    if grad_noise_multiplier is None:
        return None, None
    return (
        check_finite_positive("grad_noise_multiplier", grad_noise_multiplier),
        check_finite_positive("llr_noise_multiplier", llr_noise_multiplier),
    )


#: The step-size jitter of a DPHMC with a dense mass where the caller gave none (public constant): η·U(0.5, 1.5).
#: A dense mass whitens the posterior, so every direction turns by the same angle; this spreads a trajectory of
#: about a period over [π, 3π] (mean cos ≈ 0) instead of letting all directions return together.
DENSE_MASS_STEP_SIZE_JITTER = 0.5


class DPHMC(Centring, DPStep):
    """Differentially private Hamiltonian Monte Carlo (DP-HMC).

    Each iteration draws p ~ N(0, M), runs L leapfrog steps in which every gradient of the
    log-likelihood is a fresh release of :class:`pymc_dp.mechanisms.NoisyClippedGradient`
    (per-row gradients clipped to L2 norm b_g, summed, plus N(0, σ_g² I)) and the prior
    gradient is exact, then accepts with the penalty test on the released log-likelihood
    ratio (:class:`pymc_dp.mechanisms.NoisyLogLikelihoodRatio`):

        min{1, exp(T λ̂ − (Tσ_l)²/2 + log p(θ′) − log p(θ) + ½pᵀM⁻¹p − ½p′ᵀM⁻¹p′)}.

    Parameters
    ----------
    vars : list, optional
        Continuous variables to sample (default: all free variables).
    step_size : float, optional
        Initial leapfrog step size η. Default 0.5/√N under substitute neighbours (stable for
        a posterior whose rows carry unit Fisher information), 0.05 under add/remove.
    n_leapfrog : int, default 10
        L ≥ 1 leapfrog steps per iteration (L + 1 gradient releases).
    grad_clip : float or "auto", default "auto"
        b_g > 0: L2 bound on each row's log-likelihood gradient. ``"auto"``:
        :func:`pymc_dp.sample` chooses it privately for each run as a DP quantile
        (``clip_quantile``) of the per-row score norms at a public point, charged to the run
        (:mod:`pymc_dp.mechanisms.clip_bound`); a plain ``pm.sample`` needs a number.
    llr_clip : float or "auto", default "auto"
        b_l > 0: each row's log-likelihood ratio is clipped to ±b_l‖θ′ − θ‖₂. ``"auto"``: the
        same private bound as ``grad_clip`` (the ratio per unit ‖θ′ − θ‖₂ is bounded by the
        score norm along the segment).
    grad_noise_multiplier, llr_noise_multiplier : float, optional
        τ_g and τ_l: noise standard deviation per unit of sensitivity (σ_g = 2τ_g b_g and
        σ_l = 2τ_l b_l‖θ′ − θ‖₂ under substitute neighbours). Give both or neither; when
        neither, :func:`pymc_dp.sample` calibrates them from a target ε.
    grad_budget_share : float, default 0.5
        Share of each iteration's μ spent on the L + 1 gradients when calibrating (the rest
        goes to the acceptance test).
    step_size_jitter : float, optional
        j in [0, 1): each iteration uses η·U(1 − j, 1 + j) (data-free randomisation). Default:
        0, or :data:`DENSE_MASS_STEP_SIZE_JITTER` where the step uses a dense mass (below).
    target_accept : float, default 0.65
        Target of the dual-averaging step-size adaptation, applied to the privatized
        acceptance probability during tuning.
    adapt_mass_window : int, default 100
        Length of the first mass-adaptation window; windows then double (100, 200, 400, ...).
        At the end of each window during tuning the diagonal of M⁻¹ is set to the variance of
        the chain's own draws in it (post-processing of private outputs) and the step-size
        adaptation restarts; when the number of tuning iterations is known (PyMC 6, or
        :func:`pymc_dp.sample`), a window ending fewer than this many iterations before the
        end of tuning does not update M. 0 disables mass adaptation. A step centred at second
        order instead fixes M at the anchor's dense mass (:meth:`DPHMC.dense_mass`: M⁻¹ ∝
        (−TĤ − ∇²log p(θ̂))⁻¹, eigenvalues ≤ 0 raised to the noise's edge, unit mean variance; momenta p = Fz ~
        N(0, M)) and adapts only η, from a whitened quarter period unless ``step_size`` is given.
    temperature : float, default 1.0
        T > 0: target p(θ) p(X | θ)^T.
    neighbouring : {"substitute", "add_remove"}, default "substitute"
        Neighbouring relation the sensitivities are computed for.
    reproducible_noise : bool, default False
        For testing; do not publish: derive the mechanism noise from the chain's
        seeded generator, so that a run is reproducible from ``random_seed`` — and whoever
        knows the seed can regenerate the noise and subtract it from the releases. By
        default it comes from the operating system's CSPRNG
        (:func:`pymc_dp.mechanisms.mechanism_rng`).
    anchor : CentringAnchor, optional
        Centre every release on a released anchor (:func:`pymc_dp.release_anchor`; issue 36):
        each gradient is Ĝ + Σᵢ clip_L2(gᵢ(θ) − g̃ᵢ(θ̂), κ‖θ − θ̂‖) + noise
        (:class:`pymc_dp.mechanisms.centred.CentredClippedGradient`) and the test's ratio the
        centred one (:class:`pymc_dp.mechanisms.centred.CentredLogLikelihoodRatio`): the noise
        shrinks near θ̂. Needs ``centre_lipschitz`` and both noise multipliers; ``grad_clip``
        and ``llr_clip`` are then unused. The anchor's release is charged once, with the
        iterations.
    centre_lipschitz : float, optional
        κ, public. For a first-order anchor a per-row bound on the Lipschitz constant of the
        score (logistic regression with ‖xᵢ‖ ≤ B: B²/4); for a second-order anchor
        (``release_anchor(..., hessian_clip=...)``) on that of the Hessian in operator norm
        (logistic: B³/(6√3)), and each row is then centred on its second-order expansion at θ̂
        (bound ½κ‖Δθ‖R² instead of κ‖Δθ‖R). Rows that break it are clipped.
    tune : bool, default True
        Adapt η and M during tuning.
    model, rng, initial_point, compile_kwargs, blocked
        As for PyMC step methods.

    Notes
    -----
    **Neighbouring relation.** Substitute by default (same public N, one row replaced);
    add/remove with ``neighbouring="add_remove"``.

    **Sensitivity.** The clipped gradient sum has L2 sensitivity 2b_g (b_g for add/remove);
    the clipped ratio sum 2b_l‖θ′ − θ‖₂ (b_l‖θ′ − θ‖₂). With σ = τΔ each gradient costs
    μ = 1/(2τ_g²) and each acceptance test 1/(2τ_l²) (Sommer et al. 2019, Lemma 12).

    **What ε covers.** k iterations in all (chains × (tune + draws)) release k ratios and
    k(L + 1) gradients: μ = k/(2τ_l²) + k(L + 1)/(2τ_g²) (Räisä et al. 2021, Theorem 3.3).
    The momentum, the step-size jitter, the proposal path and the prior are data-free; the
    adapted step size and mass matrix are functions of released values. τ here equals
    Räisä et al.'s τ·√n.

    **Exactness.** Without clipping of the ratios the chain leaves the posterior (tempered
    when T ≠ 1) invariant for any gradient noise (Räisä et al. 2021, Theorem 3.1); clipped
    gradients only change the proposal.

    **Centred** (``anchor=``). The gradient's sensitivity is 2κ‖θ − θ̂‖ and the ratio's
    2κ‖θ′ − θ‖·max(‖θ − θ̂‖, ‖θ′ − θ̂‖) (halved under add/remove), functions of public values;
    with σ = τΔ the per-iteration μ is unchanged, and ε also covers the anchor's one release.
    The chain leaves p(θ | X)·exp(T ηᵀθ) invariant without clipping, η the anchor's noise
    (``docs/centred.md``).
    A second-order anchor (scores and Hessians) replaces the bound by ½κ‖Δθ‖·∫₀¹‖a + tΔθ‖²dt
    (a = θ − θ̂; the gradient's by ½κ‖θ − θ̂‖²), κ the Hessian's Lipschitz constant, adds
    ½(a′ᵀĤa′ − aᵀĤa) (Ĥ(θ − θ̂)) back, and ε also covers the Hessian's one release; the
    target's perturbation then has a quadratic part ½T(θ − θ̂)ᵀE(θ − θ̂) too.

    Sampler statistics (all privatized or public):

    - ``dp_accept``: privatized acceptance probability min(1, exp(log α̂)).
    - ``dp_accepted``: whether the proposal was accepted.
    - ``dp_noisy_llr``: the released noisy log-likelihood ratio λ̂.
    - ``dp_step_size``: the (jittered) leapfrog step size used.
    - ``dp_mu_cumulative``: μ spent by this chain so far, tuning included.
    - ``dp_tuning``: whether η and M were being adapted in this iteration.

    No energies, log-densities or gradients are recorded: they are exact functions of the
    data.

    References
    ----------
    .. [1] Räisä, O., Koskela, A. and Honkela, A. (2021). Differentially private Hamiltonian
       Monte Carlo. eq. (1), Theorems 3.1 and 3.3.
    .. [2] Yıldırım, S. and Ermiş, B. (2019). Exact MCMC with differentially private moves.
       Statistics and Computing 29, Algorithm 1.
    .. [3] Hoffman, M. D. and Gelman, A. (2014). The No-U-Turn sampler. JMLR 15, §3.2
       (dual averaging).
    """

    name = "dp_hmc"
    uses_row_gradients = True
    noise_attributes = ("grad_noise_multiplier", "llr_noise_multiplier")
    clip_attributes = ("grad_clip", "llr_clip")
    stats_dtypes_shapes: ClassVar[dict[str, tuple[type, list]]] = {
        **DPStep.common_stats,
        "dp_step_size": (np.float64, []),
    }

    @withholds_chains
    def __init__(
        self,
        vars=None,
        *,
        step_size: float | None = None,
        n_leapfrog: int = 10,
        grad_clip: float | str = "auto",
        llr_clip: float | str = "auto",
        grad_noise_multiplier: float | None = None,
        llr_noise_multiplier: float | None = None,
        grad_budget_share: float = 0.5,
        step_size_jitter: float | None = None,
        target_accept: float = DPHMC_TARGET_ACCEPT,
        adapt_mass_window: int = 100,
        temperature: float = 1.0,
        neighbouring: str = "substitute",
        reproducible_noise: bool = False,
        anchor: Any = None,
        centre_lipschitz: float | None = None,
        tune: bool = True,
        model=None,
        rng=None,
        initial_point: dict | None = None,
        compile_kwargs: dict | None = None,
        blocked: bool = True,
    ) -> None:
        # Validate every argument before building anything.
        self.n_leapfrog = check_positive_int("n_leapfrog", n_leapfrog)
        self.grad_clip = check_clip_bound("grad_clip", grad_clip)
        self.llr_clip = check_clip_bound("llr_clip", llr_clip)
        self.grad_noise_multiplier, self.llr_noise_multiplier = _noise_pair(grad_noise_multiplier, llr_noise_multiplier)
        share = check_finite_positive("grad_budget_share", grad_budget_share)
        if share >= 1.0:
            raise ValueError(f"`grad_budget_share` must be in the open interval (0, 1). Found {grad_budget_share!r}.")
        self.grad_budget_share = share
        jitter_user_set = step_size_jitter is not None
        if step_size_jitter is None:  # the default: none, or DENSE_MASS_STEP_SIZE_JITTER with a dense mass
            step_size_jitter = 0.0
        jitter = _as_real("step_size_jitter", step_size_jitter)  # a string: TypeError naming it
        if not 0.0 <= jitter < 1.0:
            raise ValueError(f"`step_size_jitter` must be in [0, 1). Found {step_size_jitter!r}.")
        self.step_size_jitter = jitter
        self.target_accept = check_unit_interval_open("target_accept", target_accept)
        if (
            isinstance(adapt_mass_window, bool)
            or not isinstance(adapt_mass_window, int | np.integer)
            or adapt_mass_window < 0
        ):
            raise ValueError(f"`adapt_mass_window` must be a non-negative integer. Found {adapt_mass_window!r}.")
        self.adapt_mass_window = int(adapt_mass_window)
        self.temperature = check_finite_positive("temperature", temperature)
        self.neighbouring = check_neighbouring("neighbouring", neighbouring)
        tune, reproducible_noise = check_bool("tune", tune), check_bool("reproducible_noise", reproducible_noise)
        if step_size is not None:
            step_size = check_finite_positive("step_size", step_size)
        self._check_centring_arguments(
            anchor,
            centre_lipschitz,
            {"grad_noise_multiplier": grad_noise_multiplier, "llr_noise_multiplier": llr_noise_multiplier},
        )

        value_vars, shared, self._prior, self._row_mechanisms = self._data_access(
            vars, model, initial_point, compile_kwargs, "DPHMC", self.neighbouring, reproducible_noise
        )
        self._build_gradients([v.name for v in value_vars])
        self.n_rows = self._prior.n_rows
        size = self._prior.n_params
        self._set_anchor(anchor, centre_lipschitz, size, [v.name for v in value_vars], shared)
        step_size_user_set = step_size is not None
        if step_size is None:
            step_size = 0.5 / math.sqrt(self.n_rows) if self.neighbouring == "substitute" else 0.05
        self._step_size_initial = float(step_size)
        self._step_size_user_set = step_size_user_set
        self._jitter_user_set = jitter_user_set
        self._dense_mass_cache: tuple[Any, Any] = (None, None)
        self._size = size
        self._noise_user_set = grad_noise_multiplier is not None
        self._llr_mechanism: NoisyLogLikelihoodRatio | None = None
        self._grad_mechanism: NoisyClippedGradient | None = None
        self._start(value_vars, shared, tune=tune, reproducible_noise=reproducible_noise, blocked=blocked, rng=rng)

    def _build_gradients(self, names: list[str]) -> None:
        """Compile the prior and per-row gradients now, so that a model without gradients is refused here.

        An error raised by pymc-dp's own checks passes unchanged (its message names the
        parameter); one raised by PyTensor while building a gradient (``NotImplementedError``
        for an Op without one, ``NullTypeGradError``, ``DisconnectedInputError``, ...) becomes
        a ``ValueError`` naming ``vars``. Which is which is decided by where it was raised,
        never by its text.
        """
        try:
            self._prior.prior_logp_and_grad(self._prior.initial_theta)
            self._row_mechanisms.check_differentiable()
        except (NotImplementedError, TypeError, ValueError) as err:
            if _raised_in_package(err)[0]:
                raise
            raise ValueError(
                f"The model must be differentiable in `vars` ({names}) for DPHMC: "
                f"building the gradient failed with {type(err).__name__}."
            ) from None

    # -- privacy interface ----------------------------------------------------------------
    @property
    def is_calibrated(self) -> bool:
        return self.grad_noise_multiplier is not None and self.llr_noise_multiplier is not None

    def _check_ready(self) -> None:
        if not self.is_calibrated:
            raise ValueError(
                "`grad_noise_multiplier` and `llr_noise_multiplier` must be set before sampling. Found None. Either "
                "sample with pymc_dp.sample(step=DPHMC(...), epsilon=..., delta=...), which calibrates them, or, for a "
                "plain pm.sample, take mu = pymc_dp.accounting.gaussian_mu_for_target(epsilon, delta) / (chains * "
                "(tune + draws)), pass llr_noise_multiplier=(2 * mu_llr) ** -0.5 and grad_noise_multiplier="
                "((n_leapfrog + 1) / (2 * mu_grad)) ** 0.5 with mu_llr + mu_grad = mu to DPHMC, and publish the result "
                "with "
                "pymc_dp.publish(idata, delta=...)."
            )

    def gaussian_mu_per_iteration(self) -> float:
        self._check_ready()
        return 0.5 / self.llr_noise_multiplier**2 + (self.n_leapfrog + 1) * 0.5 / self.grad_noise_multiplier**2

    def privacy_events(self, n_iterations: int) -> list[PrivacyEvent]:
        self._check_ready()
        label = f"DPHMC[{','.join(self.var_names)}]"
        count = int(n_iterations)
        return (
            NoisyLogLikelihoodRatio.events(self.llr_noise_multiplier, count, f"{label} log-likelihood ratio")
            + NoisyClippedGradient.events(
                self.grad_noise_multiplier, count * (self.n_leapfrog + 1), f"{label} gradient"
            )
            + self._anchor_events()
        )

    def set_noise_for_mu(self, mu_per_iteration: float) -> None:
        mu = check_finite_positive("mu_per_iteration", mu_per_iteration)
        mu_grad, mu_llr = self.grad_budget_share * mu, (1.0 - self.grad_budget_share) * mu
        grad_scale = math.sqrt((self.n_leapfrog + 1) * 0.5 / mu_grad)
        llr_scale = math.sqrt(0.5 / mu_llr)

        def cost(factor: float) -> float:  # μ of one iteration with both scales multiplied by `factor`
            return 0.5 / (llr_scale * factor) ** 2 + (self.n_leapfrog + 1) * 0.5 / (grad_scale * factor) ** 2

        factor = round_towards_privacy(1.0, lambda f: cost(f) <= mu, math.inf)
        self.grad_noise_multiplier, self.llr_noise_multiplier = grad_scale * factor, llr_scale * factor
        self._llr_mechanism = self._grad_mechanism = None

    def accountant_settings(self) -> dict[str, Any]:
        return self._settings_record(
            "gaussian: clipped gradients (L+1 per iteration) and clipped log-likelihood ratio",
            grad_noise_multiplier=self.grad_noise_multiplier,
            llr_noise_multiplier=self.llr_noise_multiplier,
            grad_clip=self.grad_clip,
            llr_clip=self.llr_clip,
            n_leapfrog=self.n_leapfrog,
            temperature=self.temperature,
            neighbouring=self.neighbouring,
            reproducible_noise=self.reproducible_noise,
            releases_per_iteration={"llr": 1, "gradient": self.n_leapfrog + 1},
            **self._centring_settings(),
            **self._mass_settings(),
        )

    def _mass_settings(self) -> dict[str, Any]:
        """The record's ``mass`` entry where a dense mass is used (public: post-processing of the anchor)."""
        if self.dense_mass() is None:
            return {}
        return {
            "mass": "dense: (−TĤ − ∇²log p(θ̂))⁻¹ of the anchor",
            "step_size_jitter": self.effective_step_size_jitter,
        }

    # -- per-chain state ------------------------------------------------------------------
    def _reset_chain_state(self) -> None:
        self.forget_private_state()

    def forget_private_state(self) -> None:
        self._drop_block()
        if self._llr_mechanism is not None:
            self._llr_mechanism.forget()
        if self._grad_mechanism is not None and hasattr(self._grad_mechanism, "forget"):
            self._grad_mechanism.forget()

    def _get_mechanism(self) -> tuple[NoisyLogLikelihoodRatio, NoisyClippedGradient]:
        llr, grad = self._llr_mechanism, self._grad_mechanism
        if self.anchor is not None:
            noises = (self.llr_noise_multiplier, self.grad_noise_multiplier)
            if llr is None or grad is None or (llr.noise_multiplier, grad.noise_multiplier) != noises:
                self._check_ready()
                self._llr_mechanism = self._row_mechanisms.centred_log_likelihood_ratio(
                    self.anchor, self.centre_lipschitz, self.llr_noise_multiplier, self.neighbouring
                )
                self._grad_mechanism = self._row_mechanisms.centred_gradient(
                    self.anchor, self.centre_lipschitz, self.grad_noise_multiplier, self.neighbouring
                )
            return self._llr_mechanism, self._grad_mechanism
        current = (
            self.llr_noise_multiplier,
            self.llr_clip,
            self.grad_noise_multiplier,
            self.grad_clip,
            self.neighbouring,
        )
        if (
            llr is None
            or grad is None
            or (llr.noise_multiplier, llr.llr_clip, grad.noise_multiplier, grad.grad_clip, llr.neighbouring) != current
        ):
            self._check_ready()
            self._check_clip_bounds()
            self._llr_mechanism = self._row_mechanisms.log_likelihood_ratio(
                self.llr_clip, self.llr_noise_multiplier, self.neighbouring
            )
            self._grad_mechanism = self._row_mechanisms.clipped_gradient(
                self.grad_clip, self.grad_noise_multiplier, self.neighbouring
            )
        return self._llr_mechanism, self._grad_mechanism

    # -- tuning: dual averaging of η on the released acceptance, windowed diagonal M -------
    def dense_mass(self) -> tuple[np.ndarray, np.ndarray, float] | None:
        """(M⁻¹, F, r) of the dense mass of a step centred at second order, or None where M stays diagonal.

        M⁻¹ = C/r², C = (−TĤ − ∇²log p(θ̂))⁻¹ from the anchor's released Hessian sum Ĥ and the
        data-free prior's curvature at θ̂: the centred target's own covariance (its quadratic part at
        θ̂), so every positive eigenvalue is kept however noisy, and only eigenvalues ≤ 0 are raised to
        the noise's spectral edge Tσ_H√(2P) (:func:`pymc_dp.step_methods.penalty.target_metric_factor`;
        until H36j eigenvalues below the edge were raised too, which left the mass narrower than the
        target along its widest direction), and r² = tr C / P (the sds' RMS, squared), so that M⁻¹
        has unit mean variance like the identity it replaces and η keeps its units (a whitened
        step is η/r). F = (L⁻¹)ᵀ with LLᵀ = M⁻¹, so that p = Fz (z ~ N(0, I)) has covariance M.
        None without a second-order anchor, or where every eigenvalue is below that edge (the
        release says nothing about the shape: the diagonal mass is adapted as before).

        Notes
        -----
        Post-processing of the anchor's released Ĥ (priced once with the run, under the step's
        neighbouring relation) and of the prior: no privacy cost. The centred releases' bounds
        read only θ, θ′ and θ̂, whatever the momentum, so no noise multiplier and no ε changes.
        """
        anchor = self.anchor
        if anchor is None or anchor.hessian is None:
            return None
        if self._dense_mass_cache[0] is not anchor:
            from pymc_dp.step_methods.penalty import target_metric_factor

            curvature = self.temperature * np.asarray(anchor.hessian, dtype=float)
            curvature = curvature + prior_hessian(self._prior, np.asarray(anchor.point, dtype=float))
            factor = target_metric_factor(curvature, self.temperature * anchor.hessian_std)
            dense = None
            if factor is not None:  # scaled to unit mean variance, as the identity it replaces: η keeps its units
                rms = math.sqrt(float(np.sum(factor**2)) / factor.shape[0])
                unit = factor / rms
                dense = (unit @ unit.T, np.linalg.inv(unit).T, rms)
            self._dense_mass_cache = (anchor, dense)
        return self._dense_mass_cache[1]

    @property
    def effective_step_size_jitter(self) -> float:
        """The jitter the transitions use: the caller's, else :data:`DENSE_MASS_STEP_SIZE_JITTER` with a dense mass.

        With a dense mass that whitens the posterior every direction turns by the same angle,
        so a fixed step size can land the trajectories near a full period (no move) in every
        direction at once; a data-free random step spreads the angle (public setting).
        """
        if self._jitter_user_set or self.dense_mass() is None:
            return self.step_size_jitter
        return DENSE_MASS_STEP_SIZE_JITTER

    def _reset_tuned_settings(self) -> None:
        """Return η, M and the adaptation windows to their initial state.

        With a dense mass (:meth:`dense_mass`) M is fixed at it (no window adapts it) and η starts
        at r·π/(2L) (a whitened quarter period) unless ``step_size`` was given.
        """
        dense = self.dense_mass()
        self.inv_mass = np.ones(self._size) if dense is None else dense[0]
        initial = self._step_size_initial
        if dense is not None and not self._step_size_user_set:
            initial = dense[2] * 0.5 * math.pi / self.n_leapfrog
        self.step_size = initial
        self._adaptation = DualAveraging(initial, self.target_accept)
        self._window: list[np.ndarray] = []
        self._window_length = self.adapt_mass_window if dense is None else 0

    def _tuning_before(self, tuning: bool) -> None:
        if tuning:  # η of this iteration: the dual-averaging iterate (fixed at its average by stop_tuning)
            self.step_size = float(self._adaptation.current(True))

    def _tuning_after(self, tuning: bool, theta: np.ndarray, info: TransitionInfo) -> None:
        if not tuning:
            return
        self._adaptation.update(info.accept)
        if self._window_length:  # 0: no mass adaptation (adapt_mass_window=0, or a dense mass)
            self._window.append(theta.copy())
            if len(self._window) == self._window_length:
                # Windows double (Stan's schedule); no mass update in the last window of a run whose
                # tuning length is known, so the step size ends adapted to the final mass matrix.
                left = None if self.planned_tune is None else self.planned_tune - self._tuning_iterations
                if left is None or left >= self.adapt_mass_window:
                    self._update_mass()
                self._window = []
                self._window_length *= 2

    def _update_mass(self) -> None:
        draws = np.asarray(self._window)
        n = draws.shape[0]
        variance = draws.var(axis=0, ddof=1)
        moved = variance > 0
        if not moved.any():
            return
        # Regularise towards a small multiple of the typical variance (Stan's windowed rule).
        floor = 1e-3 * float(np.median(variance[moved]))
        new_inv_mass = self.inv_mass.copy()
        new_inv_mass[moved] = (n / (n + 5.0)) * variance[moved] + (5.0 / (n + 5.0)) * floor
        # Keep the trajectory length in units of posterior scale: η scales with √(M⁻¹) change.
        scale = math.sqrt(float(np.mean(self.inv_mass / new_inv_mass)))
        self.inv_mass = new_inv_mass
        current = float(self._adaptation.current(True)) * scale
        self._adaptation = DualAveraging(current, self.target_accept)

    def _tuned_settings_fixed_for(self) -> int | float:
        """The rest of the mass-matrix window (M changes only at its end; none: never).

        The step size adapts on every decision: a tuning block runs the dual averaging on the
        device from the host's state, and the host replays it from the returned acceptance
        probabilities.
        """
        return self._window_length - len(self._window) if self._window_length else math.inf

    def stop_tuning(self) -> None:
        """Fix η at the dual-averaging average when tuning ends (PyMC calls this)."""
        if self.tune and self._tune_initial:
            self.step_size = float(self._adaptation.current(False))
        super().stop_tuning()

    # -- sampling -------------------------------------------------------------------------
    def _kernel_draws(self, theta: np.ndarray, count: int, adaptive: bool, rng: Any) -> kernels.HMCDraws:
        # η per iteration, jitter included; while tuning in a block, the jitter factor (η from the dual averaging).
        step_sizes = np.full(count, 1.0 if adaptive else self.step_size)
        momenta = np.empty((count, theta.size))
        log_uniforms = np.empty(count)
        dense = self.dense_mass()
        jitter = self.effective_step_size_jitter
        for k in range(count):  # the step's generator in the order of one transition
            if jitter:
                step_sizes[k] *= 1.0 + jitter * (2.0 * rng.uniform() - 1.0)
            if dense is None:
                momenta[k] = rng.normal(size=theta.shape) / np.sqrt(self.inv_mass)
            else:  # p = Fz ~ N(0, M), M the dense mass
                momenta[k] = dense[1] @ rng.normal(size=theta.shape)
            log_uniforms[k] = np.log(rng.uniform())
        return kernels.HMCDraws(momenta, step_sizes, log_uniforms)

    def _kernel_state(self, theta: np.ndarray, adaptive: bool) -> Any:
        return (theta, tuple(float(v) for v in self._adaptation.state)) if adaptive else theta

    def _kernel_settings(self, adaptive: bool) -> kernels.HMCSettings:
        adaptation = tuple(self._adaptation.settings()[4:]) if adaptive else None
        return kernels.HMCSettings(self.inv_mass, self.temperature, self.n_leapfrog, adaptation)

    def _block_kernel(self, kernel: Callable[..., Any], adaptive: bool) -> Callable[..., Any]:
        return kernels.adaptive_hmc_kernel if adaptive else kernel

    def _transition_info(self, info: Any) -> HMCInfo:
        return HMCInfo(float(info.noisy_llr), float(info.accept), bool(info.accepted), float(info.step_size))

    def _releases(self) -> dict[str, Any]:
        llr_mechanism, grad_mechanism = self._get_mechanism()
        return {"gradient": grad_mechanism, "gradient_releases": self.n_leapfrog + 1, "ratio": llr_mechanism}

    def kernel_compilations(self, scan_iterations: int) -> list[tuple[Any, ...]]:
        if self.anchor is not None:  # the centred releases run on the host (no device block for them yet)
            return []
        releases = (("gradient", self.n_leapfrog + 1), ("ratio", 1))
        theta = np.zeros(self._size)
        rng = np.random.default_rng(0)  # examples of the draws' shapes: nothing here is used
        calls = [(kernels.hmc_kernel, False, 1)]
        if scan_iterations > 1:
            calls.append((kernels.hmc_kernel, False, scan_iterations))
            if self._tune_initial:
                calls.append((kernels.adaptive_hmc_kernel, True, scan_iterations))
        return [
            (
                kernel,
                releases,
                self._kernel_state(theta, adaptive),
                _row(self._kernel_draws(theta, 1, adaptive, rng), 0),
                self._kernel_settings(adaptive),
                iterations,
            )
            for kernel, adaptive, iterations in calls
        ]

    def transition(self, theta: np.ndarray) -> tuple[np.ndarray, HMCInfo]:
        """Momentum, L leapfrog steps on released gradients, the penalty test on a released ratio.

        :func:`pymc_dp.step_methods.kernels.hmc_kernel`, here or on the backend (a block of
        iterations, or one device call per iteration while tuning).
        """
        releases = self._releases()
        if self.shared:  # other parameters may have moved since our last step
            releases["ratio"].forget()
        return self._kernel_transition(theta, kernels.hmc_kernel, releases, one_call=True)
