"""Bambi models in pymc-dp: the PyMC model behind a Bambi formula, after the checks Bambi needs.

Bambi builds an ordinary PyMC model, so every pymc-dp entry point runs on it. But some of
Bambi's conveniences read the whole data set before the PyMC model exists, where pymc-dp's
graph checks cannot see them:

- ``auto_scale=True`` (Bambi's default) scales the default priors by statistics of the data
  (the response's and predictors' standard deviations): the prior would depend on every row
  and its use would not be covered by ε;
- ``center_predictors=True`` (the default) subtracts each predictor's sample mean from every
  row, so each row's term depends on all rows;
- ``dropna=True`` drops rows by their values, so the number of rows depends on the data;
- stateful transforms in the formula (``center(x)``, ``scale(x)``, ``standardize(x)``) use
  the data's mean or standard deviation.

:func:`from_bambi` refuses these, naming the setting, and returns the PyMC model.
"""

from __future__ import annotations

import re
from typing import Any

from pymc_dp._validation import BAMBI_CHECKED

__all__ = ["from_bambi"]

#: formulae's stateful transforms: each computes a statistic over all rows.
_STATEFUL_TRANSFORMS = ("center", "scale", "standardize")


def from_bambi(model: Any, *, public_levels: bool = False) -> Any:
    """The ``pm.Model`` of a Bambi model, after refusing settings that read the whole data set.

    Parameters
    ----------
    model : bambi.Model
        Built or not (it is built here). It must be constructed with ``auto_scale=False``,
        ``center_predictors=False`` and ``dropna=False``, priors chosen from public knowledge
        for every parameter, and a formula without stateful transforms.
    public_levels : bool, default False
        Whether the levels of the model's factor and group terms (Bambi reads them off the
        data) are public knowledge. They and their number appear in the result's coords, so a
        model with such terms is refused unless this is True.

    Returns
    -------
    pymc.Model
        ``model.backend.model``: pass it to :func:`pymc_dp.sample`, the steps and
        :class:`pymc_dp.DPADVI` as ``model=``.

    Raises
    ------
    TypeError
        When ``model`` is not a Bambi model.
    ValueError
        For a setting that makes the model depend on statistics of all rows.

    Notes
    -----
    The neighbouring relation and ε are those of the pymc-dp run the model is used in; this
    function releases nothing. What it cannot see: covariates the caller standardised with the
    data's own statistics before building the Bambi model (scale them by public ranges), and
    priors chosen after looking at the data.

    Examples
    --------
    >>> model = bmb.Model("y ~ x", df, priors=priors, auto_scale=False, center_predictors=False)  # doctest: +SKIP
    >>> pm_model = pmdp.from_bambi(model)  # doctest: +SKIP
    >>> step = pmdp.DPPenaltyMH(model=pm_model)  # doctest: +SKIP
    >>> idata = pmdp.sample(step=step, model=pm_model, epsilon=1.0, delta=1e-6)  # doctest: +SKIP
    """
    if not all(hasattr(model, name) for name in ("formula", "auto_scale", "build")):
        raise TypeError(f"`model` must be a bambi.Model. Found {type(model).__name__}.")
    if getattr(model, "auto_scale", False):
        raise ValueError(
            "`auto_scale` must be False: Bambi scales its default priors by the data's standard deviations, which "
            "read every row and are not covered by ε. Found auto_scale=True; build the model with auto_scale=False "
            "and priors chosen from public knowledge (priors={...})."
        )
    if getattr(model, "center_predictors", False):
        raise ValueError(
            "`center_predictors` must be False: Bambi subtracts each predictor's sample mean from every row, so one "
            "row's term depends on all rows. Found center_predictors=True; centre by a public value instead."
        )
    if getattr(model, "dropna", False):
        raise ValueError(
            "`dropna` must be False: dropping rows by their values makes the number of rows depend on the data. "
            "Found dropna=True; remove incomplete rows by a public rule before building the model."
        )
    formula = str(getattr(model.formula, "main", model.formula))
    extras = [str(f) for f in getattr(model.formula, "additionals", ()) or ()]
    for text in [formula, *extras]:
        found = [name for name in _STATEFUL_TRANSFORMS if re.search(rf"\b{name}\s*\(", text)]
        if found:
            raise ValueError(
                f"The formula must not use stateful transforms, which compute the data's mean or sd: found {found} "
                "in it. Scale the covariates by public ranges before building the model."
            )
    if not getattr(model, "built", False):
        model.build()
    pm_model = model.backend.model
    factor_dims = sorted(name for name in pm_model.coords if name != "__obs__")
    if factor_dims and not public_levels:
        raise ValueError(
            "`public_levels` must be True for a model with factor or group terms: Bambi takes their levels from the "
            f"data, and the levels and their number are part of the result (its coords). Found the dims {factor_dims} "
            "with public_levels=False; pass public_levels=True if the levels are public knowledge (a fixed list of "
            "regions, say), else recode them by a public rule first."
        )
    setattr(pm_model, BAMBI_CHECKED, True)
    return pm_model
