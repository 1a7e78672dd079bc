"""Poisson regression on released statistics (issue 34, deliverable 2): sensitivity, clipping, accounting,
refusals, the noise → 0 limit against NUTS on the raw rows, and coverage of known truth."""

import itertools
import math
import warnings

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from scipy import optimize, stats

from pymc_dp.accounting import PrivacyBudget
from pymc_dp.accounting.budget import PrivacyBudgetExceededError
from pymc_dp.exponential_family import ReleasedStatistics, get_family, release_statistics
from pymc_dp.exponential_family.counts import (
    PoissonCovariateAnchor,
    PoissonRegression,
    clamped_poisson_hessian_weight,
    clamped_poisson_mean,
    poisson_anchor_point,
)
from pymc_dp.exponential_family.negative_binomial import (
    NegativeBinomialScoreAnchor,
    clamped_nb_hessian_weight,
    clamped_nb_mean,
)
from pymc_dp.mechanisms.sufficient_statistics import PrivateSufficientStatistics

BOUNDS = ([1.0, -1.0, -0.5], [1.0, 2.0, 0.5])
SETTINGS = {"n_features": 3, "x_bounds": BOUNDS, "y_max": 7}


def _rows(n, beta=(0.4, 0.3, -0.5), seed=0, y_max=None):
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n), rng.uniform(-1.0, 2.0, n), rng.uniform(-0.5, 0.5, n)])
    y = rng.poisson(np.exp(x @ np.asarray(beta)))
    return x, (y if y_max is None else np.minimum(y, y_max))


# -- the clipped-count functions and the statistics' intervals ---------------------------------------
@pytest.mark.parametrize("y_max", [1, 3, 10])
def test_clamped_poisson_mean_and_hessian_weight_match_direct_sums(y_max):
    k = np.arange(400)
    for lam in (1e-8, 0.3, 2.0, 9.5, 40.0):
        if lam < 1e-3:  # h(λ) ≈ λ there; the finite difference below would be all rounding
            assert clamped_poisson_hessian_weight(np.array([lam]), y_max)[0] == pytest.approx(lam, rel=1e-6)
        pmf = stats.poisson.pmf(k, lam)
        mean = np.sum(np.minimum(k, y_max) * pmf)
        weight = np.sum(np.where(k <= y_max, k, 0) * pmf)  # E[Y·1{Y ≤ M}]
        assert clamped_poisson_mean(np.array([lam]), y_max)[0] == pytest.approx(mean, rel=1e-10, abs=1e-300)
        assert clamped_poisson_hessian_weight(np.array([lam]), y_max)[0] == pytest.approx(weight, rel=1e-10, abs=1e-300)
        # h is λ·dm/dλ (the Jacobian weight of the mean function): a central difference
        step = 1e-6 * lam
        slope = clamped_poisson_mean(np.array([lam + step]), y_max) - clamped_poisson_mean(
            np.array([lam - step]), y_max
        )
        assert lam * slope[0] / (2 * step) == pytest.approx(weight, rel=1e-5, abs=1e-8)


def _corner_rows(family, counts):
    lower, upper = family.x_bounds
    # the corners of the box, and 0 where the interval holds it (a square's minimum)
    values = [sorted({lo, hi, min(max(0.0, lo), hi)}) for lo, hi in zip(lower, upper, strict=True)]
    corners = itertools.product(*values)
    return np.array([[*c, y] for c in corners for y in counts])


def test_poisson_regression_intervals_are_the_exact_ranges_of_the_clipped_rows():
    """Δ₁ and Δ₂ come from per-coordinate widths: each width is attained by admissible rows (the corners of the
    box with y ∈ {0, y_max}), and no admissible row leaves its interval."""
    family = get_family("poisson_regression", **SETTINGS)
    lo, hi = family.intervals()
    corners = family.row_statistics(_corner_rows(family, [0, 7]))
    np.testing.assert_allclose(corners.min(0), lo)
    np.testing.assert_allclose(corners.max(0), hi)
    x, y = _rows(500, seed=1)
    inside = family.row_statistics(family.check_data((x, y)))
    assert np.all(inside >= lo - 1e-12) and np.all(inside <= hi + 1e-12)
    assert family.l1_sensitivity() == pytest.approx(np.sum(hi - lo))
    assert family.l2_sensitivity() == pytest.approx(np.sqrt(np.sum((hi - lo) ** 2)))
    # Σ y·x: y·x₁ ∈ hull{0, 7·(−1), 7·2} = [−7, 14]; the intercept's 1·1 entry is constant (width 0)
    assert (lo[1], hi[1]) == (-7.0, 14.0) and hi[6] - lo[6] == 0.0


def test_rows_are_clipped_one_by_one_and_raise_names_no_value():
    family = get_family("poisson_regression", **SETTINGS)
    x = np.array([[1.0, 5.0, 0.1], [1.0, -3.0, -2.0], [1.0, np.nan, 0.2], [1.0, 0.5, 0.0]])
    y = np.array([12, -3, np.nan, 2.6])
    rows = family.check_data((x, y))
    np.testing.assert_array_equal(rows[:, 1], [2.0, -1.0, -1.0, 0.5])
    np.testing.assert_array_equal(rows[:, 2], [0.1, -0.5, 0.2, 0.0])
    np.testing.assert_array_equal(rows[:, 3], [7, 0, 0, 3])  # counts rounded into 0..y_max
    with pytest.raises(ValueError, match="out_of_bounds='raise'") as error:
        family.check_data((x[:1], np.array([12])), out_of_bounds="raise")
    assert "12" not in str(error.value) and "5.0" not in str(error.value)


def test_anchor_statistics_stay_in_their_intervals_for_any_public_anchor():
    x, y = _rows(400, seed=2)
    rng = np.random.default_rng(3)
    for anchor in [(0.0, 0.0, 0.0), (0.4, 0.3, -0.5), (3.0, 1.0, 2.0), (-5.0, -2.0, 0.0)] + [
        tuple(rng.normal(0, 2, 3)) for _ in range(5)
    ]:
        family = PoissonCovariateAnchor(3, BOUNDS, 7, anchor)
        lam_max = math.exp(sum(max(lo * b, hi * b) for lo, hi, b in zip(*BOUNDS, anchor, strict=True)))
        assert family.weight_bound == pytest.approx(min(7.0, lam_max))
        lo, hi = family.intervals()
        rows = family.row_statistics(family.check_data((x, y)))
        corners = family.row_statistics(_corner_rows(family, [0]))
        for statistics in (rows, corners):
            assert np.all(statistics >= lo - 1e-9) and np.all(statistics <= hi + 1e-9)
        # the counts are not read: the anchor is a function of the covariates only
        np.testing.assert_array_equal(rows, family.row_statistics(family.check_data((x, np.zeros_like(y)))))


# -- accounting and refusals ---------------------------------------------------------------------------
def test_release_is_charged_before_the_noise_is_drawn_and_over_budget_charges_nothing(monkeypatch):
    x, y = _rows(300, seed=4)
    budget = PrivacyBudget(1.5, 1e-6, n_rows=300)
    seen = []
    original = PrivateSufficientStatistics.discrete_laplace_noisy

    def watched(self, *args, **kwargs):
        seen.append((self.family.name, budget.spent().epsilon))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PrivateSufficientStatistics, "discrete_laplace_noisy", watched)
    rel = release_statistics("poisson_regression", (x, y), epsilon=1.0, covariate_anchors=2, budget=budget, **SETTINGS)
    # all three releases (the statistics, then two anchors) are drawn after the whole ε was charged
    assert [name for name, _ in seen] == ["poisson_regression", "poisson_covariate_anchor", "poisson_covariate_anchor"]
    assert all(spent == pytest.approx(1.0) for _, spent in seen)
    record = rel.accountant_record()
    assert record["epsilon"] == pytest.approx(1.0) and len(record["covariate_anchors"]) == 2
    assert len(record["events"]) == 3
    seen.clear()
    with pytest.raises(PrivacyBudgetExceededError):
        release_statistics("poisson_regression", (x, y), epsilon=1.0, covariate_anchors=1, budget=budget, **SETTINGS)
    assert seen == [] and budget.spent().epsilon == pytest.approx(1.0)


def test_the_noise_aware_likelihood_needs_an_anchor_and_a_vector_beta():
    x, y = _rows(200, seed=6)
    rel = release_statistics("poisson_regression", (x, y), epsilon=1.0, covariate_anchors=1, **SETTINGS)
    unanchored = ReleasedStatistics(
        rel.family,
        rel.statistics,
        rel.n_rows,
        rel.epsilon,
        rel.scale,
        rel.l1_sensitivity,
        noisy_statistics=rel.noisy_statistics,
    )
    with pm.Model(), pytest.raises(ValueError, match="`covariate_anchors` must be at least 1"):
        unanchored.likelihood("y", beta=pm.Normal("beta", shape=3))
    with pm.Model(), pytest.raises(ValueError, match="`beta` must be a vector of 3 coefficients"):
        rel.likelihood("y", beta=pm.Normal("beta"))
    with pm.Model(), pytest.raises(ValueError, match=r"must be exactly \['beta'\]"):
        rel.likelihood("y", beta=pm.Normal("beta", shape=3), sigma=1.0)


def test_naive_likelihood_is_the_chebyshev_polynomial_of_exp_on_the_released_statistics():
    family = PoissonRegression(**SETTINGS, approximation_interval=(-1.0, 2.0))
    nodes = 0.5 + 1.5 * np.cos((2 * np.arange(3) + 1) * np.pi / 6)  # Chebyshev points of [−1, 2]
    a = family.coefficients
    np.testing.assert_allclose(a[0] + a[1] * nodes + a[2] * nodes**2, np.exp(nodes), rtol=1e-12)
    x, y = _rows(100, seed=7)
    statistics = family.row_statistics(family.check_data((x, y))).sum(0)
    beta = np.array([0.2, -0.1, 0.3])
    u_rows = x @ beta
    expected = np.sum(y * u_rows) - np.sum(a[0] + a[1] * u_rows + a[2] * u_rows**2)
    assert float(family.loglik(statistics, 100, beta=beta).eval()) == pytest.approx(expected, rel=1e-10)


# -- the noise → 0 limit -----------------------------------------------------------------------------
def _clipped_mle(x, y, y_max):
    """The MLE of the clipped-count model: Σ min(y, M)·x = Σ m(exp(xᵀβ))·x, by least squares on the score."""
    target = np.minimum(y, y_max) @ x

    def score(beta):
        return (target - clamped_poisson_mean(np.exp(x @ beta), y_max) @ x) / len(y)

    return optimize.least_squares(score, np.zeros(x.shape[1]), xtol=1e-14, ftol=1e-14, gtol=1e-14).x


def test_anchors_reach_the_clipped_count_mle_when_the_noise_vanishes():
    """ε = 1e9: the first point comes from the polynomial statistics alone, each anchor is a Newton step on the
    exact clipped-count score (capped at one nat of the linear predictor): with clipping active (y_max = 3 below
    many counts) the anchors approach the MLE, each step closer, and the last within 0.01."""
    x, y = _rows(3000, beta=(0.9, 0.4, -0.5), seed=8)
    settings = {**SETTINGS, "y_max": 3}
    rel = release_statistics(
        "poisson_regression",
        (x, y),
        epsilon=1e9,
        covariate_anchors=3,
        reproducible_noise=True,
        random_seed=1,
        **settings,
    )
    mle = _clipped_mle(x, y, 3)
    start = poisson_anchor_point(rel.family, rel.noisy_statistics, rel.n_rows)
    assert np.max(np.abs(start - mle)) < 0.5  # the polynomial start is rough with clipping this heavy
    errors = [np.max(np.abs(a.anchor - mle)) for a in rel.covariate_anchors]
    assert errors[0] == pytest.approx(np.max(np.abs(start - mle)))  # the first anchor is at the start
    assert errors[1] < errors[0] and errors[2] < errors[1] and errors[2] < 0.01, errors


def _flat(idata):
    return idata.posterior["beta"].values.reshape(-1, idata.posterior["beta"].shape[-1])


def test_large_epsilon_posterior_matches_nuts_on_the_raw_rows_within_the_laplace_approximation():
    """ε = 1e9 and counts below y_max: the noise-aware posterior approaches NUTS on the raw rows.

    Known bias: the likelihood is the exact one to second order at the anchor (the MLE here), so it is
    the Gaussian (Bernstein–von Mises) approximation of the exact posterior: means off by O(1/√N)
    posterior sds (the skewness), sds by O(1/√N) relatively. Tolerance: means within 3/√N sd plus 4
    combined MCSE, sds within 3/√N plus 4 standard errors of an sd estimate (1/√(2·ESS)).
    """
    n = 2000
    x, y = _rows(n, seed=9)
    settings = {**SETTINGS, "y_max": 60}  # no count is clipped: the raw Poisson model is the clipped one
    assert y.max() < 60
    _assert_matches_raw_nuts("poisson_regression", x, y, settings, lambda mu: pm.Poisson("obs", mu=mu, observed=y))


def _assert_matches_raw_nuts(family, x, y, settings, raw_likelihood):
    """ε = 1e9 release of ``family`` (3 anchors) against NUTS on the raw rows (``raw_likelihood(exp(xᵀβ))``).

    Means within 3/√N sd plus 4 combined MCSE, sds within 3/√N plus 4 standard errors of an sd
    estimate (1/√(2·ESS)): the Laplace (Bernstein–von Mises) form's known O(1/√N) bias.
    """
    rel = release_statistics(
        family, (x, y), epsilon=1e9, covariate_anchors=3, reproducible_noise=True, random_seed=2, **settings
    )
    kwargs = {"draws": 300, "tune": 300, "chains": 2, "random_seed": 3, "progressbar": False}
    with pm.Model():
        rel.likelihood("y", beta=pm.Normal("beta", 0, 3, shape=3))
        aware = rel.sample(**kwargs)
    with pm.Model(), warnings.catch_warnings():
        # NUTS's first step-size trials on the raw count model reach exp(xᵀβ) overflow (rejected as divergent)
        warnings.filterwarnings("ignore", message="overflow encountered", category=RuntimeWarning)
        beta = pm.Normal("beta", 0, 3, shape=3)
        raw_likelihood(pm.math.exp(pm.math.dot(x, beta)))
        raw = pm.sample(compute_convergence_checks=False, **kwargs)
    a, r = _flat(aware), _flat(raw)
    mcse = np.hypot(pm.stats.mcse(aware)["beta"].values, pm.stats.mcse(raw)["beta"].values)
    ess = np.minimum(pm.stats.ess(aware)["beta"].values, pm.stats.ess(raw)["beta"].values)
    bias = 3 / math.sqrt(len(y))
    assert np.all(np.abs(a.mean(0) - r.mean(0)) < bias * r.std(0) + 4 * mcse), (a.mean(0), r.mean(0), r.std(0))
    assert np.all(np.abs(a.std(0) / r.std(0) - 1) < bias + 4 / np.sqrt(2 * ess)), (a.std(0), r.std(0), ess)


# -- coverage of known truth ---------------------------------------------------------------------------
def _coverage(repeats, n_rows, epsilon, seed, draws):
    """Over ``repeats`` simulated data sets: whether each coefficient's DP 90 % interval holds the truth."""
    truth = np.array([0.4, 0.3, -0.5])
    covered = []
    for r in range(repeats):
        x, y = _rows(n_rows, beta=truth, seed=seed + r)
        rel = release_statistics("poisson_regression", (x, y), epsilon=epsilon, covariate_anchors=1, **SETTINGS)
        with pm.Model():
            rel.likelihood("y", beta=pm.Normal("beta", 0, 2, shape=3))
            idata = rel.sample(
                draws=draws, tune=draws, chains=2, random_seed=seed + r, progressbar=False, on_poor_mixing="ignore"
            )
        low, high = np.quantile(_flat(idata), [0.05, 0.95], axis=0)
        covered.append((low <= truth) & (truth <= high))
    return np.array(covered)


def test_intervals_cover_the_truth_in_a_tiny_simulation():
    """Two data sets, three coefficients at N = 2,000, ε = 1: under correct 90 % coverage at least 4 of the 6
    intervals hold the truth with probability 0.984 (the slow test below measures the rate)."""
    covered = _coverage(2, 2000, 1.0, 100, 300)
    assert covered.sum() >= 4, covered


@pytest.mark.slow  # 60 releases, each with its own NUTS run (the tiny version above takes ~40 s for 2)
def test_intervals_cover_the_truth_by_simulation():
    """60 data sets × 3 coefficients at N = 2,000, ε = 1: the 90 % intervals cover the truth within 3 binomial
    standard errors of 0.9 (per coefficient the draws are independent across data sets)."""
    covered = _coverage(60, 2000, 1.0, 1000, 500)
    rate = covered.mean()
    assert abs(rate - 0.9) < 3 * math.sqrt(0.09 / covered.size), (rate, covered.mean(0))


# -- the planner's route -------------------------------------------------------------------------------
def _count_model(n=400, seed=11, link=True):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 2))
    y = rng.poisson(np.exp(0.3 + x @ [0.4, -0.3]))
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 1, shape=2)
        eta = alpha + x @ beta
        pm.Poisson("y", mu=pm.math.exp(eta) if link else pt.softplus(eta), observed=y)
    return model


def test_the_planner_recognises_a_poisson_regression_with_log_link_from_the_graph():
    import pymc_dp as pmdp
    from pymc_dp.regression_graph import regression_parts

    model = _count_model()
    parts = regression_parts(model)
    assert parts.family == "poisson_regression" and parts.intercept is not None
    with model:
        the_plan = pmdp.plan(epsilon=1.0, delta=1e-6)
    assert the_plan.released_statistics == "poisson_regression" and the_plan.one_call_route == "release_statistics"
    assert "y_bounds=(0, y_max)" in the_plan.one_call_reason
    assert regression_parts(_count_model(link=False)) is None  # another link: not this family's statistics


@pytest.mark.parametrize(
    ("y_bounds", "message"),
    [
        (None, "`y_bounds` must be given for the released-statistics route \\(poisson_regression\\)"),
        ((1, 10), "`y_bounds` must be \\(0, y_max\\)"),
        ((0, 7.5), "`y_bounds` must be \\(0, y_max\\)"),
    ],
)
def test_the_one_call_route_refuses_bad_count_bounds_before_anything_is_charged(y_bounds, message):
    import pymc_dp as pmdp

    budget = PrivacyBudget(2.0, 1e-6, n_rows=400)
    with _count_model(), pytest.raises(ValueError, match=message):
        pmdp.sample(epsilon=1.0, delta=1e-6, x_bounds=(-1, 1), y_bounds=y_bounds, budget=budget, progressbar=False)
    assert budget.spent().epsilon == 0.0


@pytest.mark.slow  # about a minute: one release and NUTS compiled from scratch
def test_one_call_sample_takes_the_release_route_for_a_poisson_regression():
    import pymc_dp as pmdp

    budget = PrivacyBudget(2.0, 1e-6, n_rows=3000)
    with _count_model(n=3000):
        idata = pmdp.sample(
            epsilon=1.0,
            delta=1e-6,
            x_bounds=(-1, 1),
            y_bounds=(0, 10),
            budget=budget,
            draws=300,
            tune=300,
            chains=2,
            progressbar=False,
            random_seed=1,
        )
    assert "release_statistics" in idata.posterior.attrs["dp_route"]
    assert idata.posterior.attrs["dp_epsilon"] == pytest.approx(1.0) and budget.spent().epsilon == pytest.approx(1.0)
    assert set(idata.posterior.data_vars) == {"alpha", "beta"}


# -- negative-binomial regression (public dispersion α) ------------------------------------------------
NB_SETTINGS = {**SETTINGS, "alpha": 2.0}


def _nb_rows(n, beta=(0.4, 0.3, -0.5), alpha=2.0, seed=0):
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n), rng.uniform(-1.0, 2.0, n), rng.uniform(-0.5, 0.5, n)])
    mu = np.exp(x @ np.asarray(beta))
    return x, rng.negative_binomial(alpha, alpha / (alpha + mu))  # mean μ, variance μ + μ²/α


@pytest.mark.parametrize("y_max", [1, 4, 15])
@pytest.mark.parametrize("alpha", [0.5, 3.0])
def test_clamped_nb_mean_and_hessian_weight_match_direct_sums(y_max, alpha):
    k = np.arange(3000)
    for mu in (1e-6, 0.4, 3.0, 12.0, 60.0):
        pmf = stats.nbinom.pmf(k, alpha, alpha / (alpha + mu))
        mean = np.sum(np.minimum(k, y_max) * pmf)
        cov = np.sum(np.minimum(k, y_max) * k * pmf) - mu * mean  # Cov(min(Y, M), Y)
        assert clamped_nb_mean(np.array([mu]), alpha, y_max)[0] == pytest.approx(mean, rel=1e-9, abs=1e-12)
        weight = clamped_nb_hessian_weight(np.array([mu]), alpha, y_max)[0]
        assert weight == pytest.approx(alpha / (alpha + mu) * cov, rel=1e-7, abs=1e-12)
        assert 0.0 <= weight <= mu
        # h is μ·dm/dμ (the Jacobian weight of the score's mean): a central difference
        step = 1e-5 * mu
        slope = clamped_nb_mean(np.array([mu + step]), alpha, y_max) - clamped_nb_mean(
            np.array([mu - step]), alpha, y_max
        )
        assert mu * slope[0] / (2 * step) == pytest.approx(weight, rel=1e-4, abs=1e-9)
    # without clipping the score's slope is μ (the NB2 Fisher information's weight is then w·μ)
    assert clamped_nb_hessian_weight(np.array([2.0]), alpha, 400)[0] == pytest.approx(2.0, rel=1e-9)


def test_nb_score_anchor_rows_stay_in_their_intervals_in_the_worst_case():
    """Row by row: every admissible row (the corners of the box, y ∈ {0, …, y_max}, and simulated rows), at public
    anchors from tame to extreme, has its statistic inside the intervals the sensitivity is computed from; the
    weights are inside them before the cap (the cap only guards rounding)."""
    x, y = _nb_rows(400, seed=2)
    rng = np.random.default_rng(3)
    anchors = [(0.0, 0.0, 0.0), (0.4, 0.3, -0.5), (3.0, 1.0, 2.0), (-5.0, -2.0, 0.0), (8.0, 3.0, -4.0)]
    for alpha in (0.3, 2.0, 50.0):
        for anchor in anchors + [tuple(rng.normal(0, 2, 3)) for _ in range(4)]:
            family = NegativeBinomialScoreAnchor(3, BOUNDS, 7, alpha, anchor)
            lo, hi = family.intervals()
            corners = _corner_rows(family, range(8))
            for rows in (family.check_data((x, y)), corners):
                statistics = family.row_statistics(rows)
                assert np.all(statistics >= lo - 1e-9) and np.all(statistics <= hi + 1e-9)
                mu = np.exp(rows[:, :-1] @ np.asarray(anchor))
                w = alpha / (alpha + mu)
                raw = w * (rows[:, -1] - clamped_nb_mean(mu, alpha, 7))
                low, high = -min(alpha, mu.max(), 7.0), 7.0
                assert np.all(raw >= low - 1e-12) and np.all(raw <= high + 1e-12)
                assert np.all(w * clamped_nb_hessian_weight(mu, alpha, 7) <= family.weight_bound + 1e-12)
            assert family.l1_sensitivity() == pytest.approx(np.sum(hi - lo))


def test_nb_release_is_priced_before_any_row_is_read_and_records_epsilon(monkeypatch):
    x, y = _nb_rows(300, seed=4)
    budget = PrivacyBudget(1.5, 1e-6, n_rows=300)
    seen = []
    original = PrivateSufficientStatistics.discrete_laplace_noisy

    def watched(self, *args, **kwargs):
        seen.append((self.family.name, budget.spent().epsilon))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PrivateSufficientStatistics, "discrete_laplace_noisy", watched)
    rel = release_statistics(
        "negative_binomial_regression", (x, y), epsilon=1.0, covariate_anchors=2, budget=budget, **NB_SETTINGS
    )
    names = ["negative_binomial_regression", *["negative_binomial_score_anchor"] * 2]
    assert [name for name, _ in seen] == names and all(spent == pytest.approx(1.0) for _, spent in seen)
    record = rel.accountant_record()
    assert record["epsilon"] == pytest.approx(1.0) and record["family"]["alpha"] == 2.0
    assert len(record["covariate_anchors"]) == 2 and len(record["events"]) == 3
    # the anchors take 80 % of ε (the main release only places the first one), 3/4 of it the last
    np.testing.assert_allclose([e.epsilon for e in rel.events], [0.2, 0.2, 0.6], rtol=1e-9)


@pytest.mark.parametrize(
    ("family", "changes", "error", "message"),
    [
        ("poisson_regression", {"y_max": 0}, ValueError, "`y_max`"),
        ("poisson_regression", {"y_max": 2.5}, TypeError, "`y_max` must be a positive integer"),
        ("poisson_regression", {"y_max": True}, TypeError, "`y_max` must be a positive integer"),
        ("poisson_regression", {"y_max": None}, TypeError, "`y_max` must be a positive integer"),
        ("poisson_regression", {"x_bounds": ([0.0, 1.0, 0.0], [1.0, 0.0, 1.0])}, ValueError, "lower ≤ upper"),
        ("poisson_regression", {"x_bounds": None}, ValueError, "`x_bounds` must be given"),
        ("poisson_regression", {"approximation_interval": (2.0, -2.0)}, ValueError, "must have low < high"),
        ("poisson_regression", {"approximation_interval": (0.0, math.inf)}, ValueError, "must be a finite"),
        ("poisson_regression", {"covariate_anchors": 0}, ValueError, "at least 1 for poisson_regression"),
        ("poisson_regression", {"mechanism": "gaussian"}, ValueError, "`delta` must be given"),
        ("negative_binomial_regression", {"alpha": None}, TypeError, "`alpha` must be a positive number"),
        ("negative_binomial_regression", {"alpha": True}, TypeError, "`alpha` must be a positive number"),
        ("negative_binomial_regression", {"alpha": 0.0}, ValueError, "`alpha` must be a positive number"),
        ("negative_binomial_regression", {"alpha": math.nan}, ValueError, "`alpha` must be a finite"),
        ("negative_binomial_regression", {"y_max": 0}, ValueError, "`y_max`"),
        ("negative_binomial_regression", {"covariate_anchors": 0}, ValueError, "at least 1 for negative_binomial"),
        ("negative_binomial_regression", {"mechanism": "gaussian"}, ValueError, "`delta` must be given"),
    ],
)
def test_bad_settings_are_refused_naming_the_parameter_before_anything_is_charged(family, changes, error, message):
    x, y = _rows(50, seed=5)
    budget = PrivacyBudget(5.0, 1e-6, n_rows=50)
    base = NB_SETTINGS if family == "negative_binomial_regression" else SETTINGS
    settings = {**base, "covariate_anchors": 1, **changes}
    with pytest.raises(error, match=message):
        release_statistics(family, (x, y), epsilon=1.0, budget=budget, **settings)
    assert budget.spent().epsilon == 0.0 and budget.events == ()


def test_nb_likelihood_needs_an_anchor_a_vector_beta_and_noise_awareness():
    x, y = _nb_rows(200, seed=6)
    rel = release_statistics("negative_binomial_regression", (x, y), epsilon=1.0, covariate_anchors=1, **NB_SETTINGS)
    unanchored = ReleasedStatistics(
        rel.family,
        rel.statistics,
        rel.n_rows,
        rel.epsilon,
        rel.scale,
        rel.l1_sensitivity,
        noisy_statistics=rel.noisy_statistics,
    )
    with pm.Model(), pytest.raises(ValueError, match="`covariate_anchors` must be at least 1"):
        unanchored.likelihood("y", beta=pm.Normal("beta", shape=3))
    with pm.Model(), pytest.raises(ValueError, match="`beta` must be a vector of 3 coefficients"):
        rel.likelihood("y", beta=pm.Normal("beta"))
    with pm.Model(), pytest.raises(ValueError, match="`noise_aware` must be True for negative_binomial"):
        rel.likelihood("y", noise_aware=False, beta=pm.Normal("beta", shape=3))


def test_nb_anchors_reach_the_mle_when_the_noise_vanishes():
    """ε = 1e9, no count clipped: the first anchor is the quasi-Poisson estimate, each later one a Newton step on
    the released NB score, so the last lies within 0.01 of the negative-binomial MLE."""
    x, y = _nb_rows(3000, seed=8)
    settings = {**NB_SETTINGS, "y_max": 400}
    assert y.max() < 400
    rel = release_statistics(
        "negative_binomial_regression",
        (x, y),
        epsilon=1e9,
        covariate_anchors=3,
        reproducible_noise=True,
        random_seed=1,
        **settings,
    )

    def negative_loglik(beta):
        mu = np.exp(x @ beta)
        return -np.sum(stats.nbinom.logpmf(y, 2.0, 2.0 / (2.0 + mu)))

    mle = optimize.minimize(negative_loglik, np.zeros(3), method="BFGS", options={"gtol": 1e-10}).x
    errors = [np.max(np.abs(a.anchor - mle)) for a in rel.covariate_anchors]
    assert errors[2] < 0.01 and errors[2] <= errors[0], errors


def test_nb_large_epsilon_posterior_matches_nuts_on_the_raw_rows_within_the_laplace_approximation():
    """ε = 1e9, no count clipped, α known: the noise-aware posterior approaches NUTS with pm.NegativeBinomial on the
    raw rows. Known bias: the likelihood is the Laplace (Bernstein–von Mises) form around the last anchor, so means
    are off by O(1/√N) posterior sds and sds by O(1/√N) relatively. Tolerance as for Poisson: 3/√N sd plus 4
    combined MCSE for the means, 3/√N plus 4 standard errors of an sd estimate (1/√(2·ESS)) for the sds."""
    n = 1500
    x, y = _nb_rows(n, seed=9)
    settings = {**NB_SETTINGS, "y_max": 400}
    assert y.max() < 400
    _assert_matches_raw_nuts(
        "negative_binomial_regression",
        x,
        y,
        settings,
        lambda mu: pm.NegativeBinomial("obs", mu=mu, alpha=2.0, observed=y),
    )
