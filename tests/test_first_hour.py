"""What the issue-35 walk (a new user's first hour, docs/tutorials/getting_started.md) found broken.

The getting-started tutorial's logistic regression observes an integer ``pm.Data`` container; PyMC
wraps it as ``Cast{int64}(y)``, and the one-call release route read only bare containers and
constants (``AttributeError: 'TensorVariable' object has no attribute 'data'``).
"""

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.routes import _observed_array


def test_the_release_route_reads_an_observed_container_through_a_cast():
    values = np.array([0, 1, 1, 0, 1])
    with pm.Model() as model:
        y = pm.Data("y", values)
        p = pm.Normal("p", 0, 1)
        outcome = pm.Bernoulli("outcome", logit_p=p, observed=y)
    np.testing.assert_array_equal(_observed_array(model.rvs_to_values[outcome]), values)
    np.testing.assert_array_equal(_observed_array(y), values)  # the container itself
    with pytest.raises(ValueError, match="The observed variable \\(and the design matrix\\) must hold data"):
        _observed_array(p + y)  # a graph of a random variable is no data


@pytest.mark.parametrize(
    "mixing",
    [
        lambda y: y > y.mean(),  # every row's value depends on every other row through the mean
        lambda y: y[np.array([0, 0, 0, 0, 1])],  # one person's row copied into many rows
        lambda y: y * (y.sum() > 2),  # one row switches every row off
    ],
)
def test_the_release_route_refuses_an_observed_graph_that_mixes_rows(mixing):
    """An observed expression that mixes rows would break the release's sensitivity: refused from its graph,
    before anything is read (the message names the op, never a value)."""
    with pm.Model():
        y = pm.Data("y", np.array([0.0, 1.0, 1.0, 0.0, 1.0]))
        with pytest.raises(ValueError, match="must hold data") as refused:
            _observed_array(mixing(y))
    assert "0." not in str(refused.value) and "1." not in str(refused.value)


def test_the_one_call_route_refuses_a_row_mixing_outcome_before_any_charge():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20_000, 2))
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=20_000)
    with pm.Model():
        xd = pm.Data("x", x)
        yd = pm.Data("y", x[:, 0] + rng.normal(size=20_000))
        a = pm.Normal("a", 0, 1)
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Bernoulli("outcome", logit_p=a + xd @ b, observed=yd > yd.mean())
        with pytest.raises(ValueError, match="must hold data"):
            pmdp.sample(epsilon=1.0, delta=1e-6, x_bounds=(-3, 3), budget=budget)
    assert budget.spent().epsilon == 0.0
