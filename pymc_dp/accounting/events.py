"""Data-free descriptions of what a mechanism releases, and their composition.

An *event* records only public settings (noise multipliers, counts, RDP curves). The
accountant turns a list of events into ε at a given δ. Events serialise to plain JSON so
that a result object carries everything needed to recompute its ε.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive, check_nonnegative_int, check_unit_interval_open
from pymc_dp.accounting.gaussian import gaussian_epsilon
from pymc_dp.accounting.rdp import DEFAULT_ORDERS, gaussian_rdp, rdp_to_epsilon

__all__ = [
    "GaussianReleases",
    "PrivacyEvent",
    "PrivacySpent",
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


PrivacyEvent = GaussianReleases | RdpReleases


def event_from_dict(data: dict[str, Any]) -> PrivacyEvent:
    """Rebuild an event from :meth:`to_dict` output."""
    kind = data.get("type")
    if kind == "gaussian":
        return GaussianReleases(float(data["noise_multiplier"]), data["count"], data.get("label", "gaussian"))
    if kind == "rdp":
        return RdpReleases(tuple(data["orders"]), tuple(data["rdp"]), data["count"], data.get("label", "rdp"))
    raise ValueError(f"`type` of a privacy event must be 'gaussian' or 'rdp'. Found {kind!r}.")


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
        "gaussian_closed_form" (Sommer et al. 2019, Lemma 12; exact) or "rdp" (RDP with the
        improved conversion of Balle et al. 2020, Theorem 21).
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


def compose_epsilon(
    events: list[PrivacyEvent] | tuple[PrivacyEvent, ...], delta: float
) -> tuple[float, str, float | None]:
    """ε at ``delta`` of the composition of ``events``.

    All-Gaussian compositions use the exact closed form (μ adds). Anything with an RDP
    curve is composed in RDP on :data:`DEFAULT_ORDERS` together with the orders of the
    curves, the Gaussian parts entering as α μ, and converted with the improved conversion.

    Returns
    -------
    (epsilon, method, mu)
    """
    delta = check_unit_interval_open("delta", delta)
    events = tuple(events)
    if all(isinstance(e, GaussianReleases) for e in events):
        mu = sum(e.mu for e in events)
        return gaussian_epsilon(delta, mu), "gaussian_closed_form", mu
    # The default grid plus every order an RDP curve was computed at (e.g. all integers up to b/5 − 1).
    orders = np.unique(
        np.concatenate([DEFAULT_ORDERS] + [np.asarray(e.orders, float) for e in events if isinstance(e, RdpReleases)])
    )
    total = np.zeros_like(orders)
    for e in events:
        total = total + (e.rdp(orders) if isinstance(e, GaussianReleases) else e.rdp_at(orders))
    eps, _ = rdp_to_epsilon(orders, total, delta)
    return eps, "rdp", None
