"""The plain PyMC path: pm.sample(step=<DP step>) followed by pmdp.publish."""

import copy

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.accounting import gaussian_epsilon
from pymc_dp.results import group, group_names

Y = np.random.default_rng(3).normal(0.5, 1.0, size=60)
KWARGS = {"draws": 20, "tune": 10, "chains": 2, "cores": 1, "random_seed": 1, "progressbar": False}


def _model():
    with pm.Model() as model:
        m = pm.Normal("m", 0, 10)
        pm.Normal("y", m, 1.0, observed=Y)
        pm.Deterministic("residual", Y - m)  # reads data
        pm.Deterministic("m2", 2 * m)  # does not
    return model


def _suffstats_model():
    with pm.Model() as model:
        pm.Normal("m", 0, 10)
    return model


STEPS = {
    "penalty": (_model, lambda noise: pmdp.DPPenaltyMH(llr_clip=2.0, **noise), {"noise_multiplier": 20.0}),
    "hmc": (
        _model,
        lambda noise: pmdp.DPHMC(llr_clip=2.0, grad_clip=2.0, n_leapfrog=2, **noise),
        {"llr_noise_multiplier": 20.0, "grad_noise_multiplier": 20.0},
    ),
    "owners": (
        _model,
        lambda noise: pmdp.DPMultiOwnerPenaltyMH(owners=np.arange(Y.size) % 3, llr_clip=2.0, **noise),
        {"noise_multiplier": 20.0},
    ),
    "suffstats": (
        _suffstats_model,
        lambda noise: pmdp.DPSuffStatsPenaltyMH(
            "normal", Y, {"mu": pm.modelcontext(None)["m"]}, family_settings={"sigma": 1.0, "bounds": (-5, 5)}, **noise
        ),
        {"noise_multiplier": 20.0},
    ),
}


@pytest.mark.parametrize("name", sorted(STEPS))
def test_plain_pm_sample_then_publish(name):
    make_model, make_step, noise = STEPS[name]
    model = make_model()
    with model:
        idata = pm.sample(step=make_step(noise), var_names=["m"], **KWARGS)
        assert "dp_epsilon" not in idata["posterior"].attrs  # the old behaviour: nothing priced
        with pytest.raises(pmdp.UnpublishableResultError, match=r"observed_data|sampling_time"):
            pmdp.privacy_spent(idata, delta=1e-6)  # a result that still holds data is never priced
        published = pmdp.publish(idata, delta=1e-6)
    assert published is idata
    for group_name in ("observed_data", "constant_data", "log_likelihood"):
        assert group_name not in published
    attrs = published["posterior"].attrs
    again = pmdp.privacy_spent(published)
    assert attrs["dp_epsilon"] == again.epsilon
    assert attrs["dp_delta"] == 1e-6
    assert attrs["dp_neighbouring"] == "unknown"
    assert attrs["dp_start"] == "not recorded"  # pm.sample records no start: say so, never "model"
    # μ: every chain's tune + draws iterations, each at the set noise.
    mu_iter = sum(0.5 / v**2 for v in noise.values()) if name != "hmc" else 0.5 / 20.0**2 + 3 * 0.5 / 20.0**2
    expected = gaussian_epsilon(1e-6, KWARGS["chains"] * (KWARGS["tune"] + KWARGS["draws"]) * mu_iter)
    assert again.epsilon == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("name", sorted(STEPS))
def test_plain_pm_sample_without_noise_says_how_to_set_it(name):
    make_model, make_step, _ = STEPS[name]
    with make_model(), pytest.raises(ValueError, match=r"pymc_dp\.sample\(step=.*pymc_dp\.accounting\.") as info:
        pm.sample(step=make_step({}), **KWARGS)
    assert "pymc_dp.publish(idata, delta=...)" in str(info.value)  # publish refuses without delta


def test_plain_pm_sample_full_data_barker_without_clip_says_how_to_publish():
    with _model(), pytest.raises(ValueError, match=r"pymc_dp\.sample\(step=DPBarkerMH") as info:
        pm.sample(step=pmdp.DPBarkerMH(full_data=True, temperature=0.5), **KWARGS)
    assert "llr_clip=" in str(info.value)
    assert "pymc_dp.publish(idata, delta=..., step=step)" in str(info.value)  # Barker is priced from the step
    with _model():  # the advice works as written
        step = pmdp.DPBarkerMH(full_data=True, temperature=0.5, llr_clip=1.0)
        idata = pmdp.publish(pm.sample(step=step, var_names=["m"], **KWARGS), delta=1e-6, step=step)
    assert "observed_data" not in idata and pmdp.privacy_spent(idata).epsilon == idata["posterior"].attrs["dp_epsilon"]


def test_publish_strips_data_reading_deterministics_and_a_refusal_changes_nothing():
    model = _model()
    with model:
        idata = pm.sample(step=pmdp.DPPenaltyMH(llr_clip=2.0, noise_multiplier=20.0), **KWARGS)
        groups = set(idata.groups() if callable(getattr(idata, "groups", None)) else idata.groups)
        with pytest.raises(ValueError, match="`delta` must be given"):
            pmdp.publish(idata)
        assert set(idata.groups() if callable(getattr(idata, "groups", None)) else idata.groups) == groups
        assert "dp_epsilon" not in idata["posterior"].attrs and "residual" in idata["posterior"]
        pmdp.publish(idata, delta=1e-6)
    assert "residual" not in idata["posterior"] and "m2" in idata["posterior"]


def test_publish_with_the_step_records_the_relation_and_prices_barker():
    model = _model()
    with model:
        step = pmdp.DPBarkerMH(batch_size=20, tempered_size=5.0)
        idata = pm.sample(step=step, var_names=["m"], **KWARGS)
        alone = pmdp.publish(copy.deepcopy(idata), delta=1e-6)  # the statistics record N, b and the iterations
        assert "dp_epsilon" not in idata["posterior"].attrs
        pmdp.publish(idata, delta=1e-6, step=step)
    assert alone["posterior"].attrs["dp_epsilon"] == idata["posterior"].attrs["dp_epsilon"]
    assert pmdp.privacy_spent(alone).epsilon == alone["posterior"].attrs["dp_epsilon"]
    attrs = idata["posterior"].attrs
    iterations = KWARGS["chains"] * (KWARGS["tune"] + KWARGS["draws"])
    expected = pmdp.accounting.subsampled_barker_epsilon(Y.size, 20, iterations, 1e-6)
    assert attrs["dp_epsilon"] == pytest.approx(expected, rel=1e-12)
    assert attrs["dp_neighbouring"] == "substitute" and attrs["dp_n_rows"] == Y.size
    assert attrs["dp_start"] == "not recorded"
    assert pmdp.privacy_spent(idata).epsilon == attrs["dp_epsilon"]
    with _model():
        penalty = pmdp.DPPenaltyMH(llr_clip=2.0, noise_multiplier=20.0)
        plain = pm.sample(step=penalty, **KWARGS)
        with pytest.raises(ValueError, match="`step` must be the step"):
            pmdp.publish(plain, delta=1e-6, step=pmdp.DPPenaltyMH(llr_clip=2.0, noise_multiplier=7.0))
        pmdp.publish(plain, delta=1e-6, step=penalty)
    mu = iterations / (2 * 20.0**2)
    assert plain["posterior"].attrs["dp_epsilon"] == pytest.approx(gaussian_epsilon(1e-6, mu), rel=1e-9)


def test_privacy_spent_prints_epsilon_rounded_up_and_delta_short():
    spent = pmdp.PrivacySpent(0.9999999998999994, 1e-6)
    assert str(spent) == "ε = 1.000 (δ = 1e-06)"
    assert "epsilon=1.000, delta=1e-06" in repr(spent)
    assert str(pmdp.PrivacySpent(1.00004, 1e-5)) == "ε = 1.001 (δ = 1e-05)"  # never printed below the truth


@pytest.mark.parametrize("step_name", ["penalty", "barker"])
def test_a_result_partly_sampled_by_nuts_is_refused_whatever_the_route(step_name):
    # PyMC gives the variables no DP step covers to NUTS, which reads the raw data: stripping
    # its statistics would leave its exact draws behind, priced as if only the DP step had run.
    with pm.Model() as model:
        m = pm.Normal("m", 0, 10)
        s = pm.HalfNormal("s", 2)
        pm.Normal("y", m, s, observed=Y)
        if step_name == "penalty":
            step = pmdp.DPPenaltyMH([m], llr_clip=2.0, noise_multiplier=20.0)
        else:
            step = pmdp.DPBarkerMH([m], batch_size=20, reproducible_noise=True)
        idata = pm.sample(step=[step], compute_convergence_checks=False, **KWARGS)
    assert "diverging" in group(idata, "sample_stats")
    before = copy.deepcopy(idata)
    with model:
        with pytest.raises(pmdp.UnpublishableResultError, match="statistics of a non-DP sampler"):
            pmdp.publish(idata, delta=1e-5)
        with pytest.raises(pmdp.UnpublishableResultError, match="statistics of a non-DP sampler"):
            pmdp.publish(idata, delta=1e-5, step=step)
        with pytest.raises(pmdp.UnpublishableResultError, match="statistics of a non-DP sampler"):
            pmdp.strip_private_groups(idata, model=model)
        with pytest.raises(pmdp.UnpublishableResultError):
            pmdp.privacy_spent(idata, 1e-5, model=model)
    assert group_names(idata) == group_names(before)
    assert set(group(idata, "sample_stats").data_vars) == set(group(before, "sample_stats").data_vars)
