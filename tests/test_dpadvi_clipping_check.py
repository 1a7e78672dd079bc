"""DPADVI's clipping check measures what DPADVI clips: each row's gradient mapped to q's parameters.

Review finding (contract 8): the check released the histogram of ‖∇θ log p(xᵢ | θ)‖ at the
fitted mean, but every iteration clips ‖mean_s gᵢ(θ_s) M_s‖ at draws θ_s of q, which for a
wide q is far larger, so a heavily clipped fit came back unflagged. The model below has every
row's score at the mean at 1.90 (below C = 2) and its clipped quantity at q's draws above C for
most rows. About 3 CPU s in all.
"""

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.mechanisms import model_access
from pymc_dp.mechanisms.clip_bound import norm_histogram, share_above
from pymc_dp.mechanisms.histogram_mapped_gradient import NoisyMappedGradientNormHistogram, mapped_norm_counts
from pymc_dp.variational import dpadvi as dpadvi_module
from pymc_dp.variational.families import family_for

N_ROWS, N_PARAMS, GRAD_CLIP = 20_000, 10, 2.0


def _wide_model():
    """y_i ~ N(β, I) with β of length 10 and every y_ij = ±0.5: the score at β = 0 is y_i, ‖y_i‖ = 1.58 < C.

    1.58 lies in the grid's bin [1.00, 1.78), wholly below the bin that holds C = 2, so the old
    check's share above C (read with :func:`share_above`'s interpolation) is exactly 0.
    """
    rng = np.random.default_rng(0)
    y = 0.5 * rng.choice([-1.0, 1.0], size=(N_ROWS, N_PARAMS))
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 10.0, shape=N_PARAMS)
        pm.Normal("y", beta, 1.0, observed=pm.Data("y_obs", y))
    return model, y


def _share_clipped_low_quantile(y, mu, sigma, rng, sets=4, simulations=400, quantile=0.001) -> float:
    """The ``quantile`` of the share the check reads, from ``sets`` draws of q without noise: simulated.

    Written out independently of the package: for mean-field q at n_mc = 1 the clipped quantity
    is (g, g ⊙ ε ⊙ sigmoid(ρ)) with g = y_i − θ, θ = μ + σ ε, sigmoid(ρ) = 1 − e^{−σ}. All the
    rows share a set's ε, so the share varies from set to set as well as by the check's noise. The
    share is read off the exact histogram as the check reads it off the noisy one (:func:`share_above`).
    """
    scale = 1.0 - np.exp(-sigma)  # sigmoid(ρ) for σ = softplus(ρ)
    sample = y[:2000]
    shares = np.empty(simulations)
    for k in range(simulations):
        counts = 0.0
        for _ in range(sets):
            eps = rng.standard_normal(N_PARAMS)
            g = sample - (mu + sigma * eps)
            counts = counts + norm_histogram(np.sqrt(np.sum(g**2 * (1.0 + (eps * scale) ** 2), axis=1))) / sets
        shares[k] = share_above(counts, GRAD_CLIP)
    return float(np.quantile(shares, quantile))


def test_a_fit_clipped_at_q_s_draws_is_flagged_though_its_score_at_the_mean_is_below_the_bound(monkeypatch):
    """The released share is read against a simulated lower quantile of the truth and its own noise sd.

    The fit barely moves q from PyMC's start (μ = 0, σ = softplus(0) = 0.69: learning rate 1e-6,
    3 iterations). Then the score at the mean is ‖y_i − μ‖ = 1.58 < C for every row (the old
    check's share: 0 ± its noise sd), while each iteration clips ‖(y_i − θ_s) M_s‖, above C for
    most rows at most draws (simulated below: the lower 0.1 % quantile of the share read).
    """
    model, y = _wide_model()
    # σ's PLD search (seconds) is not what is tested here (tests/test_clip_bound.py prices the check with it).
    monkeypatch.setattr(dpadvi_module, "poisson_gaussian_noise_multiplier", lambda *args: 3.0)
    dpadvi = pmdp.DPADVI(
        epsilon=4.0, delta=1e-6, sampling_rate=1.0, grad_clip=GRAD_CLIP, learning_rate=1e-6, random_seed=1
    )
    approx = dpadvi.fit(3, model=model, progressbar=False)
    check = approx._dp_clipping
    mu, sigma = approx.mean.eval(), approx.std.eval()
    np.testing.assert_allclose(mu, 0.0, atol=1e-3)  # q as at the start
    np.testing.assert_allclose(sigma, np.log(2.0), atol=1e-3)
    assert share_above(norm_histogram(np.linalg.norm(y - mu, axis=1)), GRAD_CLIP) == 0.0  # the old check's share
    share, sd = check["share_above_bound_at_reference"], check["share_above_bound_sd"]
    assert 0.0 < sd < 0.02  # the check's noise, from public values
    low = _share_clipped_low_quantile(y, mu, sigma, np.random.default_rng(5))
    assert low > 0.5  # what the check must see (before the fix: 0 ± sd)
    assert share > low - 5 * sd
    assert share - 5 * sd > check["bias_threshold_share"]  # so the fit is flagged
    assert any("clip" in reason for reason in approx.optimisation_diagnostics()["problems"])
    assert check["reference"].startswith("the fitted q")


def test_the_histogram_counts_the_norm_the_release_clips_each_row_weighing_one():
    """The counts equal a histogram of ‖mean_s g_i(θ_s) M_s‖ written out with g_i M_s formed; n_mc = 1 and 2."""
    model, y = _wide_model()
    _, mechanisms = model_access(model, None, None, None, None, "substitute", reproducible=True)
    rows = mechanisms._rows
    family = family_for("meanfield", N_PARAMS)
    packed = np.concatenate([np.full(N_PARAMS, 0.1), np.full(N_PARAMS, 2.0)])  # a wide q: σ = softplus(2) = 2.1
    rng = np.random.default_rng(2)
    for n_mc in (1, 2):
        eps = [rng.standard_normal((n_mc, N_PARAMS)) for _ in range(3)]
        sets = [(family.draws(packed, e), [family.parameter_jacobian(packed, d) for d in e]) for e in eps]
        histogram = NoisyMappedGradientNormHistogram(rows, 1.0, "substitute")
        counts = histogram._counts(sets)
        expected = 0.0
        for thetas, jacobians in sets:
            mapped = sum((y - t) @ m for t, m in zip(thetas, jacobians, strict=True)) / n_mc  # ∇β of N(y | β, 1)
            expected = expected + norm_histogram(np.linalg.norm(mapped, axis=1)) / len(sets)
        np.testing.assert_allclose(counts, expected, atol=1e-9)
        assert counts.sum() == pytest.approx(N_ROWS, abs=1e-9)  # each row's weights sum to 1: the sensitivity
        # the clipped quantity's norms are above the score norm at μ: the old check's histogram sat lower
        at_mean = norm_histogram(np.linalg.norm(y - 0.1, axis=1))
        assert np.argmax(np.cumsum(counts) > N_ROWS / 2) > np.argmax(np.cumsum(at_mean) > N_ROWS / 2)
    single = mapped_norm_counts(lambda theta: y[:5] - theta, sets[:1])
    assert single.sum() == pytest.approx(5.0)
    with pytest.raises(ValueError, match="`draw_sets` must hold at least one set"):
        NoisyMappedGradientNormHistogram(rows, 1.0).release_counts([], np.random.default_rng(0))
