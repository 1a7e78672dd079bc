"""Centred releases (issue 36), first and second order: bound, noise → 0 limit, invariance, accounting, audit."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from unittest import mock

import numpy as np
import pymc as pm
import pytest
from _invariance import Z_CRIT, invariance_z_scores, run_chains_from

import pymc_dp as pmdp
from pymc_dp.accounting import gaussian_epsilon
from pymc_dp.accounting.events import GaussianReleases
from pymc_dp.mechanisms import centred as centred_module
from pymc_dp.mechanisms import model_access
from pymc_dp.mechanisms.centred import (
    CentredClippedGradient,
    CentredLogLikelihoodRatio,
    CentringAnchor,
    anchor_noise_covariance,
    anchor_release,
    gradient_residuals,
    ratio_residuals,
    second_order_gradient_bound,
    second_order_ratio_bound,
    widen_for_anchor_noise,
)
from pymc_dp.mechanisms.gradient import NoisyClippedGradient
from pymc_dp.mechanisms.hessian import NoisyClippedHessian, clipped_hessian, symmetric_from_packed, symmetric_to_packed
from pymc_dp.step_methods.centred import centred_noise_multipliers, second_order_noise_multipliers
from pymc_dp.testing.audit import AuditScenario, _gaussian_claim, audit


class _ZeroNoise:
    """A noise source that draws zeros: the release is then its clipped sum (for exact comparisons)."""

    def normal(self, loc=0.0, scale=1.0, size=None):
        return np.zeros(size) if size is not None else 0.0


def _logistic(n=400, p=3, seed=0, bound=None):
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n), rng.normal(size=(n, p - 1))])
    if bound is not None:  # scale rows to ‖x‖ ≤ bound
        norms = np.linalg.norm(x, axis=1)
        x = x * np.minimum(1.0, bound / norms)[:, None]
    y = rng.binomial(1, 1 / (1 + np.exp(-x @ np.array([0.3, -0.5, 0.8][:p]))))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 5, shape=p)
        pm.Bernoulli("y", logit_p=pm.math.dot(x, b), observed=y)
    return model, x, y


def _rows(model):
    value_vars = model.value_vars
    _, mechanisms = model_access(model, value_vars, [], model.initial_point(), None)
    return mechanisms


def _exact_loglik(x, y, theta):
    eta = x @ theta
    return y * eta - np.logaddexp(0.0, eta)


def _exact_grad(x, y, theta):
    return (y - 1 / (1 + np.exp(-(x @ theta))))[:, None] * x


def _anchor(point, gradient, grad_clip=100.0, tau=1.0, neighbouring="substitute", names=("b",)):
    return CentringAnchor(np.asarray(point, float), np.asarray(gradient, float), grad_clip, tau, neighbouring, names)


# -- the bound ----------------------------------------------------------------------------------
def test_centred_bound_bounds_every_row_for_a_known_lipschitz_constant():
    """Logistic rows with ‖x‖ ≤ B have κ = B²/4: no residual exceeds c, and none of the gradient's exceeds κ‖θ − θ̂‖."""
    bound = 2.0
    _, x, y = _logistic(n=300, bound=bound)
    kappa = bound**2 / 4
    rng = np.random.default_rng(3)
    anchor_point = rng.normal(0, 0.3, 3)
    g_anchor = _exact_grad(x, y, anchor_point)
    worst_ratio = worst_grad = 0.0
    for _ in range(200):
        theta, proposal = anchor_point + rng.normal(0, 1.0, 3), anchor_point + rng.normal(0, 1.0, 3)
        step = proposal - theta
        residual = _exact_loglik(x, y, proposal) - _exact_loglik(x, y, theta) - g_anchor @ step
        reach = max(np.linalg.norm(theta - anchor_point), np.linalg.norm(proposal - anchor_point))
        c = kappa * np.linalg.norm(step) * reach
        worst_ratio = max(worst_ratio, float(np.max(np.abs(residual)) / c))
        gap = np.linalg.norm(_exact_grad(x, y, theta) - g_anchor, axis=1)
        worst_grad = max(worst_grad, float(np.max(gap) / (kappa * np.linalg.norm(theta - anchor_point))))
    assert worst_ratio <= 1.0 and worst_grad <= 1.0
    assert worst_ratio > 0.05  # the bound is not vacuous: some row comes within 20× of it


def test_mechanism_bound_is_the_public_formula():
    model, _, _ = _logistic()
    anchor = _anchor([0.1, 0.0, -0.2], np.zeros(3))
    mechanism = _rows(model).centred_log_likelihood_ratio(anchor, 0.7, 1.0, "substitute")
    theta, proposal = np.array([0.5, 0.0, 0.0]), np.array([0.5, 0.3, 0.4])
    expected = 0.7 * 0.5 * max(np.linalg.norm(theta - anchor.point), np.linalg.norm(proposal - anchor.point))
    assert mechanism.bound(theta, proposal) == pytest.approx(expected)
    _, std = mechanism.release(theta, proposal, np.random.default_rng(0))
    assert std == pytest.approx(1.0 * 2 * expected)  # σ = τ·2c (substitute)


# -- the limit: noise → 0, no clipping ⇒ the non-private counterpart -----------------------------
def test_limit_without_noise_or_clipping_is_the_exact_ratio_and_gradient():
    bound = 2.0
    model, x, y = _logistic(n=300, bound=bound)
    mechanisms = _rows(model)
    point = np.array([0.2, -0.3, 0.6])
    anchor = anchor_release(mechanisms.clipped_gradient, point, 100.0, 1.0, "substitute", _ZeroNoise(), ("b",))
    np.testing.assert_allclose(anchor.gradient, _exact_grad(x, y, point).sum(0), rtol=1e-9, atol=1e-9)
    ratio = mechanisms.centred_log_likelihood_ratio(anchor, bound**2 / 4, 1.0, "substitute")
    gradient = mechanisms.centred_gradient(anchor, bound**2 / 4, 1.0, "substitute")
    rng = np.random.default_rng(5)
    for _ in range(5):
        theta, proposal = point + rng.normal(0, 0.5, 3), point + rng.normal(0, 0.5, 3)
        released, _ = ratio.release(theta, proposal, _ZeroNoise())
        exact = float(np.sum(_exact_loglik(x, y, proposal) - _exact_loglik(x, y, theta)))
        assert released == pytest.approx(exact, rel=1e-9, abs=1e-9)
        np.testing.assert_allclose(
            gradient.release(theta, _ZeroNoise()), _exact_grad(x, y, theta).sum(0), rtol=1e-9, atol=1e-9
        )


def test_gradient_at_the_anchor_is_the_anchor_release():
    model, _, _ = _logistic()
    anchor = _anchor([0.1, 0.2, 0.3], [1.0, 2.0, 3.0])
    gradient = _rows(model).centred_gradient(anchor, 1.0, 1.0, "substitute")
    np.testing.assert_array_equal(gradient.release(anchor.point.copy(), np.random.default_rng(0)), anchor.gradient)


# -- sensitivity on neighbouring data sets ---------------------------------------------------------
class _Table:
    """Per-row log-likelihoods ℓᵢ(θ) = aᵢθ₀ + ½sᵢθ₀² and gradients (aᵢ + sᵢθ₀, 0, …): a stand-in data layer."""

    def __init__(self, linear, curvature, n_params=1):
        self.linear, self.curvature = np.asarray(linear, float), np.asarray(curvature, float)
        self.n_rows, self.n_params = self.linear.size, n_params

    def loglik_rows(self, theta, rows=None):
        return self.linear * theta[0] + 0.5 * self.curvature * theta[0] ** 2

    def grad_rows(self, theta, rows=None):
        out = np.zeros((self.n_rows, self.n_params))
        out[:, 0] = self.linear + self.curvature * theta[0]
        return out


def _neighbours(n=20, outlier=100.0):
    rng = np.random.default_rng(12345)
    linear, curvature = rng.uniform(-0.3, 0.3, n), rng.uniform(-0.3, 0.3, n)
    d, d_prime = curvature.copy(), curvature.copy()
    d[-1], d_prime[-1] = -outlier, outlier
    return _Table(linear, d), _Table(linear, d_prime)


@pytest.mark.parametrize("neighbouring, factor", [("substitute", 2.0), ("add_remove", 1.0)])
def test_one_row_moves_the_clipped_sums_by_at_most_the_sensitivity(neighbouring, factor):
    tables = _neighbours()
    anchor = _anchor([1.0], [0.0], neighbouring=neighbouring, names=())
    theta, proposal = np.zeros(1), np.full(1, 0.5)
    ratios = [CentredLogLikelihoodRatio(t, anchor, 0.3, 1.0, neighbouring) for t in tables]
    outs = [r.release(theta, proposal, _ZeroNoise()) for r in ratios]
    c = 0.3 * 0.5 * 1.0
    assert abs(outs[0][0] - outs[1][0]) == pytest.approx(2 * c)  # the worst case reaches 2c …
    assert outs[0][1] == pytest.approx(factor * c)  # … and σ = τ·Δ with Δ = 2c (c add/remove)
    grads = [CentredClippedGradient(t, anchor, 0.3, 1.0, neighbouring) for t in tables]
    g = [m.release(theta, _ZeroNoise()) for m in grads]
    assert float(np.linalg.norm(g[0] - g[1])) == pytest.approx(2 * 0.3 * 1.0)


# -- invariance at exact posterior draws -----------------------------------------------------------
def _conjugate_anchor(conjugate_normal, model):
    mean, _ = conjugate_normal.posterior()
    with model:  # a near noise-free anchor (τ_G tiny): the tilt is then negligible and the test exact
        return pmdp.release_anchor(
            {"m": np.array(mean)}, grad_clip=50.0, noise_multiplier=1e-9, rng=np.random.default_rng(0)
        )


@pytest.mark.parametrize("step_name", ["penalty", "hmc"])
def test_invariance_of_centred_steps_at_exact_posterior_draws(conjugate_normal, step_name):
    """Gaussian rows have κ = 1 exactly: the centred chains keep the posterior's mean and variance."""
    mean, sd = conjugate_normal.posterior()
    model = conjugate_normal.model
    anchor = _conjugate_anchor(conjugate_normal, model)
    tau = 0.4 / sd**2  # σ = 2τ·|Δ|·R ≈ 0.8·(|Δ|/sd)(R/sd): the noise matters at a typical move
    with model:
        if step_name == "penalty":
            step = pmdp.DPPenaltyMH(
                anchor=anchor, centre_lipschitz=1.0, noise_multiplier=tau, proposal_scale=1.5 * sd, tune=False
            )
        else:
            step = pmdp.DPHMC(
                anchor=anchor,
                centre_lipschitz=1.0,
                llr_noise_multiplier=tau,
                grad_noise_multiplier=tau,
                step_size=0.8 * sd,
                n_leapfrog=3,
                adapt_mass_window=0,
                tune=False,
            )
    starts = np.random.default_rng(1).normal(mean, sd, size=500)
    ends, acceptance = run_chains_from(step, starts, n_steps=8, seed=2)
    assert 0.05 < acceptance < 0.95
    z_mean, z_var = invariance_z_scores(ends, mean, sd)
    assert abs(z_mean) < Z_CRIT and abs(z_var) < Z_CRIT


def test_invariance_test_catches_an_uncorrected_anchor_shift(conjugate_normal):
    """Power check: an anchor whose Ĝ is off by 3 posterior precisions·sd tilts the chain; the same test sees it."""
    mean, sd = conjugate_normal.posterior()
    model = conjugate_normal.model
    good = _conjugate_anchor(conjugate_normal, model)
    shifted = _anchor(good.point, good.gradient + 3.0 / sd, good.grad_clip, good.noise_multiplier, names=("m",))
    with model:
        step = pmdp.DPPenaltyMH(
            anchor=shifted, centre_lipschitz=1.0, noise_multiplier=0.4 / sd**2, proposal_scale=1.5 * sd, tune=False
        )
    starts = np.random.default_rng(1).normal(mean, sd, size=500)
    ends, _ = run_chains_from(step, starts, n_steps=8, seed=2)
    z_mean, _ = invariance_z_scores(ends, mean, sd)
    assert abs(z_mean) > Z_CRIT


# -- accounting -------------------------------------------------------------------------------------
def test_accounting_charges_the_anchor_once_with_the_iterations(conjugate_normal):
    model = conjugate_normal.model
    with model:
        anchor = pmdp.release_anchor({"m": np.array(0.4)}, grad_clip=5.0, noise_multiplier=3.0)
        step = pmdp.DPPenaltyMH(anchor=anchor, centre_lipschitz=1.0, noise_multiplier=20.0)
        hmc = pmdp.DPHMC(
            anchor=anchor, centre_lipschitz=1.0, llr_noise_multiplier=20.0, grad_noise_multiplier=30.0, n_leapfrog=2
        )
    events = step.privacy_events(40)
    assert [(type(e), e.noise_multiplier, e.count) for e in events] == [
        (GaussianReleases, 20.0, 40),
        (GaussianReleases, 3.0, 1),
    ]
    hmc_events = hmc.privacy_events(40)
    assert sum(e.mu for e in hmc_events) == pytest.approx(40 / (2 * 20.0**2) + 120 / (2 * 30.0**2) + 1 / 18)
    assert step.accountant_settings()["centring"]["noise_multiplier"] == 3.0
    assert step.auto_clip_attributes == ()  # llr_clip "auto" is unused when centred


def test_chain_statistics_count_the_anchor_at_the_first_iteration(conjugate_normal):
    model = conjugate_normal.model
    with model:
        anchor = pmdp.release_anchor({"m": np.array(0.4)}, grad_clip=5.0, noise_multiplier=3.0)
        step = pmdp.DPPenaltyMH(anchor=anchor, centre_lipschitz=1.0, noise_multiplier=20.0, tune=False)
        idata = pm.sample(
            draws=5,
            tune=0,
            chains=2,
            cores=1,
            step=step,
            progressbar=False,
            random_seed=0,
            compute_convergence_checks=False,
        )
    cumulative = idata.sample_stats["dp_mu_cumulative"].values
    per = 1 / (2 * 20.0**2)
    np.testing.assert_allclose(cumulative[:, 0], per + 1 / 18)
    np.testing.assert_allclose(np.diff(cumulative, axis=1), per)
    published = pmdp.publish(idata, model=model, delta=1e-6)
    spent = pmdp.privacy_spent(published)
    assert spent.mu >= 2 * 5 * per + 1 / 18  # never less than the iterations plus the anchor


def test_noise_multipliers_split_the_target():
    tau_anchor, tau = centred_noise_multipliers(1.0, 1e-6, 1000, anchor_share=0.4)
    mu = pmdp.accounting.gaussian_mu_for_target(1.0, 1e-6)
    assert 0.5 / tau_anchor**2 + 1000 * 0.5 / tau**2 <= mu
    assert 0.5 / tau_anchor**2 == pytest.approx(0.4 * mu, rel=1e-6)


# -- validation ------------------------------------------------------------------------------------
def test_bad_centring_arguments_are_refused_by_name(conjugate_normal):
    model = conjugate_normal.model
    anchor = _anchor([0.1], [0.0], names=("m",))
    with model:
        with pytest.raises(ValueError, match="`centre_lipschitz` must be given"):
            pmdp.DPPenaltyMH(anchor=anchor, noise_multiplier=1.0)
        with pytest.raises(ValueError, match="`centre_lipschitz` needs an `anchor`"):
            pmdp.DPPenaltyMH(centre_lipschitz=1.0, noise_multiplier=1.0)
        with pytest.raises(ValueError, match="`noise_multiplier` must be given with `anchor`"):
            pmdp.DPPenaltyMH(anchor=anchor, centre_lipschitz=1.0)
        with pytest.raises(ValueError, match="`centre_lipschitz` must be"):
            pmdp.DPPenaltyMH(anchor=anchor, centre_lipschitz=-1.0, noise_multiplier=1.0)
        with pytest.raises(TypeError, match="`anchor` must be a CentringAnchor"):
            pmdp.DPPenaltyMH(anchor={"m": 0.1}, centre_lipschitz=1.0, noise_multiplier=1.0)
        with pytest.raises(ValueError, match="one coordinate per flat parameter"):
            pmdp.DPPenaltyMH(anchor=_anchor([0.1, 0.2], [0.0, 0.0]), centre_lipschitz=1.0, noise_multiplier=1.0)
        with pytest.raises(ValueError, match="neighbouring relation"):
            pmdp.DPPenaltyMH(
                anchor=_anchor([0.1], [0.0], neighbouring="add_remove", names=("m",)),
                centre_lipschitz=1.0,
                noise_multiplier=1.0,
            )
        with pytest.raises(ValueError, match="`grad_noise_multiplier`, `llr_noise_multiplier` must be given"):
            pmdp.DPHMC(anchor=anchor, centre_lipschitz=1.0)
        with pytest.raises(ValueError, match="`point` must be 1 finite values"):
            pmdp.release_anchor(np.array([np.nan]), grad_clip=1.0, noise_multiplier=1.0)
        with pytest.raises(ValueError, match="`grad_clip` must be"):
            pmdp.release_anchor({"m": 0.0}, grad_clip=0.0, noise_multiplier=1.0)
        # The step charges the noise an anchor claims: a claim that prices nothing is refused by name.
        for bad in ({"noise_multiplier": math.inf}, {"noise_multiplier": 0.0}, {"grad_clip": float("nan")}):
            claimed = dataclasses.replace(_anchor([0.1], [0.0], names=("m",)), **bad)
            name = next(iter(bad))
            with pytest.raises(ValueError, match=f"`anchor`'s `{name}` must be a finite positive number"):
                pmdp.DPPenaltyMH(anchor=claimed, centre_lipschitz=1.0, noise_multiplier=1.0)


def test_an_anchor_needs_every_free_variable_in_the_step():
    with pm.Model():
        a = pm.Normal("a", 0, 1)
        s = pm.HalfNormal("s", 1)
        pm.Normal("y", a, s, observed=np.array([0.1, -0.3, 0.5]))
        with pytest.raises(ValueError, match="`anchor` needs the step to sample every free variable"):
            pmdp.DPPenaltyMH(
                [a], anchor=_anchor([0.1], [0.0], names=("a",)), centre_lipschitz=1.0, noise_multiplier=1.0
            )


def test_widening_adds_the_anchors_known_covariance():
    rng = np.random.default_rng(0)
    cov = np.array([[0.04, 0.01], [0.01, 0.09]])
    draws = rng.multivariate_normal([0, 0], cov, size=40_000)
    anchor = _anchor([0.0, 0.0], [0.0, 0.0], grad_clip=1.0, tau=2.5, names=("a", "b"))  # σ_G = 5
    widened = widen_for_anchor_noise(draws, anchor, rng=np.random.default_rng(1))
    sample_cov = np.cov(draws, rowvar=False)
    expected = sample_cov + 25.0 * sample_cov @ sample_cov
    # standard error of a sample variance of a Gaussian: √(2/n)·variance
    se = math.sqrt(2 / draws.shape[0]) * np.sqrt(np.outer(np.diag(expected), np.diag(expected)))
    assert np.all(np.abs(np.cov(widened, rowvar=False) - expected) < 5 * se)


# == second-order centring: scores and Hessians released once at the anchor ===========================
def _logistic_hessians(x, theta):
    """Exact per-row Hessians −p(1 − p)xᵢxᵢᵀ, packed (N, P(P+1)/2)."""
    p = 1 / (1 + np.exp(-(x @ theta)))
    return symmetric_to_packed(-(p * (1 - p))[:, None, None] * x[:, :, None] * x[:, None, :])


def _worst_rows(n=240, p=3, bound=2.0, seed=4):
    """Rows on the sphere ‖x‖ = B (the worst case of the logistic constants), half of them along one axis."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, p))
    x[: n // 2] = np.eye(p)[0]
    x = bound * x / np.linalg.norm(x, axis=1, keepdims=True)
    return x, rng.binomial(1, 0.5, n).astype(float)


def test_second_order_bound_bounds_every_row_for_the_logistic_curvature_constant():
    """‖x‖ = B: κ = B³/(6√3) bounds the Hessian's Lipschitz constant, and no residual exceeds its bound."""
    bound = 2.0
    x, y = _worst_rows(bound=bound)
    kappa = bound**3 / (6 * math.sqrt(3))
    rng = np.random.default_rng(3)
    worst_ratio = worst_grad = 0.0
    for k in range(300):
        point = rng.normal(0, 0.5, 3)
        scale = 2.0 if k % 2 else 0.3  # far from θ̂ and near it
        theta, proposal = point + rng.normal(0, scale, 3), point + rng.normal(0, scale, 3)
        scores, hessians = _exact_grad(x, y, point), _logistic_hessians(x, point)
        residual = ratio_residuals(
            _exact_loglik(x, y, theta), _exact_loglik(x, y, proposal), scores, hessians, theta, proposal, point
        )
        c = second_order_ratio_bound(theta, proposal, point, kappa)
        worst_ratio = max(worst_ratio, float(np.max(np.abs(residual)) / c))
        gap = np.linalg.norm(gradient_residuals(_exact_grad(x, y, theta), scores, hessians, theta, point), axis=1)
        worst_grad = max(worst_grad, float(np.max(gap) / second_order_gradient_bound(theta, point, kappa)))
    assert worst_ratio <= 1.0 and worst_grad <= 1.0
    assert worst_ratio > 0.2 and worst_grad > 0.2  # not vacuous: the worst rows come within 5× of it


def test_second_order_bound_is_the_exact_integral_and_below_the_maximum():
    rng = np.random.default_rng(0)
    t = (np.arange(20_000) + 0.5) / 20_000  # midpoint rule: error O(1/n²)
    for _ in range(20):
        point, theta, proposal = rng.normal(size=(3, 4))
        step = proposal - theta
        integral = float(np.mean(np.sum((theta - point + t[:, None] * step) ** 2, axis=1)))
        expected = 0.5 * 0.7 * np.linalg.norm(step) * integral
        assert second_order_ratio_bound(theta, proposal, point, 0.7) == pytest.approx(expected, rel=1e-7)
        reach = max(np.linalg.norm(theta - point), np.linalg.norm(proposal - point))
        assert second_order_ratio_bound(theta, proposal, point, 0.7) <= 0.5 * 0.7 * np.linalg.norm(step) * reach**2


def test_packed_expansion_is_the_matrix_expansion():
    """The packed per-row quadratic forms and products equal the dense ones (isometric packing)."""
    rng = np.random.default_rng(1)
    dense = rng.normal(size=(5, 4, 4))
    dense = dense + np.swapaxes(dense, 1, 2)
    theta, proposal, point = rng.normal(size=(3, 4))
    a, b = theta - point, proposal - point
    zeros = np.zeros(5)
    residual = ratio_residuals(zeros, zeros, np.zeros((5, 4)), symmetric_to_packed(dense), theta, proposal, point)
    expected = -0.5 * (np.einsum("j,ijk,k->i", b, dense, b) - np.einsum("j,ijk,k->i", a, dense, a))
    np.testing.assert_allclose(residual, expected, rtol=1e-12, atol=1e-12)
    grads = gradient_residuals(np.zeros((5, 4)), np.zeros((5, 4)), symmetric_to_packed(dense), theta, point)
    np.testing.assert_allclose(grads, -np.einsum("ijk,k->ij", dense, a), rtol=1e-12, atol=1e-12)


def _second_order_anchor(mechanisms, point, noise=None, grad_clip=100.0, hessian_clip=100.0, names=("b",)):
    return anchor_release(
        mechanisms.clipped_gradient,
        np.asarray(point, float),
        grad_clip,
        1.0,
        "substitute",
        _ZeroNoise() if noise is None else noise,
        names,
        functools.partial(clipped_hessian, mechanisms),
        hessian_clip,
        1.0,
    )


def test_second_order_limit_without_noise_or_clipping_is_the_exact_ratio_and_gradient():
    bound = 2.0
    model, x, y = _logistic(n=300, bound=bound)
    mechanisms = _rows(model)
    point = np.array([0.2, -0.3, 0.6])
    anchor = _second_order_anchor(mechanisms, point)
    assert anchor.order == 2
    exact_hessian = symmetric_from_packed(_logistic_hessians(x, point).sum(0), 3)
    np.testing.assert_allclose(anchor.hessian, exact_hessian, rtol=1e-6, atol=1e-6)
    kappa = bound**3 / (6 * math.sqrt(3))
    ratio = mechanisms.centred_log_likelihood_ratio(anchor, kappa, 1.0, "substitute")
    gradient = mechanisms.centred_gradient(anchor, kappa, 1.0, "substitute")
    rng = np.random.default_rng(5)
    for _ in range(5):
        theta, proposal = point + rng.normal(0, 0.5, 3), point + rng.normal(0, 0.5, 3)
        released, std = ratio.release(theta, proposal, _ZeroNoise())
        exact = float(np.sum(_exact_loglik(x, y, proposal) - _exact_loglik(x, y, theta)))
        assert released == pytest.approx(exact, rel=1e-9, abs=1e-9)
        assert std == pytest.approx(2 * second_order_ratio_bound(theta, proposal, point, kappa))
        np.testing.assert_allclose(
            gradient.release(theta, _ZeroNoise()), _exact_grad(x, y, theta).sum(0), rtol=1e-9, atol=1e-9
        )


def test_second_order_residual_bound_shrinks_faster_than_first_order_near_the_anchor():
    """Measured on logistic rows: the largest per-row residual falls like R² (second order) against R (first)."""
    _, x, y = _logistic(n=300, bound=2.0)
    point = np.array([0.2, -0.3, 0.6])
    scores, hessians = _exact_grad(x, y, point), _logistic_hessians(x, point)
    direction = np.array([0.6, 0.0, 0.8])
    largest = {}
    for reach in (0.2, 0.1):
        theta, proposal = point + reach * direction, point + reach * direction + 0.01 * np.array([0.0, 1.0, 0.0])
        current, proposed = _exact_loglik(x, y, theta), _exact_loglik(x, y, proposal)
        largest[reach] = [
            float(np.max(np.abs(ratio_residuals(current, proposed, scores, h, theta, proposal, point))))
            for h in (None, hessians)
        ]
    first, second = (largest[0.2][k] / largest[0.1][k] for k in (0, 1))
    assert 1.6 < first < 2.4 and 3.2 < second < 4.8  # halving R halves the first-order residual, quarters the second


class _CubicTable(_Table):
    """ℓᵢ(θ) = aᵢθ₀ + ½sᵢθ₀² + ⅙tᵢθ₀³: the Hessian sᵢ + tᵢθ₀ is Lipschitz with constant |tᵢ|."""

    def __init__(self, linear, curvature, third, n_params=1):
        super().__init__(linear, curvature, n_params)
        self.third = np.asarray(third, float)

    def loglik_rows(self, theta, rows=None):
        return super().loglik_rows(theta) + self.third * theta[0] ** 3 / 6

    def grad_rows(self, theta, rows=None):
        out = super().grad_rows(theta)
        out[:, 0] += 0.5 * self.third * theta[0] ** 2
        return out


def _cubic_neighbours(n=20, outlier=100.0):
    rng = np.random.default_rng(12345)
    linear, curvature, third = (rng.uniform(-0.3, 0.3, n) for _ in range(3))
    d, d_prime = third.copy(), third.copy()
    d[-1], d_prime[-1] = -outlier, outlier
    return _CubicTable(linear, curvature, d), _CubicTable(linear, curvature, d_prime)


def _cubic_anchor(table, neighbouring="substitute", hessian_tau=1.0, halve=False, rng=None):
    """A second-order anchor at θ̂ = 1 with b_g = b_H = 1 (``halve``: broken, the Hessian's noise at τ_H/2)."""
    return anchor_release(
        lambda clip, tau, nb: NoisyClippedGradient(table, clip, tau, nb),
        np.full(1, 1.0),
        1.0,
        1.0,
        neighbouring,
        _ZeroNoise() if rng is None else rng,
        (),
        lambda clip, tau, nb: NoisyClippedHessian(table, clip, tau / 2 if halve else tau, nb),
        1.0,
        hessian_tau,
    )


@pytest.mark.parametrize("neighbouring, factor", [("substitute", 2.0), ("add_remove", 1.0)])
def test_one_row_moves_the_second_order_sums_by_at_most_the_sensitivity(neighbouring, factor):
    tables = _cubic_neighbours()
    anchor = _cubic_anchor(tables[0], neighbouring)  # the same public anchor for both data sets
    theta, proposal = np.zeros(1), np.full(1, 0.5)
    c = second_order_ratio_bound(theta, proposal, anchor.point, 0.3)
    outs = [
        CentredLogLikelihoodRatio(t, anchor, 0.3, 1.0, neighbouring).release(theta, proposal, _ZeroNoise())
        for t in tables
    ]
    assert abs(outs[0][0] - outs[1][0]) == pytest.approx(2 * c)  # the worst case reaches 2c …
    assert outs[0][1] == pytest.approx(factor * c)  # … and σ = τ·Δ with Δ = 2c (c add/remove)
    far = np.full(1, -1.0)  # where the outlier's cubic term dominates its gradient residual
    g = [CentredClippedGradient(t, anchor, 0.3, 1.0, neighbouring).release(far, _ZeroNoise()) for t in tables]
    assert float(np.linalg.norm(g[0] - g[1])) == pytest.approx(2 * second_order_gradient_bound(far, anchor.point, 0.3))
    hessians = [_cubic_anchor(t, neighbouring).hessian[0, 0] for t in tables]
    assert abs(hessians[0] - hessians[1]) == pytest.approx(2.0)  # the Hessian release's worst case: 2b_H


def _second_order_conjugate_anchor(conjugate_normal, model):
    mean, _ = conjugate_normal.posterior()
    with model:  # near noise-free (τ_G, τ_H tiny): the perturbation is then negligible and the test exact
        return pmdp.release_anchor(
            {"m": np.array(mean)},
            grad_clip=50.0,
            noise_multiplier=1e-9,
            hessian_clip=500.0,
            hessian_noise_multiplier=1e-9,
            rng=np.random.default_rng(0),
        )


def _second_order_step(step_name, anchor, sd):
    tau = 0.4 / sd**3  # σ = 2τ·c ≈ τκ·sd³ at a typical move: the noise matters
    if step_name == "penalty":
        return pmdp.DPPenaltyMH(
            anchor=anchor, centre_lipschitz=1.0, noise_multiplier=tau, proposal_scale=1.5 * sd, tune=False
        )
    return pmdp.DPHMC(
        anchor=anchor,
        centre_lipschitz=1.0,
        llr_noise_multiplier=tau,
        grad_noise_multiplier=tau,
        step_size=0.8 * sd,
        n_leapfrog=3,
        adapt_mass_window=0,
        tune=False,
    )


@pytest.mark.parametrize("step_name", ["penalty", "hmc"])
def test_invariance_of_second_order_centred_steps_at_exact_posterior_draws(conjugate_normal, step_name):
    """Gaussian rows have constant Hessians (residual 0 at any κ): the chains keep the posterior's moments."""
    mean, sd = conjugate_normal.posterior()
    model = conjugate_normal.model
    anchor = _second_order_conjugate_anchor(conjugate_normal, model)
    with model:
        step = _second_order_step(step_name, anchor, sd)
    starts = np.random.default_rng(1).normal(mean, sd, size=500)
    ends, acceptance = run_chains_from(step, starts, n_steps=8, seed=2)
    assert 0.05 < acceptance < 0.95
    z_mean, z_var = invariance_z_scores(ends, mean, sd)
    assert abs(z_mean) < Z_CRIT and abs(z_var) < Z_CRIT


def test_invariance_test_catches_an_uncorrected_hessian_shift(conjugate_normal):
    """Power check: Ĥ off by 0.8 posterior precisions makes the target's variance 5×; the same test sees it."""
    mean, sd = conjugate_normal.posterior()
    model = conjugate_normal.model
    good = _second_order_conjugate_anchor(conjugate_normal, model)
    shifted = dataclasses.replace(good, hessian=good.hessian + 0.8 / sd**2)
    with model:
        step = _second_order_step("penalty", shifted, sd)
    starts = np.random.default_rng(1).normal(mean, sd, size=500)
    ends, _ = run_chains_from(step, starts, n_steps=8, seed=2)
    _, z_var = invariance_z_scores(ends, mean, sd)
    assert abs(z_var) > Z_CRIT


def test_second_order_epsilon_equals_the_accounted_events(conjugate_normal):
    """pmdp.sample's ε is the composition of the iterations, the anchor's score and its Hessian release."""
    delta, chains, tune, draws, tau = 1e-6, 2, 10, 15, 20.0
    with conjugate_normal.model:
        anchor = pmdp.release_anchor(
            {"m": np.array(0.4)}, grad_clip=5.0, noise_multiplier=3.0, hessian_clip=2.0, hessian_noise_multiplier=4.0
        )
        step = pmdp.DPPenaltyMH(anchor=anchor, centre_lipschitz=1.0, noise_multiplier=tau)
        events = step.privacy_events(chains * (tune + draws))
        assert [(e.noise_multiplier, e.count) for e in events] == [(tau, chains * (tune + draws)), (3.0, 1), (4.0, 1)]
        idata = pmdp.sample(
            step=step,
            draws=draws,
            tune=tune,
            chains=chains,
            delta=delta,
            progressbar=False,
            random_seed=1,
            on_poor_mixing="ignore",
        )
    mu = chains * (tune + draws) / (2 * tau**2) + 1 / 18 + 1 / 32
    assert anchor.mu == pytest.approx(1 / 18 + 1 / 32)
    assert idata.posterior.attrs["dp_epsilon"] == pytest.approx(gaussian_epsilon(delta, mu), rel=1e-9)
    cumulative = idata.sample_stats["dp_mu_cumulative"].values
    np.testing.assert_allclose(cumulative[:, 0], (tune + 1) / (2 * tau**2) + 1 / 18 + 1 / 32)  # first kept draw
    text = pmdp.privacy_statement(idata).text
    assert "per-row Hessians" in text and "second-order expansion" in text


def test_second_order_noise_multipliers_split_the_target():
    tau_g, tau_h, tau = second_order_noise_multipliers(1.0, 1e-6, 1000, anchor_share=0.4, hessian_share=0.25)
    mu = pmdp.accounting.gaussian_mu_for_target(1.0, 1e-6)
    assert 0.5 / tau_g**2 + 0.5 / tau_h**2 + 1000 * 0.5 / tau**2 <= mu
    assert 0.5 / tau_h**2 == pytest.approx(0.1 * mu, rel=1e-6)
    assert 0.5 / tau_g**2 == pytest.approx(0.3 * mu, rel=1e-6)
    with pytest.raises(ValueError, match="`hessian_share` must be in"):
        second_order_noise_multipliers(1.0, 1e-6, 1000, hessian_share=1.0)


def test_bad_second_order_settings_are_refused_before_any_charge(conjugate_normal):
    budget = pmdp.PrivacyBudget(epsilon=2.0, delta=1e-6, n_rows=200)
    reads = (mock.patch.object(NoisyClippedGradient, "release"), mock.patch.object(NoisyClippedHessian, "release"))
    with conjugate_normal.model, reads[0] as read_g, reads[1] as read_h:
        with pytest.raises(ValueError, match="`hessian_clip` and `hessian_noise_multiplier` must be given together"):
            pmdp.release_anchor({"m": 0.4}, grad_clip=5.0, noise_multiplier=3.0, hessian_clip=1.0, budget=budget)
        with pytest.raises(ValueError, match="`hessian_clip` must be"):
            pmdp.release_anchor(
                {"m": 0.4},
                grad_clip=5.0,
                noise_multiplier=3.0,
                hessian_clip=-1.0,
                hessian_noise_multiplier=1.0,
                budget=budget,
            )
        with pytest.raises(ValueError, match="`hessian_noise_multiplier` must be"):
            pmdp.release_anchor(
                {"m": 0.4},
                grad_clip=5.0,
                noise_multiplier=3.0,
                hessian_clip=1.0,
                hessian_noise_multiplier=math.nan,
                budget=budget,
            )
        # the score release alone would fit; with the Hessian's it does not: refused, nothing read or charged
        score_only = pmdp.PrivacyBudget(epsilon=2.0, delta=1e-6, n_rows=200).would_spend(
            NoisyClippedGradient.events(3.0, 1, "anchor")
        )
        tight = pmdp.PrivacyBudget(epsilon=score_only.epsilon * 1.01, delta=1e-6, n_rows=200)
        with pytest.raises(pmdp.PrivacyBudgetExceededError):
            pmdp.release_anchor(
                {"m": 0.4},
                grad_clip=5.0,
                noise_multiplier=3.0,
                hessian_clip=1.0,
                hessian_noise_multiplier=1.0,
                budget=tight,
            )
    read_g.assert_not_called()
    read_h.assert_not_called()
    assert budget.spent().epsilon == 0.0 and tight.spent().epsilon == 0.0


def test_widening_adds_the_second_order_anchors_known_covariance():
    rng = np.random.default_rng(0)
    cov = np.array([[0.04, 0.01], [0.01, 0.09]])
    draws = rng.multivariate_normal([1.0, -0.5], cov, size=40_000)
    anchor = CentringAnchor(
        np.zeros(2), np.zeros(2), 1.0, 2.5, "substitute", ("a", "b"), np.zeros((2, 2)), 1.0, 1.5
    )  # σ_G = 5, σ_H = 3
    widened = widen_for_anchor_noise(draws, anchor, temperature=0.5, rng=np.random.default_rng(1))
    sample_cov = np.cov(draws, rowvar=False)
    v = draws.mean(0)
    noise = 25.0 * np.eye(2) + 4.5 * (v @ v * np.eye(2) + np.outer(v, v))
    np.testing.assert_allclose(anchor_noise_covariance(anchor, v), noise)
    expected = sample_cov + 0.25 * sample_cov @ noise @ sample_cov
    se = math.sqrt(2 / draws.shape[0]) * np.sqrt(np.outer(np.diag(expected), np.diag(expected)))
    assert np.all(np.abs(np.cov(widened, rowvar=False) - expected) < 5 * se)


# -- privacy audit, with broken variants -----------------------------------------------------------
def _centred_ratio_scenario(tau=1.0, kappa=0.3):
    tables = _neighbours()
    anchor = _anchor([1.0], [0.0], names=())
    theta, proposal = np.zeros(1), np.full(1, 0.5)

    def make(rng):
        mechanisms = [CentredLogLikelihoodRatio(t, anchor, kappa, tau, "substitute") for t in tables]
        return lambda dataset: mechanisms[dataset].release(theta, proposal, rng)[0]

    return AuditScenario("centred ratio", make, _gaussian_claim(tau))


def _centred_gradient_scenario(tau=1.0, kappa=0.3):
    tables = _neighbours()
    anchor = _anchor([1.0], [0.0], names=())
    theta = np.zeros(1)

    def make(rng):
        mechanisms = [CentredClippedGradient(t, anchor, kappa, tau, "substitute") for t in tables]
        return lambda dataset: float(mechanisms[dataset].release(theta, rng)[0])

    return AuditScenario("centred gradient", make, _gaussian_claim(tau))


class _Mechanisms:
    def __init__(self, table, halve=False):
        self.table, self.halve = table, halve

    def clipped_gradient(self, grad_clip, tau, neighbouring):
        return NoisyClippedGradient(self.table, grad_clip, tau / 2 if self.halve else tau, neighbouring)


def _anchor_scenario(tau=1.0, halve=False):
    tables = _neighbours()

    def make(rng):
        mechanisms = [_Mechanisms(t, halve) for t in tables]
        return lambda dataset: float(
            anchor_release(mechanisms[dataset].clipped_gradient, np.full(1, 1.0), 1.0, tau, "substitute", rng).gradient[
                0
            ]
        )

    return AuditScenario("centring anchor", make, _gaussian_claim(tau))


def _no_centring_in_the_bound():
    """Broken: rows clipped at the plain (uncentred) scale 50c while the noise is for c."""

    def broken(values, bound, tau, rng, neighbouring="substitute"):
        clipped = float(np.sum(np.clip(values, -50 * bound, 50 * bound)))
        return clipped + float(rng.normal(0.0, tau * 2 * bound)), tau * 2 * bound

    return mock.patch.object(centred_module, "noisy_clipped_sum", broken)


def _second_order_ratio_scenario(tau=1.0, kappa=0.3):
    tables = _cubic_neighbours()
    anchor = _cubic_anchor(tables[0])
    theta, proposal = np.zeros(1), np.full(1, 0.5)

    def make(rng):
        mechanisms = [CentredLogLikelihoodRatio(t, anchor, kappa, tau, "substitute") for t in tables]
        return lambda dataset: mechanisms[dataset].release(theta, proposal, rng)[0]

    return AuditScenario("second-order centred ratio", make, _gaussian_claim(tau))


def _second_order_gradient_scenario(tau=1.0, kappa=0.3):
    tables = _cubic_neighbours()
    anchor = _cubic_anchor(tables[0])
    theta = np.full(1, -1.0)

    def make(rng):
        mechanisms = [CentredClippedGradient(t, anchor, kappa, tau, "substitute") for t in tables]
        return lambda dataset: float(mechanisms[dataset].release(theta, rng)[0])

    return AuditScenario("second-order centred gradient", make, _gaussian_claim(tau))


def _hessian_anchor_scenario(tau=1.0, halve=False):
    """The anchor's Hessian release Ĥ₀₀ (its score release is the same mechanism as the first-order anchor's)."""
    tables = _cubic_neighbours()

    def make(rng):
        return lambda dataset: float(
            _cubic_anchor(tables[dataset], hessian_tau=tau, halve=halve, rng=rng).hessian[0, 0]
        )

    return AuditScenario("centring anchor (Hessian)", make, _gaussian_claim(tau))


@pytest.mark.slow
@pytest.mark.parametrize(
    "make",
    [
        _centred_ratio_scenario,
        _centred_gradient_scenario,
        _anchor_scenario,
        _second_order_ratio_scenario,
        _second_order_gradient_scenario,
        _hessian_anchor_scenario,
    ],
)
def test_audit_of_centred_releases_stays_below_the_claim(make):
    result = audit(make(), runs=20_000, seed=1)
    assert result.epsilon_lower_bound <= result.claimed_epsilon


@pytest.mark.slow
@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(
            AuditScenario(
                "no centring in the bound",
                _centred_ratio_scenario().make_release,
                _gaussian_claim(1.0),
                _no_centring_in_the_bound,
            ),
            id="no_centring_in_bound",
        ),
        pytest.param(_anchor_scenario(tau=2.0, halve=True), id="anchor_noise_halved"),
        pytest.param(
            AuditScenario(
                "no centring in the bound (second order)",
                _second_order_ratio_scenario().make_release,
                _gaussian_claim(1.0),
                _no_centring_in_the_bound,
            ),
            id="no_centring_in_bound_second_order",
        ),
        pytest.param(_hessian_anchor_scenario(tau=2.0, halve=True), id="anchor_hessian_noise_halved"),
    ],
)
def test_audit_catches_broken_centred_variants(scenario):
    # Δ/σ = 1 against a claimed 1/2: at 20,000 runs the lower bound sits near the claim (measured 1.95 and 2.14
    # against 1.99 for the two anchor variants), at 60,000 clearly above it (2.12 and 2.23 over two seeds).
    runs = 60_000 if "anchor" in scenario.name else 20_000
    result = audit(scenario, runs=runs, seed=1)
    assert result.epsilon_lower_bound > result.claimed_epsilon


# -- the anchor's release is priced and charged before any row is read ------------------------------
def test_release_anchor_charges_its_budget_before_reading_rows(conjugate_normal):
    budget = pmdp.PrivacyBudget(epsilon=2.0, delta=1e-6, n_rows=200)
    with conjugate_normal.model:
        anchor = pmdp.release_anchor({"m": np.array(0.4)}, grad_clip=5.0, noise_multiplier=3.0, budget=budget)
    expected = pmdp.PrivacyBudget(epsilon=2.0, delta=1e-6, n_rows=200).would_spend(anchor.events()).epsilon
    assert budget.spent().epsilon == pytest.approx(expected) and expected > 0
    tight = pmdp.PrivacyBudget(epsilon=0.01, delta=1e-6, n_rows=200)
    with conjugate_normal.model, mock.patch.object(NoisyClippedGradient, "release") as read:
        with pytest.raises(pmdp.PrivacyBudgetExceededError):
            pmdp.release_anchor({"m": np.array(0.4)}, grad_clip=5.0, noise_multiplier=3.0, budget=tight)
    read.assert_not_called()
    assert tight.spent().epsilon == 0.0


def test_release_anchor_refuses_a_subset_of_the_free_variables():
    with pm.Model():
        a = pm.Normal("a", 0, 1)
        pm.Normal("b", 0, 1)
        pm.Normal("y", a, 1.0, observed=np.zeros(10))
        with pytest.raises(ValueError, match="`vars` must be every free variable"):
            pmdp.release_anchor({"a": np.array(0.0)}, grad_clip=1.0, noise_multiplier=1.0, vars=[a])


def test_privacy_statement_describes_a_centred_run(conjugate_normal):
    with conjugate_normal.model:
        anchor = pmdp.release_anchor({"m": np.array(0.4)}, grad_clip=5.0, noise_multiplier=3.0)
        step = pmdp.DPPenaltyMH(anchor=anchor, centre_lipschitz=1.0, noise_multiplier=20.0)
        idata = pmdp.sample(
            step=step, draws=20, tune=10, chains=1, delta=1e-6, progressbar=False, on_poor_mixing="ignore"
        )
    text = pmdp.privacy_statement(idata).text
    assert "centred on a released anchor" in text and "κ = 1" in text
    assert "derived from a seed" not in text
    # An anchor released from the caller's generator is seeded noise: the result and its statement say so.
    with conjugate_normal.model:
        seeded = pmdp.release_anchor(
            {"m": np.array(0.4)}, grad_clip=5.0, noise_multiplier=3.0, rng=np.random.default_rng(0)
        )
        step = pmdp.DPPenaltyMH(anchor=seeded, centre_lipschitz=1.0, noise_multiplier=20.0)
        idata = pmdp.sample(
            step=step, draws=5, tune=5, chains=1, delta=1e-6, progressbar=False, on_poor_mixing="ignore"
        )
    assert seeded.reproducible_noise and not anchor.reproducible_noise
    assert json.loads(idata.posterior.attrs["dp_accountant"])["reproducible_noise"] is True
    assert "derived from a seed" in pmdp.privacy_statement(idata).text


def test_centred_noise_multipliers_refuse_a_fractional_iteration_count():
    with pytest.raises(TypeError, match="`iterations` must be a positive integer"):
        centred_noise_multipliers(1.0, 1e-6, 2.9)
