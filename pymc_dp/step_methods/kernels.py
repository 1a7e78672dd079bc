"""One kernel per algorithm: the DP samplers' transitions as pure functions that every backend runs.

The BlackJAX layout (``blackjax/mcmc/*.py``): each transition is a function
``kernel(ops, releases, state, draws, settings) -> (state, info)`` with

- ``ops``, an :class:`ArrayOps`: the array namespace (NumPy or ``jax.numpy``) and the three
  control-flow primitives a kernel needs (a fixed-length loop, a lazy branch, a select);
- ``releases``, a :class:`Releases`: the released, noised sums of the mechanism layer and the
  exact (data-free) prior. The kernel never sees a row and never draws mechanism noise: a
  release draws its own noise (on the host from the step's noise source; on the JAX backend
  from standard normals the host drew in the same order);
- ``draws``, the step's own randomness for one iteration (proposal increments, momenta, log U),
  drawn by the caller from the step's generator, so a block of iterations can draw ahead;
- ``settings``, public settings (``int`` and ``bool`` fields are static for a compiled backend).

The host loop (:meth:`pymc_dp.step_methods.base.DPStep.transition`) calls a kernel with
:data:`NUMPY_OPS` and releases that call the step's mechanisms; the JAX backend jits the same
function inside ``lax.scan`` with its own ops and device releases, and never names a sampler.
This module imports nothing from the package: it is plain arithmetic.

References
----------
.. [1] Cabezas, A., Corenflos, A., Lao, J. and Louf, R. (2024). BlackJAX: Composable Bayesian
   inference in JAX. arXiv:2402.10797 (the kernel / state / info layout).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import numpy as np

__all__ = [
    "NUMPY_OPS",
    "ADVIInfo",
    "ADVISettings",
    "ArrayOps",
    "BarkerDraws",
    "BarkerInfo",
    "HMCDraws",
    "HMCInfo",
    "HMCSettings",
    "PenaltyDraws",
    "PenaltyInfo",
    "Releases",
    "adaptive_hmc_kernel",
    "advi_gradient",
    "advi_kernel",
    "barker_kernel",
    "dual_averaging_update",
    "hmc_kernel",
    "kinetic_energy",
    "leapfrog",
    "metropolis_decision",
    "penalty_kernel",
    "penalty_log_acceptance",
]


class ArrayOps(NamedTuple):
    """An array namespace and the control flow a kernel needs, for one backend.

    Attributes
    ----------
    xp : module
        ``numpy`` or ``jax.numpy``.
    loop : callable
        ``loop(count, body, carry, stop)``: ``carry = body(i, carry)`` for i = 0 … count − 1.
        ``stop(carry)`` may end the loop early where the backend can (NumPy: checked after each
        body; a compiled loop runs every body, so a kernel must give the same result either way).
    when : callable
        ``when(condition, compute, otherwise)``: ``compute()`` where ``condition`` holds, else
        ``otherwise``. NumPy calls ``compute`` only when needed (a release not made is not drawn);
        a compiled backend computes both and selects.
    select : callable
        ``select(condition, a, b)``: ``a`` where ``condition`` holds, else ``b`` (values).
    """

    xp: Any
    loop: Callable[..., Any]
    when: Callable[..., Any]
    select: Callable[..., Any]


def _numpy_loop(count: int, body: Callable, carry: Any, stop: Callable | None = None) -> Any:
    for i in range(int(count)):
        carry = body(i, carry)
        if stop is not None and stop(carry):
            break
    return carry


def _numpy_when(condition: Any, compute: Callable[[], Any], otherwise: Any) -> Any:
    return compute() if condition else otherwise


def _numpy_select(condition: Any, a: Any, b: Any) -> Any:
    return a if condition else b


#: The host's :class:`ArrayOps`: NumPy, a Python loop that stops early, lazy branches.
NUMPY_OPS = ArrayOps(np, _numpy_loop, _numpy_when, _numpy_select)


class Releases(Protocol):
    """What a kernel may ask of the mechanism layer: released values and the exact prior.

    Every method that reads rows returns a clipped sum plus Gaussian noise, priced before the
    run by the step's accounting; the noise is drawn inside (a kernel passes no randomness to
    a release). The prior reads no row.
    """

    def prior_logp(self, theta: Any) -> Any:
        """log p(θ) with transform Jacobians (exact: no data)."""

    def prior_grad(self, theta: Any) -> Any:
        """∇ log p(θ) (exact: no data)."""

    def gradient(self, theta: Any, index: Any) -> Any:
        """The released clipped gradient sum at θ: the ``index``-th gradient release of this iteration."""

    def ratio(self, theta: Any, proposal: Any, valid: Any) -> tuple[Any, Any, Any]:
        """(λ̂, σ, released) for θ → θ′: the clipped log-likelihood ratio sum plus N(0, σ²).

        Nothing is released where ``valid`` is false, or where the bound b‖θ′ − θ‖ or σ is not
        finite; ``released`` says whether a release was made (λ̂ is then meaningless).
        """

    def barker(self, theta: Any, proposal: Any) -> Any:
        """The released Barker statistic z for θ → θ′ (Heikkilä et al. 2019, eq. 9 or 18)."""

    def barker_correction(self) -> Any:
        """V_cor, the draw that completes the Barker test's logistic noise."""

    def batch_gradient(self, thetas: Any, jacobians: Any) -> Any:
        """DPADVI's release: a Poisson batch's clipped gradient sum in the variational parameters, noised, ÷ q."""

    def keep(self, accepted: Any) -> None:
        """Which point the chain kept after the last ratio or Barker release (a release's cache)."""


# -- shared arithmetic --------------------------------------------------------------------------
def penalty_log_acceptance(
    noisy_llr: float,
    noise_std: float,
    log_prior_ratio: float,
    log_proposal_ratio: float = 0.0,
    temperature: float = 1.0,
) -> float:
    """Log acceptance probability of the penalty test (before taking min with 0).

    With λ̂ ~ N(λ, σ²) an unbiased noisy log-likelihood ratio, accepting with probability
    min{1, exp(T λ̂ − (Tσ)²/2 + log prior ratio + log proposal ratio)} leaves the
    (tempered) posterior p(θ) p(X | θ)^T invariant (Ceperley and Dewing 1999), since T λ̂ is
    an unbiased N(Tλ, (Tσ)²) estimate of the tempered ratio. Plain arithmetic: it runs on
    floats, NumPy and JAX values alike.

    Parameters
    ----------
    noisy_llr : float
        λ̂, the released noisy log-likelihood ratio.
    noise_std : float
        σ, the standard deviation of the noise in λ̂.
    log_prior_ratio : float
        log p(θ′) − log p(θ), including transform Jacobians (exact: no data).
    log_proposal_ratio : float, default 0
        log q(θ | θ′) − log q(θ′ | θ); zero for a symmetric random walk.
    temperature : float, default 1
        T, the power of the likelihood.

    Returns
    -------
    float
        log α̂ (may be positive; the acceptance probability is min(1, exp(log α̂))).

    References
    ----------
    .. [1] Yıldırım, S. and Ermiş, B. (2019). Exact MCMC with differentially private moves.
       Statistics and Computing 29, §2 and Algorithm 1.
    .. [2] Ceperley, D. M. and Dewing, M. (1999). The penalty method for random walks with
       uncertain energies. J. Chem. Phys. 110.
    """
    scaled_std = temperature * noise_std
    return temperature * noisy_llr - 0.5 * scaled_std * scaled_std + log_prior_ratio + log_proposal_ratio


def dual_averaging_update(state, accept, mu, target: float, gamma: float, k: float, t0: float, xp=np):
    """One step of Nesterov's dual averaging of log η on an acceptance statistic.

    ``state`` = (log η, log η̄, H̄, m) with m the step count (from 1); returns the next state:
    H̄ ← (1 − w) H̄ + w (δ − a) with w = 1/(m + t₀), log η ← μ − √m H̄ / γ, log η̄ ← m^(−κ) log η +
    (1 − m^(−κ)) log η̄, m ← m + 1. Plain arithmetic (``xp``: NumPy or ``jax.numpy``).

    References
    ----------
    .. [1] Hoffman, M. D. and Gelman, A. (2014). The No-U-Turn sampler. JMLR 15, §3.2.1,
       eq. (6) and Algorithm 5; the rule of PyMC's ``DualAverageAdaptation``.
    """
    log_step, log_bar, hbar, count = state
    w = 1.0 / (count + t0)
    hbar = (1 - w) * hbar + w * (target - accept)
    log_step = mu - hbar * xp.sqrt(count) / gamma
    mk = count**-k
    log_bar = mk * log_step + (1 - mk) * log_bar
    return log_step, log_bar, hbar, count + 1


def kinetic_energy(momentum, inv_mass, xp=np):
    """½ pᵀ M⁻¹ p: M⁻¹ a vector (diagonal mass) or, for a centred DPHMC, a P × P matrix (dense mass)."""
    if np.ndim(inv_mass) == 2:  # the dense mass of a second-order centred DPHMC (static shape: one branch traced)
        return 0.5 * xp.dot(inv_mass @ momentum, momentum)
    return 0.5 * xp.dot(momentum * inv_mass, momentum)


def metropolis_decision(xp, log_alpha, log_uniform):
    """The Metropolis rule: (log U < log α, min(1, e^{log α})); a NaN log α is rejected with probability 0.

    The rule of :func:`pymc_dp.step_methods.base.accept_reject` with U drawn ahead by the caller.
    """
    nan = xp.isnan(log_alpha)
    accept = xp.where(nan, 0.0, xp.exp(xp.minimum(0.0, xp.where(nan, 0.0, log_alpha))))
    return log_uniform < log_alpha, accept


# -- DPPenaltyMH ----------------------------------------------------------------------------------
class PenaltyDraws(NamedTuple):
    """One DPPenaltyMH iteration's own randomness: the increment s·z and log U."""

    increment: Any
    log_uniform: Any


class PenaltyInfo(NamedTuple):
    """What a penalty transition released (λ̂; NaN where none) and decided (P(accept), the decision)."""

    noisy_llr: Any
    accept: Any
    accepted: Any


def penalty_kernel(ops: ArrayOps, releases: Releases, theta, draws: PenaltyDraws, temperature):
    """Algorithm 1 of Yıldırım and Ermiş (2019): θ′ = θ + s·z, release λ̂, the penalty test.

    Parameters
    ----------
    ops : ArrayOps
        The backend's array namespace and control flow.
    releases : Releases
        Its ``ratio`` is the clipped log-likelihood ratio sum at bound b‖θ′ − θ‖ plus N(0, σ²).
    theta : array
        The current point (flat, unconstrained).
    draws : PenaltyDraws
        The increment and log U.
    temperature : float
        T, the power of the likelihood.

    Returns
    -------
    (theta, PenaltyInfo)

    Notes
    -----
    One ratio release per iteration (none where θ′ or its bound is not finite: rejected);
    the neighbouring relation and its sensitivity are those of the release.
    """
    xp = ops.xp
    proposal = theta + draws.increment
    noisy_llr, noise_std, released = releases.ratio(theta, proposal, xp.all(xp.isfinite(proposal)))
    safe = ops.select(released, proposal, theta)
    log_prior_ratio = releases.prior_logp(safe) - releases.prior_logp(theta)
    log_alpha = ops.when(
        released,
        lambda: penalty_log_acceptance(noisy_llr, noise_std, log_prior_ratio, 0.0, temperature),
        -np.inf,
    )
    accepted, accept = metropolis_decision(xp, log_alpha, draws.log_uniform)
    releases.keep(accepted)
    return ops.select(accepted, safe, theta), PenaltyInfo(ops.select(released, noisy_llr, np.nan), accept, accepted)


# -- DPHMC ----------------------------------------------------------------------------------------
class HMCDraws(NamedTuple):
    """One DPHMC iteration's own randomness: p ~ N(0, M), the (jittered) step size η, log U.

    For :func:`adaptive_hmc_kernel`, ``step_size`` is the jitter factor that multiplies the
    dual averaging's η.
    """

    momentum: Any
    step_size: Any
    log_uniform: Any


class HMCSettings(NamedTuple):
    """DPHMC's public settings for a transition: M⁻¹ (diagonal: a vector; a centred DPHMC's dense mass: P × P), T, L;
    for tuning the dual averaging's constants."""

    inv_mass: Any
    temperature: Any
    n_leapfrog: int
    adaptation: Any = None  # (μ, δ, γ, κ, t₀) while tuning


class HMCInfo(NamedTuple):
    """A DPHMC transition's releases and decision, and the step size it used."""

    noisy_llr: Any
    accept: Any
    accepted: Any
    step_size: Any


def leapfrog(ops: ArrayOps, theta, momentum, step_size, n_steps: int, inv_mass, gradient: Callable[[Any, Any], Any]):
    """``n_steps`` leapfrog steps for H(θ, p) = −log π(θ) + ½ pᵀ M⁻¹ p (eq. (1) of Räisä et al. 2021).

    ``gradient(θ, i)`` returns (an estimate of) ∇ log π at the i-th point of the trajectory
    (i = 0 … n_steps); with a noisy gradient every call is a fresh release. Half momentum steps
    open and close the trajectory. Where the trajectory leaves the finite numbers no further
    gradient is asked for (NumPy stops there; a compiled loop keeps the momentum and moves on,
    so the end point is not finite either way and the caller rejects it).

    Returns
    -------
    (theta, momentum)
        End point (momentum not negated).
    """
    xp = ops.xp
    dense = np.ndim(inv_mass) == 2  # static: the shape, not a value

    def finite(point, p):
        return xp.all(xp.isfinite(point)) & xp.all(xp.isfinite(p))

    def leap(i, carry):
        point, p = carry
        if dense:  # a centred DPHMC's dense mass (P × P M⁻¹); the diagonal expression below is unchanged
            point = point + step_size * (inv_mass @ p)
        else:
            point = point + step_size * inv_mass * p
        weight = ops.select(i < n_steps - 1, step_size, 0.5 * step_size)
        p = ops.when(finite(point, p), lambda: p + weight * gradient(point, i + 1), p)
        return point, p

    p = momentum + 0.5 * step_size * gradient(theta, 0)
    return ops.loop(n_steps, leap, (theta, p), lambda carry: not finite(*carry))


def hmc_kernel(ops: ArrayOps, releases: Releases, theta, draws: HMCDraws, settings: HMCSettings):
    """One DPHMC transition (Räisä et al. 2021, Algorithm 1): L leapfrog steps on released gradients, the penalty test.

    The gradient of the log target at each of the L + 1 points is ∇ log p(θ) + T ĝ(θ) with ĝ a
    fresh release (clipped per-row gradient sum plus Gaussian noise); half momentum steps open
    and close the trajectory. A trajectory that leaves the finite numbers is rejected without a
    ratio release (NumPy stops releasing gradients there; a compiled backend computes them and
    discards the result: a function of released values only, and never more releases than
    accounted). Otherwise λ̂ is released for θ → θ′ and the move accepted with
    min{1, exp(T λ̂ − (Tσ)²/2 + log p(θ′) − log p(θ) + ½pᵀM⁻¹p − ½p′ᵀM⁻¹p′)}.

    Returns
    -------
    (theta, HMCInfo)

    Notes
    -----
    L + 1 gradient releases and one ratio release per iteration, each with the sensitivity and
    neighbouring relation of its mechanism.

    References
    ----------
    .. [1] Räisä, O., Koskela, A. and Honkela, A. (2021). Differentially private Hamiltonian
       Monte Carlo. arXiv:2106.09376, Algorithm 1 and eq. (1).
    """
    xp = ops.xp
    step_size, inv_mass, temperature, n_leapfrog = (
        draws.step_size,
        settings.inv_mass,
        settings.temperature,
        settings.n_leapfrog,
    )

    def log_target_gradient(point, index):
        return releases.prior_grad(point) + temperature * releases.gradient(point, index)

    proposal, p_end = leapfrog(ops, theta, draws.momentum, step_size, n_leapfrog, inv_mass, log_target_gradient)
    finite = xp.all(xp.isfinite(proposal)) & xp.all(xp.isfinite(p_end))
    noisy_llr, noise_std, released = releases.ratio(theta, proposal, finite)
    safe = ops.select(released, proposal, theta)

    def log_acceptance():
        log_prior_ratio = releases.prior_logp(safe) - releases.prior_logp(theta)
        kinetic_change = kinetic_energy(draws.momentum, inv_mass, xp) - kinetic_energy(p_end, inv_mass, xp)
        return penalty_log_acceptance(noisy_llr, noise_std, log_prior_ratio, kinetic_change, temperature)

    log_alpha = ops.when(released, log_acceptance, -np.inf)
    accepted, accept = metropolis_decision(xp, log_alpha, draws.log_uniform)
    releases.keep(accepted)
    info = HMCInfo(ops.select(released, noisy_llr, np.nan), accept, accepted, step_size)
    return ops.select(accepted, safe, theta), info


def adaptive_hmc_kernel(ops: ArrayOps, releases: Releases, state, draws: HMCDraws, settings: HMCSettings):
    """:func:`hmc_kernel` while tuning: η = exp(log η) of the dual averaging times the jitter factor.

    ``state`` = (θ, (log η, log η̄, H̄, m)); the dual averaging (:func:`dual_averaging_update`)
    steps on the iteration's acceptance probability, a released value (no privacy cost).
    """
    theta, averaging = state
    step_size = ops.xp.exp(averaging[0]) * draws.step_size
    theta, info = hmc_kernel(ops, releases, theta, draws._replace(step_size=step_size), settings)
    mu, target, gamma, k, t0 = settings.adaptation
    averaging = dual_averaging_update(averaging, info.accept, mu, target, gamma, k, t0, xp=ops.xp)
    return (theta, averaging), info


# -- DPBarkerMH -----------------------------------------------------------------------------------
class BarkerDraws(NamedTuple):
    """One DPBarkerMH iteration's own randomness: the increment s·z (V_cor comes with the release's noise)."""

    increment: Any


class BarkerInfo(NamedTuple):
    """The released z, the test statistic z + log prior ratio, and the decision."""

    released: Any
    log_alpha: Any
    accepted: Any


def barker_kernel(ops: ArrayOps, releases: Releases, theta, draws: BarkerDraws, settings: Any = None):
    """One DPBarkerMH transition: θ′ = θ + s·z, release z, accept iff z + log prior ratio + V_cor > 0.

    With z ~ N(Δ_lik, C) and V_cor from the correction distribution, the decision has the
    logistic (Barker) acceptance probability σ(Δ) up to the correction's error (Heikkilä et al.
    2019, eq. 9; eq. 18 for the subsampled z). A NaN statistic is rejected.

    Notes
    -----
    One release of the Barker statistic per iteration (full data: a Gaussian mechanism;
    subsampled: the subsampled mechanism of Theorem 2), with the neighbouring relation of the
    release.

    References
    ----------
    .. [1] Heikkilä, M., Jälkö, J., Dikmen, O. and Honkela, A. (2019). Differentially private
       Markov chain Monte Carlo. NeurIPS 32, §3, eq. 9 and 18.
    """
    proposal = theta + draws.increment
    released = releases.barker(theta, proposal)
    log_alpha = released + (releases.prior_logp(proposal) - releases.prior_logp(theta))
    correction = releases.barker_correction()
    accepted = log_alpha + correction > 0.0  # a NaN statistic is rejected
    releases.keep(accepted)
    return ops.select(accepted, proposal, theta), BarkerInfo(released, log_alpha, accepted)


# -- DPADVI ---------------------------------------------------------------------------------------
class ADVISettings(NamedTuple):
    """DPADVI's public settings for an update: the family, the optimiser, θ's order map, P (all fixed for a fit)."""

    family: Any
    optimizer: Any
    to_rows: tuple[int, ...]
    n_params: int


class ADVIInfo(NamedTuple):
    """The draws' mean and the released log-likelihood gradient's μ block (data order): the fit's trace."""

    mean: Any
    released: Any


def advi_kernel(ops: ArrayOps, releases: Releases, state, draws, settings: ADVISettings):
    """One DPADVI update: the DP estimate of ∇ELBO at the variational parameters, then the optimiser's step.

    θ_s = μ + Lε_s for the Monte Carlo draws ε (``draws``, S × P); the data term is one release
    of the Poisson batch's clipped sum of per-row gradients in the variational parameters,
    mean_s ∇θ log p(xᵢ | θ_s) M_s (M_s the reparameterisation's Jacobian), plus Gaussian noise,
    divided by the sampling rate q; the prior and entropy terms read no data and are exact.

    Parameters
    ----------
    ops : ArrayOps
        The backend's array namespace and control flow.
    releases : Releases
        Its ``batch_gradient(θ draws, Jacobians)`` is the release.
    state : tuple
        (packed variational parameters, the optimiser's state).
    draws : array
        ε, S × P.
    settings : ADVISettings
        The family, the optimiser, θ's order map and P.

    Returns
    -------
    ((parameters, optimiser state), ADVIInfo)

    Notes
    -----
    One release per update, with the sensitivity and neighbouring relation of the Poisson
    gradient sum (Poisson sampling at rate q, add/remove or substitute neighbours).

    References
    ----------
    .. [1] Jälkö, J., Dikmen, O. and Honkela, A. (2017). Differentially private variational
       inference for non-conjugate models. UAI, §3 and Algorithm 1.
    """
    packed, optimizer_state = state
    gradient, info = advi_gradient(ops, releases, packed, draws, settings)
    updated, optimizer_state = settings.optimizer.update(packed, gradient, optimizer_state, xp=ops.xp)
    return (updated, optimizer_state), info


def advi_gradient(ops: ArrayOps, releases: Releases, packed, draws, settings: ADVISettings):
    """The DP estimate of ∇ELBO at ``packed`` for the Monte Carlo draws ``draws`` (S × P): one release.

    Returns (gradient, ADVIInfo); see :func:`advi_kernel`.
    """
    xp = ops.xp
    family, to_rows = settings.family, xp.asarray(settings.to_rows)
    thetas = family.draws(packed, draws, xp)[:, to_rows]  # (S, P) in the data layer's order
    # θ_rows = θ_approx[to_rows], so a gradient in the data layer's order maps through M_s[to_rows].
    jacobians = [family.parameter_jacobian(packed, draws[s], xp)[to_rows] for s in range(draws.shape[0])]
    data_part = releases.batch_gradient(thetas, jacobians)
    # Prior, Jacobian and entropy terms read no data: exact, neither clipped nor noised.
    prior_part = releases.prior_grad(thetas[0]) @ jacobians[0]
    for s in range(1, len(jacobians)):
        prior_part = prior_part + releases.prior_grad(thetas[s]) @ jacobians[s]
    gradient = data_part + prior_part / len(jacobians) + family.entropy_gradient(packed, xp)
    return gradient, ADVIInfo(thetas.mean(axis=0), data_part[: settings.n_params][to_rows])
