"""The grouped release's group sizes integrated out where they lie many noise units above 0 (issue 34, H34m).

A group whose released size n̄_g is at least ``MARGINAL_SIZE_UNITS`` noise units above 0 has its latent size
integrated out in closed form (``grouped_likelihood.marginal_group_sizes``) instead of sampled. The check: at
points within a few posterior sds of the truth, the new log density equals the old one's integral over the latent
size (``{name}_group_size_shift``, whose Jacobian the old density carries), by quadrature, to within the one
approximation (n_g·V_g read as n̄_g·V_g); while plugging n̄_g in for n_g (no integral) is visibly off there.
"""

import math

import numpy as np
import pymc as pm
import pytest
from scipy import special

import pymc_dp.exponential_family.grouped_likelihood as grouped_likelihood
from pymc_dp.exponential_family import release_statistics

#: (group intercepts, slope, σ) near the truth (1.5, −1.0; 0.8; 0.5): moves of about 1–2 posterior sds.
POINTS = [((1.5, -1.0), 0.8, 0.5), ((1.56, -1.04), 0.82, 0.52), ((1.45, -0.95), 0.77, 0.49)]
#: The latent sizes' variable (noise units) where the old density is integrated: its peaks lie within ±3, ~0.6 wide.
GRID = np.linspace(-12.0, 12.0, 241)


def _release(mechanism):
    rng = np.random.default_rng(5)
    groups = np.repeat(np.arange(2), [300, 500])
    x = rng.normal(0.0, 0.7, (800, 1))
    y = np.array([1.5, -1.0])[groups] + 0.8 * x[:, 0] + rng.normal(0.0, 0.5, 800)
    noise = {"mechanism": "gaussian", "delta": 1e-5} if mechanism == "gaussian" else {}
    return release_statistics(
        "linear_regression", (x, y, groups), epsilon=20.0, n_groups=2, n_features=1, x_bounds=([-2.0], [2.0]),
        y_bounds=(-5.0, 5.0), random_seed=3, reproducible_noise=True, **noise,
    )  # fmt: skip


def _log_density(release, units, monkeypatch):
    monkeypatch.setattr(grouped_likelihood, "MARGINAL_SIZE_UNITS", units)
    with pm.Model() as model:
        alpha = pm.Normal("a", 0.0, 2.0, shape=2)
        release.likelihood("lik", alpha=alpha, beta=pm.Normal("b", 0.0, 2.0, shape=1), sigma=pm.HalfNormal("s", 1.0))
    return model, model.compile_logp(mode="FAST_COMPILE")  # a few hundred evaluations: no C compile


def test_integrated_group_sizes_equal_the_latent_sizes_integrated_by_quadrature(monkeypatch):
    # About 7 CPU s (two models in Python mode, ~1,500 evaluations on the grid). Gaussian noise only: Laplace copies
    # keep their latent sizes (measured here: their normal of the same variance was 0.17 nats off).
    release = _release("gaussian")
    latent, latent_logp = _log_density(release, math.inf, monkeypatch)
    integrated, integrated_logp = _log_density(release, 0.0, monkeypatch)
    assert "lik_group_size_shift" in latent.named_vars and "lik_group_size_shift" not in integrated.named_vars
    start = latent.initial_point()
    shift0 = start["lik_group_size_shift"]  # 0: n_g = n̄_g to within s·softplus(−n̄_g/s), n̄_g/s ≥ 38 here
    exact, new, plug_in = [], [], []
    for alpha, beta, sigma in POINTS:
        point = dict(start, a=np.array(alpha), b=np.array([beta]), s_log__=np.array(math.log(sigma)))
        base = float(latent_logp(point))
        total = base
        for g in range(2):  # the groups' sizes enter separately: one 1-D integral each, on a grid (peaks ~0.6 wide)
            logs = []
            for v in GRID:
                shift = shift0.copy()
                shift[g] = v
                logs.append(latent_logp(dict(point, lik_group_size_shift=shift)) - base)
            total += float(special.logsumexp(logs) + math.log(GRID[1] - GRID[0]))
        exact.append(total)
        new.append(integrated_logp({k: v for k, v in point.items() if k != "lik_group_size_shift"}))
        plug_in.append(base)
    exact, new, plug_in = (np.asarray(v) - v[0] for v in (exact, new, plug_in))  # the shape: relative to the first
    # The covariance's n read at n_* (second order): measured 0.01–0.03 nats. Plugging n̄_g in for n_g is 3–7 nats off
    # (the sums pin n_g ~5× tighter than its copy here); reading the covariance at n̄_g instead of n_* was 1 nat off.
    np.testing.assert_allclose(new, exact, atol=0.05)
    assert np.max(np.abs(plug_in - exact)) > 0.3  # the integral matters here: the check can tell them apart


def test_sizes_stay_latent_below_the_threshold_and_are_a_function_of_released_values_only():
    # < 0.1 s, no model compiled: which groups are integrated depends on n̄_g / s alone (public: a released value and
    # the release noise's unit), and a group near 0 keeps its latent size (the cut at n_g > 0 is then material).
    released = np.array([[400.0], [3.0], [np.nan]])
    with pm.Model() as model:  # Gaussian noise of variance 4: s = 2
        _, _, variances = grouped_likelihood.group_sizes(released, 1.0, 4.0, "lik")
    assert model["lik_group_size_shift"].type.shape == (2,)  # the 3-row and the NaN group stay latent
    np.testing.assert_array_equal(variances, [4.0, 0.0, 0.0])  # σ² for the integrated group
    with pm.Model() as model:  # Laplace, b = 2: every size stays latent, far above 0 or not
        _, _, variances = grouped_likelihood.group_sizes(released, 2.0, None, "lik")
    assert model["lik_group_size_shift"].type.shape == (3,) and not variances.any()
    mean, variance, log_c = grouped_likelihood.marginal_group_sizes(np.array([[400.0, 404.0]]), 2.0, None)
    assert mean[0] == 402.0 and variance == 4.0  # two Laplace copies: 2b²/2
    assert log_c == pytest.approx(math.log1p(2.0) - 2.0 - math.log(8.0))  # (1 + |d|/b)e^(−|d|/b)/(4b)
