"""DPADVI results are honest or flagged: iterate averaging, the optimisation noise, inflation."""

import json

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.diagnostics import PoorMixingWarning
from pymc_dp.planning import dpadvi_mean_error


def _fit(n_rows, epsilon, iterations, seed=3, **kwargs):
    rng = np.random.default_rng(seed)
    y = rng.normal(0.4, 1.0, size=n_rows)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 3)
        pm.Normal("y", mu, 1.0, observed=y)
    fit = pmdp.DPADVI(
        epsilon=epsilon,
        delta=1e-6,
        sampling_rate=1.0,
        grad_clip=3.0,
        optimizer="adam",
        learning_rate=0.05,
        random_seed=seed,
        reproducible_noise=True,
        model=model,
        **kwargs,
    )
    return fit.fit(iterations, progressbar=False)


def test_a_fit_the_noise_dominates_is_flagged_with_its_expected_error():
    approx = _fit(n_rows=50, epsilon=0.2, iterations=60)
    with pytest.warns(PoorMixingWarning, match="moves its fitted mean by about"):
        idata = approx.sample(100, random_seed=1)
    diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    expected = dpadvi_mean_error(record["settings"]["noise_multiplier"], 1.0, 50, 60)
    assert diagnostics["usable"] is False and diagnostics["expected_mean_error_sd"] == pytest.approx(expected)
    assert expected > 0.5


def test_inflation_widens_q_by_the_noise_and_changes_nothing_after():
    approx = _fit(n_rows=50, epsilon=0.2, iterations=60)
    with pytest.warns(PoorMixingWarning):
        wide = approx.sample(4000, random_seed=1, inflate=True)
    with pytest.warns(PoorMixingWarning):
        narrow = approx.sample(4000, random_seed=1, inflate=False)
    sd_q = float(approx.std.eval()[0])
    diagnostics = approx.optimisation_diagnostics()
    jitter = approx._dp_optimisation_sd[0]
    expected = np.sqrt(sd_q**2 + jitter**2 + (diagnostics["expected_mean_error_sd"] * sd_q) ** 2)
    # Draws' sd against the widened sd: standard error of an sd estimate is about sd/√(2n).
    assert float(wide.posterior["mu"].std()) == pytest.approx(expected, abs=4 * expected / np.sqrt(8000))
    assert float(narrow.posterior["mu"].std()) == pytest.approx(sd_q, abs=4 * sd_q / np.sqrt(8000))
    assert float(approx.std.eval()[0]) == sd_q  # the fitted parameters are restored
    assert json.loads(wide.posterior.attrs["dp_diagnostics"])["inflated"] is True


def test_a_well_conditioned_fit_is_usable_and_averaging_is_recorded():
    approx = _fit(n_rows=5000, epsilon=4.0, iterations=400)
    idata = approx.sample(200, random_seed=1)
    diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
    assert diagnostics["usable"] is True and diagnostics["expected_mean_error_sd"] < 0.5
    assert json.loads(idata.posterior.attrs["dp_accountant"])["settings"]["average_iterates"] is True
    # The averaged mean sits at the posterior mean within its expected error (conjugate: known in closed form).
    assert abs(float(approx.mean.eval()[0]) - 0.4) < 0.1


def test_average_iterates_must_be_a_bool():
    with pytest.raises(TypeError, match="`average_iterates` must be"):
        pmdp.DPADVI(epsilon=1.0, delta=1e-6, sampling_rate=0.5, grad_clip=1.0, average_iterates="yes")


def test_a_fit_stopped_before_its_second_half_is_flagged_not_averaged():
    rng = np.random.default_rng(1)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 3)
        pm.Normal("y", mu, 1.0, observed=rng.normal(size=200))

    def stop(approx, loss, i):
        if i >= 3:
            raise StopIteration("enough")

    fit = pmdp.DPADVI(noise_multiplier=2.0, delta=1e-6, sampling_rate=1.0, grad_clip=3.0, model=model, random_seed=1)
    approx = fit.fit(100, progressbar=False, callbacks=[stop])
    diagnostics = approx.optimisation_diagnostics()
    assert diagnostics["usable"] is False and "not averaged" in diagnostics["reasons"][0]


def test_starts_respect_transforms_that_depend_on_other_variables():
    rng = np.random.default_rng(2)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1)
        b = pm.Uniform("b", lower=a, upper=a + 1)
        pm.Normal("y", a + b, 1.0, observed=rng.normal(size=100))
    fit = pmdp.DPADVI(noise_multiplier=1.0, delta=1e-6, sampling_rate=1.0, grad_clip=3.0, model=model, random_seed=1)
    approx = fit.fit(50, progressbar=False)
    for point in approx.initial_values(20, random_seed=3, inflate=3.0):
        assert point["a"] < point["b"] < point["a"] + 1
