"""Honest or flagged: diagnostics from the released draws on every MCMC result, and data-free dispersed starts."""

import json
import logging
import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.diagnostics import (
    ESS_MIN,
    R_HAT_MAX,
    RELEASED_STATISTICS_METHOD,
    PoorMixingError,
    PoorMixingWarning,
    attach_diagnostics,
    mixing_diagnostics,
    pymc_convergence_check_replaced,
    thresholds,
    verdict,
)
from pymc_dp.starts import prior_starts

RUN = dict(delta=1e-5, draws=150, tune=100, chains=4, progressbar=False, compute_convergence_checks=False)


# -- the pure functions --------------------------------------------------------------------------
def test_independent_draws_are_usable_and_stuck_or_separated_chains_are_not():
    rng = np.random.default_rng(0)
    good = mixing_diagnostics({"m": rng.normal(size=(4, 500)), "v": rng.normal(size=(4, 500, 2))})
    assert good["usable"] and good["problems"] == []
    assert good["variables"]["m"]["r_hat"] < 1.01 and good["variables"]["v"]["ess_bulk"] > 1000

    stuck = mixing_diagnostics({"m": np.full((4, 500), 0.3)}, accepted=np.zeros((4, 500)))
    assert not stuck["usable"] and stuck["variables"]["m"]["r_hat"] == "inf"
    assert "no proposal was accepted" in " ".join(stuck["problems"])

    # Four chains each tight around its own start: every chain looks converged on its own.
    separated = rng.normal(size=(4, 500)) * 0.01 + np.array([[-2.0], [-1.0], [1.0], [2.0]])
    result = mixing_diagnostics({"m": separated})
    assert not result["usable"] and result["variables"]["m"]["r_hat"] > R_HAT_MAX
    assert json.loads(json.dumps(result)) == result  # JSON-able as written to the attributes


def test_one_chain_uses_split_r_hat_and_few_draws_are_flagged():
    drift = np.linspace(-3, 3, 400)[None, :] + np.random.default_rng(1).normal(size=(1, 400)) * 0.1
    assert mixing_diagnostics({"m": drift})["variables"]["m"]["r_hat"] > R_HAT_MAX  # halves disagree
    short = mixing_diagnostics({"m": np.random.default_rng(2).normal(size=(2, 30))})
    assert not short["usable"] and short["variables"]["m"]["ess_bulk"] < ESS_MIN


def test_bad_draws_shape_names_the_variable():
    with pytest.raises(ValueError, match=r"`draws\['m'\]` must have shape \(chains, draws, ...\). Found shape \(5,\)"):
        mixing_diagnostics({"m": np.zeros(5)})


# -- starts ------------------------------------------------------------------------------------------
def _model(y):
    with pm.Model() as model:
        m = pm.Normal("m", 0, 3)
        s = pm.HalfNormal("s", 2)
        pm.Normal("y", m, s, observed=y)
    return model


def test_prior_starts_are_distinct_seeded_and_data_free():
    a = prior_starts(_model(np.zeros(10)), 4, 3)
    b = prior_starts(_model(np.arange(10.0) * 100), 4, 3)  # other data, same seed: same starts
    assert [d["m"] for d in a] == [d["m"] for d in b] and [d["s"] for d in a] == [d["s"] for d in b]
    assert len({float(d["m"]) for d in a}) == 4 and all(d["s"] > 0 for d in a)
    assert [d["m"] for d in prior_starts(_model(np.zeros(10)), 4, 4)] != [d["m"] for d in a]


def test_sample_starts_each_chain_at_its_own_prior_draw_by_default():
    y = np.random.default_rng(0).normal(0.5, 1.0, size=200)
    draws = {}
    for init in ("prior", "model"):
        with _model(y):
            step = pmdp.DPPenaltyMH(llr_clip=3.0, noise_multiplier=5.0, proposal_scale=1e-6, tune=False)
            idata = pmdp.sample(
                step=step, epsilon=1e6, init=init, random_seed=5, on_poor_mixing="ignore", **{**RUN, "tune": 0}
            )
        assert idata["posterior"].attrs["dp_start"] == init
        draws[init] = idata["posterior"]["m"].values[:, 0]
    assert len(set(np.round(draws["prior"], 3))) == 4  # four distinct starts (steps of 1e-6 barely move)
    assert np.allclose(draws["model"], draws["model"][0], atol=1e-4)  # all at the model's initial point


def test_init_is_validated_before_anything_is_charged():
    budget = pmdp.PrivacyBudget(10.0, 1e-5, n_rows=20)
    with _model(np.zeros(20)):
        step = pmdp.DPPenaltyMH(llr_clip=1.0)
        with pytest.raises(
            ValueError, match=r"`init` must be one of \['auto', 'prior', 'model', 'dpadvi'\]. Found 'jitter'"
        ):
            pmdp.sample(step=step, epsilon=1.0, budget=budget, init="jitter", **RUN)
        with pytest.raises(ValueError, match=r"`on_poor_mixing` must be one of \['warn', 'raise', 'ignore'\]"):
            pmdp.sample(step=step, epsilon=1.0, budget=budget, on_poor_mixing="loud", **RUN)
    assert budget.spent().epsilon == 0.0


# -- pmdp.sample: honest or flagged --------------------------------------------------------------------
def test_a_run_that_did_not_mix_warns_in_plain_words_and_records_why():
    # N·ε small: the penalty test cannot move far from dispersed starts (ESS ≈ ρ/(b²s²)).
    y = np.random.default_rng(0).normal(0.5, 1.0, size=500)
    with _model(y):
        with pytest.warns(PoorMixingWarning, match=r"did not produce a usable posterior: `m`: R-hat") as record:
            idata = pmdp.sample(step=pmdp.DPPenaltyMH(llr_clip=3.0), epsilon=0.5, random_seed=1, **RUN)
    message = str(record[0].message)
    assert "more ε or more rows" in message and "dp_diagnostics" in message
    diagnostics = json.loads(idata["posterior"].attrs["dp_diagnostics"])
    assert diagnostics["usable"] is False and diagnostics["problems"]
    assert len(diagnostics["acceptance_rate"]) == 4
    pmdp.privacy_spent(idata)  # the diagnostics attribute keeps the result publishable


def test_on_poor_mixing_raise_keeps_the_priced_result_on_the_error():
    y = np.random.default_rng(0).normal(0.5, 1.0, size=500)
    budget = pmdp.PrivacyBudget(1.0, 1e-5, n_rows=500)
    with _model(y), pytest.raises(PoorMixingError, match="did not produce a usable posterior") as info:
        pmdp.sample(step=pmdp.DPPenaltyMH(llr_clip=3.0), budget=budget, on_poor_mixing="raise", random_seed=2, **RUN)
    result = info.value.result
    assert result["posterior"].attrs["dp_epsilon"] == pytest.approx(budget.spent().epsilon)
    assert "observed_data" not in result


def test_a_run_that_mixed_is_marked_usable_without_a_warning(caplog):
    # Large N·ε and a proposal tuned to the posterior: the chains forget their prior starts.
    y = np.random.default_rng(3).normal(0.5, 1.0, size=200)
    with pm.Model(), caplog.at_level(logging.INFO, logger="pymc"):
        m = pm.Normal("m", 0, 1)
        pm.Normal("y", m, 1, observed=y)
        # τ·2b·‖θ′ − θ‖ ≈ 0.6: the penalty lets most proposals through.
        step = pmdp.DPPenaltyMH(llr_clip=3.0, noise_multiplier=1.0, proposal_scale=0.1, tune=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error", PoorMixingWarning)
            run = {**RUN, "draws": 600, "tune": 300, "compute_convergence_checks": True}  # PyMC's check runs
            idata = pmdp.sample(step=step, epsilon=1e4, random_seed=4, **run)
    diagnostics = json.loads(idata["posterior"].attrs["dp_diagnostics"])
    assert diagnostics["usable"], diagnostics["problems"]
    assert diagnostics["variables"]["m"]["r_hat"] <= R_HAT_MAX
    # One verdict shown: the result's own line (with its thresholds and rule), none of PyMC's R-hat/ESS messages.
    said = [r.getMessage() for r in caplog.records]
    assert not [line for line in said if line.startswith(("The rhat statistic", "The effective sample size"))]
    (line,) = [line for line in said if line.startswith("DP result diagnostics")]
    assert "usable; largest R-hat" in line and "flagged above 1.05" in line and "flagged below 100" in line
    assert "DP chains: ε caps the ESS" in line


def _mixed_result(seed=0):
    import arviz as az

    draws = np.random.default_rng(seed).normal(size=(4, 500))
    if int(az.__version__.split(".")[0]) >= 1:  # ArviZ 1.x (PyMC 6): groups in one mapping, a DataTree back
        return az.from_dict({"posterior": {"theta": draws}})
    return az.from_dict(posterior={"theta": draws})


def test_divergences_after_tuning_flag_a_result_of_nuts_on_released_statistics():
    # Independent draws: usable on their own; any divergence after tuning flags them, with the advice of the
    # released-statistics route (rerunning the sampler is free), not the DP chains' (more ε or rows).
    clean = attach_diagnostics(_mixed_result(), "warn", method=RELEASED_STATISTICS_METHOD, divergences=0)
    recorded = json.loads(clean.posterior.attrs["dp_diagnostics"])
    assert recorded["usable"] and recorded["divergences"] == 0
    with pytest.warns(PoorMixingWarning, match="3 divergent transitions after tuning") as caught:
        flagged = attach_diagnostics(_mixed_result(), "warn", method=RELEASED_STATISTICS_METHOD, divergences=3)
    assert "costs no privacy" in str(caught[0].message) and "N·ε" not in str(caught[0].message)
    recorded = json.loads(flagged.posterior.attrs["dp_diagnostics"])
    assert not recorded["usable"] and recorded["divergences"] == 3
    with pytest.raises(PoorMixingError, match="divergent"):
        attach_diagnostics(_mixed_result(), "raise", method=RELEASED_STATISTICS_METHOD, divergences=1)


def test_sampling_released_statistics_records_its_divergences():
    rng = np.random.default_rng(1)
    release = pmdp.release_statistics("bernoulli", rng.integers(0, 2, 500), epsilon=1.0)
    with pm.Model():
        release.likelihood("y", p=pm.Beta("p", 2, 2))
        # The release's noise is OS entropy, so the chain differs per run: with 2 chains of 1,000 draws the bulk
        # ESS was 585-760 over 30 runs; released statistics are held to PyMC's R-hat 1.01, whose noise at that
        # ESS still crosses it now and then (R-hat - 1 ≈ 2m/(2·ESS)·χ²/(2m - 1)), so four chains of 1,000.
        idata = release.sample(draws=1000, tune=200, chains=4, random_seed=3, progressbar=False)
    recorded = json.loads(idata.posterior.attrs["dp_diagnostics"])
    assert recorded["divergences"] == 0 and recorded["usable"]
    assert recorded["method"] == "pm.sample on released statistics"


# -- one verdict per result: PyMC's convergence check and dp_diagnostics never contradict each other ----------
def _offset_chains(seed, offsets, draws, phi=0.0):
    # Stationary AR(1) draws (unit variance, lag-1 correlation phi) per chain, each chain shifted by its offset:
    # R-hat ≈ √(1 + var(offsets)) when draws are many; ESS per chain ≈ draws·(1 - phi)/(1 + phi) without offsets
    rng = np.random.default_rng(seed)
    noise = rng.normal(size=(len(offsets), draws))
    x = np.empty_like(noise)
    x[:, 0] = noise[:, 0]
    for t in range(1, draws):
        x[:, t] = phi * x[:, t - 1] + np.sqrt(1 - phi**2) * noise[:, t]
    return x + np.asarray(offsets)[:, None]


def _as_result(draws):
    import arviz as az

    if int(az.__version__.split(".")[0]) >= 1:
        return az.from_dict({"posterior": {"theta": draws}})
    return az.from_dict(posterior={"theta": draws})


def _pymc_verdict(draws):
    """The messages of PyMC's own convergence check on these draws (as pm.sample would log them)."""
    from pymc.stats.convergence import run_convergence_checks

    with pm.Model() as model:
        pm.Normal("theta", 0, 1)
    return [w.message for w in run_convergence_checks(_as_result(draws), model)]


@pytest.mark.parametrize(
    "case, draws",
    [
        # R-hat ≈ √(1 + 0.053) ≈ 1.026 (shifts ±0.2 sd; its sampling sd at 4 × 1,000 iid draws is ~0.001)
        ("r_hat", lambda: _offset_chains(0, [-0.2, -0.2, 0.2, 0.2], 1000)),
        # 8 chains × 100 draws, phi = 1/7: ESS ≈ 600 (sd ~60): above 100 in all, below 100 per chain (800); the
        # split R-hat of chains that mixed, ≈ 1 + 16/(2·600)·χ²₁₅/15 - ..., stays far below 1.05 (PyMC checks
        # only from 100 draws per chain on)
        ("ess", lambda: _offset_chains(1, [0.0] * 8, 100, phi=1 / 7)),
        # mixed and plentiful: usable under both rules
        ("fine", lambda: _offset_chains(2, [0.0, 0.0, 0.0, 0.0], 1000)),
    ],
)
def test_released_statistics_are_held_to_pymcs_thresholds_and_dp_chains_to_theirs(case, draws):
    values = draws()
    released = mixing_diagnostics({"theta": values}, method=RELEASED_STATISTICS_METHOD)
    chains = mixing_diagnostics({"theta": values})  # DP chains
    pymc_says = _pymc_verdict(values)
    pymc_flags = any(m.startswith(("The rhat statistic", "The effective sample size")) for m in pymc_says)
    # On released statistics the two rules agree: PyMC warns exactly when the result is flagged.
    assert pymc_flags == (not released["usable"]) == (case != "fine"), (pymc_says, released["problems"])
    assert released["thresholds"]["r_hat_max"] == 1.01 and released["thresholds"]["ess_min"] == 100 * len(values)
    if case == "r_hat":
        # the R-hat, shown to 3 decimals (more where 3 would round it down to the threshold); the chains' shifts
        # also lower the bulk ESS (≈ 4,000/(1 + 500·0.046) ≈ 170), flagged at 400 but not at 100
        assert released["problems"][0].startswith(
            f"`theta`: R-hat {released['variables']['theta']['r_hat']:.3f} > 1.01"
        )
        assert 1.015 < released["variables"]["theta"]["r_hat"] < 1.04
    if case == "ess":
        assert "bulk ESS" in released["problems"][0] and "< 800 (100 per chain)" in released["problems"][0]
    # DP chains are held to R-hat 1.05 and ESS 100 in all: these draws are usable there.
    assert chains["usable"] and chains["thresholds"]["r_hat_max"] == R_HAT_MAX == 1.05
    assert chains["thresholds"]["ess_min"] == ESS_MIN == 100


def test_dp_chains_show_one_verdict_pymcs_r_hat_and_ess_messages_held_back(caplog):
    convergence = logging.getLogger("pymc.stats.convergence")
    with caplog.at_level(logging.INFO, logger="pymc"):
        with pymc_convergence_check_replaced():
            convergence.info("The rhat statistic is larger than 1.01 for some parameters.")
            convergence.error("The effective sample size per chain is smaller than 100 for some parameters.")
            convergence.error("There were 2 divergences after tuning.")  # not a threshold verdict: kept
        convergence.info("The rhat statistic is larger than 1.01 (outside: PyMC's)")
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "There were 2 divergences after tuning.",
        "The rhat statistic is larger than 1.01 (outside: PyMC's)",
    ]


def test_chains_that_mixed_show_the_r_hat_the_dp_threshold_allows_for():
    # The reason DP chains are not held to 1.01 (pymc_dp.diagnostics): at the ESS a DP budget buys (~100 in all),
    # chains that have mixed (stationary AR(1), started from the stationary law) show a split R-hat of about
    # √(1 + 2m/ESS): 1.039 for 4 chains, above PyMC's 1.01 in nearly every run, below 1.05 in most.
    from scipy.signal import lfilter

    chains, draws, ess = 4, 1000, 100.0
    phi = (draws - ess / chains) / (draws + ess / chains)  # ESS per chain = draws·(1 - φ)/(1 + φ)
    rng = np.random.default_rng(7)
    r_hats = []
    for _ in range(100):
        noise = rng.normal(size=(chains, draws)) * np.sqrt(1 - phi**2)
        noise[:, 0] = rng.normal(size=chains)  # stationary start
        r_hats.append(mixing_diagnostics({"x": lfilter([1.0], [1.0, -phi], noise, axis=1)})["variables"]["x"]["r_hat"])
    r_hats = np.array(r_hats)
    mean, se = r_hats.mean(), r_hats.std(ddof=1) / np.sqrt(r_hats.size)
    assert abs(mean - np.sqrt(1 + 2 * chains / ess)) < 4 * se + 0.002  # measured: 1.0384 ± 0.0015 (200 runs)
    assert np.mean(r_hats > 1.01) > 0.8 and np.median(r_hats) < R_HAT_MAX  # measured: 96 % above 1.01, 77 % ≤ 1.05


def test_printed_r_hat_shows_why_a_result_is_or_is_not_flagged():
    # az.summary shows R-hat to two decimals, so 1.0081 (passed on released statistics, threshold 1.01) and 1.0112
    # (flagged) both read "1.01" there; our verdict and problems print three decimals, more where three would round a
    # flagged value down to the threshold (docs/workflow.md). Pure formatting: well under a second, no sampling.
    limits = thresholds(RELEASED_STATISTICS_METHOD, 4)

    def diagnostics(r_hat, usable, problems=()):
        variables = {"slopes": {"r_hat": r_hat, "ess_bulk": 900.4, "ess_tail": 850.6}}
        return {"thresholds": limits, "usable": usable, "problems": list(problems), "variables": variables}

    passed = verdict(diagnostics(1.0081, True))
    assert passed.startswith("DP result diagnostics (from the released draws, no privacy cost): usable;")
    assert "largest R-hat 1.008 (flagged above 1.01), smallest bulk ESS 900 and tail ESS 851 (flagged below 400)" in (
        passed
    )
    for r_hat, shown in ((1.0112, "1.011"), (1.0104, "1.0104"), (1.0100004, "1.0100004")):
        flagged = verdict(diagnostics(r_hat, False, [f"`slopes`: R-hat {shown} > 1.01"]))
        assert f"largest R-hat {shown} (flagged above 1.01)" in flagged and "NOT a usable posterior" in flagged
    # the same rule in the problems mixing_diagnostics writes: chains 0.2 sd apart give R-hat ≈ 1.02
    rng = np.random.default_rng(5)
    draws = rng.normal(size=(4, 1000)) + np.array([-0.2, -0.2, 0.2, 0.2])[:, None]
    found = mixing_diagnostics({"slopes": draws}, method=RELEASED_STATISTICS_METHOD)
    r_hat = found["variables"]["slopes"]["r_hat"]
    assert found["problems"][0].startswith(f"`slopes`: R-hat {r_hat:.3f} > 1.01")
