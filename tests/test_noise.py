"""Issue 12, class 2: mechanism noise and secret batches are not reproducible from public information.

Two runs with the same ``random_seed`` must not share their noise (else subtracting the two
published results recovers the exact clipped sums); only ``reproducible_noise=True`` (for
testing) makes them identical, and the choice is recorded in the result.
"""

import json

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.mechanisms import mechanism_rng, spawn_noise_rng

SAMPLE_KWARGS = dict(
    draws=6, tune=0, chains=1, cores=1, random_seed=5, progressbar=False, compute_convergence_checks=False
)


def _steps(model, y):
    """Every DP step, built on ``model`` (the conjugate normal) — and DPSuffStatsPenaltyMH's own priors-only model."""
    with model:
        yield "penalty", model, lambda **kw: pmdp.DPPenaltyMH(llr_clip=5.0, noise_multiplier=3.0, **kw)
        yield (
            "hmc",
            model,
            lambda **kw: pmdp.DPHMC(
                step_size=0.03,
                n_leapfrog=3,
                grad_clip=5.0,
                llr_clip=5.0,
                grad_noise_multiplier=2.0,
                llr_noise_multiplier=3.0,
                **kw,
            ),
        )
        yield (
            "barker_full",
            model,
            lambda **kw: pmdp.DPBarkerMH(full_data=True, llr_clip=5.0, correction_variance=0.5, **kw),
        )
        yield "barker_batch", model, lambda **kw: pmdp.DPBarkerMH(batch_size=50, tempered_size=5.0, **kw)
        yield (
            "owners",
            model,
            lambda **kw: pmdp.DPMultiOwnerPenaltyMH(
                owners=np.arange(y.size) % 3, llr_clip=5.0, noise_multiplier=3.0, **kw
            ),
        )
    with pm.Model() as priors_only:
        m = pm.Normal("m", 0, 10)
    yield (
        "suffstats",
        priors_only,
        lambda **kw: pmdp.DPSuffStatsPenaltyMH(
            "normal",
            np.clip(y, -5, 5),
            {"mu": m},
            model=priors_only,
            noise_multiplier=3.0,
            family_settings={"sigma": 1.0, "bounds": (-5, 5)},
            **kw,
        ),
    )


def _two_runs(model, make, **step_kwargs):
    with model:
        a = pm.sample(step=make(**step_kwargs), **SAMPLE_KWARGS)
        b = pm.sample(step=make(**step_kwargs), **SAMPLE_KWARGS)
    return a.sample_stats["dp_noisy_llr"].values.ravel(), b.sample_stats["dp_noisy_llr"].values.ravel()


STEPS = ["penalty", "hmc", "barker_full", "barker_batch", "owners", "suffstats"]


@pytest.mark.parametrize("name", STEPS)
def test_every_step_draws_fresh_noise_under_one_seed_unless_reproducible(conjugate_normal, name):
    model, make = {n: (m, f) for n, m, f in _steps(conjugate_normal.model, conjugate_normal.y)}[name]
    a, b = _two_runs(model, make)
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
    # The first iteration starts at the same point with the same (seeded, data-free) proposal, so the
    # clipped sums agree; the released values differ only if the noise (and the batch) differ.
    # Continuous noise makes a tie a probability-zero event; on seed-derived noise they are equal.
    assert a[0] != b[0]
    assert not np.any(a == b)
    a, b = _two_runs(model, make, reproducible_noise=True)
    np.testing.assert_array_equal(a, b)


def test_steps_refuse_a_non_bool_reproducible_noise(conjugate_normal):
    with conjugate_normal.model, pytest.raises(TypeError, match="`reproducible_noise` must be a bool"):
        pmdp.DPPenaltyMH(llr_clip=5.0, noise_multiplier=3.0, reproducible_noise="yes")
    with conjugate_normal.model, pytest.raises(TypeError, match="secure_noise"):
        pmdp.DPPenaltyMH(llr_clip=5.0, noise_multiplier=3.0, secure_noise=True)  # renamed, not deprecated


def test_pmdp_sample_records_the_noise_source(conjugate_normal):
    kwargs = dict(delta=1e-6, epsilon=2.0, draws=5, tune=5, chains=1, random_seed=3, progressbar=False)
    with conjugate_normal.model:
        default = pmdp.sample(step=pmdp.DPPenaltyMH(llr_clip=5.0), **kwargs)
        seeded = pmdp.sample(step=pmdp.DPPenaltyMH(llr_clip=5.0, reproducible_noise=True), **kwargs)
    for idata, expected in ((default, False), (seeded, True)):
        attrs = idata["posterior"].attrs
        assert attrs["dp_reproducible_noise"] == int(expected)
        record = json.loads(attrs["dp_accountant"])
        assert record["reproducible_noise"] is expected
        assert record["steps"][0]["reproducible_noise"] is expected
    assert pmdp.privacy_spent(default).epsilon == pytest.approx(pmdp.privacy_spent(seeded).epsilon)


def test_owners_have_independent_os_seeded_generators(conjugate_normal):
    with conjugate_normal.model:
        step = pmdp.DPMultiOwnerPenaltyMH(
            owners=np.arange(conjugate_normal.y.size) % 3, llr_clip=5.0, noise_multiplier=3.0
        )
    draws = []
    for _ in range(2):  # two chains with the same chain seed
        step.set_rng(np.random.default_rng(0))
        draws.append([f.rng.normal(size=4) for f in step._get_mechanism().functions])
    flat = np.concatenate([np.concatenate(d) for d in draws])
    assert np.unique(flat).size == flat.size  # no owner shares a stream with another owner or another chain


def test_mechanism_rng_is_fresh_by_default_and_seeded_only_on_request():
    parent = np.random.default_rng(42)
    state = parent.bit_generator.state
    a, b = mechanism_rng(parent, False).normal(size=4), mechanism_rng(parent, False).normal(size=4)
    assert not np.any(a == b)
    assert parent.bit_generator.state == state  # the seeded stream is never touched
    np.testing.assert_array_equal(mechanism_rng(parent, True).normal(size=4), spawn_noise_rng(parent).normal(size=4))
    assert np.all(mechanism_rng(None, False).normal(size=4) != mechanism_rng(None, False).normal(size=4))
    with pytest.raises(TypeError, match="`seed_source` must be a numpy Generator"):
        mechanism_rng(None, True)
    with pytest.raises(TypeError, match="`reproducible` must be a bool"):
        mechanism_rng(parent, 1)


def test_release_statistics_noise_is_fresh_under_one_seed_unless_reproducible():
    y = np.random.default_rng(0).normal(0.2, 1.0, size=300).clip(-4, 4)
    settings = dict(epsilon=1.0, sigma=1.0, bounds=(-4.0, 4.0), random_seed=7)
    a = pmdp.release_statistics("normal", y, **settings)
    b = pmdp.release_statistics("normal", y, **settings)
    assert not np.any(a.statistics == b.statistics)
    assert a.reproducible_noise is False and a.accountant_record()["reproducible_noise"] is False
    c = pmdp.release_statistics("normal", y, reproducible_noise=True, **settings)
    d = pmdp.release_statistics("normal", y, reproducible_noise=True, **settings)
    np.testing.assert_array_equal(c.statistics, d.statistics)
    assert c.accountant_record()["reproducible_noise"] is True
    with pm.Model():
        mu = pm.Normal("mu", 0, 5)
        a.likelihood("lik", mu=mu)
        idata = a.sample(draws=5, tune=5, chains=1, progressbar=False, compute_convergence_checks=False)
    assert idata["posterior"].attrs["dp_reproducible_noise"] == 0


def _dpadvi_fit(model, **kwargs):
    dpadvi = pmdp.DPADVI(noise_multiplier=2.0, delta=1e-5, sampling_rate=0.3, grad_clip=2.0, random_seed=3, **kwargs)
    approx = dpadvi.fit(3, model=model, progressbar=False)
    return np.concatenate([np.ravel(p.get_value()) for p in dpadvi._params]), approx


def test_dpadvi_noise_and_batches_are_fresh_under_one_seed_unless_reproducible(conjugate_normal):
    a, approx = _dpadvi_fit(conjugate_normal.model)
    b, _ = _dpadvi_fit(conjugate_normal.model)
    assert not np.any(a == b)  # same seed, same start, same Monte Carlo draws: only noise and batches differ
    c, seeded = _dpadvi_fit(conjugate_normal.model, reproducible_noise=True)
    d, _ = _dpadvi_fit(conjugate_normal.model, reproducible_noise=True)
    np.testing.assert_array_equal(c, d)
    for fitted, expected in ((approx, False), (seeded, True)):
        attrs = fitted.sample(5, random_seed=1)["posterior"].attrs
        assert attrs["dp_reproducible_noise"] == int(expected)
        assert json.loads(attrs["dp_accountant"])["reproducible_noise"] is expected


def test_one_posterior_sample_is_not_determined_by_a_public_seed():
    y = np.random.default_rng(11).binomial(1, 0.3, 100)
    with pm.Model() as model:
        p = pm.Uniform("p", 0.05, 0.95)
        pm.Bernoulli("y", p, observed=y)
    kwargs = dict(epsilon=1.0, loglik_bounds=(-3.0, 0.0), tune=20, random_seed=12, progressbar=False)
    a = pmdp.one_posterior_sample(model, **kwargs)
    b = pmdp.one_posterior_sample(model, **kwargs)
    assert a["posterior"]["p"].item() != b["posterior"]["p"].item()
    assert a["posterior"].attrs["dp_reproducible_noise"] == 0
    c = pmdp.one_posterior_sample(model, reproducible_noise=True, **kwargs)
    d = pmdp.one_posterior_sample(model, reproducible_noise=True, **kwargs)
    assert c["posterior"]["p"].item() == d["posterior"]["p"].item()
    assert c["posterior"].attrs["dp_reproducible_noise"] == 1


@pytest.mark.parametrize("p", [0.3, 0.02])
def test_secure_geometric_gaps_have_the_geometric_distribution(p):
    # SecureNoise.geometric (the inverse CDF of a 53-bit OS uniform) gives the gaps of Poisson batches:
    # P(K = k) = (1 − p)^(k−1) p on k ≥ 1. Chi-square over k = 1.. with the tail lumped, and the mean.
    from scipy import stats

    from pymc_dp.mechanisms import SecureNoise

    draws = SecureNoise().geometric(p, size=40_000)
    assert draws.dtype == np.int64 and draws.min() >= 1
    last = int(stats.geom.ppf(0.995, p))
    observed = np.array([np.sum(draws == k) for k in range(1, last)] + [np.sum(draws >= last)])
    expected = draws.size * np.append(stats.geom.pmf(np.arange(1, last), p), stats.geom.sf(last - 1, p))
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    z = (draws.mean() - 1 / p) / (np.sqrt(1 - p) / p / np.sqrt(draws.size))
    assert abs(z) < 4.4  # a 1e-5 two-sided normal quantile


def test_secure_geometric_edge_cases_and_bad_p():
    from pymc_dp.mechanisms import SecureNoise

    assert SecureNoise().geometric(1.0) == 1
    np.testing.assert_array_equal(SecureNoise().geometric(1.0, size=3), [1, 1, 1])
    assert isinstance(SecureNoise().geometric(0.5), int)
    for bad in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"`p` must be in \(0, 1\]"):
            SecureNoise().geometric(bad)


def test_poisson_batches_stay_in_range_at_tiny_sampling_rates():
    # At q ~ 1e-19 a geometric gap exceeds int64: gaps are held (SecureNoise) and capped at N + 1 (both sources),
    # so every index is a row (an overflowed gap once gave negative indices).
    from pymc_dp.mechanisms import SecureNoise, poisson_sample

    gaps = SecureNoise().geometric(1e-19, size=1000)
    assert gaps.dtype == np.int64 and gaps.min() >= 1 and gaps.max() == 2**62  # held there (P ≈ 0.63 each)
    for source in (SecureNoise(), np.random.default_rng(0)):
        for _ in range(20):
            batch = poisson_sample(source, 10, 1e-19)
            assert batch.size == 0 or (batch.min() >= 0 and batch.max() < 10)


def test_a_positive_bound_whose_noise_underflows_is_refused_and_a_zero_bound_releases_zero():
    """An unnoised sum must never leave: a positive bound whose σ = τ·Δ underflows to 0 is refused (public values
    only), and a zero bound releases 0 whatever the rows (every term is clipped to 0)."""
    from pymc_dp.mechanisms.noise import noisy_clipped_sum

    rows = np.array([0.3, -0.2, 0.9])
    with pytest.raises(ValueError, match="noise underflows to 0"):
        noisy_clipped_sum(rows, 1e-300, 1e-300, np.random.default_rng(0), "substitute")
    assert noisy_clipped_sum(rows, 0.0, 1.0, np.random.default_rng(0), "substitute") == (0.0, 0.0)
