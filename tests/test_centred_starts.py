"""The centred run's chain starts (issue 36, H36j): draws from N(m̂, Σ̂), Σ̂ = (−Ĥ)⁻¹, m̂ = θ̂ + Σ̂Ĝ (released).

Arithmetic only (no model): about 0.1 CPU s.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from pymc_dp.mechanisms.centred import CentringAnchor
from pymc_dp.step_methods.centred_plan import CentringPlan

#: Two-sided z level per entry: 3 means and 6 covariance entries at 1e-5 each (Bonferroni: 9e-5 in all).
Z_CRIT = 4.42
_HESSIAN = -np.array([[400.0, 150.0, 0.0], [150.0, 100.0, 20.0], [0.0, 20.0, 25.0]])
_POINT = np.array([0.3, -0.2, 0.1])
_GRADIENT = np.array([20.0, -5.0, 4.0])  # m̂ − θ̂ = Σ̂Ĝ: 0.1–0.7 of the widest sd per coordinate


def _starts(hessian, chains=4000, seed=3):
    anchor = CentringAnchor(
        _POINT,
        _GRADIENT,
        2.0,
        1.0,
        "substitute",
        ("b",),
        hessian=hessian,
        hessian_clip=1.0,
        hessian_noise_multiplier=1.0,
    )
    plan = SimpleNamespace(anchor=anchor)  # starts reads the plan's released anchor only
    starts = CentringPlan.starts(plan, {"b": np.zeros(3)}, ["b"], chains, np.random.default_rng(seed))
    return np.array([s["b"] for s in starts])


def test_starts_are_the_targets_laplace_draws_not_the_anchors_overdispersed_ones():
    """4,000 starts: mean m̂ = θ̂ + Σ̂Ĝ and covariance Σ̂ entry by entry (z-tests from the draws' SEs); the old
    N(θ̂, 4Σ̂) fails both (power)."""
    draws = _starts(_HESSIAN)
    covariance = np.linalg.inv(-_HESSIAN)
    centre = _POINT + covariance @ _GRADIENT
    n = draws.shape[0]
    z_mean = (draws.mean(0) - centre) / np.sqrt(np.diag(covariance) / n)
    assert np.max(np.abs(z_mean)) < Z_CRIT
    deviations = draws - centre
    moments = deviations.T @ deviations / n
    se = np.sqrt((np.outer(np.diag(covariance), np.diag(covariance)) + covariance**2) / n)
    assert np.max(np.abs((moments - covariance) / se)) < Z_CRIT
    old_mean = (draws.mean(0) - _POINT) / np.sqrt(np.diag(covariance) / n)
    assert np.max(np.abs(old_mean)) > Z_CRIT
    old_se = np.sqrt((np.outer(np.diag(4 * covariance), np.diag(4 * covariance)) + (4 * covariance) ** 2) / n)
    assert np.max(np.abs((moments - 4 * covariance) / old_se)) > Z_CRIT


def test_starts_sit_at_the_anchor_where_its_hessian_is_not_positive_definite():
    improper = _HESSIAN.copy()
    improper[2, 2] = 5.0  # −Ĥ's smallest eigenvalue < 0: no Laplace draws to take
    np.testing.assert_array_equal(_starts(improper, chains=3), np.tile(_POINT, (3, 1)))


def test_starts_stay_within_the_resolved_curvature_where_an_eigenvalue_is_near_zero():
    """−Ĥ positive definite but one eigenvalue (1e-6) far below the Hessian noise's edge σ_H√(2P): read as the edge,
    so the starts' shift Σ̂Ĝ along it is at most |Ĝ|/edge, not 4·10⁶ (review 10)."""
    nearly_flat = -np.diag([400.0, 100.0, 1e-6])
    draws = _starts(nearly_flat, chains=200)
    anchor = CentringAnchor(_POINT, _GRADIENT, 2.0, 1.0, "substitute", ("b",), hessian=nearly_flat, hessian_clip=1.0,
                            hessian_noise_multiplier=1.0)  # fmt: skip
    edge = anchor.hessian_std * np.sqrt(6.0)
    assert 1e-6 < edge < 100.0
    shift = abs(_GRADIENT[2]) / edge
    assert np.all(np.abs(draws[:, 2] - _POINT[2]) < shift + 6.0 / np.sqrt(edge))
    assert abs(draws[:, 2].mean() - _POINT[2] - _GRADIENT[2] / edge) < 4.42 / np.sqrt(edge * 200)
