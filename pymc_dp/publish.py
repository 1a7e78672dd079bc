"""Publishing the result of a plain ``pm.sample`` run with pymc_dp steps."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
from pymc.model import modelcontext

from pymc_dp._errors import withholds_chains
from pymc_dp._validation import check_unit_interval_open
from pymc_dp.accounting.calibrate import round_towards_privacy
from pymc_dp.accounting.events import GaussianReleases
from pymc_dp.diagnostics import attach_diagnostics
from pymc_dp.results import (
    check_cumulative_statistic,
    check_integrity,
    data_reading_deterministics_in,
    finalize_result,
    group,
    note_dropped_deterministics,
    posterior_attrs,
    strip_private_groups,
)
from pymc_dp.run import AccountantRecord
from pymc_dp.sample_plan import _seeded_noise
from pymc_dp.sampling import _flatten_steps, privacy_spent
from pymc_dp.step_methods.base import DPStep

__all__ = ["publish"]

#: Label of the single event that :func:`publish` records when it prices from the statistics alone.
PLAIN_SAMPLE_LABEL = "pm.sample with pymc_dp steps (μ summed from dp_mu_cumulative)"

#: Start provenance of a plain ``pm.sample`` result: the run recorded none (``dp_start``).
UNRECORDED_START = {
    "source": "not recorded",
    "note": "a plain pm.sample run does not record where its chains started; initvals given to it are not covered "
    "by ε and must not come from the data",
}


@withholds_chains
def publish(idata: Any, *, model: Any = None, delta: float | None = None, step: Any = None) -> Any:
    """Turn the result of a plain ``pm.sample(step=...)`` run with DP steps into a publishable one.

    Checks and prices a copy first, and changes nothing when it refuses. Then, in place, it
    removes everything that reads the data (:func:`pymc_dp.strip_private_groups`: the
    ``observed_data``/``constant_data`` groups, deterministics that read data, the row
    coordinate, ``sampling_time``, ...) and writes the ``dp_*`` attributes that
    :func:`pymc_dp.sample` writes, so that :func:`pymc_dp.privacy_spent` recomputes the same
    ε from the published object alone.

    Parameters
    ----------
    idata : InferenceData or DataTree
        What ``pm.sample(step=...)`` returned, every free variable sampled by pymc_dp steps
        with their noise set. A result that already carries ``dp_accountant`` (from
        :func:`pymc_dp.sample` or an earlier ``publish``) is only stripped and re-checked.
    model : pymc.Model, optional
        The model that was sampled (from the context if omitted).
    delta : float
        δ at which ε is reported, in (0, 1). Required unless ``idata`` records ``dp_delta``.
    step : DPStep or list of DPStep, optional
        The step(s) the result was sampled with. With them, ε is computed from their public
        settings and the iteration counts the statistics record, the neighbouring relation and
        N (under substitute neighbours) are recorded. Without them, Gaussian steps are priced
        from ``dp_mu_cumulative`` and the relation is recorded as ``"unknown"``; a subsampled
        :class:`pymc_dp.DPBarkerMH` from the N, batch size and iteration counts its statistics
        record (its relation, substitute, is recorded).

    Returns
    -------
    InferenceData or DataTree
        ``idata`` itself, stripped and annotated, with ``dp_diagnostics`` computed from its
        released draws (like every result; no warning is raised here: one log line on PyMC's
        logger says whether the draws are usable, the worst R-hat and ESS and the thresholds
        of a DP chain, which differ from those of PyMC's own check: :mod:`pymc_dp.diagnostics`).
        ``dp_start`` is ``"not recorded"``: a plain ``pm.sample`` run does not say where its
        chains started (``initvals`` are not covered by ε).

    Raises
    ------
    ValueError
        When ``delta`` is missing or not in (0, 1); when ``sample_stats`` holds statistics of
        a non-DP sampler; when ``step`` does not match the result.
    pymc_dp.results.AlteredResultError
        When a result that carries a record is not the object the record priced (results
        joined along chains or draws, draws or record edited: :func:`pymc_dp.results.check_integrity`),
        or when a plain result's cumulative statistics show runs joined along ``draw``.
        Nothing is changed.

    Notes
    -----
    Neighbouring relation: that of the steps (substitute by default: one row replaced, N
    public). ε covers everything a chain released up to its last stored draw, tuning
    iterations included, summed over chains: for Gaussian steps μ is the sum over chains of
    the last ``dp_mu_cumulative`` statistic, converted exactly (Sommer et al. 2019, Lemma
    12); for DPBarkerMH the RDP of its iterations (Heikkilä et al. 2019, Cor. 2, eq. 22).

    References
    ----------
    .. [1] Sommer, D. M., Meiser, S. and Mohammadi, E. (2019). Privacy loss classes: the
       central limit theorem in differential privacy. PoPETs 2019(2).
    .. [2] Heikkilä, M., Jälkö, J., Dikmen, O. and Honkela, A. (2019). Differentially private
       Markov chain Monte Carlo. NeurIPS, Corollary 2.
    """
    model = modelcontext(model)
    attrs = posterior_attrs(idata)
    dropped = data_reading_deterministics_in(idata, model)  # names only, said before they are stripped
    if "dp_accountant" in attrs:
        check_integrity(idata)  # the object its record priced, before anything is stripped
        note_dropped_deterministics(dropped)
        strip_private_groups(idata, model)
        privacy_spent(idata, delta, model=model)  # checks what is left
        return idata
    if delta is None:
        raise ValueError("`delta` must be given for a plain pm.sample result (it records no dp_delta). Found None.")
    delta = check_unit_interval_open("delta", float(delta))
    note_dropped_deterministics(dropped)
    candidate = strip_private_groups(copy.deepcopy(idata), model)
    if step is not None:
        record = _record_from_steps(candidate, _flatten_steps(step), delta)
    else:
        record = _record_from_statistics(candidate, model, delta)
    strip_private_groups(idata, model)
    finalize_result(idata, record, model)
    # Every result carries diagnostics from its released draws. No warning here: the run happened in plain
    # PyMC, whose own convergence messages were shown; one log line says the DP verdict and its thresholds
    # (pymc_dp.diagnostics: at the ESS a DP budget buys, PyMC's R-hat 1.01 flags chains that mixed).
    return attach_diagnostics(idata, on_poor_mixing="ignore", say=True)


def _record_from_statistics(idata: Any, model: Any, delta: float) -> dict[str, Any]:
    """The record of a result priced from its statistics alone (:func:`pymc_dp.privacy_spent`'s plain branch)."""
    spent = privacy_spent(idata, delta, model=model)  # refuses foreign statistics
    if spent.events:  # priced from recorded public settings (a subsampled DPBarkerMH): keep its events
        return _publish_record(
            idata, list(spent.events), delta=delta, neighbouring=spent.neighbouring, n_rows=spent.n_rows
        )
    mu = float(spent.mu)
    events = []
    if mu > 0:
        tau = round_towards_privacy(math.sqrt(0.5 / mu), lambda t: 0.5 / t**2 >= mu, 0.0)  # μ of the event ≥ μ
        events = [GaussianReleases(tau, 1, label=PLAIN_SAMPLE_LABEL)]
    return _publish_record(idata, events, delta=delta, neighbouring="unknown", n_rows=None)


def _publish_record(
    idata: Any, events: list, *, delta: float, neighbouring: str, n_rows: int | None, **details: Any
) -> dict[str, Any]:
    """The accountant record ``publish`` writes (``details``: the step settings when they are known)."""
    return AccountantRecord.priced(
        "pymc_dp.publish",
        events,
        delta=delta,
        neighbouring=neighbouring,
        n_rows=n_rows,
        reproducible_noise=bool(details.pop("reproducible_noise", False)),
        start=dict(UNRECORDED_START),
        details={"chains": int(group(idata, "sample_stats").sizes.get("chain", 0)), **details},
    ).to_dict()


def _chain_total(idata: Any, statistic: str, over_steps: str) -> float:
    """Σ over chains of a cumulative statistic at the chain's last stored draw (steps combined by ``over_steps``)."""
    values = group(idata, "sample_stats")[statistic]
    check_cumulative_statistic(values, statistic)  # runs joined along `draw` would be priced as the last one
    extra = [d for d in values.dims if d not in ("chain", "draw")]
    if extra:
        values = values.sum(dim=extra) if over_steps == "sum" else values.max(dim=extra)
    return float(np.max(np.asarray(values, dtype=float), axis=1).sum())


def _record_from_steps(idata: Any, steps: list[Any], delta: float) -> dict[str, Any]:
    """The record of a result priced from its steps' public settings and the recorded iteration counts."""
    foreign = [type(s).__name__ for s in steps if not isinstance(s, DPStep)]
    if foreign:
        raise ValueError(f"`step` must contain only pymc_dp step methods. Found {foreign}.")
    stats = group(idata, "sample_stats")
    relations = {s.neighbouring for s in steps}
    if len(relations) > 1:
        raise ValueError(f"`step` must use one neighbouring relation. Found {sorted(relations)}.")
    if "dp_iterations" in stats:
        iterations = _chain_total(idata, "dp_iterations", "max")  # every step counts the same iterations
    elif "dp_mu_cumulative" in stats:
        mu_total = _chain_total(idata, "dp_mu_cumulative", "sum")  # the steps' μ add
        mu_per_iteration = sum(s.gaussian_mu_per_iteration() for s in steps)
        iterations = mu_total / mu_per_iteration
        if abs(iterations - round(iterations)) > 1e-6 * max(1.0, iterations):
            raise ValueError(
                "`step` must be the step(s) the result was sampled with: their noise does not match the μ the "
                "statistics record. Found another step."
            )
    else:
        raise ValueError("`idata` has no DP statistics: it was not sampled with pymc_dp steps.")
    iterations = round(iterations)
    events = [e for s in steps for e in s.privacy_events(iterations)]
    return _publish_record(
        idata,
        events,
        delta=delta,
        neighbouring=relations.pop(),
        n_rows=steps[0].n_rows,
        iterations=iterations,
        steps=[s.accountant_settings() for s in steps],
        reproducible_noise=_seeded_noise(steps),
    )
