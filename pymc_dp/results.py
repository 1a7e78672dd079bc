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

A result that carries a record (``dp_accountant``) must also be the object the record was
written for: :func:`write_privacy_attrs` writes ``dp_integrity``, a SHA-256 digest of the
record's text and of every value the result's groups held when it was made, and
:func:`check_integrity` (run by :func:`check_publishable`, hence by
:func:`pymc_dp.privacy_spent`, :func:`pymc_dp.publish` and :func:`pymc_dp.privacy_statement`)
refuses a result whose draws, chains, statistics or record differ from them (results joined
along chains or draws, draws edited, events deleted), and a record whose ε is not the
composition of its events. The digest has no secret key: it stops an honest mistake from
being mispriced and makes an edit deliberate; it is not a signature (``docs/privacy.md``).

This module reads no data: it inspects result objects and model graphs only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from pymc_dp.data import _row_structure, data_dependent_deterministics

__all__ = [
    "ACCOUNTANT_FORMAT",
    "DATA_GROUPS",
    "INTEGRITY_FORMAT",
    "PUBLISHABLE_GROUPS",
    "AlteredResultError",
    "PrivateStart",
    "UnpublishableResultError",
    "check_cumulative_statistic",
    "check_integrity",
    "check_publishable",
    "data_reading_deterministics_in",
    "finalize_result",
    "foreign_statistics",
    "note_dropped_deterministics",
    "private_content",
    "strip_private_groups",
    "write_privacy_attrs",
]

ACCOUNTANT_FORMAT = 1
#: Version of the ``dp_integrity`` attribute (what its digest covers and how).
INTEGRITY_FORMAT = 1

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


class AlteredResultError(UnpublishableResultError):
    """A result is not the object its record priced: joined, extended, cut or edited after it was made."""


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
    to remove them; it names groups, variables and coordinates, never values. A result that
    carries a record (``dp_accountant``) is then checked against it (:func:`check_integrity`):
    :class:`AlteredResultError` when it is not the object the record priced.
    """
    _check_private_content(idata, model)
    check_integrity(idata)


#: Groups that ``pm.sample_posterior_predictive`` adds (with ``extend_inferencedata=True``, to the result itself).
_PREDICTIVE_GROUPS = ("posterior_predictive", "predictions")


def _check_private_content(idata: Any, model: Any) -> None:
    findings = private_content(idata, model)
    if findings:
        predictive = ""
        if any(name in _PREDICTIVE_GROUPS for name in group_names(idata)):
            predictive = (
                " pm.sample_posterior_predictive simulates from the model's current data: with the training rows "
                "still in the model its draws are computed from the raw rows (and it adds the rows themselves as "
                "observed_data and constant_data), none of it covered by ε. For predictive draws that are, use "
                "pymc_dp.sample_posterior_predictive(idata, model, data={...}) with new, public data: it returns "
                "them apart from the result (docs/workflow.md)."
            )
        raise UnpublishableResultError(
            "This result holds what its ε does not cover: "
            + "; ".join(findings)
            + ". Remove them with pymc_dp.strip_private_groups(idata, model=model) (it deletes exactly these), or "
            "sample with pymc_dp.sample / publish with pymc_dp.publish, which never keep them." + predictive
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
    N is written only under substitute neighbours, where it is public. Last, ``dp_integrity``
    (a JSON string) binds the record's text to the values the result's groups hold now
    (:func:`check_integrity`): write it after the draws are final.
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
    # 0 or 1: NetCDF has no boolean attributes (a Python bool stops to_netcdf)
    attrs["dp_reproducible_noise"] = int(bool(record.get("reproducible_noise", False)))
    if "start" in record:
        attrs["dp_start"] = record["start"]["source"]
    attrs["dp_accountant"] = json.dumps(record)
    attrs["dp_integrity"] = json.dumps(_integrity(idata, attrs["dp_accountant"]))
    return idata


def data_reading_deterministics_in(idata: Any, model: Any) -> list[str]:
    """Names of ``model``'s deterministics that read data and that ``idata``'s posterior holds (none without one)."""
    if model is None or "posterior" not in group_names(idata):
        return []
    present = {str(v) for v in group(idata, "posterior").data_vars}
    return sorted(present & set(data_dependent_deterministics(model)))


def note_dropped_deterministics(names: Iterable[str]) -> None:
    """Say which deterministics that read the data a DP result leaves out (PyMC's logger, WARNING).

    Called by every front-end that drops them (``pymc_dp.sample`` with or without a step,
    DPADVI's ``approx.sample``, one posterior sample), so that a ``pm.Deterministic`` never
    disappears from a result without a word. Only the names are said: they come from the
    model's code, never from the rows; no value is computed. Nothing is said for an empty
    ``names``. A log record rather than a Python warning, like PyMC's own run messages: it
    describes the model, not a fault of the run, and the caller can silence it with
    ``logging.getLogger("pymc")``.
    """
    hidden = sorted(set(names))
    if hidden:
        logging.getLogger("pymc").warning(
            "Not stored in the DP result: deterministics that read the data (%s). Their values would be computed "
            "from the private rows without noise, which no privacy guarantee covers; compute them after sampling from "
            "the draws and public data (pymc_dp.sample_posterior_predictive(idata, model, data=...)).",
            ", ".join(hidden),
        )


def finalize_result(
    idata: Any, record: dict[str, Any], model: Any = None, *, foreign_statistics_ok: bool = False
) -> Any:
    """Strip, check and annotate a result: the last stage of every private front-end.

    Deletes what reads data (:func:`strip_private_groups`; deterministics that read the data
    are named on PyMC's logger, :func:`note_dropped_deterministics`), refuses what cannot be
    deleted (:func:`check_publishable`), then writes the ``dp_*`` attributes
    (:func:`write_privacy_attrs`). Returns ``idata``. ``foreign_statistics_ok`` is for
    results whose non-DP sampler read only released values (NUTS on released statistics).
    """
    note_dropped_deterministics(data_reading_deterministics_in(idata, model))
    strip_private_groups(idata, model, foreign_statistics_ok=foreign_statistics_ok)
    _check_private_content(idata, model)  # a fresh result: its integrity is written next
    return write_privacy_attrs(idata, record)


# -- integrity: the result is the object its record priced -------------------------------------
_RECORD_COUNTS = (
    ("posterior", "chain", "chains"),
    ("posterior", "draw", "draws"),
    ("warmup_posterior", "draw", "tune"),
)
_JOINED_ADVICE = (
    "results joined, extended or cut after sampling are not priced by pymc_dp: price each run as pymc_dp returned it "
    "(pmdp.privacy_spent on each; runs on the same rows compose, e.g. in one pmdp.PrivacyBudget)"
)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _variable_digest(array: Any) -> dict[str, Any]:
    """Dims, shape and SHA-256 of one variable's values (stable across dtype widening and NetCDF)."""
    values = np.asarray(array.values)
    digest = hashlib.sha256()
    kind = values.dtype.kind
    if kind in "biu":  # booleans and integers as little-endian int64
        digest.update(b"i8" + np.ascontiguousarray(values, dtype="<i8").tobytes())
    elif kind == "f":
        digest.update(b"f8" + np.ascontiguousarray(values, dtype="<f8").tobytes())
    elif kind == "c":
        digest.update(b"c16" + np.ascontiguousarray(values, dtype="<c16").tobytes())
    else:  # strings, objects: their text
        digest.update(b"txt" + _canonical([str(v) for v in values.ravel()]).encode("utf-8"))
    return {"dims": [str(d) for d in array.dims], "shape": [int(n) for n in values.shape], "sha256": digest.hexdigest()}


def _group_digest(dataset: Any) -> dict[str, Any]:
    return {
        "chain": int(dataset.sizes.get("chain", 0)),
        "draw": int(dataset.sizes.get("draw", 0)),
        "variables": {str(v): _variable_digest(dataset[v]) for v in sorted(map(str, dataset.data_vars))},
    }


def _outer_digest(content: dict[str, Any]) -> str:
    return _sha256(_canonical({k: v for k, v in content.items() if k != "digest"}))


def _integrity(idata: Any, record_text: str) -> dict[str, Any]:
    """The ``dp_integrity`` content: the record's digest, every publishable group's values, one digest of both."""
    content: dict[str, Any] = {
        "format": INTEGRITY_FORMAT,
        "algorithm": "sha256",
        "record_sha256": _sha256(record_text),
        "groups": {
            name: _group_digest(group(idata, name)) for name in group_names(idata) if name in PUBLISHABLE_GROUPS
        },
    }
    content["digest"] = _outer_digest(content)
    return content


def _altered(found: str, advice: str = _JOINED_ADVICE) -> AlteredResultError:
    return AlteredResultError(
        f"`idata` must be the result pymc_dp made and priced, unchanged. Found {found}: {advice}. Nothing was priced."
    )


def check_integrity(idata: Any) -> None:
    """Refuse a result that is not the object its record (``dp_accountant``) priced.

    Checks, without trusting any attribute:

    - ``dp_integrity`` is present and its digest matches the record's text and the values
      it lists (an edited record, events deleted say, or an edited digest is refused);
    - every variable the result held when it was made has the same dims, shape and values
      (results joined along chains or draws, draws replaced or thinned, statistics of
      another run are refused); a variable or a group other than the posterior may have been
      deleted (that releases less), none added to a publishable group;
    - the record's ε is the composition of its events at its δ, and the ``dp_epsilon``,
      ``dp_delta``, ``dp_neighbouring`` and ``dp_n_rows`` attributes, where present, agree
      with it;
    - the posterior has no more chains and draws (and ``warmup_posterior`` no more draws)
      than the record's ``chains``, ``draws`` and ``tune``, where it states them.

    A result without ``dp_accountant`` (a plain ``pm.sample`` result) is not checked here:
    :func:`pymc_dp.privacy_spent` prices it from its statistics
    (:func:`check_cumulative_statistic`).

    Parameters
    ----------
    idata : InferenceData or DataTree
        A result.

    Raises
    ------
    AlteredResultError
        Naming what disagrees (counts, group and variable names; never values).

    Notes
    -----
    The digest (SHA-256 over the record's text and the values, no secret key) is a
    consistency check, not a signature: whoever edits a result can recompute it. It makes
    mispricing by mistake impossible and tampering deliberate.
    """
    if "posterior" not in group_names(idata):
        return
    attrs = posterior_attrs(idata)
    text = attrs.get("dp_accountant")
    if text is None:
        return
    stored_text = attrs.get("dp_integrity")
    if stored_text is None:
        raise _altered(
            "a record (dp_accountant) without dp_integrity",
            "the record cannot be checked against the draws (a result made by pymc_dp before dp_integrity existed, or "
            "one whose attribute was removed); sample or publish it again",
        )
    try:
        stored = json.loads(stored_text)
        groups = dict(stored["groups"])
        if stored["format"] != INTEGRITY_FORMAT or stored["algorithm"] != "sha256":
            raise ValueError
    except (TypeError, ValueError, KeyError):
        raise _altered(
            "a dp_integrity attribute that is not one pymc_dp writes", "sample or publish it again"
        ) from None
    if _sha256(str(text)) != stored.get("record_sha256"):
        raise _altered(
            "a record (dp_accountant) edited after the result was made",
            "its ε, events or counts are not those it was priced with; price the result as pymc_dp returned it",
        )
    if _outer_digest(stored) != stored.get("digest"):
        raise _altered("a dp_integrity attribute edited after the result was made", "sample or publish it again")
    present = [name for name in group_names(idata) if name in PUBLISHABLE_GROUPS]
    added = [name for name in present if name not in groups]
    if added:
        raise _altered(f"group(s) {added} added after the result was made")
    if "posterior" not in groups:
        raise _altered("a record on a result made without a posterior", "sample or publish it again")
    record = json.loads(text)
    _check_counts(idata, record)
    for name in present:
        _check_group(name, group(idata, name), groups[name], record)
    _check_record(record, attrs)


def _check_group(name: str, dataset: Any, stored: dict[str, Any], record: dict[str, Any]) -> None:
    """One group against its digest: counts first (the likely mistake), then each variable."""
    for dim, noun in (("chain", "chains"), ("draw", "draws per chain")):
        found, made = int(dataset.sizes.get(dim, 0)), int(stored[dim])
        if found != made:
            priced = {("posterior", "chain"): "chains", ("posterior", "draw"): "draws"}.get((name, dim))
            says = f"; its record priced {record[priced]}" if priced and isinstance(record.get(priced), int) else ""
            raise _altered(f"a `{name}` group of {found} {noun} where the result was made with {made}{says}")
    variables = stored["variables"]
    extra = sorted(set(map(str, dataset.data_vars)) - set(variables))
    if extra:
        raise _altered(f"variable(s) {extra} in group `{name}` added after the result was made")
    for var in sorted(map(str, dataset.data_vars)):
        found, made = _variable_digest(dataset[var]), variables[var]
        if found["dims"] != made["dims"] or found["shape"] != made["shape"]:
            raise _altered(
                f"variable `{var}` in group `{name}` of dims {found['dims']} and shape {found['shape']} where the "
                f"result was made with {made['dims']} and {made['shape']}"
            )
        if found["sha256"] != made["sha256"]:
            raise _altered(
                f"values of variable `{var}` in group `{name}` that differ from those the result was made with "
                "(draws edited, replaced or re-assembled from several runs)"
            )


def _check_record(record: dict[str, Any], attrs: Any) -> None:
    """The record's ε is its events' composition, and the ``dp_*`` attributes say what it says."""
    from pymc_dp.accounting.composition import compose_epsilon
    from pymc_dp.accounting.events import event_from_dict

    try:
        events = [event_from_dict(e) for e in record["events"]]
        delta, epsilon = float(record["delta"]), float(record["epsilon"])
    except (KeyError, TypeError, ValueError):
        raise _altered("a record without readable events, delta and epsilon", "sample or publish it again") from None
    composed = compose_epsilon(events, delta)[0] if events else 0.0
    if not math.isclose(composed, epsilon, rel_tol=1e-9, abs_tol=1e-12):
        raise _altered(
            f"a record whose ε ({epsilon:.6g}) is not the composition of its {len(events)} events at its δ "
            f"({composed:.6g})",
            "its events or ε were edited; price the result as pymc_dp returned it",
        )
    expected = {
        "dp_epsilon": epsilon,
        "dp_delta": delta,
        "dp_neighbouring": record.get("neighbouring"),
        "dp_n_rows": record.get("n_rows"),
    }
    for key, value in expected.items():
        if key in attrs and attrs[key] != value:
            raise _altered(f"an attribute `{key}` that disagrees with the record", "price the result from its record")


def _check_counts(idata: Any, record: dict[str, Any]) -> None:
    """No more chains or draws than the record's ``chains``, ``draws`` and ``tune`` say it priced."""
    present = group_names(idata)
    for name, dim, key in _RECORD_COUNTS:
        stated = record.get(key)
        if name not in present or isinstance(stated, bool) or not isinstance(stated, int):
            continue
        found = int(group(idata, name).sizes.get(dim, 0))
        if found > stated:
            noun = "chains" if dim == "chain" else "draws per chain"
            raise _altered(f"a `{name}` group of {found} {noun}; its record priced {stated}")


def check_cumulative_statistic(values: Any, name: str) -> None:
    """Refuse a cumulative statistic that is not one run's: each chain's must grow by one amount per stored draw.

    ``dp_mu_cumulative`` (μ spent so far) and ``dp_iterations`` (iterations so far) grow by
    the same amount at every iteration of a chain. A result joined along ``draw`` from
    several runs shows a drop (or a jump) where they meet, and would be priced as its last
    run only; a result thinned or cut evenly still grows by one amount per stored draw.

    Parameters
    ----------
    values : xarray.DataArray
        The statistic, dims ``("chain", "draw", ...)``; extra dims (one per step) are summed.
    name : str
        Its name, for the message.

    Raises
    ------
    AlteredResultError
        When a chain's statistic does not grow by one positive amount per stored draw.
    """
    extra = [d for d in values.dims if d not in _SAMPLE_DIMS]
    array = np.asarray(values.sum(dim=extra) if extra else values, dtype=float)
    if array.ndim != 2 or array.shape[1] < 2:
        return
    steps = np.diff(array, axis=1)
    if not np.all(np.isfinite(steps)):
        return  # not a cumulative count of this kind (NaN for non-Gaussian steps): priced otherwise
    first = steps[:, :1]
    uneven = ~np.isclose(steps, first, rtol=1e-6, atol=0.0) | (steps <= 0)
    if uneven.any():
        chain = int(np.argmax(uneven.any(axis=1)))
        raise _altered(
            f"a `{name}` statistic that does not grow by one amount per stored draw in chain {chain}",
            "draws of several runs were joined along `draw` (the result would be priced as its last run alone), or "
            "draws were picked unevenly; price each run as it was sampled (a result cut to evenly spaced draws is "
            "priced for what it still reveals)",
        )
