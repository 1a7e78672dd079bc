"""Privacy plumbing of pymc_dp.sample: what leaves, what is refused, and budgets."""

import json

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.accounting import gaussian_epsilon, gaussian_mu_for_target
from pymc_dp.results import group as _group
from pymc_dp.results import group_names as _group_names

QUIET = dict(progressbar=False, compute_convergence_checks=False)


def _all_arrays(idata):
    for group in _group_names(idata):
        dataset = _group(idata, group)
        for name in list(dataset.data_vars) + list(dataset.coords):
            yield group, name, np.asarray(dataset[name].values)


@pytest.fixture(scope="module")
def calibrated_run(regression):
    model, _, _ = regression
    with model:
        step = pmdp.DPPenaltyMH(llr_clip=0.5, proposal_scale=0.05)
        # init="prior": the whole ε goes to the chains, so the noise has the closed form below.
        idata = pmdp.sample(
            step=step, epsilon=3.0, delta=1e-5, draws=200, tune=200, chains=2, random_seed=4, init="prior", **QUIET
        )
    return idata, step


def test_calibrated_run_meets_its_target(calibrated_run):
    idata, step = calibrated_run
    attrs = idata.posterior.attrs
    assert attrs["dp_epsilon"] <= 3.0
    assert attrs["dp_epsilon"] == pytest.approx(3.0, rel=1e-9)
    assert attrs["dp_delta"] == 1e-5 and attrs["dp_neighbouring"] == "substitute" and attrs["dp_n_rows"] == 150
    record = json.loads(attrs["dp_accountant"])
    expected_tau = (2 * 400 / (2 * gaussian_mu_for_target(3.0, 1e-5))) ** 0.5
    assert record["steps"][0]["noise_multiplier"] == pytest.approx(expected_tau, rel=1e-9)
    assert step.noise_multiplier is None  # the calibration belonged to that run only
    assert record["chains"] == 2 and record["iterations_per_chain"] == 400
    assert record["steps"][0]["llr_clip"] == 0.5 and record["method"] == "gaussian_closed_form"
    spent = pmdp.privacy_spent(idata)
    assert spent.epsilon == attrs["dp_epsilon"] and spent.delta == 1e-5
    assert pmdp.privacy_spent(idata, delta=1e-8).epsilon > spent.epsilon


def test_no_raw_data_leaves(calibrated_run, regression):
    idata, _ = calibrated_run
    _, x, y = regression
    assert set(_group_names(idata)) == {"posterior", "sample_stats"}
    for leaking in ("fitted_mean", "first_residual", "shifted_x"):
        assert leaking not in idata.posterior
    assert "slope_ratio" in idata.posterior
    data_values = np.concatenate([x, y])
    for group, name, values in _all_arrays(idata):
        assert values.shape[-1:] != (150,) or name == "draw", f"{group}/{name} has a row axis"
        if values.dtype.kind == "f":
            assert not np.isin(values, data_values).any(), f"{group}/{name} contains a data value"
    assert set(idata.sample_stats.data_vars) == {
        "dp_accept",
        "dp_accepted",
        "dp_noisy_llr",
        "dp_proposal_scale",
        "dp_mu_cumulative",
        "dp_tuning",
    }


def test_arviz_works_on_the_result(calibrated_run):
    idata, _ = calibrated_run
    summary = az.summary(idata, var_names=["a", "b", "s"])
    assert summary.shape[0] == 3
    assert idata.sample_stats["dp_accepted"].values.mean() > 0.05  # the chains move


def test_uncovered_variable_is_refused(regression):
    model, _, _ = regression
    with model:
        step = pmdp.DPPenaltyMH(vars=[model["a"], model["b"]], noise_multiplier=10.0)
        with pytest.raises(ValueError, match=r"uncovered: \['s_log__'\]"):
            pmdp.sample(step=step, delta=1e-5, draws=10, tune=0, chains=1, **QUIET)


def test_non_dp_step_is_refused(regression):
    model, _, _ = regression
    with model:
        steps = [pmdp.DPPenaltyMH(vars=[model["a"], model["b"]], noise_multiplier=10.0), pm.Metropolis([model["s"]])]
        with pytest.raises(ValueError, match=r"Found \['Metropolis'\]"):
            pmdp.sample(step=steps, delta=1e-5, draws=10, tune=0, chains=1, **QUIET)


def test_two_dp_steps_compose(regression):
    model, _, _ = regression
    with model:
        steps = [
            pmdp.DPPenaltyMH(vars=[model["a"], model["b"]], llr_clip=4.0, noise_multiplier=30.0),
            pmdp.DPPenaltyMH(vars=[model["s"]], llr_clip=4.0, noise_multiplier=60.0),
        ]
        idata = pmdp.sample(step=steps, delta=1e-5, draws=30, tune=20, chains=2, random_seed=1, **QUIET)
    mu = 2 * 50 * (1 / (2 * 30.0**2) + 1 / (2 * 60.0**2))
    assert idata.posterior.attrs["dp_epsilon"] == pytest.approx(gaussian_epsilon(1e-5, mu), rel=1e-12)
    assert pmdp.privacy_spent(idata).mu == pytest.approx(mu, rel=1e-12)
    # Without the accountant record, the stacked per-step dp_mu_cumulative statistics give the same total.
    del idata.posterior.attrs["dp_accountant"]
    assert pmdp.privacy_spent(idata, model=model).mu == pytest.approx(mu, rel=1e-12)


def test_leaking_deterministic_in_var_names_is_refused(regression):
    model, _, _ = regression
    with model:
        step = pmdp.DPPenaltyMH(noise_multiplier=10.0)
        with pytest.raises(ValueError, match=r"Found \['fitted_mean'\]"):
            pmdp.sample(step=step, delta=1e-5, draws=10, tune=0, chains=1, var_names=["a", "fitted_mean"], **QUIET)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"delta": None}, "`delta` must be given"),
        ({"delta": 1.5}, "`delta` must be in the open interval"),
        ({"epsilon": -1.0}, "`epsilon` must be a positive"),
        ({"epsilon": float("nan")}, "`epsilon` must be a positive"),
        ({"chains": 0}, "`chains` must be a positive integer"),
        ({"draws": 0}, "`draws` must be a positive integer"),
        ({"tune": -1}, "`tune` must be a non-negative integer"),
        ({"epsilon": None}, "`epsilon` must be given when a step leaves its noise unset"),
        ({"idata_kwargs": {"log_likelihood": True}}, "`idata_kwargs` must not request log_likelihood"),
        ({"return_inferencedata": False}, "`return_inferencedata` must be True"),
        ({"nuts_sampler": "numpyro"}, "`nuts_sampler` is not supported"),
    ],
)
def test_bad_inputs_are_refused_and_change_nothing(regression, kwargs, message):
    model, _, _ = regression
    with model:
        step = pmdp.DPPenaltyMH()
        args = {"step": step, "epsilon": 1.0, "delta": 1e-5, "draws": 10, "tune": 10, "chains": 1} | kwargs
        with pytest.raises(ValueError, match=message):
            pmdp.sample(**args, **QUIET)
    assert step.noise_multiplier is None


def test_over_target_run_is_refused_and_changes_nothing(regression):
    model, _, _ = regression
    with model:
        step = pmdp.DPPenaltyMH(noise_multiplier=1.0)
        with pytest.raises(pmdp.PrivacyBudgetExceededError, match="above `epsilon`=1"):
            pmdp.sample(step=step, epsilon=1.0, delta=1e-5, draws=100, tune=100, chains=2, **QUIET)
    assert step.noise_multiplier == 1.0


def test_budget_spans_runs_and_refuses_without_charging(regression):
    model, _, _ = regression
    budget = pmdp.PrivacyBudget(epsilon=2.0, delta=1e-5, n_rows=150)
    with model:
        first = pmdp.sample(
            step=pmdp.DPPenaltyMH(llr_clip=4.0),
            epsilon=1.0,
            delta=1e-5,
            budget=budget,
            init="prior",  # Gaussian events only: the budget composes them exactly
            draws=50,
            tune=50,
            chains=1,
            random_seed=1,
            **QUIET,
        )
        assert budget.spent().epsilon == pytest.approx(first.posterior.attrs["dp_epsilon"], rel=1e-12)
        # noise left unset and no epsilon: use what remains of the budget
        second = pmdp.sample(
            step=pmdp.DPPenaltyMH(llr_clip=4.0),
            delta=1e-5,
            budget=budget,
            draws=50,
            tune=50,
            chains=1,
            random_seed=2,
            **QUIET,
        )
        assert second.posterior.attrs["dp_epsilon"] > 0
        assert budget.spent().epsilon == pytest.approx(2.0, rel=1e-9) and budget.spent().epsilon <= 2.0
        before = (budget.events, budget.labels)
        step = pmdp.DPPenaltyMH(llr_clip=4.0)
        with pytest.raises(pmdp.PrivacyBudgetExceededError, match="Nothing was run or charged"):
            pmdp.sample(step=step, delta=1e-5, budget=budget, draws=50, tune=50, chains=1, **QUIET)
        assert (budget.events, budget.labels) == before and step.noise_multiplier is None
        wrong = pmdp.PrivacyBudget(epsilon=2.0, delta=1e-5, n_rows=151)
        with pytest.raises(ValueError, match=r"`budget\.n_rows` must equal"):
            pmdp.sample(
                step=pmdp.DPPenaltyMH(noise_multiplier=50.0), delta=1e-5, budget=wrong, draws=5, tune=0, chains=1
            )
        assert wrong.spent().epsilon == 0.0


def test_neighbouring_relations_must_agree(regression):
    model, _, _ = regression
    budget = pmdp.PrivacyBudget(epsilon=2.0, delta=1e-5, n_rows=150, neighbouring="add_remove")
    with model:
        step = pmdp.DPPenaltyMH(noise_multiplier=50.0)
        with pytest.raises(ValueError, match=r"`budget\.neighbouring` must be .substitute."):
            pmdp.sample(step=step, delta=1e-5, budget=budget, draws=5, tune=0, chains=1, **QUIET)


def test_refused_before_charging_when_pymc_arguments_are_wrong(regression):
    model, _, _ = regression
    budget = pmdp.PrivacyBudget(epsilon=2.0, delta=1e-5, n_rows=150)
    with model:
        step = pmdp.DPPenaltyMH()
        with pytest.raises(TypeError, match=r"unknown: \['bogus'\]"):
            pmdp.sample(step=step, epsilon=1.0, delta=1e-5, budget=budget, draws=5, tune=0, chains=1, bogus=1)
        with pytest.raises(ValueError, match=r"`var_names` must name.*\['nope'\]"):
            pmdp.sample(
                step=step, epsilon=1.0, delta=1e-5, budget=budget, draws=5, tune=0, chains=1, var_names=["nope"]
            )
        with pytest.raises(ValueError, match="`trace` is not supported"):
            pmdp.sample(step=step, epsilon=1.0, delta=1e-5, budget=budget, draws=5, tune=0, chains=1, trace=None)
    assert budget.events == () and step.noise_multiplier is None


def test_each_run_is_calibrated_to_its_own_target_and_forgets_raw_values(regression):
    model, _, _ = regression
    with model:
        step = pmdp.DPPenaltyMH(llr_clip=0.5)
        first = pmdp.sample(step=step, epsilon=1.0, delta=1e-5, draws=20, tune=10, chains=1, random_seed=1, **QUIET)
        second = pmdp.sample(step=step, epsilon=2.0, delta=1e-5, draws=20, tune=10, chains=1, random_seed=1, **QUIET)
    assert first.posterior.attrs["dp_epsilon"] == pytest.approx(1.0, rel=1e-9)
    assert second.posterior.attrs["dp_epsilon"] == pytest.approx(2.0, rel=1e-9)
    # The run's calibrated mechanism, with whatever raw values it cached, is gone with the run.
    assert step._mechanism is None and step.noise_multiplier is None


def test_calibration_cannot_be_reused_uncharged_by_plain_pm_sample(regression):
    model, _, _ = regression
    with model:
        step = pmdp.DPPenaltyMH(llr_clip=0.5)
        budget = pmdp.PrivacyBudget(epsilon=1.0, delta=1e-5, n_rows=150)
        pmdp.sample(step=step, budget=budget, draws=20, tune=10, chains=1, random_seed=1, **QUIET)
        with pytest.raises(ValueError, match="`noise_multiplier` must be set before sampling"):
            pm.sample(step=step, draws=20, tune=10, chains=1, random_seed=1, **QUIET)
    assert len(budget.events) == 1


def test_sampling_time_is_not_published(calibrated_run):
    idata, _ = calibrated_run
    for group in _group_names(idata):
        assert "sampling_time" not in idata[group].attrs


def test_step_built_on_other_data_is_refused():
    rng = np.random.default_rng(0)
    with pm.Model(coords={"obs": range(20)}):
        yd = pm.Data("yd", rng.normal(size=20), dims="obs")
        m = pm.Normal("m")
        pm.Normal("y", m, 1, observed=yd, dims="obs")
        step = pmdp.DPPenaltyMH(noise_multiplier=10.0)
        pm.set_data({"yd": rng.normal(size=25)}, coords={"obs": range(25)})
        with pytest.raises(ValueError, match="number of rows changed"):
            pmdp.sample(step=step, delta=1e-5, draws=5, tune=0, chains=1, **QUIET)


def test_add_remove_runs_never_release_n(conjugate_normal):
    with conjugate_normal.model:
        step = pmdp.DPPenaltyMH(llr_clip=5.0, neighbouring="add_remove")
        budget = pmdp.PrivacyBudget(epsilon=2.0, delta=1e-6, neighbouring="add_remove")
        idata = pmdp.sample(step=step, delta=1e-6, budget=budget, draws=30, tune=10, chains=1, random_seed=2, **QUIET)
    assert "dp_n_rows" not in idata.posterior.attrs
    assert json.loads(idata.posterior.attrs["dp_accountant"])["n_rows"] is None
    assert pmdp.privacy_spent(idata).n_rows is None
    np.testing.assert_allclose(step._proposal_scale_initial, 1.0)  # the N-based default needs a public N
    with pytest.raises(ValueError, match="`n_rows` must be given under substitute"):
        pmdp.PrivacyBudget(epsilon=1.0, delta=1e-6)
