"""Bambi models through pymc-dp (pmdp.from_bambi): refused conveniences that read all rows, and a run.

Bambi is in the test extra, so these run on both Python/PyMC lines (Bambi 0.17 with PyMC 5,
0.21 with PyMC 6).
"""

import json

import numpy as np
import pandas as pd
import pytest

import pymc_dp as pmdp

bmb = pytest.importorskip("bambi", reason="bambi is in the test extra; `pip install -e '.[test]'`")

PRIORS = {
    "Intercept": bmb.Prior("Normal", mu=0, sigma=5),
    "x": bmb.Prior("Normal", mu=0, sigma=2),
    "sigma": bmb.Prior("HalfNormal", sigma=2),
}


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=3000)
    return pd.DataFrame({"x": x, "y": 1.0 + 0.5 * x + rng.normal(size=3000)})


@pytest.mark.parametrize(
    ("kwargs", "formula", "message"),
    [
        ({}, "y ~ x", "`auto_scale` must be False"),
        ({"auto_scale": False}, "y ~ x", "`center_predictors` must be False"),
        ({"auto_scale": False, "center_predictors": False, "dropna": True}, "y ~ x", "`dropna` must be False"),
        ({"auto_scale": False, "center_predictors": False}, "y ~ scale(x)", "must not use stateful transforms"),
    ],
)
def test_settings_that_read_every_row_are_refused(frame, kwargs, formula, message):
    priors = {k: v for k, v in PRIORS.items() if k != "x" or formula == "y ~ x"}  # Bambi warns on unused priors
    model = bmb.Model(formula, frame, priors=priors, **kwargs)
    with pytest.raises(ValueError, match=message):
        pmdp.from_bambi(model)
    with pytest.raises(TypeError, match=r"`model` must be a bambi\.Model"):
        pmdp.from_bambi(object())


def test_a_bambi_model_runs_through_pmdp_sample_and_dpadvi(frame):
    model = bmb.Model("y ~ x", frame, priors=PRIORS, auto_scale=False, center_predictors=False)
    pm_model = pmdp.from_bambi(model)
    idata = pmdp.sample(
        step=pmdp.DPPenaltyMH(model=pm_model, llr_clip=5.0),
        model=pm_model,
        epsilon=4.0,
        delta=1e-6,
        draws=30,
        tune=20,
        chains=2,
        progressbar=False,
        on_poor_mixing="ignore",
    )
    assert sorted(idata.posterior.data_vars) == ["Intercept", "sigma", "x"]
    assert pmdp.privacy_spent(idata).epsilon == pytest.approx(idata.posterior.attrs["dp_epsilon"])
    fit = pmdp.DPADVI(epsilon=2.0, delta=1e-6, sampling_rate=0.1, grad_clip=5.0, model=pm_model)
    draws = fit.fit(100, progressbar=False).sample(20)
    assert json.loads(draws.posterior.attrs["dp_accountant"])["n_rows"] == 3000


def test_a_bambi_model_that_from_bambi_did_not_check_is_refused_by_every_entry_point(frame):
    raw = bmb.Model("y ~ x", frame, priors=PRIORS)  # Bambi's defaults: predictors centred by the data's mean
    raw.build()
    with pytest.raises(pmdp.ModelStructureError, match=r"pmdp\.from_bambi"):
        pmdp.plan(raw.backend.model, epsilon=1.0, delta=1e-6)
    with pytest.raises(pmdp.ModelStructureError, match=r"pmdp\.from_bambi"):
        pmdp.sample(model=raw.backend.model, epsilon=1.0, delta=1e-6)


def test_factor_levels_read_off_the_data_must_be_declared_public(frame):
    grouped = frame.assign(g=pd.Categorical(np.where(frame["x"] > 0, "north", "south")))
    priors = {**PRIORS, "1|g": bmb.Prior("Normal", mu=0, sigma=bmb.Prior("HalfNormal", sigma=1))}
    fixed = {"auto_scale": False, "center_predictors": False}
    with pytest.raises(ValueError, match=r"`public_levels` must be True.*g__factor_dim"):
        pmdp.from_bambi(bmb.Model("y ~ x + (1|g)", grouped, priors=priors, **fixed))
    model = pmdp.from_bambi(bmb.Model("y ~ x + (1|g)", grouped, priors=priors, **fixed), public_levels=True)
    assert list(model.coords["g__factor_dim"]) == ["north", "south"]
