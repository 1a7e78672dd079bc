"""``draws="auto"`` on a centred run (issue 36, H36h): the iterations per sampler, from public settings only.

pmdp.sample's plan (sample_plan.plan_sample: checked and priced, no row read, no chain run) on two 300-row
logistic regressions (slow: 11 CPU s, the calibration's PLD composition), the cap's arithmetic (< 0.01 s), and
pmdp.sample's wiring of the default iterations on a centred run (the plan stubbed: < 0.1 s).
"""

from __future__ import annotations

import inspect
import types

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.sample_plan import plan_sample
from pymc_dp.step_methods.centred_plan import (
    CENTRED_AUTO_MAX_ITERATIONS,
    CENTRED_PENALTY_AUTO_ITERATION_RANGE,
    CENTRED_PENALTY_AUTO_WORK,
    centred_auto_max_iterations,
)

BOUND = 2.0
N_ROWS = 300


def _logistic(seed: int) -> pm.Model:
    """A logistic regression of the same public shape (N, P, x_bounds) whatever the seed: only the rows differ."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-BOUND, BOUND, size=(N_ROWS, 2))
    truth = rng.normal(size=2)
    y = (rng.random(N_ROWS) < 1 / (1 + np.exp(-(0.3 + x @ truth)))).astype("int64")
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 2, shape=2)
        pm.Bernoulli("y", logit_p=alpha + pm.Data("x", x) @ beta, observed=y)
    return model


def _auto_plan(model, step_class):
    """pmdp.sample's plan with draws="auto", centred (x_bounds), ε = 4, 2 chains: nothing read, nothing run."""
    defaults = {k: v.default for k, v in inspect.signature(pmdp.sample).parameters.items()}
    defaults = {k: v for k, v in defaults.items() if k not in ("step", "model", "kwargs")}
    settings = dict(epsilon=4.0, delta=1e-5, draws="auto", chains=2, x_bounds=(-BOUND, BOUND))
    with model:
        step = step_class()
        with pytest.warns(pmdp.diagnostics.PoorMixingWarning):  # 300 rows: the centred row is not usable
            return plan_sample(step, model, {}, **{**defaults, **settings})


@pytest.mark.slow  # 11 CPU s on 3.12 (13.5 s wall on the shared machine): the two plans' calibration (PLD composition)
def test_auto_iterations_are_the_same_on_two_data_sets_of_the_same_public_shape():
    """The iterations and the chains' noise depend on N, P, x_bounds, ε, δ and the chains only (the rows differ).

    DPPenaltyMH (the new cap's path; DPHMC's centred row is test_one_call_centred's auto_plan)."""
    step_class = pmdp.DPPenaltyMH
    plans = [_auto_plan(_logistic(seed), step_class) for seed in (1, 2)]
    assert all(p.centring is not None for p in plans)  # both centred
    first, second = ((p.tune, p.draws, p.iterations_plan["iterations"]) for p in plans)
    assert first == second
    assert plans[0].planned[0].noise_multiplier == plans[1].planned[0].noise_multiplier
    assert first[2] <= centred_auto_max_iterations("DPPenaltyMH", N_ROWS, 3) == 20000
    assert plans[0].iterations_plan["method"] == "DPPenaltyMH (centred)"


def test_the_cap_per_sampler():
    """DPHMC keeps 2,000; DPPenaltyMH's is the packed-entry budget over N·P(P + 1)/2, within its range."""
    low, high = CENTRED_PENALTY_AUTO_ITERATION_RANGE
    assert centred_auto_max_iterations("DPHMC", 20190, 7) == CENTRED_AUTO_MAX_ITERATIONS == low == 2000
    randhie = centred_auto_max_iterations("DPPenaltyMH", 20190, 7)  # N = 20,190, P = 7: 565,320 packed entries
    assert randhie == int(CENTRED_PENALTY_AUTO_WORK / (20190 * 28)) == 3980
    assert centred_auto_max_iterations("DPPenaltyMH", 6366, 5) == high  # fair: 23,563 before the ceiling
    assert centred_auto_max_iterations("DPPenaltyMH", 10**6, 21) == low  # large data: DPHMC's floor


class _Charged(Exception):
    """Raised where pmdp.sample would charge and run: the wiring test stops before any row is read."""


@pytest.mark.parametrize(
    ("centres", "given", "expected_draws"),
    [
        (True, {}, [None, "auto"]),  # a centred run at the defaults: planned again with draws="auto"
        (True, {"draws": 50}, [50]),  # an explicit draws is kept
        (True, {"tune": 20}, [None]),  # so is an explicit tune (draws then 1,000, as before)
        (True, {"epsilon": None, "budget": "a budget"}, [None]),  # "auto" needs a target ε: kept as before
        (False, {}, [None]),  # a plain run keeps pm.sample's 1,000 + 1,000
    ],
)
def test_a_centred_run_at_the_default_iterations_takes_the_auto_plans(monkeypatch, centres, given, expected_draws):
    """pmdp.sample(step=...) re-plans with draws="auto" only where the plan centres and draws and tune are unset.

    plan_sample is replaced by a recorder (its draws="auto" centred path: test_one_call_centred's auto_plan), so
    this checks the wiring alone (< 0.1 s); nothing is planned, charged or run."""
    calls = []

    def recorder(step, model, kwargs, **settings):
        calls.append(settings["draws"])
        return types.SimpleNamespace(centring=object() if centres else None)

    def charge(*args):
        raise _Charged

    monkeypatch.setattr(pmdp.sampling, "plan_sample", recorder)
    monkeypatch.setattr(pmdp.sampling, "_run", charge)
    run = {"epsilon": 4.0, "delta": 1e-5, "x_bounds": (-BOUND, BOUND), **given}
    with _logistic(1), pytest.raises(_Charged):
        pmdp.sample(step=object(), **run)
    assert calls == expected_draws
