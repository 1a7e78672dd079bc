"""The centred samplers' ESS prediction (issue 36, deliver 3): its parts against closed forms and simulation.

Cheap: numpy only, no model and no sampler (about 1 s in all). The Monte Carlo checks use fixed seeds for
their simulations and tolerances of a few standard errors of the simulated quantity, stated per test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pymc_dp.centred_predictions import (
    RANDOM_WALK_EFFICIENCY,
    ar1_ess,
    centred_ess,
    leapfrog_energy_variance,
    metric_spectrum,
    random_phase_ess,
    worst_coordinate_ess,
)

COMMON = dict(draws=1000, n_params=3, posterior_sd=0.02, offset_sd=1.0, lipschitz=0.5)


@pytest.mark.parametrize("step", [0.3, 1.0, 1.5])
def test_leapfrog_energy_variance_matches_simulated_leapfrog_over_uniform_angles(step):
    """Leapfrog from the stationary start on a unit Gaussian, stopped after 1–300 steps (angles about uniform):
    the energy error's variance against the closed form, within 4 standard errors of the sample variance."""
    rng = np.random.default_rng(0)
    n = 40_000
    x, p = rng.normal(size=n), rng.normal(size=n)
    start = 0.5 * (x**2 + p**2)
    stop = rng.integers(1, 300, size=n)
    error = np.empty(n)
    for k in range(1, 300):
        p = p - 0.5 * step * x
        x = x + step * p
        p = p - 0.5 * step * x
        error[stop == k] = (0.5 * (x**2 + p**2) - start)[stop == k]
    centred = (error - error.mean()) ** 2
    assert centred.mean() == pytest.approx(leapfrog_energy_variance(step), abs=4 * centred.std() / math.sqrt(n))
    assert leapfrog_energy_variance(0.01) == pytest.approx(0.01**4 / 32, rel=1e-3)  # the small-step limit
    assert leapfrog_energy_variance(2.0) == np.inf


def test_ar1_ess_is_the_exact_law_of_hmc_with_random_rejections_on_a_gaussian():
    """x → x cos T + p sin T with probability a: the lag-1 correlation is 1 − a(1 − cos T) (4 SEs of 1/√n)."""
    rng = np.random.default_rng(1)
    n, a, angle = 60_000, 0.65, math.pi / 3
    draws = np.empty(n)
    x = 0.0
    moves = rng.random(n) < a
    momenta = rng.normal(size=n)
    for i in range(n):
        if moves[i]:
            x = x * math.cos(angle) + momenta[i] * math.sin(angle)
        draws[i] = x
    lag1 = np.corrcoef(draws[:-1], draws[1:])[0, 1]
    rho = 1 - a * (1 - math.cos(angle))
    assert lag1 == pytest.approx(rho, abs=4 / math.sqrt(n))
    assert ar1_ess(a, angle) == pytest.approx((1 - rho) / (1 + rho))
    assert ar1_ess(a, math.pi / 2) == pytest.approx(a / (2 - a))  # the quarter period: x′ = p


@pytest.mark.parametrize("directions", [1, 3, 7])
def test_random_phase_ess_is_the_median_of_the_worst_of_uniform_angles(directions):
    """The share of simulated runs (angles uniform, independent per direction) whose worst direction is below
    random_phase_ess is ½, within 4 binomial SEs."""
    rng = np.random.default_rng(2)
    runs = 40_000
    worst = ar1_ess(0.7, rng.uniform(0, 2 * math.pi, size=(runs, directions))).min(axis=1)
    share = np.mean(worst <= random_phase_ess(0.7, directions))
    assert share == pytest.approx(0.5, abs=4 * 0.5 / math.sqrt(runs))
    assert random_phase_ess(0.7, 1) == pytest.approx(0.7 / (2 - 0.7))  # one direction: the median angle's


def test_metric_spectrum_and_the_worst_coordinate():
    values, weights = metric_spectrum(None, 3, diagonal_metric=False)
    assert np.array_equal(values, np.ones(3)) and np.array_equal(weights, np.eye(3))
    # variances 1 and 4, uncorrelated: the random walk sees them, DPHMC's diagonal mass does not
    walk, walk_weights = metric_spectrum(np.diag([1.0, 4.0]), 2, diagonal_metric=False)
    assert walk == pytest.approx([0.4, 1.6]) and walk_weights == pytest.approx(np.eye(2))
    hmc, _ = metric_spectrum(np.diag([1.0, 4.0]), 2, diagonal_metric=True)
    assert hmc == pytest.approx([1.0, 1.0])
    # correlation r: eigenvalues 1 ± r, each coordinate half along each direction
    r = 0.6
    corr, corr_weights = metric_spectrum(np.array([[1.0, r], [r, 1.0]]), 2, diagonal_metric=True)
    assert corr == pytest.approx([1 - r, 1 + r]) and corr_weights == pytest.approx(
        np.array([[(1 - r) / 2, (1 + r) / 2]] * 2)
    )
    # a coordinate's autocorrelation time is the weighted sum of its directions'
    assert worst_coordinate_ess(np.array([0.5, 0.1]), corr_weights) == pytest.approx(
        1 / ((1 - r) / 2 / 0.5 + (1 + r) / 2 / 0.1)
    )


def test_the_penalty_walk_on_unequal_scales():
    """Isotropic: 0.331 draws/(P(1 + c²)); variances (1, 1, 9): the widest direction's autocorrelation time is
    9·mean(1/λ) = 9·(2 + 1/9)/3 times the isotropic one's (Roberts & Rosenthal 2001)."""
    isotropic = centred_ess(**COMMON, llr_noise_multiplier=0.0)["ess_per_chain"]
    assert isotropic == pytest.approx(RANDOM_WALK_EFFICIENCY * 1000 / 3)
    shaped = centred_ess(**COMMON, llr_noise_multiplier=0.0, posterior_shape=np.diag([1.0, 1.0, 9.0]))
    assert shaped["ess_per_chain"] == pytest.approx(isotropic / (9 * (2 + 1 / 9) / 3))
    assert centred_ess(**COMMON, llr_noise_multiplier=0.0, posterior_shape=np.eye(3) * 7)[
        "ess_per_chain"
    ] == pytest.approx(isotropic)  # the shape's scale does not matter


def test_dphmc_regimes():
    """Noisy: the step shortens to the target acceptance below the quarter period (the AR(1) law); quiet: leapfrog's
    error sets the step far beyond it (the worst of P uniform angles); correlation lengthens the worst coordinate's
    autocorrelation in the noisy regime."""
    hmc = dict(grad_noise_multiplier=1.0, n_leapfrog=10)
    quiet = centred_ess(**COMMON, llr_noise_multiplier=1.0, **hmc)
    assert quiet["acceptance"] == pytest.approx(0.65, abs=1e-6) and min(quiet["angles"]) > math.pi / 2
    assert quiet["ess_per_chain"] == pytest.approx(1000 * random_phase_ess(0.65, 3))
    noisy_setting = {**COMMON, "posterior_sd": 0.2, "offset_sd": 3.0}
    noisy = centred_ess(**noisy_setting, llr_noise_multiplier=30.0, grad_noise_multiplier=30.0, n_leapfrog=10)
    assert noisy["trajectory_fraction"] < 1 and max(noisy["angles"]) < math.pi / 2
    assert noisy["ess_per_chain"] == pytest.approx(1000 * ar1_ess(0.65, noisy["angles"][0]), rel=1e-6)
    shape = np.array([[1.0, 0.8, 0.0], [0.8, 1.0, 0.0], [0.0, 0.0, 1.0]])
    correlated = centred_ess(
        **noisy_setting, llr_noise_multiplier=30.0, grad_noise_multiplier=30.0, n_leapfrog=10, posterior_shape=shape
    )
    assert 0 < correlated["ess_per_chain"] < noisy["ess_per_chain"]


def test_the_distance_from_the_anchor_is_euclidean():
    """R² = Σⱼ sdⱼ² (1 + e²): with sds s·(1, 1, 3) (geometric mean s·3^(1/3)) the penalty chain's c is the
    isotropic one's at the same geometric-mean s times mean(sdⱼ²)/s_geo² = (11/3)/9^(1/3)."""
    setting = {**COMMON, "llr_noise_multiplier": 50.0}
    isotropic = centred_ess(**setting)["c"]
    shaped = centred_ess(**setting, posterior_shape=np.diag([1.0, 1.0, 9.0]))["c"]
    assert shaped == pytest.approx(isotropic * (11 / 3) / 9 ** (1 / 3))


def test_the_released_offset_vector_sets_the_distance():
    """With ``offset_distance`` d = ‖(−Ĥ)⁻¹Ĝ‖ the law's R² is Σⱼ sdⱼ² + d² (E‖θ − θ̂‖² for θ ~ N(θ̂ + offset, Σ)),
    not Σⱼ sdⱼ²(1 + e²): the penalty chain's c (∝ R²) moves by their ratio exactly, and d² = e²·Σⱼ sdⱼ² gives the
    e-based law back. An offset along the widest of sds s·(1, 1, 3) that is e = 1 in RMS sds has d² = 3·(3s)²."""
    setting = {**COMMON, "llr_noise_multiplier": 50.0, "posterior_shape": np.diag([1.0, 1.0, 9.0])}
    s = COMMON["posterior_sd"] / 9 ** (1 / 6)  # the shape's sds are s·(1, 1, 3): geometric mean COMMON's
    trace = 11 * s**2
    by_e = centred_ess(**setting)["c"]  # offset_sd e = 1: R² = 2·trace
    assert centred_ess(**setting, offset_distance=math.sqrt(trace))["c"] == pytest.approx(by_e)
    along_widest = math.sqrt(3 * (3 * s) ** 2)  # (0, 0, √3·3s): RMS over coordinates of offset/sd = 1
    assert centred_ess(**setting, offset_distance=along_widest)["c"] == pytest.approx(
        by_e * (trace + 27 * s**2) / (2 * trace)
    )
