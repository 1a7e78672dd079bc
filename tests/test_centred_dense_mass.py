"""Centred DPHMC's dense mass (issue 36): M⁻¹ = (−TĤ − ∇²log p(θ̂))⁻¹ of the released anchor, momenta p ~ N(0, M).

Cost: about 6 CPU s in all (one small model compiled; one 2 × (5 + 5) pmdp.sample pair; the rest arithmetic).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.mechanisms.centred import CentringAnchor
from pymc_dp.step_methods import kernels
from pymc_dp.step_methods.hmc import DENSE_MASS_STEP_SIZE_JITTER, DPHMC

#: Two-sided z-test level per entry: six covariance entries at 1e-5 each (Bonferroni: 6e-5 in all).
Z_CRIT = 4.42
_HESSIAN = -np.array([[400.0, 150.0, 0.0], [150.0, 100.0, 20.0], [0.0, 20.0, 25.0]])  # eigenvalues 0.04–5.6× mean
_PRIOR_PRECISION = np.eye(3) / 25.0  # b ~ N(0, 5²)


def _model(n=200, seed=0):
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n), rng.uniform(-1, 1, size=(n, 2))])
    y = rng.binomial(1, 0.5, size=n)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=3)
        pm.Bernoulli("y", logit_p=pm.math.dot(x, b), observed=y)
    return model


def _anchor(hessian=_HESSIAN):
    return CentringAnchor(
        np.zeros(3),
        np.zeros(3),
        2.0,
        1.0,
        "substitute",
        ("b",),
        hessian=None if hessian is None else np.asarray(hessian, float),
        hessian_clip=None if hessian is None else 1.0,
        hessian_noise_multiplier=None if hessian is None else 1e-3,
    )


def _step(model, **kwargs):
    with model:
        step = pmdp.DPHMC(centre_lipschitz=1.0, grad_noise_multiplier=2.0, llr_noise_multiplier=2.0, **kwargs)
    step.reset_tuning()
    return step


def _covariance_z(draws, expected):
    """z of each entry of the draws' second moments (mean zero known) against ``expected``, from its SE over draws."""
    n = draws.shape[0]
    moments = draws.T @ draws / n
    se = np.sqrt((np.outer(np.diag(expected), np.diag(expected)) + expected**2) / n)
    return (moments - expected) / se


def test_dense_momenta_have_covariance_m_and_the_mass_is_the_anchors():
    """4,000 momenta of a second-order centred step: Cov = M = −Ĥ + prior precision entry by entry (z-tests)."""
    step = _step(_model(), anchor=_anchor())
    covariance = np.linalg.inv(-_HESSIAN + _PRIOR_PRECISION)
    rms2 = np.trace(covariance) / 3  # M⁻¹ = C/r²: unit mean variance, like the identity it replaces
    mass = np.linalg.inv(covariance / rms2)
    inv_mass, factor, rms = step.dense_mass()
    assert rms**2 == pytest.approx(rms2)
    np.testing.assert_allclose(inv_mass, covariance / rms2, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(factor @ factor.T, mass, rtol=1e-8, atol=1e-8)
    assert step.inv_mass.shape == (3, 3) and step.effective_step_size_jitter == DENSE_MASS_STEP_SIZE_JITTER
    assert step.step_size == pytest.approx(rms * 0.5 * np.pi / step.n_leapfrog)  # a whitened quarter period
    momenta = step._kernel_draws(np.zeros(3), 4000, False, np.random.default_rng(5)).momentum
    assert np.max(np.abs(_covariance_z(momenta, mass))) < Z_CRIT
    diagonal = np.diag(np.diag(mass))  # power: the same test tells a diagonal mass apart
    assert np.max(np.abs(_covariance_z(momenta, diagonal))) > Z_CRIT
    # no mass window adapts it while tuning
    assert step._tuned_settings_fixed_for() == np.inf


def test_the_mass_keeps_a_curvature_below_the_noise_edge_and_raises_only_a_negative_one():
    """H36j: the target's own curvature K = −Ĥ + prior precision whitens it, whatever the noise: an eigenvalue
    of K below the edge σ_H√(2P) (11.8 < 25 here) is kept, not raised to 25 (the mass was then 2.1× narrower than
    the target along its widest direction); an eigenvalue ≤ 0 (the quadratic part improper) is raised to the edge."""
    model = _model()
    edge = 25.0
    noisy = CentringAnchor(
        np.zeros(3), np.zeros(3), 2.0, 1.0, "substitute", ("b",), hessian=_HESSIAN, hessian_clip=1.0,
        hessian_noise_multiplier=edge / (2.0 * np.sqrt(6.0)),  # σ_H = τ_H·2b_H, so σ_H√(2P) = 25
    )  # fmt: skip
    step = _step(model, anchor=noisy)
    precision = -_HESSIAN + _PRIOR_PRECISION
    assert np.linalg.eigvalsh(precision)[0] < edge < np.linalg.eigvalsh(precision)[1]
    covariance = np.linalg.inv(precision)
    inv_mass, _, rms = step.dense_mass()
    np.testing.assert_allclose(inv_mass * rms**2, covariance, rtol=1e-8, atol=1e-12)
    improper = _HESSIAN.copy()
    improper[2, 2] = 5.0  # K's smallest eigenvalue −11.9
    step = _step(model, anchor=dataclasses.replace(noisy, hessian=improper))
    values, vectors = np.linalg.eigh(-improper + _PRIOR_PRECISION)
    expected = (vectors / np.maximum(values, edge)) @ vectors.T
    inv_mass, _, rms = step.dense_mass()
    np.testing.assert_allclose(inv_mass * rms**2, expected, rtol=1e-8, atol=1e-12)


def test_non_centred_and_first_order_steps_are_unchanged():
    """Non-centred and first-order centred: diagonal unit M, momenta z/√M⁻¹ draw for draw, no jitter, windows on."""
    model = _model()
    with model:
        plain = pmdp.DPHMC(grad_clip=1.0, llr_clip=1.0, grad_noise_multiplier=2.0, llr_noise_multiplier=2.0)
    plain.reset_tuning()
    for step in (plain, _step(model, anchor=_anchor(None))):
        assert step.dense_mass() is None and step.effective_step_size_jitter == 0.0
        np.testing.assert_array_equal(step.inv_mass, np.ones(3))
        assert step._tuned_settings_fixed_for() == step.adapt_mass_window
        draws = step._kernel_draws(np.zeros(3), 3, False, np.random.default_rng(7))
        rng = np.random.default_rng(7)
        expected = []
        for _ in range(3):
            expected.append(rng.normal(size=3) / np.sqrt(np.ones(3)))
            rng.uniform()
        np.testing.assert_array_equal(draws.momentum, np.array(expected))
    explicit = _step(model, anchor=_anchor(), step_size_jitter=0.0, step_size=0.01)  # a caller's settings are kept
    assert explicit.effective_step_size_jitter == 0.0 and explicit.step_size == 0.01


def test_dense_leapfrog_and_kinetic_energy_equal_the_diagonal_ones_on_a_diagonal_matrix():
    """The kernel's dense branch (M⁻¹ P × P) against the diagonal one on diag(M⁻¹): the same trajectory and energy."""
    inv_mass = np.array([0.5, 2.0, 1.5])
    theta, momentum = np.array([0.1, -0.2, 0.3]), np.array([1.0, 0.5, -0.7])

    def gradient(point, _):
        return -point / inv_mass

    ends = [
        kernels.leapfrog(kernels.NUMPY_OPS, theta, momentum, 0.1, 7, mass, gradient)
        for mass in (inv_mass, np.diag(inv_mass))
    ]
    np.testing.assert_allclose(ends[0][0], ends[1][0], rtol=1e-12)
    np.testing.assert_allclose(ends[0][1], ends[1][1], rtol=1e-12)
    assert kernels.kinetic_energy(momentum, np.diag(inv_mass)) == pytest.approx(
        kernels.kinetic_energy(momentum, inv_mass), rel=1e-12
    )


def test_centred_epsilon_is_the_same_with_and_without_the_dense_mass(monkeypatch):
    """The centred releases' bounds read θ, θ′ and θ̂ only: pmdp.sample's ε and events are identical either way."""
    model = _model()
    results = []
    for dense in (True, False):
        if not dense:
            monkeypatch.setattr(DPHMC, "dense_mass", lambda self: None)
        step = _step(model, anchor=_anchor(), n_leapfrog=2)
        with model:
            idata = pmdp.sample(
                step=step,
                draws=5,
                tune=5,
                chains=2,
                delta=1e-6,
                progressbar=False,
                random_seed=3,
                on_poor_mixing="ignore",
                compute_convergence_checks=False,
            )
        record = idata.posterior.attrs["dp_accountant"]
        assert ('"mass": "dense' in record) is dense  # the record says which mass was used
        results.append(
            (idata.posterior.attrs["dp_epsilon"], [(e.noise_multiplier, e.count) for e in step.privacy_events(20)])
        )
    assert results[0] == results[1]


def test_prediction_for_the_dense_mass_is_the_isotropic_law_at_the_rms_sd():
    """Whitened, every direction turns alike: the dense law is the isotropic one at the sds' RMS; jitter averages."""
    from pymc_dp.centred_predictions import centred_ess

    shape = np.linalg.inv(-_HESSIAN)
    common = dict(
        draws=1000, n_params=3, offset_sd=1.0, lipschitz=1.0, llr_noise_multiplier=5e3, grad_noise_multiplier=5e3
    )
    common["n_leapfrog"] = 10
    dense = centred_ess(posterior_sd=0.05, posterior_shape=shape, dense_mass=True, **common)
    variances = np.diag(shape)
    rms = 0.05 * np.sqrt(np.mean(variances) / np.exp(np.mean(np.log(variances))))
    isotropic = centred_ess(posterior_sd=rms, **common)
    assert dense["ess_per_chain"] == pytest.approx(isotropic["ess_per_chain"], rel=1e-9)
    assert dense["step_size"] == pytest.approx(isotropic["step_size"], rel=1e-9)
    assert dense["angles"][0] < 2 * np.pi  # within the first period: the AR(1) at the angle, no random phase
    # a vanishing jitter gives the fixed step's law back (the average over the jitter grid is of that same AR(1))
    tiny = centred_ess(posterior_sd=0.05, posterior_shape=shape, dense_mass=True, step_size_jitter=1e-7, **common)
    assert tiny["mass"] == "dense" and tiny["ess_per_chain"] == pytest.approx(dense["ess_per_chain"], rel=1e-4)
    assert tiny["acceptance"] == pytest.approx(dense["acceptance"], rel=1e-4)
