"""Plumbing shared by the DP step methods: PyMC 5/6 per-chain hooks and the privacy interface."""

from __future__ import annotations

import collections
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pymc.blocking import RaveledVars
from pymc.pytensorf import make_shared_replacements
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence
from pymc.step_methods.metropolis import tune as tune_scaling
from pymc.util import get_random_generator
from pymc.vartypes import continuous_types

from pymc_dp._validation import AUTO_CLIP, check_bool, check_finite_positive, check_positive_int, model_from_context
from pymc_dp.accounting.calibrate import round_towards_privacy
from pymc_dp.accounting.events import PrivacyEvent
from pymc_dp.data import sorted_value_vars
from pymc_dp.mechanisms import mechanism_rng, model_access
from pymc_dp.step_methods.host_releases import HostReleases
from pymc_dp.step_methods.kernels import NUMPY_OPS
from pymc_dp.step_methods.progress import EpsilonSoFar

__all__ = ["DPStep", "RandomWalkTuning", "TransitionInfo", "accept_reject", "check_proposal_scale"]


def accept_reject(log_alpha: float, rng: Any, correction: Any = None) -> tuple[bool, float]:
    """The accept/reject decision every DP step makes, from released values only.

    Like BlackJAX's ``proposal.py``, one helper serves every sampler; the rule is chosen by
    ``correction``:

    - **Metropolis** (``correction=None``; the penalty steps and DPHMC): accept iff
      log U < log α with U ~ U(0, 1) from ``rng``; P(accept) = min(1, e^{log α}).
    - **Barker** (a :class:`pymc_dp.step_methods.barker_correction.LogisticCorrection`; DPBarkerMH):
      accept iff log α + V_cor > 0 with V_cor drawn from ``rng``; P(accept) =
      P(V_cor > −log α), which with the N(0, C) noise already in the released statistic
      is the logistic σ(log α) up to the correction error (Heikkilä et al. 2019, eq. 9).

    A NaN log α (a proposal outside the support) is rejected. U (or V_cor) is drawn either
    way, so that the generator's stream does not depend on the decision's inputs: a
    backend that draws a block's U's ahead (the JAX backend's ``lax.scan``) then gives the
    same chain.

    Parameters
    ----------
    log_alpha : float
        The test statistic: log α̂ of the penalty test, or the released Barker statistic
        plus the log prior ratio. A function of released values and public settings only.
    rng : numpy.random.Generator or SecureNoise
        Source of U or V_cor.
    correction : LogisticCorrection, optional
        The Barker correction; None for the Metropolis rule.

    Returns
    -------
    (bool, float)
        The decision and the acceptance probability given ``log_alpha`` (the ``dp_accept``
        statistic: a post-processing of the released values).
    """
    if correction is None:
        log_uniform = np.log(rng.uniform())
        if math.isnan(log_alpha):
            return False, 0.0
        return bool(log_uniform < log_alpha), float(np.exp(min(0.0, log_alpha)))
    correction_draw = correction.sample(rng)
    if math.isnan(log_alpha):
        return False, 0.0
    return bool(log_alpha + correction_draw > 0.0), float(correction.acceptance_probability(log_alpha))


def _same(a: Any, b: Any) -> bool:
    """Whether two cache-key entries are the same object or equal plain values."""
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return False
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _row(tree: Any, k: int) -> Any:
    """Row ``k`` of every array of a NamedTuple (or a plain array) of stacked iterations."""
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(_row(field, k) for field in tree))
    if isinstance(tree, tuple):
        return tuple(_row(field, k) for field in tree)
    return tree[k]


def pending_block(theta: np.ndarray, points: np.ndarray, infos: list[Any]) -> collections.deque:
    """A block of iterations run in one backend call, as (start point's bytes, point kept, info) per iteration.

    Iteration k starts where iteration k − 1 left the chain (the first at ``theta``); the
    step returns them one by one (:meth:`DPStep._next_from_block`).
    """
    starts = [np.asarray(theta, dtype=float), *points[:-1]]
    return collections.deque(
        (start.tobytes(), point, info) for start, point, info in zip(starts, points, infos, strict=True)
    )


@dataclass(frozen=True)
class TransitionInfo:
    """What one transition released, or computed from released values and public settings.

    The ``info`` of a BlackJAX kernel: :meth:`DPStep.transition` returns it beside the new
    point, and :meth:`DPStep.astep` turns it into sampler statistics.

    Attributes
    ----------
    noisy_llr : float
        The released log-likelihood-ratio statistic of the move (λ̂, d̂ or z_Δ); NaN when the
        iteration released none (a diverged DPHMC trajectory).
    accept : float
        The acceptance probability given the released values.
    accepted : bool
        Whether the proposal was accepted.
    """

    noisy_llr: float
    accept: float
    accepted: bool

    def statistics(self) -> dict[str, Any]:
        """The sampler statistics this transition supplies."""
        return {"dp_noisy_llr": float(self.noisy_llr), "dp_accept": float(self.accept), "dp_accepted": self.accepted}


#: δ at which a plain ``pm.sample``'s progress bar shows ε (the column's header states it);
#: :func:`pymc_dp.sample` shows its run's δ.
PROGRESS_DELTA = 1e-6


@dataclass(frozen=True)
class ProgressAccounting:
    """What the progress bar needs to show a run's ε so far (public settings only).

    Attributes
    ----------
    delta : float
        δ at which ε is shown.
    chains : int
        Chains of the run: each row shows the run's ε once every chain has reached its iteration.
    mu_before : float
        μ of the run's releases before its chains (a private clip bound, a DP start); NaN when
        they are not Gaussian, and the column then shows the chains' ε only (its header says so).
    mu_ratio : float
        μ of one iteration of every DP step of the run over this step's (several steps); NaN
        when a step's releases are not Gaussian (the column then says "on result").
    Every reading is the exact ε at its μ (:class:`EpsilonSoFar`): no planned total is needed.
    """

    delta: float
    chains: int
    mu_before: float = 0.0
    mu_ratio: float = 1.0


class DPStep(ArrayStepShared):
    """Base class of the DP step methods: one iteration is the step's :meth:`transition`.

    Subclasses implement :meth:`transition` (θ ↦ (θ′, :class:`TransitionInfo`): the algorithm,
    with its releases), :meth:`privacy_events` (what ``n`` iterations release, from public
    settings alone), :meth:`set_noise_for_mu` (calibration) and :meth:`accountant_settings`.
    :meth:`astep` is written once, here: it calls the tuner's hooks (a tuner such as
    :class:`RandomWalkTuning` is mixed in; the defaults tune nothing), counts the chain's
    iterations, tuning iterations and μ, and builds the statistics the class declares from
    the transition's info, the tuner and the public settings the step records.

    The per-chain hook works on both PyMC 5 (``set_rng``) and PyMC 6
    (``setup_chain(rng, tune, draws)``): it takes the chain's generator for the data-free
    randomness (proposals, momenta, accept uniforms), gives the chain a fresh mechanism
    generator from OS entropy (:func:`pymc_dp.mechanisms.mechanism_rng`; derived from the
    chain's generator only with ``reproducible_noise=True``, for testing), resets all
    per-chain state (counts, tuning, caches) and checks that the noise is set, before the
    chain touches any data. With ``reproducible_noise=True``, draws with the same
    ``random_seed`` are identical for ``cores=1`` and ``cores>1``.
    """

    #: Statistics every DP step records (subclasses add their own).
    common_stats: ClassVar[dict[str, tuple[type, list]]] = {
        "dp_accept": (np.float64, []),
        "dp_accepted": (bool, []),
        "dp_noisy_llr": (np.float64, []),
        "dp_mu_cumulative": (np.float64, []),
        "dp_tuning": (bool, []),
    }
    default_blocked = True
    #: PyMC 6 resolves ``pm.sample(tune=None)`` from this.
    default_tune_steps = 1000
    #: Derive mechanism noise from the seeded chain generator (testing only; default: OS entropy).
    reproducible_noise: bool = False
    #: Whether the step releases clipped per-row gradients (a backend then prepares their graph before the charge).
    uses_row_gradients: ClassVar[bool] = False
    #: Whether the user set the noise (else :func:`pymc_dp.sample` calibrates it for each run).
    _noise_user_set: bool = False
    #: Names of the noise-scale attributes that calibration sets.
    noise_attributes: ClassVar[tuple[str, ...]] = ()
    #: Number of tuning iterations of the current run when known (None: unknown).
    planned_tune: int | None = None
    #: Number of draws of the current run when known (None: unknown): a backend's last block stops there.
    planned_draws: int | None = None
    #: Names of the clip-bound attributes that may be ``"auto"`` (chosen privately by :func:`pymc_dp.sample`).
    clip_attributes: ClassVar[tuple[str, ...]] = ()

    # -- construction ---------------------------------------------------------------------
    def __new__(cls, *args, **kwargs):
        # PyMC's BlockedStep.__new__ looks the model up first and says only "No model on context stack."
        model_from_context(kwargs.get("model"), cls.__name__)
        return super().__new__(cls, *args, **kwargs)

    @staticmethod
    def _data_access(
        vars,
        model,
        initial_point,
        compile_kwargs,
        step_name: str,
        neighbouring: str = "substitute",
        reproducible_noise: bool = False,
    ):
        """(value_vars, shared, PriorDensity, RowMechanisms) for continuous ``vars``.

        The one place steps reach their model: a data-free prior and the row mechanisms,
        never the per-row functions (:func:`pymc_dp.mechanisms.model_access`). The model is
        checked under the step's neighbouring relation (under add/remove a row's term must
        not depend on N).
        """
        model = model_from_context(model, step_name)
        initial_point = model.initial_point() if initial_point is None else initial_point
        value_vars = sorted_value_vars(model, vars)
        discrete = [v.name for v in value_vars if v.dtype not in continuous_types]
        if discrete:
            raise ValueError(f"`vars` must be continuous for {step_name}. Found discrete variables: {discrete}.")
        shared = make_shared_replacements(initial_point, value_vars, model)
        prior, mechanisms = model_access(
            model,
            value_vars,
            shared,
            initial_point,
            compile_kwargs,
            neighbouring,
            reproducible=reproducible_noise,
            partitioned_rows=True,  # a step built in sampler_model's copy: its releases refuse but on the rows' workers
        )
        return value_vars, shared, prior, mechanisms

    def _start(self, value_vars, shared, *, tune: bool, reproducible_noise: bool, blocked: bool, rng: Any) -> None:
        """What every step's construction ends with, once its settings are validated and its model built."""
        self._tune_initial = self.tune = bool(tune)
        self.reproducible_noise = bool(reproducible_noise)
        self._iterations_chain, self._mu_spent_chain = 0, 0.0
        self.reset_tuning()
        super().__init__(value_vars, shared, blocked=blocked, rng=rng)
        self.noise_rng = mechanism_rng(self.rng, self.reproducible_noise)  # replaced per chain by PyMC's hook

    # -- per-chain hooks ------------------------------------------------------------------
    def _new_chain(self, rng: Any, tune: int | None = None, draws: int | None = None) -> None:
        self._check_ready()
        self._check_clip_bounds()
        self.rng = get_random_generator(rng, copy=False)
        self.noise_rng = mechanism_rng(self.rng, self.reproducible_noise)
        if tune is not None:  # PyMC 6 tells the step; with PyMC 5, pymc_dp.sample sets them
            self.planned_tune = int(tune)
        if draws is not None:
            self.planned_draws = int(draws)
        self.tune = self._tune_initial if tune is None else (self._tune_initial and tune > 0)
        self._iterations_chain, self._mu_spent_chain = 0, 0.0
        self.reset_tuning()
        self._drop_block()  # a backend's block belongs to the chain that ran it
        self._reset_chain_state()

    def set_rng(self, rng: Any) -> None:  # PyMC 5
        self._new_chain(rng)

    def setup_chain(self, rng: Any, tune: int, draws: int) -> None:  # PyMC 6
        self._new_chain(rng, tune, draws)

    def _reset_chain_state(self) -> None:
        """Drop caches that must not carry over between chains (counts and tuning are reset by the base)."""

    def _check_ready(self) -> None:
        """Raise before sampling if a privacy parameter is unset (override)."""

    @property
    def auto_clip_attributes(self) -> tuple[str, ...]:
        """The clip bounds left to :func:`pymc_dp.sample` to choose privately (``"auto"``)."""
        return tuple(name for name in self.clip_attributes if getattr(self, name) == AUTO_CLIP)

    def _check_clip_bounds(self) -> None:
        """Raise before any data access if a clip bound is still ``"auto"`` (outside :func:`pymc_dp.sample`)."""
        auto = self.auto_clip_attributes
        if auto:
            raise ValueError(
                f"{', '.join(f'`{name}`' for name in auto)} must be a number when sampling outside pymc_dp.sample. "
                f"Found 'auto': the bound is chosen privately (a DP quantile of the per-row score norms, charged to "
                f"the run) by pymc_dp.sample(step={type(self).__name__}(...), epsilon=..., delta=...). For a plain "
                f"pm.sample, pass a bound, e.g. {type(self).__name__}({auto[0]}=1.0)."
            )

    # -- one iteration --------------------------------------------------------------------
    def transition(self, theta: np.ndarray) -> tuple[np.ndarray, TransitionInfo]:
        """One move of the algorithm from the flat point θ: (the point kept, what was released)."""
        raise NotImplementedError

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict[str, Any]]]:
        """One iteration: the tuner's hooks around :meth:`transition`, then counts and statistics."""
        tuning = bool(self.tune and self._tune_initial)
        self._tuning_before(tuning)
        theta, info = self.transition(q0.data)
        if tuning:
            self._tuning_iterations += 1
        self._tuning_after(tuning, theta, info)
        self._iterations_chain += 1
        self._mu_spent_chain += self._iteration_mu()
        return RaveledVars(theta, q0.point_map_info), [self._statistics(info, tuning)]

    def _block_iteration(
        self, theta: np.ndarray, builder: str, *args: Any, **kwargs: Any
    ) -> tuple[np.ndarray, TransitionInfo] | None:
        """The next iteration from the backend's block of iterations; None where it runs none.

        ``builder`` names the method of the step's row mechanisms that builds a block (the JAX
        backend's ``kernel_block``; other backends have none), called with ``args`` and
        ``kwargs``; the block is kept until one of them changes. The step's :meth:`_run_block`
        draws its randomness and runs a block. After tuning a block has the backend's length;
        while tuning, only steps whose settings stay fixed for a known number of iterations run
        blocks, no longer than that (:meth:`_tuning_block_length`). The last block of a run
        whose length is known stops at its last draw (:meth:`_draws_block_length`).
        """
        if self.shared:
            return None
        build = getattr(self._row_mechanisms, builder, None)
        if build is None:
            return None
        tuning = bool(self.tune and self._tune_initial)
        length = self._tuning_block_length() if tuning else None
        if tuning and length is None:
            return None
        block = self._kept("_block_cache", (*args, *sorted(kwargs.items())), lambda: build(*args, **kwargs))
        if block is None:
            return None
        if length is None:
            length = self._draws_block_length()
        return self._next_from_block(
            np.asarray(theta, dtype=float), lambda start: self._run_block(start, block, length), tuning
        )

    def _tuning_block_length(self) -> int | None:
        """While tuning: the iterations a block may run with the current tuned settings (None: none, one call each).

        At most the backend's block length, the tuning iterations left in the run (known only
        when ``pmdp.sample`` planned it) and :meth:`_tuned_settings_fixed_for`.
        """
        fixed = self._tuned_settings_fixed_for()
        if fixed is None or self.planned_tune is None:
            return None
        length = min(self._row_mechanisms.scan_iterations, self.planned_tune - self._tuning_iterations, fixed)
        return length if length >= 1 else None

    def _draws_block_length(self) -> int:
        """After tuning: the backend's block length, cut at the run's last iteration when the run's length is known.

        Known from ``pmdp.sample`` (and from PyMC 6, which tells the step); a block that would run
        past the last draw computed iterations that were dropped, never released.
        """
        length = self._row_mechanisms.scan_iterations
        if self.planned_tune is None or self.planned_draws is None:
            return length
        left = self.planned_tune + self.planned_draws - self._iterations_chain
        return min(length, left) if left >= 1 else length

    def _tuned_settings_fixed_for(self) -> int | float | None:
        """Tuning iterations, this one included, before the host next changes a setting a block holds fixed.

        None (the default): a setting changes after every decision the block cannot replay, so
        tuning runs one call per iteration.
        """
        return None

    def _run_block(self, theta: np.ndarray, block: Callable[..., Any], length: int) -> collections.deque:
        """Draw ``length`` iterations' randomness in transition()'s order, run them from θ: a :func:`pending_block`."""
        adaptive = bool(self.tune and self._tune_initial)
        draws = self._kernel_draws(theta, length, adaptive, self.rng)
        states, infos = block(
            self._kernel_state(theta, adaptive), draws, self._kernel_settings(adaptive), self.noise_rng
        )
        points = states[0] if isinstance(states, tuple) else states
        return pending_block(theta, points, [self._transition_info(_row(infos, k)) for k in range(length)])

    # -- the step's kernel (pymc_dp.step_methods.kernels), run by the host or a backend -------
    def _kernel_transition(
        self, theta: np.ndarray, kernel: Callable[..., Any], releases: dict[str, Any], one_call: bool = False
    ) -> tuple[np.ndarray, TransitionInfo]:
        """One iteration of ``kernel``: from the backend's block if it runs one, else here (NumPy).

        ``releases`` names the step's mechanisms (``gradient``, ``ratio``, ``barker``,
        ``correction``, ``gradient_releases``). ``one_call``: where the backend runs the kernel
        but no block applies (tuning one call per iteration), one device call per iteration.
        """
        theta = np.asarray(theta, dtype=float)
        adaptive = bool(self.tune and self._tune_initial)
        from_block = self._block_iteration(
            theta, "kernel_block", self._block_kernel(kernel, adaptive), self._prior, **releases
        )
        if from_block is not None:
            return from_block
        draws = self._kernel_draws(theta, 1, False, self.rng)
        settings = self._kernel_settings(False)
        device = self._one_call_block(kernel, releases) if one_call else None
        if device is not None:
            states, infos = device(theta, draws, settings, self.noise_rng)
            return states[0], self._transition_info(_row(infos, 0))
        mechanisms = {k: v for k, v in releases.items() if k != "gradient_releases"}
        host = HostReleases(self._prior, self.noise_rng, **mechanisms)
        point, info = kernel(NUMPY_OPS, host, theta, _row(draws, 0), settings)
        return np.asarray(point, dtype=float), self._transition_info(info)

    def _one_call_block(self, kernel: Callable[..., Any], releases: dict[str, Any]) -> Callable[..., Any] | None:
        """The backend's one-iteration device call of ``kernel`` (kept while the mechanisms stay), or None."""
        build = getattr(self._row_mechanisms, "kernel_block", None)
        if build is None or self.shared:
            return None
        key = (kernel, *sorted(releases.items()))
        return self._kept("_fused_cache", key, lambda: build(kernel, self._prior, iterations=1, **releases))

    def _kept(self, attribute: str, key: tuple, build: Callable[[], Any]) -> Any:
        """``build()``, kept in ``attribute`` with ``key`` until an entry of the key changes (object or value)."""
        cached = getattr(self, attribute, None)
        if cached is None or len(cached[0]) != len(key) or not all(_same(a, b) for a, b in zip(cached[0], key)):
            cached = (key, build())
            setattr(self, attribute, cached)
        return cached[1]

    def _block_kernel(self, kernel: Callable[..., Any], adaptive: bool) -> Callable[..., Any]:
        """The kernel a block runs (DPHMC while tuning: the dual averaging in the kernel)."""
        return kernel

    def _kernel_draws(self, theta: np.ndarray, count: int, adaptive: bool, rng: Any) -> Any:
        """``count`` iterations' own randomness from ``rng``, in transition()'s order (stacked)."""
        raise NotImplementedError

    def _kernel_state(self, theta: np.ndarray, adaptive: bool) -> Any:
        """The kernel's state at θ."""
        return theta

    def _kernel_settings(self, adaptive: bool) -> Any:
        """The kernel's public settings for this iteration or block."""
        return None

    def _transition_info(self, info: Any) -> TransitionInfo:
        """The step's :class:`TransitionInfo` from the kernel's info of one iteration."""
        return TransitionInfo(float(info.noisy_llr), float(info.accept), bool(info.accepted))

    def kernel_compilations(self, scan_iterations: int) -> list[tuple[Any, ...]]:
        """What a backend compiles before the run: (kernel, releases, state, draws, settings, iterations) per call.

        From public shapes and settings only (examples of zeros and a throwaway generator).
        """
        return []

    def _next_from_block(
        self, theta: np.ndarray, run_block: Callable[[np.ndarray], collections.deque], tuning: bool = False
    ) -> tuple[np.ndarray, TransitionInfo]:
        """The next iteration of the pending block (a backend's ``lax.scan``), running a new block from θ if none.

        Blocks run after tuning (the tuned settings are fixed) and, for the steps that allow it,
        within a tuning interval. A θ other than the one the next iteration starts from
        (another step moved the chain), or a block run in the other phase (tuning or not),
        drops the rest of the block, which was never released, and runs a new block from θ.
        """
        pending = getattr(self, "_block_pending", None)
        if not pending or pending[0][0] != theta.tobytes() or getattr(self, "_block_tuning", tuning) != tuning:
            pending = self._block_pending = run_block(theta)
            self._block_tuning = tuning
        _, point, info = pending.popleft()
        return point, info

    def _drop_block(self) -> None:
        """Drop a block's iterations not yet returned (when a run or chain ends)."""
        self._block_pending = collections.deque()

    def _statistics(self, info: TransitionInfo, tuning: bool) -> dict[str, Any]:
        """The statistics the class declares, from ``info``, the counts, the tuner and the recorded settings."""
        values = {
            **info.statistics(),
            "dp_tuning": tuning,
            "dp_mu_cumulative": self._mu_spent_chain,
            "dp_iterations": self._iterations_chain,
            **self._tuned_statistics(),
            **self._recorded_settings(),
        }
        return {key: values[key] for key in self.stats_dtypes_shapes}

    def _iteration_mu(self) -> float:
        """μ of one iteration, added to ``dp_mu_cumulative`` (NaN where the step is not a Gaussian mechanism)."""
        return self.gaussian_mu_per_iteration()

    def _recorded_settings(self) -> dict[str, Any]:
        """Public settings recorded as statistics so that a plain ``pm.sample`` result can be priced."""
        return {}

    # -- tuning (the defaults tune nothing; a tuner mixin overrides them) -------------------
    def reset_tuning(self) -> None:
        """Return the tuned settings and the tuning count to their initial state (PyMC calls this per chain)."""
        self._tuning_iterations = 0
        self._reset_tuned_settings()

    def _reset_tuned_settings(self) -> None:
        """Return the tuned settings to their initial values."""

    def _tuning_before(self, tuning: bool) -> None:
        """Set this iteration's tuned settings (before the transition)."""

    def _tuning_after(self, tuning: bool, theta: np.ndarray, info: TransitionInfo) -> None:
        """Learn from the released decision and the point kept (after the transition)."""

    def _tuned_statistics(self) -> dict[str, Any]:
        """Statistics of the tuned settings used in this iteration."""
        return {}

    # -- privacy interface ----------------------------------------------------------------
    @property
    def is_calibrated(self) -> bool:
        """Whether every noise scale is set."""
        raise NotImplementedError

    @property
    def needs_calibration(self) -> bool:
        """Whether :func:`pymc_dp.sample` should (re)calibrate the noise for a run."""
        return not self._noise_user_set

    def forget_private_state(self) -> None:
        """Drop cached raw per-row values and a backend's pending block (called when a run ends)."""
        self._drop_block()

    def check_score_norms(self) -> None:
        """Build the per-row gradient now (a private clip bound needs it); raises if there is none. Releases nothing."""
        try:
            self._row_mechanisms.check_differentiable()
        except (NotImplementedError, TypeError) as err:
            raise ValueError(
                f"Clip bounds 'auto' need per-row gradients of the log-likelihood in {list(self.var_names)}: building "
                f"them failed with {type(err).__name__}. Give the clip bound as a number."
            ) from None

    def release_clip_bound(self, point: dict[str, Any], quantile: float, noise_multiplier: float) -> Any:
        """One private clip-bound release at a public ``point`` (value-variable name → unconstrained value).

        The Gaussian mechanism on the histogram of the per-row score norms of the step's
        variables (:class:`pymc_dp.mechanisms.NoisyScoreNormHistogram`); returns a
        :class:`pymc_dp.mechanisms.ClipBoundRelease`. :func:`pymc_dp.sample` prices it before
        calling this (one Gaussian release at ``noise_multiplier``).
        """
        theta = np.concatenate([np.asarray(point[v.name], dtype=float).ravel() for v in self.vars])
        mechanism = self._row_mechanisms.score_norm_histogram(noise_multiplier, self.neighbouring)
        return mechanism.release(theta, quantile, self.noise_rng)

    def privacy_events(self, n_iterations: int) -> list[PrivacyEvent]:
        """Releases made by ``n_iterations`` iterations of one chain (public settings only)."""
        raise NotImplementedError

    def gaussian_mu_per_iteration(self) -> float:
        """μ (Sommer et al. 2019, Lemma 12) of one iteration, for Gaussian-only steps."""
        raise NotImplementedError

    def set_noise_for_mu(self, mu_per_iteration: float) -> None:
        """Set the unset noise scales so one iteration costs ``mu_per_iteration``."""
        raise NotImplementedError

    def accountant_settings(self) -> dict[str, Any]:
        """Public settings recorded in ``dp_accountant``."""
        raise NotImplementedError

    def _settings_record(self, mechanism: str, **settings: Any) -> dict[str, Any]:
        """The record :meth:`accountant_settings` returns: the step, ``mechanism`` and the variables, then ``settings``.

        ``settings`` keep the order given. Public settings only.
        """
        return {"step": type(self).__name__, "mechanism": mechanism, "vars": list(self.var_names), **settings}

    def _label(self) -> str:
        """The step and its variables, ``DPPenaltyMH[m,s]``: the label of its privacy events in the ledger."""
        return f"{type(self).__name__}[{','.join(self.var_names)}]"

    @staticmethod
    def competence(var, has_grad):
        """Never chosen automatically: a DP step must be requested explicitly."""
        return Competence.INCOMPATIBLE

    # -- PyMC's progress bar -----------------------------------------------------------------
    #: What the progress bar needs to show the run's ε so far; set by :func:`pymc_dp.sample`
    #: for its run. Without it (a plain ``pm.sample``) the bar shows the chains' ε at
    #: :data:`PROGRESS_DELTA`, stated in the column's header.
    progress_run: ProgressAccounting | None = None

    def _progressbar_config(self, n_chains: int = 1):
        """Columns of PyMC's progress bar: the released acceptance and the run's ε so far.

        The ε column shows, in each chain's row, the run's ε at the δ its header states once
        every chain has reached that row's iteration: the run's releases before its chains (a
        private clip bound, a DP start) composed with every chain's iterations so far. Rows
        differ only while chains run at different speeds; the last reading is the run's ε
        (``dp_epsilon``, and what :func:`pymc_dp.privacy_spent` prints). It follows the schedule
        (public settings and the iteration count), not the data: showing it releases nothing.
        Each reading is exact, rounded up to four significant digits (:class:`EpsilonSoFar`).
        """
        from rich.progress import TextColumn
        from rich.table import Column

        run = self.progress_run or ProgressAccounting(PROGRESS_DELTA, n_chains)
        self._progress = run
        label = f"ε {'run' if math.isfinite(run.mu_before) else 'chains'} (δ={run.delta:.3g})"
        columns = [
            TextColumn("{task.fields[dp_accept_rate]:0.2f}", table_column=Column("Accept", ratio=1)),
            TextColumn("{task.fields[dp_spent_chain]}", table_column=Column(label, ratio=1)),
        ]
        return columns, {"dp_accept_rate": [0.0] * n_chains, "dp_spent_chain": ["0"] * n_chains}

    def _make_progressbar_update_functions(self):
        run = getattr(self, "_progress", None) or self.progress_run or ProgressAccounting(PROGRESS_DELTA, 1)
        before = run.mu_before if math.isfinite(run.mu_before) else 0.0
        memo: dict[float, str] = {}  # ε as shown, per μ, shared by the chains' rows

        def update_stats(step_stats: dict[str, Any]) -> dict[str, Any]:
            mu = before + run.chains * run.mu_ratio * float(step_stats.get("dp_mu_cumulative", math.nan))
            if not math.isfinite(mu):  # a subsampled DPBarkerMH: RDP-accounted, priced on the result
                shown: Any = "on result"
            elif mu <= 0:
                shown = "0"
            else:  # exact at this μ, computed when the bar draws it (not at every draw)
                shown = EpsilonSoFar(mu, run.delta, memo)
            return {"dp_accept_rate": float(step_stats.get("dp_accept", 0.0)), "dp_spent_chain": shown}

        return (update_stats,)


class GaussianNoiseMultiplier:
    """Privacy interface of a step that makes one Gaussian release per iteration at noise multiplier τ.

    The step keeps τ in ``noise_multiplier`` (None until set or calibrated); each iteration costs
    μ = 1/(2τ²) (Sommer et al. 2019, Lemma 12). The step builds its mechanism for the current τ
    in ``_mechanism`` when it first releases; a new τ drops it (:meth:`_noise_changed`).
    """

    noise_multiplier: float | None
    _mechanism: Any
    #: The mechanism the step releases through; it states the accounting of its releases (``events``).
    mechanism_class: ClassVar[Any]

    @property
    def is_calibrated(self) -> bool:
        return self.noise_multiplier is not None

    def _check_ready(self) -> None:
        if self.noise_multiplier is None:
            raise ValueError(
                f"`noise_multiplier` must be set before sampling. Found None. Either sample with "
                f"pymc_dp.sample(step={type(self).__name__}(...), epsilon=..., delta=...), which calibrates it, or, "
                f"for a plain pm.sample, pass noise_multiplier=pymc_dp.accounting.noise_multiplier_for_target(epsilon, "
                f"delta, count=chains * (tune + draws)) to {type(self).__name__} and publish the result with "
                "pymc_dp.publish(idata, delta=...)."
            )

    def gaussian_mu_per_iteration(self) -> float:
        self._check_ready()
        return 0.5 / self.noise_multiplier**2

    def privacy_events(self, n_iterations: int) -> list[PrivacyEvent]:
        self._check_ready()
        return self.mechanism_class.events(self.noise_multiplier, int(n_iterations), self._label())

    def set_noise_for_mu(self, mu_per_iteration: float) -> None:
        mu = check_finite_positive("mu_per_iteration", mu_per_iteration)
        self.noise_multiplier = round_towards_privacy(math.sqrt(0.5 / mu), lambda tau: 0.5 / tau**2 <= mu, math.inf)
        self._noise_changed()

    def _noise_changed(self) -> None:
        """Drop the mechanism built for the previous noise scale (the next release builds one for the new τ)."""
        self._mechanism = None


def check_proposal_scale(proposal_scale: Any) -> np.ndarray:
    """Validate a random-walk scale (scalar or flat array of positive finite numbers); returns a 1-d array."""
    try:
        scale = np.atleast_1d(np.asarray(1.0 if proposal_scale is None else proposal_scale, dtype=float))
    except (TypeError, ValueError):
        raise TypeError(
            f"`proposal_scale` must be a number or an array of numbers. Found {proposal_scale!r}."
        ) from None
    if isinstance(proposal_scale, bool) or scale.ndim != 1:
        raise ValueError(f"`proposal_scale` must be a scalar or a flat array. Found {proposal_scale!r}.")
    if np.any(~np.isfinite(scale)) or np.any(scale <= 0):
        raise ValueError(
            f"`proposal_scale` must be positive and finite (a scalar or one per coordinate). Found {proposal_scale!r}."
        )
    return scale


class RandomWalkTuning:
    """A Gaussian random-walk proposal tuned by PyMC's Metropolis rule on privatized accept decisions.

    The tuner of the DP Metropolis-type steps (mixed in before :class:`DPStep`). Tuning reads
    only the accept decisions, which are released values, so it costs no privacy.
    """

    proposal_scale: np.ndarray
    tune_interval: int
    #: Every step's statistics and the proposal scale used (:meth:`_tuned_statistics`).
    stats_dtypes_shapes: ClassVar[dict[str, tuple[type, list]]] = {
        **DPStep.common_stats,
        "dp_proposal_scale": (np.float64, []),
    }

    def _check_walk(
        self, tune_interval: Any, tune: Any, reproducible_noise: Any, proposal_scale: Any
    ) -> tuple[bool, bool, np.ndarray]:
        """The random-walk steps' shared arguments, checked in this order before the model is read.

        Sets ``tune_interval``; returns ``tune`` and ``reproducible_noise`` as bools and the
        proposal scale as a 1-d array (:func:`check_proposal_scale`). Public settings only.
        """
        self.tune_interval = check_positive_int("tune_interval", tune_interval)
        tune, reproducible_noise = check_bool("tune", tune), check_bool("reproducible_noise", reproducible_noise)
        return tune, reproducible_noise, check_proposal_scale(proposal_scale)

    def _init_proposal(self, scale: np.ndarray, size: int) -> None:
        if scale.size not in (1, size):
            raise ValueError(
                f"`proposal_scale` must be a scalar or have one value per flat coordinate ({size}). "
                f"Found {scale.size} values."
            )
        self._proposal_scale_initial = np.broadcast_to(scale, (size,)).copy()

    def _reset_tuned_settings(self) -> None:
        self.proposal_scale = self._proposal_scale_initial.copy()
        self._steps_until_tune = self.tune_interval
        self._accepted_sum = 0

    def _tuning_before(self, tuning: bool) -> None:
        """Update the scale when a tuning interval is complete."""
        if tuning and self._steps_until_tune == 0:
            self.proposal_scale = tune_scaling(self.proposal_scale, self._accepted_sum / float(self.tune_interval))
            self._steps_until_tune = self.tune_interval
            self._accepted_sum = 0

    def _tuning_after(self, tuning: bool, theta: np.ndarray, info: TransitionInfo) -> None:
        self._accepted_sum += int(info.accepted)
        self._steps_until_tune -= 1

    def _tuned_statistics(self) -> dict[str, Any]:
        return {"dp_proposal_scale": float(np.mean(self.proposal_scale))}

    def _tuned_settings_fixed_for(self) -> int:
        """The rest of the tuning interval: the proposal scale changes only at its end."""
        return self._steps_until_tune

    def _propose(self, theta: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """θ′ = θ + s·z, z ~ N(0, I) from the data-free ``rng``."""
        return theta + rng.normal(size=theta.shape) * self.proposal_scale
