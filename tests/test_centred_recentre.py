"""The re-centring release (issue 36, H36i; ``centre="recentre"``): its sensitivity, its algebra and its pricing.

Two 300-row logistic regressions that differ in one row, the mechanism run with zero noise (what each sum can move
by), and the pricing's arithmetic. About 9 CPU s on 3.12 with the imports (two models' compiled row functions).
"""

from __future__ import annotations

import functools
import math

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
from pymc_dp.mechanisms.centred import anchor_noise_covariance, anchor_release, recentring_release
from pymc_dp.mechanisms.hessian import clipped_hessian

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
