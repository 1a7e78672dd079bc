"""Mechanism tests: clipping bounds, noise calibration (standard-error tests), validation."""

import math

import numpy as np
import pytest
from scipy import stats

from pymc_dp.mechanisms import (
    SecureNoise,
    clip_l2,
    clip_values,
    clipped_sum_l2,
    gaussian_noise,
    laplace_noise,
    noisy_clipped_sum,
    sensitivity_of_clipped_sum,
    spawn_noise_rng,
)


def test_clip_values_bounds_and_nan():
    out = clip_values(np.array([-5.0, -0.5, 0.0, 0.7, 9.0, np.nan, -np.inf, np.inf]), 1.0)
    np.testing.assert_array_equal(out, [-1.0, -0.5, 0.0, 0.7, 1.0, -1.0, -1.0, 1.0])


def test_clip_l2_bounds_norms_and_keeps_directions():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(200, 3)) * rng.exponential(2.0, size=(200, 1))
    clipped = clip_l2(rows, 1.5)
    norms = np.linalg.norm(clipped, axis=1)
    assert np.all(norms <= 1.5 + 1e-12)
    small = np.linalg.norm(rows, axis=1) <= 1.5
    np.testing.assert_allclose(clipped[small], rows[small])
    cos = np.sum(clipped * rows, axis=1) / (norms * np.linalg.norm(rows, axis=1))
    np.testing.assert_allclose(cos, 1.0)
    assert np.all(clip_l2(np.array([[np.nan, 1.0]]), 1.0) == 0.0)


@pytest.mark.parametrize(("relation", "factor"), [("substitute", 2.0), ("add_remove", 1.0)])
def test_sensitivity_of_clipped_sum(relation, factor):
    assert sensitivity_of_clipped_sum(0.3, relation) == pytest.approx(factor * 0.3)


def test_noisy_clipped_sum_mean_and_std():
    # Gaussian mechanism: release = clipped sum + N(0, (τΔ)²). Test mean and variance with
    # standard errors from n draws (z and chi-square bounds at 1e-4 two-sided).
    values = np.array([3.0, -0.2, 0.4, -7.0])
    bound, tau, n = 0.5, 1.7, 4000
    rng = np.random.default_rng(3)
    draws = np.array([noisy_clipped_sum(values, bound, tau, rng)[0] for _ in range(n)])
    _, std = noisy_clipped_sum(values, bound, tau, rng)
    assert std == pytest.approx(tau * 2 * bound)
    expected_sum = 0.5 - 0.2 + 0.4 - 0.5
    z = (draws.mean() - expected_sum) / (std / math.sqrt(n))
    assert abs(z) < stats.norm.isf(5e-5)
    chi2 = (n - 1) * draws.var(ddof=1) / std**2
    assert stats.chi2.ppf(5e-5, n - 1) < chi2 < stats.chi2.isf(5e-5, n - 1)


def test_noisy_clipped_sum_zero_bound_releases_nothing_about_data():
    rng = np.random.default_rng(0)
    assert noisy_clipped_sum(np.array([1.0, 2.0]), 0.0, 1.0, rng) == (0.0, 0.0)


def test_laplace_noise_scale():
    rng = np.random.default_rng(1)
    n, scale = 20000, 0.8
    x = laplace_noise(rng, scale, size=n)
    # Var = 2 b²; standard error of the variance estimate from the fourth moment (kurtosis 6).
    se = math.sqrt((24 * scale**4 - 4 * scale**4) / n)
    assert abs(x.var() - 2 * scale**2) / se < stats.norm.isf(5e-5)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: clip_values(np.ones(2), -1.0), "bound"),
        (lambda: clip_values(np.ones(2), float("nan")), "bound"),
        (lambda: clip_l2(np.ones((2, 2)), -0.1), "bound"),
        (lambda: clip_l2(np.ones(2), 1.0), "rows"),
        (lambda: gaussian_noise(np.random.default_rng(), 0.0), "std"),
        (lambda: gaussian_noise(np.random.default_rng(), float("nan")), "std"),
        (lambda: laplace_noise(np.random.default_rng(), -2.0), "scale"),
        (lambda: noisy_clipped_sum(np.ones(2), 1.0, 0.0, np.random.default_rng()), "noise_multiplier"),
        (lambda: noisy_clipped_sum(np.ones(2), np.inf, 1.0, np.random.default_rng()), "bound"),
        (lambda: sensitivity_of_clipped_sum(1.0, "replace"), "neighbouring"),
    ],
)
def test_mechanism_errors_name_the_parameter(call, name):
    with pytest.raises(ValueError, match=f"`{name}` must"):
        call()


def test_noise_rng_is_reproducible_and_leaves_parent_untouched():
    parent = np.random.default_rng(42)
    state = parent.bit_generator.state
    a = spawn_noise_rng(parent).normal(size=5)
    assert parent.bit_generator.state == state
    b = spawn_noise_rng(np.random.default_rng(42)).normal(size=5)
    np.testing.assert_array_equal(a, b)
    # rebuilt from state, as PyMC does in worker processes
    rebuilt = np.random.Generator(np.random.PCG64())
    rebuilt.bit_generator.state = state
    np.testing.assert_array_equal(spawn_noise_rng(rebuilt).normal(size=5), a)
    assert not np.allclose(a, np.random.default_rng(42).normal(size=5))


def test_secure_noise_moments_and_freshness():
    noise, n = SecureNoise(), 40_000
    x = noise.normal(1.0, 2.0, size=n)
    assert abs((x.mean() - 1.0) / (2.0 / math.sqrt(n))) < stats.norm.isf(5e-5)
    chi2 = (n - 1) * x.var(ddof=1) / 4.0
    assert stats.chi2.ppf(5e-5, n - 1) < chi2 < stats.chi2.isf(5e-5, n - 1)
    assert stats.kstest((x - 1.0) / 2.0, "norm").pvalue > 1e-4
    lap = noise.laplace(0.0, 0.5, size=n)
    assert stats.kstest(lap, "laplace", args=(0.0, 0.5)).pvalue > 1e-4
    assert isinstance(noise.normal(), float) and noise.normal() != noise.normal()


@pytest.mark.parametrize("extreme", [b"\xff", b"\x00"])
def test_secure_noise_stays_finite_and_in_range_at_the_extreme_words(monkeypatch, extreme):
    # All-ones words would round (2⁵³ − ½)/2⁵³ up to 1.0: an infinite Laplace variate and an index N out of range.
    from pymc_dp.backends.jax_rows import BufferedSecureNoise

    monkeypatch.setattr("os.urandom", lambda size: extreme * size)
    for noise in (SecureNoise(), BufferedSecureNoise(block_bytes=64)):
        u = noise.uniform(size=4)
        assert ((u > 0.0) & (u < 1.0)).all()
        assert np.isfinite(noise.laplace(0.0, 1.0, size=4)).all() and np.isfinite(noise.normal(size=4)).all()
        chosen = noise.choice(10, 3)
        assert chosen.min() >= 0 and chosen.max() <= 9 and np.unique(chosen).size == 3


def test_two_pass_clipped_sum_equals_clip_then_sum():
    rows = np.random.default_rng(4).normal(size=(50, 3)) * 3
    rows[7, 1], rows[9, 0] = np.nan, np.inf
    np.testing.assert_allclose(clipped_sum_l2(rows, 1.5), clip_l2(rows, 1.5).sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(clipped_sum_l2(rows[:5] * 0.01, 1.5), rows[:5].sum(axis=0) * 0.01, rtol=1e-12)
