"""A deterministic that reads the data is never silently dropped from a DP result (issue 35, deliverable 6).

Every front-end that leaves such a ``pm.Deterministic`` out of its result says so on PyMC's logger at
WARNING level, naming the variables and why, with no data value (a name comes from the model's code).
Data-free deterministics are kept and not named. The step-method route (``pmdp.sample(step=...)``) is
covered in tests/test_advice.py; here the last stage every front-end shares (``finalize_result``, which
DPADVI's ``approx.sample`` ends with), the one-call released-statistics route and ``pmdp.publish``.
``pmdp.one_posterior_sample`` calls the same helper before its run; a run of it costs minutes of NUTS
compilation on a loaded 2-core machine, so it is not run here.
"""

import logging

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.results import data_reading_deterministics_in, note_dropped_deterministics

MESSAGE = "Not stored in the DP result: deterministics that read the data"


def _model(n_rows: int = 200) -> pm.Model:
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, size=(n_rows, 1))
    y = 0.3 + 0.5 * x[:, 0] + rng.normal(0, 0.5, size=n_rows)
    with pm.Model() as model:  # a linear regression as the release route reads it: intercept + x @ slope
        intercept = pm.Normal("intercept", 0, 2)
        slope = pm.Normal("slope", 0, 2, shape=1)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", intercept + x @ slope, sigma, observed=y)
        pm.Deterministic("fitted", intercept + x @ slope)  # reads the rows' covariates
        pm.Deterministic("mean_fit", (intercept + x @ slope).mean())  # one number, still read off the rows
        pm.Deterministic("slope_over_sigma", slope[0] / sigma)  # data-free: kept, not named
    return model


def _said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "pymc" and MESSAGE in r.getMessage()]


def _check_message(messages: list[str]) -> None:
    (message,) = messages
    assert f"{MESSAGE} (fitted, mean_fit)." in message
    assert "without noise" in message and "sample_posterior_predictive" in message  # why, and what to do
    assert "slope_over_sigma" not in message
    assert not any(ch.isdigit() for ch in message)  # names and words only: no value of the data or the draws


def test_the_last_stage_of_every_front_end_names_what_it_strips(caplog):
    # finalize_result is the last stage of DPADVI's approx.sample, the released-statistics samplers and
    # pmdp.publish: given the model, it names the data-reading deterministics the result still holds.
    model = _model(50)
    posterior = {name: np.zeros((1, 4)) for name in ("intercept", "fitted", "mean_fit")}
    if int(az.__version__.split(".")[0]) >= 1:  # ArviZ 1.x (PyMC 6): groups in one mapping, a DataTree back
        idata = az.from_dict({"posterior": posterior})
    else:
        idata = az.from_dict(posterior=posterior)
    assert data_reading_deterministics_in(idata, model) == ["fitted", "mean_fit"]
    assert data_reading_deterministics_in(idata, None) == []  # no model: nothing to say
    with caplog.at_level(logging.WARNING, logger="pymc"):
        note_dropped_deterministics(data_reading_deterministics_in(idata, model))
        note_dropped_deterministics([])  # nothing dropped: nothing said
    _check_message(_said(caplog))


def test_the_release_route_names_them_before_anything_is_spent(caplog):
    model = _model(20_000)  # enough rows for the planner to choose the release route
    budget = pmdp.PrivacyBudget(epsilon=0.5, delta=1e-5, n_rows=20_000)
    with model, caplog.at_level(logging.WARNING, logger="pymc"), pytest.raises(Exception, match="budget"):
        pmdp.sample(epsilon=1.0, delta=1e-6, x_bounds=(-1, 1), y_bounds=(-3, 3), budget=budget, progressbar=False)
    _check_message(_said(caplog))
    assert budget.spent().epsilon == 0.0
    caplog.clear()
    with model, caplog.at_level(logging.WARNING, logger="pymc"), pytest.raises(Exception, match="budget"):
        pmdp.sample(  # the caller chose what is stored: nothing to say
            epsilon=1.0, delta=1e-6, x_bounds=(-1, 1), y_bounds=(-3, 3), budget=budget, var_names=["slope"]
        )
    assert not _said(caplog)


def test_publish_names_them_for_a_plain_pm_sample_result(caplog):
    model = _model(50)
    with model:
        step = pmdp.DPPenaltyMH(llr_clip=2.0, noise_multiplier=50.0)
        idata = pm.sample(step=step, draws=5, tune=5, chains=1, progressbar=False, compute_convergence_checks=False)
    assert "fitted" in idata.posterior  # PyMC stored it: publish must strip it, and say so
    with caplog.at_level(logging.WARNING, logger="pymc"):
        pmdp.publish(idata, model=model, delta=1e-5)
    _check_message(_said(caplog))
    assert "fitted" not in idata.posterior and "slope_over_sigma" in idata.posterior
