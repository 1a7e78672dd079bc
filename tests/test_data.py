"""Data-layer tests: per-row values reproduce the model's own logp and gradient."""

import numpy as np
import pymc as pm
import pytest
from pymc.blocking import DictToArrayBijection

import pymc_dp.data
from pymc_dp.data import ModelStructureError, RowLikelihood, data_dependent_deterministics

RNG = np.random.default_rng(20261122)
N = 120


def logistic_regression():
    X = RNG.normal(size=(N, 3))
    y = (RNG.random(N) < 1 / (1 + np.exp(-(X @ [1.0, -0.5, 0.2])))).astype("int64")
    with pm.Model(coords={"obs": range(N), "feature": range(3)}) as model:
        Xd = pm.Data("X", X, dims=("obs", "feature"))
        yd = pm.Data("y_obs", y, dims="obs")
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 1, dims="feature")
        pm.Bernoulli("y", logit_p=alpha + Xd @ beta, observed=yd, dims="obs")
        pm.Deterministic("mean_eta", (alpha + Xd @ beta).mean())
        pm.Deterministic("beta_norm", pm.math.sqrt((beta**2).sum()))
    return model


def hierarchical():
    groups = RNG.integers(0, 4, size=N)
    y = RNG.normal(groups * 0.5, 1.0)
    with pm.Model(coords={"obs": range(N), "group": range(4)}) as model:
        g = pm.Data("g", groups, dims="obs")
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfNormal("tau", 2)
        theta = pm.Normal("theta", mu, tau, dims="group")
        sigma = pm.LogNormal("sigma", 0, 1)
        pm.Normal("y", theta[g], sigma, observed=y, dims="obs")
    return model


def hierarchical_numpy():
    """Group index, covariate and observed values as numpy arrays (how most PyMC models are written)."""
    groups = RNG.integers(0, 4, size=N)
    x = RNG.normal(size=N)
    y = RNG.normal(groups * 0.5 + x, 1.0)
    with pm.Model() as model:
        theta = pm.Normal("theta", 0, 2, size=4)
        slope = pm.Normal("slope", 0, 1)
        sigma = pm.LogNormal("sigma", 0, 1)
        pm.Normal("y", theta[groups] + slope * x, sigma, observed=y)
    return model


def two_observed_numpy():
    x = RNG.normal(size=N)
    counts = RNG.poisson(3.0, size=(N, 2))
    with pm.Model() as model:
        m = pm.Normal("m", 0, 3)
        s = pm.HalfNormal("s", 2)
        rate = pm.Gamma("rate", 2, 1)
        pm.Normal("x", m, s, observed=x)
        pm.Poisson("counts", rate, observed=counts)
    return model


def positive_only():
    with pm.Model() as model:
        lam = pm.Exponential("lam", 1.0)
        pm.Exponential("y", lam, observed=RNG.exponential(2.0, size=N))
    return model


MODELS = {
    "logistic_pm_data": (logistic_regression, "index"),
    "hierarchical": (hierarchical, "index"),  # y is a numpy array: indexed too
    "hierarchical_numpy": (hierarchical_numpy, "index"),
    "two_observed_numpy": (two_observed_numpy, "index"),
    "positive_only": (positive_only, "index"),
}


_BUILT: dict[str, tuple] = {}


def _built(name):
    """(model, RowLikelihood, subset mode) of one of MODELS, built once per module (issue 38).

    Compiling the rows (and, on first use, both gradient modes) dominates this module's time:
    the parametrised tests and the single-model tests below share one build per model. Tests
    only read it (a test that replaces an attribute does so through ``monkeypatch``).
    """
    if name not in _BUILT:
        factory, mode = MODELS[name]
        model = factory()
        _BUILT[name] = (model, RowLikelihood(model), mode)
    return _BUILT[name]


@pytest.fixture(scope="module", params=sorted(MODELS))
def built(request):
    return _built(request.param)


def _random_point(model, rows):
    ip = model.initial_point()
    q = DictToArrayBijection.map({v.name: ip[v.name] for v in rows.value_vars})
    theta = q.data + RNG.normal(scale=0.3, size=q.data.shape)
    point = DictToArrayBijection.rmap(q._replace(data=theta))
    return theta, point


def test_rows_plus_prior_reproduce_model_logp_and_gradient(built):
    model, rows, mode = built
    assert rows.n_rows == N and rows.subset_mode == mode
    theta, point = _random_point(model, rows)
    ll = rows.loglik_rows(theta)
    assert ll.shape == (N,)
    # The references are the model's own logp and gradient in PyTensor's FAST_COMPILE build (its ops'
    # Python implementations, no C or Numba compilation: issue 38, these two compiles were most of this
    # test's cold time); the rows under test are compiled as a run compiles them.
    np.testing.assert_allclose(
        ll.sum() + rows.prior_logp(theta), model.compile_logp(mode="FAST_COMPILE")(point), rtol=1e-10
    )
    ll2, jac = rows.loglik_grad_rows(theta)
    _, prior_grad = rows.prior_logp_and_grad(theta)
    assert jac.shape == (N, rows.n_params)
    np.testing.assert_allclose(ll2, ll, rtol=1e-12)
    value_rvs = [model.values_to_rvs[v] for v in rows.value_vars]
    dlogp = model.compile_dlogp(vars=value_rvs, mode="FAST_COMPILE")(point)
    np.testing.assert_allclose(jac.sum(axis=0) + prior_grad, dlogp, rtol=1e-9, atol=1e-9)


def test_subset_equals_slice(built):
    model, rows, _ = built
    theta, _ = _random_point(model, rows)
    idx = np.array([N - 1, 3, 3, 0, 57])
    ll, jac = rows.loglik_grad_rows(theta)
    np.testing.assert_allclose(rows.loglik_rows(theta, idx), ll[idx], rtol=1e-12)
    sub_ll, sub_jac = rows.loglik_grad_rows(theta, idx)
    np.testing.assert_allclose(sub_ll, ll[idx], rtol=1e-12)
    np.testing.assert_allclose(sub_jac, jac[idx], rtol=1e-10, atol=1e-12)
    assert rows.loglik_rows(theta, np.array([], dtype=int)).shape == (0,)
    theta_new, _ = _random_point(model, rows)
    np.testing.assert_allclose(
        rows.loglik_ratio_rows(theta, theta_new, idx),
        rows.loglik_rows(theta_new)[idx] - ll[idx],
        rtol=1e-10,
        atol=1e-12,
    )


def test_a_batch_of_numpy_rows_computes_only_its_rows(monkeypatch):
    # Index mode on numpy constants: a subset never evaluates the all-rows function.
    model, rows, _ = _built("hierarchical_numpy")
    theta, _ = _random_point(model, rows)
    idx = np.array([N - 1, 5, 5, 0])
    ll, jac = rows.loglik_rows(theta), rows.grad_rows(theta)
    assert rows.subset_mode == "index"

    def everything(*args):
        raise AssertionError("a subset evaluated all rows")

    monkeypatch.setattr(rows, "_f_lik", everything)  # restored after the test: the build is shared
    monkeypatch.setattr(rows, "_f_grad_full", everything)
    np.testing.assert_allclose(rows.loglik_rows(theta, idx), ll[idx], rtol=1e-12)
    np.testing.assert_allclose(rows.grad_rows(theta, idx), jac[idx], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rows.loglik_ratio_rows(theta, theta, idx), 0.0, atol=1e-12)


def test_per_row_gradient_matches_closed_form_for_logistic_regression():
    model, rows, _ = _built("logistic_pm_data")
    theta = RNG.normal(size=4)
    X = model["X"].get_value()
    y = model["y_obs"].get_value()
    p = 1 / (1 + np.exp(-(theta[0] + X @ theta[1:])))
    expected = (y - p)[:, None] * np.column_stack([np.ones(N), X])
    np.testing.assert_allclose(rows.loglik_grad_rows(theta)[1], expected, rtol=1e-9, atol=1e-12)


def test_subset_of_parameters_reads_the_others_from_shared_inputs():
    model, full, _ = _built("hierarchical")
    ip = model.initial_point()
    rows = RowLikelihood(model, vars=[model["theta"]])
    assert [v.name for v in rows.value_vars] == ["theta"] and rows.n_params == 4
    theta = np.array([0.1, 0.2, -0.3, 0.4])
    flat = np.concatenate([np.atleast_1d(ip[v.name]) for v in full.value_vars])
    flat[2:6] = theta  # mu, tau_log__, theta[4], sigma_log__
    np.testing.assert_allclose(rows.loglik_rows(theta), full.loglik_rows(flat), rtol=1e-12)


def test_vars_are_sorted_into_model_order():
    model = two_observed_numpy()
    rows = RowLikelihood(model, vars=[model["rate"], model["m"]])
    assert [v.name for v in rows.value_vars] == ["m", "rate_log__"]


def test_data_dependent_deterministics_are_found():
    assert data_dependent_deterministics(logistic_regression()) == ["mean_eta"]


def test_scalar_observed_is_refused_by_name():
    with pm.Model() as model:
        m = pm.Normal("m")
        pm.Normal("total", m, 1, observed=3.0)
    with pytest.raises(ModelStructureError, match="`total`"):
        RowLikelihood(model)


def test_rows_of_different_lengths_are_refused_by_name():
    with pm.Model() as model:
        m = pm.Normal("m")
        pm.Normal("a", m, 1, observed=np.zeros(5))
        pm.Normal("b", m, 1, observed=np.zeros(7))
    with pytest.raises(ModelStructureError, match="`a`: 5, `b`: 7"):
        RowLikelihood(model)


def test_potential_reading_data_is_refused_by_name():
    x = np.arange(10.0)
    with pm.Model() as model:
        m = pm.Normal("m")
        pm.Normal("x", m, 1, observed=x)
        pm.Potential("penalty", -((m - pm.math.constant(x)) ** 2).sum())
    with pytest.raises(ModelStructureError, match="`penalty`"):
        RowLikelihood(model)


def test_data_free_potential_is_part_of_the_prior():
    with pm.Model() as model:
        m = pm.Normal("m")
        pm.Normal("x", m, 1, observed=np.arange(10.0))
        pm.Potential("shrink", -(m**2))
    rows = RowLikelihood(model)
    theta = np.array([0.7])
    assert rows.prior_logp(theta) == pytest.approx(-0.5 * 0.49 - 0.5 * np.log(2 * np.pi) - 0.49)


def test_total_size_is_refused_by_name():
    with pm.Model() as model:
        m = pm.Normal("m")
        pm.Normal("x", m, 1, observed=np.zeros(10), total_size=1000)
    with pytest.raises(ModelStructureError, match=r"`x`.*total_size"):
        RowLikelihood(model)


def test_no_observed_is_refused():
    with pm.Model() as model:
        pm.Normal("m")
    with pytest.raises(ModelStructureError, match="no observed"):
        RowLikelihood(model)


def test_bad_theta_and_rows_name_the_parameter():
    rows = _built("positive_only")[1]
    with pytest.raises(ValueError, match="`theta` must"):
        rows.loglik_rows(np.zeros(3))
    with pytest.raises(ValueError, match="`rows` must"):
        rows.loglik_rows(np.zeros(1), np.array([N]))
    with pytest.raises(ValueError, match="`rows` must"):
        rows.loglik_rows(np.zeros(1), np.array([0.5]))


# -- gradient modes and chunked full-data passes ------------------------------------------------


# Not `hierarchical` (its compile dominated this module, issue 38): in index mode a pm.Data group index
# and a numpy one are both batch inputs of the same gathered graph, and the `theta[g]` gather in both
# modes is checked on tests/test_gradient_mode.py's `hierarchical` (test_both_modes_and_the_chosen_one...).
@pytest.mark.parametrize("name", sorted(set(MODELS) - {"hierarchical"}))
def test_reverse_and_forward_mode_give_the_same_per_row_gradients(name):
    # The chosen mode's matrix (grad_rows, itself checked above against the model's own gradient)
    # and the other mode's, compiled here (only the chosen one is compiled for the choice): they must
    # agree to rounding.
    model, rows, _ = _built(name)
    theta, _ = _random_point(model, rows)
    assert rows.gradient_mode in ("forward", "reverse")
    data = [v.get_value(borrow=True) for v in rows._row_index_vars]
    other = "forward" if rows.gradient_mode == "reverse" else "reverse"
    other_function = rows._compile_batch_grad(other)
    matrices = {rows.gradient_mode: rows.grad_rows(theta), other: other_function(theta, *data)}
    assert matrices["reverse"].shape == matrices["forward"].shape == (N, rows.n_params)
    np.testing.assert_allclose(matrices["reverse"], matrices["forward"], rtol=1e-10, atol=1e-10)


def test_reproducible_rows_choose_the_gradient_mode_without_the_cost_model(monkeypatch):
    # The two modes agree only to rounding, and the cost model's choice may differ between PyTensor
    # backends, so reruns with reproducible noise could differ in their last bits (and a chain then
    # diverge): with reproducible=True "auto" is forward mode and no cost is estimated.
    def estimated(*args, **kwargs):
        raise AssertionError("the gradient mode was chosen by the cost model")

    monkeypatch.setattr(pymc_dp.data, "_graph_cost", estimated)
    rows = RowLikelihood(positive_only(), reproducible=True)
    assert rows.gradient_mode == "forward"
    assert RowLikelihood(positive_only(), reproducible=True, gradient_mode="reverse").gradient_mode == "reverse"


def test_gradient_mode_setting_is_checked():
    with pytest.raises(ValueError, match="`gradient_mode` must be"):
        RowLikelihood(positive_only(), gradient_mode="backward")
    with pytest.raises(ValueError, match="`chunk_bytes` must be"):
        RowLikelihood(positive_only(), chunk_bytes=0)


def test_chunked_clipped_sums_equal_unchunked():
    from pymc_dp.mechanisms import NoisyClippedGradient, NoisyPoissonGradientSum
    from pymc_dp.mechanisms.clipping import clipped_sum_l2

    model, whole, _ = _built("hierarchical_numpy")
    chunked = RowLikelihood(model, chunk_bytes=1)
    assert chunked.chunk_rows == 64 and len(chunked.row_chunks()) == 2 and len(whole.row_chunks()) == 1
    theta, _ = _random_point(model, whole)
    reference = clipped_sum_l2(whole.grad_rows(theta), 0.5)
    tiny = 1e-300  # noise std ≈ 0: the release is the clipped sum
    for rows in (whole, chunked):
        release = NoisyClippedGradient(rows, 0.5, tiny).release(theta, np.random.default_rng(0))
        np.testing.assert_allclose(release, reference, rtol=1e-10, atol=1e-12)
    draws = [np.random.default_rng(1) for _ in range(2)]  # same Poisson batch for both
    maps = [np.eye(whole.n_params)]
    sums = [NoisyPoissonGradientSum(r, 0.5, tiny, 0.9).release(theta, maps, g) for r, g in zip((whole, chunked), draws)]
    np.testing.assert_allclose(sums[1], sums[0], rtol=1e-10, atol=1e-12)
