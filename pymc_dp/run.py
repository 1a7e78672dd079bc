"""One private run: validate → plan → check → charge → run → record, for every front-end.

Every front-end that reads the data (:func:`pymc_dp.sample`, :meth:`pymc_dp.DPADVI.fit`,
:func:`pymc_dp.release_statistics`, :func:`pymc_dp.one_posterior_sample`) goes through one
:class:`PrivateRun`, in this order:

1. **validate** (constructor): the settings, the budget's type, neighbouring relation and N;
2. **plan** (:meth:`PrivateRun.plan`): price the releases the run will make from public
   settings alone, refuse a run over its target ε or over the budget — nothing is charged
   and no data are read;
3. **charge and run** (:meth:`PrivateRun.releasing`): charge the budget, then read the data
   inside :func:`pymc_dp._errors.data_free_errors`, so an error raised by PyMC or PyTensor
   carries no value computed from the data. A run that fails after this point stays charged:
   it may have released partial results;
4. **record** (:meth:`PrivateRun.record`, :meth:`PrivateRun.publish`): the
   :class:`AccountantRecord` of everything the result depends on, written on the result by
   :func:`pymc_dp.results.finalize_result` after the result is stripped of what reads data.

:func:`pymc_dp.publish` builds an :class:`AccountantRecord` for a result sampled outside this
pipeline (a plain ``pm.sample``); the record schema is the same.

This module reads no data: it prices public settings and wraps the code that does.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pymc_dp._errors import data_free_errors
from pymc_dp._validation import check_finite_positive, check_neighbouring
from pymc_dp._versions import versions
from pymc_dp.accounting.budget import PrivacyBudget, PrivacyBudgetExceededError
from pymc_dp.accounting.composition import compose_epsilon
from pymc_dp.accounting.events import PrivacyEvent, format_epsilon
from pymc_dp.accounting.ledger import plain_json_value
from pymc_dp.results import ACCOUNTANT_FORMAT, finalize_result

__all__ = ["AccountantRecord", "PrivateRun"]


@dataclass(frozen=True)
class AccountantRecord:
    """What a result released and how it is priced: the schema of ``dp_accountant``.

    Attributes
    ----------
    mechanism : str
        The front-end or mechanism that made the result (e.g. ``"pymc_dp.sample"``).
    events : tuple of PrivacyEvent
        Every release the result depends on (earlier releases it started from included).
    delta : float
        δ at which ``epsilon`` holds (0 for pure ε-DP releases).
    neighbouring : str
        ``"substitute"`` (one row replaced, N public), ``"add_remove"`` or ``"unknown"``.
    n_rows : int or None
        N, written only under substitute neighbours, where it is public.
    epsilon, method, mu
        The composition of ``events`` at ``delta`` (:func:`pymc_dp.accounting.compose_epsilon`).
    reproducible_noise : bool
        Whether the mechanism noise was derived from the seed (testing only).
    start : dict or None
        Where chains or the optimisation started (``source`` and a note).
    details : dict
        Front-end-specific public settings (steps and iteration counts, Laplace scale, ...),
        written as top-level keys of the JSON text.
    budget : dict or None
        The budget's ε, δ and what it had spent after this run, when a budget was charged.
    """

    mechanism: str
    events: tuple[PrivacyEvent, ...]
    delta: float
    neighbouring: str
    n_rows: int | None
    epsilon: float
    method: str
    mu: float | None
    reproducible_noise: bool = False
    start: dict[str, Any] | None = None
    details: dict[str, Any] = field(default_factory=dict)
    budget: dict[str, float] | None = None

    @classmethod
    def priced(
        cls,
        mechanism: str,
        events: Sequence[PrivacyEvent],
        *,
        delta: float,
        neighbouring: str,
        n_rows: int | None,
        **fields: Any,
    ) -> AccountantRecord:
        """The record of ``events``, with ε, method and μ composed at ``delta``."""
        events = tuple(events)
        if events:
            epsilon, method, mu = compose_epsilon(events, delta)
        else:  # nothing released
            epsilon, method, mu = 0.0, "gaussian_closed_form", 0.0
        return cls(
            mechanism,
            events,
            float(delta),
            neighbouring,
            n_rows if neighbouring == "substitute" else None,
            float(epsilon),
            method,
            mu,
            **fields,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able dict written as ``dp_accountant`` (N only under substitute neighbours)."""
        record: dict[str, Any] = {
            "format": ACCOUNTANT_FORMAT,
            "mechanism": self.mechanism,
            "method": self.method,
            "mu": self.mu,
            "delta": self.delta,
            "epsilon": self.epsilon,
            "neighbouring": self.neighbouring,
            "n_rows": self.n_rows if self.neighbouring == "substitute" else None,
            "reproducible_noise": bool(self.reproducible_noise),
        }
        if self.start is not None:
            record["start"] = dict(self.start)
        record.update(self.details)
        if self.budget is not None:
            record["budget"] = dict(self.budget)
        record["events"] = [e.to_dict() for e in self.events]
        record["versions"] = versions()
        return json.loads(json.dumps(record, default=plain_json_value))  # plain JSON types only, as it is stored


class PrivateRun:
    """One priced run over the data: the pipeline every private front-end follows.

    Parameters
    ----------
    mechanism : str
        Name of the front-end, recorded in the result and in the budget's label.
    delta : float
        δ at which the run's ε is computed (0 for pure ε-DP releases).
    neighbouring : {"substitute", "add_remove"}
        The neighbouring relation of the mechanisms.
    n_rows : int or None
        N of the data. Under substitute neighbours it is public and must equal the budget's.
    epsilon : float, optional
        Target ε: a plan whose ε exceeds it is refused.
    budget : PrivacyBudget, optional
        Charged before the data are read; a plan over budget is refused with nothing charged.
    description : str, optional
        The mechanism as recorded in the result (default: ``mechanism``).

    Raises
    ------
    TypeError, ValueError
        For a budget that is not a :class:`PrivacyBudget`, that holds another neighbouring
        relation, or (substitute) another N. Nothing is charged.

    Notes
    -----
    Neighbouring relation: ``neighbouring``, which must be the budget's. ε is computed from
    the events :meth:`plan` is given, which come from public settings alone, before any data
    access; a run never learns from the data that it must stop.
    """

    def __init__(
        self,
        mechanism: str,
        *,
        delta: float,
        neighbouring: str,
        n_rows: int | None,
        epsilon: float | None = None,
        budget: PrivacyBudget | None = None,
        description: str | None = None,
    ) -> None:
        neighbouring = check_neighbouring("neighbouring", neighbouring)
        if epsilon is not None:
            epsilon = check_finite_positive("epsilon", epsilon)
        if budget is not None:
            if not isinstance(budget, PrivacyBudget):
                raise TypeError(f"`budget` must be a pymc_dp.PrivacyBudget. Found {type(budget).__name__}.")
            if budget.neighbouring != neighbouring:
                raise ValueError(f"`budget.neighbouring` must be {neighbouring!r}. Found {budget.neighbouring!r}.")
            if neighbouring == "substitute" and budget.n_rows != n_rows:
                raise ValueError(f"`budget.n_rows` must equal the number of rows ({n_rows}). Found {budget.n_rows}.")
        self.mechanism = mechanism
        self.description = description or mechanism
        self.delta = delta
        self.neighbouring = neighbouring
        self.n_rows = n_rows
        self.epsilon = epsilon
        self.budget = budget
        self.events: tuple[PrivacyEvent, ...] | None = None
        self._charge: tuple[PrivacyEvent, ...] = ()
        self._depends_on: tuple[PrivacyEvent, ...] = ()
        self._charged = False

    # -- plan and check ----------------------------------------------------------------------
    def plan(
        self,
        events: Sequence[PrivacyEvent],
        *,
        charge: Sequence[PrivacyEvent] | None = None,
        depends_on: Sequence[PrivacyEvent] = (),
        advice: str | Callable[[], str] = "use more noise, fewer chains or fewer iterations.",
    ) -> float:
        """Price the run and check it against the target ε and the budget; change nothing else.

        Parameters
        ----------
        events : sequence of PrivacyEvent
            What the target ``epsilon`` must cover: the run's releases (for a refit, every
            fit of the same object).
        charge : sequence of PrivacyEvent, optional
            What is new and charged to the budget (default: ``events``).
        depends_on : sequence of PrivacyEvent
            Releases charged earlier that the result also depends on (a DP start): composed
            into the result's ε, neither checked against the target nor charged again.
        advice : str or callable
            What to change, appended to a refusal (a callable is called only then).

        Returns
        -------
        float
            ε of ``events`` at δ.

        Raises
        ------
        PrivacyBudgetExceededError
            When ``events`` exceed the target ε or ``charge`` does not fit the budget.
        """
        if self._charged:
            raise RuntimeError("This run has been charged already: plan a new PrivateRun.")
        events = tuple(events)
        charge = events if charge is None else tuple(charge)
        epsilon = compose_epsilon(events, self.delta)[0] if events else 0.0
        if self.epsilon is not None and epsilon > self.epsilon:
            raise PrivacyBudgetExceededError(
                f"This run would spend ε={format_epsilon(epsilon, 6)} at δ={self.delta:g}, "
                f"above `epsilon`={self.epsilon:g}. "
                f"Nothing was run or charged; {advice() if callable(advice) else advice}"
            )
        if self.budget is not None:
            self.budget.check(charge)
        self.events, self._charge, self._depends_on = events, charge, tuple(depends_on)
        return epsilon

    # -- charge and run ----------------------------------------------------------------------
    @contextlib.contextmanager
    def releasing(self, label: str | None = None) -> Iterator[None]:
        """Charge the budget, then run the body (which reads the data) with data-free errors.

        Parameters
        ----------
        label : str, optional
            The budget entry's label (default: the mechanism's name).
        """
        if self.events is None:
            raise RuntimeError("A PrivateRun must be planned before it reads data: call plan(...) first.")
        if self.budget is not None and not self._charged:
            self.budget.charge(self._charge, label=label or self.mechanism)
        self._charged = True
        with data_free_errors(self.mechanism):
            yield

    # -- record ------------------------------------------------------------------------------
    def record(
        self, *, start: dict[str, Any] | None = None, reproducible_noise: bool = False, **details: Any
    ) -> AccountantRecord:
        """The record of everything the result depends on (earlier releases, then the run's)."""
        if self.events is None:
            raise RuntimeError("A PrivateRun must be planned before it is recorded: call plan(...) first.")
        budget = None
        if self.budget is not None:
            budget = {"epsilon": self.budget.epsilon, "delta": self.budget.delta, "spent": self.budget.spent().epsilon}
        return AccountantRecord.priced(
            self.description,
            self._depends_on + self.events,
            delta=self.delta,
            neighbouring=self.neighbouring,
            n_rows=self.n_rows,
            reproducible_noise=reproducible_noise,
            start=start,
            details=details,
            budget=budget,
        )

    def publish(self, idata: Any, model: Any, record: AccountantRecord) -> Any:
        """Strip what reads data from ``idata``, check it and write the record's ``dp_*`` attributes."""
        return finalize_result(idata, record.to_dict(), model)
