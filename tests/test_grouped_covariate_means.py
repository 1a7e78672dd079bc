"""Per-group covariate means in the grouped linear likelihood (issue 34): group covariate shifts no longer bias β.

A simulated grouped linear release whose covariate's group means differ by 0.6 of its within-group sd (eight
groups of 500, intercepts drawn independently of the covariates). The shared-moment likelihood read each group's
Σx through one mean, so the intercepts absorbed β·(shift) and β shrank; with each group's mean latent the cells'
Σx_g inform μ_g instead. The posterior is read by its mode and the curvature there (Laplace), no NUTS; the
comparison with the shared-mean likelihood is `slow` (a second compile), the per-group model's own check runs by
default.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
import pytest

import pymc_dp as pmdp
from pymc_dp.exponential_family import grouped_likelihood
from pymc_dp.exponential_family.regression_likelihoods import gaussian_covariates

TRUE_SLOPE = 0.8


def _release(epsilon: float = 4.0):
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(8), 500)
    x = np.clip(np.linspace(-0.3, 0.3, 8)[groups] + 0.25 * rng.normal(size=groups.size), -1, 1)[:, None]
    intercepts = 0.1 * rng.normal(size=8)  # exchangeable: independent of the covariate's group means
    y = np.clip(intercepts[groups] + TRUE_SLOPE * x[:, 0] + 0.1 * rng.normal(size=groups.size), -1, 1)
    return pmdp.release_statistics(
        "linear_regression", (x, y, groups), n_groups=8, n_features=1, x_bounds=(-1, 1), y_bounds=(-1, 1),
        epsilon=epsilon, random_seed=3, reproducible_noise=True,
    )  # fmt: skip


def _slope_mode_and_sd(release) -> tuple[float, float]:
    """The posterior mode of β and its Laplace sd (−log p's Hessian at the mode, by differences of its gradient)."""
    from pymc.blocking import DictToArrayBijection, RaveledVars
    from scipy.optimize import minimize

    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0.0, 1.0, shape=8)
        release.likelihood("y", alpha=alpha, beta=pm.Normal("beta", 0.0, 1.0, shape=1), sigma=pm.HalfNormal("s", 1))
    start = DictToArrayBijection.map(model.initial_point())
    names = [name for name, *_ in start.point_map_info]
    values = [next(v for v in model.value_vars if v.name == name) for name in names]
    total = model.logp()
    # One compiled function of log p and its gradient (PyTensor's C backend took about 70 s, cold, to compile the
    # four functions compile_logp and compile_dlogp made for the two models on Python 3.11), on PyTensor's C backend
    # on both lines (PyMC 6's default, Numba, took 59 CPU s to compile it on Python 3.12, the C backend 10 s): what
    # is checked is the likelihood's mode and curvature, which do not depend on the backend that evaluates them.
    both = pytensor.function(values, [total, *pytensor.grad(total, values)], mode="CVM")

    def point(x):
        return DictToArrayBijection.rmap(RaveledVars(x, start.point_map_info))

    def logp(p):
        return float(both(*[p[name] for name in names])[0])

    def dlogp(p):
        return np.concatenate([np.ravel(g) for g in both(*[p[name] for name in names])[1:]])

    found = minimize(lambda x: -logp(point(x)), start.data, jac=lambda x: -dlogp(point(x)), method="L-BFGS-B")
    step = 1e-5
    columns = [dlogp(point(found.x + step * e)) - dlogp(point(found.x - step * e)) for e in np.eye(found.x.size)]
    hessian = -np.array(columns) / (2 * step)
    names = [v.name for v in model.value_vars]
    at = sum(int(np.prod(model.initial_point()[n].shape)) for n in names[: names.index("beta")])
    covariance = np.linalg.inv(0.5 * (hessian + hessian.T))
    return float(found.x[at]), float(np.sqrt(covariance[at, at]))


def test_per_group_covariate_means_leave_the_slope_at_the_truth():
    # Per-group means: the mode within 3 Laplace sds of the truth (the rows' own sampling error of β, about
    # 0.1/(0.25·√4000) = 0.006, is a sixth of the release's sd and inside that margin). About 10 CPU s, cold.
    slope, sd = _slope_mode_and_sd(_release())
    assert abs(slope - TRUE_SLOPE) < 3.0 * sd, (slope, sd)


# `slow` (issue 38's test budget): the same check on the likelihood before issue 34 (one shared covariate mean), which
# shows why the per-group means exist, compiles a second large likelihood. By default the per-group model's slope
# (above), its choice and its structure (below) are checked.
@pytest.mark.slow
def test_shifted_group_covariate_means_bias_the_shared_model_and_not_the_per_group_one(monkeypatch):
    release = _release()
    slope, sd = _slope_mode_and_sd(release)
    assert abs(slope - TRUE_SLOPE) < 3.0 * sd, (slope, sd)

    def shared(cell, cells, n_rows, name, position):  # the likelihood before issue 34: one mean for all groups
        return gaussian_covariates(cell, cells.sum(axis=0), n_rows, name, position)

    monkeypatch.setattr(grouped_likelihood, "grouped_gaussian_covariates", shared)
    old_slope, old_sd = _slope_mode_and_sd(release)
    assert old_slope < TRUE_SLOPE - 4.0 * old_sd, (old_slope, old_sd)  # shrunk, many of its own sds
    assert old_slope < slope


@pytest.mark.parametrize("base", ["logistic_regression", "poisson_regression"])
def test_logistic_and_poisson_keep_one_shared_covariate_mean(base):
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(3), 50)
    x = rng.uniform(-1, 1, size=(150, 1))
    y = rng.integers(0, 2, size=150)
    settings = {"y_max": 4} if base == "poisson_regression" else {}
    release = pmdp.release_statistics(
        base, (x, y, groups), n_groups=3, n_features=1, x_bounds=(-1, 1), epsilon=1.0, **settings
    )
    with pm.Model() as model:
        release.likelihood("y", alpha=pm.Normal("alpha", 0, 1, shape=3), beta=pm.Normal("beta", 0, 1, shape=1))
    names = {v.name for v in model.free_RVs}
    assert "y_x_mean_std" in names and not any("group_offset" in n for n in names)


def test_linear_covariates_that_hardly_shift_keep_one_shared_mean_and_shifted_ones_get_their_own():
    rng = np.random.default_rng(2)
    groups = np.repeat(np.arange(6), 300)
    x = rng.uniform(-0.5, 0.5, size=(groups.size, 1))  # the same distribution in every group: shifts are chance
    y = np.clip(0.1 * rng.normal(size=6)[groups] + 0.8 * x[:, 0] + 0.1 * rng.normal(size=groups.size), -1, 1)
    same = pmdp.release_statistics(
        "linear_regression", (x, y, groups), n_groups=6, n_features=1, x_bounds=(-1, 1), y_bounds=(-1, 1),
        epsilon=4.0, random_seed=5, reproducible_noise=True,
    )  # fmt: skip
    for release, per_group in ((same, False), (_release(), True)):
        with pm.Model() as model:
            alpha = pm.Normal("alpha", 0, 1, shape=release.family.n_groups)
            release.likelihood("y", alpha=alpha, beta=pm.Normal("beta", 0, 1, shape=1), sigma=pm.HalfNormal("s", 1))
        assert ("y_x_group_offset" in {v.name for v in model.free_RVs}) is per_group
