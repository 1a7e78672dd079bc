"""The samplers' kernels (pymc_dp.step_methods.kernels) as plain functions: no PyMC, no data.

One algorithm, written once: the same kernel run with NumPy (the host loop) and jitted in JAX
(the JAX backend's ``lax.scan``) gives the same transition, given the same releases and draws.
The releases here are a toy: a Gaussian log-likelihood N(θ | x̄, 1/n) evaluated exactly, plus
noise handed in ahead (as the JAX backend's device releases do).
"""

from __future__ import annotations

import numpy as np
import pytest

from pymc_dp.backends.jax_rows import _jax_ops
from pymc_dp.step_methods import kernels

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

N_ROWS, X_BAR = 50.0, 0.3


class ToyReleases:
    """Releases of the log-likelihood n·N(θ | x̄, 1) with noise given ahead, in either namespace."""

    def __init__(self, xp, noise, select):
        self.xp, self.noise, self.select = xp, noise, select
        self.gradient_calls = 0
        self.kept = None

    def _loglik(self, theta):
        return -0.5 * N_ROWS * self.xp.sum((theta - X_BAR) ** 2)

    def prior_logp(self, theta):
        return -0.5 * self.xp.sum(theta**2) / 4.0

    def prior_grad(self, theta):
        return -theta / 4.0

    def gradient(self, theta, index):
        self.gradient_calls += 1
        return -N_ROWS * (theta - X_BAR) + self.noise["gradient"][index]

    def ratio(self, theta, proposal, valid):
        distance = self.xp.sqrt(self.xp.sum((proposal - theta) ** 2))
        released = valid & self.xp.isfinite(distance)
        std = 0.5 * self.select(released, distance, 0.0)
        value = self._loglik(self.select(released, proposal, theta)) - self._loglik(theta)
        return value + std * self.noise["ratio"], std, released

    def barker(self, theta, proposal):
        return self._loglik(proposal) - self._loglik(theta) + self.noise["ratio"]

    def barker_correction(self):
        return self.noise["correction"]

    def keep(self, accepted):
        self.kept = accepted


def _run_both(kernel, state, draws, settings, noise):
    """(NumPy result, jitted JAX result) of one kernel call on the toy releases."""
    host = kernel(kernels.NUMPY_OPS, ToyReleases(np, noise, kernels.NUMPY_OPS.select), state, draws, settings)
    ops = _jax_ops(jax)  # the JAX backend's own ops

    def call(state, draws, noise):
        return kernel(ops, ToyReleases(jnp, noise, jnp.where), state, draws, settings)

    device = jax.jit(call)(state, draws, noise)
    return host, jax.tree_util.tree_map(np.asarray, device)


def _assert_same(host, device):
    for a, b in zip(jax.tree_util.tree_leaves(host), jax.tree_util.tree_leaves(device), strict=True):
        np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_hmc_kernel_is_the_same_in_numpy_and_jitted_jax(seed):
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=3)
    settings = kernels.HMCSettings(np.array([1.0, 0.5, 2.0]), 1.0, 4)
    draws = kernels.HMCDraws(rng.normal(size=3), 0.05, np.log(rng.uniform()))
    noise = {"gradient": rng.normal(size=(5, 3)), "ratio": rng.normal()}
    host, device = _run_both(kernels.hmc_kernel, theta, draws, settings, noise)
    _assert_same(host, device)


@pytest.mark.parametrize("seed", range(6))
def test_adaptive_hmc_kernel_steps_the_dual_averaging_on_the_acceptance(seed):
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=2)
    averaging = (np.log(0.05), np.log(0.05), 0.0, 1.0)
    settings = kernels.HMCSettings(np.ones(2), 1.0, 3, (np.log(0.5), 0.8, 0.05, 0.75, 10.0))
    draws = kernels.HMCDraws(rng.normal(size=2), 1.0, np.log(rng.uniform()))
    noise = {"gradient": rng.normal(size=(4, 2)), "ratio": rng.normal()}
    host, device = _run_both(kernels.adaptive_hmc_kernel, (theta, averaging), draws, settings, noise)
    _assert_same(host, device)
    (_, after), info = host
    expected = kernels.dual_averaging_update(averaging, info.accept, *settings.adaptation)
    np.testing.assert_allclose(after, expected)


@pytest.mark.parametrize("seed", range(6))
def test_penalty_and_barker_kernels_are_the_same_in_numpy_and_jitted_jax(seed):
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=2)
    noise = {"ratio": rng.normal(), "correction": rng.logistic()}
    penalty = kernels.PenaltyDraws(0.3 * rng.normal(size=2), np.log(rng.uniform()))
    _assert_same(*_run_both(kernels.penalty_kernel, theta, penalty, 1.0, noise))
    barker = kernels.BarkerDraws(0.3 * rng.normal(size=2))
    _assert_same(*_run_both(kernels.barker_kernel, theta, barker, None, noise))


def test_penalty_kernel_is_algorithm_one_of_yildirim_and_ermis():
    # Accept iff log U < T λ̂ − (Tσ)²/2 + log prior ratio, λ̂ the released ratio and σ its noise sd.
    rng = np.random.default_rng(0)
    theta, increment, temperature = np.array([0.1, -0.2]), np.array([0.05, 0.02]), 0.7
    noise = {"ratio": 0.4}
    releases = ToyReleases(np, noise, kernels.NUMPY_OPS.select)
    proposal = theta + increment
    noisy, std, _ = ToyReleases(np, noise, kernels.NUMPY_OPS.select).ratio(theta, proposal, True)
    log_alpha = (
        temperature * noisy
        - 0.5 * (temperature * std) ** 2
        + (releases.prior_logp(proposal) - releases.prior_logp(theta))
    )
    for log_uniform in (log_alpha - 1e-9, log_alpha + 1e-9, np.log(rng.uniform())):
        point, info = kernels.penalty_kernel(
            kernels.NUMPY_OPS, releases, theta, kernels.PenaltyDraws(increment, log_uniform), temperature
        )
        assert bool(info.accepted) == (log_uniform < log_alpha) == bool(releases.kept)
        np.testing.assert_array_equal(point, proposal if info.accepted else theta)
        assert info.accept == pytest.approx(min(1.0, np.exp(log_alpha)))
        assert info.noisy_llr == noisy


def test_a_diverging_trajectory_releases_no_ratio_and_the_host_stops_releasing_gradients():
    # A momentum that takes the position out of the finite numbers at the first step: NumPy asks for no gradient past it
    # (1 of L + 1), JAX computes them and discards them; both reject without a ratio release.
    theta = np.zeros(2)
    settings = kernels.HMCSettings(np.ones(2), 1.0, 5)
    draws = kernels.HMCDraws(np.array([np.inf, 1.0]), 10.0, -1.0)
    noise = {"gradient": np.zeros((6, 2)), "ratio": 0.0}
    releases = ToyReleases(np, noise, kernels.NUMPY_OPS.select)
    point, info = kernels.hmc_kernel(kernels.NUMPY_OPS, releases, theta, draws, settings)
    assert releases.gradient_calls == 1
    assert not info.accepted and info.accept == 0.0 and np.isnan(info.noisy_llr)
    np.testing.assert_array_equal(point, theta)
    _, device = _run_both(kernels.hmc_kernel, theta, draws, settings, noise)
    assert not device[1].accepted and np.isnan(device[1].noisy_llr)
    np.testing.assert_array_equal(device[0], theta)


def test_metropolis_decision_rejects_nan_with_probability_zero():
    accepted, accept = kernels.metropolis_decision(np, np.nan, -5.0)
    assert not accepted and accept == 0.0
    accepted, accept = kernels.metropolis_decision(np, 0.5, -0.1)
    assert accepted and accept == 1.0
