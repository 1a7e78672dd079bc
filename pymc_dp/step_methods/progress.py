"""The progress bar's ε readings: exact, rounded up as :func:`pymc_dp.privacy_spent` prints ε.

PyMC's progress bar (PyMC 5 and 6, rich in a terminal, marimo's HTML cells) shows what a
step's update function returns for each draw, formatting it when it draws the bar. A DP
step's ε column returns an :class:`EpsilonSoFar` for the run's μ so far, so ε is computed
only for the readings the bar draws (about ten times a second, and once at the end), each
exactly. The μ follows the schedule (public settings and the iteration count), never the
data: nothing here reads a row or releases anything.
"""

from __future__ import annotations

from pymc_dp.accounting.gaussian import gaussian_epsilon
from pymc_dp.accounting.spent import format_epsilon

__all__ = ["EpsilonSoFar"]


class EpsilonSoFar:
    """A reading of the progress bar's ε column: the exact ε at ``mu``, computed when the bar draws it.

    The text is the accountant's: :func:`pymc_dp.accounting.gaussian.gaussian_epsilon` at the
    run's μ so far, rounded up to four significant digits by
    :func:`pymc_dp.accounting.spent.format_epsilon`, as :func:`pymc_dp.privacy_spent` prints
    it; so the last reading of a run is the ε its result records, to the printed precision.
    It is computed only when the bar is drawn (rich redraws about ten times a second, and once
    at the end), not at every iteration, and kept per μ in ``memo`` (shared by the chains).
    ``mu`` follows the schedule (public settings and the iteration count), never the data.
    """

    __slots__ = ("delta", "memo", "mu")

    def __init__(self, mu: float, delta: float, memo: dict[float, str]) -> None:
        self.mu, self.delta, self.memo = mu, delta, memo

    def __str__(self) -> str:
        text = self.memo.get(self.mu)
        if text is None:
            text = self.memo[self.mu] = format_epsilon(gaussian_epsilon(self.delta, self.mu))
        return text

    def __format__(self, spec: str) -> str:  # rich's TextColumn and marimo's cells format the field
        return format(str(self), spec)

    def __repr__(self) -> str:
        return f"EpsilonSoFar(mu={self.mu!r}, delta={self.delta!r})"
