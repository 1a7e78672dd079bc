"""The re-centring release (issue 36, H36i; ``centre="recentre"``): its sensitivity, its algebra and its pricing.

Two 300-row logistic regressions that differ in one row, the mechanism run with zero noise (what each sum can move
by), and the pricing's arithmetic. About 9 CPU s on 3.12 with the imports (two models' compiled row functions).
"""

from __future__ import annotations

import contextlib
import functools
import math
from unittest import mock

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.centred_predictions import (
    CENTRE_RECENTRE_SHARE,
    centring_events,
    centring_noise_multipliers,
    recentring_noise_multipliers,
)
from pymc_dp.mechanisms import centred as centred_module
from pymc_dp.mechanisms.centred import anchor_noise_covariance, anchor_release, recentring_release
from pymc_dp.mechanisms.hessian import clipped_hessian
from pymc_dp.testing.audit import AuditScenario, _gaussian_claim, audit

BOUND = 1.0
N_ROWS = 300
KAPPA = (1 + 2 * BOUND**2) ** 1.5 / (6 * math.sqrt(3))  # B³/(6√3), B = √(1 + 2): the worst case over the bounds


class _NoNoise:
    """A noise source that adds nothing: what the clipped sums themselves are (never in a release)."""

    def normal(self, loc=0.0, scale=1.0, size=None):
        return np.zeros(size if size is not None else ())


def _model(last_row=None):
    rng = np.random.default_rng(4)
    x = rng.uniform(-BOUND, BOUND, size=(N_ROWS, 2))
    y = (rng.random(N_ROWS) < 1 / (1 + np.exp(-(0.3 + x @ np.array([0.8, -0.5]))))).astype("int64")
    if last_row is not None:
        x[-1], y[-1] = last_row
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 2, shape=2)
        pm.Bernoulli("y", logit_p=alpha + pm.Data("x", x) @ beta, observed=y)
    return model


@functools.cache
def _mechanisms(last_row=None):
    with _model(last_row):
        return pmdp.DPPenaltyMH()._row_mechanisms


def _anchor(mechanisms, point, rng):
    return anchor_release(
        mechanisms.clipped_gradient, np.asarray(point, float), 2.0, 1.0, "substitute", rng,
        ("alpha", "beta"), functools.partial(clipped_hessian, mechanisms), 1.0, 1.0,
    )  # fmt: skip


def test_the_released_sums_are_the_clipped_sums_at_the_new_point_where_no_clip_binds():
    """Zero noise: Ĝ + Ĥa + Σrᵢ and Ĥ + ΣΔHᵢ equal the clipped sums released at θ̂₂ itself (the algebra, signs)."""
    mechanisms = _mechanisms()
    anchor = _anchor(mechanisms, [0.2, 0.5, -0.3], _NoNoise())
    target = np.array([0.25, 0.45, -0.28])
    moved = recentring_release(mechanisms, anchor, target, KAPPA, 1.0, 1.0, _NoNoise())
    there = _anchor(mechanisms, target, _NoNoise())
    np.testing.assert_allclose(moved.gradient, there.gradient, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(moved.hessian, there.hessian, rtol=1e-6, atol=1e-8)
    assert moved.recentring.score_bound == pytest.approx(0.5 * KAPPA * float(np.sum((target - anchor.point) ** 2)))


def test_one_row_moves_each_sum_by_at_most_twice_its_public_bound():
    """Substitute neighbours: Δ = 2 × ½κd² (score, L2) and 2κd (Hessian, Frobenius), an outlier beyond κ included."""
    target = np.array([0.6, 1.5, -1.2])  # far: d = 1.3, where the bounds bind for the outlier
    anchor = _anchor(_mechanisms(), [0.2, 0.5, -0.3], np.random.default_rng(0))  # one released anchor (public)
    base = recentring_release(_mechanisms(), anchor, target, KAPPA, 1.0, 1.0, _NoNoise())
    outlier = ((50.0, -50.0), 1)  # far beyond x_bounds: its Taylor residual breaks κ, and the clip holds it
    other = recentring_release(_mechanisms(outlier), anchor, target, KAPPA, 1.0, 1.0, _NoNoise())
    recentring = base.recentring
    assert np.linalg.norm(base.gradient - other.gradient) <= 2 * recentring.score_bound * (1 + 1e-9)
    assert np.linalg.norm(base.hessian - other.hessian) <= 2 * recentring.hessian_bound * (1 + 1e-9)
    assert recentring.std == pytest.approx(1.0 * 2 * recentring.score_bound)  # σ = τΔ: μ = 1/(2τ²) whatever d


def test_the_recentred_anchor_prices_and_widens_for_both_releases():
    mechanisms = _mechanisms()
    anchor = _anchor(mechanisms, [0.2, 0.5, -0.3], np.random.default_rng(1))
    moved = recentring_release(mechanisms, anchor, [0.3, 0.4, -0.2], KAPPA, 2.0, 4.0, np.random.default_rng(2))
    assert moved.mu == pytest.approx(anchor.mu + 0.5 / 2.0**2 + 0.5 / 4.0**2)
    assert [e.noise_multiplier for e in moved.events()] == [1.0, 1.0, 2.0, 4.0]
    offset = np.array([0.1, -0.2, 0.05])  # m − θ̂₂: the earlier anchor's E sees m − θ̂
    expected = anchor_noise_covariance(anchor, offset + moved.point - anchor.point)
    r, rh = moved.recentring.std, moved.recentring.hessian_std
    expected = expected + r**2 * np.eye(3) + 0.5 * rh**2 * (offset @ offset * np.eye(3) + np.outer(offset, offset))
    np.testing.assert_allclose(anchor_noise_covariance(moved, offset), expected)
    assert moved.record()["recentring"]["earlier"]["point"] == pytest.approx(anchor.point)


def test_recentre_is_priced_from_the_anchors_share():
    """centre="recentre" (plan_centring passes recentre=True): two more Gaussian events, CENTRE_RECENTRE_SHARE of
    μ_anchor taken from the anchor proper, so the centring's μ in all is μ_anchor either way (arithmetic only)."""
    eps, delta, share = 4.0, 1e-5, 0.75
    (anchor, schedule), (moved_anchor, moved_schedule) = (
        centring_noise_multipliers(eps, delta, share, schedule=True, recentre=recentre) for recentre in (False, True)
    )
    assert moved_schedule == schedule  # the pilots keep theirs
    taus = recentring_noise_multipliers(eps, delta, share)
    events = {
        "auto": centring_events(anchor, schedule),
        "recentre": centring_events(moved_anchor, moved_schedule, recentring_taus=taus),
    }
    mu = {c: sum(1 / (2 * e.noise_multiplier**2) for e in evs) for c, evs in events.items()}
    assert mu["recentre"] == pytest.approx(mu["auto"], rel=1e-7)  # the split moves μ, never adds any
    moved = [e for e in events["recentre"] if "re-centring" in e.label]
    moved_mu = sum(1 / (2 * e.noise_multiplier**2) for e in moved)
    assert len(moved) == 2 and moved_mu == pytest.approx(CENTRE_RECENTRE_SHARE * mu["auto"], rel=1e-7)


# -- privacy audit, with broken variants (slow: about 18 CPU s each, 20,000 runs per data set) ----------------------
class _Held:
    """RowMechanisms' access, held by the mechanism layer: the table of one data set."""

    def __init__(self, table):
        self.table = table

    def _rows_here(self):
        return self.table


def _recentring_scenario(tau=1.0, released_tau=None, output="score", context=contextlib.nullcontext):
    """Ĝ₂₀ (or Ĥ₂₀₀) on the cubic neighbours of test_centred (one row's third derivative ±100, far beyond κ), at a
    public anchor released on D (θ̂ = 1) moved to θ̂₂ = 0.5. ``released_tau``: the noise actually used (broken)."""
    from test_centred import _cubic_anchor, _cubic_neighbours

    tables = _cubic_neighbours()
    anchor = _cubic_anchor(tables[0])
    used = tau if released_tau is None else released_tau

    def make(rng):
        def release(dataset):
            moved = recentring_release(_Held(tables[dataset]), anchor, np.full(1, 0.5), 0.3, used, used, rng)
            return float(moved.gradient[0] if output == "score" else moved.hessian[0, 0])

        return release

    broken = " [broken]" if released_tau is not None or context is not contextlib.nullcontext else ""
    return AuditScenario(f"re-centring ({output}){broken}", make, _gaussian_claim(tau), context)


def _no_clip():
    """Broken: the rows' changes summed unclipped (the clip is what bounds an outlier beyond κ)."""
    return mock.patch.object(centred_module, "clipped_sum_l2", lambda rows, bound: np.asarray(rows).sum(axis=0))


@pytest.mark.slow
@pytest.mark.parametrize("output", ["score", "hessian"])
def test_audit_of_the_recentring_stays_below_the_claim(output):
    result = audit(_recentring_scenario(output=output), runs=20_000, seed=1)
    assert result.epsilon_lower_bound <= result.claimed_epsilon


@pytest.mark.slow
@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(_recentring_scenario(tau=2.0, released_tau=1.0), id="noise_halved"),
        pytest.param(_recentring_scenario(context=_no_clip), id="no_clip"),
    ],
)
def test_audit_catches_broken_recentring(scenario):
    result = audit(scenario, runs=20_000, seed=1)
    assert result.epsilon_lower_bound > result.claimed_epsilon
