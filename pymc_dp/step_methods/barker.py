"""DPBarkerMH: the DP Barker test, on a fixed-size minibatch or on the full data."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from pymc_dp._errors import withholds_chains
from pymc_dp._validation import check_bool, check_finite_positive, check_neighbouring, check_positive_int
from pymc_dp.accounting.barker import barker_orders
from pymc_dp.accounting.calibrate import round_towards_privacy
from pymc_dp.accounting.events import PrivacyEvent, RdpReleases
from pymc_dp.mechanisms import NoisyBarkerStatistic
from pymc_dp.mechanisms.barker import subsampled_barker_releases
from pymc_dp.step_methods import kernels
from pymc_dp.step_methods.barker_correction import LogisticCorrection, _check_correction_variance, logistic_correction
from pymc_dp.step_methods.base import (
    DPStep,
    RandomWalkTuning,
    TransitionInfo,
    accept_reject,
)

__all__ = ["DPBarkerMH", "barker_accepts", "recorded_barker_releases", "subsampled_barker_releases"]

#: The correction variance C Theorem 2 of Heikkilä et al. (2019) is proved for.
SUBSAMPLED_CORRECTION_VARIANCE = 2.0


def barker_accepts(
    released: float, log_prior_ratio: float, correction: LogisticCorrection, rng: np.random.Generator
) -> tuple[bool, float]:
    """The Barker decision from a released statistic: accept iff z + log prior ratio + V_cor > 0.

    With z ~ N(Δ_lik, C) this accepts with probability ≈ σ(Δ), Δ = Δ_lik + log prior ratio
    (Heikkilä et al. 2019, eq. 9; eq. 18 for the subsampled z). The prior ratio reads no data.

    Parameters
    ----------
    released : float
        z, the released noisy (tempered) log-likelihood ratio.
    log_prior_ratio : float
        log p(θ′) − log p(θ) with transform Jacobians (log proposal ratio 0: symmetric walk).
    correction : LogisticCorrection
        V_cor for the C the statistic was released with.
    rng : numpy.random.Generator or SecureNoise
        Source of V_cor.

    Returns
    -------
    (bool, float)
        The decision, and P(accept | z) = P(V_cor > −(z + log prior ratio)), a post-processed
        acceptance probability (lower variance than the decision for diagnostics).
    """
    return accept_reject(released + log_prior_ratio, rng, correction)


class DPBarkerMH(RandomWalkTuning, DPStep):
    """Differentially private Barker MCMC (Heikkilä et al. 2019), subsampled or on full data.

    Each iteration proposes θ′ = θ + s·z (z ~ N(0, I), unconstrained scale) and accepts when
    z_Δ + log p(θ′)/p(θ) + V_cor > 0, where z_Δ is released by
    :class:`pymc_dp.mechanisms.NoisyBarkerStatistic`:

    - **subsampled** (default): a fresh batch of ``batch_size`` rows drawn without
      replacement; each row's ratio clipped to ±√b/N₀; z_Δ = N₀·(batch mean) + N(0, C − s²),
      s² = N₀²·(batch variance)/b (eq. 18, 23). The cost per iteration is O(b) when the row
      data are ``pm.Data`` containers, whatever N.
    - **full data** (``full_data=True``): z_Δ = t·Σᵢ clip(rᵢ, ±B) + N(0, C) (eq. 9).

    The chain targets the tempered posterior p(θ) p(X | θ)^{N₀/N} (the prior is not
    tempered). The Barker test with the correction is approximate: with a batch the CLT
    makes the batch statistic approximately normal, and N(0, C) + V_cor differs from the
    logistic by at most :attr:`correction_error` in CDF (5.9e-4 at C = 2).

    Parameters
    ----------
    vars : list, optional
        Continuous variables to sample (default: all free variables).
    batch_size : int
        b, rows per iteration for the subsampled test, with 10 < b < N (Theorem 2 needs
        α < b/5 for an order α ≥ 2). Must be omitted with ``full_data=True``.
    tempered_size : float, optional
        N₀ ∈ (0, N]: the likelihood is tempered to count as N₀ rows, i.e. raised to N₀/N
        (eq. 23). None: no tempering (N₀ = N). Mutually exclusive with ``temperature``.
    temperature : float, optional
        The likelihood power T ∈ (0, 1], N₀ = T·N. Under add/remove neighbours (full data
        only) tempering must be given this way, since N is private there.
    correction_variance : float, default 2.0
        C ∈ (0, π²/3), the Gaussian part of the logistic noise. The subsampled test needs
        C = 2 (Theorem 2 is proved for it); the full-data test accepts any C, fitting V_cor
        on first use when no table ships for it.
    proposal_scale : float or array, optional
        Initial random-walk scale; default 2.38/√(P·N₀) (unit Fisher information per row of
        the tempered likelihood; 1.0 under add/remove), for the subsampled test at most
        c/(3√P) so that few ratios reach the clip c. Tuned during tuning (PyMC's rule only
        shrinks it while the Barker acceptance stays below 0.5).
    full_data : bool, default False
        Use the full-data test of Theorem 1 instead of a batch.
    llr_clip : float, optional
        The bound on each row's log-likelihood ratio. Subsampled: c ≤ √b/N₀, default √b/N₀
        (smaller is allowed: the theorem only needs ``|rᵢ| ≤ √b/N₀``). Full data: B, the knob
        that sets the privacy (C is bounded by π²/3); leave unset to have
        :func:`pymc_dp.sample` calibrate it from a target ε.
    neighbouring : {"substitute", "add_remove"}, default "substitute"
        The subsampled test supports substitute only (Theorem 2 and eq. 22 assume it).
    reproducible_noise : bool, default False
        For testing; do not publish: derive the mechanism noise, the secret batch and V_cor
        from the chain's seeded generator, so that a run is reproducible from
        ``random_seed`` — and whoever knows the seed can regenerate the batch and the noise
        and subtract it from the releases. By default they come from the operating system's
        CSPRNG (:func:`pymc_dp.mechanisms.mechanism_rng`).
    tune : bool, default True
        Tune the proposal scale during tuning (PyMC's Metropolis rule on the privatized
        accept decisions; free).
    tune_interval : int, default 100
        Iterations between tuning updates.
    model, rng, initial_point, compile_kwargs, blocked
        As for PyMC step methods.

    Notes
    -----
    **Neighbouring relation.** Substitute (bounded DP): data sets of the same public size N
    differing in one row. The full-data test also supports add/remove.

    **Sensitivity.** Subsampled: each clipped ratio is bounded by √b/N₀, so one substituted
    row moves N₀·r̄ by at most 2/√b and the batch variance stays ≤ 1 < C; Theorem 2 bounds
    the RDP of one release on the batch and eq. (22) (Wang, Balle and Kasiviswanathan 2019,
    Thm 9: sampling without replacement, q = b/N) amplifies it. Full data: the clipped sum
    moves by at most 2tB (tB for add/remove) with noise variance C, a Gaussian mechanism
    with μ = 2t²B²/C per iteration (RDP 2αt²B²/C, Theorem 1), accounted exactly.

    **What ε covers.** Every iteration of every chain, tuning included, composed in RDP over
    the integer orders 2 … ⌈b/5⌉ − 1 (capped at 1024) and converted with the improved
    conversion (Balle et al. 2020, Thm 21); full-data runs compose exactly (Sommer et al.
    2019, Lemma 12). The released values are z_Δ per iteration and what is computed from
    it (decisions, draws, tuned scale). The batch, the clipped ratios, their mean and
    variance, and the fraction clipped are never released.

    **Not exact.** The stationary distribution is the tempered posterior only up to the CLT
    and correction errors (§3.3); clipping biases it further when it binds.

    Sampler statistics (all privatized or public):

    - ``dp_accept``: P(accept | z_Δ), the Barker acceptance probability given the released statistic.
    - ``dp_accepted``: whether the proposal was accepted.
    - ``dp_noisy_llr``: the released statistic z_Δ.
    - ``dp_proposal_scale``: the proposal scale used (mean over coordinates).
    - ``dp_mu_cumulative``: full data: μ spent by this chain so far, tuning included
      (public: k·(2tB)²/(2C) after k iterations; tB under add/remove). Subsampled: NaN, the
      test is not a Gaussian mechanism (it is priced in RDP from the three statistics below).
    - ``dp_tuning``: whether the proposal scale was being tuned in this iteration.
    - ``dp_iterations``: iterations of this chain so far, tuning included (public).
    - ``dp_n_rows``: N, the number of rows, for the subsampled test (public under its
      substitute neighbours); 0 for the full-data test, whose cost does not depend on N (and
      which never records it: N is private under add/remove).
    - ``dp_batch_size``: b for the subsampled test; 0 for the full-data test.

    The subsampled test's cost depends on N, b and the number of iterations only, so
    :func:`pymc_dp.privacy_spent` prices a plain ``pm.sample`` result from ``dp_n_rows``,
    ``dp_batch_size`` and ``dp_iterations``; a full-data result like every Gaussian step's,
    from ``dp_mu_cumulative``. The tempering N₀ is not needed: it only sets the clip √b/N₀
    that Theorem 2 assumes, which the step enforces.

    References
    ----------
    .. [1] Heikkilä, M., Jälkö, J., Dikmen, O. and Honkela, A. (2019). Differentially private
       Markov chain Monte Carlo. NeurIPS, eq. (9), (18), (23), Theorems 1–2, Corollary 2.
    .. [2] Wang, Y.-X., Balle, B. and Kasiviswanathan, S. (2019). Subsampled Rényi
       differential privacy and analytical moments accountant. AISTATS, Theorem 9.
    .. [3] Seita, D., Pan, X., Chen, H. and Canny, J. (2017). An efficient minibatch
       acceptance test for Metropolis-Hastings. UAI.
    """

    name = "dp_barker_mh"
    noise_attributes = ("llr_clip",)
    stats_dtypes_shapes: ClassVar[dict[str, tuple[type, list]]] = {
        **RandomWalkTuning.stats_dtypes_shapes,
        "dp_iterations": (np.int64, []),
        "dp_n_rows": (np.int64, []),
        "dp_batch_size": (np.int64, []),
    }

    @withholds_chains
    def __init__(
        self,
        vars=None,
        *,
        batch_size: int | None = None,
        tempered_size: float | None = None,
        temperature: float | None = None,
        correction_variance: float = 2.0,
        proposal_scale: float | np.ndarray | None = None,
        full_data: bool = False,
        llr_clip: float | None = None,
        neighbouring: str = "substitute",
        reproducible_noise: bool = False,
        tune: bool = True,
        tune_interval: int = 100,
        model=None,
        rng=None,
        initial_point: dict | None = None,
        compile_kwargs: dict | None = None,
        blocked: bool = True,
    ) -> None:
        # Validate everything that does not need the model first.
        self.full_data = check_bool("full_data", full_data)
        self.correction_variance = _check_correction_variance(correction_variance)
        self.neighbouring = check_neighbouring("neighbouring", neighbouring)
        tune, reproducible_noise, scale = self._check_walk(tune_interval, tune, reproducible_noise, proposal_scale)
        if llr_clip is not None:
            llr_clip = check_finite_positive("llr_clip", llr_clip)
        batch_size, tempered_size, temperature = self._check_test(batch_size, tempered_size, temperature)

        value_vars, shared, self._prior, self._row_mechanisms = self._data_access(
            vars, model, initial_point, compile_kwargs, "DPBarkerMH", self.neighbouring, reproducible_noise
        )
        self.n_rows = n = self._prior.n_rows
        size = self._prior.n_params
        self._fit_to_rows(n, batch_size, tempered_size, temperature, llr_clip)
        self._noise_user_set = self.full_data and self.llr_clip is not None
        self.correction = logistic_correction(self.correction_variance)

        if proposal_scale is None and self.neighbouring == "substitute":
            scale = np.array([self._default_proposal_scale(size)])
        self._init_proposal(scale, size)
        self._mechanism: NoisyBarkerStatistic | None = None
        self._start(value_vars, shared, tune=tune, reproducible_noise=reproducible_noise, blocked=blocked, rng=rng)

    def _check_test(self, batch_size: Any, tempered_size: Any, temperature: Any) -> tuple[Any, Any, Any]:
        """Validate the test's settings that do not need the model (mode, batch, tempering, relation, C)."""
        if tempered_size is not None and temperature is not None:
            raise ValueError(
                "Give `tempered_size` (N₀) or `temperature` (N₀/N), not both. "
                f"Found tempered_size={tempered_size!r}, temperature={temperature!r}."
            )
        if tempered_size is not None:
            tempered_size = check_finite_positive("tempered_size", tempered_size)
        if temperature is not None:
            temperature = check_finite_positive("temperature", temperature)
            if temperature > 1.0:
                raise ValueError(f"`temperature` must lie in (0, 1] (N₀ ≤ N). Found {temperature!r}.")
        if self.full_data:
            if batch_size is not None:
                raise ValueError(f"`batch_size` must be None with full_data=True. Found {batch_size!r}.")
            if self.neighbouring == "add_remove" and tempered_size is not None:
                raise ValueError(
                    "`tempered_size` must be None under add/remove neighbours: N₀/N would reveal the private N. "
                    f"Give `temperature` instead. Found tempered_size={tempered_size!r}."
                )
        else:
            if batch_size is None:
                raise ValueError("`batch_size` must be given for the subsampled test (or set full_data=True).")
            batch_size = check_positive_int("batch_size", batch_size)
            barker_orders(batch_size)  # raises unless b > 10
            if self.neighbouring != "substitute":
                raise ValueError(
                    "`neighbouring` must be 'substitute' for the subsampled test (Theorem 2 and the amplification "
                    "bound of eq. 22 assume it); add/remove is available with full_data=True. "
                    f"Found {self.neighbouring!r}."
                )
            if self.correction_variance != SUBSAMPLED_CORRECTION_VARIANCE:
                raise ValueError(
                    "`correction_variance` must be 2.0 for the subsampled test: its privacy bound (Theorem 2) is "
                    f"proved for C = 2. Other C are available with full_data=True. Found {self.correction_variance!r}."
                )
        return batch_size, tempered_size, temperature

    def _fit_to_rows(self, n: int, batch_size: Any, tempered_size: Any, temperature: Any, llr_clip: Any) -> None:
        """Check the batch and the tempering against the N rows; set b, T, N₀ and the clip."""
        if not self.full_data and batch_size >= n:
            raise ValueError(f"`batch_size` must be smaller than the number of rows ({n}). Found {batch_size}.")
        if not self.full_data:  # batches: the subset path is checked now, before any run is charged
            self._row_mechanisms.check_subsets()
        if tempered_size is not None and tempered_size > n:
            raise ValueError(
                f"`tempered_size` must lie in (0, N] with N = {n} rows (it tempers, never sharpens). "
                f"Found {tempered_size!r}."
            )
        self.batch_size = batch_size
        self.temperature = (tempered_size / n if tempered_size is not None else temperature) or 1.0
        self.tempered_size = tempered_size if tempered_size is not None else self.temperature * n
        if not self.full_data:
            bound = math.sqrt(batch_size) / self.tempered_size
            if llr_clip is not None and llr_clip > bound:
                raise ValueError(
                    f"`llr_clip` must be at most √b/N₀ = {bound:.6g} for the subsampled test (eq. 23). "
                    f"Found {llr_clip!r}."
                )
            llr_clip = bound if llr_clip is None else llr_clip
        self.llr_clip = llr_clip

    def _default_proposal_scale(self, size: int) -> float:
        """2.38/√(P·N₀), capped for the subsampled test so that most ratios stay below the clip.

        A row with unit Fisher information has ratio ≈ ‖θ′ − θ‖·|score| with ‖θ′ − θ‖ ≈ s√P;
        s ≤ c/(3√P) keeps it under the clip c = √b/N₀ for all but a few rows. PyMC's tuning
        rule only shrinks a scale whose Barker acceptance stays below 0.5, so start small.
        """
        scale = 2.38 / math.sqrt(size * self.tempered_size)
        if not self.full_data:
            scale = min(scale, self.llr_clip / (3.0 * math.sqrt(size)))
        return scale

    # -- public diagnostics ---------------------------------------------------------------
    @property
    def correction_error(self) -> float:
        """``sup_x |P(N(0, C) + V_cor ≤ x) − σ(x)|`` of the correction in use (data-free)."""
        return self.correction.sup_error

    # -- privacy interface ----------------------------------------------------------------
    @property
    def is_calibrated(self) -> bool:
        return self.llr_clip is not None

    @property
    def needs_calibration(self) -> bool:
        return self.full_data and not self._noise_user_set

    def _check_ready(self) -> None:
        if self.llr_clip is None:
            raise ValueError(
                "`llr_clip` must be set before sampling with full_data=True. Found None. Either sample with "
                "pymc_dp.sample(step=DPBarkerMH(...), epsilon=..., delta=...), which calibrates it, or, for a plain "
                "pm.sample, pass llr_clip= to DPBarkerMH and publish the result with "
                "pymc_dp.publish(idata, delta=..., step=step)."
            )

    def _likelihood_scale(self) -> float:
        return self.temperature if self.full_data else self.tempered_size

    def _sensitivity(self) -> float:
        """L2 sensitivity of the full-data statistic, as the mechanism states it."""
        return NoisyBarkerStatistic.sensitivity(self.llr_clip, self.temperature, self.neighbouring)

    def gaussian_mu_per_iteration(self) -> float:
        if not self.full_data:
            raise ValueError("The subsampled Barker test is not a Gaussian mechanism; use privacy_events().")
        self._check_ready()
        return self._sensitivity() ** 2 / (2.0 * self.correction_variance)

    def privacy_events(self, n_iterations: int) -> list[PrivacyEvent]:
        self._check_ready()
        count = int(n_iterations)
        if self.full_data:
            return NoisyBarkerStatistic.full_data_events(
                self.correction_variance, self.llr_clip, self.temperature, self.neighbouring, count, self._label()
            )
        return NoisyBarkerStatistic.subsampled_events(self.n_rows, self.batch_size, count, label=self._label())

    def set_noise_for_mu(self, mu_per_iteration: float) -> None:
        if not self.full_data:
            raise ValueError("The subsampled Barker test has no noise to calibrate: its ε is set by N, b and T.")
        mu = check_finite_positive("mu_per_iteration", mu_per_iteration)
        factor = 2.0 if self.neighbouring == "substitute" else 1.0
        clip = math.sqrt(2.0 * mu * self.correction_variance) / (factor * self.temperature)
        # The same expression as gaussian_mu_per_iteration, so the rounding is checked where it is used.
        self.llr_clip = round_towards_privacy(
            clip, lambda b: (factor * self.temperature * b) ** 2 / (2.0 * self.correction_variance) <= mu, 0.0
        )
        self._mechanism = None

    def accountant_settings(self) -> dict[str, Any]:
        return self._settings_record(
            "gaussian: clipped full-data log-likelihood ratio (Barker test)"
            if self.full_data
            else "subsampled Barker test (Heikkilä et al. 2019, Thm 2 + eq. 22)",
            full_data=self.full_data,
            batch_size=self.batch_size,
            sampling=None if self.full_data else "fixed size, without replacement",
            tempered_size=self.tempered_size if self.neighbouring == "substitute" else None,
            temperature=self.temperature,
            correction_variance=self.correction_variance,
            llr_clip=self.llr_clip,
            neighbouring=self.neighbouring,
            reproducible_noise=self.reproducible_noise,
            releases_per_iteration=1,
        )

    # -- sampling -------------------------------------------------------------------------
    def _get_mechanism(self) -> NoisyBarkerStatistic:
        mechanism = self._mechanism
        if mechanism is None or mechanism.llr_clip != self.llr_clip:
            self._check_ready()
            self._mechanism = self._row_mechanisms.barker_statistic(
                correction_variance=self.correction_variance,
                llr_clip=self.llr_clip,
                likelihood_scale=self._likelihood_scale(),
                batch_size=self.batch_size,
            )
        return self._mechanism

    def _kernel_draws(self, theta: np.ndarray, count: int, adaptive: bool, rng: Any) -> kernels.BarkerDraws:
        increments = np.empty((count, theta.size))
        for k in range(count):  # the step's generator in the order of one transition
            increments[k] = rng.normal(size=theta.shape) * self.proposal_scale
        return kernels.BarkerDraws(increments)

    def _transition_info(self, info: Any) -> TransitionInfo:
        log_alpha = float(info.log_alpha)
        accept = 0.0 if math.isnan(log_alpha) else float(self.correction.acceptance_probability(log_alpha))
        return TransitionInfo(float(info.released), accept, bool(info.accepted))

    def kernel_compilations(self, scan_iterations: int) -> list[tuple[Any, ...]]:
        if scan_iterations <= 1:
            return []
        theta = np.zeros(self._prior.n_params)
        draws = kernels.BarkerDraws(np.zeros((1, theta.size))[0])
        releases = (("barker", 0 if self.batch_size is None else int(self.batch_size)),)
        return [(kernels.barker_kernel, releases, theta, draws, None, scan_iterations)]

    def transition(self, theta: np.ndarray) -> tuple[np.ndarray, TransitionInfo]:
        """Propose, release z_Δ, the Barker test with the logistic correction (eq. 9 or 18).

        :func:`pymc_dp.step_methods.kernels.barker_kernel`, here or in the backend's blocks.
        """
        releases = {"barker": self._get_mechanism(), "correction": self.correction}
        return self._kernel_transition(theta, kernels.barker_kernel, releases)

    def _iteration_mu(self) -> float:
        return self.gaussian_mu_per_iteration() if self.full_data else math.nan

    def _recorded_settings(self) -> dict[str, Any]:
        # What the subsampled accountant needs besides the iteration count: N (public: substitute only) and b.
        if self.full_data:  # priced from dp_mu_cumulative; N is not needed (and private under add/remove)
            return {"dp_n_rows": 0, "dp_batch_size": 0}
        return {"dp_n_rows": self.n_rows, "dp_batch_size": self.batch_size}


def recorded_barker_releases(stats: Any) -> tuple[RdpReleases, int] | None:
    """The releases of a plain ``pm.sample`` run of a subsampled DPBarkerMH, from its statistics alone.

    Reads N and b (``dp_n_rows``, ``dp_batch_size``, the same at every draw) and the
    iterations of every chain up to its last stored draw (Σ over chains of the last
    ``dp_iterations``, tuning included). Returns (event, N), or None when the statistics are
    not a subsampled Barker run's (no ``dp_batch_size``, or the full-data test, which is a
    Gaussian mechanism priced from ``dp_mu_cumulative``).

    Parameters
    ----------
    stats : xarray.Dataset
        The ``sample_stats`` group.
    """
    if "dp_batch_size" not in stats:
        return None
    names = ("dp_n_rows", "dp_batch_size", "dp_iterations")
    # Every DP step records dp_accepted: a second dimension means several steps, whose costs compose.
    if any(tuple(stats[name].dims) != ("chain", "draw") for name in (*names, "dp_accepted")):
        raise ValueError(
            "`idata` was sampled with DPBarkerMH beside other steps: price it with the steps, "
            "pymc_dp.publish(idata, delta=..., step=step)."
        )
    n_rows, batch_size, iterations = (np.asarray(stats[name].values, dtype=np.int64) for name in names)
    if iterations.size == 0 or not batch_size.any():
        return None
    if np.unique(n_rows).size != 1 or np.unique(batch_size).size != 1:
        raise ValueError("`idata` holds dp_n_rows or dp_batch_size statistics that vary: they are not one run's.")
    count = int(iterations.max(axis=1).sum())
    return subsampled_barker_releases(int(n_rows.flat[0]), int(batch_size.flat[0]), count), int(n_rows.flat[0])
