"""Statistical validation suite (slow): every sampler against posteriors known in closed form.

Run with ``python -m pytest -m slow`` (excluded from the default run). Each check is a z-test
of a posterior summary against its exact value, with the Monte Carlo standard error estimated
by ArviZ from the chains' effective sample size, at two-sided level 1e-4 per test.
"""

import math

import arviz as az
import numpy as np
import pymc as pm
import pytest
from _invariance import Z_CRIT

import pymc_dp as pmdp

pytestmark = pytest.mark.slow

SAMPLE = dict(chains=4, random_seed=2026, progressbar=False, compute_convergence_checks=False)


def _ess(x: np.ndarray) -> float:
    """ArviZ's bulk ESS (method "mean") of a (chain, draw) array."""
    return float(np.asarray(az.ess(az.convert_to_dataset({"x": np.asarray(x, dtype=float)}), method="mean")["x"]))


def _mcse(x: np.ndarray, method: str) -> float:
    """MCSE of the mean or the sd of a (chain, draw) array, ESS-based as in ``az.mcse``.

    Written out (the same formulas as ArviZ's) because ArviZ 0.23's ``mcse(method="sd")``
    fails under Numba with NumPy ≥ 2.3.
    """
    x = np.asarray(x, dtype=float)
    if method == "mean":
        return float(x.std() / math.sqrt(_ess(x)))
    squares = (x - x.mean()) ** 2  # Var(sd estimate) by the delta method on the mean of squares
    variance = squares.mean()
    return float(math.sqrt((np.mean(squares**2) - variance**2) / _ess(squares) / variance / 4))


def _z_scores(idata, name: str, mean, sd) -> tuple[np.ndarray, np.ndarray]:
    """z of the posterior mean and sd of ``name`` against exact values, MCSE from ArviZ (ESS-based)."""
    draws = np.asarray(idata.posterior[name])  # (chain, draw, *shape)
    flat = draws.reshape(draws.shape[0], draws.shape[1], -1)
    z_mean, z_sd = [], []
    for j, (m, s) in enumerate(zip(np.atleast_1d(mean), np.atleast_1d(sd), strict=True)):
        x = flat[:, :, j]
        z_mean.append((x.mean() - m) / _mcse(x, "mean"))
        z_sd.append((x.std() - s) / _mcse(x, "sd"))
    return np.array(z_mean), np.array(z_sd)


@pytest.fixture(scope="module")
def linear_regression():
    """y = a + b x + N(0, 1) with known unit noise and N(0, 10²) priors: a Gaussian posterior in closed form."""
    rng = np.random.default_rng(21)
    n = 500
    x = rng.uniform(-1, 1, n)
    y = 0.5 - 1.0 * x + rng.normal(0, 1, n)
    with pm.Model() as model:
        xd = pm.Data("x", x)
        yd = pm.Data("y", y)
        coef = pm.Normal("coef", 0, 10, shape=2)
        pm.Normal("obs", coef[0] + coef[1] * xd, 1.0, observed=yd)
    design = np.column_stack([np.ones(n), x])
    precision = design.T @ design + np.eye(2) / 100
    covariance = np.linalg.inv(precision)
    return model, covariance @ design.T @ y, np.sqrt(np.diag(covariance))


def test_dp_penalty_mh_on_a_gaussian_regression_posterior(linear_regression):
    model, mean, sd = linear_regression
    with model:
        # |∂/∂coef log p| = |y − a − b x|·‖(1, x)‖ ≤ 5·√2 for these data and plausible coef: never clipped.
        # τ = 0.02: the llr noise has std 0.02·2·8·‖θ′ − θ‖ ≈ 0.02, so the penalty barely bites.
        step = pmdp.DPPenaltyMH(llr_clip=8.0, noise_multiplier=0.02, proposal_scale=sd, tune=False)
        idata = pmdp.sample(step=step, delta=1e-5, draws=6000, tune=500, **SAMPLE)
    z_mean, z_sd = _z_scores(idata, "coef", mean, sd)
    assert np.all(np.abs(z_mean) < Z_CRIT) and np.all(np.abs(z_sd) < Z_CRIT), (z_mean, z_sd)


def test_dp_hmc_on_a_gaussian_regression_posterior(linear_regression):
    model, mean, sd = linear_regression
    with model:
        step = pmdp.DPHMC(
            grad_clip=8.0,
            llr_clip=8.0,
            grad_noise_multiplier=0.02,
            llr_noise_multiplier=0.02,
            n_leapfrog=5,
            step_size=0.5 * float(sd.min()),
            tune=False,
        )
        idata = pmdp.sample(step=step, delta=1e-5, draws=3000, tune=300, **SAMPLE)
    z_mean, z_sd = _z_scores(idata, "coef", mean, sd)
    assert np.all(np.abs(z_mean) < Z_CRIT) and np.all(np.abs(z_sd) < Z_CRIT), (z_mean, z_sd)


@pytest.fixture(scope="module")
def bounded_normal():
    y = np.random.default_rng(4).uniform(-0.5, 1.5, size=20_000)
    with pm.Model() as model:
        m = pm.Normal("m", 0, 10)
        pm.Normal("obs", m, 1.0, observed=pm.Data("y", y))
    return model, y


def test_dp_barker_subsampled_on_a_tempered_conjugate_posterior(bounded_normal):
    model, y = bounded_normal
    tempered_size = 25.0
    precision = 1 / 100 + tempered_size
    mean, sd = tempered_size / y.size * y.sum() / precision, 1 / math.sqrt(precision)
    with model:
        step = pmdp.DPBarkerMH(batch_size=500, tempered_size=tempered_size, proposal_scale=sd, tune=False)
        idata = pmdp.sample(step=step, delta=1e-6, draws=8000, tune=500, **SAMPLE)
    z_mean, z_sd = _z_scores(idata, "m", np.array(mean), np.array(sd))
    assert np.all(np.abs(z_mean) < Z_CRIT) and np.all(np.abs(z_sd) < Z_CRIT), (z_mean, z_sd)


def test_dp_barker_full_data_on_the_conjugate_posterior(conjugate_normal):
    mean, sd = conjugate_normal.posterior()
    with conjugate_normal.model:
        # Ratios are |d|·|y − m̄| ≤ 4 sd · 4 ≈ 1.1 here: a clip of 5 never binds.
        step = pmdp.DPBarkerMH(full_data=True, llr_clip=5.0, correction_variance=1.0, proposal_scale=1.5 * sd)
        idata = pm.sample(step=step, draws=6000, tune=500, **SAMPLE)
    z_mean, z_sd = _z_scores(idata, "m", np.array(mean), np.array(sd))
    assert np.all(np.abs(z_mean) < Z_CRIT) and np.all(np.abs(z_sd) < Z_CRIT), (z_mean, z_sd)


@pytest.fixture(scope="module")
def normal_rows():
    """N = 200 rows of N(0.5, 1) clipped to public bounds [−5, 5], prior N(0, 10²), unit noise known."""
    y = np.clip(np.random.default_rng(3).normal(0.5, 1.0, size=200), -5, 5)
    precision = 1 / 100 + y.size
    return y, y.sum() / precision, 1 / math.sqrt(precision)


def test_dp_suffstats_penalty_mh_on_the_conjugate_posterior(normal_rows):
    y, mean, sd = normal_rows
    with pm.Model():
        m = pm.Normal("m", 0, 10)
        # Fresh noisy statistics each iteration with σ = 0.05 Δ₂: the penalty test corrects for the
        # noise, so the chain targets the exact posterior (Yıldırım and Ermiş 2019, Alg. 3).
        step = pmdp.DPSuffStatsPenaltyMH(
            "normal",
            y,
            {"mu": m},
            noise_multiplier=0.05,
            proposal_scale=1.5 * sd,
            tune=False,
            family_settings={"sigma": 1.0, "bounds": (-5, 5)},
        )
        idata = pmdp.sample(step=step, delta=1e-6, draws=6000, tune=500, **SAMPLE)
    z_mean, z_sd = _z_scores(idata, "m", np.array(mean), np.array(sd))
    assert np.all(np.abs(z_mean) < Z_CRIT) and np.all(np.abs(z_sd) < Z_CRIT), (z_mean, z_sd)


def test_dp_multi_owner_penalty_mh_on_the_conjugate_posterior(conjugate_normal):
    mean, sd = conjugate_normal.posterior()
    with conjugate_normal.model:
        step = pmdp.DPMultiOwnerPenaltyMH(
            owners=np.arange(conjugate_normal.y.size) % 3,
            llr_clip=50.0,
            noise_multiplier=0.02,
            proposal_scale=1.5 * sd,
            tune=False,
        )
        idata = pmdp.sample(step=step, delta=1e-6, draws=6000, tune=500, **SAMPLE)
    z_mean, z_sd = _z_scores(idata, "m", np.array(mean), np.array(sd))
    assert np.all(np.abs(z_mean) < Z_CRIT) and np.all(np.abs(z_sd) < Z_CRIT), (z_mean, z_sd)


def test_laplace_statistics_with_nuts_at_large_epsilon(normal_rows):
    y, _, _ = normal_rows
    released = pmdp.release_statistics("normal", y, epsilon=1e3, sigma=1.0, bounds=(-5, 5), random_seed=8)
    # At ε = 10³ the Laplace noise has scale 10/10³: the statistic is within 0.1 of Σ y.
    assert abs(released.statistics[0] - y.sum()) < 0.1
    precision = 1 / 100 + y.size
    mean, sd = released.statistics[0] / precision, 1 / math.sqrt(precision)  # the conjugate posterior given S
    with pm.Model():
        m = pm.Normal("m", 0, 10)
        released.likelihood("y", mu=m, noise_aware=False)  # the naive model: the conjugate posterior given Ŝ
        idata = pm.sample(draws=3000, tune=1000, **SAMPLE)
    z_mean, z_sd = _z_scores(idata, "m", np.array(mean), np.array(sd))
    assert np.all(np.abs(z_mean) < Z_CRIT) and np.all(np.abs(z_sd) < Z_CRIT), (z_mean, z_sd)


def test_dpadvi_mean_field_optimum_on_a_gaussian_regression(linear_regression):
    """Mean-field ADVI on a Gaussian posterior: the optimum is the posterior mean and 1/√diag(precision).

    q = 1, a clip that never binds and noise 10⁻⁴·2C = 0.02 per coordinate: the optimiser runs
    at constant learning rate, so its iterates form a Markov chain fluctuating around the
    optimum. The Polyak–Ruppert average of (μ, ρ) over the second half of each of four fits is
    compared with the optimum; its MCSE comes from ArviZ with the fits as chains.
    """
    model, mean, _ = linear_regression
    design = np.column_stack([np.ones(500), model["x"].get_value()])
    sd = 1 / np.sqrt(np.diag(design.T @ design + np.eye(2) / 100))  # 1/√diag(posterior precision)
    iterations = 20_000
    trajectories = []
    for seed in range(4):
        trajectory = []

        def record(approx, _, i, trajectory=trajectory):
            if i >= iterations // 2:
                params = approx.shared_params
                trajectory.append(np.r_[params["mu"].get_value(), params["rho"].get_value()])

        fit = pmdp.DPADVI(
            noise_multiplier=1e-4,
            delta=1e-6,
            sampling_rate=1.0,
            grad_clip=100.0,  # |∂/∂coef log p| ≤ 5·√2 here: never clipped
            optimizer="adam",
            learning_rate=0.002,
            n_mc=4,
            random_seed=seed,
        )
        fit.fit(iterations, model=model, progressbar=False, callbacks=[record])
        trajectories.append(np.array(trajectory))
    draws = np.stack(trajectories)  # (fits, iterations, 4): μ₁, μ₂, ρ₁, ρ₂
    average = draws.mean(axis=(0, 1))
    mcse = np.array([_mcse(draws[:, :, j], "mean") for j in range(4)])
    rho_optimum = np.log(np.expm1(sd))  # σ = softplus(ρ)
    z = (average - np.r_[mean, rho_optimum]) / mcse
    assert np.all(np.abs(z) < Z_CRIT), z
