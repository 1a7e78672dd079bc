"""DPPenaltyMH: the penalty test, invariance, the noise → 0 limit, and its accounting."""

import math

import dp_accounting
import numpy as np
import pymc as pm
import pytest
from _invariance import Z_CRIT, invariance_z_scores, run_chains_from, without_penalty
from pymc.blocking import DictToArrayBijection

import pymc_dp as pmdp
from pymc_dp.accounting import gaussian_epsilon
from pymc_dp.step_methods import kernels as kernels_module
from pymc_dp.step_methods.penalty import penalty_log_acceptance


def test_penalty_log_acceptance_formula():
    # T λ̂ − (Tσ)²/2 + log prior ratio + log proposal ratio
    assert penalty_log_acceptance(2.0, 1.5, -0.3, 0.1, 0.5) == pytest.approx(1.0 - 0.5 * 0.75**2 - 0.3 + 0.1)
    assert penalty_log_acceptance(-1.0, 0.0, 0.2) == pytest.approx(-0.8)


def test_penalty_test_is_unbiased_for_the_acceptance_ratio():
    # Ceperley-Dewing: E[exp(λ̂ − σ²/2)] = exp(λ) for λ̂ ~ N(λ, σ²). Monte Carlo with a standard error.
    rng = np.random.default_rng(0)
    lam, sigma, n = -0.7, 0.8, 200_000
    values = np.exp([penalty_log_acceptance(x, sigma, 0.0) for x in rng.normal(lam, sigma, n)])
    z = (values.mean() - math.exp(lam)) / (values.std(ddof=1) / math.sqrt(n))
    assert abs(z) < Z_CRIT


@pytest.mark.parametrize("temperature", [1.0, 0.4])
def test_invariance_with_noise_on(conjugate_normal, temperature):
    """Chains started at exact (tempered) posterior draws keep its mean and variance."""
    mean, sd = conjugate_normal.posterior(temperature)
    assert np.max(np.abs(conjugate_normal.y - mean)) + 5 * sd < 10.0  # llr_clip=10 never clips
    with conjugate_normal.model:
        step = pmdp.DPPenaltyMH(
            proposal_scale=1.5 * sd, llr_clip=10.0, noise_multiplier=0.08 / sd, temperature=temperature, tune=False
        )
    # noise sd of λ̂ at a typical move is 2τb|d| ≈ 2·(0.08/sd)·10·1.2 sd ≈ 1.9: the penalty matters.
    starts = np.random.default_rng(1).normal(mean, sd, size=600)
    ends, acceptance = run_chains_from(step, starts, n_steps=12, seed=2)
    assert 0.05 < acceptance < 0.9
    z_mean, z_var = invariance_z_scores(ends, mean, sd)
    assert abs(z_mean) < Z_CRIT and abs(z_var) < Z_CRIT


def test_invariance_test_catches_a_missing_penalty(conjugate_normal, monkeypatch):
    """Power check: without the −σ²/2 penalty the same test must fail."""
    mean, sd = conjugate_normal.posterior()
    monkeypatch.setattr(kernels_module, "penalty_log_acceptance", without_penalty)  # the kernel every backend runs
    with conjugate_normal.model:
        step = pmdp.DPPenaltyMH(proposal_scale=1.5 * sd, llr_clip=10.0, noise_multiplier=0.08 / sd, tune=False)
    starts = np.random.default_rng(1).normal(mean, sd, size=600)
    ends, _ = run_chains_from(step, starts, n_steps=12, seed=2)
    z_mean, z_var = invariance_z_scores(ends, mean, sd)
    assert max(abs(z_mean), abs(z_var)) > Z_CRIT


def test_noise_to_zero_without_clipping_matches_pymc_metropolis(conjugate_normal):
    kwargs = dict(draws=300, tune=300, chains=2, random_seed=11, progressbar=False, compute_convergence_checks=False)
    with conjugate_normal.model:
        reference = pm.sample(step=pm.Metropolis(), cores=1, **kwargs)
        private = pm.sample(
            step=pmdp.DPPenaltyMH(proposal_scale=1.0, llr_clip=1e3, noise_multiplier=1e-12), cores=1, **kwargs
        )
    np.testing.assert_array_equal(private.posterior["m"].values, reference.posterior["m"].values)


def test_same_seed_same_draws_for_one_and_two_cores(conjugate_normal):
    kwargs = dict(draws=200, tune=200, chains=2, random_seed=5, progressbar=False, compute_convergence_checks=False)
    with conjugate_normal.model:
        # Identity across cores needs seed-derived noise (testing only; by default the noise is OS entropy).
        settings = dict(llr_clip=5.0, noise_multiplier=3.0, reproducible_noise=True)
        one = pm.sample(step=pmdp.DPPenaltyMH(**settings), cores=1, **kwargs)
        two = pm.sample(step=pmdp.DPPenaltyMH(**settings), cores=2, **kwargs)
    np.testing.assert_array_equal(one.posterior["m"].values, two.posterior["m"].values)
    np.testing.assert_array_equal(one.sample_stats["dp_noisy_llr"].values, two.sample_stats["dp_noisy_llr"].values)
    assert not np.array_equal(one.posterior["m"].values[0], one.posterior["m"].values[1])


@pytest.mark.parametrize(("chains", "tune", "draws", "tau"), [(2, 100, 150, 40.0), (3, 0, 120, 15.0)])
def test_epsilon_attribute_equals_closed_form(conjugate_normal, chains, tune, draws, tau):
    delta = 1e-6
    with conjugate_normal.model:
        idata = pmdp.sample(
            step=pmdp.DPPenaltyMH(llr_clip=5.0, noise_multiplier=tau),
            delta=delta,
            draws=draws,
            tune=tune,
            chains=chains,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
        )
    k = chains * (tune + draws)
    # Independent evaluation: dp_accounting's analytic Gaussian on the composed std τ/√k.
    expected = dp_accounting.get_epsilon_gaussian(sigma=tau / math.sqrt(k), delta=delta)
    assert idata.posterior.attrs["dp_epsilon"] == pytest.approx(expected, rel=1e-9)
    assert pmdp.privacy_spent(idata).epsilon == idata.posterior.attrs["dp_epsilon"]


def test_plain_pm_sample_result_is_priced_with_tuning(conjugate_normal):
    tau, chains, tune, draws = 25.0, 2, 150, 100
    with conjugate_normal.model:
        idata = pm.sample(
            step=pmdp.DPPenaltyMH(llr_clip=5.0, noise_multiplier=tau),
            draws=draws,
            tune=tune,
            chains=chains,
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
    with pytest.raises(pmdp.UnpublishableResultError, match="group `observed_data`"):
        pmdp.privacy_spent(idata, delta=1e-6, model=conjugate_normal.model)
    pmdp.strip_private_groups(idata, model=conjugate_normal.model)
    with conjugate_normal.model:
        spent = pmdp.privacy_spent(idata, delta=1e-6)
    assert spent.mu == pytest.approx(chains * (tune + draws) / (2 * tau**2), rel=1e-12)
    assert spent.epsilon == pytest.approx(gaussian_epsilon(1e-6, chains * (tune + draws) / (2 * tau**2)), rel=1e-12)
    with pytest.raises(ValueError, match="`delta` must be given"):
        pmdp.privacy_spent(idata, model=conjugate_normal.model)
    # A result cut to chain 0's draws 20..29 still reveals tune + 30 iterations of that chain.
    cut = idata.isel(chain=[0], draw=slice(20, 30))
    assert pmdp.privacy_spent(cut, delta=1e-6, model=conjugate_normal.model).mu == pytest.approx(
        (tune + 30) / (2 * tau**2), rel=1e-12
    )


def test_result_with_non_dp_sampler_statistics_is_refused(conjugate_normal):
    with conjugate_normal.model:
        idata = pm.sample(
            step=pmdp.DPPenaltyMH(llr_clip=5.0, noise_multiplier=25.0),
            draws=10,
            tune=5,
            chains=1,
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
    pmdp.strip_private_groups(idata, model=conjugate_normal.model)
    idata.sample_stats["energy"] = idata.sample_stats["dp_noisy_llr"] * 0
    with pytest.raises(pmdp.UnpublishableResultError, match=r"statistic `energy` in group `sample_stats`"):
        pmdp.privacy_spent(idata, delta=1e-6, model=conjugate_normal.model)


def test_default_noise_is_not_reproducible_but_priced_the_same(conjugate_normal):
    kwargs = dict(
        draws=30, tune=0, chains=1, cores=1, random_seed=5, progressbar=False, compute_convergence_checks=False
    )
    with conjugate_normal.model:
        a = pm.sample(step=pmdp.DPPenaltyMH(llr_clip=5.0, noise_multiplier=3.0), **kwargs)
        b = pm.sample(step=pmdp.DPPenaltyMH(llr_clip=5.0, noise_multiplier=3.0), **kwargs)
    assert not np.array_equal(a.sample_stats["dp_noisy_llr"].values, b.sample_stats["dp_noisy_llr"].values)
    pmdp.strip_private_groups(a, model=conjugate_normal.model)
    assert pmdp.privacy_spent(a, delta=1e-6, model=conjugate_normal.model).mu == pytest.approx(30 / (2 * 3.0**2))


def test_new_chain_resets_all_per_chain_state(conjugate_normal):
    with conjugate_normal.model:
        step = pmdp.DPPenaltyMH(proposal_scale=1.0, llr_clip=5.0, noise_multiplier=2.0, tune_interval=5)
    q = DictToArrayBijection.map({"m": np.asarray(0.3)})
    step.set_rng(np.random.default_rng(0))
    for _ in range(23):
        q, stats_list = step.astep(q)
    assert stats_list[0]["dp_mu_cumulative"] == pytest.approx(23 / 8)
    assert not np.allclose(step.proposal_scale, 1.0) and step._mechanism._cached_point is not None
    step.setup_chain(np.random.default_rng(1), tune=10, draws=10)  # the PyMC 6 hook
    np.testing.assert_allclose(step.proposal_scale, 1.0)
    assert step._mechanism._cached_point is None and step._steps_until_tune == 5
    _, stats_list = step.astep(q)
    assert stats_list[0]["dp_mu_cumulative"] == pytest.approx(1 / 8)


def test_sampling_without_noise_scale_fails_before_touching_data(conjugate_normal):
    with conjugate_normal.model:
        step = pmdp.DPPenaltyMH()
        with pytest.raises(ValueError, match="`noise_multiplier` must be set before sampling"):
            pm.sample(step=step, draws=10, tune=0, chains=1, progressbar=False, compute_convergence_checks=False)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"llr_clip": -1.0}, "llr_clip"),
        ({"llr_clip": 0.0}, "llr_clip"),
        ({"llr_clip": float("nan")}, "llr_clip"),
        ({"noise_multiplier": 0.0}, "noise_multiplier"),
        ({"noise_multiplier": -3.0}, "noise_multiplier"),
        ({"noise_multiplier": float("inf")}, "noise_multiplier"),
        ({"temperature": 0.0}, "temperature"),
        ({"proposal_scale": -0.1}, "proposal_scale"),
        ({"proposal_scale": [0.1, 0.2]}, "proposal_scale"),
        ({"neighbouring": "replace"}, "neighbouring"),
        ({"tune_interval": 0}, "tune_interval"),
        ({"proposal_scale": [[0.1]]}, "proposal_scale"),
    ],
)
def test_bad_arguments_name_the_parameter(conjugate_normal, kwargs, name):
    with conjugate_normal.model, pytest.raises(ValueError, match=f"`{name}` must"):
        pmdp.DPPenaltyMH(**kwargs)


@pytest.mark.parametrize("step_class", [pmdp.DPPenaltyMH, pmdp.DPHMC])
def test_discrete_variables_are_refused_by_name(step_class):
    with pm.Model():
        k = pm.Poisson("k", 3.0)
        pm.Normal("y", k, 1.0, observed=np.zeros(5))
        with pytest.raises(ValueError, match=rf"must be continuous for {step_class.__name__}.*\['k'\]"):
            step_class(vars=[k])


def test_tuning_uses_private_accept_decisions_and_resets_per_chain(conjugate_normal):
    _, sd = conjugate_normal.posterior()
    with conjugate_normal.model:
        idata = pm.sample(
            step=pmdp.DPPenaltyMH(proposal_scale=1.0, llr_clip=5.0, noise_multiplier=1.0),
            draws=50,
            tune=400,
            chains=2,
            cores=1,
            random_seed=2,
            progressbar=False,
            discard_tuned_samples=False,
            compute_convergence_checks=False,
        )
    warm = idata.warmup_sample_stats
    # Both chains start from the initial scale (per-chain reset); a scale of 1 is 14 posterior sds, so the
    # privatized acceptance is low and tuning shrinks the scale in both chains.
    np.testing.assert_allclose(warm["dp_proposal_scale"].values[:, 0], 1.0)
    assert 1.0 > 10 * sd
    assert np.all(idata.sample_stats["dp_proposal_scale"].values[:, -1] < 1.0)
    assert warm["dp_tuning"].values.all() and not idata.sample_stats["dp_tuning"].values.any()


def test_the_shared_accept_reject_helper():
    """One helper decides for every step: Metropolis (U from the rng) or Barker (V_cor from the rng)."""
    from pymc_dp.step_methods.barker_correction import logistic_correction
    from pymc_dp.step_methods.base import accept_reject

    rng, reference = np.random.default_rng(3), np.random.default_rng(3)
    # Outside the support: rejected, with its uniform drawn all the same (the stream never depends on log α).
    assert accept_reject(float("nan"), rng) == (False, 0.0)
    reference.uniform()
    assert rng.bit_generator.state == reference.bit_generator.state
    assert accept_reject(-np.inf, rng) == (False, 0.0)  # one uniform
    reference.uniform()
    assert rng.bit_generator.state == reference.bit_generator.state
    assert accept_reject(5.0, rng) == (True, 1.0)
    for log_alpha in (-2.0, -0.3):
        # The decision is log U < log α with U the rng's next uniform; P(accept) = e^{log α}.
        expected = bool(np.log(np.random.default_rng(9).uniform()) < log_alpha)
        assert accept_reject(log_alpha, np.random.default_rng(9)) == (expected, pytest.approx(np.exp(log_alpha)))
    correction = logistic_correction(2.0)
    # Barker: accept iff statistic + V_cor > 0; P(accept) = P(V_cor > −statistic).
    v = correction.sample(np.random.default_rng(4))
    decided, probability = accept_reject(0.4, np.random.default_rng(4), correction)
    assert decided == (0.4 + v > 0) and probability == correction.acceptance_probability(0.4)
