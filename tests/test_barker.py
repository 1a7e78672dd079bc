"""DPBarkerMH: the correction distribution, the accountant, the step's contract and its invariance."""

import json
import math

import mpmath as mp
import numpy as np
import pymc as pm
import pytest
from _invariance import Z_CRIT, invariance_z_scores, run_chains_from
from scipy import integrate, special

import pymc_dp as pmdp
from pymc_dp.accounting.barker import (
    barker_subsampled_rdp,
    barker_theorem2_rdp,
    subsampled_barker_epsilon,
    subsampled_barker_max_iterations,
    without_replacement_amplified_rdp,
)
from pymc_dp.mechanisms import SecureNoise, sample_without_replacement
from pymc_dp.step_methods.barker import barker_accepts
from pymc_dp.step_methods.barker_correction import (
    LOGISTIC_VARIANCE,
    LogisticCorrection,
    fit_logistic_correction,
    logistic_correction,
)
from pymc_dp.step_methods.host_releases import HostReleases

# -- the correction distribution -----------------------------------------------------------


def test_shipped_correction_meets_the_error_target_and_has_the_logistic_variance():
    correction = logistic_correction(2.0)
    assert correction.sup_error <= 1e-3  # the paper's construction reaches about 2.4e-3
    assert correction.variance == pytest.approx(LOGISTIC_VARIANCE - 2.0, abs=1e-9)
    assert max(correction.means) < 10 and max(correction.sds) < 1  # no stray wide components


def test_sup_error_by_numerical_convolution():
    """An independent route: integrate V_cor's own CDF against the N(0, C) density by quadrature."""
    correction = logistic_correction(2.0)
    density = lambda y: math.exp(-y * y / 4.0) / math.sqrt(4.0 * math.pi)  # noqa: E731 (N(0, 2))
    grid = np.concatenate([np.linspace(0.0, 12.0, 49), [float(x) for x in np.linspace(0.5, 6.0, 12)]])
    errors = []
    for x in grid:
        breaks = sorted({x - m for m in correction.means} | {x + m for m in correction.means})
        integrand = lambda y, x=x: float(correction.cdf(x - y)) * density(y)  # noqa: E731
        value = sum(
            integrate.quad(integrand, a, b, epsabs=1e-13)[0]
            for a, b in zip([-40.0, *breaks], [*breaks, 40.0], strict=True)
        )
        errors.append(abs(value - special.expit(x)))
        assert value == pytest.approx(float(correction.cdf_with_gaussian(x)), abs=1e-10)
    assert max(errors) <= correction.sup_error + 1e-12


def test_shipped_tables_record_what_they_hold():
    from importlib import resources

    document = json.loads(
        resources.files("pymc_dp.step_methods").joinpath("_tables", "logistic_correction.json").read_text()
    )
    assert document["generated_by"] == "scripts/fit_logistic_correction.py"
    for entry in document["tables"]:
        correction = logistic_correction(entry["correction_variance"])
        assert correction.sup_error == pytest.approx(entry["sup_error"], rel=1e-9)
        assert correction.variance == pytest.approx(LOGISTIC_VARIANCE - entry["correction_variance"], abs=1e-8)


def test_fit_for_an_unshipped_variance():
    fit = fit_logistic_correction(1.25, mean_step=0.1, n_points=801)
    assert fit.variance == pytest.approx(LOGISTIC_VARIANCE - 1.25, abs=1e-8)
    assert fit.sup_error < 1e-3


def test_correction_draws_have_the_fitted_moments():
    correction = logistic_correction(2.0)
    n = 400_000
    draws = correction.sample(np.random.default_rng(3), size=n)
    var = correction.variance
    assert abs(draws.mean()) / math.sqrt(var / n) < Z_CRIT
    fourth = np.sum(np.asarray(correction.weights) * np.asarray(correction.means) ** 4)  # sds are ~0
    z_var = (np.mean(draws**2) - var) / math.sqrt((fourth - var**2 + 1e-12) / n)
    assert abs(z_var) < Z_CRIT
    secure = correction.sample(SecureNoise(), size=1000)
    assert secure.shape == (1000,) and np.all(np.isfinite(secure))


@pytest.mark.parametrize("delta_value", [-3.0, -0.7, 0.0, 0.4, 2.5])
def test_acceptance_probability_is_logistic_within_the_correction_error(delta_value):
    """P(N(Δ, C) + V_cor > 0) = σ(Δ) up to the correction's sup error (Monte Carlo, standard error)."""
    correction = logistic_correction(2.0)
    rng = np.random.default_rng(int(10 * delta_value) + 50)
    n = 200_000
    released = delta_value + rng.normal(0.0, math.sqrt(2.0), size=n)
    accepted = (released + correction.sample(rng, size=n)) > 0
    p = special.expit(delta_value)
    standard_error = math.sqrt(p * (1 - p) / n)
    assert abs(accepted.mean() - p) <= correction.sup_error + Z_CRIT * standard_error
    # The closed form of the same probability (used for the dp_accept statistic) is within the error too.
    assert abs(float(correction.cdf_with_gaussian(delta_value)) - p) <= correction.sup_error + 1e-12
    decision, probability = barker_accepts(delta_value + 0.3, -0.3, correction, rng)
    assert isinstance(decision, bool) and 0.0 <= probability <= 1.0


@pytest.mark.parametrize("bad", [0.0, -1.0, LOGISTIC_VARIANCE, 4.0, float("nan"), True, "2"])
def test_correction_variance_outside_its_range_is_refused(bad):
    with pytest.raises((ValueError, TypeError), match="correction_variance"):
        logistic_correction(bad)


def test_correction_validates_its_table():
    with pytest.raises(ValueError, match="sum to 1"):
        LogisticCorrection(2.0, (0.0, 1.0), (0.0, 0.0), (0.5, 0.6))


# -- the accountant ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("iterations", "expected"),
    [(1_000, 0.148701), (10_000, 0.507785), (20_000, 0.737155), (100_000, 1.768403)],
)
def test_epsilon_matches_the_reference_table(iterations, expected):
    # notes/accounting.md §2(c): N = 1e6, b = 1000, δ = 1e-5, integer orders 2..199, improved conversion;
    # equal there to autodp's Theorem 9 and to dp_accounting's compute_epsilon on the hand curve.
    assert subsampled_barker_epsilon(10**6, 1000, iterations, 1e-5) == pytest.approx(expected, abs=5e-7)


def test_per_order_curves_match_the_reference_table():
    orders = np.array([2, 3, 10, 20, 50, 100, 150, 199], dtype=float)
    theorem2 = [0.358139, 0.185657, 0.064910, 0.067958, 0.145842, 0.409501, 1.209478, 79.6176]
    amplified = [1.722657e-6, 2.585431e-6, 8.651683e-6, 1.739842e-5, 4.419229e-5, 9.058024e-5, 1.388930e-4, 72.678]
    # Equal to the digits the table prints.
    np.testing.assert_allclose(barker_theorem2_rdp(orders, 1000)[:-1], theorem2[:-1], rtol=0, atol=5e-7)
    assert barker_theorem2_rdp(orders, 1000)[-1] == pytest.approx(theorem2[-1], abs=5e-5)
    np.testing.assert_allclose(barker_subsampled_rdp(10**6, 1000, orders)[1][:-1], amplified[:-1], rtol=3e-7)
    assert barker_subsampled_rdp(10**6, 1000, orders)[1][-1] == pytest.approx(amplified[-1], abs=5e-4)
    assert np.isinf(barker_theorem2_rdp(np.array([200.0, 250.0]), 1000)).all()


def _literal_eq22(alpha: int, q: float, b: int) -> float:
    """Heikkilä et al. (2019) eq. (22) with Theorem 2, transcribed literally in 60-digit arithmetic."""
    with mp.workdps(60):
        q, b_ = mp.mpf(q), mp.mpf(b)

        def eps(j):
            j = mp.mpf(j)
            return 5 / (2 * b_) + mp.log(2 * b_ / (b_ - 5 * j)) / (2 * (j - 1)) + 2 * j / (b_ - 5 * j)

        e2 = eps(2)
        total = 1 + q**2 * mp.binomial(alpha, 2) * min(4 * (mp.exp(e2) - 1), 2 * mp.exp(e2))
        total += 2 * mp.fsum(q**j * mp.binomial(alpha, j) * mp.exp((j - 1) * eps(j)) for j in range(3, alpha + 1))
        return float(mp.log(total) / (alpha - 1))


@pytest.mark.parametrize(("n_rows", "batch_size"), [(10**6, 1000), (20_000, 100), (5_000, 500)])
def test_amplified_curve_equals_the_literal_formula(n_rows, batch_size):
    orders = np.array([a for a in (2, 3, 4, 7, 12, 19, 31, 88) if a < batch_size / 5], dtype=float)
    ours = without_replacement_amplified_rdp(orders, batch_size / n_rows, lambda a: barker_theorem2_rdp(a, batch_size))
    literal = [_literal_eq22(int(a), batch_size / n_rows, batch_size) for a in orders]
    np.testing.assert_allclose(ours, literal, rtol=1e-10)


def test_amplification_never_exceeds_the_inner_curve_and_needs_integer_orders():
    inner = lambda a: barker_theorem2_rdp(a, 1000)  # noqa: E731
    orders = np.arange(2.0, 60.0)
    assert np.all(without_replacement_amplified_rdp(orders, 0.01, inner) < inner(orders))
    # For larger q the general bound (factor 2) can exceed the plain curve; the accountant takes the smaller.
    assert np.any(without_replacement_amplified_rdp(orders, 0.3, inner) > inner(orders))
    curve = barker_subsampled_rdp(3000, 1000, orders)[1]
    np.testing.assert_array_equal(
        curve, np.minimum(inner(orders), without_replacement_amplified_rdp(orders, 1 / 3, inner))
    )
    with pytest.raises(ValueError, match="integers"):
        without_replacement_amplified_rdp(np.array([2.5]), 0.1, inner)


def test_max_iterations_matches_the_reference_and_inverts_epsilon():
    # notes/accounting.md §2(c) budget planning: 35 159 iterations for ε = 1 and 125 061 for ε = 2.
    assert subsampled_barker_max_iterations(1.0, 1e-5, 10**6, 1000) == 35_159
    assert subsampled_barker_max_iterations(2.0, 1e-5, 10**6, 1000) == 125_061
    t = subsampled_barker_max_iterations(0.5, 1e-6, 200_000, 400)
    assert (
        subsampled_barker_epsilon(200_000, 400, t, 1e-6) <= 0.5 < subsampled_barker_epsilon(200_000, 400, t + 1, 1e-6)
    )


def test_accountant_refuses_invalid_settings():
    with pytest.raises(ValueError, match="batch_size` must exceed 10"):
        subsampled_barker_epsilon(1000, 10, 5, 1e-5)
    with pytest.raises(ValueError, match="smaller than the number of rows"):
        subsampled_barker_epsilon(1000, 1000, 5, 1e-5)
    with pytest.raises(ValueError, match="iterations"):
        subsampled_barker_epsilon(1000, 100, 0, 1e-5)
    with pytest.raises(ValueError, match=r"orders` must be below b/5 = 20"):
        barker_subsampled_rdp(1000, 100, np.array([2.0, 20.0]))


def test_composition_with_gaussian_events_uses_every_integer_order():
    orders, rdp = barker_subsampled_rdp(10**7, 2000)  # orders up to 399, beyond the default grid
    event = pmdp.accounting.RdpReleases(tuple(orders), tuple(rdp), 1000)
    eps, method, _ = pmdp.accounting.compose_epsilon([event], 1e-5)
    assert method == "rdp"
    assert eps == pytest.approx(subsampled_barker_epsilon(10**7, 2000, 1000, 1e-5), rel=1e-12)
    both, _, _ = pmdp.accounting.compose_epsilon([event, pmdp.accounting.GaussianReleases(30.0, 1000)], 1e-5)
    assert both > max(eps, pmdp.accounting.gaussian_epsilon(1e-5, 1000 / 1800))


# -- sampling without replacement ------------------------------------------------------------


@pytest.mark.parametrize("source", ["numpy", "secure"])
def test_batches_are_distinct_and_uniform(source):
    rng = np.random.default_rng(0) if source == "numpy" else SecureNoise()
    n, b, reps = 50, 10, 4000
    counts = np.zeros(n)
    for _ in range(reps):
        batch = sample_without_replacement(rng, n, b)
        assert batch.size == b and np.unique(batch).size == b and batch.min() >= 0 and batch.max() < n
        counts[batch] += 1
    p = b / n  # each row is in a batch with probability b/N
    z = (counts - reps * p) / math.sqrt(reps * p * (1 - p))
    assert np.max(np.abs(z)) < Z_CRIT + 1.0  # 50 rows: Bonferroni-ish slack


# -- the step ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tempered_normal():
    """y_i ~ N(m, 1) with pm.Data rows (O(b) batches); bounded y so that the clip never binds in the test."""
    y = np.random.default_rng(4).uniform(-0.5, 1.5, size=2000)
    with pm.Model() as model:
        y_data = pm.Data("y", y)
        m = pm.Normal("m", 0, 10)
        pm.Normal("obs", m, 1.0, observed=y_data)
    return model, y


def _tempered_posterior(y: np.ndarray, tempered_size: float) -> tuple[float, float]:
    t = tempered_size / y.size
    precision = 1 / 100 + t * y.size
    return t * y.sum() / precision, 1 / math.sqrt(precision)


def test_subsampled_invariance_on_a_tempered_conjugate_posterior(tempered_normal):
    model, y = tempered_normal
    mean, sd = _tempered_posterior(y, 10.0)
    with model:
        step = pmdp.DPBarkerMH(batch_size=400, tempered_size=10.0, proposal_scale=1.2 * sd, tune=False)
    assert step.llr_clip == pytest.approx(math.sqrt(400) / 10.0)
    # The clip (2.0) binds only for moves beyond 2.0/1.8 ≈ 1.1 = 3.5 sd: the test checks the approximate
    # Barker chain, not the clipping bias.
    starts = np.random.default_rng(1).normal(mean, sd, size=1500)
    ends, acceptance = run_chains_from(step, starts, n_steps=8, seed=2)
    assert 0.15 < acceptance < 0.5
    z_mean, z_var = invariance_z_scores(ends, mean, sd)
    assert abs(z_mean) < Z_CRIT and abs(z_var) < Z_CRIT


def test_invariance_test_catches_a_missing_correction(tempered_normal, monkeypatch):
    """Power check: testing N(Δ, C) > 0 without V_cor accepts with Φ(Δ/√2) ≠ σ(Δ) and must fail."""
    model, y = tempered_normal
    mean, sd = _tempered_posterior(y, 10.0)

    # The kernel accepts iff z + log prior ratio + V_cor > 0: V_cor = 0 tests N(Δ, C) > 0 alone.
    monkeypatch.setattr(HostReleases, "barker_correction", lambda self: 0.0)
    with model:
        step = pmdp.DPBarkerMH(batch_size=400, tempered_size=10.0, proposal_scale=1.2 * sd, tune=False)
    starts = np.random.default_rng(1).normal(mean, sd, size=1500)
    ends, _ = run_chains_from(step, starts, n_steps=8, seed=2)
    z_mean, z_var = invariance_z_scores(ends, mean, sd)
    assert max(abs(z_mean), abs(z_var)) > Z_CRIT


def test_full_data_without_clipping_matches_the_exact_posterior(conjugate_normal):
    """The limit test: no clipping and the full data ⇒ the exact Barker chain; moments within MCSE."""
    import arviz as az

    mean, sd = conjugate_normal.posterior()
    with conjugate_normal.model:
        step = pmdp.DPBarkerMH(full_data=True, llr_clip=1e6, correction_variance=0.5, proposal_scale=1.5 * sd)
        idata = pm.sample(
            draws=4000,
            tune=500,
            chains=2,
            step=step,
            random_seed=3,
            progressbar=False,
            compute_convergence_checks=False,
        )
    draws = idata.posterior["m"]
    mcse = float(az.mcse(draws.to_dataset() if hasattr(draws, "to_dataset") else draws)["m"])
    assert abs(float(draws.mean()) - mean) < Z_CRIT * mcse
    assert float(draws.std()) == pytest.approx(sd, rel=0.15)


def test_statistics_hold_no_exact_likelihood_values(tempered_normal):
    model, _ = tempered_normal
    with model:
        step = pmdp.DPBarkerMH(batch_size=100, tempered_size=20.0)
        idata = pmdp.sample(
            step=step, epsilon=50.0, delta=1e-5, draws=50, tune=50, chains=1, random_seed=1, progressbar=False
        )
    stats = idata.sample_stats
    assert sorted(stats.data_vars) == sorted(
        [
            *["dp_accept", "dp_accepted", "dp_noisy_llr", "dp_proposal_scale", "dp_tuning", "dp_iterations"],
            *["dp_mu_cumulative", "dp_n_rows", "dp_batch_size"],  # so that plain pm.sample results can be priced
        ]
    )
    assert stats["dp_iterations"].values[0, -1] == 100
    assert np.all(stats["dp_n_rows"].values == 2000) and np.all(stats["dp_batch_size"].values == 100)
    assert np.all(np.isnan(stats["dp_mu_cumulative"].values))  # not a Gaussian mechanism: no μ
    attrs = idata.posterior.attrs
    record = json.loads(attrs["dp_accountant"])
    assert record["method"] == "rdp" and record["events"][0]["count"] == 100
    assert attrs["dp_epsilon"] == pytest.approx(subsampled_barker_epsilon(2000, 100, 100, 1e-5), rel=1e-12)
    assert pmdp.privacy_spent(idata).epsilon == pytest.approx(attrs["dp_epsilon"], rel=1e-12)
    assert record["steps"][0]["sampling"] == "fixed size, without replacement"


@pytest.mark.parametrize("full_data", [False, True], ids=["subsampled", "full_data"])
def test_plain_pm_sample_is_priced_from_its_statistics_as_pmdp_sample_prices_it(tempered_normal, full_data):
    """The statistics record what the accountant needs (N, b and the iterations; μ for full data)."""
    model, y = tempered_normal
    settings = {"full_data": True, "llr_clip": 0.01} if full_data else {"batch_size": 100, "tempered_size": 20.0}
    run = dict(draws=30, tune=20, chains=2, cores=1, random_seed=4, progressbar=False, compute_convergence_checks=False)
    with model:
        plain = pm.sample(step=pmdp.DPBarkerMH(**settings), **run)
        reported = pmdp.sample(step=pmdp.DPBarkerMH(**settings), delta=1e-5, **run).posterior.attrs["dp_epsilon"]
    pmdp.strip_private_groups(plain, model=model)
    spent = pmdp.privacy_spent(plain, delta=1e-5, model=model)
    if full_data:  # μ summed over iterations from dp_mu_cumulative vs k·μ in one event: equal up to rounding
        assert spent.epsilon == pytest.approx(reported, rel=1e-12) and spent.method == "gaussian_closed_form"
    else:  # the same RDP event, rebuilt from dp_n_rows, dp_batch_size and dp_iterations
        assert spent.epsilon == reported and (spent.neighbouring, spent.n_rows) == ("substitute", y.size)
        assert spent.epsilon == subsampled_barker_epsilon(y.size, 100, 2 * 50, 1e-5)


def test_plain_result_of_barker_beside_another_dp_step_is_priced_only_with_the_steps():
    """Pricing Barker's statistics alone would leave out the other step's releases: refused, publish(step=) works."""
    y = np.random.default_rng(6).normal(0.5, 1.0, size=200)
    run = dict(draws=10, tune=10, chains=2, cores=1, random_seed=2, progressbar=False, compute_convergence_checks=False)
    with pm.Model() as model:
        m = pm.Normal("m", 0, 10)
        s = pm.HalfNormal("s", 2)
        pm.Normal("obs", m, s, observed=y)
        steps = [
            pmdp.DPBarkerMH([m], batch_size=100, tempered_size=20.0),
            pmdp.DPPenaltyMH([s], noise_multiplier=10.0, llr_clip=1.0),
        ]
        idata = pm.sample(step=steps, **run)
        pmdp.strip_private_groups(idata, model=model)
        with pytest.raises(ValueError, match=r"DPBarkerMH beside other steps.*step=step"):
            pmdp.privacy_spent(idata, delta=1e-5, model=model)
        pmdp.publish(idata, delta=1e-5, step=steps)
    events = [e for step in steps for e in step.privacy_events(2 * 20)]
    assert idata.posterior.attrs["dp_epsilon"] == pmdp.accounting.compose_epsilon(events, 1e-5)[0]


def test_over_budget_run_is_refused_with_the_iterations_it_could_afford(tempered_normal):
    model, _ = tempered_normal
    with model:
        step = pmdp.DPBarkerMH(batch_size=100, tempered_size=20.0)
        allowed = subsampled_barker_max_iterations(1.0, 1e-5, 2000, 100)
        with pytest.raises(pmdp.PrivacyBudgetExceededError, match=f"at most {allowed} iterations"):
            pmdp.sample(step=step, epsilon=1.0, delta=1e-5, draws=allowed, tune=0, chains=2, progressbar=False)


def test_full_data_clip_is_calibrated_from_a_target(conjugate_normal):
    with conjugate_normal.model:
        step = pmdp.DPBarkerMH(full_data=True)
        assert step.needs_calibration
        idata = pmdp.sample(
            step=step, epsilon=2.0, delta=1e-5, draws=100, tune=100, chains=2, random_seed=2, progressbar=False
        )
    assert idata.posterior.attrs["dp_epsilon"] == pytest.approx(2.0, rel=1e-6)
    assert idata.posterior.attrs["dp_epsilon"] <= 2.0
    assert step.llr_clip is None  # the calibration belonged to that run
    [settings] = json.loads(idata.posterior.attrs["dp_accountant"])["steps"]
    step.llr_clip = settings["llr_clip"]
    mu = 400 * step.gaussian_mu_per_iteration()
    assert pmdp.accounting.gaussian_epsilon(1e-5, mu) == pytest.approx(2.0, rel=1e-6)
    # Theorem 1: RDP 2αB²/C per iteration, i.e. μ = 2B²/C.
    assert step.gaussian_mu_per_iteration() == pytest.approx(2 * step.llr_clip**2 / 2.0)


def test_budget_mixing_a_barker_run_and_a_calibrated_penalty_run(tempered_normal):
    """A budget holding an RDP (Barker) event calibrates the next run by bisection on the composed ε."""
    model, _ = tempered_normal
    budget = pmdp.PrivacyBudget(epsilon=6.0, delta=1e-5, n_rows=2000)
    kwargs = dict(draws=50, tune=50, chains=1, random_seed=1, progressbar=False)
    with model:
        pmdp.sample(step=pmdp.DPBarkerMH(batch_size=100, tempered_size=20.0), budget=budget, delta=1e-5, **kwargs)
        first = budget.spent().epsilon
        pmdp.sample(step=pmdp.DPPenaltyMH(), budget=budget, delta=1e-5, **kwargs)
    assert budget.spent().method == "rdp"
    assert first < budget.spent().epsilon <= 6.0
    assert budget.spent().epsilon == pytest.approx(6.0, rel=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "batch_size` must be given"),
        ({"batch_size": 10}, "batch_size` must exceed 10"),
        ({"batch_size": 2000}, "smaller than the number of rows"),
        ({"batch_size": 100, "correction_variance": 1.0}, "must be 2.0 for the subsampled test"),
        ({"batch_size": 100, "correction_variance": 3.5}, r"correction_variance` must lie in \(0, π²/3"),
        ({"batch_size": 100, "tempered_size": 5000.0}, r"tempered_size` must lie in \(0, N\]"),
        ({"batch_size": 100, "tempered_size": -1.0}, "tempered_size"),
        ({"batch_size": 100, "temperature": 1.5}, r"temperature` must lie in \(0, 1\]"),
        ({"batch_size": 100, "temperature": 0.5, "tempered_size": 10.0}, "not both"),
        ({"batch_size": 100, "neighbouring": "add_remove"}, "must be 'substitute' for the subsampled test"),
        ({"batch_size": 100, "tempered_size": 20.0, "llr_clip": 1.0}, "at most √b/N₀"),
        ({"batch_size": 100, "full_data": True}, "batch_size` must be None with full_data=True"),
        ({"full_data": True, "neighbouring": "add_remove", "tempered_size": 10.0}, "reveal the private N"),
        ({"batch_size": 100, "proposal_scale": -1.0}, "proposal_scale"),
        ({"batch_size": 100.5}, "batch_size"),
    ],
)
def test_invalid_settings_name_the_parameter(tempered_normal, kwargs, message):
    model, _ = tempered_normal
    with model, pytest.raises((ValueError, TypeError), match=message):
        pmdp.DPBarkerMH(**kwargs)


def test_full_data_add_remove_with_a_temperature(conjugate_normal):
    with conjugate_normal.model:
        step = pmdp.DPBarkerMH(full_data=True, neighbouring="add_remove", temperature=0.5, llr_clip=0.1)
    # Sensitivity tB under add/remove: μ = (tB)²/(2C).
    assert step.gaussian_mu_per_iteration() == pytest.approx((0.5 * 0.1) ** 2 / 4.0)
    assert step.accountant_settings()["tempered_size"] is None  # N₀ = T·N would reveal N


def test_same_seed_same_draws_for_one_and_two_cores(tempered_normal):
    model, _ = tempered_normal
    kwargs = dict(draws=100, tune=100, chains=2, random_seed=5, progressbar=False, compute_convergence_checks=False)
    with model:
        # Identity across cores needs seed-derived noise and batches (testing only; by default: OS entropy).
        settings = dict(batch_size=100, tempered_size=20.0, reproducible_noise=True)
        one = pm.sample(step=pmdp.DPBarkerMH(**settings), cores=1, **kwargs)
        two = pm.sample(step=pmdp.DPBarkerMH(**settings), cores=2, **kwargs)
    np.testing.assert_array_equal(one.posterior["m"].values, two.posterior["m"].values)
    pmdp.strip_private_groups(one, model=model)
    iterations = 2 * (100 + 100)  # priced from the N, b and iteration counts the statistics record
    expected = subsampled_barker_epsilon(2000, 100, iterations, 1e-5)
    assert pmdp.privacy_spent(one, delta=1e-5, model=model).epsilon == expected


class _FixedRatios:
    """A stand-in for RowLikelihood whose per-row ratios are fixed numbers (no PyMC)."""

    def __init__(self, ratios):
        self.ratios = np.asarray(ratios, dtype=float)
        self.n_rows = self.ratios.size

    def loglik_ratio_rows(self, theta, theta_new, rows):
        return self.ratios[rows]

    def loglik_rows(self, theta, rows=None):  # full-data mode: ratio = loglik(θ′) − loglik(θ)
        return self.ratios * (1.0 if theta[0] > 0 else 0.0)


def test_subsampled_release_has_the_accounted_mean_and_variance():
    """z = N₀ r̄ + N(0, C − s²): mean N₀·(population mean of clipped ratios), variance C up to O(N₀²S²/b²)."""
    from pymc_dp.mechanisms import NoisyBarkerStatistic

    rng = np.random.default_rng(8)
    ratios = rng.normal(0.02, 0.15, size=5000)
    n0, b = 50.0, 100
    mechanism = NoisyBarkerStatistic(
        _FixedRatios(ratios), correction_variance=2.0, llr_clip=math.sqrt(b) / n0, likelihood_scale=n0, batch_size=b
    )
    clipped = np.clip(ratios, -math.sqrt(b) / n0, math.sqrt(b) / n0)
    n = 40_000
    z = np.array([mechanism.release(np.zeros(1), np.zeros(1), rng) for _ in range(n)])
    population_var = clipped.var(ddof=1)
    expected_var = 2.0 + n0**2 * population_var / b * (1 / b - b / clipped.size)
    assert abs(z.mean() - n0 * clipped.mean()) / math.sqrt(expected_var / n) < Z_CRIT
    z_var = (z.var(ddof=1) - expected_var) / (expected_var * math.sqrt(2 / (n - 1)))
    assert abs(z_var) < Z_CRIT


def test_full_data_release_is_the_clipped_sum_plus_noise_of_variance_c():
    from pymc_dp.mechanisms import NoisyBarkerStatistic

    rng = np.random.default_rng(9)
    ratios = rng.normal(0.0, 1.0, size=300)
    mechanism = NoisyBarkerStatistic(_FixedRatios(ratios), correction_variance=1.5, llr_clip=0.5, likelihood_scale=0.2)
    n = 40_000
    z = np.array([mechanism.release(np.zeros(1), np.ones(1), rng) for _ in range(n)])
    assert abs(z.mean() - 0.2 * np.clip(ratios, -0.5, 0.5).sum()) / math.sqrt(1.5 / n) < Z_CRIT
    assert abs(z.var(ddof=1) - 1.5) / (1.5 * math.sqrt(2 / (n - 1))) < Z_CRIT
