"""The JAX backend: the same releases, sampler and accounting as the default backend, on CPU JAX.

Equivalence: on the same θ and rows the clipped sums equal the default backend's to 1e-10
(float64); with ``reproducible_noise=True`` and one seed, ``pmdp.sample(backend="jax")``
draws what the default backend draws, with the same accountant record. Limit: with the
noise → 0 and no clipping the JAX backend's chains have the conjugate posterior's moments
within Monte Carlo standard errors. GPU tests run only where JAX sees a GPU.
"""

import json
import math
import subprocess
import sys
import warnings

import numpy as np
import pymc as pm
import pytest

jax = pytest.importorskip("jax")

import pymc_dp as pmdp  # noqa: E402
from pymc_dp.backends.jax_rows import (  # noqa: E402
    BufferedSecureNoise,
    JaxClippedGradient,
    JaxLogLikelihoodRatio,
    JaxRowMechanisms,
)
from pymc_dp.data import RowLikelihood  # noqa: E402
from pymc_dp.mechanisms import NoisyClippedGradient, NoisyLogLikelihoodRatio, RowMechanisms  # noqa: E402
from pymc_dp.mechanisms.clipping import clip_values, clipped_sum_l2  # noqa: E402

RTOL = 1e-10


def _gpu_present() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def requires_gpu(test):
    """Marked ``gpu`` (select with ``-m gpu``) and skipped where JAX sees no GPU."""
    return pytest.mark.gpu(pytest.mark.skipif(not _gpu_present(), reason="needs a GPU visible to JAX")(test))


def _zoo():
    """Models of the per-row graphs' kinds: a GLM with two observed variables, a dense MvNormal, invalid rows."""
    rng = np.random.default_rng(0)
    n = 601
    x = rng.normal(size=(n, 3))
    with pm.Model() as glm:  # two observed variables sharing rows, numpy covariates, a positive parameter
        beta = pm.Normal("beta", 0, 2, shape=3)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Bernoulli("y", logit_p=x @ beta, observed=rng.integers(0, 2, size=n))
        pm.Normal("z", x[:, 0] * beta[0], sigma, observed=rng.normal(size=n))
    a = rng.normal(size=(4, 4))
    with pm.Model() as mvnormal:  # pm.Data rows, a triangular solve per row
        data = pm.Data("data", rng.normal(size=(n, 4)))
        mean = pm.Normal("mean", 0, 3, shape=4)
        pm.MvNormal("obs", mean, cov=a @ a.T + 4 * np.eye(4), observed=data)
    y = np.abs(rng.normal(size=n))
    y[5] = -1.0  # outside the support: that row's log-likelihood is −∞ at every θ
    with pm.Model() as invalid:
        lam = pm.LogNormal("lam", 0, 1)
        pm.Exponential("y", lam, observed=y)
    return {"glm": glm, "mvnormal": mvnormal, "invalid": invalid}


ZOO = _zoo()
_ROWS: dict[str, RowLikelihood] = {}


def _rows(name: str) -> RowLikelihood:
    """One data layer per model for the whole module (each JAX backend built on it compiles its own graphs)."""
    if name not in _ROWS:
        _ROWS[name] = RowLikelihood(ZOO[name])
    return _ROWS[name]


@pytest.fixture(scope="module", params=sorted(ZOO))
def rows_pair(request):
    rows = _rows(request.param)
    device = JaxRowMechanisms(RowMechanisms(rows), reproducible_noise=True, chunk_rows=256).device_rows
    return rows, device


@pytest.fixture(scope="module")
def glm_whole():
    """The GLM's rows on the device in one chunk, float64."""
    return JaxRowMechanisms(RowMechanisms(_rows("glm")), reproducible_noise=True).device_rows


def _points(rows):
    theta = np.asarray(rows.prior.initial_theta) + 0.3
    return theta, theta + 0.05 * np.arange(1, theta.size + 1) / theta.size


def test_a_linear_predictor_gives_the_clipped_sum_without_the_per_row_matrix():
    # Logistic regression: the clipped sum comes from the linear predictor's per-row pieces (the data
    # layer's "linear" form), the padding of the last chunk left out; equal to the default backend's.
    rng = np.random.default_rng(5)
    x = rng.normal(size=(601, 3))
    x[7] = 40.0  # a row far out: clipped
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0, 2)
        beta = pm.Normal("beta", 0, 2, shape=3)
        pm.Bernoulli("y", logit_p=intercept + x @ beta, observed=rng.integers(0, 2, size=601))
    rows = RowLikelihood(model)
    device = JaxRowMechanisms(RowMechanisms(rows), reproducible_noise=True, chunk_rows=256).device_rows
    assert device.gradient_mode == "linear" and rows.clipped_sum_mode == "linear"
    assert device.n_rows % device.chunk_rows != 0  # a padded last chunk
    theta, _ = _points(rows)
    for bound in (0.5, 3.0, 1e6):
        np.testing.assert_allclose(
            device.noisy_gradient_sum(theta, bound, 0.0, np.zeros(rows.n_params)),
            rows.clipped_grad_sum(theta, bound),
            rtol=1e-10,
            atol=1e-10,
        )
    assert _rows("mvnormal") is not None
    assert JaxRowMechanisms(RowMechanisms(_rows("mvnormal")), chunk_rows=256).device_rows.gradient_mode == "reverse"


def test_the_linear_form_computes_the_row_pieces_once_and_leaves_out_a_row_with_a_non_finite_covariate():
    # The device keeps A (here the covariates) and ‖Aᵢ‖² beside the rows, computed once per run; a row whose
    # covariates are not finite has a non-finite norm there and is left out of every clipped sum, as on the
    # default backend (where its zero weight never multiplies the non-finite row).
    rng = np.random.default_rng(8)
    x = rng.normal(size=(300, 2))
    x[11, 1] = np.inf
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2, shape=2)
        pm.Poisson("y", mu=pm.math.exp(x @ beta * 0.1), observed=rng.poisson(1.0, size=300))
    rows = RowLikelihood(model)
    device = JaxRowMechanisms(RowMechanisms(rows), reproducible_noise=True, chunk_rows=128).device_rows
    assert device.gradient_mode == "linear"
    assert len(device._data) == device._n_row_inputs + 2  # the rows, then A and ‖Aᵢ‖²
    a, squares = (np.asarray(p).reshape(-1, *np.shape(p)[2:])[: rows.n_rows] for p in device._data[-2:])
    assert not np.isfinite(squares[11]) and np.all(a[11] == 0.0)
    np.testing.assert_allclose(np.delete(squares, 11), np.delete((x**2).sum(axis=1), 11), rtol=1e-12)
    theta = np.array([0.3, -0.2])
    for bound in (0.5, 1e6):
        expected = rows.clipped_grad_sum(theta, bound)
        assert np.all(np.isfinite(expected))
        np.testing.assert_allclose(
            device.noisy_gradient_sum(theta, bound, 0.0, np.zeros(2)), expected, rtol=1e-10, atol=1e-10
        )


def test_clipped_gradient_sums_equal_the_default_backend(rows_pair):
    rows, device = rows_pair
    assert device.n_chunks == 3  # 601 rows in chunks of 256: the last one padded (and masked)
    theta, _ = _points(rows)
    for bound in (0.05, 0.7, 1e6):  # mostly clipped, some clipped, none clipped
        reference = clipped_sum_l2(rows.grad_rows(theta), bound)
        released = device.noisy_gradient_sum(theta, bound, 0.0, np.zeros(rows.n_params))
        np.testing.assert_allclose(released, reference, rtol=RTOL, atol=RTOL * np.abs(reference).max())


def test_clipped_ratio_sums_equal_the_default_backend(rows_pair):
    rows, device = rows_pair
    theta, proposal = _points(rows)
    with np.errstate(invalid="ignore"):  # −∞ − (−∞) on the invalid row: NaN, clipped to −bound
        ratios = rows.loglik_rows(proposal) - rows.loglik_rows(theta)
    for bound in (1e-4, 0.05, 1e6):
        released, _ = device.noisy_ratio_sum(proposal, device.loglik(theta), bound, 0.0, 0.0)
        reference = float(np.sum(clip_values(ratios, bound)))
        assert released == pytest.approx(reference, rel=RTOL, abs=RTOL * rows.n_rows * bound)


def test_one_row_changes_only_its_own_terms_on_the_device(rows_pair):
    # The row-independence probe of the data layer, run on the compiled JAX functions: replacing row 3
    # (of the first chunk) moves row 3's log-likelihood only, and the clipped gradient sum by at most
    # the substitute sensitivity 2b.
    rows, device = rows_pair
    theta, _ = _points(rows)
    changed = tuple(chunks.at[0, 3].set(chunks[0, 10]) for chunks in device._data)
    before = np.asarray(device._f_loglik(device._theta(theta), device._data))
    after = np.asarray(device._f_loglik(device._theta(theta), changed))
    moved = ~np.isclose(before, after, rtol=1e-14, atol=0, equal_nan=True)
    assert moved[0, 3] and moved.sum() == 1
    for bound in (0.05, 0.7):
        sums = [
            np.asarray(device._f_gradient_sum(device._theta(theta), np.float64(bound), data, device._mask))
            for data in (device._data, changed)
        ]
        assert np.linalg.norm(sums[1] - sums[0]) <= 2 * bound * (1 + 1e-12)


def test_one_chunk_and_many_chunks_agree(glm_whole):
    rows, whole = _rows("glm"), glm_whole
    assert whole.n_chunks == 1
    parts = JaxRowMechanisms(RowMechanisms(rows), reproducible_noise=True, chunk_rows=100).device_rows
    theta, _ = _points(rows)
    np.testing.assert_allclose(
        whole.noisy_gradient_sum(theta, 0.5, 0.0, np.zeros(4)),
        parts.noisy_gradient_sum(theta, 0.5, 0.0, np.zeros(4)),
        rtol=RTOL,
    )


def test_releases_are_the_default_mechanisms_with_the_same_noise(glm_whole):
    rows = _rows("glm")
    default = RowMechanisms(rows)
    theta, proposal = _points(rows)
    llr = JaxLogLikelihoodRatio(glm_whole, 0.5, 2.0, "substitute")  # noise=None: the generator passed
    grad = JaxClippedGradient(glm_whole, 0.8, 3.0, "add_remove")
    assert isinstance(llr, NoisyLogLikelihoodRatio) and isinstance(grad, NoisyClippedGradient)  # same events
    reference_llr = default.log_likelihood_ratio(0.5, 2.0, "substitute")
    reference_grad = default.clipped_gradient(0.8, 3.0, "add_remove")
    assert grad.std == reference_grad.std == 3.0 * 0.8
    noisy, std = llr.release(theta, proposal, np.random.default_rng(4))
    expected, expected_std = reference_llr.release(theta, proposal, np.random.default_rng(4))
    assert std == expected_std and noisy == pytest.approx(expected, rel=RTOL)
    np.testing.assert_allclose(
        grad.release(theta, np.random.default_rng(5)),
        reference_grad.release(theta, np.random.default_rng(5)),
        rtol=RTOL,
    )
    # a move of length 0 releases the data-free 0 without a draw, as the default mechanism does
    generator = np.random.default_rng(6)
    state = generator.bit_generator.state
    assert llr.release(theta, theta, generator) == (0.0, 0.0)
    assert generator.bit_generator.state == state


def test_full_data_barker_release_is_the_default_mechanism_with_the_same_noise(rows_pair):
    # Across the zoo (invalid rows included): z = t Σ clip(rᵢ, ±B) + N(0, C), the same standard normal drawn
    # from the same generator; the cached current point gives the same value after an accepted move.
    from pymc_dp.backends.jax_rows import JaxBarkerStatistic
    from pymc_dp.mechanisms.barker import NoisyBarkerStatistic

    rows, device = rows_pair
    settings = dict(correction_variance=2.0, llr_clip=0.05, likelihood_scale=0.7)
    on_device = JaxBarkerStatistic(device, **settings)
    reference = NoisyBarkerStatistic(rows, **settings)
    theta, proposal = _points(rows)
    for start, end, seed in [(theta, proposal, 1), (proposal, theta, 2), (proposal, proposal * 0.9, 3)]:
        released = on_device.release(start, end, np.random.default_rng(seed))
        assert released == pytest.approx(reference.release(start, end, np.random.default_rng(seed)), rel=RTOL)
    device_mechanisms = JaxRowMechanisms(RowMechanisms(_rows("glm")), reproducible_noise=False)
    assert isinstance(device_mechanisms.barker_statistic(**settings)._noise, BufferedSecureNoise)


def test_subsampled_barker_release_is_the_default_mechanism_with_the_same_batch_and_noise(rows_pair):
    # Eq. 18 across the zoo (invalid rows included): the same secret batch of b distinct rows and the same
    # normal, drawn in the same order from the same generator; z = N₀ r̄ + N(0, C − s²) to 1e-10.
    from pymc_dp.backends.jax_rows import JaxBarkerStatistic
    from pymc_dp.mechanisms.barker import NoisyBarkerStatistic

    rows, device = rows_pair
    settings = dict(correction_variance=2.0, llr_clip=0.01, likelihood_scale=40.0, batch_size=50)
    on_device = JaxBarkerStatistic(device, **settings)
    reference = NoisyBarkerStatistic(rows, **settings)
    theta, proposal = _points(rows)
    released = []
    for start, end, seed in [(theta, proposal, 1), (proposal, theta, 2), (proposal, proposal * 0.9, 3)]:
        generator, reference_generator = np.random.default_rng(seed), np.random.default_rng(seed)
        released.append(on_device.release(start, end, generator))
        assert released[-1] == pytest.approx(reference.release(start, end, reference_generator), rel=RTOL)
        assert generator.bit_generator.state == reference_generator.bit_generator.state  # the same draws
    assert len(set(released)) == 3
    device_mechanisms = JaxRowMechanisms(RowMechanisms(_rows("glm")), reproducible_noise=False)
    assert isinstance(device_mechanisms.barker_statistic(**settings)._noise, BufferedSecureNoise)


def test_default_noise_comes_from_os_entropy_not_the_step_generator():
    rows = _rows("invalid")
    device = JaxRowMechanisms(RowMechanisms(rows), reproducible_noise=False)
    assert isinstance(device._noise, BufferedSecureNoise)
    grad = device.clipped_gradient(0.8, 1.0, "substitute")
    theta, _ = _points(rows)
    first = grad.release(theta, np.random.default_rng(1))
    second = grad.release(theta, np.random.default_rng(1))  # the same seeded generator: ignored
    assert not np.array_equal(first, second)
    # the noise is N(0, σ²): 2,000 releases at one θ, residuals against the noise-free sum
    clipped = device.device_rows.noisy_gradient_sum(theta, 0.8, 0.0, np.zeros(1))
    z = (np.array([grad.release(theta, None) for _ in range(2000)]) - clipped).ravel() / grad.std
    assert abs(z.mean()) * math.sqrt(z.size) < 4.0
    assert abs(z.var() - 1.0) < 4.0 * math.sqrt(2.0 / z.size)


def test_float32_opt_in_is_close_to_float64(glm_whole):
    rows, f64 = _rows("glm"), glm_whole
    f32 = JaxRowMechanisms(RowMechanisms(rows), reproducible_noise=True, dtype="float32").device_rows
    theta, proposal = _points(rows)
    exact = f64.noisy_gradient_sum(theta, 0.7, 0.0, np.zeros(4))
    low = f32.noisy_gradient_sum(theta, 0.7, 0.0, np.zeros(4))
    assert low.dtype == np.float64  # the noise is added in float64
    assert np.max(np.abs(low - exact)) / np.max(np.abs(exact)) < 1e-5  # float32: ε_mach ≈ 6e-8
    assert not np.array_equal(low, exact)  # float32 was used
    ratio64, _ = f64.noisy_ratio_sum(proposal, f64.loglik(theta), 0.01, 0.0, 0.0)
    ratio32, _ = f32.noisy_ratio_sum(proposal, f32.loglik(theta), 0.01, 0.0, 0.0)
    assert abs(ratio32 - ratio64) < 1e-3 * rows.n_rows * 0.01


@pytest.fixture(scope="module")
def normal_mean():
    y = np.random.default_rng(7).normal(0.5, 1.0, size=300)
    with pm.Model() as model:
        m = pm.Normal("m", 0, 10)
        pm.Normal("y", m, 1.0, observed=y)
    return model, y


RUN = dict(epsilon=5.0, delta=1e-6, draws=30, tune=20, chains=2, random_seed=3, progressbar=False)


@pytest.mark.parametrize("name", ["DPPenaltyMH", "DPHMC", "DPBarkerMH-full", "DPBarkerMH"])
def test_the_step_contract_holds_on_jax_with_the_default_backends_draws_and_accounting(name):
    # tests/test_contract.py's model (a location and a log-transformed scale) and steps, on both backends.
    from test_contract import STEPS, _documented_stats, _numbers_in

    data = np.random.default_rng(2024).normal(0.3, 1.0, size=120) + 1e-7 * np.pi
    with pm.Model() as model:
        m = pm.Normal("m", 0, 10)
        s = pm.HalfNormal("s", 2)
        pm.Normal("y", m, s, observed=data)
    # The subsampled DPBarkerMH's ε is set by N, b, T and the iterations (test_contract.py runs it without a target).
    run = {k: v for k, v in RUN.items() if k != "epsilon"} if name == "DPBarkerMH" else RUN
    # Every step starts from prior draws (a DPADVI start cost a third of the run; its agreement across the
    # backends is test_dpadvi_on_jax_fits_what_the_default_backend_fits_with_the_same_accounting's).
    run = {**run, "init": "prior"}
    runs = {}
    for backend in ("default", "jax"):
        with model:
            step = STEPS[name](model, data, reproducible_noise=True)
            runs[backend] = pmdp.sample(step=step, backend=backend, **run)
    default, on_jax = runs["default"], runs["jax"]
    assert set(on_jax.sample_stats.data_vars) == set(type(step).stats_dtypes_shapes) == _documented_stats(type(step))
    assert not np.isin(np.fromiter(_numbers_in(on_jax), dtype=float), data).any(), "a raw data value leaked"
    for var in ("m", "s"):
        np.testing.assert_allclose(on_jax.posterior[var].values, default.posterior[var].values, rtol=1e-8)
    np.testing.assert_array_equal(on_jax.sample_stats["dp_accepted"].values, default.sample_stats["dp_accepted"].values)
    assert on_jax.posterior.attrs["dp_epsilon"] == default.posterior.attrs["dp_epsilon"] <= run.get("epsilon", np.inf)
    record, reference = (json.loads(r.posterior.attrs["dp_accountant"]) for r in (on_jax, default))
    backend = record.pop("backend")
    assert backend["name"] == "jax" and backend["dtype"] == "float64" and backend["device"] == "cpu"
    assert "backend" not in reference
    # neither run centres; the reasons may differ (a JAX backend is one of them)
    assert not record.pop("centring", {}).get("used") and not reference.pop("centring", {}).get("used")
    assert record == reference  # identical accounting: events, ε, μ, steps' settings, versions
    assert pmdp.privacy_spent(on_jax).epsilon == on_jax.posterior.attrs["dp_epsilon"]


def test_private_clip_bound_and_float32_run_and_the_step_gets_its_mechanisms_back(normal_mean):
    model, _ = normal_mean
    with model:
        step = pmdp.DPHMC(n_leapfrog=2)  # clip bounds "auto": released on the host, then used on the device
        before = step._row_mechanisms
        idata = pmdp.sample(step=step, backend=pmdp.JaxBackend(dtype="float32"), **{**RUN, "draws": 5, "tune": 5})
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    assert record["backend"]["dtype"] == "float32" and record["backend"]["noise"].startswith("os.urandom")
    assert record["clip_bound"]["bounds"]["grad_clip"] > 0
    assert step._row_mechanisms is before and step._llr_mechanism is None and step._grad_mechanism is None


@pytest.mark.parametrize(
    ("backend", "extra", "message"),
    [
        ("numpyro", {}, "`backend` must be 'default', 'jax', a pymc_dp.JaxBackend or a pymc_dp.DaskBackend. Found 'n"),
        ("jax", {"cores": 2}, "`cores` must be 1 with `backend`='jax'"),
    ],
)
def test_bad_backend_settings_are_refused_before_any_charge(normal_mean, backend, extra, message):
    model, y = normal_mean
    budget = pmdp.PrivacyBudget(epsilon=10.0, delta=1e-6, n_rows=y.size)
    with model, pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pmdp.sample(step=pmdp.DPPenaltyMH(llr_clip=3.0), backend=backend, budget=budget, **RUN, **extra)
    assert budget.spent().epsilon == 0.0


def test_steps_the_backend_does_not_run_are_refused(normal_mean):
    model, _ = normal_mean
    with model, pytest.raises(ValueError, match="`backend`='jax' runs one DPPenaltyMH, DPHMC or DPBarkerMH step"):
        pmdp.sample(step=pmdp.DPMultiOwnerPenaltyMH(owners=np.arange(300) % 3, llr_clip=2.0), backend="jax", **RUN)
    with pytest.raises(ValueError, match="`dtype` must be one of"):
        pmdp.JaxBackend(dtype="float16")
    with pytest.raises(ValueError, match=r"`whole_transition` must be a bool\. Found 'yes'"):
        pmdp.JaxBackend(whole_transition="yes")
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match=rf"`scan_iterations` must be a positive integer\. Found {bad!r}"):
            pmdp.JaxBackend(scan_iterations=bad)
    assert pmdp.JaxBackend(scan_iterations=np.int64(8)).scan_iterations == 8


def test_dphmc_blocks_in_lax_scan_give_the_one_call_chain(normal_mean, monkeypatch):
    # Blocks of K iterations (accept/reject on the device) draw the step's generator and the noise in the
    # one-call transition's order: with reproducible noise, the same chain, statistics and ε, for blocks that
    # divide the draws and blocks longer than the draws left. Tuning (25 iterations, mass-matrix windows of 10 and
    # then 20) runs in blocks cut at each window's end and at the end of tuning, the dual averaging of η on
    # the device; the host replays it from the returned acceptance probabilities. The last block stops at the
    # run's last draw (pmdp.sample tells the step the run's length): it draws nothing past it, so the chain's
    # generator ends where one call per iteration leaves it.
    calls = _counted_kernel_calls(monkeypatch)
    model, _ = normal_mean
    runs, counts, generators = {}, {}, {}
    for scan in (1, 7, 30, 64):
        with model:
            step = pmdp.DPHMC(
                grad_clip=3.0,
                llr_clip=3.0,
                n_leapfrog=3,
                step_size_jitter=0.3,
                adapt_mass_window=10,
                reproducible_noise=True,
            )
        before = dict(calls)
        runs[scan] = pmdp.sample(
            step=step,
            backend=pmdp.JaxBackend(scan_iterations=scan),
            model=model,
            init="prior",
            discard_tuned_samples=False,
            **{**RUN, "tune": 25},
        )
        counts[scan] = (calls["count"] - before["count"], calls["tuning"] - before["tuning"])
        generators[scan] = (step.rng.bit_generator.state, step.noise_rng.bit_generator.state)
        assert not step._block_pending  # the unused end of the last block is dropped with the run
        assert step.planned_tune is None and step.planned_draws is None  # the run's length is not kept
        record = json.loads(runs[scan].posterior.attrs["dp_accountant"])
        assert record["backend"]["scan_iterations"] == scan
    # Blocks per chain (all, tuning): tuning 7 + 3 and 7 + 7 + 1 (K = 7) or 10 and 15, then ⌈draws / K⌉.
    assert counts == {1: (0, 0), 7: (2 * 10, 2 * 5), 30: (2 * 3, 2 * 2), 64: (2 * 3, 2 * 2)}
    tuned = runs[1].sample_stats["dp_step_size"].values
    assert np.unique(tuned[0]).size > 1  # jittered around the tuned η
    for scan in (7, 30, 64):
        np.testing.assert_allclose(runs[scan].posterior["m"].values, runs[1].posterior["m"].values, rtol=1e-10)
        np.testing.assert_array_equal(runs[scan].sample_stats["dp_accepted"], runs[1].sample_stats["dp_accepted"])
        for stat in ("dp_noisy_llr", "dp_step_size", "dp_accept"):
            np.testing.assert_allclose(
                runs[scan].sample_stats[stat], runs[1].sample_stats[stat], rtol=1e-10, atol=1e-12
            )
        np.testing.assert_array_equal(
            runs[scan].sample_stats["dp_mu_cumulative"], runs[1].sample_stats["dp_mu_cumulative"]
        )
        assert runs[scan].posterior.attrs["dp_epsilon"] == runs[1].posterior.attrs["dp_epsilon"]
        _assert_same_tuning(runs[scan], runs[1], ("dp_noisy_llr", "dp_step_size", "dp_accept"), rtol=1e-10)
        assert generators[scan] == generators[1]  # nothing drawn for iterations past the last draw


def _assert_same_tuning(run, reference, stats, rtol: float):
    """The tuning iterations (kept with ``discard_tuned_samples=False``) of ``run`` are ``reference``'s."""
    np.testing.assert_allclose(run.warmup_posterior["m"].values, reference.warmup_posterior["m"].values, rtol=rtol)
    np.testing.assert_array_equal(run.warmup_sample_stats["dp_accepted"], reference.warmup_sample_stats["dp_accepted"])
    for stat in stats:
        np.testing.assert_allclose(
            run.warmup_sample_stats[stat], reference.warmup_sample_stats[stat], rtol=rtol, atol=1e-10
        )


def _counted_kernel_calls(monkeypatch) -> dict:
    """Count the device calls of the samplers' kernels: blocks (``count``; ``tuning``: DPHMC's adaptive
    kernel) and one-iteration calls (``one_call``)."""
    from pymc_dp.backends.jax_rows import JaxRows
    from pymc_dp.step_methods import kernels

    calls = {"count": 0, "tuning": 0, "one_call": 0}
    build = JaxRows._build_kernel_iterations

    def counted(self, prior, kernel, releases, iterations, static, shapes):
        device = build(self, prior, kernel, releases, iterations, static, shapes)

        def call(*args):
            if iterations == 1:
                calls["one_call"] += 1
            else:
                calls["count"] += 1
                calls["tuning"] += int(kernel is kernels.adaptive_hmc_kernel)
            return device(*args)

        return call

    monkeypatch.setattr(JaxRows, "_build_kernel_iterations", counted)
    return calls


def test_dppenaltymh_blocks_in_lax_scan_give_the_one_call_chain(normal_mean, monkeypatch):
    # The penalty step's blocks: proposals and log U from the step's generator, the ratio's normals from the
    # noise source, drawn per block in the one-call order; the same chain as one call per iteration and as
    # the default backend (with reproducible noise), the same ε. Tuning (25 iterations, the proposal scale
    # changed every 10) runs in blocks cut at each interval's end and at the end of tuning.
    calls = _counted_kernel_calls(monkeypatch)
    model, _ = normal_mean
    run = {**RUN, "tune": 25, "discard_tuned_samples": False}
    runs, counts = {}, {}
    for scan in (1, 7, 64, "default"):
        with model:
            step = pmdp.DPPenaltyMH(llr_clip=3.0, tune_interval=10, reproducible_noise=True)
        backend = "default" if scan == "default" else pmdp.JaxBackend(scan_iterations=scan)
        before = calls["count"]
        runs[scan] = pmdp.sample(step=step, backend=backend, model=model, init="prior", **run)
        counts[scan] = calls["count"] - before
        assert not step._block_pending
        if scan != "default":
            assert json.loads(runs[scan].posterior.attrs["dp_accountant"])["backend"]["scan_iterations"] == scan
    # per chain: tuning 7 + 3, 7 + 3, 5 (K = 7) or 10, 10, 5 (K = 64), then ⌈draws / K⌉ blocks
    assert counts == {1: 0, 7: 2 * (5 + 5), 64: 2 * (3 + 1), "default": 0}
    scales = runs[1].sample_stats["dp_proposal_scale"].values
    assert np.unique(scales[0]).size == 1 and scales[0, 0] != 2.38  # tuned, then fixed for the blocks
    for scan in (7, 64, "default"):
        np.testing.assert_allclose(runs[scan].posterior["m"].values, runs[1].posterior["m"].values, rtol=1e-12)
        np.testing.assert_array_equal(runs[scan].sample_stats["dp_accepted"], runs[1].sample_stats["dp_accepted"])
        np.testing.assert_array_equal(runs[scan].sample_stats["dp_proposal_scale"], scales)
        np.testing.assert_allclose(
            runs[scan].sample_stats["dp_noisy_llr"], runs[1].sample_stats["dp_noisy_llr"], rtol=1e-10, atol=1e-10
        )
        assert runs[scan].posterior.attrs["dp_epsilon"] == runs[1].posterior.attrs["dp_epsilon"]
        _assert_same_tuning(runs[scan], runs[1], ("dp_noisy_llr", "dp_proposal_scale"), rtol=1e-10)
    assert runs[1].sample_stats["dp_accepted"].values.any()


@pytest.mark.parametrize("test", ["full data", "subsampled"])
def test_dpbarkermh_blocks_in_lax_scan_give_the_one_call_chain(normal_mean, monkeypatch, test):
    # Barker's blocks: proposals from the step's generator; the batch (subsampled), the release's normal and
    # V_cor from the noise source, per block in the default backend's order: the same chain, statistics and ε
    # as one call per iteration and as the default backend, tuning included (in blocks cut at each tuning
    # interval's end and at the end of tuning; the proposal scale changes twice).
    calls = _counted_kernel_calls(monkeypatch)
    model, _ = normal_mean
    settings = {"full_data": True} if test == "full data" else {"batch_size": 100, "tempered_size": 30.0}
    run = {**RUN, "tune": 25, "discard_tuned_samples": False}
    if test == "subsampled":  # its ε is set by N, b, T and the iterations
        run.pop("epsilon")
    runs, counts = {}, {}
    for scan in (1, 7, 64, "default"):
        with model:
            step = pmdp.DPBarkerMH(tune_interval=10, reproducible_noise=True, **settings)
        backend = "default" if scan == "default" else pmdp.JaxBackend(scan_iterations=scan)
        before = calls["count"]
        runs[scan] = pmdp.sample(step=step, backend=backend, model=model, init="prior", **run)
        counts[scan] = calls["count"] - before
        assert not step._block_pending
    assert counts == {1: 0, 7: 2 * (5 + 5), 64: 2 * (3 + 1), "default": 0}  # as for DPPenaltyMH
    scales = runs[1].sample_stats["dp_proposal_scale"].values
    assert np.unique(scales[0]).size == 1 and scales[0, 0] != 2.38  # tuned, then fixed for the blocks
    for scan in (7, 64, "default"):
        np.testing.assert_allclose(runs[scan].posterior["m"].values, runs[1].posterior["m"].values, rtol=1e-12)
        np.testing.assert_array_equal(runs[scan].sample_stats["dp_accepted"], runs[1].sample_stats["dp_accepted"])
        for stat in ("dp_noisy_llr", "dp_accept"):
            np.testing.assert_allclose(
                runs[scan].sample_stats[stat], runs[1].sample_stats[stat], rtol=1e-10, atol=1e-12
            )
        assert runs[scan].posterior.attrs["dp_epsilon"] == runs[1].posterior.attrs["dp_epsilon"]
        _assert_same_tuning(runs[scan], runs[1], ("dp_noisy_llr", "dp_accept", "dp_proposal_scale"), rtol=1e-10)
    assert 0 < runs[1].sample_stats["dp_accepted"].values.mean() < 1


def test_blocks_apply_the_priors_parameter_checks_as_the_default_backend():
    # A prior whose parameter check can fail in the unconstrained space (Beta(α = a) with a < 0 is −∞): the
    # blocks' JAX prior is compiled as PyMC compiles log-densities, so no draw has a < 0 there either.
    y = np.random.default_rng(1).normal(0.5, 1.0, size=200)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1)
        p = pm.Beta("p", alpha=a, beta=2)
        pm.Normal("y", p, 1.0, observed=y)
    run = dict(draws=300, tune=0, chains=1, random_seed=3, progressbar=False, on_poor_mixing="ignore", delta=1e-6)
    runs = {}
    for name, backend in [("default", "default"), ("blocks", pmdp.JaxBackend(scan_iterations=64))]:
        with model:
            step = pmdp.DPPenaltyMH(
                llr_clip=3.0, noise_multiplier=0.5, tune=False, proposal_scale=0.4, reproducible_noise=True
            )
        runs[name] = pmdp.sample(step=step, backend=backend, model=model, init="prior", **run)
    assert (runs["default"].posterior["a"].values > 0).all()
    np.testing.assert_allclose(runs["blocks"].posterior["a"].values, runs["default"].posterior["a"].values, rtol=1e-12)


@pytest.mark.parametrize("check_bounds", [True, False])
def test_jax_graphs_keep_or_drop_parameter_checks_as_the_data_layer_compiled_them(check_bounds):
    # With check_bounds=False PyMC drops the Beta's α > 0 check (a < 0 is then a finite log-density); the JAX
    # graphs follow the data layer (compiled when the step was built), not the context open at the run.
    y = np.random.default_rng(1).normal(0.5, 1.0, size=200)
    with pm.Model(check_bounds=check_bounds) as model:
        a = pm.Normal("a", 0, 1)
        p = pm.Beta("p", alpha=a, beta=2)
        pm.Normal("y", p, 1.0, observed=y)
    run = dict(epsilon=5.0, delta=1e-6, draws=200, tune=0, chains=1, random_seed=3, progressbar=False)
    run["on_poor_mixing"] = "ignore"
    runs = {}
    for scan in ("default", 1, 64):
        with model:
            step = pmdp.DPBarkerMH(full_data=True, tune=False, proposal_scale=0.4, reproducible_noise=True)
        backend = "default" if scan == "default" else pmdp.JaxBackend(scan_iterations=scan)
        runs[scan] = pmdp.sample(step=step, backend=backend, model=model, init="prior", **run)  # outside `with`
    assert bool((runs["default"].posterior["a"].values < 0).any()) is (not check_bounds)
    for scan in (1, 64):
        np.testing.assert_allclose(runs[scan].posterior["a"].values, runs["default"].posterior["a"].values, rtol=1e-10)


@pytest.mark.parametrize("name", ["DPPenaltyMH", "DPBarkerMH"])
def test_a_nan_acceptance_draws_as_on_the_default_backend(name):
    # A data-free potential that is NaN below m = 0.45: accept_reject draws U (V_cor) for a NaN log α too, so the
    # blocks, which draw them ahead, give the default backend's chain.
    y = np.random.default_rng(7).normal(0.5, 1.0, size=300)
    with pm.Model() as model:
        m = pm.Normal("m", 0, 10)
        pm.Potential("pen", pm.math.log(m - 0.45))
        pm.Normal("y", m, 1.0, observed=y)
    run = dict(epsilon=5.0, delta=1e-6, draws=60, tune=0, chains=1, random_seed=3, progressbar=False)
    runs = {}
    for scan in ("default", 64):
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # log of a negative number in the potential
            step = (
                pmdp.DPPenaltyMH(llr_clip=3.0, tune=False, proposal_scale=0.3, reproducible_noise=True)
                if name == "DPPenaltyMH"
                else pmdp.DPBarkerMH(full_data=True, tune=False, proposal_scale=0.3, reproducible_noise=True)
            )
            backend = "default" if scan == "default" else pmdp.JaxBackend(scan_iterations=scan)
            runs[scan] = pmdp.sample(step=step, backend=backend, initvals=[{"m": 0.6}], on_poor_mixing="ignore", **run)
    assert (runs["default"].sample_stats["dp_accept"].values == 0.0).sum() > 5  # NaN log α were met
    np.testing.assert_allclose(runs[64].posterior["m"].values, runs["default"].posterior["m"].values, rtol=1e-10)


def test_blocks_draw_their_noise_from_os_entropy(normal_mean, monkeypatch):
    # Without reproducible_noise every block's normals come from BufferedSecureNoise, none from the step's
    # generators: (L + 1)·P + 1 per DPHMC iteration, 1 per DPPenaltyMH iteration, blocks included.
    drawn = {"count": 0}
    normal = BufferedSecureNoise.normal

    def counted(self, loc=0.0, scale=1.0, size=None):
        drawn["count"] += 1 if size is None else int(np.prod(size))
        return normal(self, loc, scale, size)

    monkeypatch.setattr(BufferedSecureNoise, "normal", counted)
    calls = _counted_kernel_calls(monkeypatch)
    model, _ = normal_mean
    with model:
        step = pmdp.DPHMC(
            grad_clip=3.0, llr_clip=3.0, n_leapfrog=3, grad_noise_multiplier=1.0, llr_noise_multiplier=1.0, tune=False
        )
    run = dict(draws=40, tune=0, chains=1, random_seed=3, progressbar=False, on_poor_mixing="ignore", delta=1e-6)
    pmdp.sample(step=step, backend=pmdp.JaxBackend(scan_iterations=16), model=model, init="prior", **run)
    assert calls["count"] == 3  # ⌈40 / 16⌉ blocks, the last one of 8 iterations (it stops at the last draw)
    assert drawn["count"] == 40 * ((3 + 1) * 1 + 1)  # every iteration's normals, from OS entropy


def test_a_block_is_dropped_when_the_chain_is_not_where_it_ended(normal_mean):
    # Iteration k of a block starts where k − 1 left the chain: a point moved by anything else discards the
    # rest of the block (never released) and runs a new block from that point.
    from pymc_dp.backends.jax import attach_backend

    model, _ = normal_mean
    with model:
        step = pmdp.DPHMC(
            grad_clip=3.0, llr_clip=3.0, n_leapfrog=3, grad_noise_multiplier=1.0, llr_noise_multiplier=1.0, tune=False
        )
    step._new_chain(np.random.default_rng(0))
    detach = attach_backend(pmdp.JaxBackend(scan_iterations=8), [step])
    try:
        first, _ = step.transition(np.array([0.4]))
        assert len(step._block_pending) == 7
        step.transition(first)
        assert len(step._block_pending) == 6
        moved = first + 1.0
        point, info = step.transition(moved)
        assert len(step._block_pending) == 7  # a new block, from the moved point
        assert info.accepted or np.array_equal(point, moved)
        step._new_chain(np.random.default_rng(1))  # a new chain (PyMC 5's set_rng, PyMC 6's setup_chain)
        assert not step._block_pending
    finally:
        detach()


def test_dphmc_whole_transition_in_one_call_gives_the_per_release_draws(normal_mean, monkeypatch):
    # The one-call transition draws the noise's normals in the order the one-by-one releases do and
    # runs the same arithmetic on the device: with reproducible noise, the same chain.
    calls = _counted_kernel_calls(monkeypatch)
    model, _ = normal_mean
    runs, counts = {}, {}
    for whole in (True, False):
        with model:
            step = pmdp.DPHMC(grad_clip=3.0, llr_clip=3.0, n_leapfrog=4, reproducible_noise=True)
        backend = pmdp.JaxBackend(whole_transition=whole, scan_iterations=1)
        before = calls["one_call"]
        runs[whole] = pmdp.sample(step=step, backend=backend, model=model, init="prior", **RUN)
        counts[whole] = calls["one_call"] - before
        # The run's device functions (and the device rows they hold) are dropped with its mechanisms.
        assert getattr(step, "_fused_cache", None) is None
        record = json.loads(runs[whole].posterior.attrs["dp_accountant"])
        assert record["backend"]["whole_transition"] is whole
    iterations = RUN["chains"] * (RUN["tune"] + RUN["draws"])
    assert counts == {True: iterations, False: 0}
    np.testing.assert_allclose(runs[True].posterior["m"].values, runs[False].posterior["m"].values, rtol=1e-9)
    np.testing.assert_array_equal(runs[True].sample_stats["dp_accepted"], runs[False].sample_stats["dp_accepted"])
    np.testing.assert_allclose(
        runs[True].sample_stats["dp_noisy_llr"], runs[False].sample_stats["dp_noisy_llr"], rtol=1e-8, atol=1e-9
    )
    assert runs[True].posterior.attrs["dp_epsilon"] == runs[False].posterior.attrs["dp_epsilon"]


def test_the_package_imports_without_jax_and_refuses_the_backend_by_name():
    script = (
        "import sys\n"
        "import pymc_dp, pymc_dp.backends.jax\n"
        "assert 'jax' not in sys.modules, 'pymc_dp imported jax'\n"  # lazy: imported on first use only
        "sys.modules['jax'] = None\n"  # as if JAX were not installed
        "try:\n"
        "    pymc_dp.backends.jax.check_backend('jax', [], {})\n"
        "except ImportError as err:\n"
        "    print(err)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "`backend`='jax' needs JAX" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("step_name", ["penalty", "hmc", "barker"])
def test_noise_to_zero_gives_the_exact_posterior_on_jax(normal_mean, step_name):
    """No clipping, noise multipliers 1e-9: the JAX backend's chains (the draws from lax.scan blocks) have the
    conjugate posterior's mean and variance within Monte Carlo standard errors (ArviZ ESS). Full-data Barker
    keeps its N(0, C) (the test's own noise, corrected by V_cor) with no clipping: the exact Barker chain."""
    import arviz as az

    model, y = normal_mean
    precision = 1 / 10.0**2 + y.size
    mean, sd = y.sum() / precision, 1 / math.sqrt(precision)
    with model:
        if step_name == "penalty":
            step = pmdp.DPPenaltyMH(llr_clip=1e4, noise_multiplier=1e-9)
        elif step_name == "barker":
            step = pmdp.DPBarkerMH(full_data=True, llr_clip=1e4)
        else:
            step = pmdp.DPHMC(
                grad_clip=1e4, llr_clip=1e4, grad_noise_multiplier=1e-9, llr_noise_multiplier=1e-9, n_leapfrog=5
            )
        idata = pmdp.sample(
            step=step, delta=1e-6, draws=3000, tune=1000, chains=2, random_seed=11, backend="jax", progressbar=False
        )
    draws = idata.posterior["m"]
    for values, target in ((draws, mean), ((draws - mean) ** 2, sd**2)):
        se = float(az.mcse(values.to_dataset(name="x"))["x"])
        assert abs(float(values.mean()) - target) / se < 4.0


@requires_gpu
def test_gpu_clipped_sums_equal_the_default_backend():
    rows = _rows("mvnormal")
    device = JaxRowMechanisms(RowMechanisms(rows), reproducible_noise=True).device_rows
    assert device.device_platform == "gpu"
    theta, _ = _points(rows)
    reference = clipped_sum_l2(rows.grad_rows(theta), 0.7)
    np.testing.assert_allclose(device.noisy_gradient_sum(theta, 0.7, 0.0, np.zeros(4)), reference, rtol=RTOL)


def test_buffered_secure_noise_draws_what_secure_noise_draws_from_the_same_bytes(monkeypatch):
    import os

    from pymc_dp.mechanisms import SecureNoise

    def stream():  # a deterministic stand-in for the OS entropy: consecutive bytes of one seeded stream
        source = np.random.default_rng(0).bytes(1 << 20)
        position = 0

        def urandom(n: int) -> bytes:
            nonlocal position
            position += n
            return source[position - n : position]

        return urandom

    monkeypatch.setattr(os, "urandom", stream())
    plain = SecureNoise().normal(0.0, 1.0, size=10)
    monkeypatch.setattr(os, "urandom", stream())
    buffered = BufferedSecureNoise(block_bytes=4096)
    np.testing.assert_array_equal(buffered.normal(0.0, 1.0, size=10), plain)
    monkeypatch.undo()
    # from the real OS entropy: N(0, 1) moments, different draws per object, no buffer in a copy
    import pickle

    draws = BufferedSecureNoise(block_bytes=64).normal(0.0, 1.0, size=20_000)  # many refills
    assert abs(draws.mean()) < 4 / math.sqrt(draws.size) and abs(draws.var() - 1) < 4 * math.sqrt(2 / draws.size)
    noise = BufferedSecureNoise()
    noise.normal()
    assert pickle.loads(pickle.dumps(noise))._words.size == 0 < noise._words.size


# -- DPADVI on the backend ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["glm", "mvnormal"])
def test_dpadvi_batch_release_equals_the_default_mechanism_with_the_same_draws(name):
    # Poisson batches of a size that is not a power of two, over several device chunks (256 rows), two Monte
    # Carlo draws with their own Jacobians: the same batch, noise and clipped sum as the default mechanism.
    from pymc_dp.mechanisms.poisson_gradient import NoisyPoissonGradientSum

    rows = _rows(name)
    mechanisms = JaxRowMechanisms(RowMechanisms(rows), reproducible_noise=True, chunk_rows=256)
    theta, other = _points(rows)
    jac_rng = np.random.default_rng(11)
    jacobians = [jac_rng.normal(size=(rows.n_params, 2 * rows.n_params)) for _ in range(2)]
    for rate, bound in ((0.3, 0.5), (0.9, 1e6)):
        device = mechanisms.poisson_gradient_sum(bound, 1.3, rate, "substitute")
        host = NoisyPoissonGradientSum(rows, bound, 1.3, rate, "substitute")
        for draws, maps in ((theta[None], jacobians[:1]), (np.stack([theta, other]), jacobians)):
            expected = host.release(draws, maps, np.random.default_rng(4))
            got = device.release(draws, maps, np.random.default_rng(4))
            np.testing.assert_allclose(got, expected, rtol=RTOL, atol=RTOL)


@pytest.mark.parametrize(("approximation", "n_mc"), [("meanfield", 1), ("fullrank", 2)])
def test_dpadvi_on_jax_fits_what_the_default_backend_fits_with_the_same_accounting(approximation, n_mc):
    def fit(backend):
        dpadvi = pmdp.DPADVI(
            noise_multiplier=1.1,  # set, not calibrated: the PLD search would run twice and is not under test here
            delta=1e-5,
            sampling_rate=0.1,
            grad_clip=2.0,
            approximation=approximation,
            n_mc=n_mc,
            random_seed=7,
            reproducible_noise=True,
            backend=backend,
        )
        return dpadvi.fit(60, model=ZOO["glm"], progressbar=False), dpadvi

    (host, host_fit), (device, device_fit) = fit("default"), fit(pmdp.JaxBackend(chunk_rows=256))
    for a, b in zip(host_fit._params, device_fit._params, strict=True):
        np.testing.assert_allclose(b.get_value(), a.get_value(), rtol=RTOL, atol=RTOL)
    record, device_record = host._dp_record, device._dp_record
    assert device_record["epsilon"] == record["epsilon"] and device_record["events"] == record["events"]
    assert record["settings"]["backend"] == {"name": "default"}
    assert device_record["settings"]["backend"]["name"] == "jax"
    assert device_record["settings"]["backend"]["dtype"] == "float64"


@pytest.mark.parametrize("approximation", ["meanfield", "fullrank"])
def test_dpadvi_blocks_use_the_families_draws_jacobians_and_entropy_gradients(approximation):
    # The block runs the families' own methods in jax.numpy (advi_kernel): the same values as in NumPy, and
    # the hand-written Jacobian M and entropy gradient agree with JAX's derivatives of the draw and the entropy.
    from pymc_dp.variational.families import family_for

    family = family_for(approximation, 3)
    rng = np.random.default_rng(2)
    packed, eps = rng.normal(size=family.size), rng.normal(size=3)
    jnp = jax.numpy
    with jax.enable_x64(True):
        draw = lambda packed: family.draws(packed, eps[None], jnp)[0]  # noqa: E731
        entropy = lambda packed: jnp.sum(jnp.log(jnp.diag(family.cholesky(packed, jnp))))  # noqa: E731
        if approximation == "meanfield":
            entropy = lambda packed: jnp.sum(jnp.log(jnp.logaddexp(0.0, packed[3:])))  # noqa: E731
        np.testing.assert_allclose(draw(packed), family.draws(packed, eps[None])[0], rtol=1e-14, atol=1e-14)
        jacobian = family.parameter_jacobian(packed, eps)
        np.testing.assert_allclose(family.parameter_jacobian(packed, eps, jnp), jacobian, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(jax.jacfwd(draw)(packed), jacobian, rtol=1e-14, atol=1e-14)
        gradient = family.entropy_gradient(packed)
        np.testing.assert_allclose(family.entropy_gradient(packed, jnp), gradient, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(jax.grad(entropy)(packed), gradient, rtol=1e-14, atol=1e-14)


def _dpadvi_fit(backend, n=45, callbacks=None, **settings):
    # A set noise multiplier: calibrating σ to an ε (a PLD search, 5-20 CPU-s at q = 0.1 and these few
    # iterations) is tested in tests/test_accounting_pld.py and in the fit-equality test above.
    options = dict(
        noise_multiplier=1.3, delta=1e-5, sampling_rate=0.1, grad_clip=2.0, random_seed=7, reproducible_noise=True
    )
    dpadvi = pmdp.DPADVI(**{**options, **settings}, backend=backend)
    approx = dpadvi.fit(n, model=ZOO["glm"], progressbar=False, callbacks=callbacks)
    return approx, dpadvi


@pytest.mark.parametrize(("approximation", "n_mc", "optimizer"), [("meanfield", 1, "adagrad"), ("fullrank", 2, "adam")])
def test_dpadvi_blocks_in_lax_scan_give_the_one_call_fit(approximation, n_mc, optimizer):
    # 45 iterations in blocks of 8 (the last block 5 active iterations of 8), then a second fit of 20 on the
    # same object: the same parameters, optimiser state, iterate averages and accounting as one call per
    # iteration, with the same reproducible draws.
    settings = dict(approximation=approximation, n_mc=n_mc, optimizer=optimizer)
    fits = {}
    for scan in (1, 8):
        approx, dpadvi = _dpadvi_fit(pmdp.JaxBackend(scan_iterations=scan, chunk_rows=256), **settings)
        first = dpadvi._packed()
        dpadvi.fit(20, progressbar=False)
        fits[scan] = (first, dpadvi._packed(), dpadvi._optimizer_state.state(first), approx)
    (first_1, second_1, state_1, approx_1), (first_8, second_8, state_8, approx_8) = fits[1], fits[8]
    np.testing.assert_allclose(first_8, first_1, rtol=RTOL, atol=RTOL)
    np.testing.assert_allclose(second_8, second_1, rtol=RTOL, atol=RTOL)
    for a, b in zip(state_8, state_1, strict=True):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=RTOL)
    np.testing.assert_allclose(approx_8._dp_optimisation_sd, approx_1._dp_optimisation_sd, rtol=1e-8)
    record_1, record_8 = approx_1._dp_record, approx_8._dp_record
    assert record_8["epsilon"] == record_1["epsilon"] and record_8["events"] == record_1["events"]
    assert record_1["settings"]["backend"]["scan_iterations"] == 1
    assert record_8["settings"]["backend"]["scan_iterations"] == 8


def test_dpadvi_blocks_stopped_by_a_callback_keep_the_iteration_it_saw():
    # A callback stops the fit inside a block: the parameters and the optimiser's state are those of the
    # iteration the callback saw (the rest of the block is dropped, never used), as with one call each.
    def stop_at(iteration):
        def callback(approx, _, i):
            if i == iteration:
                raise StopIteration("stopped")

        return callback

    results = []
    for scan in (1, 16):
        _, dpadvi = _dpadvi_fit(pmdp.JaxBackend(scan_iterations=scan), n=60, callbacks=[stop_at(21)], optimizer="adam")
        results.append((dpadvi._packed(), dpadvi._optimizer_state._t))
        # the iterations computed after the stop are not kept (PyMC keeps the step function in dpadvi.state)
        step = dpadvi.state.step
        kept = dict(zip(step.__code__.co_freevars, (c.cell_contents for c in step.__closure__ or ()), strict=True))
        assert ("pending" in kept) == (scan > 1) and not kept.get("pending")
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=RTOL, atol=RTOL)
    assert results[0][1] == results[1][1] == 21


def test_dpadvi_block_is_dropped_when_a_callback_moves_the_parameters(monkeypatch):
    # A callback that moves q's parameters (iterations 4 and 6 of 40): the rest of the pending block is dropped
    # (never used) and a new block runs from the moved point: blocks at 1, 5, 7, 23 and 39 (K = 16), not 3.
    calls = _counted_kernel_calls(monkeypatch)

    def nudge(approx, _, i):
        if i in (4, 6):
            approx.params[0].set_value(approx.params[0].get_value() + 0.01)

    _dpadvi_fit(pmdp.JaxBackend(scan_iterations=16), n=40)
    assert calls["count"] == 3
    _dpadvi_fit(pmdp.JaxBackend(scan_iterations=16), n=40, callbacks=[nudge])
    assert calls["count"] == 3 + 5


def test_dpadvi_on_jax_draws_its_batches_and_noise_from_os_entropy(monkeypatch):
    # Without reproducible_noise every release's normals (D per iteration), its Poisson batch and the clipping
    # check's histogram come from BufferedSecureNoise, in blocks and one call per iteration alike.
    drawn = {"normal": 0, "geometric": 0}
    normal, geometric = BufferedSecureNoise.normal, BufferedSecureNoise.geometric

    def counted_normal(self, loc=0.0, scale=1.0, size=None):
        drawn["normal"] += 1 if size is None else int(np.prod(size))
        return normal(self, loc, scale, size)

    def counted_geometric(self, p, size=None):
        drawn["geometric"] += 1
        return geometric(self, p, size)

    class Untouchable:  # DPADVI's own (OS-seeded PCG64) generator: no release may draw from it on this backend
        def __getattr__(self, name):
            raise AssertionError(f"a release drew from DPADVI's generator ({name})")

    from pymc_dp.variational import dpadvi as dpadvi_module

    monkeypatch.setattr(dpadvi_module, "mechanism_rng", lambda seed_source, reproducible: Untouchable())
    # A target ε brings the clipping check whose histogram is counted here; the σ search behind it (a PLD
    # search, about 10 CPU-s) is tested in the fit-equality test above and in tests/test_accounting_pld.py.
    monkeypatch.setattr(dpadvi_module, "poisson_gaussian_noise_multiplier", lambda *args: 1.3)
    monkeypatch.setattr(BufferedSecureNoise, "normal", counted_normal)
    monkeypatch.setattr(BufferedSecureNoise, "geometric", counted_geometric)
    for scan in (1, 8):
        drawn.update(normal=0, geometric=0)
        approx, dpadvi = _dpadvi_fit(  # calibrated to ε, with the clipping check that comes with it
            pmdp.JaxBackend(scan_iterations=scan), n=20, reproducible_noise=False, epsilon=2.0, noise_multiplier=None
        )
        size = dpadvi._family.size
        # D normals per iteration, then the clipping check's histogram (one normal per bin)
        assert drawn["normal"] > 20 * size and drawn["geometric"] >= 20
        assert "clipping_check" in approx._dp_record
        assert approx._dp_record["settings"]["backend"]["noise"] == "os.urandom (BufferedSecureNoise)"


def test_dpadvi_blocks_are_float64_only():
    approx, _ = _dpadvi_fit(pmdp.JaxBackend(dtype="float32", scan_iterations=8), n=10)
    assert approx._dp_record["settings"]["backend"]["scan_iterations"] == 1


def test_dpadvi_bad_backend_is_refused_by_name():
    with pytest.raises(ValueError, match=r"`backend` must be 'default', 'jax' or a pymc_dp\.JaxBackend"):
        pmdp.DPADVI(epsilon=1.0, delta=1e-5, sampling_rate=0.1, grad_clip=1.0, backend="gpu")
