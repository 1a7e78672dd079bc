"""Data-free descriptions of what a mechanism releases, and their composition.

An *event* records only public settings (noise multipliers, counts, RDP curves). The
accountant turns a list of events into ε at a given δ. Events serialise to plain JSON so
that a result object carries everything needed to recompute its ε.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pymc_dp._validation import (
    check_finite_positive,
    check_neighbouring,
    check_nonnegative_int,
    check_sampling_rate,
    check_unit_interval_open,
)
from pymc_dp.accounting.gaussian import gaussian_epsilon
from pymc_dp.accounting.pld import (
    PLD_MAX_EPSILON,
    PLD_VALUE_DISCRETIZATION,
    compose_plds,
    gaussian_pld,
    pld_discretization,
    pld_epsilon,
    poisson_gaussian_pld,
    poisson_gaussian_rdp,
)
from pymc_dp.accounting.rdp import DEFAULT_ORDERS, gaussian_rdp, rdp_to_epsilon

__all__ = [
    "GaussianReleases",
    "PrivacyEvent",
    "PrivacySpent",
    "PureDPReleases",
    "RdpReleases",
    "compose_epsilon",
    "event_from_dict",
]


@dataclass(frozen=True)
class GaussianReleases:
    """``count`` releases of a Gaussian mechanism with noise multiplier τ = σ/Δ.

    Δ is the L2 sensitivity under the neighbouring relation the mechanism was built for;
    each release costs μ = 1/(2τ²) in the sense of Sommer et al. (2019, Lemma 12).
    """

    noise_multiplier: float
    count: int
    label: str = "gaussian"

    def __post_init__(self) -> None:
        check_finite_positive("noise_multiplier", self.noise_multiplier)
        check_nonnegative_int("count", self.count)

    @property
    def mu(self) -> float:
        """Total μ = count / (2τ²)."""
        return self.count / (2.0 * self.noise_multiplier**2)

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        """RDP curve α μ."""
        return gaussian_rdp(orders, self.mu)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "gaussian", "noise_multiplier": self.noise_multiplier, "count": self.count, "label": self.label}


@dataclass(frozen=True)
class RdpReleases:
    """``count`` releases of a mechanism described by its per-release RDP curve."""

    orders: tuple[float, ...]
    rdp: tuple[float, ...]
    count: int
    label: str = "rdp"

    def __post_init__(self) -> None:
        check_nonnegative_int("count", self.count)
        if len(self.orders) != len(self.rdp):
            raise ValueError(
                f"`orders` and `rdp` must have equal length. Found {len(self.orders)} and {len(self.rdp)}."
            )
        orders = np.asarray(self.orders, dtype=float)
        rdp = np.asarray(self.rdp, dtype=float)
        if np.any(~np.isfinite(orders)) or np.any(orders <= 1):
            raise ValueError(f"`orders` must be finite and > 1. Found {list(self.orders)}.")
        if np.any(np.isnan(rdp)) or np.any(rdp < 0):
            raise ValueError("`rdp` must be non-negative (inf allowed). Found a negative or NaN value.")

    def rdp_at(self, orders: np.ndarray) -> np.ndarray:
        """Total RDP at ``orders`` (``inf`` at orders the curve does not cover)."""
        if self.count == 0:
            return np.zeros(len(orders))
        table = dict(zip(self.orders, self.rdp, strict=True))
        return np.array([self.count * table.get(float(a), math.inf) for a in orders])

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "rdp",
            "orders": list(self.orders),
            "rdp": list(self.rdp),
            "count": self.count,
            "label": self.label,
        }


@dataclass(frozen=True)
class PureDPReleases:
    """``count`` releases of a pure ε-DP mechanism (δ = 0), e.g. the Laplace mechanism.

    A Laplace release of a statistic with L1 sensitivity Δ₁ (under the neighbouring relation
    the mechanism was built for) and noise scale b costs ε = Δ₁/b (Dwork et al. 2006; Dwork
    and Roth 2014, Thm 3.6).

    Notes
    -----
    Composition. Pure releases alone add: k releases of ε each are (kε, 0)-DP (Dwork and Roth
    2014, Thm 3.16). Mixed with Gaussian or RDP events, each pure release enters RDP as
    r(α) = min(ε, αε²/2): ε-DP bounds every Rényi divergence by ε, and implies ε²/2-zCDP
    (Bun and Steinke 2016, Prop. 1.4). :func:`compose_epsilon` reports the smaller of that
    RDP composition and the basic sum Σε_pure + ε_rest(δ) (a (ε₁, 0) and an (ε₂, δ) guarantee
    compose to (ε₁ + ε₂, δ)).
    """

    epsilon: float
    count: int = 1
    label: str = "pure"

    def __post_init__(self) -> None:
        check_finite_positive("epsilon", self.epsilon)
        check_nonnegative_int("count", self.count)

    @property
    def total_epsilon(self) -> float:
        """ε of all ``count`` releases: count · ε."""
        return self.count * self.epsilon

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        """Total RDP curve count · min(ε, αε²/2)."""
        orders = np.asarray(orders, dtype=float)
        return self.count * np.minimum(self.epsilon, 0.5 * orders * self.epsilon**2)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "pure", "epsilon": self.epsilon, "count": self.count, "label": self.label}


@dataclass(frozen=True)
class PoissonGaussianReleases:
    """``count`` releases of a Poisson-subsampled Gaussian sum (DP-SGD / DPADVI).

    Parameters
    ----------
    noise_multiplier : float
        σ = noise std / Δ, Δ = 2C (substitute) or C (add/remove).
    sampling_rate : float
        q in (0, 1]: each row joins each batch independently with probability q.
    count : int
        Number of releases (iterations).
    neighbouring : {"substitute", "add_remove"}
        The relation the noise was calibrated for.
    label : str
        Free text for the ledger.
    """

    noise_multiplier: float
    sampling_rate: float
    count: int
    neighbouring: str = "substitute"
    label: str = "poisson_gaussian"

    def __post_init__(self) -> None:
        check_finite_positive("noise_multiplier", self.noise_multiplier)
        check_sampling_rate("sampling_rate", self.sampling_rate)
        check_nonnegative_int("count", self.count)
        check_neighbouring("neighbouring", self.neighbouring)

    def pld(self, value_discretization_interval: float = PLD_VALUE_DISCRETIZATION):
        """The composed privacy-loss distribution of all ``count`` releases (``None`` if count is 0)."""
        if self.count == 0:
            return None
        return poisson_gaussian_pld(
            self.noise_multiplier, self.sampling_rate, self.count, self.neighbouring, value_discretization_interval
        )

    def rdp(self, orders: np.ndarray) -> np.ndarray:
        """Total RDP curve at ``orders``."""
        if self.count == 0:
            return np.zeros(len(orders))
        return self.count * poisson_gaussian_rdp(
            self.noise_multiplier, self.sampling_rate, np.asarray(orders, float), self.neighbouring
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "poisson_gaussian",
            "noise_multiplier": self.noise_multiplier,
            "sampling_rate": self.sampling_rate,
            "count": self.count,
            "neighbouring": self.neighbouring,
            "label": self.label,
        }


PrivacyEvent = GaussianReleases | RdpReleases | PureDPReleases | PoissonGaussianReleases


def event_from_dict(data: dict[str, Any]) -> PrivacyEvent:
    """Rebuild an event from :meth:`to_dict` output."""
    kind = data.get("type")
    if kind == "gaussian":
        return GaussianReleases(float(data["noise_multiplier"]), data["count"], data.get("label", "gaussian"))
    if kind == "rdp":
        return RdpReleases(tuple(data["orders"]), tuple(data["rdp"]), data["count"], data.get("label", "rdp"))
    if kind == "poisson_gaussian":
        return PoissonGaussianReleases(
            float(data["noise_multiplier"]),
            float(data["sampling_rate"]),
            data["count"],
            data.get("neighbouring", "substitute"),
            data.get("label", "poisson_gaussian"),
        )
    if kind == "pure":
        return PureDPReleases(float(data["epsilon"]), data["count"], data.get("label", "pure"))
    raise ValueError(
        f"`type` of a privacy event must be 'gaussian', 'rdp', 'pure' or 'poisson_gaussian'. Found {kind!r}."
    )


@dataclass(frozen=True)
class PrivacySpent:
    """ε at δ of a set of releases, with how it was computed.

    Attributes
    ----------
    epsilon, delta : float
        The guarantee.
    neighbouring : str
        "substitute" (one row replaced, N public) or "add_remove".
    method : str
        "gaussian_closed_form" (Sommer et al. 2019, Lemma 12; exact), "rdp" (RDP with the
        improved conversion of Balle et al. 2020, Theorem 21), "pld" (privacy-loss
        distributions of dp_accounting, pessimistic: an upper bound), "pld+rdp" (PLD and RDP
        parts at a split δ, added), "pure_sum" (pure ε-DP releases
        only: ε adds, δ = 0) or "pure_sum+<method>" (pure ε summed onto the rest's ε at δ).
    mu : float or None
        Total Gaussian μ when the method is the closed form.
    n_rows : int or None
        N used for accounting, when known.
    events : tuple
        The composed events.
    """

    epsilon: float
    delta: float
    neighbouring: str = "substitute"
    method: str = "gaussian_closed_form"
    mu: float | None = None
    n_rows: int | None = None
    events: tuple = field(default=(), repr=False)

    def __str__(self) -> str:
        """``ε = 1.000 (δ = 1e-06)``: ε rounded up to four significant digits, δ to three."""
        return f"ε = {format_epsilon(self.epsilon)} (δ = {self.delta:.3g})"

    def __repr__(self) -> str:
        mu = "None" if self.mu is None else f"{self.mu:.6g}"
        return (
            f"PrivacySpent(epsilon={format_epsilon(self.epsilon)}, delta={self.delta:.3g}, "
            f"neighbouring={self.neighbouring!r}, method={self.method!r}, mu={mu}, n_rows={self.n_rows!r})"
        )


def format_epsilon(epsilon: float, digits: int = 4) -> str:
    """ε as text, rounded *up* to ``digits`` significant digits so the printed guarantee is never smaller.

    Examples: 0.9999999998999994 → "1.000", 1.00004 → "1.001", 12.3401 → "12.35", 0 → "0".
    """
    if not math.isfinite(epsilon) or epsilon <= 0:
        return f"{epsilon:g}"
    exponent = math.floor(math.log10(epsilon))
    scale = 10.0 ** (digits - 1 - exponent)
    rounded = math.ceil(epsilon * scale * (1 - 1e-9)) / scale  # 1e-9: absorb the float error of an exact ε
    exponent = math.floor(math.log10(rounded))
    return f"{rounded:.{max(0, digits - 1 - exponent)}f}"


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
        total = total + (e.rdp_at(orders) if isinstance(e, RdpReleases) else e.rdp(orders))
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
