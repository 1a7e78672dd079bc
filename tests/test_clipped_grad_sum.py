"""The compiled clipped gradient sums (RowLikelihood.clipped_grad_sum) equal the reference computation.

Reference: ``clipped_sum_l2(rows.grad_rows(θ), b)``, the per-row gradient matrix (itself tested
against the model's own gradient in test_data.py) clipped and summed in NumPy. The compiled
path must give the same sum to rounding (rtol 1e-10) on models whose per-row gradient is a
scalar times the row's covariates (the "linear" form, no matrix formed) and on models where
it is not (hierarchical, MvNormal: the per-row matrix of one chunk, in one compiled function),
on all rows, on a subset, on a slice, and chunked through the gradient release.
"""

import numpy as np
import pymc as pm
import pytest
from pymc.blocking import DictToArrayBijection

from pymc_dp.data import RowLikelihood
from pymc_dp.mechanisms import NoisyClippedGradient
from pymc_dp.mechanisms.clipping import clipped_sum_l2

RNG = np.random.default_rng(20261125)
N = 150


def logistic_numpy():
    x = RNG.normal(size=(N, 3))
    y = (RNG.random(N) < 1 / (1 + np.exp(-(x @ [1.0, -0.5, 0.2])))).astype("int64")
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 1, size=3)
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y)
    return model


def logistic_pm_data():
    x = RNG.normal(size=(N, 4))
    y = (RNG.random(N) < 0.4).astype("int64")
    with pm.Model(coords={"obs": range(N), "feature": range(4)}) as model:
        xd = pm.Data("X", x, dims=("obs", "feature"))
        yd = pm.Data("y_obs", y, dims="obs")
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 1, dims="feature")
        pm.Bernoulli("y", logit_p=alpha + xd @ beta, observed=yd, dims="obs")
    return model


def regression_with_extreme_row():
    """Normal regression, σ unknown (log-transformed), one row so far out that its gradient norm overflows."""
    x = RNG.normal(size=(N, 2))
    y = x @ [0.5, -1.0] + RNG.normal(size=N)
    y[7] = 1e200  # ‖∇‖² = inf: the row is left out by both computations
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 1, size=2)
        sigma = pm.LogNormal("sigma", 0, 1)
        pm.Normal("y", alpha + x @ beta, sigma, observed=y)
    return model


def logistic_with_an_infinite_covariate():
    """Row 5 has an infinite covariate: its gradient is not finite, so it is left out (never multiplied by 0)."""
    x = RNG.normal(size=(N, 3))
    x[5, 1] = np.inf
    y = (RNG.random(N) < 0.5).astype("int64")
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 1, size=3)
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y)
    return model


def two_output_regression():
    """Two outputs per row, μᵢ = xᵢ B with B (K × 2): row i's gradient of B is the outer product xᵢ ⊗ gᵢ."""
    x = RNG.normal(size=(N, 3))
    y = x @ RNG.normal(size=(3, 2)) + RNG.normal(size=(N, 2))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, size=(3, 2))
        pm.Normal("y", x @ b, 1.0, observed=y)
    return model


def beta_also_outside_the_product():
    """β is read through X @ β and again on its own: not the linear form (its coordinates overlap)."""
    x = RNG.normal(size=(N, 2))
    y = RNG.normal(size=N)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, size=2)
        pm.Normal("y", x @ beta + beta[0] * y**2 * 0.01, 1.0, observed=y)
    return model


def hierarchical():
    groups = RNG.integers(0, 4, size=N)
    x = RNG.normal(size=N)
    y = RNG.normal(groups * 0.5 + x, 1.0)
    with pm.Model() as model:
        theta = pm.Normal("theta", 0, 2, size=4)
        slope = pm.Normal("slope", 0, 1)
        sigma = pm.LogNormal("sigma", 0, 1)
        pm.Normal("y", theta[groups] + slope * x, sigma, observed=y)
    return model


def mv_normal():
    """MvNormal with an unknown mean and scale: row i's gradient is Σ⁻¹(yᵢ − μ), not a scalar times yᵢ."""
    cov = np.array([[1.0, 0.3, 0.1], [0.3, 2.0, -0.4], [0.1, -0.4, 0.5]])
    y = RNG.multivariate_normal([0.5, -1.0, 2.0], cov, size=N)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 3, size=3)
        scale = pm.HalfNormal("scale", 2)
        pm.MvNormal("y", mu=mu, cov=scale * cov, observed=y)
    return model


MODELS = {
    # Not `logistic_numpy` by default (issue 38: compile-bound): the same numpy Bernoulli linear form
    # is checked on `logistic_with_an_infinite_covariate` (its other rows) and on `logistic_pm_data`.
    "logistic_numpy": (logistic_numpy, "linear"),
    "logistic_pm_data": (logistic_pm_data, "linear"),
    "regression_with_extreme_row": (regression_with_extreme_row, "linear"),
    "logistic_with_an_infinite_covariate": (logistic_with_an_infinite_covariate, "linear"),
    "two_output_regression": (two_output_regression, "linear"),
    "beta_also_outside_the_product": (beta_also_outside_the_product, "matrix"),
    "hierarchical": (hierarchical, "matrix"),
    "mv_normal": (mv_normal, "matrix"),
}
SLOW = {"mv_normal", "logistic_numpy"}  # mv_normal: compiling its per-row gradients in both modes takes ~15 s (PyMC 5)
#: Ignored for the MvNormal only: on PyMC 6 the data layer's forward-mode gradient of its graph has a
#: Blockwise(AllocDiag) that Numba runs in object mode and warns about (slow, not wrong; the values
#: are checked below). Seen on main before this test was added; the data layer does not yet drop it.
_MVN_NUMBA_OBJECT_MODE = pytest.mark.filterwarnings("ignore:Numba will use object mode:UserWarning")


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(name, marks=[pytest.mark.slow, _MVN_NUMBA_OBJECT_MODE]) if name in SLOW else name
        for name in sorted(MODELS)
    ],
)
def built(request):
    factory, kind = MODELS[request.param]
    model = factory()
    # 64-row chunks (the minimum): N = 150 rows make three, so the release below is chunked.
    # The linear form never uses the per-row matrix, which here is only the reference: forward mode
    # (tested equal to reverse in test_data.py and test_gradient_mode.py) spares compiling and probing
    # the reverse form (issue 38). The matrix kinds sum the matrix of the mode chosen by "auto".
    mode = "forward" if kind == "linear" else "auto"
    return request.param, model, RowLikelihood(model, chunk_bytes=1, gradient_mode=mode), kind


def _random_point(model, rows):
    ip = model.initial_point()
    q = DictToArrayBijection.map({v.name: ip[v.name] for v in rows.value_vars})
    return q.data + RNG.normal(scale=0.3, size=q.data.shape)


def _assert_same_sum(got, reference):
    # Sums of N rounded terms: relative 1e-10 of the largest entry (rounding is ~1e-16 per term).
    scale = max(1.0, float(np.max(np.abs(reference))))
    np.testing.assert_allclose(got, reference, rtol=1e-10, atol=1e-10 * scale)


def test_compiled_clipped_sums_equal_the_reference(built):
    name, model, rows, kind = built
    if kind == "linear":
        assert rows.clipped_sum_mode == "linear" and rows.gradient_mode == "forward"
    else:
        assert rows.clipped_sum_mode in ("forward", "reverse")
    theta = _random_point(model, rows)
    with np.errstate(over="ignore", invalid="ignore"):  # inf × 0 in the infinite-covariate row's matrix
        jac = rows.grad_rows(theta)
        norms = np.linalg.norm(jac, axis=1)
    finite = np.isfinite(norms)
    if name == "regression_with_extreme_row":
        assert not finite[7]
    if name == "logistic_with_an_infinite_covariate":
        assert not finite[5]  # the extreme row: its gradient norm overflows, both computations leave it out
    # Bounds that clip most rows, some rows, and none: every branch of the clip rule is used.
    for bound in (0.25 * np.median(norms[finite]), float(np.quantile(norms[finite], 0.8)), np.inf):
        _assert_same_sum(rows.clipped_grad_sum(theta, bound), clipped_sum_l2(jac, bound))
        subset = np.array([3, 0, 77, 149, 3, 12])
        _assert_same_sum(rows.clipped_grad_sum(theta, bound, subset), clipped_sum_l2(jac[subset], bound))
        _assert_same_sum(rows.clipped_grad_sum(theta, bound, slice(20, 90)), clipped_sum_l2(jac[20:90], bound))
    # The gradient release, chunk by chunk (three chunks), with noise std ≈ 0: the clipped sum.
    assert len(rows.row_chunks()) == 3
    bound = float(np.median(norms[finite]))
    release = NoisyClippedGradient(rows, bound, 1e-300).release(theta, np.random.default_rng(0))
    _assert_same_sum(release, clipped_sum_l2(jac, bound))
    with pytest.raises(ValueError, match="`bound` must be a non-negative number"):
        rows.clipped_grad_sum(theta, -1.0)
