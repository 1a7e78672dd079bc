"""Centred DPPenaltyMH's dense walk (issue 36): θ′ = θ + s·L z, LLᵀ = (−Ĥ)⁻¹ of the released anchor.

Cost: about 5 CPU s in all (one small model compiled; one 2 × (5 + 5) pmdp.sample pair).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.mechanisms.centred import CentringAnchor
from pymc_dp.step_methods.penalty import dense_proposal_factor, target_metric_factor

#: Two-sided z-test level per entry: six covariance entries at 1e-5 each (Bonferroni: 6e-5 in all).
Z_CRIT = 4.42
_HESSIAN = -np.array([[400.0, 150.0, 0.0], [150.0, 100.0, 20.0], [0.0, 20.0, 25.0]])  # eigenvalues 0.04–5.6× mean


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
        step = pmdp.DPPenaltyMH(centre_lipschitz=1.0, noise_multiplier=2.0, **kwargs)
    step.reset_tuning()
    return step


def _covariance_z(increments, expected):
    """z of each entry of the draws' second moments (mean zero known) against ``expected``, from its SE over draws."""
    n = increments.shape[0]
    moments = increments.T @ increments / n
    se = np.sqrt((np.outer(np.diag(expected), np.diag(expected)) + expected**2) / n)
    return (moments - expected) / se


def test_dense_increments_have_covariance_s2_c():
    """4,000 increments of a second-order centred step: Cov = s²C entry by entry (z-tests), and not s²·mean var·I."""
    model = _model()
    step = _step(model, anchor=_anchor())
    factor = step.dense_proposal_factor
    covariance = np.linalg.inv(-_HESSIAN)
    np.testing.assert_allclose(factor @ factor.T, covariance, rtol=1e-10)
    scale = float(step.proposal_scale[0])  # 2.38/√P × the RMS sd: the walk's s on the whitened scale
    assert scale == pytest.approx(2.38 / np.sqrt(3) * np.sqrt(np.trace(covariance) / 3))
    increments = step._kernel_draws(np.zeros(3), 4000, False, np.random.default_rng(5)).increment
    unit = covariance / (np.trace(covariance) / 3)
    z = _covariance_z(increments, scale**2 * unit)
    assert np.max(np.abs(z)) < Z_CRIT
    isotropic = _covariance_z(increments, scale**2 * np.eye(3))  # power: the same test tells the isotropic walk apart
    assert np.max(np.abs(isotropic)) > Z_CRIT


def test_walk_is_unchanged_without_a_second_order_anchor_or_with_a_given_scale():
    """Non-centred, first-order and a caller's proposal_scale: the plain s·z draw for draw (the same generator)."""
    model = _model()
    theta = np.zeros(3)
    for kwargs in ({"anchor": _anchor(None)}, {"anchor": _anchor(), "proposal_scale": 0.05}):
        step = _step(model, **kwargs)
        assert step.dense_proposal_factor is None
        draws = step._kernel_draws(theta, 3, False, np.random.default_rng(7))
        rng = np.random.default_rng(7)
        expected = []
        for _ in range(3):
            expected.append(rng.normal(size=3) * step.proposal_scale)
            rng.uniform()
        np.testing.assert_array_equal(draws.increment, np.array(expected))
    with model:
        plain = pmdp.DPPenaltyMH(llr_clip=1.0, noise_multiplier=2.0)
    assert plain.dense_proposal_factor is None


def test_projection_raises_noisy_directions_to_the_noise_edge_and_gives_up_on_pure_noise():
    """Eigenvalues of −Ĥ below σ_H√(2P) are raised to it; with none above it the walk stays isotropic (None)."""
    hessian = -np.diag([100.0, 1.0, -5.0])
    factor = dense_proposal_factor(hessian, hessian_std=2.0)  # edge 2√6 ≈ 4.9
    np.testing.assert_allclose(np.sort(np.diag(factor @ factor.T)), np.sort([0.01, 1 / (2 * 6**0.5), 1 / (2 * 6**0.5)]))
    assert dense_proposal_factor(-np.eye(3), hessian_std=1.0) is None


def test_the_walk_keeps_a_curvature_below_the_noise_edge_and_raises_only_a_negative_one():
    """H36j: the step whitens its target, whose curvature at θ̂ is −Ĥ however noisy: 1.0 < edge 2√6 is kept (the
    old projection raised it to 4.9: a walk 2.2× too short along the target's widest direction); −5 is raised."""
    hessian = -np.diag([100.0, 1.0, -5.0])
    edge = 2.0 * np.sqrt(6.0)
    np.testing.assert_allclose(np.sort(np.diag(_outer(target_metric_factor(hessian, 2.0)))), [0.01, 1 / edge, 1.0])
    assert target_metric_factor(-np.eye(3), hessian_std=1.0) is None  # nothing above the edge: no shape
    anchor = CentringAnchor(
        np.zeros(3), np.zeros(3), 2.0, 1.0, "substitute", ("b",), hessian=hessian, hessian_clip=1.0,
        hessian_noise_multiplier=1.0,  # σ_H = τ_H·2b_H = 2
    )  # fmt: skip
    factor = _step(_model(), anchor=anchor).dense_proposal_factor
    np.testing.assert_allclose(_outer(factor), np.diag([0.01, 1.0, 1 / edge]), rtol=1e-10, atol=1e-14)


def _outer(factor):
    return factor @ factor.T


def test_centred_epsilon_is_the_same_with_and_without_the_dense_walk():
    """The ratio's bound reads ‖θ′ − θ‖ only: pmdp.sample's ε and the events are identical either way."""
    model = _model()
    results = []
    for kwargs in ({}, {"proposal_scale": 0.05}):
        step = _step(model, anchor=_anchor(), **kwargs)
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
        results.append(
            (idata.posterior.attrs["dp_epsilon"], [(e.noise_multiplier, e.count) for e in step.privacy_events(20)])
        )
    assert results[0] == results[1]


def test_prediction_for_the_dense_walk_is_the_isotropic_law_at_the_rms_sd():
    """Whitened, every direction mixes alike: ESS = 0.331 draws / (P(1 + c²)), c read at the sds' RMS."""
    from pymc_dp.centred_predictions import RANDOM_WALK_EFFICIENCY, centred_ess

    shape = np.linalg.inv(-_HESSIAN)
    common = dict(draws=1000, n_params=3, posterior_sd=0.05, offset_sd=1.0, lipschitz=1.0, llr_noise_multiplier=50.0)
    dense = centred_ess(posterior_shape=shape, dense_proposal=True, **common)
    variances = np.diag(shape)
    rms = 0.05 * np.sqrt(np.mean(variances) / np.exp(np.mean(np.log(variances))))
    c = 2 * 50.0 * 0.5 * 1.0 * 3 * rms**2 * 2.0 * rms
    assert dense["c"] == pytest.approx(c)
    assert dense["ess_per_chain"] == pytest.approx(RANDOM_WALK_EFFICIENCY * 1000 / (3 * (1 + c**2)))
    isotropic = centred_ess(posterior_shape=shape, **common)  # the walk that sees the spread eigenvalues
    assert isotropic["ess_per_chain"] < dense["ess_per_chain"]
