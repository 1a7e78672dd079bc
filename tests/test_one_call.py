"""pmdp.sample without a step (issue 34, deliverable 1): the planner's route, in one call.

The route is chosen from public quantities only (the graph, N, P, ε, δ, the chains) by the same
function that writes ``Plan.one_call_route``; each test checks that the plan and the run agree.
The released-statistics routes compile a noise-aware likelihood for NUTS (a minute or more on a
loaded 2-core machine), so their end-to-end runs are marked slow; their choice, and every refusal,
is checked here in seconds: the release route's own refusals come from the route sample() took.
"""

from __future__ import annotations

import json

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.diagnostics import PoorMixingError
from pymc_dp.planning import regression_parts

DELTA = 1e-6
QUIET = {"progressbar": False, "random_seed": 3}


def _logistic(n_rows: int = 300, use_data: bool = True) -> pm.Model:
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, size=(n_rows, 2))
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-(0.3 + x @ np.array([0.8, -0.5]))))).astype("int64")
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 2, shape=2)
        design = pm.Data("x", x) if use_data else x
        eta = alpha + design @ beta
        pm.Deterministic("p", pm.math.sigmoid(eta))  # reads the rows: dropped from the release route's model
        pm.Bernoulli("y", logit_p=eta, observed=y)
    return model


def _linear(n_rows: int = 300) -> pm.Model:
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, size=(n_rows, 2))
    y = 0.4 + x @ np.array([0.5, -0.3]) + 0.5 * rng.normal(size=n_rows)
    with pm.Model() as model:
        coef = pm.Normal("coef", 0, 2, shape=3)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", coef[0] + x @ coef[1:], sigma, observed=y)
    return model


def _location_scale(n_rows: int) -> pm.Model:
    """A model with no release route: a normal with unknown mean and standard deviation."""
    rng = np.random.default_rng(7)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        sd = pm.HalfNormal("sd", 2)
        pm.Normal("y", mu, sd, observed=rng.normal(0.5, 1.0, size=n_rows))
    return model


def _student_t(n_rows: int = 2000, n_covariates: int = 2) -> pm.Model:
    """A Student-t regression: independent rows, a smooth log-likelihood, no released-statistics family."""
    rng = np.random.default_rng(9)
    x = rng.normal(size=(n_rows, n_covariates)).clip(-3, 3)
    y = 0.5 + x @ np.linspace(1.0, -0.5, n_covariates) + 0.8 * rng.standard_t(4, size=n_rows)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 2.5, shape=n_covariates)
        s = pm.HalfNormal("s", 2)
        pm.StudentT("y", nu=4, mu=a + pm.math.dot(x, b), sigma=s, observed=y)
    return model


def _unspent(budget: pmdp.PrivacyBudget) -> bool:
    return budget.spent().epsilon == 0.0 and budget.labels == ()


def _check_result(idata, epsilon: float, route: str, budget: pmdp.PrivacyBudget) -> None:
    """ε at most the target, recorded and recomputed alike, charged once, the route recorded, a statement."""
    attrs = idata.posterior.attrs
    assert attrs["dp_epsilon"] <= epsilon
    assert attrs["dp_route"] == route
    record = json.loads(attrs["dp_accountant"])
    assert record["route"]["name"] == route and record["route"]["reason"]
    spent = pmdp.privacy_spent(idata)  # checks the result (integrity included) before pricing it
    assert spent.epsilon == pytest.approx(attrs["dp_epsilon"], rel=1e-9)
    assert len(budget.labels) == 1  # one charge, by the route
    assert budget.spent().epsilon == pytest.approx(attrs["dp_epsilon"], rel=1e-6)
    assert "dp_diagnostics" in attrs
    statement = pmdp.privacy_statement(idata)
    assert statement.text


def test_a_regression_without_an_intercept_releases_a_ones_column_whose_coefficient_is_zero():
    """The released Σx identify the Gaussian covariate model's means (without them NUTS crawled along a ridge:
    step size 0.015 against 0.5-1.3, routes._releases_ones_column). Graph and settings only: nothing released."""
    from pymc_dp.routes import _likelihood_parameters, _release_data, _release_settings

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(50, 2))
    for family in ("logistic", "linear", "poisson"):
        with pm.Model() as model:
            beta = pm.Normal("beta", 0, 1, shape=2)
            if family == "logistic":
                pm.Bernoulli("y", logit_p=pm.math.dot(x, beta), observed=rng.integers(0, 2, 50))
            elif family == "linear":
                pm.Normal("y", pm.math.dot(x, beta), pm.HalfNormal("sigma", 1), observed=rng.normal(size=50))
            else:
                pm.Poisson("y", mu=pm.math.exp(pm.math.dot(x, beta)), observed=rng.integers(0, 5, 50))
        parts = regression_parts(model)
        assert parts.intercept is None
        y_bounds = None if family == "logistic" else ((-3, 3) if family == "linear" else (0, 5))
        settings, _ = _release_settings(parts, (-1, 1), y_bounds)
        design = _release_data(model, parts, 50, None)[0]
        if family == "poisson":  # its statistics hold Σx already: the release is the model's columns
            assert settings["x_bounds"] == ([-1.0, -1.0], [1.0, 1.0]) and design.shape == (50, 2)
            continue
        assert settings["n_features"] == 3 and settings["x_bounds"] == ([1.0, -1.0, -1.0], [1.0, 1.0, 1.0])
        np.testing.assert_array_equal(design, np.column_stack([np.ones(50), x]))
        released_beta = _likelihood_parameters(model, model, parts)["beta"]
        point = {"beta": np.array([0.3, -0.7])}
        np.testing.assert_allclose(released_beta.eval({model["beta"]: point["beta"]}), [0.0, 0.3, -0.7])


# -- the choice: from the graph, N, P, ε, δ; the same in plan and in sample --------------------------------------


def test_regression_parts_reads_the_linear_predictor_from_the_graph():
    parts = regression_parts(_logistic())
    assert parts.family == "logistic_regression" and parts.intercept is not None and parts.sigma is None
    assert parts.matrix.name == "x" and parts.outcome.name == "y"
    parts = regression_parts(_linear())
    assert parts.family == "linear_regression" and parts.intercept is not None and parts.sigma is not None
    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 2))
    with pm.Model() as no_intercept:
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=pm.math.dot(x, beta), observed=rng.integers(0, 2, 100))
    assert regression_parts(no_intercept).intercept is None
    with pm.Model() as squared:  # a function of X @ w other than a sum: not the release's model
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=(x @ beta) ** 2, observed=rng.integers(0, 2, 100))
    with pm.Model() as per_row:  # a term that varies per row without reading data: not an intercept
        beta = pm.Normal("beta", 0, 1, shape=2)
        shift = pm.Normal("shift", 0, 1, shape=100)
        pm.Normal("y", x @ beta + shift, 1.0, observed=rng.normal(size=100))
    with pm.Model() as row_sigma:  # one standard deviation per row: not the release's model
        beta = pm.Normal("beta", 0, 1, shape=2)
        pm.Normal("y", x @ beta, pm.HalfNormal("s", 1, shape=100), observed=rng.normal(size=100))
    for model in (squared, per_row, row_sigma):
        assert regression_parts(model) is None
        assert pmdp.plan(model, epsilon=1.0, delta=DELTA).one_call_route != "release_statistics"


def _bambi_frame(n_rows: int = 2000):
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(35)
    x = np.linspace(-1.0, 1.0, n_rows)
    group = rng.integers(0, 4, n_rows)
    y = 1.0 + 0.5 * x + np.array([-0.5, 0.0, 0.3, 0.6])[group] + rng.normal(size=n_rows)
    counts = rng.negative_binomial(2.0, 2.0 / (2.0 + np.exp(0.5 + 0.4 * x)))
    return pd.DataFrame({"x": x, "g": pd.Categorical([f"g{k}" for k in group]), "y": y, "c": counts})


def test_bambi_regressions_are_recognised_and_sent_to_their_release_route():
    bmb = pytest.importorskip("bambi", reason="bambi is in the test extra; `pip install -e '.[test]'`")
    frame = _bambi_frame()
    priors = {
        "Intercept": bmb.Prior("Normal", mu=0, sigma=5),
        "x": bmb.Prior("Normal", mu=0, sigma=2),
        "sigma": bmb.Prior("HalfNormal", sigma=2),
    }
    fixed = {"auto_scale": False, "center_predictors": False}
    linear = pmdp.from_bambi(bmb.Model("y ~ x", frame, priors=priors, **fixed))
    grouped_priors = {**priors, "1|g": bmb.Prior("Normal", mu=0, sigma=bmb.Prior("HalfNormal", sigma=1))}
    grouped = pmdp.from_bambi(bmb.Model("y ~ x + (1|g)", frame, priors=grouped_priors, **fixed), public_levels=True)
    nb_priors = {"Intercept": priors["Intercept"], "x": priors["x"], "alpha": 2.0}  # α a public constant
    nb = pmdp.from_bambi(bmb.Model("c ~ x", frame, family="negativebinomial", priors=nb_priors, **fixed))
    free_alpha = {**nb_priors, "alpha": bmb.Prior("Gamma", alpha=2, beta=1)}  # recognised, but not released
    nb_free = pmdp.from_bambi(bmb.Model("c ~ x", frame, family="negativebinomial", priors=free_alpha, **fixed))
    slopes_priors = {**grouped_priors, "x|g": grouped_priors["1|g"]}
    slopes = pmdp.from_bambi(bmb.Model("y ~ x + (x|g)", frame, priors=slopes_priors, **fixed), public_levels=True)
    expected = {"linear_regression": linear, "grouped_linear_regression": grouped, "negative_binomial_regression": nb}
    for family, model in expected.items():
        assert regression_parts(model).family == family  # through Bambi's named views and nested sums
        plan = pmdp.plan(model, epsilon=4.0, delta=DELTA)
        assert plan.one_call_route == "release_statistics" == plan.recommended
        assert plan.released_statistics == family and family.replace("_", " ") in plan.one_call_reason
    assert regression_parts(grouped).n_groups == 4 and regression_parts(nb).dispersion == 2.0
    plan = pmdp.plan(nb_free, epsilon=4.0, delta=DELTA)
    assert plan.released_statistics is None and plan.one_call_route != "release_statistics"
    assert "free dispersion alpha" in plan.one_call_reason
    assert regression_parts(slopes) is None  # varying slopes: no grouped release takes them from the graph yet


@pytest.mark.parametrize("use_data", [True, False])
def test_a_logistic_regression_takes_the_release_route_in_plan_and_sample(use_data):
    model = _logistic(use_data=use_data)
    plan = pmdp.plan(model, epsilon=2.0, delta=DELTA)
    assert plan.one_call_route == "release_statistics" == plan.recommended
    assert "logistic regression" in plan.one_call_reason and "x_bounds" in plan.one_call_reason
    assert f"without step= runs: {plan.one_call_reason}" in str(plan)
    budget = pmdp.PrivacyBudget(epsilon=4.0, delta=DELTA, n_rows=300)
    with model, pytest.raises(ValueError, match=r"`x_bounds` must be given for the released-statistics route \(log"):
        pmdp.sample(epsilon=2.0, delta=DELTA, budget=budget, **QUIET)
    with model, pytest.raises(ValueError, match="`y_bounds` must be None for a logistic regression"):
        pmdp.sample(epsilon=2.0, delta=DELTA, x_bounds=(-1, 1), y_bounds=(0, 1), budget=budget, **QUIET)
    with model, pytest.raises(ValueError, match=r"`x_bounds` must be a pair \(lower, upper\) of numbers or of 2"):
        pmdp.sample(epsilon=2.0, delta=DELTA, x_bounds=(-1, 0, 1), budget=budget, **QUIET)
    with model, pytest.raises(ValueError, match="`x_bounds` must hold finite bounds with lower ≤ upper"):
        pmdp.sample(epsilon=2.0, delta=DELTA, x_bounds=([1, -1], [0, 1]), budget=budget, **QUIET)
    with model, pytest.raises(ValueError, match="`grad_clip` must be left unset: it does not apply to the route"):
        pmdp.sample(epsilon=2.0, delta=DELTA, x_bounds=(-1, 1), grad_clip=2.0, budget=budget, **QUIET)
    assert _unspent(budget)


def test_a_linear_regression_takes_the_release_route_in_plan_and_sample():
    model = _linear()
    plan = pmdp.plan(model, epsilon=2.0, delta=DELTA)
    assert plan.one_call_route == "release_statistics" and plan.released_statistics == "linear_regression"
    assert "x_bounds and y_bounds" in plan.one_call_reason
    budget = pmdp.PrivacyBudget(epsilon=4.0, delta=DELTA, n_rows=300)
    with model, pytest.raises(ValueError, match=r"`y_bounds` must be given for the released-statistics route \(lin"):
        pmdp.sample(epsilon=2.0, delta=DELTA, x_bounds=(-1, 1), budget=budget, **QUIET)
    with model, pytest.raises(ValueError, match="`init` must be left unset"):
        pmdp.sample(epsilon=2.0, delta=DELTA, x_bounds=(-1, 1), y_bounds=(-3, 3), init="prior", budget=budget)
    assert _unspent(budget)


def _counts(family: str, n_rows: int = 400, link=None, alpha=2.0) -> pm.Model:
    """A Poisson or negative-binomial regression with a log link (or ``link``) on two covariates in [−1, 1]."""
    rng = np.random.default_rng(21)
    x = rng.uniform(-1, 1, size=(n_rows, 2))
    mean = np.exp(0.5 + x @ np.array([0.4, -0.3]))
    y = rng.poisson(mean) if family == "poisson" else rng.negative_binomial(2.0, 2.0 / (2.0 + mean))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, shape=2)
        mu = (link or pm.math.exp)(a + x @ b)
        if family == "poisson":
            pm.Poisson("y", mu=mu, observed=y)
        else:
            pm.NegativeBinomial("y", mu=mu, alpha=alpha if alpha is not None else pm.Gamma("alpha", 2, 1), observed=y)
    return model


def _grouped(likelihood: str, n_rows: int = 400, n_groups: int = 5, covariates: bool = True):
    """A varying-intercept model (non-centred group intercepts) with a group index held in a pm.Data container."""
    rng = np.random.default_rng(23)
    x = rng.uniform(-1, 1, size=(n_rows, 2))
    group = rng.integers(0, n_groups, n_rows)
    eta = rng.normal(0, 0.5, n_groups)[group] + x @ np.array([0.5, -0.3])
    with pm.Model() as model:
        index = pm.Data("group", group)
        mu = pm.Normal("mu", 0, 2)
        sd = pm.HalfNormal("sd", 1)
        offset = pm.Normal("offset", 0, 1, shape=n_groups)
        intercepts = mu + sd * offset
        b = pm.Normal("b", 0, 1, shape=2)
        lin = intercepts[index] + x @ b if covariates else intercepts[index]
        if likelihood == "normal":
            pm.Normal("y", lin, pm.HalfNormal("sigma", 1), observed=eta + 0.5 * rng.normal(size=n_rows))
        elif likelihood == "bernoulli":
            pm.Bernoulli("y", logit_p=lin, observed=(rng.random(n_rows) < 1 / (1 + np.exp(-eta))).astype("int64"))
        else:
            pm.Poisson("y", mu=pm.math.exp(lin), observed=rng.poisson(np.exp(eta)))
    return model


def test_count_and_grouped_regressions_are_recognised_from_the_graph_and_near_misses_are_not():
    import pytensor.tensor as pt

    cases = {
        "poisson_regression": _counts("poisson"),
        "negative_binomial_regression": _counts("negative_binomial"),
        "grouped_linear_regression": _grouped("normal"),
        "grouped_logistic_regression": _grouped("bernoulli"),
    }
    for family, model in cases.items():
        parts = regression_parts(model)
        assert parts.family == family and parts.routable
        plan = pmdp.plan(model, epsilon=2.0, delta=DELTA)
        assert plan.one_call_route == "release_statistics" == plan.recommended
        assert plan.released_statistics == family and family.replace("_", " ") in plan.one_call_reason
        assert f"without step= runs: {plan.one_call_reason}" in str(plan)
    nb = regression_parts(cases["negative_binomial_regression"])
    assert nb.dispersion == 2.0 and nb.intercept is not None and nb.matrix is not None
    grouped = regression_parts(cases["grouped_linear_regression"])
    assert grouped.n_groups == 5 and grouped.groups.name == "group" and grouped.intercept is None
    assert regression_parts(_grouped("normal", covariates=False)).matrix is None  # group intercepts alone
    # recognised, but no release covers them: the general routes, and the plan says why
    for model, why in (
        (_counts("negative_binomial", alpha=None), "free dispersion alpha"),
        (_grouped("poisson"), "no grouped release covers yet"),
    ):
        assert not regression_parts(model).routable
        plan = pmdp.plan(model, epsilon=2.0, delta=DELTA)
        assert plan.released_statistics is None and plan.one_call_route != "release_statistics"
        assert why in plan.one_call_reason and why in plan.recommendation
    # near misses: a non-log link; an index that is not one data vector (a free variable's, or a computed one)
    for model in (_counts("poisson", link=pt.softplus), _counts("negative_binomial", link=pt.sqr)):
        assert regression_parts(model) is None
        assert pmdp.plan(model, epsilon=2.0, delta=DELTA).one_call_route != "release_statistics"
    rng = np.random.default_rng(3)
    x, group = rng.uniform(-1, 1, size=(400, 2)), rng.integers(0, 5, 400)
    with pm.Model() as shifted:  # the index reads every row through a comparison with the data's mean
        index = pm.Data("group", group)
        a = pm.Normal("a", 0, 1, shape=5)
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Normal("y", a[pt.switch(pt.gt(index, index.mean()), 1, 0)] + x @ b, 1.0, observed=rng.normal(size=400))
    assert regression_parts(shifted) is None


def test_the_count_routes_reason_names_its_anchors_and_the_clipping_trade_off_from_public_inputs_only():
    # H34h: the plan says how many anchors the count route will release (from N·ε, as routes.py runs it) and that a
    # y_max inside an over-dispersed tail biases while a larger one adds noise (randhie: no y_max meets 2× at ε = 4).
    # Four plans of 400-row models, nothing compiled for sampling or released: about 1 CPU s.
    from pymc_dp.route_predictions import COUNT_CLIP_CAVEAT

    reasons = {}
    for family, n_rows, epsilon, words in (
        ("poisson", 400, 2.0, "with one anchor"),
        ("poisson", 400, 1500.0, "with four anchors"),  # N·ε = 600,000: four (release_anchors)
        ("negative_binomial", 400, 2.0, "with two score anchors"),
    ):
        plan = pmdp.plan(_counts(family, n_rows=n_rows), epsilon=epsilon, delta=DELTA)
        assert plan.one_call_route == "release_statistics"
        assert words in plan.one_call_reason and plan.one_call_reason.endswith(COUNT_CLIP_CAVEAT)
        reasons[family, epsilon] = plan.one_call_reason
    # The same public inputs (graph, N, P, ε, δ) with other counts and covariates: the same reason (no row is read).
    with pm.Model() as other:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Poisson("y", mu=pm.math.exp(a + np.zeros((400, 2)) @ b), observed=np.full(400, 77))
    assert pmdp.plan(other, epsilon=2.0, delta=DELTA).one_call_reason == reasons["poisson", 2.0]


def test_count_and_grouped_release_routes_check_their_public_bounds_before_anything_is_spent():
    budget = pmdp.PrivacyBudget(epsilon=4.0, delta=DELTA, n_rows=400)
    cases = [
        (_counts("negative_binomial"), {"x_bounds": (-1, 1)}, r"`y_bounds` must be given .*\(negative_binomial_reg"),
        (_counts("negative_binomial"), {"x_bounds": (-1, 1), "y_bounds": (0, 2.5)}, "y_max a positive integer for"),
        (_counts("poisson"), {"x_bounds": (-1, 1), "y_bounds": (1, 10)}, r"`y_bounds` must be \(0, y_max\)"),
        (_grouped("normal"), {"x_bounds": (-1, 1)}, r"`y_bounds` must be given .*\(grouped_linear_regression\)"),
        (_grouped("normal"), {"y_bounds": (-3, 3)}, r"`x_bounds` must be given .*\(grouped_linear_regression\)"),
        (_grouped("bernoulli"), {"x_bounds": (-1, 1), "y_bounds": (0, 1)}, "`y_bounds` must be None for a logistic"),
        (_grouped("normal", covariates=False), {"x_bounds": (-1, 1), "y_bounds": (-3, 3)}, "`x_bounds` must be None"),
        (_grouped("bernoulli"), {"x_bounds": (-1, 1), "tune": 10, "backend": "jax"}, "`backend` must be left unset"),
    ]
    for model, kwargs, message in cases:
        with model, pytest.raises(ValueError, match=message):
            pmdp.sample(epsilon=2.0, delta=DELTA, budget=budget, **kwargs, **QUIET)
        assert _unspent(budget), kwargs


def test_models_no_release_family_covers_take_the_release_once_route_in_the_plan():
    rng = np.random.default_rng(12)
    x = rng.normal(size=(5000, 2))
    with pm.Model() as probit:
        beta = pm.Normal("beta", 0, 2, shape=2)
        pm.Bernoulli("y", p=pm.math.invprobit(x @ beta), observed=rng.integers(0, 2, 5000))
    with pm.Model() as weibull:
        shape = pm.HalfNormal("shape", 2)
        scale = pm.HalfNormal("scale", 5)
        pm.Weibull("t", alpha=shape, beta=scale, observed=rng.weibull(1.5, 5000) * 2.0)
    for model in (_student_t(5000), probit, weibull):
        plan = pmdp.plan(model, epsilon=1.0, delta=DELTA)
        assert plan.released_statistics is None
        assert plan.one_call_route == "release_once" == plan.recommended
        row = plan.method("release_once")
        assert row.usable and row.sd_ratio <= 3.0
        assert "release once (pmdp.release_once)" in plan.one_call_reason and "predicted sd" in plan.one_call_reason
        assert "\nrelease_once " in str(plan) and f"without step= runs: {plan.one_call_reason}" in str(plan)
    # too few rows for this ε: the route is not usable, and the reason says so in the refusal
    small = pmdp.plan(_student_t(200), epsilon=0.2, delta=DELTA)
    assert small.one_call_route is None and "release_once is not usable (predicted sd" in small.one_call_reason


def test_the_release_once_route_runs_priced_as_planned_with_diagnostics_and_a_statement():
    model = _student_t(1000)
    plan = pmdp.plan(model, epsilon=4.0, delta=DELTA, chains=2)
    assert plan.one_call_route == "release_once"
    budget = pmdp.PrivacyBudget(epsilon=6.0, delta=DELTA, n_rows=1000)
    with model:
        idata = pmdp.sample(epsilon=4.0, delta=DELTA, draws=100, chains=2, budget=budget, on_poor_mixing="ignore",
                            **QUIET)  # fmt: skip
    _check_result(idata, 4.0, "release_once", budget)
    attrs = idata.posterior.attrs
    assert attrs["dp_epsilon"] == pytest.approx(plan.epsilon, rel=1e-6)  # the plan's ε is the run's
    record = json.loads(attrs["dp_accountant"])
    assert record["mechanism"] == "pymc_dp.release_once" and record["route"]["name"] == "release_once"
    text = pmdp.privacy_statement(idata).text
    assert "noisy histograms of the rows' score and Hessian norms" in text and "of the run's μ, zCDP" in text
    # the noise the plan predicted from is the noise the run released with
    planned = plan.method("release_once").noise
    assert record["settings"]["noise_multipliers"][-1] == pytest.approx(
        [planned["score_noise_multiplier"], planned["hessian_noise_multiplier"]], rel=1e-12
    )
    assert record["settings"]["clip_bounds"]["noise_multiplier"] == pytest.approx(planned["clip_noise_multiplier"])
    diagnostics = json.loads(attrs["dp_diagnostics"])
    assert diagnostics["route"] == "release_once" and isinstance(diagnostics["usable"], bool)
    assert set(idata.posterior.data_vars) == {"a", "b", "s"} and idata.posterior.sizes["draw"] == 100


def test_the_release_once_route_refuses_what_it_would_ignore_and_an_over_budget_run_before_reading(monkeypatch):
    from pymc_dp.mechanisms.clip_bound import NoisyScoreNormHistogram
    from pymc_dp.mechanisms.gradient import NoisyClippedGradient

    def fail(*args, **kwargs):
        raise AssertionError("a row was read")

    monkeypatch.setattr(NoisyScoreNormHistogram, "release_counts", fail)
    monkeypatch.setattr(NoisyClippedGradient, "release", fail)
    model = _student_t(1000)
    budget = pmdp.PrivacyBudget(epsilon=6.0, delta=DELTA, n_rows=1000)
    cases = [
        ({"tune": 100}, "`tune` must be left unset: it does not apply to the route"),
        ({"x_bounds": (-3, 3)}, "`x_bounds` must be left unset"),
        ({"grad_clip": 2.0}, "`grad_clip` must be left unset"),
        ({"clip_margin": 3.0}, "`clip_margin` must be left unset"),
        ({"var_names": ["a"]}, "`var_names` must be left unset"),
        ({"cores": 2}, "`cores` must be left unset"),
        ({"random_seed": np.random.default_rng(1)}, "`random_seed` must be an int or None on the release-once"),
    ]
    for kwargs, message in cases:
        with model, pytest.raises((ValueError, TypeError), match=message):
            pmdp.sample(epsilon=4.0, delta=DELTA, budget=budget, progressbar=False, **kwargs)
        assert _unspent(budget), kwargs
    small = pmdp.PrivacyBudget(epsilon=2.0, delta=DELTA, n_rows=1000)
    with model, pytest.raises(pmdp.PrivacyBudgetExceededError):
        pmdp.sample(epsilon=4.0, delta=DELTA, budget=small, progressbar=False)
    assert _unspent(small)


def test_a_model_release_once_cannot_resolve_runs_dpadvi_where_the_plan_says():
    model = _student_t(2000, n_covariates=18)  # P = 20 on 2,000 rows: the curvature's noise is too large
    plan = pmdp.plan(model, epsilon=4.0, delta=DELTA)
    assert plan.released_statistics is None and not plan.method("release_once").usable
    assert plan.one_call_route == "DPADVI" == plan.recommended
    assert "release_once is not usable" in plan.one_call_reason
    budget = pmdp.PrivacyBudget(epsilon=6.0, delta=DELTA, n_rows=2000)
    with model:
        idata = pmdp.sample(epsilon=4.0, delta=DELTA, draws=200, grad_clip=3.0, budget=budget, **QUIET)
    _check_result(idata, 4.0, "DPADVI", budget)
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    assert record["settings"]["grad_clip"] == 3.0
    assert record["settings"]["sampling_rate"] == plan.method("DPADVI").noise["sampling_rate"]
    assert record["iterations"] == plan.method("DPADVI").iterations
    assert set(idata.posterior.data_vars) == {"a", "b", "s"} and idata.posterior.sizes["draw"] == 200


def test_a_sampler_route_is_run_where_the_plan_finds_one_usable_and_flags_a_short_run():
    rng = np.random.default_rng(11)
    with pm.Model() as model:  # one parameter, many rows: DPPenaltyMH can deliver 100 effective draws
        mu = pm.Normal("mu", 0, 5)
        pm.Normal("y", mu, 1.0, observed=rng.normal(0.5, 1.0, size=20_000))
    plan = pmdp.plan(model, epsilon=4.0, delta=DELTA, chains=2)
    assert plan.one_call_route == "DPPenaltyMH" == plan.recommended
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=DELTA, n_rows=20_000)
    # 2 × 30 draws cannot hold 100 effective draws: flagged, and with "raise" the priced result rides on the error
    with model, pytest.raises(PoorMixingError) as caught:
        pmdp.sample(
            epsilon=4.0, delta=DELTA, draws=30, tune=30, chains=2, budget=budget, on_poor_mixing="raise", **QUIET
        )
    _check_result(caught.value.result, 4.0, "DPPenaltyMH", budget)
    record = json.loads(caught.value.result.posterior.attrs["dp_accountant"])
    assert (record["tune"], record["draws"], record["chains"]) == (30, 30, 2)


def test_bad_input_is_refused_before_anything_is_spent():
    model = _location_scale(2000)
    budget = pmdp.PrivacyBudget(epsilon=6.0, delta=DELTA, n_rows=2000)
    cases = [
        ({"delta": DELTA}, "`epsilon` must be given when `step` is not"),
        ({"epsilon": -1.0, "delta": DELTA}, "`epsilon` must be"),
        ({"epsilon": 4.0, "delta": 2.0}, "`delta` must be"),
        ({"epsilon": 4.0, "delta": DELTA, "chains": 0}, "`chains` must be"),
        ({"epsilon": 4.0, "delta": DELTA, "draws": -5}, "`draws` must be"),
        ({"epsilon": 4.0, "delta": DELTA, "on_poor_mixing": "shout"}, "`on_poor_mixing` must be one of"),
        ({"epsilon": 4.0, "delta": DELTA, "grad_clip": -1.0}, "`grad_clip` must be"),
        ({"epsilon": 4.0, "delta": DELTA, "var_names": ["nope"]}, "`var_names` must name"),
        # the release-once route (pmdp.plan says so) takes no tuning, no bounds and no sampler settings
        ({"epsilon": 4.0, "delta": DELTA, "tune": 100}, r"`tune` must be left unset: it does not apply to the route"),
        ({"epsilon": 4.0, "delta": DELTA, "x_bounds": (-1, 1)}, "`x_bounds` must be left unset"),
        ({"epsilon": 4.0, "delta": DELTA, "clip_margin": 3.0}, "`clip_margin` must be left unset"),
        ({"epsilon": 4.0, "delta": DELTA, "cores": 2}, "`cores` must be left unset"),
        ({"epsilon": 4.0, "delta": DELTA, "random_seed": np.random.default_rng(1)}, "`random_seed` must be an int"),
        # nothing usable at this N·ε: refused, naming ε and the plan's reason
        ({"epsilon": 0.05, "delta": DELTA}, "`epsilon` must buy a usable posterior of this model by some route"),
    ]
    for kwargs, message in cases:
        with model, pytest.raises((ValueError, TypeError), match=message):
            pmdp.sample(budget=budget, progressbar=False, **kwargs)
        assert _unspent(budget), kwargs
    with model, pytest.raises(ValueError, match="`x_bounds` must be None when `step` is given"):
        pmdp.sample(step=pmdp.DPPenaltyMH(), epsilon=4.0, delta=DELTA, x_bounds=(-1, 1), budget=budget)
    with pytest.raises(ValueError, match="`epsilon` must be given when `step` is not"):
        pmdp.sample(delta=DELTA, model=model, budget=budget)
    with model, pytest.raises(ValueError, match="`delta` must be given"):  # no budget to take it from
        pmdp.sample(epsilon=4.0)
    assert _unspent(budget)
    assert pmdp.plan(model, epsilon=0.05, delta=DELTA).one_call_route is None


# -- the released-statistics routes end to end (a noise-aware likelihood compiled for NUTS: minutes) ------------


@pytest.mark.slow
def test_the_logistic_release_route_end_to_end():
    model = _logistic(2000)
    budget = pmdp.PrivacyBudget(epsilon=4.0, delta=DELTA, n_rows=2000)
    with model:
        idata = pmdp.sample(
            epsilon=2.0, delta=DELTA, x_bounds=(-1, 1), draws=100, tune=100, chains=2, budget=budget,
            on_poor_mixing="ignore", **QUIET,
        )  # fmt: skip
    _check_result(idata, 2.0, "release_statistics", budget)
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    assert record["route"]["family"] == "logistic_regression" and record["route"]["covariate_anchors"] == 2
    assert record["family"]["x_bounds"] == [[1.0, -1.0, -1.0], [1.0, 1.0, 1.0]]  # the intercept's column of ones
    assert {"alpha", "beta"} <= set(idata.posterior.data_vars) and "p" not in idata.posterior


@pytest.mark.slow
def test_the_linear_release_route_end_to_end():
    model = _linear(2000)
    budget = pmdp.PrivacyBudget(epsilon=4.0, delta=DELTA, n_rows=2000)
    with model:
        idata = pmdp.sample(
            epsilon=2.0, delta=DELTA, x_bounds=(-1, 1), y_bounds=(-3, 3), draws=100, tune=100, chains=2,
            budget=budget, on_poor_mixing="ignore", **QUIET,
        )  # fmt: skip
    _check_result(idata, 2.0, "release_statistics", budget)
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    assert record["route"]["family"] == "linear_regression" and record["route"]["covariate_anchors"] == 0
    assert {"coef", "sigma"} <= set(idata.posterior.data_vars)


@pytest.mark.slow
@pytest.mark.parametrize("likelihood", ["normal", "bernoulli"])
def test_the_grouped_release_route_end_to_end(likelihood):
    model = _grouped(likelihood, n_rows=2000)
    budget = pmdp.PrivacyBudget(epsilon=4.0, delta=DELTA, n_rows=2000)
    # y in ±2.5: the plan keeps the grouped release (at ±3 it predicts release_once_linear: test_one_call_linear)
    bounds = {"x_bounds": (-1, 1), **({"y_bounds": (-2.5, 2.5)} if likelihood == "normal" else {})}
    with model:
        idata = pmdp.sample(
            epsilon=2.0, delta=DELTA, draws=100, tune=100, chains=2, budget=budget, on_poor_mixing="ignore",
            **bounds, **QUIET,
        )  # fmt: skip
    _check_result(idata, 2.0, "release_statistics", budget)
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    family = f"grouped_{'linear' if likelihood == 'normal' else 'logistic'}_regression"
    assert record["route"]["family"] == family and record["route"]["covariate_anchors"] == 0
    assert record["family"]["n_groups"] == 5 and record["family"]["x_bounds"] == [[-1.0, -1.0], [1.0, 1.0]]
    assert {"mu", "sd", "offset", "b"} <= set(idata.posterior.data_vars)
    assert idata.posterior["offset"].shape[-1] == 5


@pytest.mark.slow
def test_the_negative_binomial_release_route_end_to_end():
    model = _counts("negative_binomial", n_rows=2000)
    budget = pmdp.PrivacyBudget(epsilon=4.0, delta=DELTA, n_rows=2000)
    with model:
        idata = pmdp.sample(
            epsilon=2.0, delta=DELTA, x_bounds=(-1, 1), y_bounds=(0, 30), draws=100, tune=100, chains=2,
            budget=budget, on_poor_mixing="ignore", **QUIET,
        )  # fmt: skip
    _check_result(idata, 2.0, "release_statistics", budget)
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    assert record["route"]["family"] == "negative_binomial_regression" and record["route"]["covariate_anchors"] == 2
    assert record["family"]["alpha"] == 2.0 and record["family"]["y_max"] == 30
    assert {"a", "b"} <= set(idata.posterior.data_vars)


@pytest.mark.slow
def test_a_bambi_varying_intercept_model_runs_the_grouped_release_route():
    bmb = pytest.importorskip("bambi", reason="bambi is in the test extra; `pip install -e '.[test]'`")
    priors = {
        "Intercept": bmb.Prior("Normal", mu=0, sigma=5),
        "x": bmb.Prior("Normal", mu=0, sigma=2),
        "sigma": bmb.Prior("HalfNormal", sigma=2),
        "1|g": bmb.Prior("Normal", mu=0, sigma=bmb.Prior("HalfNormal", sigma=1)),
    }
    model = pmdp.from_bambi(
        bmb.Model("y ~ x + (1|g)", _bambi_frame(), priors=priors, auto_scale=False, center_predictors=False),
        public_levels=True,
    )
    budget = pmdp.PrivacyBudget(epsilon=4.0, delta=DELTA, n_rows=2000)
    with model:
        idata = pmdp.sample(
            epsilon=2.0, delta=DELTA, x_bounds=(-1, 1), y_bounds=(-4, 6), draws=100, tune=100, chains=2,
            budget=budget, on_poor_mixing="ignore", **QUIET,
        )  # fmt: skip
    _check_result(idata, 2.0, "release_statistics", budget)
    assert json.loads(idata.posterior.attrs["dp_accountant"])["family"]["n_groups"] == 4
    assert {"Intercept", "x", "sigma", "1|g_offset"} <= set(idata.posterior.data_vars)


@pytest.mark.slow
def test_the_poisson_release_route_flags_bounds_that_clip_a_material_share_of_the_counts():
    # Counts with means 0.8-3.3 clipped to y_max = 2: about a fifth of the rows are clipped (issue 34's check).
    model = _counts("poisson", n_rows=2000)
    budget = pmdp.PrivacyBudget(epsilon=4.0, delta=DELTA, n_rows=2000)
    from pymc_dp.diagnostics import PoorMixingWarning

    with model, pytest.warns(PoorMixingWarning, match=r"clipping: about .* y_max=2"):
        idata = pmdp.sample(
            epsilon=2.0, delta=DELTA, x_bounds=(-1, 1), y_bounds=(0, 2), draws=100, tune=100, chains=2,
            budget=budget, **QUIET,
        )  # fmt: skip
    _check_result(idata, 2.0, "release_statistics", budget)
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    check = record["clipping_check"]
    assert check["bounds"]["y_max"] == 2 and 0.0 < check["budget_share"] <= 0.1
    diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
    assert diagnostics["usable"] is False and diagnostics["bounds_clipping"] == [check]
    assert any(p.startswith("clipping:") for p in diagnostics["problems"])


def test_a_plain_pymc_vector_named_like_a_bambi_term_is_not_read_as_varying_intercepts():
    # Review finding 10 (issue 34): Bambi's `1|g` term is effects[g] times a column of ones; a plain model's vector
    # named "1|g" times a data column z is no intercept (z need not be ones), so only from_bambi's mark reads it so.
    from pymc_dp._validation import BAMBI_CHECKED

    rng = np.random.default_rng(0)
    groups, z = rng.integers(0, 4, 300), rng.uniform(-1, 1, 300)
    with pm.Model() as model:
        effects = pm.Normal("1|g", 0, 1, shape=4)
        pm.Normal("y", mu=effects[groups] * z, sigma=1.0, observed=rng.normal(size=300))
    assert regression_parts(model) is None
    assert pmdp.plan(model, epsilon=4.0, delta=1e-6).one_call_route != "release_statistics"
    setattr(model, BAMBI_CHECKED, True)  # what from_bambi marks: Bambi builds the term with its column of ones
    assert regression_parts(model).family == "grouped_linear_regression"
