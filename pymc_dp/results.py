"""What a published result may hold: the one check and clean-up every front-end runs.

Every private result (``pymc_dp.sample`` with any step, DPADVI's ``approx.sample``, models
on released statistics, one posterior sample, ``pymc_dp.publish`` of a plain ``pm.sample``
result) passes through :func:`finalize_result` before it is returned, and
:func:`pymc_dp.privacy_spent` runs :func:`check_publishable` before it prices anything. The
check is an allow-list:

- **groups**: ``posterior``, ``sample_stats``, ``prior`` and their ``warmup_`` twins only.
  ``observed_data``, ``constant_data``, ``log_likelihood``, ``log_prior``,
  ``posterior_predictive``, ``predictions``, ``predictions_constant_data`` and
  ``prior_predictive`` all read the training data (the predictive groups are simulated from
  the raw covariates) and are refused;
- **variables** in ``posterior``/``prior``: those recorded as released when the result was
  made (``released_variables`` in ``dp_accountant``), or, given the model, free variables
  and deterministics that read no data (:func:`pymc_dp.data.data_dependent_deterministics`);
- **sample statistics**: ``dp_*`` statistics of the DP steps only;
- **coordinates**: none that only a removed variable used (row labels), and not the row
  dimension's labels;
- **attributes**: no ``sampling_time`` (wall time depends on the data through clipping
  and acceptance: a timing side channel).

This module reads no data: it inspects result objects and model graphs only.
"""

from __future__ import annotations

import json
from typing import Any

from pymc_dp.data import _row_structure, data_dependent_deterministics

__all__ = [
    "ACCOUNTANT_FORMAT",
    "DATA_GROUPS",
    "PUBLISHABLE_GROUPS",
    "PrivateStart",
    "UnpublishableResultError",
    "check_publishable",
    "finalize_result",
    "foreign_statistics",
    "private_content",
    "strip_private_groups",
    "write_privacy_attrs",
]

ACCOUNTANT_FORMAT = 1

#: Groups that read the training data: raw values, exact per-row values, or draws simulated from them.
DATA_GROUPS = (
    "observed_data",
    "constant_data",
    "log_likelihood",
    "log_prior",
    "posterior_predictive",
    "predictions",
    "predictions_constant_data",
    "prior_predictive",
)
#: Groups a published result may hold.
PUBLISHABLE_GROUPS = ("posterior", "sample_stats", "prior", "warmup_posterior", "warmup_sample_stats")
_VARIABLE_GROUPS = ("posterior", "prior", "warmup_posterior")
_STATS_GROUPS = ("sample_stats", "warmup_sample_stats")
#: Attributes PyMC writes that are side channels (wall time depends on clipping and acceptance).
_TIMING_ATTRS = ("sampling_time",)
_SAMPLE_DIMS = ("chain", "draw")


class UnpublishableResultError(ValueError):
    """A result holds something that reads the data; the message says what to remove."""


class PrivateStart(list):
    """Start values (``initvals``) computed by a DP release, with the events that priced it.

    A list of one dict per chain, as ``pm.sample``'s ``initvals``. :func:`sample` recognises
    it: the result's ``dp_epsilon`` is then the composition of these events and the run's,
    since the draws depend on both. The events are not charged again to a budget (the fit
    that made the start was charged when it ran).

    Parameters
    ----------
    points : list of dict
        One start point per chain.
    events : sequence of PrivacyEvent
        What the release that computed the points spent.
    source : str
        A short description recorded in the result (``dp_accountant["start"]``).
    """

    def __init__(self, points: list[dict[str, Any]], events: Any, source: str) -> None:
        super().__init__(points)
        self.events = tuple(events)
        self.source = str(source)


def group_names(idata: Any) -> list[str]:
    """Names of the groups of an InferenceData (PyMC 5) or DataTree (PyMC 6)."""
    groups = idata.groups() if callable(getattr(idata, "groups", None)) else idata.groups
    return [g.strip("/") for g in groups if g.strip("/")]


def group(idata: Any, name: str):
    """The xarray Dataset of a group, for InferenceData (PyMC 5) and DataTree (PyMC 6)."""
    node = idata[name]
    return node.to_dataset() if hasattr(node, "to_dataset") else node


def posterior_attrs(idata: Any) -> dict:
    """The posterior's attributes (where the ``dp_*`` attributes live), mutable in place."""
    return idata["posterior"].attrs


def _record(idata: Any) -> dict[str, Any] | None:
    if "posterior" not in group_names(idata):
        return None
    text = posterior_attrs(idata).get("dp_accountant")
    return None if text is None else json.loads(text)


def _allowed_variables(idata: Any, model: Any) -> set[str] | None:
    """Names a variable group may hold, or None when neither a record nor a model says."""
    allowed: set[str] | None = None
    record = _record(idata)
    if record is not None and "released_variables" in record:
        allowed = set(record["released_variables"])
    if model is not None:
        hidden = set(data_dependent_deterministics(model))
        from_model = {rv.name for rv in model.free_RVs} | ({d.name for d in model.deterministics} - hidden)
        allowed = from_model if allowed is None else allowed & from_model
    return allowed


def _row_dim(model: Any) -> str | None:
    if model is None or not model.observed_RVs:
        return None
    return _row_structure(model)[1]


def _orphan_coords(dataset) -> list[str]:
    used = {dim for name in dataset.data_vars for dim in dataset[name].dims}
    return [str(c) for c in dataset.coords if str(c) not in _SAMPLE_DIMS and not set(dataset[c].dims) <= used]


def private_content(idata: Any, model: Any = None) -> list[str]:
    """What in ``idata`` reads the data or is not covered by its ε, one finding per line.

    Parameters
    ----------
    idata : InferenceData or DataTree
        A sampling or fitting result.
    model : pm.Model, optional
        The model the result came from. Needed to tell which variables read data when the
        result records none (a plain ``pm.sample`` result).

    Returns
    -------
    list of str
        Empty when the result may be published.
    """
    findings: list[str] = []
    present = group_names(idata)
    for name in present:
        if name in DATA_GROUPS:
            findings.append(f"group `{name}` (it reads the training data)")
        elif name not in PUBLISHABLE_GROUPS:
            findings.append(f"group `{name}` (not a group pymc_dp can vouch for)")
    allowed = _allowed_variables(idata, model)
    row_dim = _row_dim(model)
    for name in present:
        if name not in PUBLISHABLE_GROUPS:
            continue
        dataset = group(idata, name)
        if name in _VARIABLE_GROUPS:
            if allowed is None:
                if len(dataset.data_vars):
                    findings.append(
                        f"variables of group `{name}` cannot be checked: the result records no released variables; "
                        "pass `model=` (the model it was sampled from)"
                    )
            else:
                for var in sorted(set(map(str, dataset.data_vars)) - allowed):
                    findings.append(f"variable `{var}` in group `{name}` (it reads data or was not released)")
        else:
            for var in sorted(str(v) for v in dataset.data_vars if not str(v).startswith("dp_")):
                findings.append(f"statistic `{var}` in group `{name}` (not a DP step's statistic)")
        kept = dataset.drop_vars([v for v in dataset.data_vars if allowed is not None and str(v) not in allowed])
        for coord in _orphan_coords(kept if name in _VARIABLE_GROUPS else dataset):
            findings.append(f"coordinate `{coord}` in group `{name}` (only variables that read data use it)")
        if row_dim is not None and row_dim in dataset.coords:
            findings.append(f"coordinate `{row_dim}` in group `{name}` (labels of the data's rows)")
        for key in _TIMING_ATTRS:
            if key in dataset.attrs:
                findings.append(f"attribute `{key}` of group `{name}` (a timing side channel)")
    return list(dict.fromkeys(findings))


def check_publishable(idata: Any, model: Any = None) -> None:
    """Raise :class:`UnpublishableResultError` if ``idata`` holds anything that reads data.

    See the module docstring for the allow-list. The message lists every finding and how
    to remove them; it names groups, variables and coordinates, never values.
    """
    findings = private_content(idata, model)
    if findings:
        raise UnpublishableResultError(
            "This result holds what its ε does not cover: "
            + "; ".join(findings)
            + ". Remove them with pymc_dp.strip_private_groups(idata, model=model) (it deletes exactly these), or "
            "sample with pymc_dp.sample / publish with pymc_dp.publish, which never keep them."
        )


def _replace_group(idata: Any, name: str, dataset) -> None:
    attrs = dict(idata[name].attrs)
    del idata[name]
    dataset = dataset.copy()
    dataset.attrs = attrs
    idata[name] = dataset


def foreign_statistics(idata: Any) -> list[str]:
    """Sample statistics that no DP step writes (a non-DP sampler such as NUTS ran on the model)."""
    return sorted(
        {
            str(v)
            for name in group_names(idata)
            if name in _STATS_GROUPS
            for v in group(idata, name).data_vars
            if not str(v).startswith("dp_")
        }
    )


def strip_private_groups(idata: Any, model: Any = None, *, foreign_statistics_ok: bool = False) -> Any:
    """Delete (in place) everything :func:`private_content` finds that can be deleted; return ``idata``.

    Removes the data groups and any group not on the allow-list, variables that read data
    (given ``model``, or as the result's record says), coordinates only they used, the row
    dimension's labels (the dimension stays, without labels) and ``sampling_time``. Without
    a model or a record, variables are left as they are (and :func:`check_publishable`
    refuses the result until a model is given).

    Statistics of a non-DP sampler are refused, not deleted, and nothing is changed: they
    show that a sampler that reads the raw data (NUTS, say, given the variables no DP step
    covered) produced some of the draws, and deleting its statistics would leave those
    exact draws behind, priced as if only the DP steps had run. (``foreign_statistics_ok``
    is for pymc_dp's own front-ends, whose samplers read only released values, e.g. NUTS
    on released sufficient statistics: their statistics are deleted.)

    Raises
    ------
    UnpublishableResultError
        When ``sample_stats`` holds statistics no DP step writes (unless
        ``foreign_statistics_ok``).
    """
    foreign = foreign_statistics(idata)
    if foreign and not foreign_statistics_ok:
        raise UnpublishableResultError(
            f"This result holds statistics of a non-DP sampler ({foreign}): some of its draws come from a sampler "
            "that reads the raw data, and no clean-up makes them private. Sample every free variable with DP steps "
            "(pymc_dp.sample refuses a model with uncovered variables). Nothing was changed."
        )
    for name in group_names(idata):
        if name not in PUBLISHABLE_GROUPS:
            del idata[name]
    allowed = _allowed_variables(idata, model)
    row_dim = _row_dim(model)
    for name in group_names(idata):
        dataset = group(idata, name)
        if name in _VARIABLE_GROUPS:
            drop = [v for v in dataset.data_vars if allowed is not None and str(v) not in allowed]
        else:
            drop = [v for v in dataset.data_vars if not str(v).startswith("dp_")]
        cleaned = dataset.drop_vars(drop)
        cleaned = cleaned.drop_vars(_orphan_coords(cleaned))
        if row_dim is not None and row_dim in cleaned.coords:
            cleaned = cleaned.drop_vars(row_dim)
        for key in _TIMING_ATTRS:
            idata[name].attrs.pop(key, None)
        if set(cleaned.variables) != set(dataset.variables):
            _replace_group(idata, name, cleaned)
    return idata


def write_privacy_attrs(idata: Any, record: dict[str, Any]) -> Any:
    """Write the ``dp_*`` attributes of an accountant ``record`` on ``idata``'s posterior; return it.

    ``record`` holds at least ``epsilon``, ``delta``, ``neighbouring``, ``n_rows`` and
    ``events`` (enough for :func:`pymc_dp.privacy_spent` to recompute ε). The names of the
    variables the result holds are added as ``released_variables``: a variable added later
    (a deterministic computed on the data, say) is then refused by :func:`check_publishable`.
    N is written only under substitute neighbours, where it is public.
    """
    record = dict(record)
    record["released_variables"] = sorted(
        {str(v) for name in group_names(idata) if name in _VARIABLE_GROUPS for v in group(idata, name).data_vars}
    )
    attrs = posterior_attrs(idata)
    attrs["dp_epsilon"] = record["epsilon"]
    attrs["dp_delta"] = record["delta"]
    attrs["dp_neighbouring"] = record["neighbouring"]
    if record["neighbouring"] == "substitute":  # N is public only under substitute neighbours
        attrs["dp_n_rows"] = record["n_rows"]
    else:
        attrs.pop("dp_n_rows", None)
    attrs["dp_reproducible_noise"] = bool(record.get("reproducible_noise", False))
    if "start" in record:
        attrs["dp_start"] = record["start"]["source"]
    attrs["dp_accountant"] = json.dumps(record)
    return idata


def finalize_result(
    idata: Any, record: dict[str, Any], model: Any = None, *, foreign_statistics_ok: bool = False
) -> Any:
    """Strip, check and annotate a result: the last stage of every private front-end.

    Deletes what reads data (:func:`strip_private_groups`), refuses what cannot be deleted
    (:func:`check_publishable`), then writes the ``dp_*`` attributes
    (:func:`write_privacy_attrs`). Returns ``idata``. ``foreign_statistics_ok`` is for
    results whose non-DP sampler read only released values (NUTS on released statistics).
    """
    strip_private_groups(idata, model, foreign_statistics_ok=foreign_statistics_ok)
    check_publishable(idata, model)
    return write_privacy_attrs(idata, record)
