"""Advice names what the object takes (issue 35, deliverable 5).

On ``edd15ad``: DPADVI's clipping problem told the user to "raise clip_margin or
clip_quantile", arguments of ``pmdp.sample`` that ``DPADVI`` does not take; DPADVI's
diagnostics said ``usable: False`` under ``reasons`` with no ``problems`` (the key
``pmdp.sample``'s diagnostics use), so ``diagnostics.get("problems")`` was None; and
``pmdp.sample`` or a DP step outside a model context raised PyMC's bare "No model on context
stack." without saying how to pass one.
"""

import logging

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.diagnostics import clipping_problem

Y = np.random.default_rng(35).normal(0.5, 1.0, size=100)

# A clip check whose noisy share of rows above the bound (40 % ± 1 %) is far above 1/√N = 10 %
TOO_MANY_CLIPPED = {
    "bound": 2.0,
    "share_above_bound_at_reference": 0.4,
    "share_above_bound_sd": 0.01,
    "bias_threshold_share": 0.1,
    "reference": "the fitted mean",
}


def _model():
    with pm.Model() as model:
        m = pm.Normal("m", 0, 10)
        pm.Normal("y", m, 1.0, observed=Y)
    return model


def test_dpadvi_clipping_advice_names_dpadvi_arguments_and_lists_problems():
    approx = pmdp.DPADVI(noise_multiplier=1.0, sampling_rate=0.5, grad_clip=2.0, delta=1e-5, random_seed=4).fit(
        20, model=_model(), progressbar=False
    )
    approx._dp_clipping = TOO_MANY_CLIPPED  # as DPADVI's clip check records it
    diagnostics = approx.optimisation_diagnostics()
    assert diagnostics["usable"] is False
    assert diagnostics["problems"] == diagnostics["reasons"]  # on edd15ad: no `problems`
    (clipping,) = [p for p in diagnostics["problems"] if "clip bound" in p]
    assert "grad_clip" in clipping
    assert "clip_margin" not in clipping and "clip_quantile" not in clipping
    unresolved = clipping_problem({"releases": [{**TOO_MANY_CLIPPED, "resolvable": False, "count_noise_rows": 9.0}]})
    assert "clip_epsilon_share" in unresolved  # pmdp.sample's private bound: its own arguments
    unresolved = clipping_problem(
        {"releases": [{**TOO_MANY_CLIPPED, "resolvable": False, "count_noise_rows": 9.0}]}, "DPADVI"
    )
    assert "clip_check_share" in unresolved and "clip_epsilon_share" not in unresolved


def test_sample_outside_a_model_says_how_to_pass_one():
    model = _model()
    with model:
        step = pmdp.DPPenaltyMH(llr_clip=2.0, noise_multiplier=20.0)
    with pytest.raises(TypeError, match=r"pmdp.sample needs a PyMC model: call it inside `with model:` or pass"):
        pmdp.sample(step=step, delta=1e-5, draws=5, tune=5, chains=1)
    with pytest.raises(TypeError, match=r"DPPenaltyMH needs a PyMC model: .* or pass `model=model`"):
        pmdp.DPPenaltyMH(llr_clip=2.0, noise_multiplier=20.0)


def test_the_plan_for_a_bambi_regression_recommends_what_runs_on_it():
    """On edd15ad the plan recommended pmdp.release_statistics, which cannot take a Bambi model."""
    bmb = pytest.importorskip("bambi", reason="bambi is in the test extra; `pip install -e '.[test]'`")
    pd = pytest.importorskip("pandas")
    x = np.linspace(-1.0, 1.0, 20_000)
    frame = pd.DataFrame({"x": x, "y": 1.0 + 0.5 * x + np.random.default_rng(35).normal(size=x.size)})
    priors = {
        "Intercept": bmb.Prior("Normal", mu=0, sigma=5),
        "x": bmb.Prior("Normal", mu=0, sigma=2),
        "sigma": bmb.Prior("HalfNormal", sigma=2),
    }
    bambi_model = bmb.Model("y ~ x", frame, priors=priors, auto_scale=False, center_predictors=False)
    plan = pmdp.plan(pmdp.from_bambi(bambi_model), epsilon=10.0, delta=1e-6)
    assert plan.released_statistics == "linear_regression"  # still said: the model is a linear regression
    # issue 34: the one call (pmdp.sample(model=pm_model, epsilon=...)) runs the release on the Bambi model's pm.Model
    assert plan.recommended == "release_statistics" and plan.one_call_route == "release_statistics"


def test_a_data_reading_deterministic_left_out_of_the_result_is_named(regression, caplog):
    # Issue 35, deliverable 6: a deterministic that reads data is dropped from pmdp.sample's result; PyMC's
    # logger says which (names only: they come from the model's code).
    from pymc_dp.sample_plan import _stored_variables

    model, _, _ = regression
    with caplog.at_level(logging.INFO, logger="pymc"):
        stored = _stored_variables(model, None)
    assert "fitted_mean" not in stored and "slope_ratio" in stored
    (message,) = [r.getMessage() for r in caplog.records if "Not stored in the DP result" in r.getMessage()]
    assert "(first_residual, fitted_mean, shifted_x)" in message and "slope_ratio" not in message
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pymc"):
        _stored_variables(model, ["a", "b"])  # the caller chose what is stored: nothing to say
    assert not [r for r in caplog.records if "Not stored" in r.getMessage()]
