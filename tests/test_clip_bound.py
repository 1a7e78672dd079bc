"""The private clip bound (pymc_dp.mechanisms.clip_bound) and pmdp.sample's clip bounds "auto".

The pure functions are checked against exact values (counts, sensitivities, quantiles of
log-uniform norms, for which the log-scale interpolation is exact); the noisy quantile
against its own standard error; pmdp.sample for pricing, recording and refusals.
"""

import json
import math

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.accounting.calibrate import CALIBRATION_MARGIN
from pymc_dp.accounting.events import GaussianReleases
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.mechanisms.clip_bound import (
    NORM_GRID_EDGES,
    NoisyScoreNormHistogram,
    histogram_sensitivity,
    norm_histogram,
    quantile_from_histogram,
    share_above,
)

QUIET = {"progressbar": False, "on_poor_mixing": "ignore", "random_seed": 5}


def test_every_row_counts_once_whatever_its_norm():
    norms = np.array([0.0, 1e-9, 0.5, 1.0, 3e7, np.inf, np.nan, -np.inf])
    counts = norm_histogram(norms)
    assert counts.shape == (len(NORM_GRID_EDGES) + 1,)
    assert counts.sum() == len(norms)
    # NaN and ±inf go to the top bin with 3e7 (above the grid); 0, 1e-9 to the bottom bin.
    assert counts[-1] == 4 and counts[0] == 2


def test_histogram_sensitivity_is_attained_and_never_exceeded():
    rng = np.random.default_rng(0)
    norms = 10 ** rng.uniform(-4, 6, size=200)
    base = norm_histogram(norms)
    worst_sub, worst_add = 0.0, 0.0
    for i in range(50):
        swapped = norms.copy()
        swapped[i] = 10 ** rng.uniform(-4, 6)
        worst_sub = max(worst_sub, np.linalg.norm(norm_histogram(swapped) - base))
        worst_add = max(worst_add, np.linalg.norm(norm_histogram(np.delete(norms, i)) - base))
    assert worst_sub == pytest.approx(histogram_sensitivity("substitute")) == math.sqrt(2)
    assert worst_add == pytest.approx(histogram_sensitivity("add_remove")) == 1.0


@pytest.mark.parametrize("quantile", [0.5, 0.9, 0.95])
def test_noise_free_quantile_of_log_uniform_norms_is_exact(quantile):
    # Norms evenly spaced in log10 over [−1, 1), aligned with the grid (4 bins per decade): the
    # log-scale interpolation within a bin is exact up to one row.
    n = 8000
    norms = 10 ** (-1 + 2 * (np.arange(n) + 0.5) / n)
    bound = quantile_from_histogram(norm_histogram(norms), quantile, total=n)
    assert math.log10(bound) == pytest.approx(-1 + 2 * quantile, abs=2 / n)
    assert share_above(norm_histogram(norms), bound, total=n) == pytest.approx(1 - quantile, abs=2 / n)


def test_bounds_outside_the_grid_are_its_edges():
    assert quantile_from_histogram(norm_histogram(np.full(10, 1e-6)), 0.9) == NORM_GRID_EDGES[0]
    assert quantile_from_histogram(norm_histogram(np.full(10, 1e9)), 0.9) == NORM_GRID_EDGES[-1]
    with pytest.raises(ValueError, match="`quantile` must be in"):
        quantile_from_histogram(np.ones(3), 0.0)


class _Rows:
    """A stand-in for RowLikelihood: fixed per-row gradients (N × 2)."""

    def __init__(self, grads):
        self.grads = grads
        self.n_rows = len(grads)

    def grad_rows(self, theta):
        return self.grads


def test_noisy_quantile_errs_by_less_than_its_noise_allows():
    n, tau, quantile, reps = 20_000, 20.0, 0.9, 300
    norms = 10 ** (-1 + 2 * (np.arange(n) + 0.5) / n)
    grads = np.column_stack([norms, np.zeros(n)])
    mechanism = NoisyScoreNormHistogram(_Rows(grads), noise_multiplier=tau)
    assert mechanism.std == pytest.approx(tau * math.sqrt(2))
    rng = np.random.default_rng(1)
    true_share = np.array([np.mean(norms > mechanism.release(np.zeros(2), quantile, rng).bound) for _ in range(reps)])
    # The noisy cumulative count at the true quantile's bin has sd σ√k (k bins up to it); its
    # error in share is that over N, to first order.
    k = int(np.searchsorted(NORM_GRID_EDGES, 10 ** (-1 + 2 * quantile), side="right")) + 1
    share_sd = mechanism.std * math.sqrt(k) / n
    # The consistency projection (isotonic cumulative counts, read against their noisy total)
    # is not exactly unbiased; its bias is a small fraction of the noise's own scale.
    assert true_share.std() < 2 * share_sd
    assert abs(true_share.mean() - (1 - quantile)) < 0.5 * share_sd
    assert NoisyScoreNormHistogram.events(tau, 2, "clip") == [GaussianReleases(tau, 2, label="clip")]


def _logistic(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    y = rng.binomial(1, 1 / (1 + np.exp(-(x @ np.array([1.0, -0.5]) - 0.5))))
    model = pm.Model()
    with model:
        b = pm.Normal("b", 0, 2, shape=2)
        a = pm.Normal("a", 0, 2)
        pm.Bernoulli("y", logit_p=a + pm.math.dot(x, b), observed=y)
    return model, x


def test_auto_bound_is_released_priced_and_recorded():
    # N = 20,000 at ε = 4: the histogram's noise (about 170 rows in a cumulative count) is well
    # below half the rows above the 0.95 quantile (500), so the quantile is resolvable.
    model, x = _logistic(n=20_000)
    step = pmdp.DPPenaltyMH(model=model)
    assert step.llr_clip == "auto"
    with model:
        # init="prior": one release at the model's initial point (init="dpadvi" adds a second, tested below).
        idata = pmdp.sample(step=step, epsilon=4.0, delta=1e-6, draws=30, tune=20, chains=2, init="prior", **QUIET)
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    clip = record["clip_bound"]
    bound = clip["bounds"]["llr_clip"]
    # The recorded step settings carry the released bound; the step is back to "auto".
    assert record["steps"][0]["llr_clip"] == bound and step.llr_clip == "auto"
    # One histogram at the clip share of ε (calibration margin applied), priced with the chains.
    mu = gaussian_mu_for_target(0.05 * 4.0 * (1 - CALIBRATION_MARGIN), 1e-6)
    assert clip["noise_multiplier"] == pytest.approx(math.sqrt(1 / (2 * mu)))
    labels = [e["label"] for e in record["events"]]
    assert any("clip bound" in label for label in labels)
    assert pmdp.privacy_spent(idata).epsilon == pytest.approx(idata.posterior.attrs["dp_epsilon"])
    assert idata.posterior.attrs["dp_epsilon"] <= 4.0
    # At θ = 0 every row's score norm is ½‖(x, 1)‖: the bound is twice (the margin) their 0.95 quantile,
    # up to the noise.
    true_q90 = np.quantile(0.5 * np.linalg.norm(np.column_stack([x, np.ones(len(x))]), axis=1), 0.95)
    release = clip["releases"][0]
    assert clip["margin"] == 2.0 and bound == pytest.approx(2.0 * release["quantile_bound"])
    assert 0.5 * true_q90 < release["quantile_bound"] < 2 * true_q90
    assert release["reference"] == "the model's initial point" and release["resolvable"] is True
    # No row's score is near twice the 0.95 quantile: nothing flagged for clipping (the noisy
    # share above the bound is within three of its sds of zero).
    assert "clipping" not in " ".join(json.loads(idata.posterior.attrs["dp_diagnostics"])["problems"])


def test_auto_bound_with_dpadvi_start_is_released_twice():
    model, _ = _logistic()
    with model:
        idata = pmdp.sample(
            step=pmdp.DPHMC(n_leapfrog=3), epsilon=3.0, delta=1e-6, draws=10, tune=10, chains=2, init="dpadvi", **QUIET
        )
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    releases = record["clip_bound"]["releases"]
    assert [r["reference"] for r in releases] == ["the model's initial point", "the DPADVI fit's mean"]
    assert record["dp_init"]["grad_clip"] == releases[0]["bound"]
    assert record["steps"][0]["grad_clip"] == record["steps"][0]["llr_clip"] == releases[1]["bound"]
    clip_events = [e for e in record["events"] if "clip bound" in e["label"]]
    assert [e["count"] for e in clip_events] == [2]
    assert pmdp.privacy_spent(idata).epsilon == pytest.approx(idata.posterior.attrs["dp_epsilon"])


def test_auto_bound_refusals_name_the_setting_and_charge_nothing():
    model, _ = _logistic()
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-6, n_rows=2000)
    with model:
        with pytest.raises(ValueError, match=r"`llr_clip` must be a number when sampling outside pymc_dp\.sample"):
            pm.sample(step=pmdp.DPPenaltyMH(noise_multiplier=5.0), draws=5, tune=0, chains=1, progressbar=False)
        with pytest.raises(ValueError, match="`epsilon` must be given when a clip bound is 'auto'"):
            pmdp.sample(step=pmdp.DPPenaltyMH(noise_multiplier=5.0), delta=1e-6, draws=5, tune=0, chains=1, **QUIET)
        for bad in ({"clip_quantile": 0.0}, {"clip_quantile": 1.5}, {"clip_epsilon_share": 1.0}, {"clip_margin": -1}):
            name = next(iter(bad))
            with pytest.raises(ValueError, match=f"`{name}` must be"):
                pmdp.sample(
                    step=pmdp.DPPenaltyMH(), epsilon=1.0, budget=budget, draws=5, tune=0, chains=1, **bad, **QUIET
                )
        steps = [pmdp.DPPenaltyMH([model["a"]]), pmdp.DPPenaltyMH([model["b"]])]
        with pytest.raises(ValueError, match="need one DP step covering every variable"):
            pmdp.sample(step=steps, epsilon=1.0, budget=budget, draws=5, tune=0, chains=1, **QUIET)
    assert budget.events == ()
    with pytest.raises(ValueError, match=r"`llr_clip` must be a positive finite number or 'auto'\. Found 'automatic'"):
        pmdp.DPPenaltyMH(llr_clip="automatic", model=model)


def test_a_bound_that_clips_many_rows_flags_the_result():
    # Heavy-tailed rows (Student-t scale 1 data fitted by a normal with known sd): the scores
    # |y − μ| have a long tail, so a bound at the 0.5 quantile clips half the rows, far more
    # than 1/√N; at margin 1 the result is flagged and says why.
    y = np.random.default_rng(3).standard_t(2, size=4000)
    with pm.Model():
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1.0, observed=y)
        with pytest.warns(pmdp.diagnostics.PoorMixingWarning, match="clipping: about"):
            idata = pmdp.sample(
                step=pmdp.DPPenaltyMH(),
                epsilon=4.0,
                delta=1e-6,
                draws=20,
                tune=10,
                chains=2,
                clip_quantile=0.5,
                clip_margin=1.0,
                progressbar=False,
                random_seed=1,
            )
    diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
    assert diagnostics["clipping"]["share_above_bound_at_reference"] > diagnostics["clipping"]["bias_threshold_share"]
    assert not diagnostics["usable"]


def test_clipping_problem_compares_the_share_with_one_over_root_n():
    from pymc_dp.diagnostics import clipping_problem

    record = {
        "releases": [
            {
                "bound": 2.0,
                "share_above_bound_at_reference": 0.02,
                "bias_threshold_share": 0.01,
                "reference": "the model's initial point",
            }
        ]
    }
    assert "clipping: about 2 %" in clipping_problem(record)
    record["releases"][0]["share_above_bound_at_reference"] = 0.005
    assert clipping_problem(record) is None and clipping_problem(None) is None


def test_dpadvi_clipping_check_is_priced_and_flags_a_low_bound():
    # t(2) rows fitted by a unit-sd normal: scores |y − μ| with a long tail. grad_clip = 1 clips
    # about 40 % of the rows (flagged); 100 clips almost none (not flagged). The check is one
    # histogram release per fit, inside the fit's ε.
    y = np.random.default_rng(3).standard_t(2, size=5000)
    with pm.Model():
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1.0, observed=y)
        results = {}
        for clip in (1.0, 100.0):
            fit = pmdp.DPADVI(epsilon=2.0, delta=1e-6, sampling_rate=0.1, grad_clip=clip)
            approx = fit.fit(300, progressbar=False)
            results[clip] = approx.optimisation_diagnostics()
            record = approx._dp_record
            assert [e["label"] for e in record["events"]][-1] == "DPADVI clipping check"
            assert fit.privacy_spent().epsilon == pytest.approx(record["epsilon"]) and record["epsilon"] <= 2.0
    assert results[1.0]["clipping"]["share_above_bound_at_reference"] > 0.2 and results[1.0]["usable"] is False
    assert any("clipping: about" in reason for reason in results[1.0]["reasons"])
    check = results[100.0]["clipping"]  # the share is noise around zero: within three of its sds
    assert check["share_above_bound_at_reference"] - 3 * check["share_above_bound_sd"] <= check["bias_threshold_share"]
    assert results[100.0]["usable"] is True
    # With the noise set by hand there is no target to take a share of: no check, no extra event.
    with pm.Model():
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu, 1.0, observed=y)
        fit = pmdp.DPADVI(noise_multiplier=1.0, delta=1e-6, sampling_rate=0.1, grad_clip=1.0)
        approx = fit.fit(20, progressbar=False)
    assert fit.clip_check_share == 0.0 and "clipping" not in approx.optimisation_diagnostics()
    with pytest.raises(ValueError, match="`clip_check_share` must be in"):
        pmdp.DPADVI(epsilon=1.0, delta=1e-6, sampling_rate=0.1, grad_clip=1.0, clip_check_share=1.0)


def test_an_unresolvable_quantile_flags_the_result():
    # N = 2,000 at ε = 1: 5 % of ε gives count noise of about 570 rows, far above the 50 rows
    # above the 0.95 quantile: the bound is unreliable, and the result says so.
    model, _ = _logistic(n=2000)
    with model, pytest.warns(pmdp.diagnostics.PoorMixingWarning, match="clip bound: the private histogram's noise"):
        idata = pmdp.sample(
            step=pmdp.DPPenaltyMH(), epsilon=1.0, delta=1e-6, draws=10, tune=10, chains=2, progressbar=False
        )
    assert json.loads(idata.posterior.attrs["dp_diagnostics"])["clipping"]["resolvable"] is False
