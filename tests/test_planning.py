"""The planner (pymc_dp.planning) and pmdp.sample's draws="auto" / init="dpadvi".

The ESS model's closed forms are checked against their own definitions (limit, knee,
monotonicity), and its prediction against a measured run in benchmarks/planner_check.py
(docs/choosing_a_method.md); here the tests check the algebra, the refusals and that
pmdp.sample uses the plan and composes the DP start into ε.
"""

import itertools
import json
import math

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.accounting.calibrate import CALIBRATION_MARGIN
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.planning import (
    MIN_USEFUL_ESS,
    penalty_ess,
    penalty_ess_from_noise,
    penalty_ess_limit,
    penalty_iterations,
    plan_from_settings,
)

COMMON = {"mu_total": 0.3, "llr_clip": 2.0, "posterior_sd": 0.01, "n_params": 3, "chains": 2}


def test_penalty_ess_grows_to_its_limit_and_the_knee_is_at_ninety_percent():
    limit = penalty_ess_limit(**COMMON)
    values = [penalty_ess(k, **COMMON) for k in (10, 100, 1000, 10**4, 10**6, 10**8)]
    assert all(a < b for a, b in itertools.pairwise(values))
    assert values[-1] == pytest.approx(limit, rel=1e-3)
    knee = penalty_iterations(mu_total=0.3, llr_clip=2.0, posterior_sd=0.01, chains=2)
    assert penalty_ess(knee, **COMMON) == pytest.approx(0.9 * limit, rel=1e-3)


def test_ess_at_a_given_noise_matches_the_budget_form():
    # τ² = C k / (2 μ*) turns the noise form into the budget form (module docstring).
    k, chains = 4000, 2
    tau = math.sqrt(chains * k / (2 * COMMON["mu_total"]))
    from_noise = penalty_ess_from_noise(k, noise_multiplier=tau, llr_clip=2.0, posterior_sd=0.01, n_params=3)
    assert penalty_ess(k, **COMMON, tune_fraction=0.0) == pytest.approx(from_noise, rel=1e-12)
    # add/remove halves the sensitivity: a quarter of c².
    c2_sub = (2 * tau * 2.0 * 0.01) ** 2
    add_remove = penalty_ess_from_noise(
        k, noise_multiplier=tau, llr_clip=2.0, posterior_sd=0.01, n_params=3, neighbouring="add_remove"
    )
    assert add_remove == pytest.approx(0.331 * k / (3 * (1 + c2_sub / 4)), rel=1e-12)


def test_small_n_epsilon_is_flagged_and_large_is_usable():
    small = plan_from_settings(epsilon=1.0, delta=1e-6, n_rows=1000, n_params=1, chains=4, llr_clip=2.5)
    assert not any(m.usable for m in small.methods if m.expected_ess is not None)
    assert "no DP sampler can deliver" in small.recommendation
    # DPADVI's expected mean error at N = 1000, ε = 1 is 0.76 posterior sds (above 0.5); release-once's
    # predicted sd is 2.05× a non-private one's (usable): it is the route, and without it there is none.
    assert small.recommended == "release_once" and not small.method("DPADVI").usable
    assert small.method("release_once").sd_ratio == pytest.approx(2.05, abs=0.01)
    without = plan_from_settings(epsilon=1.0, delta=1e-6, n_rows=1000, n_params=1, llr_clip=2.5, release_once=False)
    assert without.recommended is None
    # At N = 20,000 (P = 7, ε = 1) no sampler reaches 100 ESS but DPADVI's error is 0.17 sds (and release-once's
    # predicted sd 1.46×: recommended before DPADVI where the model can take it).
    middle = plan_from_settings(epsilon=1.0, delta=1e-6, n_rows=20_000, n_params=7, chains=2, llr_clip=2.5)
    assert not middle.method("DPPenaltyMH").usable and middle.method("DPADVI").usable
    assert middle.recommended == "release_once"
    settings = {"epsilon": 1.0, "delta": 1e-6, "n_rows": 20_000, "n_params": 7, "chains": 2, "llr_clip": 2.5}
    assert plan_from_settings(**settings, release_once=False).recommended == "DPADVI"
    # DPADVI's row at its default q = 10⁻³ costs an 18 s calibration and is not what this plan checks: q = 1 (0.5 s,
    # shared with the printed-plan test's ε = 4 plan); the default q is planned above at N = 1,000 and 20,000.
    large = plan_from_settings(
        epsilon=4.0, delta=1e-6, n_rows=10**6, n_params=3, chains=2, llr_clip=2.5, dpadvi_sampling_rate=1.0
    )
    best = large.method("DPPenaltyMH")  # the only validated model: the one the recommendation rests on
    assert best.usable and best.expected_ess * 2 >= MIN_USEFUL_ESS
    assert best.method in large.recommendation
    assert large.recommended == "DPPenaltyMH"
    penalty = large.method("DPPenaltyMH")
    assert penalty.tune + penalty.draws == penalty.iterations
    # The noise spends exactly μ*: chains × k releases at 1/(2τ²).
    mu = 2 * penalty.iterations / (2 * penalty.noise["noise_multiplier"] ** 2)
    assert mu == pytest.approx(gaussian_mu_for_target(4.0 * (1 - CALIBRATION_MARGIN), 1e-6), rel=1e-6)
    assert "DPPenaltyMH" in str(large)


def test_the_limit_scales_with_n_epsilon():
    # ESS limit ∝ μ* N / P² at the default posterior sd 2√P/(b√N).
    # one DPADVI q for both (its row is not checked here): one σ calibration instead of two
    same_q = {"epsilon": 2.0, "delta": 1e-6, "n_params": 2, "dpadvi_sampling_rate": 0.1}
    a = plan_from_settings(n_rows=10**4, **same_q).method("DPPenaltyMH").ess_limit
    b = plan_from_settings(n_rows=10**5, **same_q).method("DPPenaltyMH").ess_limit
    assert b / a == pytest.approx(10.0, rel=1e-9)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": -1.0}, "`epsilon` must be"),
        ({"n_rows": 0}, "`n_rows` must be"),
        ({"posterior_sd": [0.1, -1.0]}, "`posterior_sd` must be positive"),
        ({"llr_clip": float("inf")}, "`llr_clip` must be"),
        ({"neighbouring": "swap"}, "`neighbouring` must be"),
    ],
)
def test_bad_settings_are_refused(kwargs, match):
    settings = {"epsilon": 1.0, "delta": 1e-6, "n_rows": 100, "n_params": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        plan_from_settings(**settings)


@pytest.fixture
def regression():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(400, 2))
    y = x @ np.array([0.5, -0.3]) + rng.normal(size=400)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2, shape=2)
        pm.Normal("y", x @ beta, 1.0, observed=y)
    return model


def test_plan_reads_n_and_p_from_the_model(regression):
    result = pmdp.plan(regression, epsilon=1.0, delta=1e-6, llr_clip=3.0)
    assert (result.n_rows, result.n_params) == (400, 2)
    assert result.posterior_sd == pytest.approx(2 * math.sqrt(2) / (3.0 * math.sqrt(400)))


def _logistic(use_data: bool):
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, size=(300, 3))
    y = rng.integers(0, 2, 300)
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 2, shape=3)
        design = pm.Data("x", x) if use_data else x
        pm.Bernoulli("y", logit_p=alpha + pm.math.dot(design, beta), observed=y)
    return model


def test_plan_recommends_released_statistics_for_a_linear_and_a_logistic_regression(regression):
    result = pmdp.plan(regression, epsilon=1.0, delta=1e-6)
    assert (result.recommended, result.released_statistics) == ("release_statistics", "linear_regression")
    assert "pmdp.release_statistics('linear_regression', (X, y), epsilon=1, n_features" in result.recommendation
    assert pmdp.planning.released_statistics_route(regression) == "linear_regression"
    for model in (_logistic(True), _logistic(False)):
        result = pmdp.plan(model, epsilon=1.0, delta=1e-6)
        assert result.released_statistics == "logistic_regression"
        assert result.recommended == "release_statistics"  # with covariate anchors
        # four coefficients: the Gaussian mechanism's noise is the smaller one (docs/exponential_family.md)
        assert "epsilon=1, mechanism='gaussian', delta=1e-06, covariate_anchors=2, n_features" in result.recommendation
        assert "binary or skewed covariates" in result.recommendation
        assert "no DP sampler can deliver" in result.recommendation  # the samplers' verdict is kept


def test_centred_rows_only_where_pmdp_sample_would_centre(regression):
    """The centred rows need a logistic regression and x_bounds or a κ; without them the plan is as before."""
    logistic = _logistic(True)
    plain = pmdp.plan(logistic, epsilon=1.0, delta=1e-6)
    centred = pmdp.plan(logistic, epsilon=1.0, delta=1e-6, centre_lipschitz=0.5)
    names = [m.method for m in centred.methods]
    assert names == [m.method for m in plain.methods] + ["DPHMC (centred)", "DPPenaltyMH (centred)"]
    assert centred.details["centring"]["lipschitz"] == 0.5 and "centring" not in plain.details
    assert centred.recommended == plain.recommended  # a row to read, not yet a route the recommendation takes
    assert "DPHMC (centred)" in str(centred)
    for model, extra in ((regression, {"x_bounds": (-3, 3)}), (logistic, {"neighbouring": "add_remove"})):
        other = pmdp.plan(model, epsilon=1.0, delta=1e-6, centre_lipschitz=0.5, **extra)
        assert not any("centred" in m.method for m in other.methods)
    with pytest.raises(ValueError, match="`centre_lipschitz` must be"):
        pmdp.plan(logistic, epsilon=1.0, delta=1e-6, centre_lipschitz=-1.0)


def test_plan_finds_no_released_statistics_route_for_other_models():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(200, 2))
    with pm.Model() as poisson:  # a log-link Poisson regression has its route (tests/test_count_release.py)
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Poisson("y", pm.math.exp(pm.math.dot(x, beta)) + 0.1, observed=rng.poisson(1.0, 200))
    with pm.Model() as mean_only:
        pm.Normal("y", pm.Normal("mu", 0, 1), 1.0, observed=rng.normal(size=200))
    with pm.Model() as two_observed:
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Normal("y", pm.math.dot(x, beta), 1.0, observed=rng.normal(size=200))
        pm.Normal("z", pm.math.dot(x, beta), 1.0, observed=rng.normal(size=200))
    with pm.Model() as data_in_sigma:  # the noise scale reads the rows: not the release's model
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Normal("y", pm.math.dot(x, beta), pm.math.exp(x[:, 0]), observed=rng.normal(size=200))
    groups = rng.integers(0, 5, 200)
    with pm.Model() as crossed:  # two group indices (crossed effects): no grouped release describes them
        beta = pm.Normal("beta", 0, 1, shape=2)
        effect = pm.Normal("effect", 0, 1, shape=5)
        other = pm.Normal("other", 0, 1, shape=3)
        pm.Normal("y", pm.math.dot(x, beta) + effect[groups] + other[groups % 3], 1.0, observed=rng.normal(size=200))
    for model in (poisson, mean_only, two_observed, data_in_sigma, crossed):
        result = pmdp.plan(model, epsilon=1.0, delta=1e-6)
        assert result.released_statistics is None and result.recommended != "release_statistics"
    with pm.Model() as random_intercepts:  # one group index: the grouped release (tests/test_one_call.py)
        beta = pm.Normal("beta", 0, 1, shape=2)
        effect = pm.Normal("effect", 0, 1, shape=5)
        pm.Normal("y", pm.math.dot(x, beta) + effect[groups], 1.0, observed=rng.normal(size=200))
    assert pmdp.plan(random_intercepts, epsilon=1.0, delta=1e-6).released_statistics == "grouped_linear_regression"
    with pytest.raises(ValueError, match="`released_statistics` must be None or one of"):
        plan_from_settings(epsilon=1.0, delta=1e-6, n_rows=100, n_params=2, released_statistics="poisson")


QUIET = {"progressbar": False, "on_poor_mixing": "ignore", "random_seed": 3}


def test_draws_auto_runs_the_planned_iterations_and_records_the_plan(regression):
    with regression:
        with pytest.warns(pmdp.diagnostics.PoorMixingWarning, match="no DP sampler can deliver"):
            idata = pmdp.sample(
                step=pmdp.DPPenaltyMH(llr_clip=3.0), epsilon=0.5, delta=1e-6, draws="auto", chains=1, **QUIET
            )
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    expected = pmdp.plan(regression, epsilon=0.5, delta=1e-6, chains=1, llr_clip=3.0).method("DPPenaltyMH")
    assert (record["tune"], record["draws"]) == (expected.tune, expected.draws)
    assert record["plan"]["iterations"] == expected.iterations and record["plan"]["usable"] is False
    assert idata.posterior.sizes["draw"] == expected.draws
    assert idata.posterior.attrs["dp_epsilon"] <= 0.5
    # a step run that does not centre says why in its record (public settings only), and no anchor was priced
    assert record["centring"]["used"] is False and "not a logistic regression" in record["centring"]["reason"]
    assert not any("centring" in e["label"] for e in record["events"])


def test_draws_auto_refuses_fixed_noise_and_other_steps(regression):
    with regression:
        with pytest.raises(ValueError, match="leave the step's noise unset"):
            pmdp.sample(step=pmdp.DPPenaltyMH(noise_multiplier=5.0), epsilon=1.0, delta=1e-6, draws="auto", **QUIET)
        with pytest.raises(ValueError, match="needs `epsilon`"):
            pmdp.sample(step=pmdp.DPPenaltyMH(noise_multiplier=5.0), delta=1e-6, draws="auto", **QUIET)


def test_dpadvi_start_shares_the_target_and_is_recorded(regression):
    budget = pmdp.PrivacyBudget(epsilon=3.0, delta=1e-6, n_rows=400)
    with regression:
        idata = pmdp.sample(
            step=pmdp.DPPenaltyMH(llr_clip=3.0),
            epsilon=2.0,
            delta=1e-6,
            draws=30,
            tune=20,
            chains=2,
            init="dpadvi",
            init_epsilon_share=0.3,
            budget=budget,
            **QUIET,
        )
    attrs = idata.posterior.attrs
    record = json.loads(attrs["dp_accountant"])
    assert attrs["dp_start"] == "dp_release" and "DPADVI" in record["start"]["description"]
    assert next(e["type"] for e in record["events"]) == "poisson_gaussian"
    assert record["dp_init"]["epsilon_share"] == 0.3
    assert set(record["dp_init"]["fit_diagnostics"]) >= {"expected_mean_error_sd", "usable"}  # the fit's honesty
    # One target covers the fit and the chains; the budget was charged for both, once.
    assert 1.9 < attrs["dp_epsilon"] <= 2.0
    assert pmdp.privacy_spent(idata).epsilon == pytest.approx(attrs["dp_epsilon"])
    assert budget.spent().epsilon == pytest.approx(attrs["dp_epsilon"], rel=1e-9)
    assert len(budget.labels) == 1
    # Chains start at distinct points.
    first = idata.posterior["beta"].isel(draw=0).values
    assert not np.allclose(first[0], first[1])


def test_dpadvi_start_refusals_change_nothing(regression):
    budget = pmdp.PrivacyBudget(epsilon=3.0, delta=1e-6, n_rows=400)
    with regression:
        with pytest.raises(ValueError, match="`epsilon` must be given with init='dpadvi'"):
            pmdp.sample(step=pmdp.DPPenaltyMH(llr_clip=3.0), delta=1e-6, budget=budget, init="dpadvi", **QUIET)
        with pytest.raises(ValueError, match="`init_epsilon_share` must be in"):
            pmdp.sample(
                step=pmdp.DPPenaltyMH(), epsilon=1.0, delta=1e-6, init="dpadvi", init_epsilon_share=1.5, **QUIET
            )
    assert budget.spent().epsilon == 0.0


def test_n_dependent_planning_is_refused_under_add_remove(regression):
    # Under add/remove N is private: the plan's iterations and DPADVI's sampling rate would reveal it.
    with regression:
        with pytest.raises(ValueError, match="private under add/remove"):
            pmdp.sample(
                step=pmdp.DPPenaltyMH(llr_clip=3.0, neighbouring="add_remove"),
                epsilon=1.0,
                delta=1e-6,
                draws="auto",
                **QUIET,
            )
        with pytest.raises(ValueError, match="private under add/remove"):
            pmdp.sample(
                step=pmdp.DPPenaltyMH(llr_clip=3.0, neighbouring="add_remove"),
                epsilon=1.0,
                delta=1e-6,
                draws=10,
                tune=5,
                init="dpadvi",
                **QUIET,
            )


def test_dpadvi_start_refusals_from_dpadvi_checks_come_before_the_charge(regression, monkeypatch):
    budget = pmdp.PrivacyBudget(epsilon=3.0, delta=1e-6, n_rows=400)

    def refuse(self, model, random_seed):
        raise pmdp.ModelStructureError("DPADVI cannot fit this model")

    monkeypatch.setattr(pmdp.DPADVI, "_setup", refuse)
    with regression:
        with pytest.raises(pmdp.ModelStructureError, match="DPADVI cannot fit this model"):
            pmdp.sample(
                step=pmdp.DPPenaltyMH(llr_clip=3.0),
                epsilon=2.0,
                delta=1e-6,
                draws=10,
                tune=5,
                init="dpadvi",
                budget=budget,
                **QUIET,
            )
    assert budget.spent().epsilon == 0.0 and budget.labels == ()


def test_draws_auto_refuses_a_tune_longer_than_the_plan(regression):
    step = pmdp.DPPenaltyMH(llr_clip=3.0, model=regression)
    with regression, pytest.raises(ValueError, match="`tune` must be below"):  # init="prior": no DP start to plan
        pmdp.sample(step=step, epsilon=0.5, delta=1e-6, draws="auto", tune=10**6, init="prior", **QUIET)


def test_draws_auto_with_dphmc_records_a_json_plan(regression):
    # The DP-HMC plan is computed with NumPy (acceptance from the normal CDF): the record's "plan" entry must still be
    # JSON. Planning only (sample_plan.plan_sample; the record's entry is its iterations_plan): no fit, no chain run.
    import inspect

    from pymc_dp.sample_plan import plan_sample

    parameters = inspect.signature(pmdp.sample).parameters.items()
    settings = {k: v.default for k, v in parameters if k not in ("step", "model", "kwargs")}
    settings.update(epsilon=0.5, delta=1e-6, draws="auto", chains=1)
    step = pmdp.DPHMC(llr_clip=3.0, grad_clip=3.0, n_leapfrog=2, model=regression)
    with regression, pytest.warns(pmdp.diagnostics.PoorMixingWarning):
        the_plan = plan_sample(step, regression, {}, **settings)
    plan = json.loads(json.dumps(the_plan.iterations_plan, allow_nan=False))
    assert plan["method"] == "DPHMC" and plan["usable"] is False
    assert all(isinstance(m.usable, bool) for m in pmdp.plan(regression, epsilon=0.5, delta=1e-6).methods)


def test_the_gaussian_to_laplace_noise_ratio_is_that_of_the_two_releases():
    # The planner's ratio against the noise variances of two actual releases with the bounds it assumes.
    rng = np.random.default_rng(0)
    for family, n_params in [("logistic_regression", 4), ("linear_regression", 4), ("logistic_regression", 7)]:
        n_features = n_params - (family == "linear_regression")
        x = np.column_stack([np.ones(30), rng.uniform(-1, 1, (30, n_features - 1))])
        y = rng.integers(0, 2, 30) if family == "logistic_regression" else rng.uniform(-1, 1, 30)
        settings = {"n_features": n_features, "x_bounds": ([1.0] + [-1.0] * (n_features - 1), [1.0] * n_features)}
        if family == "linear_regression":
            settings["y_bounds"] = (-1.0, 1.0)
        laplace = pmdp.release_statistics(family, (x, y), epsilon=0.7, **settings)
        gaussian = pmdp.release_statistics(family, (x, y), epsilon=0.7, mechanism="gaussian", delta=1e-7, **settings)
        expected = gaussian.noise_variance / laplace.noise_variance
        assert pmdp.planning.gaussian_to_laplace_variance(family, n_params, 0.7, 1e-7) == pytest.approx(expected)


def test_the_printed_plan_says_in_words_why_a_cell_is_empty_or_tiny():
    # ε = 0.05 on 100 rows: the random walk's predicted ESS is about 1e-5 per chain
    text = str(plan_from_settings(epsilon=0.05, delta=1e-6, n_rows=100, n_params=3, chains=2, llr_clip=2.5))
    header, table = text.split("\n", 1)
    assert "2√P" not in header and "llr_clip/2" not in header  # the default sd is explained in words
    assert "a guess from N, P and the clip bound" in header and "one row replaced" in header
    assert "e-0" not in table  # no ESS of 8.74e-60: a tiny cell reads "<0.01" and is explained
    assert " <0.01 " in table and "\n<0.01: below 0.01 effective draws per chain" in table
    assert "\n-: does not apply (only the samplers have an acceptance rate and an ESS" in table  # blank cells say why
    assert "\n?: not predicted: DPHMC's ESS limit has no closed form." in table
    given = str(plan_from_settings(epsilon=4.0, delta=1e-6, n_rows=10**5, n_params=1, chains=1, llr_clip=2.5,
                                   posterior_sd=0.01, dpadvi_sampling_rate=1.0))  # fmt: skip  # q = 1: 0.5 s, not 9
    assert "the posterior sd you gave, ≈ 0.01" in given and "P = 1 parameter and 1 chain," in given


def _readme_regression(n_rows: int = 100_000):
    """The README's first snippet: a linear regression on 100,000 rows (its own seed and settings)."""
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, size=(n_rows, 2))
    y = 1.0 + x @ [0.5, -0.3] + rng.normal(0, 1.0, size=n_rows)
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0, 5)
        slopes = pm.Normal("slopes", 0, 2, shape=2)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", intercept + x @ slopes, sigma, observed=y)
    return model, x, y


def test_the_plan_prints_a_row_for_the_released_statistics_route_it_recommends():
    model, _, _ = _readme_regression(2000)
    plan = pmdp.plan(model, epsilon=1.0, delta=1e-6, chains=2)
    assert plan.recommended == "release_statistics"
    row = plan.method("release_statistics")
    assert row.usable and row.iterations == 1  # one release, no covariate anchors for a linear regression
    lines = str(plan).splitlines()
    printed = next(line for line in lines if line.startswith("release_statistics "))
    assert printed.split()[1:] == ["1", "-", "-", "-", "?", "?", "yes"]
    assert any(line.startswith("?: not predicted: release_statistics' error and sd") for line in lines)
    # a logistic regression's row counts its two covariate anchors
    assert pmdp.plan(_logistic(True), epsilon=1.0, delta=1e-6).method("release_statistics").iterations == 3


def test_the_default_posterior_sd_guess_is_near_the_exact_one_for_the_readme_regression():
    model, x, y = _readme_regression()
    plan = pmdp.plan(model, epsilon=1.0, delta=1e-6, chains=2)
    assert plan.posterior_sd == pytest.approx(1 / math.sqrt(100_000)) and plan.posterior_sd_source == "unit information"
    header = str(plan).splitlines()[0]
    assert "1/√N: a guess from N alone" in header and "2√P" not in header and "llr_clip" not in header
    # the measured posterior sds (flat-prior exact posterior of a linear regression with N = 10⁵: least squares
    # for the coefficients, 1/√(2N) for log σ) against the guess: 0.0027 (root mean square) vs 0.0032
    design = np.column_stack([np.ones(len(y)), x])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual_var = np.mean((y - design @ coef) ** 2)
    exact = np.append(np.sqrt(residual_var * np.diag(np.linalg.inv(design.T @ design))), 1 / math.sqrt(2 * len(y)))
    ratio = plan.posterior_sd / math.sqrt(np.mean(exact**2))
    assert 1 / 1.5 < ratio < 1.5  # the former guess, 2√P/(b√N) with b = 1, was 4.6× the exact sds
    # the samplers' rows are unchanged by the new guess: b·s = 2√P/√N as before
    old = plan_from_settings(epsilon=1.0, delta=1e-6, n_rows=100_000, n_params=4, chains=2, llr_clip=1.0)
    assert plan.method("DPPenaltyMH").expected_ess == pytest.approx(old.method("DPPenaltyMH").expected_ess)
    assert plan.method("DPPenaltyMH").iterations == old.method("DPPenaltyMH").iterations


def test_the_release_once_row_is_predicted_from_the_noise_the_route_will_use():
    from pymc_dp.accounting.composition import compose_epsilon
    from pymc_dp.release_once import release_once_events
    from pymc_dp.route_predictions import release_once_noise_multipliers

    row = plan_from_settings(epsilon=1.0, delta=1e-6, n_rows=10_000, n_params=4).method("release_once")
    taus, tau_clip = release_once_noise_multipliers(1.0, 1e-6, 6, 0.25, 0.5, clip_releases=12)
    events = release_once_events(taus, tau_clip, 12)  # the one-call route's
    assert (row.noise["score_noise_multiplier"], row.noise["hessian_noise_multiplier"]) == taus[-1]
    assert row.iterations == 6
    assert compose_epsilon(events, 1e-6)[0] == pytest.approx(1.0, rel=1e-6)
    # r = κ m τ_g √(P/N): 2 · 4 · τ_g · √(4/10⁴), and the sd ratio √(1 + r²)
    assert row.noise_to_signal == pytest.approx(8.0 * taus[-1][0] * 0.02)
    assert row.sd_ratio == pytest.approx(math.sqrt(1 + row.noise_to_signal**2))
    # DPADVI at the N = 10⁴ plan's q (its σ is then reused, not a 15 s calibration at q = 10⁻³); release_once's
    # row, the one checked, does not depend on q
    larger = plan_from_settings(epsilon=1.0, delta=1e-6, n_rows=1_000_000, n_params=4, dpadvi_sampling_rate=0.1).method(
        "release_once"
    )
    assert larger.noise_to_signal == pytest.approx(row.noise_to_signal / 10)
    assert row.usable and larger.usable
    assert not plan_from_settings(epsilon=0.1, delta=1e-6, n_rows=500, n_params=4).method("release_once").usable
    # add/remove halves the sensitivity; a model release_once cannot take has no row
    half = plan_from_settings(epsilon=1.0, delta=1e-6, n_rows=10_000, n_params=4, neighbouring="add_remove")
    assert half.method("release_once").noise_to_signal == pytest.approx(row.noise_to_signal / 2)
    without = plan_from_settings(epsilon=1.0, delta=1e-6, n_rows=10_000, n_params=4, release_once=False)
    assert "release_once" not in [m.method for m in without.methods] and without.recommended == "DPADVI"
