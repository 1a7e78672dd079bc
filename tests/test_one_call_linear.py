"""The one call's route for a grouped Gaussian linear model: the grouped release or release_once_linear (issue 34).

The choice is :func:`pymc_dp.route_predictions.linear_route_row`'s, from public quantities only (N,
G, P, ε, δ, the public box and outcome bounds, the relation and σ's prior); the plan shows a
``release_once_linear`` row with its prediction. Costs (3.12, loaded 2-core machine): the plan
tests read no data and compile only σ's prior draw (about 1 s the first time, 0.2 s after); the
end-to-end test one release at N = 2,000 and NUTS 1 × (50 + 50) on the priors (about 5 s, mostly
compilation); the refusals read nothing and charge nothing (< 1 s each).
"""

from __future__ import annotations

import json

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.route_predictions import linear_route_prediction

DELTA = 1e-6


def _grouped_linear(sigma_prior: float, n_rows: int = 2000, n_groups: int = 5) -> pm.Model:
    """Varying intercepts (non-centred), two covariates in [−1, 1], residual sd 0.3; σ ~ HalfNormal(sigma_prior)."""
    rng = np.random.default_rng(0)
    group = rng.integers(0, n_groups, n_rows)
    x = rng.uniform(-1, 1, size=(n_rows, 2))
    y = rng.normal(0, 0.5, n_groups)[group] + x @ np.array([0.5, -0.3]) + 0.3 * rng.normal(size=n_rows)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        sd = pm.HalfNormal("sd", 1)
        offset = pm.Normal("offset", 0, 1, shape=n_groups)
        b = pm.Normal("b", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", sigma_prior)
        pm.Normal("y", (mu + sd * offset)[group] + x @ b, sigma, observed=y)
    return model


def test_the_plan_picks_each_route_from_public_settings_and_says_why():
    """σ's prior says residuals like the outcome's range (HalfNormal(1), y in [−1, 1]): the grouped release's noise is
    small against them and it is kept; a prior of residuals a tenth of that (HalfNormal(0.1)), or a wider public
    outcome range (y in [−3, 3]), makes the release's fixed noise large against them and release_once_linear is taken.
    The rows are the same in every case: only public settings differ. Under add/remove neighbours
    release_once_linear refuses, and the release stays, saying why. (≈ 2 s: σ's prior drawn.)"""
    bounds = {"x_bounds": (-1, 1), "y_bounds": (-1, 1)}
    vague = pmdp.plan(_grouped_linear(1.0), epsilon=4.0, delta=DELTA, **bounds)
    assert vague.one_call_route == "release_statistics"
    row = vague.method("release_once_linear")
    assert row.sd_ratio is not None and row.iterations == 4
    assert "release_once_linear predicted sd" in vague.one_call_reason
    assert "median of σ's prior" in vague.one_call_reason
    for model, y_bounds in ((_grouped_linear(0.1), (-1, 1)), (_grouped_linear(1.0), (-3, 3))):
        tight = pmdp.plan(model, epsilon=4.0, delta=DELTA, x_bounds=(-1, 1), y_bounds=y_bounds)
        assert tight.one_call_route == "release_once_linear" == tight.recommended
        assert tight.method("release_once_linear").usable
        assert tight.one_call_reason.startswith("release once over the Gaussian likelihood's parameters")
    add_remove = pmdp.plan(_grouped_linear(0.1), epsilon=4.0, delta=DELTA, neighbouring="add_remove", **bounds)
    assert add_remove.one_call_route == "release_statistics"
    assert "refuses add/remove neighbours" in add_remove.one_call_reason
    assert not add_remove.method("release_once_linear").usable
    no_box = pmdp.plan(_grouped_linear(0.1), epsilon=4.0, delta=DELTA)  # without x_bounds: no row, as before
    assert no_box.one_call_route == "release_statistics"
    assert "release_once_linear" not in [m.method for m in no_box.methods]


def test_the_prediction_follows_its_derivation():
    """The release's error grows as 1/σ and with √G; release_once_linear's does not depend on G and little on σ;
    they cross where the one call's rule would switch; more ε narrows both. Public numbers only (< 0.1 s)."""
    box = (np.full(2, -1.0), np.full(2, 1.0))
    common = {"delta": DELTA, "n_rows": 10_000, "x_bounds": box, "y_bounds": (-1.0, 1.0)}
    a = linear_route_prediction(epsilon=4.0, n_groups=8, residual_sd=0.1, **common)
    b = linear_route_prediction(epsilon=4.0, n_groups=8, residual_sd=0.2, **common)
    c = linear_route_prediction(epsilon=4.0, n_groups=32, residual_sd=0.1, **common)
    assert a["release"]["mean_error"] == pytest.approx(2.0 * b["release"]["mean_error"], rel=1e-12)
    assert c["release"]["mean_error"] == pytest.approx(2.0 * a["release"]["mean_error"], rel=1e-12)
    assert c["release_once_linear"]["mean_error"] == pytest.approx(a["release_once_linear"]["mean_error"], rel=0.05)
    assert b["release_once_linear"]["mean_error"] == pytest.approx(a["release_once_linear"]["mean_error"], rel=0.05)
    crossing = a["crossing_residual_sd"]
    at = linear_route_prediction(epsilon=4.0, n_groups=8, residual_sd=crossing, **common)
    assert at["release"]["mean_error"] == pytest.approx(at["release_once_linear"]["mean_error"], rel=1e-6)
    low = linear_route_prediction(epsilon=1.0, n_groups=8, residual_sd=0.1, **common)
    assert low["release"]["mean_error"] > a["release"]["mean_error"]
    assert low["release_once_linear"]["mean_error"] > a["release_once_linear"]["mean_error"]
    assert low["release_once_linear"]["min_group_rows"] > a["release_once_linear"]["min_group_rows"]


def test_the_one_call_runs_release_once_linear_charged_once_as_planned():
    """The plan's route runs: one charge of the planned ε (every release of the route in one run), the route and
    its reason recorded, the released Gaussian in the diagnostics, a privacy statement. (≈ 5 s, NUTS compiled.)"""
    model = _grouped_linear(0.1)
    budget = pmdp.PrivacyBudget(epsilon=4.0, delta=DELTA, n_rows=2000)
    plan = pmdp.plan(model, epsilon=2.0, delta=DELTA, chains=1, x_bounds=(-1, 1), y_bounds=(-1, 1))
    assert plan.one_call_route == "release_once_linear"
    with model:
        idata = pmdp.sample(
            epsilon=2.0, delta=DELTA, x_bounds=(-1, 1), y_bounds=(-1, 1), draws=50, tune=50, chains=1,
            budget=budget, on_poor_mixing="ignore", random_seed=3, progressbar=False,
        )  # fmt: skip
    attrs = idata.posterior.attrs
    assert attrs["dp_route"] == "release_once_linear" and attrs["dp_epsilon"] <= 2.0
    record = json.loads(attrs["dp_accountant"])
    assert record["route"]["name"] == "release_once_linear" and record["route"]["reason"] == plan.one_call_reason
    assert len(budget.labels) == 1  # one charge, by the route
    assert budget.spent().epsilon == pytest.approx(2.0, rel=1e-6)
    assert pmdp.privacy_spent(idata).epsilon == pytest.approx(attrs["dp_epsilon"], rel=1e-9)
    assert "release" in json.loads(attrs["dp_diagnostics"])
    assert pmdp.privacy_statement(idata).text
    assert {"mu", "sd", "offset", "b", "sigma"} <= set(idata.posterior.data_vars)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"x_bounds": (1, -1), "y_bounds": (-1, 1)}, r"`x_bounds` must be finite with lower < upper"),
        ({"x_bounds": ((-1, -1, -1), (1, 1, 1)), "y_bounds": (-1, 1)}, r"`x_bounds` must be a pair .* length 2"),
        ({"x_bounds": (-1, 1), "y_bounds": (1, 1)}, r"`y_bounds` must have lower < upper"),
        ({"x_bounds": (-1, 1), "y_bounds": (-1, 1), "var_names": ["b"]}, r"`var_names` must be left unset"),
        ({"x_bounds": (-1, 1), "y_bounds": (-1, 1), "backend": "jax"}, r"`backend` must be left unset"),
    ],
)
def test_bad_bounds_and_settings_the_route_ignores_are_refused_before_any_charge(kwargs, message):
    """Named errors, raised while the route is chosen or checked: the budget holds no event (< 1 s each)."""
    budget = pmdp.PrivacyBudget(epsilon=4.0, delta=DELTA, n_rows=2000)
    with _grouped_linear(0.1), pytest.raises(ValueError, match=message):
        pmdp.sample(epsilon=2.0, delta=DELTA, budget=budget, progressbar=False, **kwargs)
    assert budget.spent().epsilon == 0.0 and budget.labels == ()


def test_the_residual_scale_is_read_from_the_prior_alone_and_leaves_the_models_generators_as_they_were():
    """σ̃ is the median of σ's prior (HalfNormal(s): 0.674 s), capped at half the outcome's public range; drawing it
    does not reseed the model's generators. (≈ 0.5 s: σ's prior drawn.)"""
    from pytensor.graph.traversal import graph_inputs
    from pytensor.tensor.random.type import RandomType

    from pymc_dp.regression_graph import regression_parts
    from pymc_dp.route_predictions import residual_scale_guess

    parts = regression_parts(_grouped_linear(0.5))
    generators = [v for v in graph_inputs([parts.sigma]) if isinstance(v.type, RandomType)]
    before = [repr(g.get_value().bit_generator.state) for g in generators]
    guess, source = residual_scale_guess(parts, (-2, 2))
    assert guess == pytest.approx(0.674 * 0.5, rel=0.05) and "median of σ's prior" in source
    assert [repr(g.get_value().bit_generator.state) for g in generators] == before
    capped, source = residual_scale_guess(parts, (-0.1, 0.1))
    assert capped == pytest.approx(0.1) and "y_bounds" in source


def test_the_plan_checks_y_bounds_wherever_given():
    """pmdp.plan refuses malformed ``y_bounds`` by name even where no row reads them (no ``x_bounds``; the review's
    finding 4). Model building only: well under a second."""
    model = _grouped_linear(1.0)
    for bad in ("garbage", (5.0, -5.0), (0.0, np.inf)):
        with pytest.raises(ValueError, match=r"`y_bounds` must"):
            pmdp.plan(model, epsilon=4.0, delta=DELTA, y_bounds=bad)
