"""Tight (ε, δ) accounting for compositions of Gaussian mechanisms.

A Gaussian mechanism whose output has L2 sensitivity Δ (under the chosen neighbouring
relation) and noise standard deviation σ has privacy-loss parameter

    μ = Δ² / (2 σ²),

the μ of Sommer, Meiser and Mohammadi (2019, Lemma 12), which equals the zCDP ρ and half
the square of the GDP parameter μ_G = Δ/σ. Composition of any number of Gaussian
mechanisms, adaptive or not and with different Δ/σ, is again of this form with the μ's
added. The tight privacy profile is

    δ(ε) = ½ [erfc((ε − μ)/(2√μ)) − e^ε erfc((ε + μ)/(2√μ))],

equivalently Φ(−ε/μ_G + μ_G/2) − e^ε Φ(−ε/μ_G − μ_G/2) (Dong, Roth and Su 2022,
Corollary 2.13; Balle and Wang 2018, Theorem 8). Nothing here depends on data.

References
----------
.. [1] Sommer, D. M., Meiser, S. and Mohammadi, E. (2019). Privacy loss classes: the central
   limit theorem in differential privacy. PoPETs 2019(2), Lemma 12.
.. [2] Räisä, O., Koskela, A. and Honkela, A. (2021). Differentially private Hamiltonian
   Monte Carlo. Theorem 3.3.
"""

from __future__ import annotations

import math
import numbers

from scipy import optimize, special

from pymc_dp._validation import check_finite_positive, check_unit_interval_open
from pymc_dp.accounting._floats import round_towards_privacy

__all__ = ["gaussian_delta", "gaussian_epsilon", "gaussian_mu_for_target"]


def _check_mu(mu: float) -> float:
    if isinstance(mu, bool) or not isinstance(mu, numbers.Real) or not (math.isfinite(mu) and mu >= 0):
        raise ValueError(f"`mu` must be a finite non-negative number. Found {mu!r}.")
    return float(mu)


def _check_epsilon(epsilon: float) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or math.isnan(epsilon) or epsilon < 0:
        raise ValueError(f"`epsilon` must be a non-negative number. Found {epsilon!r}.")
    return float(epsilon)


def _log_delta(epsilon: float, mu: float) -> float:
    """log δ(ε; μ), evaluated with erfcx so that it stays accurate deep in the tail."""
    if mu == 0.0:
        return -math.inf
    if math.isinf(epsilon):
        return -math.inf
    s = 2.0 * math.sqrt(mu)
    x1 = (epsilon - mu) / s
    x2 = (epsilon + mu) / s
    # e^ε erfc(x2) = erfcx(x2) exp(-x2²+ε) and -x2² + ε = -x1², so both terms share exp(-x1²).
    if x1 >= 0.0:
        diff = special.erfcx(x1) - special.erfcx(x2)
        if diff <= 0.0:
            return -math.inf
        return math.log(0.5) - x1 * x1 + math.log(diff)
    value = 0.5 * (special.erfc(x1) - special.erfcx(x2) * math.exp(-x1 * x1))
    return math.log(value) if value > 0 else -math.inf


def gaussian_delta(epsilon: float, mu: float) -> float:
    """Tight δ(ε) of a composition of Gaussian mechanisms with total ``mu``.

    Parameters
    ----------
    epsilon : float
        ε ≥ 0.
    mu : float
        Total μ = Σ Δᵢ²/(2σᵢ²) of the composed mechanisms (Sommer et al. 2019, Lemma 12).

    Returns
    -------
    float
        The smallest δ for which the composition is (ε, δ)-DP.
    """
    return math.exp(_log_delta(_check_epsilon(epsilon), _check_mu(mu)))


def gaussian_epsilon(delta: float, mu: float) -> float:
    """Tight ε(δ) of a composition of Gaussian mechanisms with total ``mu``.

    The root of δ(ε; μ) = δ is found with Brent's method to 1e-13 relative tolerance and
    then moved up until δ(ε) ≤ δ holds in floating point, so the result is never below the
    exact ε by more than rounding.

    Parameters
    ----------
    delta : float
        Target δ in (0, 1).
    mu : float
        Total μ of the composition.

    Returns
    -------
    float
        ε ≥ 0.
    """
    delta = check_unit_interval_open("delta", delta)
    mu = _check_mu(mu)
    log_target = math.log(delta)

    def excess(eps: float) -> float:
        return _log_delta(eps, mu) - log_target

    if excess(0.0) <= 0.0:
        return 0.0
    hi = max(1.0, 2.0 * mu)
    while excess(hi) > 0.0:
        hi *= 2.0
    eps = optimize.brentq(excess, 0.0, hi, xtol=1e-14, rtol=1e-13, maxiter=500)
    return round_towards_privacy(eps, lambda e: excess(e) <= 0.0, math.inf)


def gaussian_mu_for_target(epsilon: float, delta: float) -> float:
    """Largest total μ whose composition is (ε, δ)-DP.

    Parameters
    ----------
    epsilon : float
        Target ε > 0.
    delta : float
        Target δ in (0, 1).

    Returns
    -------
    float
        μ* with δ(ε; μ*) ≤ δ (moved down to be conservative in floating point).
    """
    epsilon = check_finite_positive("epsilon", epsilon)
    delta = check_unit_interval_open("delta", delta)
    log_target = math.log(delta)

    def excess(log_mu: float) -> float:
        return _log_delta(epsilon, math.exp(log_mu)) - log_target

    lo, hi = -60.0, math.log(max(1.0, 4.0 * epsilon))
    while excess(hi) < 0.0:
        hi += 2.0
    log_mu = optimize.brentq(excess, lo, hi, xtol=1e-15, rtol=1e-14, maxiter=500)
    return round_towards_privacy(math.exp(log_mu), lambda mu: _log_delta(epsilon, mu) <= log_target, 0.0)
