"""The release-once route (issue 34, deliverable 4): clipped Hessian sums and noisy Newton anchors.

- the Hessian mechanism: the isometric packing, the clipped sum against exact per-row Hessians,
  the sensitivity under substitution, the noise's covariance (σ² on the diagonal, σ²/2 off it);
- pricing: every release charged before the first row is read, a run over the budget refused
  with nothing read, the events composing to the target ε;
- the limit: no clipping and noise → 0 gives the exact Laplace approximation at the MAP, and
  on a model where Laplace is accurate its draws agree with NUTS;
- honesty: the widening predicts the spread of the released mean over noise draws, and the
  90 % intervals cover the truth at the nominal rate over simulated data sets (fast small
  version; a larger one is marked slow);
- bad input refused, naming the parameter, nothing charged.
"""

import json
import math

import numpy as np
import pymc as pm
import pytest
from scipy import optimize, stats

import pymc_dp as pmdp
from pymc_dp.accounting.budget import PrivacyBudget, PrivacyBudgetExceededError
from pymc_dp.accounting.composition import compose_epsilon
from pymc_dp.mechanisms import NoisyClippedGradient, model_access
from pymc_dp.mechanisms.hessian import (
    NoisyClippedHessian,
    packed_size,
    symmetric_from_packed,
    symmetric_to_packed,
)
from pymc_dp.release_once import _newton, release_once, release_once_events
from pymc_dp.route_predictions import release_once_noise_multipliers
from pymc_dp.starts import public_initial_point


def _events(epsilon, delta, steps, hessian_share, final_share, clip_releases=0):
    """The run's events and each step's (τ_g, τ_H), as pmdp.release_once prices them."""
    taus, tau_clip = release_once_noise_multipliers(epsilon, delta, steps, hessian_share, final_share, clip_releases)
    return release_once_events(taus, tau_clip, clip_releases), taus


class QuadraticRows:
    """A stand-in table: ℓᵢ(θ) = −½ aᵢ (xᵢ·θ)², so ∇ℓᵢ = −aᵢ(xᵢ·θ)xᵢ and ∇²ℓᵢ = −aᵢ xᵢxᵢᵀ exactly."""

    def __init__(self, x, a):
        self.x, self.a = np.asarray(x, float), np.asarray(a, float)
        self.n_rows, self.n_params = self.x.shape

    def grad_rows(self, theta, rows=None):
        return -(self.a * (self.x @ theta))[:, None] * self.x

    def exact_hessians(self):
        return -self.a[:, None, None] * self.x[:, :, None] * self.x[:, None, :]


def _clip_frobenius(hessians, bound):
    norms = np.sqrt(np.sum(hessians**2, axis=(1, 2)))
    return hessians * np.minimum(1.0, bound / norms)[:, None, None]


def test_packing_is_an_isometry_and_inverts():
    rng = np.random.default_rng(1)
    m = rng.normal(size=(4, 4))
    m = m + m.T
    packed = symmetric_to_packed(m)
    assert packed.shape == (packed_size(4),)
    assert math.isclose(np.linalg.norm(packed), np.linalg.norm(m), rel_tol=1e-14)
    np.testing.assert_allclose(symmetric_from_packed(packed, 4), m, rtol=1e-14)
    with pytest.raises(ValueError, match="`packed` must be a vector of length"):
        symmetric_from_packed(packed[:-1], 4)


def test_clipped_hessian_sum_matches_exact_per_row_hessians():
    rng = np.random.default_rng(2)
    table = QuadraticRows(rng.normal(size=(300, 3)), rng.exponential(size=300))
    theta = rng.normal(size=3)
    bound = float(np.median(np.sqrt(np.sum(table.exact_hessians() ** 2, axis=(1, 2)))))  # half the rows clipped
    mechanism = NoisyClippedHessian(table, bound, 1.0)
    expected = _clip_frobenius(table.exact_hessians(), bound).sum(axis=0)
    got = symmetric_from_packed(mechanism.clipped_sum(theta), 3)
    np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-7 * np.abs(expected).max())


def test_substituting_one_row_moves_the_clipped_sum_by_at_most_twice_the_bound():
    rng = np.random.default_rng(3)
    x, a = rng.normal(size=(50, 3)), rng.exponential(size=50)
    bound = 0.5
    theta = rng.normal(size=3)
    base = NoisyClippedHessian(QuadraticRows(x, a), bound, 1.0).clipped_sum(theta)
    worst = 0.0
    for scale in (1e-3, 1.0, 1e3, 1e9):
        x2, a2 = x.copy(), a.copy()
        x2[7], a2[7] = rng.normal(size=3) * scale, -scale  # any row: a positive-curvature one too
        moved = NoisyClippedHessian(QuadraticRows(x2, a2), bound, 1.0).clipped_sum(theta)
        worst = max(worst, float(np.linalg.norm(moved - base)))  # the packed norm is the Frobenius norm
    assert worst <= 2 * bound * (1 + 1e-12)
    assert worst > bound  # the bound is reached: a large opposite-signed row
    assert NoisyClippedHessian.sensitivity(bound, "substitute") == 2 * bound
    assert NoisyClippedHessian.sensitivity(bound, "add_remove") == bound


def test_hessian_noise_is_symmetric_with_half_variance_off_the_diagonal():
    table = QuadraticRows(np.zeros((10, 3)), np.zeros(10))  # clipped sum 0: the release is the noise
    mechanism = NoisyClippedHessian(table, 1.0, 2.0)
    assert mechanism.std == 4.0
    rng = np.random.default_rng(4)
    draws = np.array([mechanism.release(np.zeros(3), rng) for _ in range(4000)])
    assert np.all(draws == np.swapaxes(draws, 1, 2))
    diag, off = draws[:, [0, 1, 2], [0, 1, 2]].ravel(), draws[:, [0, 0, 1], [1, 2, 2]].ravel()
    # Sample variances against σ² and σ²/2: the relative standard error of a variance is √(2/n).
    assert abs(diag.var() / 16.0 - 1) < 4 * math.sqrt(2 / diag.size)
    assert abs(off.var() / 8.0 - 1) < 4 * math.sqrt(2 / off.size)
    assert mechanism.noise_covariance() == (16.0, 8.0)


def test_hessian_mechanism_refuses_bad_settings():
    table = QuadraticRows(np.zeros((5, 2)), np.zeros(5))
    with pytest.raises(ValueError, match="`hessian_clip`"):
        NoisyClippedHessian(table, -1.0, 1.0)
    with pytest.raises(ValueError, match="`noise_multiplier`"):
        NoisyClippedHessian(table, 1.0, float("nan"))
    with pytest.raises(ValueError, match="`neighbouring`"):
        NoisyClippedHessian(table, 1.0, 1.0, "nearby")
    with pytest.raises(ValueError, match="`theta` must be a flat vector of length 2"):
        NoisyClippedHessian(table, 1.0, 1.0).release(np.zeros(3), np.random.default_rng(0))


# -- the route ----------------------------------------------------------------------------------


def _logistic(n=2000, seed=5, data=False):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 2))
    truth = np.array([0.4, 1.0, -0.7])  # intercept, slopes
    y = rng.binomial(1, 1 / (1 + np.exp(-(truth[0] + x @ truth[1:]))))
    with pm.Model() as model:
        if data:
            x_data, y_data = pm.Data("x", x), pm.Data("y_obs", y)
        else:
            x_data, y_data = x, y
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5, shape=2)
        pm.Bernoulli("y", logit_p=a + pm.math.dot(x_data, b), observed=y_data)
    return model, truth


def _normal(n=400, seed=6):
    rng = np.random.default_rng(seed)
    y = rng.normal(1.5, 2.0, size=n)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        sigma = pm.HalfNormal("sigma", 10)
        pm.Normal("y", mu, sigma, observed=y)
    return model


def _exact_laplace(model):
    """The MAP and the inverse negative Hessian of the log posterior on the unconstrained scale (test reference).

    Compiled in PyTensor's FAST_COMPILE build (few rewrites, per-op thunks: no Numba compile of the whole graph):
    a reference evaluated a few dozen times, where compiling the two graphs cost more than the evaluations (issue 38).
    """
    logp, dlogp = model.compile_logp(mode="FAST_COMPILE"), model.compile_dlogp(mode="FAST_COMPILE")
    start = model.initial_point()
    names = [v.name for v in model.value_vars]
    sizes = [np.asarray(start[n]).size for n in names]

    def point(theta):
        parts = np.split(theta, np.cumsum(sizes)[:-1])
        return {n: p.reshape(np.shape(start[n])) for n, p in zip(names, parts, strict=True)}

    theta0 = np.concatenate([np.asarray(start[n], float).ravel() for n in names])
    found = optimize.minimize(
        lambda t: -logp(point(t)), theta0, jac=lambda t: -dlogp(point(t)), method="BFGS", options={"gtol": 1e-10}
    )
    mode, p = found.x, theta0.size
    hessian = np.empty((p, p))
    for j in range(p):
        h = 1e-5 * max(1.0, abs(mode[j]))
        e = np.zeros(p)
        e[j] = h
        hessian[:, j] = (dlogp(point(mode + e)) - dlogp(point(mode - e))) / (2 * h)
    return mode, np.linalg.inv(-0.5 * (hessian + hessian.T))


def test_no_clipping_and_no_noise_give_the_exact_laplace_approximation():
    model, _ = _logistic()
    mode, covariance = _exact_laplace(model)
    # Scores are at most ‖(1, x)‖ ≤ √3 and Hessians' Frobenius norms at most 3/4: bounds of 100 never clip;
    # at ε = 10¹⁰ the score noise (σ ≈ 3·10⁻³ on sums of order 10³) moves the mean by about 10⁻⁴ sd.
    idata = release_once(
        model, epsilon=1e10, delta=1e-6, grad_clip=100.0, hessian_clip=100.0, newton_steps=8, max_step=None, draws=10
    )
    diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
    laplace_sd = np.sqrt(np.diag(covariance))
    noise_sd = laplace_sd * np.sqrt(np.square(diagnostics["noise_sd_ratio"]) - 1)
    assert np.all(noise_sd < 1e-3 * laplace_sd)  # the limit is reached: noise → 0
    assert np.all(np.abs(np.array(diagnostics["mean_unconstrained"]) - mode) < 4 * noise_sd + 1e-7)
    np.testing.assert_allclose(diagnostics["covariance_unconstrained"], covariance, rtol=1e-3)
    assert diagnostics["usable"] is True


def test_limit_agrees_with_nuts_where_laplace_is_accurate():
    model = _normal()
    draws = 2000
    idata = release_once(
        model,
        epsilon=1e10,  # score noise σ ≈ 0.03 on sums of order N/σ² = 100: 10⁻³ of an sd
        delta=1e-6,
        grad_clip=1e3,  # every row's score and Hessian stays far below (|y| < 10, σ near 2 after the first steps)
        hessian_clip=1e3,
        newton_steps=10,  # from σ ≈ 8, the default max_step (2) brings log σ in; then Newton converges
        draws=draws,
        random_seed=7,
    )
    with model:
        nuts = pm.sample(
            1000, tune=1000, chains=2, cores=1, random_seed=8, progressbar=False, compute_convergence_checks=False
        )
    for name in ("mu", "sigma"):
        ours = idata.posterior[name].values.ravel()
        theirs = nuts.posterior[name].values.ravel()
        sd = theirs.std()
        # Monte Carlo standard error of the difference of means (NUTS's draws taken as ~ half independent).
        se = math.sqrt(ours.var() / ours.size + 2 * theirs.var() / theirs.size)
        assert abs(ours.mean() - theirs.mean()) < 4 * se + 0.05 * sd  # + the Laplace error, O(1/√N) of an sd
        # sd ratio: the relative standard error of an sd is about √(1/(2n)).
        assert abs(ours.std() / sd - 1) < 4 * math.sqrt(1 / (2 * ours.size) + 2 / (2 * theirs.size)) + 0.05


def test_result_is_priced_and_recorded_like_the_other_routes():
    model, _ = _logistic(n=500)
    budget = PrivacyBudget(epsilon=3.0, delta=1e-6, n_rows=500)
    idata = release_once(
        model, epsilon=1.0, delta=1e-6, grad_clip=2.0, hessian_clip=1.0, budget=budget, draws=50, chains=2
    )
    attrs = idata.posterior.attrs
    assert 0.99 < attrs["dp_epsilon"] <= 1.0
    record = json.loads(attrs["dp_accountant"])
    assert record["mechanism"] == "pymc_dp.release_once"
    assert record["settings"]["newton_steps"] == 4
    assert record["start"]["source"] == "public"
    assert math.isclose(budget.spent().epsilon, attrs["dp_epsilon"], rel_tol=1e-9)
    assert pmdp.privacy_spent(idata).epsilon == pytest.approx(attrs["dp_epsilon"])
    statement = pmdp.privacy_statement(idata)
    assert "from 4 noisy Newton steps" in statement.text
    assert "Bounds set by the caller (public): score 2, Hessian 1." in statement.text
    assert "Avella-Medina" in str(statement)
    assert set(idata.posterior.data_vars) == {"a", "b"}
    assert idata.posterior["b"].shape == (2, 50, 2)
    assert "observed_data" not in idata


def test_a_dp_start_is_composed_into_the_result_and_not_charged_again():
    from pymc_dp.accounting.events import GaussianReleases
    from pymc_dp.results import PrivateStart

    model, _ = _logistic(n=400)
    start_events = [GaussianReleases(3.0, 1, label="a DP start")]
    start = PrivateStart([{"a": 0.3, "b": np.array([0.5, -0.5])}], start_events, source="test start")
    budget = PrivacyBudget(epsilon=3.0, delta=1e-6, n_rows=400)
    idata = release_once(
        model, epsilon=1.0, delta=1e-6, grad_clip=2.0, hessian_clip=1.0, start=start, budget=budget, draws=5
    )
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    assert record["start"] == {"source": "dp", "note": "test start"}
    events, _ = _events(1.0, 1e-6, 4, 0.25, 0.5)
    both = compose_epsilon([*start_events, *events], 1e-6)[0]
    assert idata.posterior.attrs["dp_epsilon"] == pytest.approx(both)
    assert both > 1.0
    assert budget.spent().epsilon == pytest.approx(compose_epsilon(events, 1e-6)[0])  # the run's releases only


def test_events_compose_to_the_target_and_shares_split_mu():
    for steps in (1, 3, 6):
        events, taus = _events(2.0, 1e-6, steps, 0.3, 0.6)
        assert compose_epsilon(events, 1e-6)[0] == pytest.approx(2.0, rel=1e-6)
        assert compose_epsilon(events, 1e-6)[0] <= 2.0
        assert len(taus) == steps
        # The last step's score noise is the smallest: it gets the largest share.
        assert taus[-1][0] == min(t[0] for t in taus)


def test_every_release_is_charged_before_the_first_row_is_read(monkeypatch):
    model, _ = _logistic(n=300)
    budget = PrivacyBudget(epsilon=5.0, delta=1e-6, n_rows=300)
    seen = []
    original_g, original_h = NoisyClippedGradient.release, NoisyClippedHessian.clipped_sum

    def spy_g(self, theta, rng):
        seen.append(("score", budget.spent().epsilon))
        return original_g(self, theta, rng)

    def spy_h(self, theta):
        seen.append(("hessian", budget.spent().epsilon))
        return original_h(self, theta)

    monkeypatch.setattr(NoisyClippedGradient, "release", spy_g)
    monkeypatch.setattr(NoisyClippedHessian, "clipped_sum", spy_h)
    idata = release_once(model, epsilon=1.0, delta=1e-6, grad_clip=2.0, hessian_clip=1.0, budget=budget, draws=5)
    assert len(seen) == 2 * 4
    total = idata.posterior.attrs["dp_epsilon"]
    assert all(spent == pytest.approx(total) for _, spent in seen)  # the whole run, before the first read


def test_a_run_over_the_budget_is_refused_before_any_row_is_read(monkeypatch):
    model, _ = _logistic(n=300)
    budget = PrivacyBudget(epsilon=0.5, delta=1e-6, n_rows=300)

    def fail(*args, **kwargs):
        raise AssertionError("a row was read")

    monkeypatch.setattr(NoisyClippedGradient, "release", fail)
    monkeypatch.setattr(NoisyClippedHessian, "clipped_sum", fail)
    with pytest.raises(PrivacyBudgetExceededError, match="Nothing was run or charged"):
        release_once(model, epsilon=1.0, delta=1e-6, grad_clip=2.0, hessian_clip=1.0, budget=budget)
    assert budget.spent().epsilon == 0.0


@pytest.mark.parametrize(
    ("settings", "name"),
    [
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": None}, "epsilon"),
        ({"delta": 1.5}, "delta"),
        ({"grad_clip": None}, "grad_clip"),
        ({"hessian_clip": 0.0}, "hessian_clip"),
        ({"newton_steps": 0}, "newton_steps"),
        ({"hessian_share": 1.0}, "hessian_share"),
        ({"final_share": float("nan")}, "final_share"),
        ({"max_step": -2.0}, "max_step"),
        ({"draws": 0}, "draws"),
        ({"neighbouring": "nearby"}, "neighbouring"),
        ({"start": {"zz": 1.0}}, "start"),
        ({"start": [1.0]}, "start"),
        ({"random_seed": 1.5}, "random_seed"),
    ],
)
def test_bad_input_is_refused_naming_the_parameter(monkeypatch, settings, name):
    model, _ = _logistic(n=100)
    budget = PrivacyBudget(epsilon=5.0, delta=1e-6, n_rows=100)
    monkeypatch.setattr(NoisyClippedGradient, "release", lambda *a: pytest.fail("a row was read"))
    kwargs = {"epsilon": 1.0, "delta": 1e-6, "grad_clip": 2.0, "hessian_clip": 1.0, "budget": budget, **settings}
    with pytest.raises((ValueError, TypeError), match=f"`{name}`"):
        release_once(model, **kwargs)
    assert budget.spent().epsilon == 0.0


# -- honesty: the widening and the coverage ---------------------------------------------------


def _route_pieces(model, **overrides):
    """The row mechanisms and prior of ``model`` and the route's settings, as release_once builds them."""
    point = public_initial_point(model)
    value_vars = model.value_vars
    prior, mechanisms = model_access(model, value_vars, None, point, None)
    theta0 = np.concatenate([np.asarray(point[v.name], float).ravel() for v in prior.value_vars])
    s = {"grad_clip": 2.0, "hessian_clip": 1.0, "neighbouring": "substitute", "max_step": 2.0, **overrides}
    return prior, mechanisms, theta0, s


def test_widening_predicts_the_spread_of_the_released_mean():
    model, _ = _logistic(n=3000)
    prior, mechanisms, theta0, s = _route_pieces(model)
    _, taus = _events(1.0, 1e-6, 4, 0.25, 0.5)
    rng = np.random.default_rng(9)
    fits = [_newton(mechanisms, prior, theta0, s, taus, rng) for _ in range(200)]
    means = np.array([f["mean"] for f in fits])
    predicted = np.mean([f["covariance"] - f["laplace"] for f in fits], axis=0)
    observed = np.cov(means.T)
    # Relative standard error of a sample variance from 200 draws: √(2/199) ≈ 0.1.
    ratio = np.diag(observed) / np.diag(predicted)
    assert np.all(np.abs(ratio - 1) < 4 * math.sqrt(2 / 199)), ratio


def _coverage(model, truth, replicates, rng, make_data, n, epsilon):
    prior, mechanisms, theta0, s = _route_pieces(model)
    _, taus = _events(epsilon, 1e-6, 4, 0.25, 0.5)
    z = stats.norm.ppf(0.95)
    hits = []
    for _ in range(replicates):
        with model:
            pm.set_data(make_data(rng, n))
        fit = _newton(mechanisms, prior, theta0, s, taus, rng)
        sd = np.sqrt(np.diag(fit["covariance"]))
        hits.append(np.abs(fit["mean"] - truth) <= z * sd)
    return np.array(hits)


def _logistic_data(truth):
    def make(rng, n):
        x = rng.uniform(-1, 1, size=(n, 2))
        return {"x": x, "y_obs": rng.binomial(1, 1 / (1 + np.exp(-(truth[0] + x @ truth[1:]))))}

    return make


def test_ninety_percent_intervals_cover_the_truth_small():
    # N = 1,000 (was 3,000: a quarter of the CPU), one of the slow test's settings. The tolerance is recomputed from
    # the replicates' own spread (per-replicate sd ≈ 0.19 here: 4 se ≈ 0.06). At N = 1,000, ε = 1 the noise is a
    # larger share of the interval than at 3,000 (the plan's sd ratio ≈ 2), so intervals without the widening, or
    # with the wrong noise, would miss far more often than this allows.
    model, truth = _logistic(n=1000, data=True)
    hits = _coverage(model, truth, 150, np.random.default_rng(10), _logistic_data(truth), 1000, 1.0)
    per_replicate = hits.mean(axis=1)  # coordinates of one replicate are dependent: the replicate is the unit
    se = per_replicate.std(ddof=1) / math.sqrt(per_replicate.size)
    assert abs(hits.mean() - 0.9) < max(4 * se, 0.03), hits.mean(axis=0)


@pytest.mark.slow
@pytest.mark.parametrize(("n", "epsilon"), [(1_000, 1.0), (10_000, 1.0), (10_000, 4.0)])
def test_ninety_percent_intervals_cover_the_truth_large(n, epsilon):
    model, truth = _logistic(n=n, data=True)
    hits = _coverage(model, truth, 400, np.random.default_rng(11), _logistic_data(truth), n, epsilon)
    per_replicate = hits.mean(axis=1)
    se = per_replicate.std(ddof=1) / math.sqrt(per_replicate.size)
    print(f"N={n} eps={epsilon}: coverage {hits.mean():.3f} (se {se:.3f}), per coefficient {hits.mean(axis=0)}")
    assert abs(hits.mean() - 0.9) < max(4 * se, 0.02), hits.mean(axis=0)


# -- "auto" clip bounds: noisy medians of the rows' score and Hessian norms, priced with the run ---------------


def test_the_hessian_norm_histogram_counts_each_row_once_and_a_substitution_moves_one_count():
    from pymc_dp.mechanisms.clip_bound import norm_histogram
    from pymc_dp.mechanisms.hessian import NoisyHessianNormHistogram

    rng = np.random.default_rng(8)
    x, a = rng.normal(size=(200, 3)), rng.exponential(size=200)
    a[5] = np.nan  # a row whose Hessian is not finite: the top bin, still one count
    theta = rng.normal(size=3)
    zero = _ZeroNoise()
    counts = NoisyHessianNormHistogram(QuadraticRows(x, a), 1.0).release_counts(theta, zero)
    exact = np.sqrt(np.sum(QuadraticRows(x, a).exact_hessians() ** 2, axis=(1, 2)))
    np.testing.assert_array_equal(counts, norm_histogram(exact))
    assert counts.sum() == 200 and counts[-1] >= 1
    x2, a2 = x.copy(), a.copy()
    x2[9], a2[9] = 1e4, 1e4  # any other row: one unit moves between two bins (L2 √2, the stated sensitivity)
    moved = NoisyHessianNormHistogram(QuadraticRows(x2, a2), 1.0).release_counts(theta, zero)
    assert np.abs(moved - counts).sum() <= 2 and np.linalg.norm(moved - counts) <= math.sqrt(2)
    assert NoisyHessianNormHistogram(QuadraticRows(x, a), 2.0).std == pytest.approx(2.0 * math.sqrt(2))
    with pytest.raises(ValueError, match="`theta` must be a flat vector of length 3"):
        NoisyHessianNormHistogram(QuadraticRows(x, a), 1.0).release_counts(np.zeros(2), zero)


class _ZeroNoise:
    """A noise source that adds nothing (to compare a histogram with its exact counts)."""

    def normal(self, loc, scale, size):
        return np.zeros(size)


def test_auto_bounds_are_priced_with_the_run_and_the_events_compose_to_the_target():
    for steps, per_anchor in ((1, 2), (4, 2), (4, 1)):
        anchors = steps  # a histogram per "auto" bound at every anchor
        events, _ = _events(1.0, 1e-6, steps, 0.25, 0.5, clip_releases=anchors * per_anchor)
        assert compose_epsilon(events, 1e-6)[0] == pytest.approx(1.0, rel=1e-6)
        assert compose_epsilon(events, 1e-6)[0] <= 1.0
        histograms = [e for e in events if "clip bounds" in e.label]
        assert len(histograms) == 1 and histograms[0].count == anchors * per_anchor
    # the Newton releases keep 95 % of μ: τ grows by 1/√0.95 against a run with bounds given as numbers
    _, fixed = _events(1.0, 1e-6, 4, 0.25, 0.5)
    _, auto = _events(1.0, 1e-6, 4, 0.25, 0.5, clip_releases=8)
    assert auto[-1][0] == pytest.approx(fixed[-1][0] / math.sqrt(0.95), rel=1e-9)


def test_auto_bounds_run_reads_no_row_before_the_charge_and_record_the_released_medians(monkeypatch):
    from pymc_dp.mechanisms.clip_bound import NoisyScoreNormHistogram
    from pymc_dp.mechanisms.hessian import NoisyHessianNormHistogram

    model, _ = _logistic(n=400)
    budget = PrivacyBudget(epsilon=3.0, delta=1e-6, n_rows=400)
    seen = []
    original_s, original_h = NoisyScoreNormHistogram.release_counts, NoisyHessianNormHistogram.release_counts

    def spy_s(self, reference, rng):
        seen.append(("score norms", budget.spent().epsilon))
        return original_s(self, reference, rng)

    def spy_h(self, reference, rng):
        seen.append(("hessian norms", budget.spent().epsilon))
        return original_h(self, reference, rng)

    monkeypatch.setattr(NoisyScoreNormHistogram, "release_counts", spy_s)
    monkeypatch.setattr(NoisyHessianNormHistogram, "release_counts", spy_h)
    idata = release_once(model, epsilon=1.0, delta=1e-6, budget=budget, draws=20, random_seed=2)
    attrs = idata.posterior.attrs
    assert sorted(k for k, _ in seen) == ["hessian norms"] * 4 + ["score norms"] * 4  # at every anchor
    assert all(spent == pytest.approx(attrs["dp_epsilon"]) for _, spent in seen)
    assert 0.99 < attrs["dp_epsilon"] <= 1.0
    record = json.loads(attrs["dp_accountant"])
    clip = record["settings"]["clip_bounds"]
    assert (clip["quantile"], clip["margin"], clip["epsilon_share"]) == (0.5, 4.0, 0.05)
    assert [r["anchor"] for r in clip["releases"]] == [0, 1, 2, 3]
    steps = json.loads(attrs["dp_diagnostics"])["newton_steps"]
    for release, used in zip(clip["releases"], steps, strict=True):  # each step clips at its own anchor's bound
        assert used["grad_clip"] == pytest.approx(4.0 * release["grad_clip"]["noisy_median"])
        assert used["hessian_clip"] == pytest.approx(4.0 * release["hessian_clip"]["noisy_median"])
    assert any("clip bounds" in e["label"] for e in record["events"])
    assert pmdp.privacy_spent(idata).epsilon == pytest.approx(attrs["dp_epsilon"])
    # over the budget: refused before any histogram is released
    small = PrivacyBudget(epsilon=0.5, delta=1e-6, n_rows=400)
    seen.clear()
    with pytest.raises(PrivacyBudgetExceededError):
        release_once(model, epsilon=1.0, delta=1e-6, budget=small)
    assert seen == [] and small.spent().epsilon == 0.0


@pytest.mark.parametrize(
    ("settings", "name"),
    [({"grad_clip": "median"}, "grad_clip"), ({"clip_epsilon_share": 1.5}, "clip_epsilon_share")],
)
def test_bad_auto_settings_are_refused_naming_the_parameter(settings, name):
    model, _ = _logistic(n=100)
    budget = PrivacyBudget(epsilon=5.0, delta=1e-6, n_rows=100)
    with pytest.raises(ValueError, match=f"`{name}`"):
        release_once(model, epsilon=1.0, delta=1e-6, budget=budget, **settings)
    assert budget.spent().epsilon == 0.0
