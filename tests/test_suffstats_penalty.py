"""Alg. 3 (fresh noisy sufficient statistics) and Alg. 2 (several data owners) of Yıldırım and Ermiş (2019)."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_dp as pmdp
from tests._invariance import Z_CRIT, invariance_z_scores, run_chains_from


@pytest.fixture(scope="module")
def normal_suffstats():
    y = np.clip(np.random.default_rng(3).normal(0.5, 1.0, size=200), -5, 5)
    with pm.Model() as model:
        m = pm.Normal("m", 0, 10)
    precision = 1 / 100 + y.size
    return model, m, y, y.sum() / precision, 1 / np.sqrt(precision)


def test_alg3_leaves_the_conjugate_posterior_invariant(normal_suffstats):
    model, m, y, mean, sd = normal_suffstats
    step = pmdp.DPSuffStatsPenaltyMH(
        "normal",
        y,
        {"mu": m},
        model=model,
        noise_multiplier=0.05,
        proposal_scale=0.1,
        tune=False,
        family_settings={"sigma": 1.0, "bounds": (-5, 5)},
    )
    starts = np.random.default_rng(0).normal(mean, sd, size=400)
    ends, acceptance = run_chains_from(step, starts, 20, seed=1)
    z_mean, z_var = invariance_z_scores(ends, mean, sd)
    assert abs(z_mean) < Z_CRIT and abs(z_var) < Z_CRIT
    assert 0.05 < acceptance < 0.95  # the chain moves, so the test has power


def test_alg3_is_accounted_as_gaussian_releases_and_refuses_observed_models(normal_suffstats):
    model, m, y, _, _ = normal_suffstats
    settings = {"sigma": 1.0, "bounds": (-5, 5)}
    with model:
        step = pmdp.DPSuffStatsPenaltyMH("normal", y, {"mu": m}, family_settings=settings)
        idata = pmdp.sample(step=step, epsilon=2.0, delta=1e-6, draws=50, tune=50, chains=1, progressbar=False)
    assert idata["posterior"].attrs["dp_epsilon"] <= 2.0
    assert pmdp.privacy_spent(idata).epsilon == pytest.approx(idata["posterior"].attrs["dp_epsilon"])
    assert "observed_data" not in idata
    with pm.Model():
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1, observed=y)
        with pytest.raises(ValueError, match="must hold the priors only"):
            pmdp.DPSuffStatsPenaltyMH("normal", y, {"mu": mu}, family_settings=settings)
    with model, pytest.raises(ValueError, match=r"`params` must map exactly \['mu'\]"):
        pmdp.DPSuffStatsPenaltyMH("normal", y, {"p": m}, family_settings=settings)


def test_alg3_step_holds_the_statistics_mechanism_not_the_rows(normal_suffstats):
    model, m, y, _, _ = normal_suffstats
    settings = {"sigma": 1.0, "bounds": (-5, 5)}
    step = pmdp.DPSuffStatsPenaltyMH(
        "normal", y, {"mu": m}, model=model, noise_multiplier=1.0, family_settings=settings
    )
    assert step._private_statistics.n_rows == step.n_rows == y.size
    for holder in (step, step._private_statistics, step._get_mechanism()):
        for value in vars(holder).values():
            assert value is not y
            assert not (isinstance(value, np.ndarray) and value.shape[:1] == y.shape), value
    assert "_data" not in vars(step)


def test_one_owner_costs_what_dppenaltymh_costs(conjugate_normal):
    with conjugate_normal.model:
        single = pmdp.DPPenaltyMH(llr_clip=3.0, noise_multiplier=20.0)
        owners = pmdp.DPMultiOwnerPenaltyMH(
            owners=np.zeros(conjugate_normal.y.size), llr_clip=3.0, noise_multiplier=20.0
        )
        a = pmdp.sample(step=single, delta=1e-6, draws=30, tune=20, chains=2, random_seed=1, progressbar=False)
        b = pmdp.sample(step=owners, delta=1e-6, draws=30, tune=20, chains=2, random_seed=1, progressbar=False)
    assert a["posterior"].attrs["dp_epsilon"] == b["posterior"].attrs["dp_epsilon"]
    assert single.privacy_events(100)[0].mu == owners.privacy_events(100)[0].mu


def test_several_owners_leave_the_posterior_invariant(conjugate_normal):
    mean, sd = conjugate_normal.posterior()
    owners = np.arange(conjugate_normal.y.size) % 3
    with conjugate_normal.model:
        step = pmdp.DPMultiOwnerPenaltyMH(
            owners=owners, llr_clip=50.0, noise_multiplier=0.02, proposal_scale=0.1, tune=False
        )
    assert step.owner_labels == ["0", "1", "2"]
    starts = np.random.default_rng(2).normal(mean, sd, size=300)
    ends, acceptance = run_chains_from(step, starts, 15, seed=3)
    z_mean, z_var = invariance_z_scores(ends, mean, sd)
    assert abs(z_mean) < Z_CRIT and abs(z_var) < Z_CRIT
    assert 0.05 < acceptance < 0.95
    with conjugate_normal.model, pytest.raises(ValueError, match="`owners` must have one label per row"):
        pmdp.DPMultiOwnerPenaltyMH(owners=np.zeros(3), noise_multiplier=1.0)


def test_alg3_clamps_rows_outside_the_bounds_by_default_and_strict_mode_gives_no_count():
    y = np.array([0.5, 9.0, -0.2, -7.0])
    settings = {"sigma": 1.0, "bounds": (-1, 1)}
    with pm.Model():
        m = pm.Normal("m", 0, 10)
        step = pmdp.DPSuffStatsPenaltyMH("normal", y, {"mu": m}, noise_multiplier=1e-9, family_settings=settings)
        assert step.accountant_settings()["out_of_bounds"] == "clamp"
        released = step._get_mechanism().release(np.random.default_rng(0))  # τ → 0: Ŝ ≈ S of the clamped rows
        assert released[0] == pytest.approx(0.5 + 1.0 - 0.2 - 1.0, abs=1e-6)
        with pytest.raises(ValueError, match="which and how many are not shown") as info:
            pmdp.DPSuffStatsPenaltyMH("normal", y, {"mu": m}, family_settings=settings, out_of_bounds="raise")
        assert "2" not in str(info.value) and "9" not in str(info.value)
        with pytest.raises(ValueError, match="`out_of_bounds` must be one of"):
            pmdp.DPSuffStatsPenaltyMH("normal", y, {"mu": m}, family_settings=settings, out_of_bounds=None)


@pytest.mark.parametrize("reads", ["potential_pm_data", "potential_row_array", "prior_pm_data", "params"])
def test_alg3_refuses_priors_potentials_and_params_that_read_data(reads):
    # They enter the acceptance ratio exactly (unclipped, unnoised): before, nothing checked them.
    from pymc_dp.data import ModelStructureError

    y = np.clip(np.random.default_rng(4).normal(0.5, 1.0, size=80), -5, 5)
    settings = {"sigma": 1.0, "bounds": (-5, 5)}
    with pm.Model():
        if reads == "prior_pm_data":
            x = pm.Data("x", y)
            m = pm.Normal("m", x.mean(), 10)
        else:
            m = pm.Normal("m", 0, 10)
        mu = m
        if reads == "potential_pm_data":
            x = pm.Data("x", y)
            pm.Potential("pen", -((x - m) ** 2).sum())
        elif reads == "potential_row_array":
            pm.Potential("pen", -((pt.as_tensor_variable(y) - m) ** 2).sum())
        elif reads == "params":
            mu = m + pt.as_tensor_variable(y).mean()
        expected = {"prior_pm_data": "free variable `m`", "params": r"`params\['mu'\]` reads data"}
        with pytest.raises(ModelStructureError, match=expected.get(reads, "Potential `pen` reads data")) as info:
            pmdp.DPSuffStatsPenaltyMH("normal", y, {"mu": mu}, noise_multiplier=1.0, family_settings=settings)
    assert repr(float(y[0]))[:6] not in str(info.value)
