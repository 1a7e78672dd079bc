"""A privacy budget for several runs on one data set."""

from __future__ import annotations

from dataclasses import dataclass

from pymc_dp._validation import check_finite_positive, check_neighbouring, check_positive_int, check_unit_interval_open
from pymc_dp.accounting.composition import compose_epsilon
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.accounting.spent import PrivacySpent, format_epsilon

__all__ = ["PrivacyBudget", "PrivacyBudgetExceededError"]


class PrivacyBudgetExceededError(RuntimeError):
    """A run would spend more privacy than its budget allows. Nothing was run or charged."""


@dataclass(frozen=True)
class _Charge:
    label: str
    events: tuple[PrivacyEvent, ...]


class PrivacyBudget:
    """An (ε, δ) budget shared by every run on one data set.

    Runs are composed exactly as the accountant composes the releases inside one run, so
    two runs of 1000 iterations cost the same as one run of 2000. A run is checked against
    the budget before it touches any data; a refused run changes nothing.

    Parameters
    ----------
    epsilon : float
        Total ε allowed, > 0.
    delta : float
        δ at which ``epsilon`` must hold, in (0, 1).
    n_rows : int or None
        Number of rows N of the data set. Required under the substitute relation, where N is
        public; under add/remove N is private, may be omitted and is never released.
    neighbouring : {"substitute", "add_remove"}, default "substitute"
        The neighbouring relation every run on this budget must use.

    Notes
    -----
    Neighbouring relation: "substitute" (bounded DP) means data sets of the same public
    size N that differ in one row; "add_remove" means one row added or removed. One budget
    holds one relation, and :func:`pymc_dp.sample` refuses steps built for another.

    Examples
    --------
    >>> budget = PrivacyBudget(epsilon=2.0, delta=1e-6, n_rows=500)
    >>> budget.spent().epsilon
    0.0
    """

    def __init__(
        self, epsilon: float, delta: float, n_rows: int | None = None, neighbouring: str = "substitute"
    ) -> None:
        self.epsilon = check_finite_positive("epsilon", epsilon)
        self.delta = check_unit_interval_open("delta", delta)
        self.neighbouring = check_neighbouring("neighbouring", neighbouring)
        if n_rows is None and self.neighbouring == "substitute":
            raise ValueError("`n_rows` must be given under substitute neighbours (N is public there). Found None.")
        self.n_rows = None if n_rows is None else check_positive_int("n_rows", n_rows)
        self._charges: list[_Charge] = []

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        """All events charged so far."""
        return tuple(e for c in self._charges for e in c.events)

    @property
    def labels(self) -> tuple[str, ...]:
        """Labels of the charged runs, in order."""
        return tuple(c.label for c in self._charges)

    def spent(self) -> PrivacySpent:
        """ε spent so far at the budget's δ."""
        return self._spent_with(())

    def _spent_with(self, extra: tuple[PrivacyEvent, ...]) -> PrivacySpent:
        return self._compose(self.events + tuple(extra))

    def _compose(self, events: tuple[PrivacyEvent, ...]) -> PrivacySpent:
        """ε of ``events`` at the budget's δ (the one composition every budget and ledger uses)."""
        if not events:
            return PrivacySpent(0.0, self.delta, self.neighbouring, "gaussian_closed_form", 0.0, self.n_rows, ())
        eps, method, mu = compose_epsilon(events, self.delta)
        return PrivacySpent(eps, self.delta, self.neighbouring, method, mu, self.n_rows, events)

    def _refusal(self, after: PrivacySpent, before: float) -> PrivacyBudgetExceededError:
        return PrivacyBudgetExceededError(
            f"This run would bring the budget's ε to {format_epsilon(after.epsilon, 6)} at δ={self.delta:g}, above "
            f"its `epsilon`={self.epsilon:g} (already spent: {format_epsilon(before, 6)}). Nothing was run or charged; "
            "use more noise, fewer chains or fewer iterations."
        )

    def would_spend(self, events: list[PrivacyEvent] | tuple[PrivacyEvent, ...]) -> PrivacySpent:
        """ε the budget would have spent after also charging ``events`` (nothing is charged)."""
        return self._spent_with(tuple(events))

    def check(self, events: list[PrivacyEvent] | tuple[PrivacyEvent, ...]) -> PrivacySpent:
        """Raise :class:`PrivacyBudgetExceededError` if ``events`` do not fit; change nothing."""
        after = self.would_spend(events)
        if after.epsilon > self.epsilon:
            raise self._refusal(after, self.spent().epsilon)
        return after

    def charge(self, events: list[PrivacyEvent] | tuple[PrivacyEvent, ...], label: str = "run") -> PrivacySpent:
        """Check ``events`` against the budget and record them; on refusal nothing changes."""
        after = self.check(events)
        self._charges.append(_Charge(str(label), tuple(events)))
        return after

    def remaining_mu(self) -> float:
        """Gaussian μ still available, when everything charged so far is Gaussian."""
        if not all(isinstance(e, GaussianReleases) for e in self.events):
            raise ValueError("`remaining_mu` needs a budget holding only Gaussian releases. Found other events.")
        return gaussian_mu_for_target(self.epsilon, self.delta) - sum(e.mu for e in self.events)

    def __repr__(self) -> str:
        return (
            f"PrivacyBudget(epsilon={self.epsilon:g}, delta={self.delta:g}, n_rows={self.n_rows}, "
            f"neighbouring={self.neighbouring!r}, spent={format_epsilon(self.spent().epsilon, 6)}, "
            f"runs={len(self._charges)})"
        )
