"""Reproducers of the second review's holes 1 and 2 (issue 33): refusals and failures that depended on rows.

1. Building a step ran a construction probe on every real row: a row-separable model whose
   index is computed from a row (``mu[(x > t) * 2]``) raised exactly when some row exceeded
   t, so uncharged constructions bisected max(x), and PyTensor's message quoted a raw value.
2. After the charge, an error raised by one row's data ended the run (a bit no finite ε
   allows), and the withheld error stayed reachable on ``__context__``.

Each test fails on edd15ad: construction raises for one of two neighbouring data sets, a
run fails for one of them, or the chain holds the withheld text.
"""

from __future__ import annotations

import traceback

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_dp as pmdp
from pymc_dp._errors import withholds_chains
from pymc_dp.data import ModelStructureError, RowLikelihood, evaluate_rowwise

N = 60
SECRET = 41257302  # a value that would appear in PyTensor's IndexError text if rows reached it


def _neighbours() -> tuple[np.ndarray, np.ndarray]:
    """Two data sets differing in one row: every x below 0.5, or row 0 at 0.9."""
    x = np.random.default_rng(3).uniform(0.0, 0.45, N)
    other = x.copy()
    other[0] = 0.9
    return x, other


def _indexed_model(x: np.ndarray, *, as_data: bool, scale: float = 1.0) -> pm.Model:
    """``mu[idx]`` with ``idx = (x > 0.5) * 2`` (``mu`` has two entries) or ``idx = int(x * scale)``."""
    y = np.random.default_rng(4).normal(size=N)
    with pm.Model() as model:
        xs = pm.Data("x", x) if as_data else pt.as_tensor(x)
        mu = pm.Normal("mu", 0.0, 1.0, shape=2)
        idx = pt.cast(xs * scale, "int64") if scale != 1.0 else pt.cast(xs > 0.5, "int64") * 2
        pm.Normal("y", mu[idx], 1.0, observed=y)
    return model


def _group_model(codes: np.ndarray) -> pm.Model:
    """An honest varying-intercept model: ``alpha[group]`` with the codes as numpy constants."""
    y = np.random.default_rng(5).normal(size=N)
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0.0, 1.0, shape=4)
        pm.Normal("y", alpha[codes], 1.0, observed=y)
    return model


@pytest.mark.parametrize("as_data", [False, True], ids=["numpy", "pm.Data"])
@pytest.mark.parametrize("scale", [1.0, 1e8], ids=["threshold", "raw-value-index"])
def test_construction_is_the_same_on_neighbouring_data(as_data, scale):
    """Hole 1: whether a step can be built must not depend on the rows (edd15ad: IndexError for one of them)."""
    for x in _neighbours():
        model = _indexed_model(x, as_data=as_data, scale=scale)
        rows = RowLikelihood(model)  # edd15ad: the probe raised for the data set with row 0 at 0.9
        assert rows.n_rows == N
        pmdp.DPPenaltyMH(model=model, llr_clip=2.0)


def test_a_corrupt_group_code_does_not_refuse_the_model():
    """Hole 1: one group code beyond the groups refused the model before any charge (edd15ad)."""
    codes = np.arange(N) % 4
    corrupt = codes.copy()
    corrupt[7] = 99
    for group in (codes, corrupt):
        pmdp.DPPenaltyMH(model=_group_model(group), llr_clip=2.0)


@pytest.mark.parametrize("as_data", [False, True], ids=["numpy", "pm.Data"])
def test_a_row_whose_index_is_out_of_range_cannot_be_computed(as_data):
    """Holes 1-2: an index read from a row outside its array makes that row NaN, never an error or another row."""
    x, other = _neighbours()
    clean = RowLikelihood(_indexed_model(x, as_data=as_data))
    broken = RowLikelihood(_indexed_model(other, as_data=as_data))
    theta = np.array([0.3, -0.2])
    ll_clean, ll_broken = clean.loglik_rows(theta), broken.loglik_rows(theta)
    assert np.isnan(ll_broken[0]) and not np.isnan(ll_clean).any()
    np.testing.assert_allclose(ll_broken[1:], ll_clean[1:], rtol=1e-12)
    # Each row reads mu[0] here; a wrapped index would have read mu[0] too, so check the value itself.
    np.testing.assert_allclose(ll_clean, -0.5 * np.log(2 * np.pi) - 0.5 * (clean_y() - 0.3) ** 2, rtol=1e-12)


def clean_y() -> np.ndarray:
    return np.random.default_rng(4).normal(size=N)


def _raising(function, holds_row_zero):
    """``function`` made to raise, quoting a value, whenever ``holds_row_zero(args)``: an error from one row's data."""

    def wrapped(*args):
        if holds_row_zero(args):
            raise ValueError(f"index {SECRET} is out of bounds")
        return function(*args)

    return wrapped


def _index_holds_row_zero(args) -> bool:
    return bool(np.any(np.asarray(args[1]) == 0))


def _batch_holds_row_zero(points: int):
    """Whether the gathered row arrays after the first ``points`` arguments hold row 0 (the only x at 0.9)."""
    return lambda args: any(np.any(np.asarray(a) == 0.9) for a in args[points:])


def test_a_row_that_raises_is_a_row_that_cannot_be_computed():
    """Hole 2: a row whose evaluation raises gets NaN (values) or no contribution (clipped sums); the rest exact."""
    x, other = _neighbours()
    clean = RowLikelihood(_indexed_model(x, as_data=True))
    broken = RowLikelihood(_indexed_model(other, as_data=True))
    assert broken.subset_mode == "index" and broken.clipped_sum_mode != "linear"
    theta, theta_new, bound = np.array([0.3, -0.2]), np.array([0.1, 0.4]), 0.5
    # Every compiled function of the data layer raises when its batch holds row 0, as PyTensor does on
    # one row's bad data: the full vector always, the index path by the row index, the batches by value.
    broken._f_lik = _raising(broken._f_lik, lambda args: True)
    broken._f_lik_idx = _raising(broken._f_lik_idx, _index_holds_row_zero)
    broken._f_grad_batch = _raising(broken._f_grad_batch, _batch_holds_row_zero(1))
    broken._f_ratio_batch = _raising(broken._compile_batch_ratio(), _batch_holds_row_zero(2))
    ll_clean, ll_broken = clean.loglik_rows(theta), broken.loglik_rows(theta)
    assert np.isnan(ll_broken[0]) and np.isnan(ll_broken).sum() == 1
    np.testing.assert_allclose(ll_broken[1:], ll_clean[1:], rtol=1e-12)
    subset = np.array([5, 0, 9])
    assert np.isnan(broken.loglik_rows(theta, subset)).tolist() == [False, True, False]
    ratio = broken.loglik_ratio_rows(theta, theta_new, subset)
    assert np.isnan(ratio).tolist() == [False, True, False]
    np.testing.assert_allclose(ratio[[0, 2]], clean.loglik_ratio_rows(theta, theta_new, subset)[[0, 2]], rtol=1e-12)
    grads = broken.grad_rows(theta)
    assert np.isnan(grads[0]).all() and not np.isnan(grads[1:]).any()
    np.testing.assert_allclose(grads[1:], clean.grad_rows(theta)[1:], rtol=1e-12)
    # The clipped sum leaves the row out: the clean sum less row 0's clipped gradient.
    row0 = clean.grad_rows(theta, np.array([0]))[0]
    row0_clipped = row0 * min(1.0, bound / np.linalg.norm(row0))
    np.testing.assert_allclose(
        broken.clipped_grad_sum(theta, bound), clean.clipped_grad_sum(theta, bound) - row0_clipped, rtol=1e-10
    )


def test_evaluate_rowwise_isolates_exactly_the_failing_rows():
    """The halving finds every failing row among many, per-row and summed."""
    bad = {3, 4, 17, 63}

    def per_row(values):
        if bad & set(values.tolist()):
            raise ValueError(f"row {SECRET}")
        return values.astype(float) * 2.0

    def summed(values):
        return per_row(values).sum(keepdims=True)

    rows = np.arange(64)
    out = evaluate_rowwise(per_row, [], [rows], tail=(), summed=False)
    assert set(np.flatnonzero(np.isnan(out)).tolist()) == bad
    good = np.array(sorted(set(range(64)) - bad))
    np.testing.assert_array_equal(out[good], good * 2.0)
    total = evaluate_rowwise(summed, [], [rows], tail=(1,), summed=True)
    assert total[0] == pytest.approx(2.0 * good.sum())


def test_a_run_does_not_fail_on_one_row():
    """Hole 2: the run with the corrupt row returns a result priced as its neighbour's (edd15ad: it failed)."""
    spent = []
    for x in _neighbours():
        model = _indexed_model(x, as_data=True)
        idata = pmdp.sample(
            step=pmdp.DPPenaltyMH(model=model, llr_clip=2.0),
            model=model,
            epsilon=1.0,
            delta=1e-6,
            draws=20,
            tune=10,
            chains=1,
            init="prior",
            progressbar=False,
            random_seed=1,
        )
        assert np.isfinite(idata.posterior["mu"].values).all()
        spent.append(idata.posterior.attrs["dp_epsilon"])
    assert spent[0] == spent[1]


def _chain_text(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)) + repr(error.__context__) + repr(error.__cause__)


def _quoting_sample(*args, **kwargs):
    raise ValueError(f"Initial evaluation failed: dp_ops_tempering = {SECRET}.5")


def test_withheld_error_leaves_no_chain_from_sample(monkeypatch):
    """Hole 2: ``PrivateRunError(...) from None`` kept the original on ``__context__`` (edd15ad)."""
    model = _indexed_model(_neighbours()[0], as_data=True)
    step = pmdp.DPPenaltyMH(model=model, llr_clip=2.0)
    monkeypatch.setattr(pm, "sample", _quoting_sample)
    with pytest.raises(pmdp.PrivateRunError) as caught:
        pmdp.sample(step=step, model=model, epsilon=1.0, delta=1e-6, draws=5, tune=5, chains=1, init="prior")
    assert caught.value.__context__ is None and caught.value.__cause__ is None
    assert str(SECRET) not in _chain_text(caught.value)


def test_withheld_error_leaves_no_chain_from_one_posterior_sample(monkeypatch):
    """Hole 2: the reviewer read one-posterior sampling's exact tempering value on the chain (edd15ad)."""
    y = np.random.default_rng(6).normal(size=N)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu, 1.0, observed=y)
    monkeypatch.setattr(pm, "sample", _quoting_sample)
    with pytest.raises(pmdp.PrivateRunError) as caught:
        pmdp.one_posterior_sample(model, epsilon=1.0, loglik_bounds=(-10.0, 0.0), tune=5)
    assert caught.value.__context__ is None and caught.value.__cause__ is None
    assert str(SECRET) not in _chain_text(caught.value)


def test_withholds_chains_drops_only_suppressed_contexts():
    """``raise ... from None`` contexts are dropped at the entry point; shown chains are kept."""

    @withholds_chains
    def withheld():
        try:
            raise ValueError(str(SECRET))
        except ValueError:
            raise ModelStructureError("withheld") from None

    @withholds_chains
    def shown():
        try:
            raise KeyError("public")
        except KeyError as error:
            raise RuntimeError("shown") from error

    with pytest.raises(ModelStructureError) as caught:
        withheld()
    assert caught.value.__context__ is None
    with pytest.raises(RuntimeError) as kept:
        shown()
    assert isinstance(kept.value.__cause__, KeyError)


def test_one_posterior_sample_does_not_fail_on_one_row():
    """Hole 2 in one-posterior sampling: NUTS on the tempered likelihood raised on the corrupt row (edd15ad)."""
    for x in _neighbours():
        model = _indexed_model(x, as_data=True)
        idata = pmdp.one_posterior_sample(model, epsilon=1.0, loglik_bounds=(-10.0, 0.0), tune=20)
        assert np.isfinite(idata.posterior["mu"].values).all()
