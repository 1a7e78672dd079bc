"""Poisson-subsampled Gaussian releases, priced by privacy-loss distributions (PLD).

A DPADVI iteration releases ``sum_{i in S} clip(g_i) + N(0, (σΔ)² I)`` where every row joins
the batch S independently with probability q (Poisson sampling), rows are clipped to L2
norm C, and Δ is the sensitivity of the clipped sum over all rows: 2C when one row is
replaced (substitute) and C when one is added or removed. σ is the *noise multiplier*.

The tight ε of T such releases comes from ``dp_accounting``'s PLD accountant (connect-the-
dots, pessimistic discretisation, an upper bound on ε). Its conventions, checked against the
reference values of ``notes/accounting.md`` §2(b):

* add/remove: ``PoissonSampledDpEvent(q, GaussianDpEvent(σ))`` under ``ADD_OR_REMOVE_ONE``;
* substitute: ``REPLACE_ONE`` with noise multiplier 2σ (dp_accounting measures the noise in
  units of the per-row bound C, and the worst pair there is (1−q)N(0, s²) + qN(±1, s²)).

At q = 1 both reduce to the Gaussian mechanism with multiplier σ. An RDP curve is also
available (for composition with mechanisms only known through RDP, e.g. DPBarkerMH):
``dp_accounting``'s Poisson-subsampled Gaussian under add/remove, and a numerical integral
of the worst pair above under substitute, which ``dp_accounting``'s RDP accountant does not
support.

References
----------
.. [1] Koskela, A., Jälkö, J. and Honkela, A. (2020). Computing tight differential privacy
   guarantees using FFT. AISTATS.
.. [2] Doroshenko, V., Ghazi, B., Kamath, P., Kumar, R. and Manurangsi, P. (2022).
   Connect the dots: tighter discrete approximations of privacy loss distributions. PoPETs.
.. [3] Mironov, I., Talwar, K. and Zhang, L. (2019). Rényi differential privacy of the
   sampled Gaussian mechanism. arXiv:1908.10530 (add/remove RDP curve).
.. [4] Jälkö, J., Dikmen, O. and Honkela, A. (2017). Differentially private variational
   inference for non-conjugate models. UAI, Algorithm 1 (noise 2σC under substitution).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as plds
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_poisson_subsampled_gaussian
from scipy import special

from pymc_dp._validation import (
    check_finite_positive,
    check_neighbouring,
    check_sampling_rate,
    check_unit_interval_open,
)

__all__ = [
    "PLD_MAX_EPSILON",
    "PLD_VALUE_DISCRETIZATION",
    "compose_plds",
    "gaussian_pld",
    "pld_discretization",
    "pld_epsilon",
    "poisson_gaussian_pld",
    "poisson_gaussian_rdp",
]

#: Value discretisation interval of the PLDs behind reported ε (pessimistic, so an upper
#: bound). 1e-4 reproduces the Fourier and PRV accountants to 1e-5 on notes §2(b).
PLD_VALUE_DISCRETIZATION = 1e-4

#: Up to this ε the PLD is discretised at :data:`PLD_VALUE_DISCRETIZATION`; above it the interval doubles
#: each time ε doubles (:func:`pld_discretization`).
PLD_FINE_EPSILON = 10.0


def pld_discretization(epsilon_bound: float) -> float:
    """Value discretisation interval for a PLD whose ε is at most ``epsilon_bound`` (an RDP bound).

    :data:`PLD_VALUE_DISCRETIZATION` up to ε = :data:`PLD_FINE_EPSILON`, then doubled each time the
    bound doubles (1e-4 · 2^⌈log₂(bound/10)⌉), so the interval relative to ε never exceeds twice its
    value at ε = 10, and it stays the same over most steps of a calibration's search (the PLDs of
    fixed releases are then built once: :func:`poisson_gaussian_pld` is cached). The PLD's support
    spans the privacy loss, so at a fixed interval its size and cost grow with ε (a run calibrated to
    ε = 50 spent minutes building PLDs of millions of points); the pessimistic discretisation stays an
    upper bound on ε at every interval. Depends only on public settings, through the bound.
    """
    bound = float(epsilon_bound)
    if not math.isfinite(bound) or bound <= PLD_FINE_EPSILON:
        return PLD_VALUE_DISCRETIZATION
    return PLD_VALUE_DISCRETIZATION * 2.0 ** math.ceil(math.log2(bound / PLD_FINE_EPSILON))


def _substitute_rdp(sampling_rate: float, noise_std: float, orders: np.ndarray) -> np.ndarray:
    """RDP of (1−q)N(0, s²) + qN(1, s²) against (1−q)N(0, s²) + qN(−1, s²), by quadrature.

    D_α(P‖Q) = log ∫ p^α q^(1−α) dx / (α − 1). The pair is symmetric under x → −x, so this
    is also D_α(Q‖P). The integrand is log-concave-like with its mass within a few s of a
    point between −1 and 2α − 1; the trapezoid rule on a grid of step s/40 over that range
    (with 12 s margins) is accurate to far below the precision ε is reported with (tested
    against mpmath).
    """
    q, s = sampling_rate, noise_std
    out = np.empty(len(orders))
    log_q, log_1mq = math.log(q), math.log1p(-q) if q < 1 else -math.inf
    for k, alpha in enumerate(orders):
        lo, hi = -1.0 - 12.0 * s, 2.0 * alpha - 1.0 + 12.0 * s
        x = np.linspace(lo, hi, math.ceil((hi - lo) / (s / 40.0)) + 1)
        base = -0.5 * (x / s) ** 2
        log_p = np.logaddexp(log_1mq + base, log_q - 0.5 * ((x - 1.0) / s) ** 2)
        log_qd = np.logaddexp(log_1mq + base, log_q - 0.5 * ((x + 1.0) / s) ** 2)
        f = alpha * log_p + (1.0 - alpha) * log_qd - math.log(s * math.sqrt(2.0 * math.pi))
        log_integral = special.logsumexp(f) + math.log(x[1] - x[0])
        out[k] = max(log_integral, 0.0) / (alpha - 1.0)
    return out


def poisson_gaussian_rdp(
    noise_multiplier: float, sampling_rate: float, orders: np.ndarray, neighbouring: str = "substitute"
) -> np.ndarray:
    """RDP curve of one Poisson-subsampled Gaussian release.

    Parameters
    ----------
    noise_multiplier : float
        σ = noise std / Δ, with Δ the sensitivity of the full clipped sum (2C substitute, C
        add/remove).
    sampling_rate : float
        q in (0, 1].
    orders : array of float
        Orders α > 1.
    neighbouring : {"substitute", "add_remove"}
        The relation σ was calibrated for.

    Returns
    -------
    ndarray
        r(α) at ``orders``.

    Notes
    -----
    Add/remove: ``dp_accounting``'s curve for the sampled Gaussian mechanism (Mironov et al.
    2019). Substitute: the numerical Rényi divergence of the worst pair (module docstring);
    at q = 1 it equals α/(2σ²), the Gaussian mechanism with multiplier σ.
    """
    sigma = check_finite_positive("noise_multiplier", noise_multiplier)
    q = check_sampling_rate("sampling_rate", sampling_rate)
    neighbouring = check_neighbouring("neighbouring", neighbouring)
    orders = np.asarray(orders, dtype=float)
    if neighbouring == "add_remove":
        return np.asarray(_compute_rdp_poisson_subsampled_gaussian(q, sigma, orders), dtype=float)
    if q == 1.0:
        return orders / (2.0 * sigma**2)
    return _substitute_rdp(q, 2.0 * sigma, orders)


def gaussian_pld(mu: float, value_discretization_interval: float = PLD_VALUE_DISCRETIZATION):
    """PLD of a Gaussian composition of total μ (one Gaussian with Δ/σ = √(2μ)); ``None`` if μ = 0."""
    if mu <= 0:
        return None
    return plds.from_gaussian_mechanism(
        standard_deviation=1.0 / math.sqrt(2.0 * mu),
        sensitivity=1.0,
        value_discretization_interval=value_discretization_interval,
    )


@functools.lru_cache(maxsize=64)
def poisson_gaussian_pld(
    noise_multiplier: float,
    sampling_rate: float,
    count: int,
    neighbouring: str,
    value_discretization_interval: float = PLD_VALUE_DISCRETIZATION,
):
    """PLD of ``count`` Poisson-subsampled Gaussian releases (module docstring's conventions), cached.

    ``None`` if ``count`` is 0. Privacy-loss distributions are not changed by composing them, so the
    cached object is shared; a calibration's search composes the same fixed releases at every step.
    """
    if count == 0:
        return None
    if neighbouring == "substitute":
        std, relation = 2.0 * noise_multiplier, NeighboringRelation.REPLACE_ONE
    else:
        std, relation = noise_multiplier, NeighboringRelation.ADD_OR_REMOVE_ONE
    one = plds.from_gaussian_mechanism(
        standard_deviation=std,
        sensitivity=1.0,
        value_discretization_interval=value_discretization_interval,
        sampling_prob=sampling_rate,
        neighboring_relation=relation,
    )
    return one.self_compose(count) if count > 1 else one


def compose_plds(plds_to_compose: list):
    """The composition of privacy-loss distributions (``None`` entries skipped; ``None`` if none are left)."""
    present = [p for p in plds_to_compose if p is not None]
    if not present:
        return None
    total = present[0]
    for p in present[1:]:
        total = total.compose(p)
    return total


def pld_epsilon(plds_to_compose: list, delta: float) -> float:
    """ε at ``delta`` of the composition of privacy-loss distributions (``None`` entries skipped)."""
    delta = check_unit_interval_open("delta", delta)
    total = compose_plds(plds_to_compose)
    return 0.0 if total is None else float(total.get_epsilon_for_delta(delta))


#: Above this RDP ε the PLD is not attempted: its support (and memory) grows with the privacy
#: loss, and at such ε the RDP bound is what is reported.
PLD_MAX_EPSILON = 100.0
