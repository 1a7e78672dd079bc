"""Laplace sufficient-statistics release, pure-ε accounting and one posterior sample."""

import json
import math

import numpy as np
import pymc as pm
import pytest
from scipy import stats

import pymc_dp as pmdp
from pymc_dp.accounting import GaussianReleases, PrivacyBudget, PureDPReleases, compose_epsilon, event_from_dict
from pymc_dp.accounting.budget import PrivacyBudgetExceededError
from pymc_dp.exponential_family import (
    Categorical,
    LinearRegression,
    Normal,
    get_family,
    ops_temperature,
    release_statistics,
    tempered_model,
)
from pymc_dp.mechanisms import PrivateSufficientStatistics, laplace_sufficient_statistics

Z_CRIT = stats.norm.isf(0.5e-4)  # two-sided 1e-4


# -- pure-ε accounting -----------------------------------------------------------------------
def test_pure_releases_add_and_hold_at_delta_zero():
    events = [PureDPReleases(0.3, 2), PureDPReleases(0.5)]
    eps, method, mu = compose_epsilon(events, 0.0)
    assert eps == pytest.approx(1.1) and method == "pure_sum" and mu is None
    assert compose_epsilon(events, 1e-6)[0] == pytest.approx(1.1)
    assert event_from_dict(events[0].to_dict()) == events[0]


def test_pure_with_gaussian_is_at_most_the_basic_sum_and_above_either_part():
    gauss = GaussianReleases(30.0, 1000)
    alone = compose_epsilon([gauss], 1e-5)[0]
    mixed, method, _ = compose_epsilon([gauss, PureDPReleases(0.2)], 1e-5)
    assert alone < mixed <= alone + 0.2 + 1e-12
    assert method in ("rdp", "pure_sum+gaussian_closed_form")
    # RDP of ε-DP: min(ε, αε²/2) (Bun and Steinke 2016, Prop. 1.4).
    assert PureDPReleases(0.2).rdp(np.array([2.0, 100.0])) == pytest.approx([0.04, 0.2])


def test_pure_event_rejects_bad_values_and_delta_outside_unit_interval():
    with pytest.raises(ValueError, match="`epsilon` must be"):
        PureDPReleases(-1.0)
    with pytest.raises(ValueError, match="`delta` must be"):
        compose_epsilon([PureDPReleases(0.1), GaussianReleases(10.0, 5)], 0.0)


def test_budget_refuses_a_release_over_budget_and_charges_nothing():
    y = np.zeros(50)
    budget = PrivacyBudget(1.0, 1e-6, n_rows=50)
    release_statistics("bernoulli", y, epsilon=0.6, budget=budget, random_seed=0)
    assert budget.spent().epsilon == pytest.approx(0.6)
    with pytest.raises(PrivacyBudgetExceededError):
        release_statistics("bernoulli", y, epsilon=0.6, budget=budget, random_seed=0)
    assert budget.spent().epsilon == pytest.approx(0.6)


# -- families, sensitivity, projection ----------------------------------------------------------
def test_sensitivities_from_public_settings():
    assert get_family("bernoulli").l1_sensitivity() == 1.0
    assert get_family("binomial", n_trials=7).l1_sensitivity() == 7.0
    assert get_family("poisson", upper=12).l1_sensitivity() == 12.0
    assert Categorical(5).l1_sensitivity() == 2.0 and Categorical(5).l2_sensitivity() == pytest.approx(math.sqrt(2))
    assert Normal(1.0, (-2.0, 3.0)).l1_sensitivity() == 5.0
    # z = (x1, x2, y), x ∈ [-1, 1], y ∈ [-4, 4]: widths x1² 1, x1x2 2, x1y 8, x2² 1, x2y 8, y² 16.
    reg = LinearRegression(2, (-1.0, 1.0), (-4.0, 4.0))
    assert reg.l1_sensitivity() == 36.0
    assert reg.l2_sensitivity() == pytest.approx(math.sqrt(1 + 4 + 64 + 1 + 64 + 256))


def test_laplace_scale_is_sensitivity_over_epsilon_and_noise_has_that_scale():
    """E|L| = b and Var|L| = b² for L ~ Laplace(0, b): z-test on 4000 releases."""
    family = Normal(1.0, (-10.0, 10.0))
    y = np.random.default_rng(0).uniform(-1, 1, size=1000)  # sum far inside [−10⁴, 10⁴]: no projection
    rng = np.random.default_rng(1)
    epsilon = 0.5
    draws = np.array([laplace_sufficient_statistics(family, y, epsilon, rng)[0][0] for _ in range(4000)])
    scale = laplace_sufficient_statistics(family, y, epsilon, rng)[1]
    assert scale == 20.0 / 0.5
    deviation = np.abs(draws - y.sum())
    z = (deviation.mean() - scale) / (scale / math.sqrt(draws.size))
    assert abs(z) < Z_CRIT


def test_projection_keeps_released_statistics_feasible():
    labels = np.random.default_rng(2).integers(0, 4, size=30)
    for seed in range(20):
        counts = release_statistics("categorical", labels, epsilon=0.05, n_categories=4, random_seed=seed).statistics
        assert np.all(counts >= 0) and counts.sum() == pytest.approx(30)
        s = release_statistics("bernoulli", labels % 2, epsilon=0.05, random_seed=seed).statistics
        assert 0 <= s[0] <= 30
    x = np.random.default_rng(3).uniform(-1, 1, size=(40, 2))
    y = np.clip(x @ [1.0, -1.0], -3, 3)
    reg = release_statistics(
        "linear_regression", (x, y), epsilon=0.1, n_features=2, x_bounds=(-1, 1), y_bounds=(-3, 3), random_seed=4
    )
    assert np.linalg.eigvalsh(reg.family.matrix(reg.statistics)).min() >= -1e-9


def test_clear_errors_name_the_families_and_bounds():
    with pytest.raises(ValueError, match=r"supported conjugate exponential families \['bernoulli'"):
        get_family("gamma")
    with pytest.raises(ValueError, match="`bounds` must be given"):
        Normal(1.0, None)
    with pytest.raises(ValueError, match="`bounds` must be finite"):
        Normal(1.0, (-np.inf, 1.0))
    with pytest.raises(ValueError, match="`x_bounds` must be finite"):
        LinearRegression(1, (0.0, np.nan), (0.0, 1.0))
    budget = PrivacyBudget(1.0, 1e-6, n_rows=4)
    with pytest.raises(ValueError, match=r"`out_of_bounds` must be one of \['clamp', 'raise'\]. Found 'clip'"):
        release_statistics(
            "normal", np.zeros(4), epsilon=0.5, sigma=1.0, bounds=(-1, 1), budget=budget, out_of_bounds="clip"
        )
    assert budget.spent().epsilon == 0.0
    with pytest.raises(ValueError, match="`neighbouring` must be 'substitute'"):
        release_statistics("bernoulli", np.zeros(3), epsilon=1.0, neighbouring="add_remove")


# -- rows outside the public bounds (issue 12, class 4) ----------------------------------------------
# A refusal that counted the rows outside was a free, repeatable, exact answer about the data:
# bisecting on `bounds` recovered a column's maximum with nothing charged.


def test_rows_outside_the_bounds_are_clamped_by_default_and_nothing_is_reported():
    secret = np.array([0.5, 123.456, -0.5, -77.7])
    release = release_statistics(
        "normal", secret, epsilon=1e9, sigma=1.0, bounds=(-1, 1), reproducible_noise=True, random_seed=1
    )
    assert release.statistics[0] == pytest.approx(0.5 + 1.0 - 0.5 - 1.0, abs=1e-6)
    assert release.out_of_bounds == "clamp" and release.accountant_record()["out_of_bounds"] == "clamp"
    budget = PrivacyBudget(1.0, 1e-6, n_rows=4)
    release_statistics("normal", secret, epsilon=0.5, sigma=1.0, bounds=(-1, 1), budget=budget)
    assert budget.spent().epsilon == pytest.approx(0.5)  # a clamped release is charged like any other
    # Clamped raw data release exactly what the user's own pre-clipped data release (same noise).
    kwargs = dict(epsilon=0.5, sigma=1.0, bounds=(-1, 1), reproducible_noise=True, random_seed=3)
    raw = release_statistics("normal", secret, **kwargs)
    clipped = release_statistics("normal", np.clip(secret, -1, 1), **kwargs)
    np.testing.assert_array_equal(raw.statistics, clipped.statistics)


def test_bisection_on_the_bounds_learns_nothing_for_free():
    # The attack: shrink `bounds` until the call changes behaviour. With clamping every call
    # succeeds (and is charged); in strict mode the refusal carries neither a count nor a value.
    secret = np.array([0.1, 0.2, 0.93, 0.4])
    for upper in (2.0, 1.0, 0.95, 0.94, 0.5):
        release_statistics("normal", secret, epsilon=1.0, sigma=1.0, bounds=(0.0, upper))
    messages = set()
    for data in (np.array([0.1, 2.0, 0.3, 0.4]), np.array([5.0, 2.0, 3.0, 0.4]), np.array([np.nan, 0.2, 0.3, 0.4])):
        with pytest.raises(ValueError, match="out_of_bounds='raise'") as info:
            release_statistics("normal", data, epsilon=1.0, sigma=1.0, bounds=(0, 1), out_of_bounds="raise")
        messages.add(str(info.value))
    assert len(messages) == 1  # one row outside, three, or NaN: the same text
    (message,) = messages
    assert not any(ch.isdigit() for ch in message.replace("(0.0, 1.0)", "").replace("0..", ""))


@pytest.mark.parametrize(
    ("family", "settings", "raw", "clamped"),
    [
        ("bernoulli", {}, [0, 1, 2, -1, 0.4, np.nan, np.inf], [0, 1, 1, 0, 0, 0, 1]),
        ("binomial", {"n_trials": 3}, [0, 3, 7, -2, 1.6, np.nan], [0, 3, 3, 0, 2, 0]),
        ("poisson", {"upper": 5}, [0, 5, 9, -1, 2.4, np.nan], [0, 5, 5, 0, 2, 0]),
        ("categorical", {"n_categories": 3}, [0, 2, 5, -1, 0.6, np.nan], [0, 2, 2, 0, 1, 0]),
        ("normal", {"sigma": 1.0, "bounds": (-1, 2)}, [0.5, 9.0, -3.0, np.nan, -np.inf], [0.5, 2.0, -1.0, -1.0, -1.0]),
    ],
)
def test_every_family_clamps_each_row_into_its_public_bounds(family, settings, raw, clamped):
    fam = get_family(family, **settings)
    np.testing.assert_array_equal(fam.check_data(np.array(raw, dtype=float)), np.array(clamped))
    with pytest.raises(ValueError, match="Some rows lie outside; which and how many are not shown"):
        fam.check_data(np.array(raw, dtype=float), "raise")
    inside = np.array(clamped, dtype=float)
    np.testing.assert_array_equal(fam.check_data(inside, "raise"), fam.check_data(inside))


def test_linear_regression_clamps_features_and_target_per_column():
    fam = LinearRegression(2, ((-1.0, 0.0), (1.0, 2.0)), (-3.0, 3.0))
    x = np.array([[0.5, 1.0], [-4.0, 9.0], [np.nan, -1.0]])
    y = np.array([0.0, 10.0, np.nan])
    rows = fam.check_data((x, y))
    np.testing.assert_array_equal(rows, [[0.5, 1.0, 0.0], [-1.0, 2.0, 3.0], [-1.0, 0.0, -3.0]])
    with pytest.raises(ValueError, match="`x_bounds`"):
        fam.check_data((x, y), "raise")
    with pytest.raises(ValueError, match="`data` must be X of shape"):  # shapes are checked in both modes
        fam.check_data((x, y[:2]))


def test_the_statistics_mechanism_keeps_the_sum_not_the_rows_and_exposes_only_public_values():
    fam = LinearRegression(2, ((-1.0, 0.0), (1.0, 2.0)), (-3.0, 3.0))
    x = np.array([[0.5, 1.0], [-4.0, 9.0], [np.nan, -1.0]])
    y = np.array([0.0, 10.0, np.nan])
    private = PrivateSufficientStatistics(fam, (x, y))
    assert private.n_rows == 3 and private.out_of_bounds == "clamp"
    assert (private.l1_sensitivity, private.l2_sensitivity) == (fam.l1_sensitivity(), fam.l2_sensitivity())
    assert "statistics=" not in repr(private) and "10" not in repr(private)
    held = [v for v in vars(private).values() if isinstance(v, np.ndarray)]
    assert [v.shape for v in held] == [(fam.dim,)]  # Σ S(x) only: no per-row array
    # Same noise, same release as the one-call function.
    a = private.laplace_release(1.0, np.random.default_rng(4))
    b = laplace_sufficient_statistics(fam, (x, y), 1.0, np.random.default_rng(4))
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1] == b[1] and b[2] == 3
    with pytest.raises(ValueError, match="`x_bounds`"):
        PrivateSufficientStatistics(fam, (x, y), "raise")
    with pytest.raises(ValueError, match="`noise_multiplier`"):
        private.gaussian_releases(0.0)
    assert not hasattr(fam, "aggregate")  # families hold formulas; only the mechanism applies them to data


# -- ε → ∞: the model on released statistics is the exact conjugate posterior ---------------------
def _logp_differences(model, points, reference):
    logp = model.compile_logp()
    return [logp(pt) - reference(pt) for pt in points]


def test_large_epsilon_gives_the_exact_conjugate_log_posterior():
    rng = np.random.default_rng(5)
    y = rng.binomial(1, 0.3, 400)
    rel = release_statistics("bernoulli", y, epsilon=1e12, random_seed=6)
    assert rel.statistics[0] == pytest.approx(y.sum(), abs=1e-8)
    with pm.Model() as model:
        p = pm.Beta("p", 2.0, 3.0)
        rel.likelihood("y", p=p)
    a, b = 2 + y.sum(), 3 + y.size - y.sum()
    points = [{"p_logodds__": v} for v in (-2.0, -0.8, 0.3)]

    def exact(point):  # Beta(a, b) posterior on the log-odds scale (Jacobian p(1 − p))
        q = 1 / (1 + math.exp(-point["p_logodds__"]))
        return stats.beta.logpdf(q, a, b) + math.log(q * (1 - q))

    diffs = _logp_differences(model, points, exact)
    assert np.ptp(diffs) < 1e-6

    x = rng.uniform(-1, 1, size=(300, 2))
    t = np.clip(x @ [0.5, -1.0] + rng.normal(0, 0.3, 300), -3, 3)
    reg = release_statistics(
        "linear_regression", (x, t), epsilon=1e12, n_features=2, x_bounds=(-1, 1), y_bounds=(-3, 3), random_seed=7
    )
    with pm.Model() as regression:
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        reg.likelihood("y", beta=beta, sigma=sigma, noise_aware=False)  # the naive model is exact at ε → ∞
    points = [{"beta": np.array(v), "sigma_log__": s} for v, s in (([0.1, 0.2], -1.0), ([0.5, -1.0], -1.2))]

    def exact_reg(point):
        bval, sval = point["beta"], math.exp(point["sigma_log__"])
        return (
            stats.norm.logpdf(bval).sum()
            + stats.halfnorm.logpdf(sval)
            + point["sigma_log__"]
            + stats.norm.logpdf(t, x @ bval, sval).sum()
        )

    assert np.ptp(_logp_differences(regression, points, exact_reg)) < 1e-6


def test_nuts_on_released_statistics_matches_the_conjugate_posterior_and_carries_epsilon():
    y = np.random.default_rng(8).binomial(1, 0.3, 300)
    rel = release_statistics("bernoulli", y, epsilon=1e12, random_seed=9)
    with pm.Model():
        p = pm.Beta("p", 1.0, 1.0)
        rel.likelihood("y", p=p)
        idata = rel.sample(draws=1000, tune=500, chains=2, random_seed=10, progressbar=False)
    draws = idata["posterior"]["p"].values.ravel()
    a, b = 1 + y.sum(), 1 + y.size - y.sum()
    ess = float(np.asarray(pm.stats.ess(idata, var_names=["p"])["p"]))
    z = (draws.mean() - a / (a + b)) / (stats.beta.std(a, b) / math.sqrt(ess))
    assert abs(z) < Z_CRIT
    attrs = idata["posterior"].attrs
    assert attrs["dp_epsilon"] == 1e12 and attrs["dp_delta"] == 0.0
    assert json.loads(attrs["dp_released_statistics"]) == pytest.approx(list(rel.statistics))
    spent = pmdp.privacy_spent(idata)
    assert spent.epsilon == 1e12 and spent.delta == 0.0 and spent.method == "pure_sum"


def test_sampling_refuses_a_model_that_still_reads_raw_data():
    y = np.zeros(10)
    rel = release_statistics("bernoulli", y, epsilon=1.0, random_seed=0)
    with pm.Model():
        p = pm.Beta("p", 1.0, 1.0)
        pm.Bernoulli("y", p, observed=y)
        with pytest.raises(ValueError, match="only through the released statistics"):
            rel.sample(draws=10, tune=10, chains=1)


# -- one posterior sample ------------------------------------------------------------------------
def test_ops_temperature_follows_the_exponential_mechanism():
    # Thm 2.3: |ℓ| ≤ B, Δu = 2B, T = ε/(4B); ℓ ∈ [−B, 0]: Δu = B, T = ε/(2B); T ≤ 1 (Thm 2.2).
    assert ops_temperature(0.1, (-3.0, 3.0)) == pytest.approx(0.1 / 12)
    assert ops_temperature(0.1, (-3.0, 0.0)) == pytest.approx(0.1 / 6)
    assert ops_temperature(100.0, (-3.0, 0.0)) == 1.0
    assert ops_temperature(0.1, (-3.0, 1.0), "add_remove") == pytest.approx(0.1 / 6)
    with pytest.raises(ValueError, match="`loglik_bounds` must be finite"):
        ops_temperature(0.1, (0.0, np.inf))


def test_ops_tempered_model_is_prior_times_tempered_clipped_likelihood():
    y = np.array([1, 0, 0, 1, 1, 1, 0, 1])
    with pm.Model() as model:
        p = pm.Uniform("p", 0.0, 1.0)
        pm.Bernoulli("y", p, observed=y)
    low, high, temperature = -1.5, 0.0, 0.3
    logp = tempered_model(model, temperature, (low, high)).compile_logp()
    for z in (-3.0, -0.5, 0.4, 2.5):
        q = 1 / (1 + math.exp(-z))
        rows = np.where(y == 1, math.log(q), math.log(1 - q))
        expected = temperature * np.clip(rows, low, high).sum() + math.log(q * (1 - q))
        assert logp({"p_interval__": z}) == pytest.approx(expected, rel=1e-10)


def test_one_posterior_sample_returns_one_draw_with_its_guarantee():
    y = np.random.default_rng(11).binomial(1, 0.3, 200)
    with pm.Model() as model:
        p = pm.Uniform("p", 0.05, 0.95)
        pm.Bernoulli("y", p, observed=y)
        pm.Deterministic("reads_data", pm.math.sum(model["y"]) * p)
    bound = -math.log(0.05)
    budget = PrivacyBudget(1.0, 1e-6, n_rows=200)
    out = pmdp.one_posterior_sample(
        model, epsilon=0.1, loglik_bounds=(-bound, 0.0), tune=200, budget=budget, random_seed=12, progressbar=False
    )
    post = out["posterior"]
    assert post["p"].shape == (1, 1) and "reads_data" not in post
    attrs = post.attrs
    assert attrs["dp_epsilon"] == pytest.approx(0.1) and attrs["dp_delta"] == 0.0
    assert attrs["dp_temperature"] == pytest.approx(0.1 / (2 * bound))
    assert "conditional on exact sampling" in attrs["dp_notes"]
    assert pmdp.privacy_spent(out).epsilon == pytest.approx(0.1)
    assert budget.spent().epsilon == pytest.approx(0.1)


def test_ops_tempered_model_clips_rows_outside_a_data_dependent_support():
    """A row with log p = −∞ at θ counts as the lower bound, so the utility stays bounded.

    Uniform(0, θ) rows: θ below max(y) is impossible under the data; keeping −∞ there would
    make the support of the draw depend on one row (no ε bounds that).
    """
    y = np.array([0.5, 1.5, 2.0])
    with pm.Model() as model:
        pm.Uniform("theta", 0.1, 5.0)
        pm.Uniform("y", 0.0, model["theta"], observed=y)
    low, temperature = -3.0, 0.5
    copy = tempered_model(model, temperature, (low, 0.0))
    assert copy.observed_RVs == []
    logp = copy.compile_logp()
    for z in (-2.0, 0.0, 2.0):
        theta = 0.1 + 4.9 / (1 + math.exp(-z))
        rows = np.where(y <= theta, -math.log(theta), -np.inf)
        log_jacobian = math.log(4.9) - z - 2 * math.log1p(math.exp(-z))
        expected = temperature * np.clip(rows, low, 0.0).sum() - math.log(4.9) + log_jacobian
        assert np.isfinite(logp({"theta_interval__": z}))
        assert logp({"theta_interval__": z}) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"callback": print},
        {"discard_tuned_samples": False},
        {"return_inferencedata": False},
        {"drawz": 3},
        {"var_names": ["p"]},  # would collide with pm.sample's own keyword after the budget was charged
        {"compute_convergence_checks": True},
        {"progressbar": True},  # NUTS's bar shows data-dependent step sizes and divergences
    ],
)
def test_one_posterior_sample_refuses_keywords_that_leak_more_than_one_draw(kwargs):
    y = np.zeros(10)
    with pm.Model() as model:
        p = pm.Uniform("p", 0.05, 0.95)
        pm.Bernoulli("y", p, observed=y)
    budget = PrivacyBudget(1.0, 1e-6, n_rows=10)
    key = next(iter(kwargs))
    pattern = f"`{key}` (is not accepted|must be False)|unknown: \\['{key}'\\]"
    with pytest.raises((ValueError, TypeError), match=pattern):
        pmdp.one_posterior_sample(model, epsilon=0.1, loglik_bounds=(-3.0, 0.0), budget=budget, **kwargs)
    assert budget.spent().epsilon == 0.0


def test_several_releases_of_the_same_rows_compose_their_epsilons():
    from pymc_dp.exponential_family import sample_releases

    y = np.random.default_rng(13).integers(0, 3, size=120)
    counts = release_statistics("categorical", y, epsilon=0.4, n_categories=3, random_seed=14)
    ones = release_statistics("bernoulli", (y == 1).astype(float), epsilon=0.25, random_seed=15)
    with pm.Model() as model:
        p = pm.Dirichlet("p", np.ones(3))
        counts.likelihood("counts", p=p, noise_aware=False)
        ones.likelihood("ones", p=p[1], noise_aware=False)
        idata = sample_releases([counts, ones], draws=50, tune=50, chains=1, random_seed=16, progressbar=False)
    attrs = idata["posterior"].attrs
    assert attrs["dp_epsilon"] == pytest.approx(0.65) and attrs["dp_delta"] == 0.0
    assert pmdp.privacy_spent(idata).epsilon == pytest.approx(0.65)
    assert json.loads(attrs["dp_released_statistics"]) == [list(counts.statistics), list(ones.statistics)]
    other = release_statistics("bernoulli", np.zeros(7), epsilon=1.0, random_seed=0)
    with model, pytest.raises(ValueError, match=r"`releases` must all come from one data set"):
        sample_releases([counts, other], draws=10, tune=10, chains=1)
