"""What a published result may hold: one check for every result type, and the ways a result regains data.

Each test here failed on the main branch before the check existed: ``privacy_spent`` priced results
that held a deterministic reading the covariates, a posterior predictive group, DPADVI's row
coordinate, or PyMC's ``sampling_time``.
"""

import json
import logging

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.results import group, group_names, private_content

QUIET = dict(progressbar=False, compute_convergence_checks=False)
X_ROWS = 60


@pytest.fixture(scope="module")
def covariate_model():
    """A regression whose deterministic ``eta = X @ beta`` holds the covariates of every row."""
    rng = np.random.default_rng(21)
    x = rng.normal(size=(X_ROWS, 2))
    y = x @ np.array([1.0, -0.5]) + rng.normal(0, 0.5, size=X_ROWS)
    with pm.Model(coords={"row": np.arange(1000, 1000 + X_ROWS), "feature": ["f0", "f1"]}) as model:
        xd = pm.Data("x", x, dims=("row", "feature"))
        beta = pm.Normal("beta", 0, 2, dims="feature")
        eta = pm.Deterministic("eta", xd @ beta, dims="row")
        pm.Normal("y", eta, 0.5, observed=y, dims="row")
    return model, x


def _assert_publishable(idata, model=None):
    assert private_content(idata, model) == []
    names = set(group_names(idata))
    assert names <= {"posterior", "sample_stats", "prior", "warmup_posterior", "warmup_sample_stats"}
    for name in names:
        assert "sampling_time" not in idata[name].attrs
    assert "row" not in group(idata, "posterior").coords
    assert pmdp.privacy_spent(idata).epsilon == pytest.approx(idata["posterior"].attrs["dp_epsilon"], rel=1e-12)


def test_plain_pm_sample_with_a_data_reading_deterministic_is_refused(covariate_model):
    model, x = covariate_model
    with model:
        step = pmdp.DPPenaltyMH(llr_clip=2.0, noise_multiplier=5.0)
        idata = pm.sample(step=step, draws=20, tune=10, chains=1, random_seed=1, **QUIET)
        with pytest.raises(pmdp.UnpublishableResultError) as refused:
            pmdp.privacy_spent(idata, delta=1e-5)
    message = str(refused.value)
    for finding in ("group `observed_data`", "group `constant_data`", "variable `eta`", "coordinate `row`"):
        assert finding in message
    assert "sampling_time" in message
    # The message names what to remove, never a value.
    assert str(round(float(x[0, 0]), 3)) not in message
    pmdp.strip_private_groups(idata, model=model)
    assert set(group(idata, "posterior").data_vars) == {"beta"}
    with model:
        assert pmdp.privacy_spent(idata, delta=1e-5).mu == pytest.approx(30 / (2 * 5.0**2), rel=1e-12)


def test_posterior_predictive_added_after_pmdp_sample_is_refused(covariate_model, caplog):
    model, _ = covariate_model
    caplog.set_level(logging.INFO, logger="pymc")  # PyMC's default level outside pytest
    with model:
        idata = pmdp.sample(
            step=pmdp.DPPenaltyMH(llr_clip=2.0), epsilon=2.0, delta=1e-5, draws=20, tune=10, chains=1, **QUIET
        )
        _assert_publishable(idata, model)
        assert "eta" not in group(idata, "posterior")
        with pytest.warns(pmdp.TrainingRowsWarning, match="the draws read"):  # said as it runs, and later:
            pm.sample_posterior_predictive(idata, extend_inferencedata=True, progressbar=False, random_seed=2)
    with pytest.raises(pmdp.UnpublishableResultError, match="group `posterior_predictive`") as refused:
        pmdp.privacy_spent(idata)
    # The message says why the draws are not private and names the private alternative.
    assert "computed from the raw rows" in str(refused.value)
    assert "pymc_dp.sample_posterior_predictive(idata, model, data=" in str(refused.value)


def test_a_variable_added_after_publication_is_refused(covariate_model):
    model, x = covariate_model
    with model:
        idata = pmdp.sample(
            step=pmdp.DPPenaltyMH(llr_clip=2.0), epsilon=2.0, delta=1e-5, draws=20, tune=10, chains=1, **QUIET
        )
    posterior = group(idata, "posterior")
    leaked = (posterior["beta"] * 0 + float(x[:, 0].mean())).rename("column_mean")
    attrs = dict(idata["posterior"].attrs)
    del idata["posterior"]
    idata["posterior"] = posterior.assign(column_mean=leaked)
    idata["posterior"].attrs.update(attrs)
    with pytest.raises(pmdp.UnpublishableResultError, match="variable `column_mean`"):
        pmdp.privacy_spent(idata)


def test_priors_only_model_keeps_no_deterministic_reading_data():
    y = np.clip(np.random.default_rng(3).normal(0.5, 1.0, size=80), -5, 5)
    with pm.Model() as model:
        scale = pm.Data("scale", np.linspace(0.0, 1.0, 80))
        m = pm.Normal("m", 0, 10)
        pm.Deterministic("scaled", m * scale)
        pm.Deterministic("doubled", 2 * m)
        step = pmdp.DPSuffStatsPenaltyMH(
            "normal", y, {"mu": m}, noise_multiplier=0.5, family_settings={"sigma": 1.0, "bounds": (-5, 5)}
        )
        idata = pmdp.sample(step=step, delta=1e-5, draws=20, tune=10, chains=1, **QUIET)
    assert set(group(idata, "posterior").data_vars) == {"m", "doubled"}
    _assert_publishable(idata, model)


def test_dpadvi_sample_drops_the_row_coordinate(covariate_model):
    model, _ = covariate_model
    approx = pmdp.DPADVI(noise_multiplier=1.0, sampling_rate=0.5, grad_clip=2.0, delta=1e-5, random_seed=1).fit(
        20, model=model, progressbar=False
    )
    idata = approx.sample(30, random_seed=3)
    assert "row" not in group(idata, "posterior").coords and "eta" not in group(idata, "posterior")
    assert group(idata, "posterior")["beta"].dims == ("chain", "draw", "feature")
    _assert_publishable(idata, model)
    assert idata["posterior"].attrs["dp_start"] == "model"


def test_released_statistics_and_one_posterior_sample_pass_the_same_check():
    rng = np.random.default_rng(5)
    data = rng.integers(0, 2, size=200)
    release = pmdp.release_statistics("bernoulli", data, epsilon=0.5, random_seed=1)
    with pm.Model() as model:
        p = pm.Beta("p", 1, 1)
        release.likelihood("loglik", p=p)
        idata = release.sample(draws=50, tune=50, chains=1, random_seed=2, **QUIET)
    _assert_publishable(idata, model)
    with pm.Model() as model:
        p = pm.Beta("p", 1, 1)
        pm.Bernoulli("y", p, observed=data)
        one = pmdp.one_posterior_sample(epsilon=0.5, loglik_bounds=(-5.0, 0.0), tune=50, random_seed=3)
    _assert_publishable(one, model)


def test_start_provenance_is_recorded(covariate_model):
    model, _ = covariate_model
    with model:
        step = pmdp.DPPenaltyMH(llr_clip=2.0)
        kwargs = dict(epsilon=2.0, delta=1e-5, draws=10, tune=10, chains=1, **QUIET)
        default = pmdp.sample(step=step, **kwargs)
        prior = pmdp.sample(step=step, init="prior", **kwargs)
        budgeted = pmdp.sample(
            step=step,
            budget=pmdp.PrivacyBudget(2.0, 1e-5, n_rows=X_ROWS),
            **{k: v for k, v in kwargs.items() if k != "epsilon"},
        )
        given = pmdp.sample(step=step, initvals={"beta": np.array([0.1, 0.2])}, **kwargs)
    # init="auto": a DPADVI fit on a share of the target ε (issue 14), recorded with the reason.
    assert default["posterior"].attrs["dp_start"] == "dp_release"
    start = json.loads(default["posterior"].attrs["dp_accountant"])["start"]
    assert start["init"].startswith("auto: a DPADVI fit") and "DPADVI" in start["description"]
    assert default["posterior"].attrs["dp_epsilon"] <= 2.0
    # Without a target ε (calibrated to what a budget has left) auto falls back to prior draws, and says why.
    start = json.loads(budgeted["posterior"].attrs["dp_accountant"])["start"]
    assert start["source"] == "prior" and "no target epsilon" in start["init"]
    assert prior["posterior"].attrs["dp_start"] == "prior"  # one prior draw per chain
    assert given["posterior"].attrs["dp_start"] == "user"
    assert "not covered by ε" in json.loads(given["posterior"].attrs["dp_accountant"])["start"]["note"]


def test_no_row_count_in_messages_under_add_remove(conjugate_normal):
    with conjugate_normal.model, pytest.raises(ValueError, match="one label per row") as refused:
        pmdp.DPMultiOwnerPenaltyMH(owners=np.zeros(3), noise_multiplier=1.0, neighbouring="add_remove")
    assert str(conjugate_normal.y.size) not in str(refused.value)


def test_dpadvi_started_from_a_private_start_composes_its_events(covariate_model):
    # Before: a PrivateStart given as DPADVI's `start` was recorded as "user" and its ε dropped.
    from pymc_dp.accounting.composition import compose_epsilon

    model, _ = covariate_model
    settings = dict(noise_multiplier=2.0, sampling_rate=0.2, grad_clip=2.0, delta=1e-5)
    first = pmdp.DPADVI(**settings, random_seed=1)
    first.fit(20, model=model, progressbar=False)
    with pytest.raises(ValueError, match="exactly one point"):
        pmdp.DPADVI(**settings, start=first.approx.initial_values(2, random_seed=2))
    second = pmdp.DPADVI(**settings, random_seed=3, start=first.approx.initial_values(1, random_seed=2))
    idata = second.fit(20, model=model, progressbar=False).sample(30, random_seed=4)
    attrs = idata["posterior"].attrs
    record = json.loads(attrs["dp_accountant"])
    assert attrs["dp_start"] == "dp_release" and record["start"]["description"].startswith("DPADVI")
    composed = compose_epsilon(first.privacy_events(20) + second.privacy_events(20), 1e-5)[0]
    assert attrs["dp_epsilon"] == pytest.approx(composed, rel=1e-12)
    assert record["run_epsilon"] == pytest.approx(second.privacy_spent().epsilon, rel=1e-12)
    assert record["run_epsilon"] < attrs["dp_epsilon"]
    _assert_publishable(idata, model)
    # A chain started from the second fit depends on both fits.
    starts = second.approx.initial_values(1, random_seed=5)
    assert len(starts.events) == 2


def test_one_posterior_sample_records_initvals_and_refuses_a_private_start():
    from pymc_dp.results import PrivateStart

    data = np.random.default_rng(6).integers(0, 2, size=100)
    with pm.Model() as model:
        p = pm.Beta("p", 1, 1)
        pm.Bernoulli("y", p, observed=data)
    kwargs = dict(epsilon=0.5, loglik_bounds=(-5.0, 0.0), tune=30)
    given = pmdp.one_posterior_sample(model, initvals={"p": 0.3}, **kwargs)
    assert given["posterior"].attrs["dp_start"] == "user"
    assert "not covered by ε" in json.loads(given["posterior"].attrs["dp_accountant"])["start"]["note"]
    assert pmdp.one_posterior_sample(model, **kwargs)["posterior"].attrs["dp_start"] == "model"
    budget = pmdp.PrivacyBudget(1.0, 1e-6, n_rows=100)
    with pytest.raises(ValueError, match="must not be a PrivateStart"):
        pmdp.one_posterior_sample(model, initvals=PrivateStart([{"p": 0.3}], [], "a release"), budget=budget, **kwargs)
    assert budget.events == ()  # refused before anything is charged
