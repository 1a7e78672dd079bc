"""Publishing the result of a plain ``pm.sample`` run with pymc_dp steps."""

from __future__ import annotations

import math
from typing import Any

from pymc.model import modelcontext

from pymc_dp._validation import check_unit_interval_open
from pymc_dp.accounting.events import GaussianReleases, compose_epsilon
from pymc_dp.data import data_dependent_deterministics
from pymc_dp.sampling import (
    ACCOUNTANT_FORMAT,
    _group,
    _group_names,
    _posterior_attrs,
    _versions,
    privacy_spent,
    strip_private_groups,
    write_privacy_attrs,
)

__all__ = ["publish"]

#: Label of the single event that :func:`publish` records for a plain ``pm.sample`` result.
PLAIN_SAMPLE_LABEL = "pm.sample with pymc_dp steps (μ summed from dp_mu_cumulative)"


def publish(idata: Any, *, model: Any = None, delta: float | None = None) -> Any:
    """Turn the result of a plain ``pm.sample(step=...)`` run with DP steps into a publishable one.

    Checks the result first and changes nothing when it refuses. Then, in place, it removes
    the groups that hold raw data or per-row values (``observed_data``, ``constant_data``,
    ``log_likelihood``, ...; see :data:`pymc_dp.sampling.PRIVATE_GROUPS`) and writes the
    ``dp_*`` attributes that :func:`pymc_dp.sample` writes (``dp_epsilon``, ``dp_delta``,
    ``dp_neighbouring``, ``dp_accountant``), so that :func:`pymc_dp.privacy_spent` recomputes
    the same ε from the published object alone.

    Parameters
    ----------
    idata : InferenceData or DataTree
        What ``pm.sample(step=...)`` returned, every free variable sampled by pymc_dp steps
        (DPPenaltyMH, DPHMC, DPSuffStatsPenaltyMH, DPMultiOwnerPenaltyMH) with their noise
        scales set. A result that already carries ``dp_accountant`` (from
        :func:`pymc_dp.sample` or an earlier ``publish``) is only stripped and re-checked.
    model : pymc.Model, optional
        The model that was sampled; defaults to the model on the context stack. Used to find
        the deterministics that read data.
    delta : float
        δ at which ε is reported, in (0, 1). Required unless ``idata`` records ``dp_delta``.

    Returns
    -------
    InferenceData or DataTree
        ``idata`` itself, stripped and annotated.

    Raises
    ------
    ValueError
        When ``delta`` is missing or not in (0, 1); when the posterior holds a deterministic
        that reads data (remove it, e.g. ``del idata.posterior["name"]``, or sample with
        ``var_names=`` leaving it out); when ``sample_stats`` holds statistics of a non-DP
        sampler; or when the result was sampled with :class:`pymc_dp.DPBarkerMH`, whose ε
        depends on settings the statistics do not record (use :func:`pymc_dp.sample`).

    Notes
    -----
    ε covers everything a chain released up to its last stored draw, tuning iterations
    included, summed over chains: μ is the sum over chains of the last ``dp_mu_cumulative``
    statistic and ε is the exact Gaussian-DP conversion (Sommer et al. 2019, Lemma 12), as
    in :func:`pymc_dp.privacy_spent`. The neighbouring relation is the one the steps were
    built with (substitute by default; add/remove if requested), but the statistics do not
    record it, so ``dp_neighbouring`` is written as ``"unknown"`` and N is not written.
    Everything outside the posterior draws and DP statistics is the user's responsibility:
    a ``posterior_predictive`` group computed from the DP posterior is post-processing, but
    data-dependent values added to the object by hand are not covered.

    References
    ----------
    .. [1] Sommer, D. M., Meiser, S. and Mohammadi, E. (2019). Privacy loss classes: the
       central limit theorem in differential privacy. PoPETs 2019(2).
    """
    groups = _group_names(idata)
    if "posterior" not in groups:
        raise ValueError("`idata` must have a posterior group (a pm.sample result). Found none.")
    attrs = _posterior_attrs(idata)
    if "dp_accountant" in attrs:
        spent = privacy_spent(idata, delta)
    else:
        if delta is None:
            raise ValueError("`delta` must be given for a plain pm.sample result (it records no dp_delta). Found None.")
        delta = check_unit_interval_open("delta", float(delta))
        spent = privacy_spent(idata, delta)  # refuses Barker results and foreign statistics
    model = modelcontext(model)
    posterior = _group(idata, "posterior")
    # A model with no observed variable (DPSuffStatsPenaltyMH: the data live in the step) has no row data to find.
    candidates = data_dependent_deterministics(model) if model.observed_RVs else []
    reading = sorted(name for name in candidates if name in posterior.data_vars)
    if reading:
        raise ValueError(
            f"The posterior must hold no deterministic that reads data. Found {reading}. Remove them before "
            "publishing (e.g. del idata.posterior[name]; with a DataTree, rebuild the posterior node without "
            "them), or sample with var_names= leaving them out."
        )
    if "dp_accountant" in attrs:
        return strip_private_groups(idata)

    mu = float(spent.mu)
    if mu > 0:
        tau = math.sqrt(0.5 / mu)
        while 0.5 / tau**2 < mu:  # on the private side of the rounding
            tau = math.nextafter(tau, 0.0)
        events = [GaussianReleases(tau, 1, label=PLAIN_SAMPLE_LABEL)]
        epsilon, method, _ = compose_epsilon(events, spent.delta)
    else:  # no iteration stored: nothing released
        events, epsilon, method = [], 0.0, spent.method
    stats = _group(idata, "sample_stats")
    chains = int(stats.sizes.get("chain", 0))
    record = {
        "format": ACCOUNTANT_FORMAT,
        "method": method,
        "mu": mu,
        "delta": spent.delta,
        "epsilon": epsilon,
        "neighbouring": "unknown",
        "n_rows": None,
        "chains": chains,
        "source": "pymc_dp.publish",
        "events": [e.to_dict() for e in events],
        "versions": _versions(),
    }
    strip_private_groups(idata)
    return write_privacy_attrs(idata, record)
