"""What a set of releases spent: :class:`PrivacySpent`, the public result type, and how ε is printed.

A :class:`PrivacySpent` is what :func:`pymc_dp.privacy_spent`, a :class:`~pymc_dp.PrivacyBudget`
and the ledger hand back: ε at δ, the neighbouring relation it holds under, and the method the
composition (:mod:`pymc_dp.accounting.composition`) used. It is a plain record of public numbers:
it depends on neither the event vocabulary (:mod:`pymc_dp.accounting.events`) nor the
composition, so both may name it. Nothing here depends on data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["PrivacySpent", "format_epsilon"]


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

    Notes
    -----
    The guarantee holds under ``neighbouring``: two data sets are neighbours when one row is
    replaced (substitute, N public) or one row is added or removed (add/remove). ε covers every
    release in ``events``, each priced from its public settings only (no data).
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
    # 1e-12 (relative): absorbs the float error of an exact ε (a few ulp) and nothing a guarantee could hide in
    rounded = math.ceil(epsilon * scale * (1 - 1e-12)) / scale
    exponent = math.floor(math.log10(rounded))
    return f"{rounded:.{max(0, digits - 1 - exponent)}f}"
