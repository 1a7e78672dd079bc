"""What the issue-35 walk (a new user's first hour, docs/tutorials/getting_started.md) found broken.

The getting-started tutorial's logistic regression observes an integer ``pm.Data`` container; PyMC
wraps it as ``Cast{int64}(y)``, and the one-call release route read only bare containers and
constants (``AttributeError: 'TensorVariable' object has no attribute 'data'``).
"""

import importlib.util
from pathlib import Path

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.mechanisms.access import observed_array as _observed_array


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


@pytest.mark.slow
def test_the_getting_started_route_covers_the_truth_at_the_tutorials_size():
    """benchmarks/getting_started_coverage.py at R = 20 (about 12 CPU-minutes on 2 cores; slow, on demand): fresh
    data from a known truth and fresh release noise each time, the tutorial's one-call route. The 90 % intervals'
    coverage, pooled over the three coefficients, may fall short of nominal by at most 3 binomial SEs at R (the
    pooled share's SE is at most a single coefficient's, so this bound is conservative); the standardised errors
    (posterior mean − truth)/sd average within 4 of their SEs of 0 (calibrated: mean 0, sd 1). Measured at R = 25
    with seeds 0-24: 90 % coverage 0.92, 1.00, 0.84; mean standardised errors +0.17, +0.04, +0.31 (SEs 0.16-0.22)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "getting_started_coverage.py"
    spec = importlib.util.spec_from_file_location("getting_started_coverage", path)
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    replicates = 20
    found = benchmark.coverage(benchmark.main(["--replicates", str(replicates), "--first-seed", "1000"]))
    se = np.sqrt(0.9 * 0.1 / replicates)
    assert found["shares"][0.9].mean() >= 0.9 - 3 * se, found["shares"]
    mean_z, se_z = found["dp_z"].mean(axis=0), found["dp_z"].std(axis=0, ddof=1) / np.sqrt(replicates)
    assert np.all(np.abs(mean_z) < 4 * se_z + 0.05), (mean_z, se_z)
    # No assertion on the usable share: at 4 x 300 draws about 1 run in 20 is flagged (R-hat 1.011; 2 of 37 in the
    # benchmark's runs), so "all usable" would fail by chance; the flag itself is tested in tests/test_diagnostics.py.
