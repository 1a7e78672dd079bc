"""Composition: ε at δ of a list of privacy events, the accountant of :mod:`pymc_dp.accounting.events`.

The events (:mod:`pymc_dp.accounting.events`) say what each mechanism released and under which
assumptions; this module turns a list of them into one (ε, δ) guarantee. It chooses the tightest
method that covers every event:

- all Gaussian releases: the exact closed form, μ's added (Sommer et al. 2019, Lemma 12);
- pure ε-DP releases only: ε's added, δ = 0 allowed (Dwork and Roth 2014, Thm 3.16);
- Gaussian and Poisson-subsampled Gaussian releases: privacy-loss distributions
  (``dp_accounting``, pessimistic discretisation: an upper bound), or RDP where the PLD would be
  huge;
- anything with an RDP curve: RDP on :data:`~pymc_dp.accounting.rdp.DEFAULT_ORDERS` plus the
  curves' own orders, converted with the improved conversion (Balle et al. 2020, Theorem 21),
  against a PLD of the Poisson-Gaussian part plus the RDP of the rest at a split δ; with pure
  releases present, also the basic sum Σε_pure + ε_rest(δ). The smallest valid ε is reported.

Every event answers :meth:`rdp_at` (its total RDP curve at given orders), so RDP composition needs
no knowledge of the event's kind. Composition is adaptive: each release may depend on the
outputs of the ones before. A pure function of public settings; nothing here depends on data.

References
----------
.. [1] Sommer, D. M., Meiser, S. and Mohammadi, E. (2019). Privacy loss classes: the central
   limit theorem in differential privacy. PoPETs 2019(2), Lemma 12.
.. [2] Balle, B., Barthe, G., Gaboardi, M., Hsu, J. and Sato, T. (2020). Hypothesis testing
   interpretations and Rényi differential privacy. AISTATS, Theorem 21.
.. [3] Dwork, C. and Roth, A. (2014). The algorithmic foundations of differential privacy.
   Theorem 3.16.
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from pymc_dp._validation import check_unit_interval_open
from pymc_dp.accounting.events import (
    GaussianReleases,
    PoissonGaussianReleases,
    PrivacyEvent,
    PureDPReleases,
    RdpReleases,
)
from pymc_dp.accounting.gaussian import gaussian_epsilon
from pymc_dp.accounting.pld import (
    PLD_MAX_EPSILON,
    PLD_VALUE_DISCRETIZATION,
    compose_plds,
    gaussian_pld,
    pld_discretization,
    pld_epsilon,
)
from pymc_dp.accounting.rdp import DEFAULT_ORDERS, rdp_to_epsilon

__all__ = ["compose_epsilon"]


def compose_epsilon(
    events: list[PrivacyEvent] | tuple[PrivacyEvent, ...], delta: float
) -> tuple[float, str, float | None]:
    """ε at ``delta`` of the composition of ``events``.

    A pure function of public settings (the events are frozen), so the last results are kept:
    a run that prices its events before it reads data and records the same events after it
    (``PrivateRun.plan`` then ``record``) composes them once. A PLD composition of
    Poisson-subsampled releases takes about 0.1 s.

    All-Gaussian compositions use the exact closed form (μ adds). Pure ε-DP releases alone
    add (``delta`` may then be 0). Anything with an RDP curve is composed in RDP on
    :data:`DEFAULT_ORDERS` together with the orders of the curves, the Gaussian parts
    entering as α μ and the pure ones as min(ε, αε²/2), and converted with the improved
    conversion; with pure releases present the basic sum Σε_pure + ε_rest(δ) is also computed
    and the smaller ε is reported.

    Returns
    -------
    (epsilon, method, mu)
    """
    events = tuple(events)
    try:
        hash((events, delta))
    except TypeError:  # an unhashable delta or event field (an array, say): composed without the cache
        return _composition(events, delta)
    return _cached_composition(events, delta)


@functools.lru_cache(maxsize=32, typed=True)  # typed: 0, 0.0 and False are checked apart
def _cached_composition(events: tuple[PrivacyEvent, ...], delta: float) -> tuple[float, str, float | None]:
    return _composition(events, delta)


def _composition(events: tuple[PrivacyEvent, ...], delta: float) -> tuple[float, str, float | None]:
    """:func:`compose_epsilon` without its cache (``events`` a tuple)."""
    pure = [e for e in events if isinstance(e, PureDPReleases)]
    rest = [e for e in events if not isinstance(e, PureDPReleases)]
    pure_eps = sum(e.total_epsilon for e in pure)
    if pure and all(e.count == 0 for e in rest):
        if not (isinstance(delta, numbers.Real) and not isinstance(delta, bool) and delta == 0):
            check_unit_interval_open("delta", delta)  # pure ε holds at δ = 0 and at every δ
        return pure_eps, "pure_sum", None
    delta = check_unit_interval_open("delta", delta)
    if all(isinstance(e, GaussianReleases) for e in events):
        mu = sum(e.mu for e in events)
        return gaussian_epsilon(delta, mu), "gaussian_closed_form", mu
    rest_eps, rest_method, _ = _composition(tuple(rest), delta) if (pure and rest) else (0.0, "", None)
    if not pure and all(isinstance(e, GaussianReleases | PoissonGaussianReleases) for e in events):
        return _pld_composition(events, delta)
    # The default grid plus every order an RDP curve was computed at (e.g. all integers up to b/5 − 1).
    orders = np.unique(
        np.concatenate([DEFAULT_ORDERS] + [np.asarray(e.orders, float) for e in events if isinstance(e, RdpReleases)])
    )
    eps, _ = rdp_to_epsilon(orders, _total_rdp(events, orders), delta)
    best = (eps, "rdp", None)
    if any(isinstance(e, PoissonGaussianReleases) for e in rest) and eps < PLD_MAX_EPSILON:
        # Every event, pure ones included (they go to the RDP side): the candidate must cover all.
        best = min(best, _pld_with_rdp_rest(events, delta, orders, pld_discretization(eps)), key=lambda r: r[0])
    if pure and pure_eps + rest_eps < best[0]:
        return pure_eps + rest_eps, f"pure_sum+{rest_method}", None
    return best


def _total_rdp(events, orders: np.ndarray) -> np.ndarray:
    """Σ of the events' RDP curves at ``orders`` (``inf`` where a tabulated curve has no value)."""
    total = np.zeros_like(orders)
    for e in events:
        total = total + e.rdp_at(orders)
    return total


#: Orders of the cheap RDP bound that guards the PLD against huge privacy losses.
_GUARD_ORDERS = np.array([1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0])


def _pld_composition(events, delta: float) -> tuple[float, str, None]:
    """Gaussian and Poisson-Gaussian releases only: PLD ε, or RDP where the PLD would be huge.

    An RDP bound on a short order grid is computed first; it is an upper bound too. When it
    is below :data:`PLD_MAX_EPSILON` the (tighter) PLD is computed and the smaller of the two
    reported.
    """
    eps_rdp, _ = rdp_to_epsilon(_GUARD_ORDERS, _total_rdp(events, _GUARD_ORDERS), delta)
    if eps_rdp >= PLD_MAX_EPSILON:
        return eps_rdp, "rdp", None
    eps_pld = _pld_with_rdp_rest(events, delta, _GUARD_ORDERS, pld_discretization(eps_rdp))[0]
    return (eps_pld, "pld", None) if eps_pld <= eps_rdp else (eps_rdp, "rdp", None)


def _pld_with_rdp_rest(
    events, delta: float, orders: np.ndarray, discretization: float = PLD_VALUE_DISCRETIZATION
) -> tuple[float, str, None]:
    """ε of Gaussian and Poisson-Gaussian releases composed as PLDs, plus the rest in RDP.

    The PLDs are discretised at ``discretization`` (:func:`~pymc_dp.accounting.pld.pld_discretization`
    of an RDP bound on the whole: finer than the default only matters above ε = 10).

    Every event of ``events`` is counted: RDP curves and pure releases (as min(ε, αε²/2))
    go to the RDP part. With no other events this is the PLD ε at δ ("pld"). Otherwise the PLD part holds at
    (ε₁, δ₁) and the RDP part at (ε₂, δ − δ₁), so the whole holds at (ε₁ + ε₂, δ) (basic
    composition); δ₁ is chosen on a grid to minimise the sum ("pld+rdp").
    """
    pld_able = [e for e in events if isinstance(e, GaussianReleases | PoissonGaussianReleases)]
    others = [e for e in events if not isinstance(e, GaussianReleases | PoissonGaussianReleases)]
    mu = sum(e.mu for e in pld_able if isinstance(e, GaussianReleases))
    distributions = [gaussian_pld(mu, discretization)] + [
        e.pld(discretization) for e in pld_able if isinstance(e, PoissonGaussianReleases)
    ]
    if not others:
        return pld_epsilon(distributions, delta), "pld", None
    total = _total_rdp(others, orders)
    composed = compose_plds(distributions)
    if composed is None:  # every PLD-able event has count 0: only the RDP part is left
        return rdp_to_epsilon(orders, total, delta)[0], "rdp", None
    best = math.inf
    for share in np.concatenate([np.geomspace(1e-3, 0.5, 30), 1.0 - np.geomspace(1e-3, 0.5, 30)[::-1][1:]]):
        eps = composed.get_epsilon_for_delta(share * delta) + rdp_to_epsilon(orders, total, (1 - share) * delta)[0]
        best = min(best, float(eps))
    return best, "pld+rdp", None
