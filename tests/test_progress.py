"""PyMC's progress bar with DP steps: the released acceptance and the privacy spent so far.

The privacy spent follows the schedule (public settings and the iteration count), so the bar
releases nothing; it must agree with the accountant and run on both PyMC lines.
"""

import math

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.accounting.gaussian import gaussian_epsilon


def _model():
    y = np.random.default_rng(1).normal(0.5, 1.0, size=300)
    model = pm.Model()
    with model:
        mu = pm.Normal("mu", 0, 5)
        pm.Normal("y", mu, 1.0, observed=y)
    return model


def test_the_bar_shows_the_chains_epsilon_at_the_runs_delta_or_its_mu():
    step = pmdp.DPPenaltyMH(llr_clip=2.5, noise_multiplier=20.0, model=_model())
    columns, stats = step._progressbar_config(3)
    assert len(columns) == 2 and stats["dp_spent_chain"] == ["0"] * 3
    [update] = step._make_progressbar_update_functions()
    assert update({"dp_mu_cumulative": 0.5, "dp_accept": 0.25}) == {"dp_accept_rate": 0.25, "dp_spent_chain": "0.5"}
    step.progress_delta = 1e-6
    [update] = step._make_progressbar_update_functions()
    shown = update({"dp_mu_cumulative": 0.5, "dp_accept": 0.25})["dp_spent_chain"]
    assert float(shown) == pytest.approx(gaussian_epsilon(1e-6, 0.5), rel=1e-2)
    assert update({"dp_mu_cumulative": math.nan, "dp_accept": 0.0})["dp_spent_chain"] == "on result"


@pytest.mark.parametrize("runner", ["pm.sample", "pmdp.sample"])
def test_sampling_with_the_progress_bar_on(runner):
    with _model():
        if runner == "pm.sample":
            step = pmdp.DPPenaltyMH(llr_clip=2.5, noise_multiplier=20.0)
            idata = pm.sample(step=step, draws=20, tune=10, chains=2, progressbar=True)
        else:
            step = pmdp.DPPenaltyMH(llr_clip=2.5)
            idata = pmdp.sample(step=step, epsilon=1.0, delta=1e-6, draws=20, tune=10, chains=2, progressbar=True)
            assert step.progress_delta is None  # set for the run only
    assert idata.posterior.sizes["draw"] == 20
