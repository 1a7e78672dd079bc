"""The PyMC/ArviZ workflow on a private result: predictions on public data only.

``pm.sample_posterior_predictive(idata)`` on a DP result simulates from the model's *current*
data. With the training covariates (or the observed rows' ``pm.Data``) still in the model,
those draws are computed from the raw rows: they are not covered by ε. With new, public
covariates, the same call is post-processing of the DP draws and costs nothing.
:func:`sample_posterior_predictive` is the safe path: it takes the public data explicitly,
applies them to a clone of the model (the caller's model is not changed), refuses a
predictive graph that would still read anything but those data, the posterior draws and
the prior's own constants, and returns only the predictive group.

This module reads no data: it inspects model graphs and replaces data containers by values
the caller declares public.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pymc as pm
from pymc.model import modelcontext
from pymc.model.fgraph import clone_model
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors

from pymc_dp.results import check_publishable, group_names, posterior_attrs

__all__ = ["PREDICTIVE_GROUPS", "sample_posterior_predictive"]

#: The groups :func:`sample_posterior_predictive` returns (everything else is dropped).
PREDICTIVE_GROUPS = ("posterior_predictive", "predictions")


def _roots(outputs: Sequence[Variable]) -> list[Variable]:
    return [v for v in ancestors(list(outputs)) if v.owner is None]


def _is_rng(var: Variable) -> bool:
    return "RandomGenerator" in type(var.type).__name__ or "RandomState" in type(var.type).__name__


def sample_posterior_predictive(
    result: Any,
    model: Any = None,
    *,
    data: Mapping[str, Any],
    coords: Mapping[str, Any] | None = None,
    var_names: Sequence[str] | None = None,
    predictions: bool = True,
    **kwargs: Any,
) -> Any:
    """Posterior predictive draws of a private result on new, public data (post-processing only).

    Parameters
    ----------
    result : InferenceData or DataTree
        A published private result (it carries ``dp_accountant``): from
        :func:`pymc_dp.sample`, a DPADVI approximation's ``sample``, released statistics, or
        :func:`pymc_dp.publish`.
    model : pm.Model, optional
        The model the result was sampled from (from the context if omitted). It is not
        changed: the data are set on a clone.
    data : dict of str to array
        New values for **every** ``pm.Data`` container of the model, by name: public
        covariates (rows that are not the training rows, e.g. a prediction grid) and, for an
        observed variable's container, an array of the new number of rows (its values are
        not used by the forward simulation). You declare these values public.
    coords : dict, optional
        New coordinates for dimensions whose length changes (as ``pm.set_data``'s).
    var_names : list of str, optional
        Variables to simulate (default: the observed variables).
    predictions : bool, default True
        Name the group ``predictions`` (out-of-sample, as ``pm.sample_posterior_predictive``
        with ``predictions=True``); ``False`` names it ``posterior_predictive``.
    **kwargs
        Passed to ``pm.sample_posterior_predictive`` (``random_seed``, ``progressbar``, ...).

    Returns
    -------
    InferenceData or DataTree
        The predictive group only: no ``observed_data`` or ``constant_data`` group.

    Raises
    ------
    ValueError
        When ``result`` carries no privacy record; when ``data`` misses a container of the
        model, names something that is not one, or is empty; when an observed variable's data
        is not a ``pm.Data`` container (its rows would be the training rows); when the
        predictive graph of a requested variable reads an array constant that the prior does
        not use (training covariates given to the model as a NumPy array). Nothing is run.
    pymc_dp.UnpublishableResultError
        When ``result`` holds what reads the data.

    Notes
    -----
    Neighbouring relation: that of ``result``; the draws are post-processing of ``result``
    and of the public ``data``, so they cost no privacy (Dwork and Roth 2014, Prop. 2.1) —
    provided the values in ``data`` are public, which this function cannot check: do not
    pass the training rows, or values computed from them. ``pm.sample_posterior_predictive``
    called directly on a DP result with the training data still in the model reads the raw
    rows and is not covered by ε.

    References
    ----------
    .. [1] Dwork, C. and Roth, A. (2014). The algorithmic foundations of differential privacy.
       Foundations and Trends in TCS 9(3–4), Proposition 2.1 (post-processing).
    """
    if "posterior" not in group_names(result) or "dp_accountant" not in posterior_attrs(result):
        raise ValueError(
            "`result` must be a published private result (it carries dp_accountant): sample with pymc_dp.sample "
            "or publish a plain pm.sample result with pymc_dp.publish. Found none."
        )
    model = modelcontext(model)
    check_publishable(result, model)
    if not isinstance(data, Mapping) or not data:
        raise ValueError(
            "`data` must be a non-empty dict giving new, public values for the model's pm.Data containers "
            f"(predictions on the training rows read the raw data). Found {data!r}."
        )
    containers = {v.name for v in model.data_vars}
    unknown = sorted(set(data) - containers)
    if unknown:
        raise ValueError(f"`data` must name pm.Data containers of the model ({sorted(containers)}). Found {unknown}.")
    missing = sorted(containers - set(data))
    if missing:
        raise ValueError(
            f"`data` must give new values for every pm.Data container of the model: {missing} would keep their "
            "training rows. Found values for "
            f"{sorted(data)}."
        )
    for rv in model.observed_RVs:
        observed = model.rvs_to_values[rv]
        if not isinstance(observed, SharedVariable):
            raise ValueError(
                f"`model` must hold the observed data of `{rv.name}` in a pm.Data container: its rows are fixed "
                "to the training rows, and predictions of its shape or values would read them. Found a constant "
                "array."
            )
    names = list(var_names) if var_names is not None else [rv.name for rv in model.observed_RVs]
    if not names:
        raise ValueError(
            "`var_names` must be given when the model has no observed variables (nothing to predict by default). "
            "Found None."
        )
    bad = [n for n in names if n not in model.named_vars]
    if bad:
        raise ValueError(f"`var_names` must name variables of the model. Found {bad}.")

    clone = clone_model(model)
    pm.set_data({k: np.asarray(v) for k, v in data.items()}, model=clone, coords=coords)
    _check_reads_only_public(clone, names)
    kwargs.pop("extend_inferencedata", None)
    predictive = pm.sample_posterior_predictive(
        result, model=clone, var_names=names, predictions=predictions, extend_inferencedata=False, **kwargs
    )
    keep = "predictions" if predictions else "posterior_predictive"
    for name in group_names(predictive):
        if name != keep:
            del predictive[name]
    return predictive


def _check_reads_only_public(model: Any, names: Sequence[str]) -> None:
    """Refuse a predictive graph that reads an array other than the public data, the prior's constants or sizes."""
    free_values = {rv: model.rvs_to_values[rv] for rv in model.free_RVs}
    allowed = set(model.data_vars) | set(model.dim_lengths.values()) | set(free_values.values())
    prior = model.logp(vars=model.free_RVs, jacobian=True)
    prior_constants = {id(v) for v in _roots([prior]) if isinstance(v, Constant | SharedVariable)}
    for name in names:
        var = model[name]
        [graph] = graph_replace([var], free_values, strict=False)
        for root in _roots([graph]):
            if root in allowed or _is_rng(root) or id(root) in prior_constants:
                continue
            if isinstance(root, Constant) and root.ndim == 0:
                continue
            raise ValueError(
                f"`{name}` must be simulated from public data only: its graph reads an array that is not a pm.Data "
                "container (training covariates given as a NumPy array, or an explicit size) nor a constant of the "
                "prior. Put covariates in pm.Data and pass new values in `data`. Found "
                f"{'a ' + type(root).__name__}."
            )
