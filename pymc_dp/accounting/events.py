"""The event vocabulary: data-free descriptions of what a mechanism releases.

An *event* records only public settings (noise multipliers, sampling rates, counts, RDP
curves), never data. Each event documents completely the behaviour and the assumptions of the
mechanism it stands for, so that an accountant can price it without knowing anything else about
the code that released it (the convention of ``dp_accounting``'s ``dp_event.py``). Events are
frozen, hashable and serialise to plain JSON (:meth:`to_dict`, :func:`event_from_dict`), so a
result carries everything needed to recompute its ε.

Every event answers the same questions:

- ``count``: how many releases of the mechanism it stands for (0 is allowed and costs nothing);
- ``label``: free text for the ledger and the record;
- :meth:`rdp_at`: the total Rényi-DP curve of all ``count`` releases at given orders (``inf``
  where no finite bound is known);
- :meth:`to_dict`: its JSON form.

The composition of events into one (ε, δ) guarantee is in
:mod:`pymc_dp.accounting.composition` (:func:`~pymc_dp.accounting.composition.compose_epsilon`).
Events carry no neighbouring relation of their own unless the accountant needs it
(:class:`PoissonGaussianReleases`): a noise multiplier is measured in units of the sensitivity
under the relation the mechanism was built for, and every event of one run is built for the same
relation (substitute by default, or add/remove).

References
----------
.. [1] Sommer, D. M., Meiser, S. and Mohammadi, E. (2019). Privacy loss classes: the central
   limit theorem in differential privacy. PoPETs 2019(2), Lemma 12.
.. [2] Mironov, I. (2017). Rényi differential privacy. CSF, Proposition 1 (composition) and
   Proposition 3.
.. [3] Dwork, C. and Roth, A. (2014). The algorithmic foundations of differential privacy.
   Theorems 3.6 and 3.16.
.. [4] Bun, M. and Steinke, T. (2016). Concentrated differential privacy: simplifications,
   extensions, and lower bounds. TCC, Proposition 1.4.
.. [5] Koskela, A., Jälkö, J. and Honkela, A. (2020). Computing tight differential privacy
   guarantees using FFT. AISTATS.
.. [6] Mironov, I., Talwar, K. and Zhang, L. (2019). Rényi differential privacy of the sampled
   Gaussian mechanism. arXiv:1908.10530.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from pymc_dp._validation import (
    check_finite_positive,
    check_neighbouring,
    check_nonnegative_int,
    check_sampling_rate,
)
from pymc_dp.accounting.pld import PLD_VALUE_DISCRETIZATION, poisson_gaussian_pld, poisson_gaussian_rdp
from pymc_dp.accounting.rdp import gaussian_rdp

# PrivacySpent and format_epsilon live in pymc_dp.accounting.spent; imported here so that
# ``from pymc_dp.accounting.events import PrivacySpent, format_epsilon`` keeps working.
from pymc_dp.accounting.spent import PrivacySpent, format_epsilon  # noqa: F401

__all__ = [
    "GaussianReleases",
    "PoissonGaussianReleases",
    "PrivacyEvent",
    "PureDPReleases",
    "RdpReleases",
    "event_from_dict",
]


class _Releases:
    """What every event shares: the checks of its public settings and its JSON form.

    A subclass is a frozen dataclass with a ``count`` field; :attr:`kind` is its ``type`` in
    JSON and :attr:`positive_fields` the fields that must be finite and > 0 (checked first, then
    ``count``). Nothing here reads data or changes a cost: each event prices itself.
    """

    kind: ClassVar[str]
    positive_fields: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for name in self.positive_fields:
            check_finite_positive(name, getattr(self, name))
        check_nonnegative_int("count", self.count)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``type`` (:attr:`kind`), then every field in order; :func:`event_from_dict` rebuilds it."""
        return {"type": self.kind, **{field.name: getattr(self, field.name) for field in fields(self)}}


@dataclass(frozen=True)
class GaussianReleases(_Releases):
    """``count`` releases of the Gaussian mechanism with noise multiplier τ = σ/Δ.

    The mechanism. Each release is f(D) + N(0, σ² I), where f is a data-dependent vector
    (a clipped sum of per-row terms, say) whose L2 sensitivity under the run's neighbouring
    relation is at most Δ for every pair of neighbouring data sets, and σ = τΔ. Releases may be
    chosen adaptively (each f may depend on the outputs released before it) and may differ in
    f, Δ and σ, provided each has multiplier τ.

    Parameters
    ----------
    noise_multiplier : float
        τ = σ/Δ > 0, fixed before any data access (a public setting, never data-dependent).
    count : int
        Number of releases, ≥ 0.
    label : str, default "gaussian"
        Free text for the ledger.

    Notes
    -----
    Neighbouring relation: the one Δ was computed for. For a sum of rows each clipped to L2
    norm C (:func:`pymc_dp.clip_math.sensitivity_of_clipped_sum`), Δ = 2C under substitute
    neighbours (one row replaced, N public) and C under add/remove; the event is the same either
    way, because τ is measured in units of Δ.

    Assumptions: the noise is independent of the data and of the other releases, drawn fresh for
    every release; Δ bounds the sensitivity for *every* neighbouring pair (so each row's term
    depends on that row alone); τ and ``count`` are fixed before the data are read.

    Cost. One release has privacy-loss parameter μ = Δ²/(2σ²) = 1/(2τ²) (Sommer et al. 2019,
    Lemma 12; μ equals the zCDP ρ), so ``count`` releases have μ = count/(2τ²) (:attr:`mu`), and
    μ's of Gaussian events add under composition. The tight ε at δ follows from μ in closed form
    (:func:`pymc_dp.accounting.gaussian.gaussian_epsilon`). The RDP curve is α μ at every order
    α > 1: the Rényi divergence of order α between N(0, σ²) and N(Δ, σ²) is αΔ²/(2σ²) (Mironov 2017).
    """

    noise_multiplier: float
    count: int
    label: str = "gaussian"
    kind: ClassVar[str] = "gaussian"
    positive_fields: ClassVar[tuple[str, ...]] = ("noise_multiplier",)

    @property
    def mu(self) -> float:
        """Total μ = count / (2τ²)."""
        return self.count / (2.0 * self.noise_multiplier**2)

    def rdp_at(self, orders: np.ndarray) -> np.ndarray:
        """Total RDP curve α μ at ``orders`` (μ = :attr:`mu`)."""
        return gaussian_rdp(orders, self.mu)

    #: Former name of :meth:`rdp_at`, kept for existing callers.
    rdp = rdp_at


@dataclass(frozen=True)
class RdpReleases(_Releases):
    """``count`` releases of a mechanism known through its per-release Rényi-DP curve.

    The mechanism. Any mechanism whose single release is (α, r(α))-RDP at each listed order α,
    for every pair of neighbouring data sets under the run's relation, e.g. a DPBarkerMH
    iteration: a Barker test on a subsample drawn without replacement, whose curve is the
    Barker RDP of Heikkilä et al. (2019, Thm 2) amplified by subsampling (Wang, Balle and
    Kasiviswanathan 2019, Thm 9; :func:`pymc_dp.accounting.barker.barker_subsampled_rdp`).

    Parameters
    ----------
    orders : tuple of float
        The orders α > 1 at which the curve is known (finite).
    rdp : tuple of float
        The curve of ONE release at ``orders``: r(α) ≥ 0, ``inf`` where no finite bound holds.
    count : int
        Number of releases, ≥ 0.
    label : str, default "rdp"
        Free text for the ledger.

    Notes
    -----
    Neighbouring relation: the one the curve was derived for; the event does not check it, so
    whoever builds the event vouches that the curve holds under the run's relation (the Barker
    curve is derived for substitute neighbours with the batch size public).

    Assumptions: each release's randomness (noise, the secret subsample) is fresh and
    independent of the data; the curve and ``count`` are fixed before the data are read. The
    curve is used only at the listed orders: :meth:`rdp_at` is ``inf`` at any other order, so the
    composition never interpolates. Releases compose adaptively by adding curves at each order
    (Mironov 2017, Proposition 1), and the total converts to (ε, δ) with the improved conversion
    (:func:`pymc_dp.accounting.rdp.rdp_to_epsilon`).
    """

    orders: tuple[float, ...]
    rdp: tuple[float, ...]
    count: int
    label: str = "rdp"
    kind: ClassVar[str] = "rdp"

    def __post_init__(self) -> None:
        super().__post_init__()
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
        """Total RDP count · r(α) at ``orders`` (``inf`` at orders the curve does not cover)."""
        if self.count == 0:
            return np.zeros(len(orders))
        table = dict(zip(self.orders, self.rdp, strict=True))
        return np.array([self.count * table.get(float(a), math.inf) for a in orders])

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``type`` "rdp", the curve as lists); :func:`event_from_dict` rebuilds the event."""
        return {**super().to_dict(), "orders": list(self.orders), "rdp": list(self.rdp)}


@dataclass(frozen=True)
class PureDPReleases(_Releases):
    """``count`` releases of a pure ε-DP mechanism (δ = 0), e.g. the Laplace mechanism.

    The mechanism. Each release is ε-DP for every pair of neighbouring data sets under the run's
    relation. For the Laplace mechanism, a statistic with L1 sensitivity Δ₁ released with
    independent Laplace noise of scale b is ε = Δ₁/b (Dwork et al. 2006; Dwork and Roth 2014,
    Thm 3.6), e.g. the sufficient statistics of :func:`pymc_dp.release_statistics`, or one
    posterior sample (the exponential mechanism).

    Parameters
    ----------
    epsilon : float
        ε of ONE release, > 0, fixed before any data access.
    count : int
        Number of releases, ≥ 0.
    label : str, default "pure"
        Free text for the ledger.

    Notes
    -----
    Neighbouring relation: the one Δ₁ (or the mechanism's own analysis) was computed for; for a
    sum of per-row terms clipped to [−B, B] per coordinate, Δ₁ doubles under substitute neighbours
    against add/remove.

    Assumptions: the noise is fresh and independent of the data; ε and ``count`` are public.

    Composition. Pure releases alone add: k releases of ε each are (kε, 0)-DP (Dwork and Roth
    2014, Thm 3.16). Mixed with Gaussian or RDP events, each pure release enters RDP as
    r(α) = min(ε, αε²/2): ε-DP bounds every Rényi divergence by ε, and implies ε²/2-zCDP
    (Bun and Steinke 2016, Prop. 1.4). :func:`~pymc_dp.accounting.composition.compose_epsilon`
    reports the smaller of that RDP composition and the basic sum Σε_pure + ε_rest(δ) (a (ε₁, 0)
    and an (ε₂, δ) guarantee compose to (ε₁ + ε₂, δ)).
    """

    epsilon: float
    count: int = 1
    label: str = "pure"
    kind: ClassVar[str] = "pure"
    positive_fields: ClassVar[tuple[str, ...]] = ("epsilon",)

    @property
    def total_epsilon(self) -> float:
        """ε of all ``count`` releases: count · ε."""
        return self.count * self.epsilon

    def rdp_at(self, orders: np.ndarray) -> np.ndarray:
        """Total RDP curve count · min(ε, αε²/2) at ``orders``."""
        orders = np.asarray(orders, dtype=float)
        return self.count * np.minimum(self.epsilon, 0.5 * orders * self.epsilon**2)

    #: Former name of :meth:`rdp_at`, kept for existing callers.
    rdp = rdp_at


@dataclass(frozen=True)
class PoissonGaussianReleases(_Releases):
    """``count`` releases of a Poisson-subsampled Gaussian sum (DP-SGD / DPADVI).

    The mechanism. Each release draws a secret batch S in which every row takes part
    independently with probability q (Poisson sampling), and releases
    Σ_{i∈S} clip_L2(gᵢ, C) + N(0, (σΔ)² I), where gᵢ depends on row i alone, C is the clip
    bound and Δ the L2 sensitivity of the clipped sum over all rows: 2C under substitute
    neighbours (one row replaced, N public) and C under add/remove. Dividing by the *expected*
    batch size qN (public) is post-processing; dividing by the realised |S| would not be.

    Parameters
    ----------
    noise_multiplier : float
        σ = noise std / Δ, Δ = 2C (substitute) or C (add/remove); fixed before any data access.
    sampling_rate : float
        q in (0, 1]: each row joins each batch independently with probability q.
    count : int
        Number of releases (iterations), ≥ 0.
    neighbouring : {"substitute", "add_remove"}
        The relation the noise was calibrated for. The accountant needs it: subsampling
        amplifies the two relations differently.
    label : str
        Free text for the ledger.

    Notes
    -----
    Assumptions: the batch S is secret (never released, drawn from randomness independent of
    the data) and drawn afresh for each release; the noise is fresh and independent; σ, q and
    ``count`` are public and fixed before the data are read.

    Cost. :meth:`pld` is the tight privacy-loss distribution of ``dp_accounting`` (Koskela et
    al. 2020; pessimistic discretisation, an upper bound): under add/remove
    ``PoissonSampledDpEvent(q, GaussianDpEvent(σ))``; under substitute ``REPLACE_ONE`` with
    multiplier 2σ in units of C (:func:`pymc_dp.accounting.pld.poisson_gaussian_pld`). At q = 1
    both reduce to the Gaussian mechanism with multiplier σ. :meth:`rdp_at` is the RDP curve:
    ``dp_accounting``'s under add/remove (Mironov, Talwar and Zhang 2019), a numerical integral of
    the worst pair under substitute (:func:`pymc_dp.accounting.pld.poisson_gaussian_rdp`).
    """

    noise_multiplier: float
    sampling_rate: float
    count: int
    neighbouring: str = "substitute"
    label: str = "poisson_gaussian"
    kind: ClassVar[str] = "poisson_gaussian"
    positive_fields: ClassVar[tuple[str, ...]] = ("noise_multiplier",)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_sampling_rate("sampling_rate", self.sampling_rate)
        check_neighbouring("neighbouring", self.neighbouring)

    def pld(self, value_discretization_interval: float = PLD_VALUE_DISCRETIZATION):
        """The composed privacy-loss distribution of all ``count`` releases (``None`` if count is 0)."""
        if self.count == 0:
            return None
        return poisson_gaussian_pld(
            self.noise_multiplier, self.sampling_rate, self.count, self.neighbouring, value_discretization_interval
        )

    def rdp_at(self, orders: np.ndarray) -> np.ndarray:
        """Total RDP curve at ``orders``."""
        if self.count == 0:
            return np.zeros(len(orders))
        return self.count * poisson_gaussian_rdp(
            self.noise_multiplier, self.sampling_rate, np.asarray(orders, float), self.neighbouring
        )

    #: Former name of :meth:`rdp_at`, kept for existing callers.
    rdp = rdp_at


#: Any privacy event: what :func:`~pymc_dp.accounting.composition.compose_epsilon` composes.
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
