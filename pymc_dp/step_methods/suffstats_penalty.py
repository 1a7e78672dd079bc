"""The penalty algorithm on fresh noisy sufficient statistics (Yıldırım and Ermiş 2019, Alg. 3)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import pytensor.tensor as pt
from pymc.model import modelcontext
from pymc.pytensorf import compile as pm_compile
from pymc.pytensorf import join_nonshared_inputs, make_shared_replacements
from pymc.vartypes import continuous_types

from pymc_dp._errors import withholds_chains
from pymc_dp._validation import check_finite_positive
from pymc_dp.data import check_prior_reads_no_data, sorted_value_vars
from pymc_dp.exponential_family.families import ExponentialFamily, check_out_of_bounds, get_family
from pymc_dp.mechanisms import NoisySufficientStatistics, PrivateSufficientStatistics
from pymc_dp.step_methods.base import (
    DPStep,
    GaussianNoiseMultiplier,
    RandomWalkTuning,
    TransitionInfo,
    accept_reject,
)
from pymc_dp.step_methods.penalty import penalty_log_acceptance

__all__ = ["DPSuffStatsPenaltyMH"]


class DPSuffStatsPenaltyMH(GaussianNoiseMultiplier, RandomWalkTuning, DPStep):
    """DP penalty random-walk Metropolis on a fresh Gaussian-noised copy of the sufficient statistics.

    For an exponential-family likelihood p(x | θ) = h(x) g(θ) exp(φ(θ)ᵀS(x)), each iteration
    proposes θ′ = θ + s·z, draws Ŝ = S + N(0, ξI) with √ξ = τΔ₂ (a new copy every iteration),
    forms d̂ = n[log g(θ′) − log g(θ)] + (φ(θ′) − φ(θ))ᵀŜ (eq. 7), whose noise variance is
    σ²(θ, θ′) = ‖φ(θ′) − φ(θ)‖² ξ (eq. 8), and accepts with probability
    min{1, exp(T d̂ − (Tσ)²/2 + log p(θ′) − log p(θ))}. Per-iteration cost is O(d), independent
    of N.

    The model holds the priors only; the likelihood is given by ``family``, ``data`` and
    ``params`` (the family's parameters as model variables or expressions).

    Parameters
    ----------
    family : str or ExponentialFamily
        As for :func:`pymc_dp.release_statistics`; settings by name go in ``family_settings``.
    data : array or (X, y)
        The raw rows (read once, by the mechanism).
    params : dict
        Family parameter name → model variable or expression, e.g. ``{"p": p}``.
    vars : list, optional
        Continuous variables to sample (default: all free variables).
    noise_multiplier : float, optional
        τ; unset to have :func:`pymc_dp.sample` calibrate it from a target ε.
    proposal_scale : float or array, optional
        Initial random-walk scale (default 2.38/√(P·N)).
    temperature : float, default 1
        T: target p(θ) p(X | θ)^T.
    reproducible_noise, tune, tune_interval, model, rng, initial_point, compile_kwargs, blocked
        As for :class:`pymc_dp.DPPenaltyMH`.
    family_settings : dict, optional
        Public settings of a family given by name.
    out_of_bounds : {"clamp", "raise"}, default "clamp"
        As for :func:`pymc_dp.release_statistics`: rows outside the public bounds are mapped
        into them, row by row, with nothing reported (default), or refused with a message
        that carries no count and no value.

    Notes
    -----
    **Neighbouring relation.** Substitute (one row replaced, N public).

    **Sensitivity.** Δ₂ = sup ‖S(x) − S(x′)‖₂ from the family's public bounds (∇₂S of §3.3).
    Each iteration releases one Ŝ, a Gaussian mechanism with Δ₂/√ξ = 1/τ: μ = 1/(2τ²)
    (Sommer et al. 2019, Lemma 12), composed exactly over all iterations of all chains.

    **What ε covers.** Every Ŝ of every iteration, tuning included; d̂, the decisions and the
    draws are post-processing. Unlike :func:`pymc_dp.release_statistics` the chain is exact:
    it leaves the (tempered) posterior invariant (Yıldırım and Ermiş 2019, §3.3).

    Sampler statistics (all privatized or public):

    - ``dp_accept``: the privatized acceptance probability min(1, exp(log α̂)).
    - ``dp_accepted``: whether the proposal was accepted.
    - ``dp_noisy_llr``: d̂, the log-likelihood ratio computed from the released Ŝ.
    - ``dp_proposal_scale``: the proposal scale used (mean over coordinates).
    - ``dp_mu_cumulative``: μ spent by this chain so far, tuning included (public).
    - ``dp_tuning``: whether the proposal scale was being tuned in this iteration.

    References
    ----------
    .. [1] Yıldırım, S. and Ermiş, B. (2019). Exact MCMC with differentially private moves.
       Statistics and Computing 29, §3.3, Algorithm 3, eq. (7)–(8).
    .. [2] Sommer, D. M., Meiser, S. and Mohammadi, E. (2019). Privacy loss classes. PoPETs,
       Lemma 12.
    """

    mechanism_class = NoisySufficientStatistics

    name = "dp_suffstats_penalty_mh"
    noise_attributes = ("noise_multiplier",)
    reads_model_rows: ClassVar[bool] = False

    @withholds_chains
    def __init__(
        self,
        family: str | ExponentialFamily,
        data: Any,
        params: dict[str, Any],
        vars=None,
        *,
        noise_multiplier: float | None = None,
        proposal_scale: float | np.ndarray | None = None,
        temperature: float = 1.0,
        reproducible_noise: bool = False,
        tune: bool = True,
        tune_interval: int = 100,
        model=None,
        rng=None,
        initial_point: dict | None = None,
        compile_kwargs: dict | None = None,
        blocked: bool = True,
        family_settings: dict | None = None,
        out_of_bounds: str = "clamp",
    ) -> None:
        self.family = get_family(family, **(family_settings or {}))
        self.out_of_bounds = check_out_of_bounds(out_of_bounds)
        self.noise_multiplier = (
            None if noise_multiplier is None else check_finite_positive("noise_multiplier", noise_multiplier)
        )
        self.temperature = check_finite_positive("temperature", temperature)
        self.neighbouring = "substitute"
        tune, reproducible_noise, scale = self._check_walk(tune_interval, tune, reproducible_noise, proposal_scale)
        if not isinstance(params, dict) or sorted(params) != sorted(self.family.params):
            found = sorted(params) if isinstance(params, dict) else type(params).__name__
            raise ValueError(f"`params` must map exactly {list(self.family.params)} to model variables. Found {found}.")
        model = modelcontext(model)
        if model.observed_RVs:
            raise ValueError(
                "`model` must hold the priors only: the likelihood comes from `family` and `data`. Found observed "
                f"variables {[rv.name for rv in model.observed_RVs]}."
            )
        # The mechanism reads the rows once (shapes, bounds, Σ S(x)); the step keeps no rows.
        self._private_statistics = PrivateSufficientStatistics(self.family, data, self.out_of_bounds)
        # The priors, the potentials and `params` enter the acceptance ratio exactly (unclipped,
        # unnoised): none may read pm.Data, an observed value or an array with an axis of length N.
        expressions = {f"params[{k!r}]": v for k, v in params.items()}
        check_prior_reads_no_data(model, self._private_statistics.n_rows, expressions=expressions)
        self._mechanism: NoisySufficientStatistics | None = None

        initial_point = model.initial_point() if initial_point is None else initial_point
        value_vars = sorted_value_vars(model, vars)
        discrete = [v.name for v in value_vars if v.dtype not in continuous_types]
        if discrete:
            raise ValueError(
                f"`vars` must be continuous for DPSuffStatsPenaltyMH. Found discrete variables: {discrete}."
            )
        shared = make_shared_replacements(initial_point, value_vars, model)
        phi, log_g = self.family.natural(**params)
        prior = model.logp(jacobian=True)
        outputs = model.replace_rvs_by_values([prior, pt.as_tensor_variable(phi), pt.as_tensor_variable(log_g)])
        joined, theta = join_nonshared_inputs(initial_point, outputs, value_vars, shared)
        self._f = pm_compile([theta], joined, **(compile_kwargs or {}))
        self._f.trust_input = True
        self.n_params = int(sum(np.asarray(initial_point[v.name]).size for v in value_vars))
        self.n_rows = self._private_statistics.n_rows
        if proposal_scale is None:
            scale = np.array([2.38 / math.sqrt(self.n_params * self.n_rows)])
        self._init_proposal(scale, self.n_params)
        self._noise_user_set = noise_multiplier is not None
        self._start(value_vars, shared, tune=tune, reproducible_noise=reproducible_noise, blocked=blocked, rng=rng)

    # -- privacy interface ----------------------------------------------------------------
    def accountant_settings(self) -> dict[str, Any]:
        return self._settings_record(
            "gaussian: fresh noisy sufficient statistics per iteration (Yildirim & Ermis 2019, Alg. 3)",
            family=self.family.settings(),
            l2_sensitivity=self.family.l2_sensitivity(),
            noise_multiplier=self.noise_multiplier,
            temperature=self.temperature,
            neighbouring=self.neighbouring,
            reproducible_noise=self.reproducible_noise,
            out_of_bounds=self.out_of_bounds,
            releases_per_iteration=1,
        )

    def forget_private_state(self) -> None:
        self._mechanism = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_mechanism"] = None  # never pickle the exact statistics
        return state

    def _get_mechanism(self) -> NoisySufficientStatistics:
        if self._mechanism is None or self._mechanism.noise_multiplier != self.noise_multiplier:
            self._check_ready()
            self._mechanism = self._private_statistics.gaussian_releases(self.noise_multiplier)
        return self._mechanism

    # -- sampling -------------------------------------------------------------------------
    def transition(self, theta: np.ndarray) -> tuple[np.ndarray, TransitionInfo]:
        """Algorithm 3 of Yıldırım and Ermiş (2019): propose, release a fresh Ŝ, the penalty test on d̂."""
        mechanism = self._get_mechanism()
        proposal = self._propose(theta, self.rng)
        prior0, phi0, log_g0 = self._f(theta)
        prior1, phi1, log_g1 = self._f(proposal)
        noisy = mechanism.release(self.noise_rng)  # Alg. 3 line 1: a fresh Ŝ
        dphi = np.atleast_1d(phi1 - phi0)
        d_hat = float(self.n_rows * (log_g1 - log_g0) + dphi @ noisy)  # eq. 7 with Ŝ
        std = math.sqrt(float(dphi @ dphi) * mechanism.variance)  # eq. 8
        log_alpha = penalty_log_acceptance(d_hat, std, float(prior1 - prior0), 0.0, self.temperature)
        accepted, accept = accept_reject(log_alpha, self.rng)
        return (proposal if accepted else theta), TransitionInfo(d_hat, accept, accepted)
