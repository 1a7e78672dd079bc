"""Running DP samplers: planning, budget checks and the privacy record of a run."""

from __future__ import annotations

import copy
import inspect
import json
import math
from typing import Any

import numpy as np
import pymc as pm
from pymc.model import modelcontext
from pymc.step_methods.compound import CompoundStep

from pymc_dp._errors import data_free_errors
from pymc_dp._validation import (
    check_finite_positive,
    check_nonnegative_int,
    check_positive_int,
    check_unit_interval_open,
)
from pymc_dp.accounting.barker import subsampled_barker_max_iterations
from pymc_dp.accounting.budget import PrivacyBudget, PrivacyBudgetExceededError
from pymc_dp.accounting.calibrate import CALIBRATION_MARGIN
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent, PrivacySpent, compose_epsilon, event_from_dict
from pymc_dp.accounting.gaussian import gaussian_epsilon, gaussian_mu_for_target
from pymc_dp.data import _row_structure, data_dependent_deterministics
from pymc_dp.diagnostics import attach_diagnostics, check_on_poor_mixing
from pymc_dp.results import (
    ACCOUNTANT_FORMAT,
    PrivateStart,
    check_publishable,
    finalize_result,
    group,
    group_names,
    posterior_attrs,
    strip_private_groups,
    versions,
    write_privacy_attrs,
)
from pymc_dp.starts import check_init, prior_starts
from pymc_dp.step_methods.barker import DPBarkerMH, recorded_barker_releases
from pymc_dp.step_methods.base import DPStep

__all__ = ["PrivateStart", "privacy_spent", "sample", "strip_private_groups", "write_privacy_attrs"]

#: ``pm.sample`` keywords that would release non-private values or bypass the DP steps.
_REFUSED_KWARGS = {
    "nuts_sampler": "pymc_dp runs PyMC's own sampler loop; external NUTS samplers do not use the DP steps",
    "nuts_sampler_kwargs": "pymc_dp runs PyMC's own sampler loop; external NUTS samplers do not use the DP steps",
    "trace": "trace backends (ZarrTrace, McBackend) store the raw data groups in their own store",
}


def _flatten_steps(step: Any) -> list[Any]:
    if isinstance(step, CompoundStep):
        return [s for sub in step.methods for s in _flatten_steps(sub)]
    if isinstance(step, list | tuple):
        return [s for sub in step for s in _flatten_steps(sub)]
    return [step]


def _start_provenance(initvals: Any, init: str) -> tuple[dict[str, Any], tuple[PrivacyEvent, ...]]:
    """What the result records about where its chains started, and the events the start depends on."""
    if initvals is None and init == "prior":
        return {"source": "prior", "note": "one draw from the prior per chain (data-free, over-dispersed)"}, ()
    if initvals is None:
        return {"source": "model", "note": "the model's initial point, the same for every chain (data-free)"}, ()
    if isinstance(initvals, PrivateStart):
        return {"source": "dp_release", "description": initvals.source}, initvals.events
    return {
        "source": "user",
        "note": "initvals given by the caller: not covered by ε, so they must not be computed from the data",
    }, ()


def _plan_calibration(
    steps: list[DPStep],
    k: int,
    epsilon: float | None,
    delta: float,
    earlier: tuple[PrivacyEvent, ...] = (),
) -> list[DPStep]:
    """Copies of ``steps`` with unset noise calibrated so that ``earlier`` plus the run meets ε.

    Every step left unset gets the same μ per iteration. When everything else is Gaussian
    the largest such μ is found in closed form (μ adds); otherwise by bisection on the
    composed ε (RDP composition with the other events), which is increasing in μ.
    """
    planned = [copy.copy(s) for s in steps]
    unset = [s for s in planned if s.needs_calibration]
    if not unset:
        return planned
    if epsilon is None:
        names = ", ".join(type(s).__name__ for s in unset)
        raise ValueError(f"`epsilon` must be given when a step leaves its noise unset ({names}). Found epsilon=None.")
    target = epsilon * (1.0 - CALIBRATION_MARGIN)
    fixed = list(earlier) + [e for s in planned if not s.needs_calibration for e in s.privacy_events(k)]
    refusal = PrivacyBudgetExceededError(
        f"No privacy is left to calibrate the noise: the target (ε={epsilon:g}, δ={delta:g}) is already used up by "
        "earlier runs or by the steps whose noise is fixed. Nothing was run or charged."
    )

    def set_all(mu_per_iteration: float) -> list[PrivacyEvent]:
        for s in unset:
            s.set_noise_for_mu(mu_per_iteration)
        return fixed + [e for s in unset for e in s.privacy_events(k)]

    if all(isinstance(e, GaussianReleases) for e in fixed):
        mu_left = gaussian_mu_for_target(target, delta) - sum(e.mu for e in fixed)
        if mu_left <= 0:
            raise refusal
        set_all(mu_left / (k * len(unset)))
        return planned
    if compose_epsilon(fixed, delta)[0] >= target:
        raise refusal
    low, high = -60.0, math.log(gaussian_mu_for_target(target, delta) / (k * len(unset)))
    for _ in range(80):  # on log μ; ends within 1e-12 relative
        middle = 0.5 * (low + high)
        if compose_epsilon(set_all(math.exp(middle)), delta)[0] <= target:
            low = middle
        else:
            high = middle
    set_all(math.exp(low))
    return planned


def _iteration_hint(steps: list[DPStep], epsilon: float, delta: float, chains: int) -> str:
    """For a lone subsampled DPBarkerMH (whose ε is set by N, b and T alone): the iterations ε allows."""
    if len(steps) != 1 or not isinstance(steps[0], DPBarkerMH) or steps[0].full_data:
        return ""
    step = steps[0]
    total = subsampled_barker_max_iterations(epsilon, delta, step.n_rows, step.batch_size)
    return (
        f" At batch_size={step.batch_size} DPBarkerMH fits at most {total} iterations in all at this (ε, δ): "
        f"{total // chains} per chain (tune + draws) with {chains} chains."
    )


def sample(
    *,
    step: Any,
    epsilon: float | None = None,
    delta: float | None = None,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    budget: PrivacyBudget | None = None,
    model: Any = None,
    var_names: list[str] | None = None,
    init: str = "prior",
    on_poor_mixing: str = "warn",
    **kwargs: Any,
) -> Any:
    """Sample with DP step methods and return a result carrying its privacy guarantee.

    Plans the whole run before touching data: counts every iteration of every chain
    (``chains × (tune + draws)``), calibrates noise left unset from (``epsilon``, ``delta``),
    refuses a run that would exceed ``epsilon`` or the ``budget``, refuses variables no DP
    step covers, and leaves data-dependent deterministics out of the trace. After sampling
    it removes the raw-data groups and writes the ``dp_*`` attributes on the posterior.

    Parameters
    ----------
    step : DPStep or list of DPStep
        DP step methods covering every free variable of the model.
    epsilon : float, optional
        Target ε of this run. Required when a step leaves its noise unset; otherwise the
        run is refused if its ε would exceed it.
    delta : float
        δ in (0, 1) at which ε is computed. Typically below 1/N. Defaults to the budget's δ.
    draws, tune, chains : int
        As for ``pm.sample``; tuning iterations are accounted like draws.
    budget : PrivacyBudget, optional
        A budget spanning several runs on the same data; the run is charged before it starts
        and refused (with nothing charged) if it would overspend.
    model : pm.Model, optional
        Taken from the context if omitted.
    var_names : list of str, optional
        Variables to store; data-dependent deterministics are refused.
    init : {"prior", "model"}, default "prior"
        Where chains start when no ``initvals`` are given: ``"prior"`` draws one start per
        chain from the prior (data-free, distinct and over-dispersed, so that R-hat can see a
        chain that did not mix; seeded by ``random_seed``), ``"model"`` uses the model's
        initial point for every chain (PyMC's behaviour for non-NUTS steps).
    on_poor_mixing : {"warn", "raise", "ignore"}, default "warn"
        What happens when the released draws are not a usable posterior (R-hat above 1.05 or
        bulk/tail ESS below 100 for some variable; :mod:`pymc_dp.diagnostics`): a
        :class:`pymc_dp.diagnostics.PoorMixingWarning` that says what to change, a
        :class:`pymc_dp.diagnostics.PoorMixingError` (the priced result is on its
        ``result``), or nothing. The diagnostics are written in every case.
    **kwargs
        Passed to ``pm.sample`` (``random_seed``, ``cores``, ``progressbar``, ...). Start
        values in ``initvals`` are recorded in the result (``dp_start``): a
        :class:`PrivateStart` (from ``approx.initial_values`` of a DPADVI fit) adds its
        events to the result's ε; any other ``initvals`` are recorded as user-supplied and
        must not be computed from the data.

    Returns
    -------
    arviz.InferenceData (PyMC 5) or xarray.DataTree (PyMC 6)
        Without any group, variable, coordinate or attribute that reads the data (see
        :mod:`pymc_dp.results`); ``posterior.attrs`` holds ``dp_epsilon``, ``dp_delta``,
        ``dp_neighbouring``, ``dp_n_rows`` (substitute only), ``dp_start``,
        ``dp_diagnostics`` (R-hat, ESS, MCSE and acceptance computed from the released
        draws: free) and ``dp_accountant`` (JSON with every public setting needed to recompute ε). The
        steps' calibrated noise belongs to this run only: it is cleared when the run ends,
        so the steps cannot be re-run uncharged with ``pm.sample``.

    Raises
    ------
    ValueError, TypeError
        For invalid settings; nothing is run or charged.
    PrivacyBudgetExceededError
        When the run would exceed ``epsilon`` or the budget; nothing is run or charged.

    Notes
    -----
    Neighbouring relation: that of the steps (substitute by default: one row replaced, N
    public); all steps and the budget must agree. ε covers every value the steps release in
    every iteration of every chain, tuning included; the draws, sampler statistics and
    tuned settings are post-processing of those releases. Compositions of Gaussian
    mechanisms are accounted exactly (Sommer et al. 2019, Lemma 12).
    """
    model = modelcontext(model)
    if delta is None and isinstance(budget, PrivacyBudget):
        delta = budget.delta
    if delta is None:
        raise ValueError("`delta` must be given (a number in (0, 1), typically below 1/N). Found None.")
    delta = check_unit_interval_open("delta", delta)
    if epsilon is not None:
        epsilon = check_finite_positive("epsilon", epsilon)
    draws = check_positive_int("draws", draws)
    tune = check_nonnegative_int("tune", tune)
    chains = check_positive_int("chains", chains)
    if budget is not None and not isinstance(budget, PrivacyBudget):
        raise TypeError(f"`budget` must be a pymc_dp.PrivacyBudget. Found {type(budget).__name__}.")
    _check_sample_kwargs(kwargs)
    steps = _flatten_steps(step)
    neighbouring, n_rows = _check_steps(steps, model, budget)
    var_names = _stored_variables(model, var_names)
    init = check_init(init)
    check_on_poor_mixing(on_poor_mixing)
    start, start_events = _start_provenance(kwargs.get("initvals"), init)
    if kwargs.get("initvals") is None and init == "prior":
        kwargs["initvals"] = prior_starts(model, chains, _start_seed(kwargs.get("random_seed")))

    iterations = chains * (tune + draws)
    if budget is not None and epsilon is None and any(s.needs_calibration for s in steps):
        # No target for this run: calibrate it to what is left of the budget.
        planned = _plan_calibration(steps, iterations, budget.epsilon, budget.delta, budget.events)
    else:
        planned = _plan_calibration(steps, iterations, epsilon, delta)
    events = [e for s in planned for e in s.privacy_events(iterations)]
    run_epsilon = compose_epsilon(events, delta)[0]
    if epsilon is not None and run_epsilon > epsilon:
        raise PrivacyBudgetExceededError(
            f"This run would spend ε={run_epsilon:.6g} at δ={delta:g}, above `epsilon`={epsilon:g}. Nothing was run; "
            f"use more noise, fewer chains or fewer iterations.{_iteration_hint(planned, epsilon, delta, chains)}"
        )
    if budget is not None:
        budget.check(events)

    # Every check passed: commit the calibration for this run and charge the budget, then touch
    # data. A run that PyMC aborts after this point is still charged: it may have released
    # partial results. The calibration is undone when the run ends, however it ends.
    restore = _commit_calibration(steps, planned, tune)
    if budget is not None:
        budget.charge(events, label=f"run {len(budget.labels) + 1}: {chains}×({tune}+{draws})")
    try:
        with data_free_errors("pm.sample"):
            idata = pm.sample(
                draws=draws, tune=tune, chains=chains, step=step, model=model, var_names=var_names, **kwargs
            )
    finally:
        for s in steps:
            s.forget_private_state()
        restore()

    released = list(start_events) + events
    result_epsilon, method, mu = compose_epsilon(released, delta)
    record = {
        "format": ACCOUNTANT_FORMAT,
        "method": method,
        "mu": mu,
        "delta": delta,
        "epsilon": result_epsilon,
        "run_epsilon": run_epsilon,
        "neighbouring": neighbouring,
        "n_rows": n_rows if neighbouring == "substitute" else None,
        "chains": chains,
        "tune": tune,
        "draws": draws,
        "iterations_per_chain": tune + draws,
        "steps": [s.accountant_settings() for s in planned],  # the run's noise (cleared from `steps`)
        "reproducible_noise": any(getattr(s, "reproducible_noise", False) for s in steps),
        "start": start,
        "events": [e.to_dict() for e in released],
        "versions": versions(),
    }
    if budget is not None:
        record["budget"] = {"epsilon": budget.epsilon, "delta": budget.delta, "spent": budget.spent().epsilon}
    finalize_result(idata, record, model)
    return attach_diagnostics(idata, on_poor_mixing)


def _start_seed(random_seed: Any) -> Any:
    """A generator for the prior starts, derived from ``pm.sample``'s seed (data-free randomness)."""
    if isinstance(random_seed, np.random.Generator):
        return np.random.default_rng(random_seed.spawn(1)[0]) if hasattr(random_seed, "spawn") else random_seed
    if isinstance(random_seed, int | np.integer):
        return np.random.default_rng([int(random_seed), 0x5747])  # distinct from PyMC's own stream
    if isinstance(random_seed, list | tuple):
        return np.random.default_rng([int(v) for v in random_seed] + [0x5747])
    return np.random.default_rng()


def _check_sample_kwargs(kwargs: dict[str, Any]) -> None:
    """Refuse ``pm.sample`` keywords that would release non-private values."""
    for key, why in _REFUSED_KWARGS.items():
        if key in kwargs:
            raise ValueError(f"`{key}` is not supported by pymc_dp.sample: {why}.")
    known = set(inspect.signature(pm.sample).parameters) - {"kwargs"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"Keyword arguments must be ones `pm.sample` accepts. Found unknown: {unknown}.")
    if kwargs.get("return_inferencedata", True) is not True:
        raise ValueError("`return_inferencedata` must be True: pymc_dp attaches its guarantee to the returned object.")
    idata_kwargs = dict(kwargs.get("idata_kwargs") or {})
    if idata_kwargs.get("log_likelihood") or idata_kwargs.get("log_prior"):
        raise ValueError(
            "`idata_kwargs` must not request log_likelihood or log_prior: they are exact per-row values of the data."
        )


def _check_steps(steps: list[Any], model: Any, budget: PrivacyBudget | None) -> tuple[str, int]:
    """The run's neighbouring relation and N, after checking that DP steps cover every free variable."""
    foreign = [type(s).__name__ for s in steps if not isinstance(s, DPStep)]
    if foreign:
        raise ValueError(
            f"`step` must contain only pymc_dp step methods. Found {foreign}, which evaluate the exact "
            "full-data log-density."
        )
    covered = {v for s in steps for v in s.vars}
    uncovered = [v.name for v in model.value_vars if v not in covered]
    if uncovered:
        raise ValueError(
            f"Every free variable must be sampled by a DP step. Found uncovered: {uncovered}. PyMC would assign "
            "them a non-private sampler (NUTS or Gibbs) that reads the raw data; add them to a DP step's `vars`."
        )
    relations = {s.neighbouring for s in steps}
    if budget is not None:
        relations.add(budget.neighbouring)
    if len(relations) > 1:
        raise ValueError(f"All steps and the budget must use one neighbouring relation. Found {sorted(relations)}.")
    neighbouring = relations.pop()
    if all(not getattr(s, "reads_model_rows", True) for s in steps):
        # Steps that hold their own data (DPSuffStatsPenaltyMH): the model holds priors only.
        if model.observed_RVs:
            raise ValueError(
                "`model` must hold no observed variables when the steps take the data themselves. Found "
                f"{[rv.name for rv in model.observed_RVs]}."
            )
        n_rows = steps[0].n_rows
    else:
        n_rows = _row_structure(model)[0]
    if any(s.n_rows != n_rows for s in steps):
        raise ValueError(
            "`step` must be built on the model's current data: the number of rows changed since it was built "
            "(pm.set_data?). Build the step again."
        )
    if neighbouring == "substitute" and budget is not None and budget.n_rows != n_rows:
        raise ValueError(f"`budget.n_rows` must equal the model's number of rows ({n_rows}). Found {budget.n_rows}.")
    return neighbouring, n_rows


def _stored_variables(model: Any, var_names: list[str] | None) -> list[str]:
    """The variables to store: ``var_names`` checked, or every free variable and data-free deterministic."""
    hidden = data_dependent_deterministics(model)
    if var_names is None:
        return [rv.name for rv in model.free_RVs] + [d.name for d in model.deterministics if d.name not in hidden]
    storable = {rv.name for rv in model.free_RVs} | {d.name for d in model.deterministics}
    leaking = [name for name in var_names if name in hidden]
    if leaking:
        raise ValueError(f"`var_names` must not include deterministics that read data. Found {leaking}.")
    unknown_names = [name for name in var_names if name not in storable]
    if unknown_names:
        raise ValueError(f"`var_names` must name free variables or deterministics of the model. Found {unknown_names}.")
    return list(var_names)


def _set_noise(step: DPStep, values: dict[str, Any]) -> None:
    for name, value in values.items():
        setattr(step, name, value)
    noise_changed = getattr(step, "_noise_changed", None)
    if noise_changed is not None:  # drop what was built for the previous noise
        noise_changed()


def _commit_calibration(steps: list[DPStep], planned: list[DPStep], tune: int):
    """Set the planned noise on the steps for one run; return the function that undoes it."""
    saved = []
    for real, plan in zip(steps, planned, strict=True):
        if real.needs_calibration:
            saved.append((real, {name: getattr(real, name) for name in real.noise_attributes}))
            _set_noise(real, {name: getattr(plan, name) for name in real.noise_attributes})
        real.planned_tune = tune

    def restore() -> None:
        for real, values in saved:
            _set_noise(real, values)

    return restore


def privacy_spent(idata: Any, delta: float | None = None, *, model: Any = None) -> PrivacySpent:
    """ε of a result, recomputed from the result alone, after checking it holds nothing else.

    First the result is checked (:func:`pymc_dp.results.check_publishable`): a result that
    holds a group, variable, statistic, coordinate or attribute reading the data is refused,
    with a message naming what to remove — its ε would not cover it. Then, for a result
    written by pymc_dp (``pymc_dp.sample``, DPADVI, released statistics, one posterior
    sample, :func:`pymc_dp.publish`), ε is recomputed from ``dp_accountant``. For a plain
    ``pm.sample`` result with DP steps it sums, over chains, the ``dp_mu_cumulative``
    statistic of each chain's last stored draw: the μ that chain spent up to that draw,
    tuning iterations included (so a result cut to fewer draws is priced for what it still
    reveals, and a result whose tuning draws were discarded is still charged for them). A
    subsampled DPBarkerMH result is priced in RDP from the N, batch size and iteration counts
    its statistics record (``dp_n_rows``, ``dp_batch_size``, ``dp_iterations``).

    Parameters
    ----------
    idata : InferenceData or DataTree
        A sampling result.
    delta : float, optional
        δ at which to report ε; defaults to the recorded ``dp_delta`` and is required when
        there is none.
    model : pm.Model, optional
        The model the result came from (from the context if omitted). Required for a plain
        ``pm.sample`` result, whose variables are checked against it; optional otherwise.

    Returns
    -------
    PrivacySpent

    Raises
    ------
    pymc_dp.results.UnpublishableResultError
        When the result holds what reads the data (``observed_data``, a posterior
        predictive group, a deterministic reading data, ...).

    Notes
    -----
    Neighbouring relation: the one the steps were built for (``"unknown"`` is reported for a
    plain ``pm.sample`` result, whose statistics do not record it). A result with statistics
    of non-DP samplers is refused.
    """
    attrs = posterior_attrs(idata)
    if "dp_accountant" in attrs:
        check_publishable(idata, model)
        if delta is None:
            delta = attrs["dp_delta"]
        record = json.loads(attrs["dp_accountant"])
        events = [event_from_dict(e) for e in record["events"]]
        eps, method, mu = compose_epsilon(events, float(delta))  # δ = 0 allowed for pure ε-DP releases
        return PrivacySpent(eps, delta, record["neighbouring"], method, mu, record["n_rows"], tuple(events))

    if model is None:
        try:
            model = modelcontext(None)
        except (TypeError, ValueError):
            raise ValueError(
                "`model` must be given for a plain pm.sample result (or call privacy_spent inside `with model:`): "
                "its variables are checked against the model for ones that read data. Found no model."
            ) from None
    check_publishable(idata, model)
    delta = attrs.get("dp_delta") if delta is None else delta
    if delta is None:
        raise ValueError("`delta` must be given: this result records no dp_delta. Found None.")
    delta = check_unit_interval_open("delta", float(delta))
    if "sample_stats" not in group_names(idata):
        raise ValueError("`idata` has no sample_stats: it is not the result of sampling with pymc_dp steps.")
    stats = group(idata, "sample_stats")
    # -- a subsampled DPBarkerMH: priced in RDP from the N, b and iteration counts its statistics record --
    barker = recorded_barker_releases(stats)
    if barker is not None:
        event, n_rows = barker
        eps, method, mu = compose_epsilon([event], delta)
        return PrivacySpent(eps, delta, "substitute", method, mu, n_rows, (event,))  # the test is substitute-only
    # -- Gaussian steps (full-data DPBarkerMH included): μ summed from dp_mu_cumulative --
    if "dp_mu_cumulative" not in stats:
        raise ValueError("`idata` has no dp_mu_cumulative statistic: it was not sampled with pymc_dp steps.")
    cumulative = stats["dp_mu_cumulative"]
    extra = [d for d in cumulative.dims if d not in ("chain", "draw")]
    cumulative = np.asarray(cumulative.sum(dim=extra) if extra else cumulative, dtype=float)
    # μ spent by each chain up to its last stored draw (tuning included), summed over chains.
    mu = float(np.max(cumulative, axis=1).sum())
    if not math.isfinite(mu):
        raise ValueError("`idata` holds a non-finite dp_mu_cumulative statistic.")
    return PrivacySpent(gaussian_epsilon(delta, mu), delta, "unknown", "gaussian_closed_form", mu, None, ())
