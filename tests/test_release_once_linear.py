"""Release once with the curvature from one noisy Σ zzᵀ (issue 34): the mechanism and the route.

Costs (3.12, loaded 2-core machine; the file: 17 CPU s user, 20 tests): the mechanism tests are
NumPy on a handful of rows (well under a second together); the coverage test 300 NumPy releases
(about 1 s); the route's end-to-end tests one release at N = 2,000 and a short NUTS run on the
priors each (6 s for the first, mostly compilation, 2.5 s for the clamped-covariates one); the
refusals read no data (< 1 s each)."""

import itertools
import json
import math

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.accounting.composition import compose_epsilon
from pymc_dp.mechanisms.covariate_gram import GaussianLinearRows, gram_row_bound, gram_sensitivity
from pymc_dp.release_once_linear import (
    GRAM_RESOLVED_SDS,
    linear_noise_multipliers,
    release_once_linear,
    release_once_linear_events,
)


class _NoNoise:
    """A stand-in generator whose noise is zero: the releases' exact clipped sums (tests only)."""

    @staticmethod
    def normal(loc, scale, size):
        return np.zeros(size)


def _rows(x, groups, n_groups, intercept=False, neighbouring="substitute"):
    return GaussianLinearRows(x, np.zeros(len(x)), groups, n_groups, intercept, (-1.0, 1.0), neighbouring)


@pytest.mark.parametrize("grouped", [True, False])
def test_gram_sensitivity_is_the_brute_force_worst_neighbour(grouped):
    """Every substitution of one row (a grid of the box, points outside it, negative and out-of-range groups) moves
    Σ zzᵀ by at most Δ = √2 r² in Frobenius norm, and some substitution reaches it; add/remove: r²."""
    x = np.array([[0.3, -0.2], [1.0, 1.0], [-0.5, 0.9], [0.0, 0.0]])
    groups = np.array([0, 1, 1, 0]) if grouped else None
    grid = [-3.0, -1.0, -0.4, 0.0, 0.7, 1.0, np.nan]  # outside the box and non-finite: clamped
    candidates = list(itertools.product([-3, -2, -1, 0, 1, 2] if grouped else [0], grid, grid))
    base = _rows(x, groups, 2, intercept=True)._gram_sum()
    r2 = gram_row_bound((-1.0, 1.0), 2, True)
    assert r2 == 3.0
    worst = 0.0
    for i, (g, u, v) in itertools.product(range(len(x)), candidates):
        x_new, g_new = x.copy(), None if groups is None else groups.copy()
        x_new[i] = (u, v)
        if g_new is not None:
            g_new[i] = g
        moved = np.linalg.norm(_rows(x_new, g_new, 2, intercept=True)._gram_sum() - base)
        worst = max(worst, moved)
    delta = gram_sensitivity(r2, "substitute")
    assert worst <= delta * (1 + 1e-12)
    if grouped:  # two groups, orthogonal corners: the bound is attained
        assert worst == pytest.approx(delta, rel=1e-12)
    removed = max(np.linalg.norm(_rows(np.delete(x, i, 0), None if groups is None else np.delete(groups, i), 2,
                                       intercept=True)._gram_sum() - base) for i in range(len(x)))  # fmt: skip
    assert removed <= gram_sensitivity(r2, "add_remove") * (1 + 1e-12)


def test_one_row_moves_only_its_own_clipped_terms():
    """Replacing row 0 by a wild row moves the Gram sum by its own clamped zzᵀ change and the score sum by ≤ 2b."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(50, 2))
    y, groups = rng.normal(size=50), rng.integers(0, 3, 50)
    rows = GaussianLinearRows(x, y, groups, 3, False, (-1.0, 1.0))
    x2, y2 = x.copy(), y.copy()
    x2[0], y2[0] = (40.0, -7.0), 1e6
    other = GaussianLinearRows(x2, y2, groups, 3, False, (-1.0, 1.0))
    z_old, z_new = np.r_[np.eye(3)[groups[0]], x[0]], np.r_[np.eye(3)[groups[0]], [1.0, -1.0]]
    np.testing.assert_allclose(
        other._gram_sum() - rows._gram_sum(), np.outer(z_new, z_new) - np.outer(z_old, z_old), atol=1e-12
    )
    psi, bound = np.zeros(5), 2.5
    moved = other.release_score(psi, 0.0, bound, 1.0, _NoNoise()) - rows.release_score(psi, 0.0, bound, 1.0, _NoNoise())
    assert np.linalg.norm(moved) <= 2 * bound * (1 + 1e-12)
    counts = other.release_score_norm_histogram(psi, 0.0, 1.0, _NoNoise())
    assert np.abs(counts - rows.release_score_norm_histogram(psi, 0.0, 1.0, _NoNoise())).sum() <= 2


@pytest.mark.parametrize(("epsilon", "steps", "gram_share"), [(4.0, 6, 0.3), (1.0, 1, 0.5), (0.5, 3, 0.1)])
def test_the_events_spend_exactly_the_planned_epsilon(epsilon, steps, gram_share):
    """The 2K + 2 releases' μ (the clamped count included) add up to what (ε, δ) allows: the composed ε is the
    target, from below."""
    tau_gram, taus, tau_clip, tau_count = linear_noise_multipliers(epsilon, 1e-6, steps, gram_share, 0.5, 0.05)
    events = release_once_linear_events(tau_gram, taus, tau_clip, tau_count)
    assert sum(e.count for e in events) == 2 * steps + 2
    spent = compose_epsilon(events, 1e-6)[0]
    assert spent <= epsilon
    assert spent == pytest.approx(epsilon, rel=1e-6)


def _grouped_model(n_rows=2000, n_groups=4, seed=3):
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, n_groups, n_rows)
    x = np.clip(rng.normal(0.0, 0.5, size=(n_rows, 2)), -1, 1)
    y = rng.normal(0.0, 0.5, n_groups)[groups] + x @ [0.8, -0.3] + rng.normal(0.0, 0.3, n_rows)
    with pm.Model() as model:
        mu = pm.Normal("mu_group", 0, 1)
        sd = pm.HalfNormal("sd_group", 1)
        a = pm.Normal("a", mu, sd, shape=n_groups)
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", a[groups] + pm.math.dot(x, beta), sigma, observed=y)
    z = np.column_stack([np.eye(n_groups)[groups], x])
    return model, np.linalg.lstsq(z, y, rcond=None)[0]


def test_the_route_releases_a_gaussian_around_the_least_squares_fit_and_samples_the_priors():
    """One run at ε = 2: the released mean lies within 5 of its own sds (noise included) of the exact least-squares
    fit in (group means, β) (a z-test on one draw: fails with probability < 10⁻⁵ per coordinate when calibrated),
    the result is priced at ε and carries the release's record; the priors' variables are sampled."""
    model, exact = _grouped_model()
    idata = release_once_linear(
        model, epsilon=2.0, delta=1e-6, x_bounds=(-1, 1), draws=200, tune=200, chains=2, random_seed=5,
        on_poor_mixing="ignore",
    )  # fmt: skip
    attrs = idata.posterior.attrs
    assert float(attrs["dp_epsilon"]) == pytest.approx(2.0, rel=1e-6)
    release = json.loads(attrs["dp_diagnostics"])["release"]
    mean, covariance = np.array(release["mean_psi"]), np.array(release["covariance_psi"])
    z = np.abs(mean[:-1] - exact) / np.sqrt(np.diag(covariance)[:-1])
    assert np.all(z < 5.0), z
    assert release["gram"]["smallest_eigenvalue"] > GRAM_RESOLVED_SDS * release["gram"]["noise_std"]
    assert {"mu_group", "sd_group", "a", "beta", "sigma"} <= set(idata.posterior.data_vars)
    # NUTS samples the priors against that Gaussian: β's prior N(0, 1) is flat at its scale, so the draws' mean is the
    # released mean up to prior pull and Monte Carlo error (both far below one released sd; a likelihood that did not
    # reach the priors' variables left the draws hundreds of sds away).
    beta = np.asarray(idata.posterior["beta"]).reshape(-1, 2)
    released_sd = np.sqrt(np.diag(covariance))[-3:-1]
    assert np.all(np.abs(beta.mean(axis=0) - mean[-3:-1]) < released_sd), (beta.mean(axis=0), mean[-3:-1])
    assert json.loads(attrs["dp_accountant"])["mechanism"] == "pymc_dp.release_once_linear"
    # The box clamps no row: the noisy count is noise (sd 10 τ₁ ≈ 23 rows at ε = 2), the flag's line √N + 2 sd ≈ 91 rows
    # is 4 sds out (a false flag has probability ≈ 3·10⁻⁵).
    assert release["clamping"]["noisy_clipped_rows"] < 5 * release["clamping"]["share_clipped_sd"] * 2000
    assert not any("outside the public bounds" in p for p in release["problems"]), release["problems"]


def test_refusals_read_nothing_and_charge_nothing():
    """A model that is not a Gaussian linear regression, a bad box, a run over budget: clear errors, nothing spent."""
    model, _ = _grouped_model(n_rows=200)
    budget = pmdp.PrivacyBudget(epsilon=1.0, delta=1e-5, n_rows=200)
    with pytest.raises(ValueError, match="x_bounds"):
        release_once_linear(model, epsilon=1.0, delta=1e-6, x_bounds=(1, -1), budget=budget)
    with pytest.raises(Exception, match="epsilon"):
        release_once_linear(model, epsilon=2.0, delta=1e-6, x_bounds=(-1, 1), budget=budget)
    with pytest.raises(ValueError, match="neighbouring"):  # N, private under add/remove, enters the steps
        release_once_linear(model, epsilon=1.0, delta=1e-6, x_bounds=(-1, 1), neighbouring="add_remove")
    assert budget.spent().epsilon == 0.0
    with pm.Model() as logistic:
        b = pm.Normal("b", 0, 1)
        pm.Bernoulli("y", logit_p=b * np.linspace(-1, 1, 50), observed=np.arange(50) % 2)
    with pytest.raises(ValueError, match="Normal likelihood"):
        release_once_linear(logistic, epsilon=1.0, delta=1e-6, x_bounds=(-1, 1))
    rows = np.random.default_rng(1).normal(size=200)
    with model:  # a potential that reads the rows would enter NUTS exactly, unnoised
        pm.Potential("leak", -((model["beta"][0] - rows) ** 2).sum())
    with pytest.raises(ValueError, match=r"(?i)potential"):
        release_once_linear(model, epsilon=1.0, delta=1e-6, x_bounds=(-1, 1), budget=budget)
    assert budget.spent().epsilon == 0.0
    assert math.isfinite(gram_sensitivity(3.0, "substitute"))


def test_release_once_takes_the_covariate_curvature_with_x_bounds_and_refuses_hessian_settings():
    """``pmdp.release_once(..., x_bounds=...)`` is this route (priced the same); a Hessian setting with it is refused
    before anything is read or charged. Reads no data (< 1 s)."""
    model, _ = _grouped_model(n_rows=200)
    budget = pmdp.PrivacyBudget(epsilon=1.0, delta=1e-5, n_rows=200)
    with pytest.raises(ValueError, match="hessian_clip"):
        pmdp.release_once(model, epsilon=1.0, delta=1e-6, x_bounds=(-1, 1), hessian_clip=3.0, budget=budget)
    with pytest.raises(Exception, match="epsilon"):  # over the budget: refused by release_once_linear's plan
        pmdp.release_once(model, epsilon=2.0, delta=1e-6, x_bounds=(-1, 1), budget=budget)
    assert budget.spent().epsilon == 0.0


def test_the_released_gaussian_covers_the_exact_fit_at_its_stated_rate():
    """The widened Gaussian N(m, C) is honest: over 300 releases on one data set (N = 2,000, ε = 1, 4 groups, bounds
    that clip next to no row), its 90 % intervals cover the exact least-squares β and the maximum-likelihood log σ at
    a rate within 3 binomial standard errors (0.052) of 0.90 for each of the three. NumPy releases, no NUTS (2 CPU s).
    """
    from pymc_dp.mechanisms.covariate_gram import linear_rows
    from pymc_dp.regression_graph import regression_parts
    from pymc_dp.release_once_linear import LINEAR_NEWTON_STEPS, _newton_linear

    model, exact = _grouped_model(n_rows=2000)
    rows = linear_rows(model, regression_parts(model), (-1.0, 1.0))
    residual = rows._y - rows._z @ exact
    target = np.r_[exact[-2:], 0.5 * np.log(np.mean(residual**2))]
    tau_gram, taus, tau_clip, _ = linear_noise_multipliers(1.0, 1e-6, LINEAR_NEWTON_STEPS, 0.3, 0.5, 0.05)
    rng = np.random.default_rng(11)
    inside = []
    for _ in range(300):
        fit = _newton_linear(rows, {"start_sigma": 1.0}, taus, tau_gram, tau_clip, rng)
        sd = np.sqrt(np.diag(fit["covariance"]))[-3:]
        inside.append(np.abs(fit["mean"][-3:] - target) < 1.6449 * sd)
    coverage = np.mean(inside, axis=0)
    assert np.all(np.abs(coverage - 0.90) < 3 * np.sqrt(0.09 / 300)), coverage


def test_an_ungrouped_regression_releases_intercept_and_slopes_in_the_order_of_its_graph():
    """Without groups z = (1, x): the released mean lies within 5 of its sds of the exact least-squares fit, and ψ(θ)
    read off the graph is (intercept, β, log σ) in the same order. NumPy releases and one graph evaluation (< 1 s)."""
    from pymc_dp.mechanisms.covariate_gram import linear_rows
    from pymc_dp.regression_graph import regression_parts
    from pymc_dp.release_once_linear import LINEAR_NEWTON_STEPS, _newton_linear, _psi_graph

    rng = np.random.default_rng(4)
    x = np.clip(rng.normal(0.0, 0.5, size=(3000, 2)), -1, 1)
    y = 0.4 + x @ [0.8, -0.3] + rng.normal(0.0, 0.3, 3000)
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 1)
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", alpha + pm.math.dot(x, beta), sigma, observed=y)
    parts = regression_parts(model)
    exact = np.linalg.lstsq(np.column_stack([np.ones(3000), x]), y, rcond=None)[0]
    taus = linear_noise_multipliers(4.0, 1e-6, LINEAR_NEWTON_STEPS, 0.3, 0.5, 0.05)
    fit = _newton_linear(linear_rows(model, parts, (-1.0, 1.0)), {"start_sigma": 1.0}, taus[1], taus[0], taus[2], rng)
    z = np.abs(fit["mean"][:3] - exact) / np.sqrt(np.diag(fit["covariance"]))[:3]
    assert np.all(z < 5.0), z
    psi = _psi_graph(parts).eval({alpha: 0.5, beta: np.array([1.0, 2.0]), sigma: np.e})
    np.testing.assert_allclose(psi, [0.5, 1.0, 2.0, 1.0])


def test_an_unusable_result_warns_or_raises_in_this_routes_words_with_the_result():
    """A flagged result: a PoorMixingWarning naming the problems, or with on_poor_mixing="raise" a PoorMixingError that
    carries the (paid-for) result; "ignore" says nothing. No release, no NUTS (< 0.1 s)."""
    from pymc_dp.diagnostics import PoorMixingError, PoorMixingWarning
    from pymc_dp.release_once_linear import _say_if_unusable

    result, flagged = object(), {"usable": False, "problems": ["Σ zzᵀ unresolved"]}
    with pytest.warns(PoorMixingWarning, match="covariate curvature.*Σ zzᵀ unresolved"):
        _say_if_unusable(result, flagged, "warn")
    with pytest.raises(PoorMixingError) as raised:
        _say_if_unusable(result, flagged, "raise")
    assert raised.value.result is result
    _say_if_unusable(result, flagged, "ignore")
    _say_if_unusable(result, {"usable": True, "problems": []}, "raise")


def _groups_only_model(n_rows=200, n_groups=3):
    rng = np.random.default_rng(2)
    groups = rng.integers(0, n_groups, n_rows)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1, shape=n_groups)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", a[groups], sigma, observed=rng.normal(size=n_rows))
    return model


@pytest.mark.parametrize(
    ("which", "x_bounds", "found"),
    [
        ("groups only", None, "NoneType"),
        ("groups only", ([-1, -1, -1], [1, 1, 1]), r"shape \(3,\)"),
        ("groups only", (1, -1), r"lower=\[1.0\]"),
        ("covariates", ([-1, -1, -1], [1, 1, 1]), r"shape \(3,\)"),
        ("covariates", (-1, 1, 2), "length 3"),
        ("covariates", ("low", 1), "str"),
        # the second review: bounds so wide that r² overflows were planned and charged, then failed
        ("covariates", (-1e200, 1e200), r"lower=\[-1e\+200"),
        ("groups only", (-1e308, 1e308), r"lower=\[-1e\+308"),
    ],
)
def test_a_bad_box_is_refused_by_name_before_anything_is_charged(which, x_bounds, found):
    """Finding 4: a bad ``x_bounds`` (None, wrong length, inverted) is a ValueError naming it, what it must be and what
    was found, raised before the run is planned: the budget holds no event. Reads no data (< 1 s each)."""
    model = _groups_only_model() if which == "groups only" else _grouped_model(n_rows=200)[0]
    budget = pmdp.PrivacyBudget(epsilon=4.0, delta=1e-5, n_rows=200)
    with pytest.raises(ValueError, match=rf"(?s)`x_bounds` must be .*Found.*{found}"):
        release_once_linear(model, epsilon=1.0, delta=1e-6, x_bounds=x_bounds, budget=budget, draws=10, tune=10)
    assert budget.spent().epsilon == 0.0
    assert budget.events == ()


def test_a_negative_group_index_is_the_group_the_model_reads():
    """Finding 6: −G ≤ g < 0 is group G + g in Σ zzᵀ, as PyMC's a[g] wraps it; g < −G or g ≥ G gives no indicator
    (the model would fail there, the release stays bounded). NumPy on 5 rows (< 0.1 s)."""
    x = np.array([[0.3], [-0.2], [0.9], [0.1], [-0.7]])
    wrapped = _rows(x, np.array([-1, -3, 0, 2, -2]), 3)._gram_sum()
    np.testing.assert_array_equal(wrapped, _rows(x, np.array([2, 0, 0, 2, 1]), 3)._gram_sum())
    outside = _rows(x, np.array([-4, 3, 0, 2, 1]), 3)._gram_sum()
    np.testing.assert_array_equal(outside[:3, :3], np.diag([1.0, 1.0, 1.0]))
    assert outside[3, 3] == pytest.approx(np.sum(x**2))


def test_covariates_the_box_clamps_are_counted_and_flag_the_result():
    """Finding 2: the reviewer's case (pmdp.release_once(x_bounds=...) is this route), small. x ~ N(0, 1) with
    x_bounds=(-1, 1) clamps about 29 % of the rows (weighted), and the slope comes back biased; the noisy clamped
    count (sd 10 τ₁ ≈ 12 rows at ε = 4) lies about 40 sds above the flag's line 1/√N + 2 sd (69 of 2,000 rows), so
    the result is flagged and not usable. The run is priced at ε with the planned 2K + 2 releases, all in the
    budget. One release at N = 2,000 and NUTS 2 × (100 + 100) (2.5 s wall on 3.12, compiled after the first)."""
    rng = np.random.default_rng(8)
    x = rng.normal(0.0, 1.0, size=(2000, 1))
    y = 0.2 + 0.5 * x[:, 0] + rng.normal(0.0, 0.5, 2000)
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 1)
        beta = pm.Normal("beta", 0, 1, shape=1)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", alpha + pm.math.dot(x, beta), sigma, observed=y)
    budget = pmdp.PrivacyBudget(epsilon=4.0, delta=1e-6, n_rows=2000)
    idata = release_once_linear(
        model, epsilon=4.0, delta=1e-6, x_bounds=(-1, 1), draws=100, tune=100, chains=2, random_seed=3,
        on_poor_mixing="ignore", budget=budget,
    )  # fmt: skip
    diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
    clamping = diagnostics["release"]["clamping"]
    assert clamping["share_clipped"] > clamping["bias_threshold_share"] + 2 * clamping["share_clipped_sd"]
    assert any("outside the public bounds" in p for p in diagnostics["release"]["problems"])
    assert diagnostics["usable"] is False
    assert float(idata.posterior.attrs["dp_epsilon"]) == pytest.approx(4.0, rel=1e-6)
    assert budget.spent().epsilon == pytest.approx(4.0, rel=1e-6)
    assert sum(e.count for e in budget.events) == 2 * 4 + 2
    assert any("clamped" in e.label for e in budget.events)
