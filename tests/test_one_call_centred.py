"""Centring by default in pmdp.sample(step=DPHMC or DPPenaltyMH) (issue 36): when it applies, accounting, record."""

from __future__ import annotations

import copy
import functools
import itertools
import json
import math

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.accounting.calibrate import CALIBRATION_MARGIN
from pymc_dp.accounting.events import GaussianReleases
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.centred_predictions import random_phase_ess
from pymc_dp.mechanisms.centred import CentringAnchor
from pymc_dp.statement import _g as statement_number  # the statement's own number format
from pymc_dp.step_methods.centred_plan import (
    CENTRE_ANCHOR_SHARE,
    CENTRE_HESSIAN_SHARE,
    CENTRE_NEWTON_SHARE,
    CENTRE_NEWTON_STEPS,
    anchor_posterior_scale,
    centred_ess,
    logistic_centring_bound,
    newton_point,
    plan_centring,
)

QUIET = dict(progressbar=False, compute_convergence_checks=False, on_poor_mixing="ignore")
RUN = dict(epsilon=4.0, delta=1e-5, draws=8, tune=8, chains=1, cores=1, random_seed=3)
BOUND = 2.0


def _logistic(n: int = 400, seed: int = 1) -> pm.Model:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-BOUND, BOUND, size=(n, 2))
    y = (rng.random(n) < 1 / (1 + np.exp(-(0.3 + x @ np.array([0.8, -0.5]))))).astype("int64")
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 2, shape=2)
        pm.Bernoulli("y", logit_p=alpha + pm.Data("x", x) @ beta, observed=y)
    return model


@pytest.fixture(scope="module")
def logistic():
    return _logistic()


@pytest.fixture(scope="module")
def step(logistic):
    """One DPHMC step for every run here (its compiled functions are the tests' main cost)."""
    with logistic:
        return pmdp.DPHMC(n_leapfrog=2)


@pytest.fixture(scope="module")
def centred_run(logistic, step):
    budget = pmdp.PrivacyBudget(epsilon=10.0, delta=1e-5, n_rows=400)
    with logistic:
        idata = pmdp.sample(step=step, x_bounds=(-BOUND, BOUND), budget=budget, **RUN, **QUIET)
    return idata, step, budget


def _record(idata):
    return json.loads(idata.posterior.attrs["dp_accountant"])


def test_logistic_bound_is_the_worst_row_norm(logistic):
    bound, source = logistic_centring_bound(logistic, ((-1.0, -2.0), (3.0, 0.5)))
    assert source == "x_bounds"
    assert bound == pytest.approx(math.sqrt(1.0 + 9.0 + 4.0))  # the intercept's 1, then max |bound| per column
    assert math.isnan(logistic_centring_bound(logistic, None)[0])


def test_a_model_the_bound_does_not_describe_is_named():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 2))
    with pm.Model() as linear:
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Normal("y", x @ b, 1.0, observed=rng.normal(size=50))
    assert logistic_centring_bound(linear, (-1, 1)) == (None, logistic_centring_bound(linear, None)[1])
    assert "not a logistic regression" in logistic_centring_bound(linear, None)[1]
    with pm.Model() as scaled:  # coefficients through a transform: κ is not for the sampled parameters
        t = pm.HalfNormal("t", 1.0, shape=2)
        pm.Bernoulli("y", logit_p=x @ t, observed=(rng.random(50) < 0.5).astype(int))
    assert logistic_centring_bound(scaled, (-1, 1))[0] is None


def test_dphmc_centres_by_default_with_public_covariate_bounds(centred_run):
    idata, step, _ = centred_run
    record = _record(idata)
    bound = math.sqrt(1.0 + 2 * BOUND**2)
    assert record["centring"]["used"] is True
    assert record["centring"]["lipschitz"] == pytest.approx(bound**3 / (6 * math.sqrt(3)))
    # the anchor's clips: the released ones (margin × noisy quantile at the anchor) where below B and B²/4
    assert 0 < record["centring"]["grad_clip"] <= bound and 0 < record["centring"]["hessian_clip"] <= bound**2 / 4
    assert record["centring"]["clip_source"].startswith("released")
    centring = record["steps"][0]["centring"]
    assert centring["order"] == 2 and len(centring["point"]) == 3 and len(centring["hessian"]) == 3
    assert record["clip_bound"]["bounds"] == {}  # the chains need no clip bound of their own
    releases = record["clip_bound"]["releases"]  # the DPADVI fit's, then the anchor's score and Hessian norms
    assert len(releases) == 3 and releases[2]["norms"] == "Hessian (Frobenius)"
    histograms = [e for e in record["events"] if e["label"].endswith("clip bound")]
    assert [e["count"] for e in histograms] == [3]
    prediction = record["centring"]["prediction"]
    # Not capped at the draws: DPHMC's trajectories can be antithetic (more than one effective draw per draw,
    # centred_predictions.ar1_ess); a cold CI run read 9.04 for 8 draws.
    assert prediction["method"] == "DPHMC" and 0 <= prediction["ess_per_chain"] < math.inf
    # the step is uncentred again after the run: a later plain pm.sample uses its own settings
    assert step.anchor is None and step.centre_lipschitz is None
    assert "centred on a released anchor" in pmdp.privacy_statement(idata).text


def test_one_accountant_covers_the_anchor_and_the_chains(centred_run):
    idata, _, budget = centred_run
    record = _record(idata)
    anchors = [e for e in record["events"] if "centring anchor" in e.get("label", "")]
    assert len(anchors) == 2  # the score sum and the Hessian sum, once each
    mu_anchor = CENTRE_ANCHOR_SHARE * gaussian_mu_for_target(
        (1 - 0.2 - 0.05) * RUN["epsilon"] * (1 - CALIBRATION_MARGIN), RUN["delta"]
    )
    # the anchor gets 1 − CENTRE_NEWTON_SHARE of the anchor's μ, the pilots of its Newton steps the rest
    final = (1 - CENTRE_NEWTON_SHARE) * mu_anchor
    taus = sorted(e["noise_multiplier"] for e in anchors)
    expected = sorted(math.sqrt(0.5 / (share * final)) for share in (1 - CENTRE_HESSIAN_SHARE, CENTRE_HESSIAN_SHARE))
    assert taus == pytest.approx(expected, rel=1e-8)
    assert record["steps"][0]["centring"]["noise_multiplier"] == pytest.approx(expected[0], rel=1e-8)
    pilots = [e for e in record["events"] if "centring Newton step" in e.get("label", "")]
    assert len(pilots) == 2 * CENTRE_NEWTON_STEPS  # a score and a Hessian release per step
    pilot_mu = sum(e["count"] / (2 * e["noise_multiplier"] ** 2) for e in pilots)
    anchor_mu = sum(e["count"] / (2 * e["noise_multiplier"] ** 2) for e in anchors)
    assert pilot_mu + anchor_mu == pytest.approx(mu_anchor, rel=1e-7)  # the split moves μ, never adds any
    assert pilot_mu == pytest.approx(CENTRE_NEWTON_SHARE * mu_anchor, rel=1e-7)
    assert idata.posterior.attrs["dp_epsilon"] <= RUN["epsilon"]
    assert pmdp.privacy_spent(idata).epsilon == pytest.approx(idata.posterior.attrs["dp_epsilon"], rel=1e-12)
    assert budget.spent().epsilon == pytest.approx(idata.posterior.attrs["dp_epsilon"], rel=1e-9)


def test_the_recentred_run_prices_the_same_epsilon_records_and_states_the_second_release(logistic, step, centred_run):
    """centre="recentre" end to end (the same step, about 2 CPU s): its re-centring release is priced inside the
    anchor's μ (the run's ε equals the plain centred run's), recorded with its public bounds, and named in the
    privacy statement; the anchor's noise the result is widened by includes it."""
    budget = pmdp.PrivacyBudget(epsilon=10.0, delta=1e-5, n_rows=400)
    with logistic:
        idata = pmdp.sample(step=step, x_bounds=(-BOUND, BOUND), budget=budget, centre="recentre", **RUN, **QUIET)
    plain = centred_run[0]
    assert idata.posterior.attrs["dp_epsilon"] == pytest.approx(plain.posterior.attrs["dp_epsilon"], rel=1e-9)
    assert budget.spent().epsilon == pytest.approx(idata.posterior.attrs["dp_epsilon"], rel=1e-9)
    record = _record(idata)
    recentring = [e for e in record["events"] if "re-centring" in e.get("label", "")]
    assert len(recentring) == 2 and all(e["type"] == GaussianReleases.kind for e in recentring)
    centring = record["steps"][0]["centring"]
    moved = centring["recentring"]
    assert moved["score_bound"] > 0 and moved["hessian_bound"] > 0
    assert centring["noise_std"] == pytest.approx(math.hypot(moved["earlier"]["noise_std"], moved["noise_std"]))
    text = pmdp.privacy_statement(idata).text
    assert "the anchor's own Newton point" in text and statement_number(moved["score_bound"]) in text
    assert "anchor's own Newton point" not in pmdp.privacy_statement(plain).text


def test_events_are_gaussian_releases_at_the_recorded_noise(centred_run):
    idata, _, _ = centred_run
    record = _record(idata)
    centring = record["steps"][0]["centring"]
    assert centring["noise_std"] == pytest.approx(centring["noise_multiplier"] * 2 * centring["grad_clip"])
    assert centring["hessian_noise_std"] == pytest.approx(
        centring["hessian_noise_multiplier"] * 2 * centring["hessian_clip"]
    )
    anchors = [e for e in record["events"] if "centring anchor" in e.get("label", "")]
    assert [e["type"] for e in anchors] == [GaussianReleases.kind] * 2 and [e["count"] for e in anchors] == [1, 1]


def test_without_bounds_the_plan_is_plain_and_says_why(logistic, step):
    # planning only: the run's record copies these (an uncentred run's record end to end: test_planning's draws="auto")
    the_plan = _plan_sample(logistic, step, **RUN)
    assert the_plan.centring is None and the_plan.centring_record == {
        "used": False,
        "reason": "no public covariate bound: give x_bounds (or a κ as centre_lipschitz)",
    }
    assert "centring" not in the_plan.planned[0].accountant_settings()
    assert not any("centring" in e.label for e in the_plan.earlier)
    # the DPADVI fit's clip bound, then the plain chain's own (at the fit's mean): no anchor's Hessian histogram
    assert [e.count for e in the_plan.clip_plan.events] == [2]


def _settings(**given):
    return {
        "centre": "auto",
        "centre_lipschitz": None,
        "x_bounds": None,
        "init_epsilon_share": 0.2,
        "clip_epsilon_share": 0.05,
        **given,
    }


def test_the_decision_reads_public_settings_only(logistic, step):
    start = object()  # a planned DP start: only whether there is one matters
    decide = functools.partial(plan_centring, steps=[step], model=logistic, epsilon=4.0, delta=1e-5)
    assert decide(_settings(centre=False), dp_init=start) == (None, {"used": False, "reason": "centre=False"})
    assert decide(_settings(x_bounds=(-2, 2)), dp_init=start)[0] is not None
    assert "no DP start" in decide(_settings(), dp_init=None)[1]["reason"]
    assert "JAX or Dask" in decide(_settings(), dp_init=start, backends=("device", None))[1]["reason"]
    with pytest.raises(ValueError, match=r"`x_bounds` must be None .*no DP start"):
        decide(_settings(x_bounds=(-2, 2)), dp_init=None)
    # more ε, more μ for the anchor; the κ and clips do not depend on ε
    small, big = (decide(_settings(x_bounds=(-2, 2)), dp_init=start, epsilon=e)[0] for e in (1.0, 8.0))
    assert big.noise_multiplier < small.noise_multiplier and big.lipschitz == small.lipschitz


def test_a_callers_own_clip_bounds_are_named_as_replaced_by_the_centring_bounds(logistic, step):
    hand_set = copy.copy(step)  # the module's step (compiled once) with a clip bound set by hand
    hand_set.grad_clip = 5.0
    decide = functools.partial(plan_centring, steps=[hand_set], model=logistic, epsilon=4.0, delta=1e-5)
    plan, record = decide(_settings(x_bounds=(-2, 2)), dp_init=object())
    assert record["replaced_clip_bounds"] == {"grad_clip": 5.0}
    assert plan.grad_clip != 5.0  # the centred chain clips at the centring bounds, as the record says


def _plan_sample(model, step, **given):
    """pmdp.sample's plan of a run (sample_plan.plan_sample): checked and priced, no row read, no chain run."""
    import inspect

    from pymc_dp.sample_plan import plan_sample

    parameters = inspect.signature(pmdp.sample).parameters.items()
    defaults = {k: v.default for k, v in parameters if k not in ("step", "model", "kwargs")}
    with model:
        return plan_sample(step, model, {}, **{**defaults, **given})


def test_a_callers_kappa_opts_in_without_bounds(logistic, step):
    # planning only: the run's record takes these from the plan (centring.record(), centring.settings())
    the_plan = _plan_sample(logistic, step, centre_lipschitz=0.5, **RUN)
    record = the_plan.centring_record
    assert record["used"] is True and record["lipschitz"] == 0.5 and record["lipschitz_source"] == "centre_lipschitz"
    assert record["grad_clip"] <= (0.5 * 6 * math.sqrt(3)) ** (1 / 3) + 1e-12
    assert the_plan.centring.settings()["lipschitz"] == 0.5


@pytest.mark.slow
def test_dppenaltymh_centres_too(logistic):
    with logistic:
        idata = pmdp.sample(step=pmdp.DPPenaltyMH(), x_bounds=(-BOUND, BOUND), **RUN, **QUIET)
    record = _record(idata)
    assert record["centring"]["used"] is True and record["centring"]["prediction"]["method"] == "DPPenaltyMH"
    assert record["steps"][0]["step"] == "DPPenaltyMH" and record["steps"][0]["centring"]["order"] == 2


def _unspent(budget):
    return budget.spent().epsilon == 0.0


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"centre": "yes"}, ValueError, "`centre` must be 'auto', True or False. Found 'yes'"),
        ({"centre": True}, ValueError, "`centre`=True needs centring to apply to this run. Found: no public"),
        ({"centre": True, "init": "prior"}, ValueError, "Found: no DP start to anchor at"),
        ({"centre": False, "x_bounds": (-2, 2)}, ValueError, r"`x_bounds` must be None .* \(centre=False\)"),
        ({"centre_lipschitz": -1.0}, ValueError, "`centre_lipschitz` must be"),
        ({"centre": False, "centre_lipschitz": 1.0}, ValueError, "`centre_lipschitz` must be None with centre=False"),
        ({"x_bounds": (2, -2)}, ValueError, "`x_bounds` must hold finite bounds with lower ≤ upper"),
        ({"x_bounds": "wide"}, ValueError, "`x_bounds` must be a pair"),
    ],
)
def test_bad_centring_settings_are_refused_before_anything_is_spent(logistic, step, settings, error, message):
    budget = pmdp.PrivacyBudget(epsilon=10.0, delta=1e-5, n_rows=400)
    run = {**RUN, **settings}
    with logistic, pytest.raises(error, match=message):
        pmdp.sample(step=step, budget=budget, **run, **QUIET)
    assert _unspent(budget) and step.anchor is None


def test_a_budget_too_small_for_anchor_and_chains_is_refused_before_any_row(logistic, step):
    budget = pmdp.PrivacyBudget(epsilon=1.0, delta=1e-5, n_rows=400)
    with logistic, pytest.raises(pmdp.PrivacyBudgetExceededError):
        pmdp.sample(step=step, x_bounds=(-2, 2), budget=budget, **RUN, **QUIET)
    assert _unspent(budget) and step.anchor is None


def test_centring_arguments_need_a_step(logistic):
    with logistic, pytest.raises(ValueError, match="`centre` and `centre_lipschitz` must be left unset without"):
        pmdp.sample(epsilon=4.0, delta=1e-5, centre=True)


def test_predicted_ess_limits():
    common = dict(draws=1000, n_params=5, posterior_sd=0.01, offset_sd=1.0, lipschitz=2.0)
    # no noise: the random walk's ceiling, and DPHMC accepts everything
    assert centred_ess(**common, llr_noise_multiplier=0.0)["ess_per_chain"] == pytest.approx(0.331 * 1000 / 5)
    # DPHMC without noise: leapfrog's own error sets the step (acceptance at the target), far past the quarter
    # period, so each direction's angle is uniform over a period and the worst of P is random_phase_ess's
    hmc = centred_ess(**common, llr_noise_multiplier=0.0, grad_noise_multiplier=0.0, n_leapfrog=5)
    assert hmc["acceptance"] == pytest.approx(0.65, abs=1e-6) and min(hmc["angles"]) > math.pi
    assert hmc["ess_per_chain"] == pytest.approx(1000 * random_phase_ess(0.65, 5))
    # the penalty chain: more noise, or an anchor further off, never predicts more (DPHMC's law need not be monotone:
    # noise that keeps a trajectory within its first period can beat a quieter one's resonances; centred_ess's docs)
    far = centred_ess(**{**common, "offset_sd": 4.0}, llr_noise_multiplier=1e3)
    assert far["ess_per_chain"] < centred_ess(**common, llr_noise_multiplier=1e3)["ess_per_chain"]
    walk = [centred_ess(**common, llr_noise_multiplier=t)["ess_per_chain"] for t in (1e3, 1e4)]
    assert walk[1] < walk[0]
    # the penalty chain's noise factor is the planner's c with b = ½κR², R² = P s² (1 + e²)
    c = centred_ess(**common, llr_noise_multiplier=100.0)["c"]
    assert c == pytest.approx(2 * 100.0 * 0.5 * 2.0 * 5 * 0.01**2 * 2 * 0.01)


def test_the_prediction_reads_the_scale_off_the_released_anchor():
    sds, offset = np.array([0.1, 0.2, 0.4]), np.array([1.0, -2.0, 0.5])  # the mode is θ̂ + offset·sds
    hessian = -np.diag(1 / sds**2)
    anchor = CentringAnchor(np.zeros(3), -hessian @ (offset * sds), 1.0, 1.0, "substitute", hessian=hessian)
    s, e = anchor_posterior_scale(anchor, 9.0, 9.0)
    assert s == pytest.approx(np.exp(np.mean(np.log(sds)))) and e == pytest.approx(np.sqrt(np.mean(offset**2)))
    noisy = CentringAnchor(np.zeros(3), np.zeros(3), 1.0, 1.0, "substitute", hessian=np.eye(3))  # not negative
    assert anchor_posterior_scale(noisy, 9.0, 8.0) == (9.0, 8.0)


def test_the_anchor_moves_by_a_recorded_newton_step_from_the_dp_start(centred_run):
    idata, _, _ = centred_run
    record = _record(idata)
    centring = record["centring"]
    assert centring["newton_steps"] == CENTRE_NEWTON_STEPS and centring["newton_share"] == CENTRE_NEWTON_SHARE
    assert centring["anchor"].startswith(f"{CENTRE_NEWTON_STEPS} noisy Newton step")
    path = centring["newton_path"]
    assert len(path) == CENTRE_NEWTON_STEPS
    # the anchor sits where the last step led (post-processing of the pilot's released values)
    assert record["steps"][0]["centring"]["point"] == pytest.approx(path[-1]["newton_point"])
    assert path[0]["point"] != pytest.approx(path[-1]["newton_point"])  # it moved from the DP start
    # each pilot's noise is the schedule's (each CENTRE_NEWTON_GROWTH times the μ of the one before); the record's
    # single newton_noise_multiplier is the last pilot's, which sets where the anchor lands
    schedule = centring["newton_noise_multipliers"]
    assert [p["noise_multiplier"] for p in path] == pytest.approx([pair[0] for pair in schedule])
    assert path[-1]["noise_multiplier"] == pytest.approx(centring["newton_noise_multiplier"])
    assert all(later < earlier for (earlier, _), (later, _) in itertools.pairwise(schedule))
    text = pmdp.privacy_statement(idata).text
    assert "centred on a released anchor" in text
    assert f"Before it, {CENTRE_NEWTON_STEPS} pilot releases of the same two clipped sums" in text
    # every pilot's multipliers are stated, first to last (not the last pilot's for all of them)
    stated = "; ".join(f"{statement_number(g)} and {statement_number(h)}" for g, h in schedule)
    assert f"noise multipliers for scores and Hessians, first pilot to last: {stated}" in text
    # the pilots' public clips, and where the anchor's clip histograms were released, are stated when recorded
    assert centring["newton_clips"] and "Each pilot clipped every row's score at the public B" in text
    assert centring["clip_histograms_point"] is not None and "released at the anchor's own point" in text


class _FlatPrior:
    """A data-free prior with zero score and curvature (the Newton step is then the likelihood's alone)."""

    def prior_logp_and_grad(self, theta):
        return 0.0, np.zeros_like(theta)


def _pilot(point, gradient, hessian, hessian_noise_multiplier=1e-6):
    return CentringAnchor(
        np.asarray(point, float),
        np.asarray(gradient, float),
        1.0,
        1.0,
        "substitute",
        hessian=np.asarray(hessian, float),
        hessian_clip=1.0,
        hessian_noise_multiplier=hessian_noise_multiplier,
    )


def test_a_newton_step_on_exact_releases_lands_on_a_quadratics_mode():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 3))
    precision = a @ a.T + 3 * np.eye(3)  # log-likelihood −½(θ − m)ᵀA(θ − m)
    mode, theta = np.array([0.5, -1.0, 2.0]), np.array([3.0, 1.0, -1.0])
    pilot = _pilot(theta, precision @ (mode - theta), -precision)
    np.testing.assert_allclose(newton_point(pilot, _FlatPrior()), mode, rtol=1e-10)


def test_a_newton_step_adds_the_priors_score_and_curvature():
    class GaussianPrior:  # N(0, 1) on every coordinate
        def prior_logp_and_grad(self, theta):
            return -0.5 * float(theta @ theta), -theta

    theta = np.array([1.0, -2.0])
    pilot = _pilot(theta, 4.0 * (np.array([0.5, 0.5]) - theta), -4.0 * np.eye(2))  # likelihood N(θ; 0.5, 1/4)
    # the posterior's mode: precision 4 + 1, mean 4·0.5/5
    np.testing.assert_allclose(newton_point(pilot, GaussianPrior()), np.full(2, 0.4), rtol=1e-6)


def test_a_curvature_the_release_cannot_tell_from_noise_takes_a_bounded_step():
    # −Ĥ has a negative eigenvalue (noise): its |λ| floored at σ_H√(2P) sets the step, never a wild one
    hessian = np.diag([-10.0, 1.0])
    pilot = _pilot([0.0, 0.0], [0.0, 3.0], hessian, hessian_noise_multiplier=1.0)  # σ_H = 2, floor 2·√4 = 4
    np.testing.assert_allclose(newton_point(pilot, _FlatPrior()), [0.0, 3.0 / 4.0])


def test_chain_statistics_leave_out_the_anchor_the_run_priced(centred_run):
    idata, _, _ = centred_run
    cumulative = idata.sample_stats["dp_mu_cumulative"].values
    per = np.diff(cumulative, axis=1)
    np.testing.assert_allclose(per, per[0, 0])
    # the first stored draw follows the tuning iterations: that many iterations' μ and no anchor
    np.testing.assert_allclose(cumulative[:, 0], (RUN["tune"] + 1) * per[0, 0])
    record = _record(idata)
    chain = [e for e in record["events"] if e["label"].startswith("DPHMC") and "centring" not in e["label"]]
    chain = [e for e in chain if "clip bound" not in e["label"]]
    chain_mu = sum(e["count"] / (2 * e["noise_multiplier"] ** 2) for e in chain)
    assert cumulative[:, -1].sum() == pytest.approx(chain_mu, rel=1e-9)  # the stat and the record agree


def test_the_anchors_clips_are_read_at_its_point_and_the_pilots_clip_at_the_public_worst_case(centred_run):
    """Finding 2: the norm histograms that set (and check) the anchor's clips are released where the anchor sits."""
    idata, _, _ = centred_run
    record = _record(idata)
    centring = record["centring"]
    anchor_point = record["steps"][0]["centring"]["point"]
    assert centring["clip_histograms_point"] == pytest.approx(anchor_point, rel=1e-12)
    assert anchor_point == pytest.approx(centring["newton_path"][-1]["newton_point"], rel=1e-12)
    bound = math.sqrt(1.0 + 2 * BOUND**2)  # B over x_bounds: the pilots never read a released clip
    assert centring["newton_clips"] == pytest.approx([bound, bound**2 / 4])
    for pilot in centring["newton_path"]:
        assert (pilot["grad_clip"], pilot["hessian_clip"]) == pytest.approx((bound, bound**2 / 4))
    anchors_histograms = record["clip_bound"]["releases"][1:]
    assert [r["reference"] for r in anchors_histograms] == ["the centring anchor's point (the last Newton point)"] * 2


def test_the_anchors_clipping_is_recorded_on_a_centred_result(centred_run):
    idata, _, _ = centred_run
    diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
    centring = _record(idata)["centring"]
    assert diagnostics["clipping"]["bound"] in (centring["grad_clip"], centring["hessian_clip"])


class _Rows:
    n_rows, neighbouring = 10_000, "substitute"


class _ClipPlan:
    """The released histograms a centred run's clip plan holds: the fit's, then the anchor's score and Hessian norms."""

    def __init__(self, score_norm: float, hessian_norm: float) -> None:
        from pymc_dp.mechanisms.clip_bound import NORM_GRID_EDGES, norm_histogram

        self.step, self.noise_std = _Rows(), 1.0  # noise small next to 1/√N of 10,000 rows
        self.counts = [norm_histogram(np.full(10_000, norm)) for norm in (1.0, score_norm, hessian_norm)]
        assert NORM_GRID_EDGES[0] < min(score_norm, hessian_norm)
        self.releases = [{"bound": 2.0, "resolvable": True, "reference": "θ₀"} for _ in range(3)]


@pytest.mark.parametrize(
    ("score_norm", "hessian_norm", "flagged"), [(0.5, 0.3, False), (8.0, 0.3, True), (0.5, 5, True)]
)
def test_an_anchor_clip_that_binds_flags_the_result(score_norm, hessian_norm, flagged):
    from pymc_dp.step_methods.centred_plan import CentringPlan
    from pymc_dp.usability import clipping_problem

    plan = CentringPlan(
        1.0, grad_clip=2.0, hessian_clip=1.0, noise_multiplier=1.0, hessian_noise_multiplier=1.0, source=""
    )
    clipping = plan.clipping(_ClipPlan(score_norm, hessian_norm))
    assert (clipping_problem(clipping) is not None) is flagged
    if flagged:  # the check reads the last release: the one that binds
        assert clipping["releases"][-1]["bound"] == (2.0 if score_norm > 2.0 else 1.0)


@pytest.fixture(scope="module")
def auto_plan(logistic, step):
    """pmdp.sample's plan with draws="auto" for the centred DPHMC at ε = 1, 2 chains: no row read, no chain run."""
    settings = {"epsilon": 1.0, "delta": 1e-5, "draws": "auto", "chains": 2, "x_bounds": (-BOUND, BOUND)}
    with pytest.warns(pmdp.diagnostics.PoorMixingWarning):  # the plan never calls (plain) DPHMC usable
        the_plan = _plan_sample(logistic, step, **settings)
    assert the_plan.centring is not None and the_plan.dp_init is not None and the_plan.clip_plan is not None
    return the_plan


def _chain_events(the_plan):
    """The chains' own events (the calibrated steps' at the run's iterations), as the record lists them."""
    iterations = the_plan.chains * (the_plan.tune + the_plan.draws)
    return [e for p in the_plan.planned for e in p.privacy_events(iterations)]


def test_draws_auto_plans_on_the_epsilon_the_calibrated_chains_get(auto_plan):
    """The plan's chain ε is the accountant's ε of the chains' own events after the run's calibration.

    The old linear split (μ of 0.8ε, half of it to the anchor) planned on 0.55 here against the chains' 0.79
    (finding 3), so it fails the first assertion.
    """
    from pymc_dp.accounting.composition import compose_epsilon
    from pymc_dp.accounting.gaussian import gaussian_epsilon

    chain_epsilon = compose_epsilon(_chain_events(auto_plan), 1e-5)[0]
    assert auto_plan.iterations_plan["chain_epsilon"] == pytest.approx(chain_epsilon, rel=1e-6)
    old = gaussian_epsilon(1e-5, (1 - CENTRE_ANCHOR_SHARE) * gaussian_mu_for_target(0.8 * 1.0, 1e-5))
    assert chain_epsilon > 1.2 * old
    assert auto_plan.run_epsilon <= 1.0


def test_the_plans_centred_row_is_the_runs_prediction_for_the_same_settings(logistic, step, auto_plan):
    """pmdp.plan's "DPHMC (centred)" row: the chains' μ the run's calibration leaves, split as the step splits it,
    the run's B and κ, and s = 2/√N; at N·ε = 400 its Newton steps cannot resolve the curvature, so the row says
    so and prints no ESS (planning only; the run's own prediction reads s and e off its anchor)."""
    the_plan = pmdp.plan(logistic, epsilon=1.0, delta=1e-5, chains=2, n_leapfrog=2, x_bounds=(-BOUND, BOUND))
    row, centring = the_plan.method("DPHMC (centred)"), the_plan.details["centring"]
    chains_mu = sum(e.mu for e in _chain_events(auto_plan))
    assert centring["chains_mu"] == pytest.approx(chains_mu, rel=1e-6)
    at_row = copy.copy(step)  # the step's own split of that μ over the row's iterations
    at_row.set_noise_for_mu(chains_mu / (2 * row.iterations))
    assert row.noise["llr_noise_multiplier"] == pytest.approx(at_row.llr_noise_multiplier, rel=1e-6)
    assert row.noise["grad_noise_multiplier"] == pytest.approx(at_row.grad_noise_multiplier, rel=1e-6)
    run = auto_plan.centring
    assert (centring["lipschitz"], centring["bound"]) == pytest.approx((run.lipschitz, run.grad_clip))
    s = centring["posterior_sd"]
    assert s == pytest.approx(2.0 / math.sqrt(400))  # a logistic row's information is at most ¼ per coordinate
    # the anchor's offset: the last pilot's score noise, f τ B per coordinate, through a covariance of s²
    assert centring["offset_sd"] == pytest.approx(s * 2 * run.newton_noise_multipliers[0] * run.grad_clip)
    # a pilot's Hessian noise against the curvature 1/s²: f τ_H (B²/4) √(2P) s², far above ½ here
    curvature = 2 * run.newton_noise_multipliers[1] * run.grad_clip**2 / 4 * math.sqrt(6) * s**2
    assert centring["curvature_noise"] == pytest.approx(curvature) and curvature > 2.0
    for name in ("DPHMC (centred)", "DPPenaltyMH (centred)"):
        unpredicted = the_plan.method(name)
        assert unpredicted.expected_ess is None and not unpredicted.usable and "not predicted here" in unpredicted.note
    assert "a centred row's ESS where the noisy Newton steps cannot resolve" in str(the_plan)  # the "?" line


def _centred_rows(n_rows: int, n_params: int, bound: float, lipschitz: float) -> tuple[list, dict]:
    """The planner's centred rows at ε = 4's pilot noise and a fixed chains' μ (no accounting: arithmetic only)."""
    from pymc_dp.centred_predictions import centred_rows

    return centred_rows(
        4.0,
        1e-6,
        chains_mu=1.0,
        pilot=(7.28, 12.61),
        n_rows=n_rows,
        n_params=n_params,
        chains=2,
        posterior_sd=2.0 / math.sqrt(n_rows),
        neighbouring="substitute",
        n_leapfrog=3,
        grad_budget_share=0.5,
        bound=bound,
        lipschitz=lipschitz,
        max_iterations=20000,
        tune_fraction=0.25,
    )


def test_a_resolved_centred_row_prints_centred_ess_at_its_iterations():
    """Where the curvature is resolved (N = 10⁵, P = 3) the row's ESS is :func:`centred_ess` of its own noise."""
    from pymc_dp.centred_predictions import centred_prediction_at

    rows, centring = _centred_rows(100_000, 3, 5.74, 0.5)
    assert centring["resolved"] and centring["curvature_noise"] <= 0.5
    for method, row in zip(("DPHMC", "DPPenaltyMH"), rows, strict=True):
        _, expected = centred_prediction_at(
            method,
            row["iterations"],
            row["tune"],
            centring["chains_mu"] / 2,
            n_params=3,
            posterior_sd=centring["posterior_sd"],
            offset_sd=centring["offset_sd"],
            lipschitz=0.5,
            n_leapfrog=3,
        )
        assert row["expected_ess"] == pytest.approx(expected["ess_per_chain"], rel=1e-9) and row["expected_ess"] > 0
        assert row["usable"] is (row["expected_ess"] * 2 >= pmdp.planning.MIN_USEFUL_ESS)


def test_a_centred_row_says_when_its_number_rests_on_the_posterior_sd_guess():
    """fair's shape (N = 6,366, P = 5, x_bounds ±1, ε = 4's pilots): resolved at s = 2/√N but not at 3× it (the
    measured s was 2.85×), so the row says so; at N = 10⁶ it need not."""
    kappa = pmdp.centred_predictions.LOGISTIC_THIRD * math.sqrt(5) ** 3
    fair, centring = _centred_rows(6366, 5, math.sqrt(5), kappa)
    assert centring["resolved"] and fair[0]["expected_ess"] is not None
    assert "this rests on a posterior sd of 0.0251" in fair[0]["note"]
    large, _ = _centred_rows(10**6, 5, math.sqrt(5), kappa)
    assert "this rests on" not in large[0]["note"]


def test_noise_limited_dphmc_shortens_its_steps_to_the_target_acceptance():
    """Where the quarter-period trajectory's acceptance is below the step-size target, the prediction is the
    trajectory the adaptation settles on: acceptance at the target, ESS the AR(1) law a(1 − cos T)/(2 − a(1 − cos T))
    per draw at T = xπ/2, falling with noise."""
    common = dict(draws=1000, n_params=3, posterior_sd=0.05, offset_sd=3.0, lipschitz=0.5, n_leapfrog=3)
    easy = centred_ess(**common, llr_noise_multiplier=1.0, grad_noise_multiplier=1.0)
    assert easy["trajectory_fraction"] > 1.0 and easy["acceptance"] == pytest.approx(0.65, abs=1e-6)
    hard = centred_ess(**common, llr_noise_multiplier=300.0, grad_noise_multiplier=300.0)
    harder = centred_ess(**common, llr_noise_multiplier=3000.0, grad_noise_multiplier=3000.0)
    for noisy in (hard, harder):
        x = noisy["trajectory_fraction"]
        assert 0 < x < 1 and noisy["acceptance"] == pytest.approx(0.65, abs=1e-6)
        angle = 2 * 3 * math.asin(0.5 * (0.5 * math.pi * x) / 3)  # leapfrog's turn, L = 3 steps of h = xπ/(2L)
        assert noisy["angles"] == pytest.approx([angle] * 3, rel=1e-9)
        moved = 0.65 * (1 - math.cos(angle))
        assert noisy["ess_per_chain"] == pytest.approx(1000 * moved / (2 - moved), rel=1e-6)
    # within the noise-limited regime more noise predicts less (across regimes it need not: centred_ess's docstring)
    assert 0 < harder["ess_per_chain"] < hard["ess_per_chain"]


def test_draws_auto_takes_a_centred_runs_iterations_from_the_centred_row(logistic, auto_plan):
    """draws="auto" on a centred run: the centred row on the run's own chains' μ, pilot noise, B and κ, capped at
    the public CENTRED_AUTO_MAX_ITERATIONS (not the plain DPHMC row's), and the run spends exactly that μ."""
    from pymc_dp.centred_predictions import centred_rows
    from pymc_dp.step_methods.centred_plan import CENTRED_AUTO_MAX_ITERATIONS

    summary = auto_plan.iterations_plan
    assert summary["method"] == "DPHMC (centred)"
    chains_mu = sum(e.mu for e in _chain_events(auto_plan))
    rows, _ = centred_rows(
        1.0,
        1e-5,
        chains_mu=chains_mu,
        pilot=auto_plan.centring.newton_noise_multipliers,
        n_rows=400,
        n_params=3,
        chains=2,
        posterior_sd=2.0 / math.sqrt(400),
        neighbouring="substitute",
        n_leapfrog=2,
        grad_budget_share=0.5,
        bound=auto_plan.centring.grad_clip,
        lipschitz=auto_plan.centring.lipschitz,
        max_iterations=CENTRED_AUTO_MAX_ITERATIONS,
        tune_fraction=pmdp.planning.TUNE_FRACTION,
    )
    assert (auto_plan.tune, auto_plan.draws) == (rows[0]["tune"], rows[0]["draws"])
    assert auto_plan.tune + auto_plan.draws == summary["iterations"] <= CENTRED_AUTO_MAX_ITERATIONS
    plain = pmdp.plan(logistic, epsilon=summary["chain_epsilon"], delta=1e-5, chains=2, n_leapfrog=2)
    assert summary["iterations"] != plain.method("DPHMC").iterations  # the plain row would have planned otherwise


def test_rows_piled_just_below_a_public_maximum_clip_are_not_counted_as_clipped():
    # H36's finding: on randhie the check read 4 % ± 0.9 % of rows above clips no row within the public bounds can
    # exceed, by interpolating into the grid bin that holds the clip. Rows at 1.7 under a public maximum of 1.75
    # (bin [1, 1.78]) were 2.8 % "above" it; read from the grid edge at or above the clip they are none.
    from pymc_dp.step_methods.centred_plan import CentringPlan
    from pymc_dp.usability import clipping_problem

    plan = CentringPlan(
        1.0, grad_clip=2.0, hessian_clip=1.75, noise_multiplier=1.0, hessian_noise_multiplier=1.0, source=""
    )
    clipping = plan.clipping(_ClipPlan(0.5, 1.7))
    assert clipping_problem(clipping) is None
    hessian = next(c for c in clipping["releases"] if c["bound"] == 1.75)
    assert hessian["share_above_bound_at_reference"] == 0.0 and hessian["share_read_above"] > 1.75
    assert clipping_problem(plan.clipping(_ClipPlan(0.5, 2.5))) is not None  # rows beyond the next edge still count
