"""``target_accept`` on the one-call route: NUTS on released statistics takes it (post-processing), a grouped
release defaults to routes.GROUPED_TARGET_ACCEPT, and the DP-sampler route refuses it before any charge. The
release runs (O(N)); NUTS does not (ReleasedStatistics.sample is replaced by a recorder)."""

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.accounting import PrivacyBudget
from pymc_dp.exponential_family.release import ReleasedStatistics
from pymc_dp.routes import GROUPED_TARGET_ACCEPT

DELTA = 1e-6


def _model(grouped: bool, n_rows: int = 400) -> pm.Model:
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, size=(n_rows, 2))
    group = rng.integers(0, 4, n_rows)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        if grouped:
            offset = pm.Normal("offset", 0, 1, shape=4)
            intercept = (pm.Normal("mu", 0, 2) + pm.HalfNormal("sd", 1) * offset)[pm.Data("group", group)]
        else:
            intercept = pm.Normal("a", 0, 2)
        pm.Normal("y", intercept + x @ b, pm.HalfNormal("sigma", 1), observed=x @ [0.5, -0.3] + rng.normal(size=n_rows))
    return model


@pytest.fixture
def nuts_calls(monkeypatch):
    calls = []

    def record(self, **kwargs):
        calls.append(kwargs)
        raise RuntimeError("recorded")  # stop before NUTS: the test reads what it would have been given

    monkeypatch.setattr(ReleasedStatistics, "sample", record)
    return calls


@pytest.mark.parametrize(
    ("grouped", "given", "expected"),
    [(True, None, GROUPED_TARGET_ACCEPT), (True, 0.9, 0.9), (False, None, None), (False, 0.99, 0.99)],
)
def test_the_release_routes_nuts_takes_target_accept_and_grouped_raises_it(nuts_calls, grouped, given, expected):
    extra = {} if given is None else {"target_accept": given}
    with _model(grouped), pytest.raises(RuntimeError, match="recorded"):
        pmdp.sample(epsilon=2.0, delta=DELTA, x_bounds=(-1, 1), y_bounds=(-4, 4), progressbar=False, **extra)
    assert nuts_calls[0].get("target_accept") == expected


def test_the_sampler_route_refuses_target_accept_before_anything_is_charged():
    budget = PrivacyBudget(epsilon=10.0, delta=1e-5, n_rows=20_000)
    rng = np.random.default_rng(0)
    with pm.Model():  # a Student-t likelihood: no release covers it, so the plan picks a DP route
        mu = pm.Normal("mu", 0, 1)
        pm.StudentT("y", nu=4, mu=mu, sigma=1, observed=rng.standard_t(4, size=20_000))
        with pytest.raises(ValueError, match="`target_accept` must be left unset"):
            pmdp.sample(epsilon=2.0, delta=DELTA, budget=budget, target_accept=0.9, progressbar=False)
    assert budget.events == ()


@pytest.mark.parametrize("value", ["high", 1.5, -1.0, 1.0])
def test_a_bad_target_accept_is_refused_naming_it_before_anything_is_charged(value):
    budget = PrivacyBudget(epsilon=10.0, delta=1e-5, n_rows=400)
    with _model(grouped=True), pytest.raises((ValueError, TypeError), match="target_accept"):
        pmdp.sample(epsilon=2.0, delta=DELTA, x_bounds=(-1, 1), y_bounds=(-4, 4), budget=budget, target_accept=value)
    assert budget.events == ()
