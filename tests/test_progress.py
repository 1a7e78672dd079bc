"""PyMC's progress bar with DP steps: the released acceptance and the privacy spent so far.

The privacy spent follows the schedule (public settings and the iteration count), so the bar
releases nothing; it must agree with the accountant and run on both PyMC lines.
"""

import math
from types import SimpleNamespace

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.accounting.events import format_epsilon
from pymc_dp.accounting.gaussian import gaussian_epsilon
from pymc_dp.step_methods import progress
from pymc_dp.step_methods.base import ProgressAccounting


def _model():
    y = np.random.default_rng(1).normal(0.5, 1.0, size=300)
    model = pm.Model()
    with model:
        mu = pm.Normal("mu", 0, 5)
        pm.Normal("y", mu, 1.0, observed=y)
    return model


def _drawn(column, value):
    """What the bar draws for a reading: the ε column rendered as rich renders it."""
    return column.render(SimpleNamespace(fields={"dp_spent_chain": value})).plain


def test_the_bar_shows_the_runs_epsilon_so_far_in_epsilon_on_both_routes():
    step = pmdp.DPPenaltyMH(llr_clip=2.5, noise_multiplier=20.0, model=_model())
    # plain pm.sample: no δ known, ε at PROGRESS_DELTA, stated in the header; 3 chains compose
    columns, stats = step._progressbar_config(3)
    assert columns[1].get_table_column().header == "ε run (δ=1e-06)" and stats["dp_spent_chain"] == ["0"] * 3
    [update] = step._make_progressbar_update_functions()
    shown = update({"dp_mu_cumulative": 0.5, "dp_accept": 0.25})
    assert shown["dp_accept_rate"] == 0.25
    assert _drawn(columns[1], shown["dp_spent_chain"]) == format_epsilon(gaussian_epsilon(1e-6, 3 * 0.5))
    assert update({"dp_mu_cumulative": math.nan, "dp_accept": 0.0})["dp_spent_chain"] == "on result"
    # pymc_dp.sample: the run's δ and its releases before the chains; every reading exact at its μ
    step.progress_run = ProgressAccounting(delta=1e-5, chains=4, mu_before=0.01, mu_ratio=1.0)
    columns, _ = step._progressbar_config(4)
    assert columns[1].get_table_column().header == "ε run (δ=1e-05)"
    [update] = step._make_progressbar_update_functions()
    for mu_chain in (0.1, 0.05, 0.0123):
        reading = update({"dp_mu_cumulative": mu_chain, "dp_accept": 0.2})["dp_spent_chain"]
        assert _drawn(columns[1], reading) == format_epsilon(gaussian_epsilon(1e-5, 0.01 + 4 * mu_chain))


def test_epsilon_is_computed_only_for_the_readings_the_bar_draws(monkeypatch):
    calls = []
    monkeypatch.setattr(progress, "gaussian_epsilon", lambda delta, mu: calls.append(mu) or gaussian_epsilon(delta, mu))
    step = pmdp.DPPenaltyMH(llr_clip=2.5, noise_multiplier=20.0, model=_model())
    columns, _ = step._progressbar_config(2)
    [update] = step._make_progressbar_update_functions()
    readings = [update({"dp_mu_cumulative": k / 800, "dp_accept": 0.2})["dp_spent_chain"] for k in range(1, 2001)]
    assert calls == []  # 2,000 draws, no ε computed
    assert _drawn(columns[1], readings[-1]) == format_epsilon(gaussian_epsilon(1e-6, 2 * 2000 / 800))
    assert _drawn(columns[1], readings[-1]) == f"{readings[-1]}" == str(readings[-1])  # a redraw: memoised
    assert calls == [2 * 2000 / 800]


@pytest.mark.parametrize("runner", ["pm.sample", "pmdp.sample"])
def test_sampling_with_the_progress_bar_on(runner, monkeypatch):
    shown = []  # what the ε column showed, as the bar received it
    make = pmdp.DPPenaltyMH._make_progressbar_update_functions

    def recording(self):
        [update] = make(self)
        return (lambda stats: shown.append(update(stats)["dp_spent_chain"]) or update(stats),)

    monkeypatch.setattr(pmdp.DPPenaltyMH, "_make_progressbar_update_functions", recording)
    with _model() as model:
        if runner == "pm.sample":
            step = pmdp.DPPenaltyMH(llr_clip=2.5, noise_multiplier=20.0)
            idata = pmdp.publish(pm.sample(step=step, draws=20, tune=10, chains=2, progressbar=True), delta=1e-6)
        else:
            step = pmdp.DPPenaltyMH(llr_clip=2.5)
            idata = pmdp.sample(
                step=step, epsilon=1.0, delta=1e-6, draws=20, tune=10, chains=2, progressbar=True, init="prior"
            )
            assert step.progress_run is None  # set for the run only
    assert idata.posterior.sizes["draw"] == 20
    # both routes end on the run's ε (both chains' iterations composed) as pmdp.privacy_spent prints it
    spent = pmdp.privacy_spent(idata, model=model)
    assert f"{shown[-1]}" == format_epsilon(spent.epsilon)
    assert str(spent).startswith(f"ε = {shown[-1]} (δ = 1e-06)")
    if runner == "pmdp.sample":
        assert f"{shown[-1]}" == "1.000"
