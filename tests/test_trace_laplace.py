"""The Laplace approximation read off released gradients (pymc_dp.variational.trace_laplace).

Oracles: an affine gradient field with known curvature and root (exact recovery without noise);
with Gaussian noise of known covariance, the mode's z-scores over independent repeats (their
mean square is 1 when the reported standard errors are right: a chi-square test at the
0.001 level); closed forms for the prior's curvature.
"""

import json

import numpy as np
import pymc as pm
import pytest
from scipy import stats

import pymc_dp as pmdp
from pymc_dp.variational.trace_laplace import (
    fit_gradient_field,
    laplace_from_gradient_field,
    trace_laplace,
)

HESSIAN = np.array([[400.0, 120.0], [120.0, 100.0]])  # the likelihood's curvature
ROOT = np.array([0.3, -0.2])  # where the likelihood's gradient vanishes
PRIOR_PRECISION = np.array([1.0 / 4.0, 1.0 / 9.0])  # independent N(0, 2²) and N(0, 3²)


def _prior_gradient(theta):
    return -PRIOR_PRECISION * theta


def _exact():
    precision = HESSIAN + np.diag(PRIOR_PRECISION)
    return np.linalg.solve(precision, HESSIAN @ ROOT), np.linalg.inv(precision)


def _points(rng, n, spread=0.2, offset=(0.0, 0.0)):
    # An AR(1) path, like an optimiser's iterates: the points depend on each other, never on
    # the noise of their own gradient.
    centre = ROOT + np.asarray(offset)
    points = np.empty((n, 2))
    current = centre + rng.normal(0, spread, 2)
    for t in range(n):
        current = centre + 0.8 * (current - centre) + rng.normal(0, spread * 0.6, 2)
        points[t] = current
    return points


def _gradients(points, rng, noise_sd):
    return -(points - ROOT) @ HESSIAN + rng.normal(0, noise_sd, points.shape)


def test_an_affine_field_without_noise_gives_the_exact_laplace_posterior():
    rng = np.random.default_rng(0)
    points = _points(rng, 200)
    field = fit_gradient_field(points, _gradients(points, rng, 0.0))
    np.testing.assert_allclose(field.hessian, HESSIAN, rtol=1e-10)
    laplace = laplace_from_gradient_field(field, _prior_gradient, curvature_margin=0.0)
    mode, covariance = _exact()
    np.testing.assert_allclose(laplace.mode, mode, rtol=1e-8)
    np.testing.assert_allclose(laplace.covariance, covariance, rtol=1e-6)
    np.testing.assert_allclose(laplace.mode_covariance, 0.0, atol=1e-20)
    assert laplace.clamped_directions == 0


@pytest.mark.parametrize(
    ("noise_sd", "offset"),
    [
        (30.0, (0.0, 0.0)),  # points around the mode, isotropic noise
        (np.array([60.0, 8.0]), (0.35, -0.3)),  # the mode outside the points' bulk, unequal noise
    ],
)
def test_the_mode_standard_errors_match_the_spread_over_repeats(noise_sd, offset):
    rng = np.random.default_rng(1)
    mode, _ = _exact()
    squared = []
    for _ in range(300):
        points = _points(rng, 400, offset=offset)
        laplace, _ = trace_laplace(points, _gradients(points, rng, noise_sd), _prior_gradient)
        error = laplace.mode - mode
        squared.append(float(error @ np.linalg.solve(laplace.mode_covariance, error)))
    # Σ of 300 χ²₂ under correct standard errors: a two-sided test at the 0.001 level.
    total = float(np.sum(squared))
    low, high = stats.chi2.ppf([0.0005, 0.9995], df=2 * len(squared))
    assert low < total < high, total / len(squared)


def test_the_curvature_margin_only_widens():
    rng = np.random.default_rng(2)
    points = _points(rng, 300)
    field = fit_gradient_field(points, _gradients(points, rng, 200.0))
    plain = laplace_from_gradient_field(field, _prior_gradient, curvature_margin=0.0)
    cautious = laplace_from_gradient_field(field, _prior_gradient, curvature_margin=1.0)
    assert np.all(np.linalg.eigvalsh(cautious.covariance - plain.covariance) >= -1e-12)
    np.testing.assert_allclose(cautious.mode, plain.mode)


def test_bad_input_names_what_is_wrong():
    rng = np.random.default_rng(3)
    points = _points(rng, 50)
    with pytest.raises(ValueError, match="same shape"):
        fit_gradient_field(points, points[:, :1])
    with pytest.raises(ValueError, match=r"more than 2\(P \+ 1\)"):
        fit_gradient_field(points[:5], points[:5])
    with pytest.raises(ValueError, match="finite"):
        fit_gradient_field(np.vstack([points, [[np.nan, 0.0]]]), np.vstack([points, [[0.0, 0.0]]]))
    with pytest.raises(ValueError, match="span P dimensions"):
        fit_gradient_field(np.column_stack([points[:, 0], 2 * points[:, 0]]), points)
    with pytest.raises(ValueError, match="`weights` must be"):
        fit_gradient_field(points, points, weights=-np.ones(len(points)))
    flat_prior_field = fit_gradient_field(points, np.zeros_like(points))  # no curvature and no prior
    with pytest.raises(ValueError, match="positive definite"):
        laplace_from_gradient_field(flat_prior_field, lambda theta: np.zeros_like(theta))


def _normal_fit(seed=4):
    rng = np.random.default_rng(seed)
    y = rng.normal(0.4, 1.0, size=4000)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 3)
        pm.Normal("y", mu, 1.0, observed=y)
    fit = pmdp.DPADVI(
        epsilon=4.0,
        delta=1e-6,
        sampling_rate=0.1,
        grad_clip=3.0,
        optimizer="adam",
        learning_rate=0.05,
        random_seed=seed,
        reproducible_noise=True,
        model=model,
    )
    return fit.fit(600, progressbar=False), y


def test_dpadvi_laplace_posterior_is_post_processing_with_its_own_diagnostics():
    approx, y = _normal_fit()
    variational = approx.sample(200, random_seed=1)
    laplace = approx.sample(2000, random_seed=1, posterior="laplace")
    for key in ("dp_epsilon", "dp_accountant"):  # the same releases: the same guarantee
        assert laplace.posterior.attrs[key] == variational.posterior.attrs[key]
    diagnostics = json.loads(laplace.posterior.attrs["dp_diagnostics"])
    assert diagnostics["posterior"] == "laplace"
    assert diagnostics["inflated"] is None
    summary = diagnostics["laplace"]
    assert summary["formed"] is True and summary["gradients_fitted"] == 300
    # Conjugate oracle: posterior sd 1/√(N + 1/9) ≈ 0.0158; the Laplace sd is that widened by
    # the mode's standard error (reported), so the draws' sd lies between the two.
    exact_sd = 1 / np.sqrt(len(y) + 1 / 9)
    draws = laplace.posterior["mu"].values.ravel()
    reported = exact_sd * np.sqrt(1 + summary["mode_error_ratio_max"] ** 2)
    assert 0.9 * exact_sd < draws.std() < 1.2 * reported
    exact_mean = y.sum() / (len(y) + 1 / 9)
    assert abs(draws.mean() - exact_mean) < 4 * reported
    # q itself is unchanged by sampling from the Laplace posterior.
    again = approx.sample(200, random_seed=1)
    np.testing.assert_array_equal(again.posterior["mu"].values, variational.posterior["mu"].values)
    assert json.loads(variational.posterior.attrs["dp_diagnostics"])["posterior"] == "variational"


def test_dpadvi_sample_names_a_bad_posterior():
    approx, _ = _normal_fit()
    with pytest.raises(ValueError, match=r"`posterior` must be one of \('laplace', 'variational'\)\. Found 'exact'"):
        approx.sample(10, posterior="exact")
