"""The clipping check of the released-statistics routes (issue 34): a priced, noisy count of the rows the bounds clip.

A release maps every row into its public bounds; a bound narrower than the data biases the
posterior by more than its width shows (``randhie`` Poisson, ``y_max`` = 20: 6.75 NUTS sds off at
ε = 4, unflagged). ``release_statistics(..., clipping_check=True)``, which the one-call route sets,
releases the number of clipped rows (sensitivity 1) inside the same ε and δ, priced before any
row is read, and a result sampled from the release is flagged when the noisy share exceeds 1/√N by
two noise sds. A row counts in proportion to how far it moved, fully from 5 % of its bound's width.
Tolerances below are in the count's own noise sd (recorded with it).
"""

from __future__ import annotations

import importlib.util
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
import pymc_dp.exponential_family.release as release_module
from pymc_dp.accounting.calibrate import noise_multiplier_for_target
from pymc_dp.accounting.composition import compose_epsilon
from pymc_dp.diagnostics import RELEASED_STATISTICS_METHOD, attach_diagnostics, verdict
from pymc_dp.exponential_family import get_family
from pymc_dp.exponential_family.clipping_check import (
    CLIPPING_CHECK_LABEL,
    CLIPPING_CHECK_MAX_SHARE,
    CLIPPING_CHECK_RESOLUTION,
    check_resolution,
    clipping_check_share,
)
from pymc_dp.exponential_family.grouped import grouped_family
from pymc_dp.mechanisms.clipped_rows import (
    CLIPPED_ROW_FULL_WEIGHT,
    CLIPPED_ROW_WEIGHT_GRID,
    PrivateClippedCount,
    discrete_laplace_sd,
    entry_scales,
)
from pymc_dp.run import PrivateRun
from pymc_dp.usability import (
    RELEASE_CLIPPING_MARGIN_SDS,
    PoorMixingError,
    PoorMixingWarning,
    bounds_clipping_note,
    bounds_clipping_problem,
)

DELTA = 1e-6
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _linear_rows(n_rows: int, share_outside: float, seed: int = 5) -> tuple[np.ndarray, np.ndarray, float]:
    """(X, y, the weighted count of rows outside x_bounds = (−1, 1) or y_bounds = (−3, 3))."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.9, 0.9, size=(n_rows, 2))
    y = np.clip(x @ np.array([0.5, -0.4]) + 0.3 * rng.normal(size=n_rows), -2.5, 2.5)
    out = rng.permutation(n_rows)[: round(share_outside * n_rows)]
    half = out.size // 2
    y[out[:half]] = 3.0 + rng.exponential(2.0, size=half)  # the outcome above y_bounds
    x[out[half:], 1] = -1.0 - rng.exponential(0.5, size=out.size - half)  # a covariate below x_bounds
    # Each row weighs its movement over 5 % of its bound's width (6 for y, 2 for x), at most 1, on a grid of 1/64.
    weight = np.maximum(np.clip(y - 3.0, 0, None) / (6 * 0.05), np.clip(-1.0 - x[:, 1], 0, None) / (2 * 0.05))
    return x, y, float(np.ceil(64 * np.minimum(weight, 1.0)).sum() / 64)


def _linear_release(x, y, mechanism: str = "laplace", seed: int = 11, **kwargs):
    noise = {"mechanism": "gaussian", "delta": DELTA} if mechanism == "gaussian" else {}
    return pmdp.release_statistics(
        "linear_regression", (x, y), epsilon=2.0, n_features=2, x_bounds=(-1, 1), y_bounds=(-3, 3),
        random_seed=seed, reproducible_noise=True, **noise, **kwargs,
    )  # fmt: skip


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_the_count_is_priced_before_any_row_is_read_and_the_spend_equals_the_target(monkeypatch, mechanism):
    x, y, _ = _linear_rows(4000, 0.02)
    order: list[str] = []
    price = release_module.price_release
    plan = PrivateRun.plan
    count_init = PrivateClippedCount.__init__
    statistics = release_module.private_statistics  # in memory: PrivateSufficientStatistics

    def priced(*args, **kwargs):
        out = price(*args, **kwargs)
        order.append("priced with the check" if CLIPPING_CHECK_LABEL in {e.label for e in out[-1]} else "priced")
        return out

    def charged(self, events, *args, **kwargs):
        order.append("charged")
        return plan(self, events, *args, **kwargs)

    def count_reads(self, family, data, *args):
        order.append("count reads rows")
        count_init(self, family, data, *args)

    def statistics_read(*args, **kwargs):
        order.append("statistics read rows")
        return statistics(*args, **kwargs)

    monkeypatch.setattr(release_module, "price_release", priced)
    monkeypatch.setattr(PrivateRun, "plan", charged)
    monkeypatch.setattr(PrivateClippedCount, "__init__", count_reads)
    monkeypatch.setattr(release_module, "private_statistics", statistics_read)
    budget = pmdp.PrivacyBudget(epsilon=2.0, delta=DELTA, n_rows=4000)
    release = _linear_release(x, y, mechanism, budget=budget, clipping_check=True)
    # Priced (the check's event among the release's) before any row is read; the count reads after the charge.
    assert order == ["priced with the check", "statistics read rows", "charged", "count reads rows"]
    labels = [e.label for e in release.events]
    assert labels.count(CLIPPING_CHECK_LABEL) == 1 and len(labels) == 2
    # The spend is the caller's target, whatever the check takes: the other release keeps the rest.
    spent = compose_epsilon(release.events, release.delta)[0]
    assert spent <= 2.0 and spent == pytest.approx(2.0, rel=1e-6)
    assert budget.spent().epsilon == pytest.approx(spent, rel=1e-9) and len(budget.labels) == 1
    share = clipping_check_share(mechanism, 2.0, release.delta, 4000)
    assert 0.0 < share <= CLIPPING_CHECK_MAX_SHARE and release.clipping_check["budget_share"] == share
    record = json.loads(json.dumps(release.accountant_record()))
    assert record["clipping_check"] == release.clipping_check  # recorded, public values only
    assert set(release.clipping_check) >= {"noisy_clipped_rows", "share_clipped", "share_clipped_sd", "bounds"}


def test_the_check_leaves_a_release_without_it_unchanged_and_is_refused_where_it_cannot_apply():
    x, y, _ = _linear_rows(500, 0.0)
    plain = _linear_release(x, y)
    again = _linear_release(x, y, clipping_check=False)
    assert plain.clipping_check is None and again.clipping_check is None
    assert np.array_equal(plain.noisy_statistics, again.noisy_statistics) and plain.events == again.events
    budget = pmdp.PrivacyBudget(epsilon=4.0, delta=DELTA, n_rows=500)
    with pytest.raises(TypeError, match=r"`clipping_check` must be a bool\. Found 'yes'"):
        _linear_release(x, y, clipping_check="yes", budget=budget)
    with pytest.raises(ValueError, match=r"`clipping_check` must be False with out_of_bounds='raise'"):
        _linear_release(x, y, clipping_check=True, out_of_bounds="raise", budget=budget)
    assert budget.spent().epsilon == 0.0 and budget.labels == ()


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_the_noisy_count_is_the_clipped_rows_within_its_noise_and_flags_a_material_share(mechanism):
    n_rows = 20_000
    problems = []
    for share, flagged in ((0.03, True), (0.0, False)):
        x, y, clipped = _linear_rows(n_rows, share)
        check = _linear_release(x, y, mechanism, clipping_check=True).clipping_check
        sd = check["noise_sd_rows"]
        assert abs(check["noisy_clipped_rows"] - clipped) <= 5 * sd  # P(|noise| > 5 sd) < 1e-3 for either noise
        # The share spent on the check resolves the threshold √N rows to a tenth where the budget allows.
        assert sd <= CLIPPING_CHECK_RESOLUTION * math.sqrt(n_rows) * (1 + 1e-9)
        assert check["bias_threshold_share"] == pytest.approx(1 / math.sqrt(n_rows), rel=1e-5)
        problem = bounds_clipping_problem(check)
        # 3 % (weighted about 2.8 %) is 4/√N, far above 1/√N + 2 sd = 1.2/√N; 0 % is 10 sds below the threshold.
        assert (problem is not None) == flagged
        problems.append(problem)
    assert "x_bounds=" in problems[0] and "y_bounds=" in problems[0] and "widen the bounds" in problems[0]


def test_the_clipped_count_sees_every_kind_of_clipping_and_nothing_else():
    # Counts above y_max, labels that are no group, NaN, a covariate outside: each is one clipped row.
    x = np.array([[0.0], [0.5], [2.0], [np.nan], [-0.5], [0.1]])
    y = np.array([1.0, 2.0, 0.0, 1.0, 9.0, 0.5])
    groups = np.array([0, 1, 1, 0, 2, 7])
    grouped = grouped_family("linear_regression", n_groups=3, n_features=1, x_bounds=(-1, 1), y_bounds=(0, 3))
    counts = get_family("poisson_regression", n_features=1, x_bounds=(-1, 1), y_max=3)
    exact = {}
    for name, family, data in (("grouped", grouped, (x, y, groups)), ("counts", counts, (x, np.round(y)))):
        noisy, sd = PrivateClippedCount(family, data).laplace_noisy(1e6, np.random.default_rng(0))
        assert sd < 1e-12  # discrete Laplace at ε = 10⁶: zero noise with probability 1 − 2e^{−10⁶}
        exact[name] = noisy
    # grouped: x = 2 and NaN (rows 2, 3), y = 9 (row 4), label 7 (row 5); counts: x (rows 2, 3), y = 9 (row 4)
    assert exact == {"grouped": 4, "counts": 3}
    assert discrete_laplace_sd(1.0) == pytest.approx(math.sqrt(2 * math.exp(-1)) / (1 - math.exp(-1)))


def _exact_count(family, data, full_weight: float = CLIPPED_ROW_FULL_WEIGHT) -> float:
    """The exact weighted count (discrete Laplace at ε = 10⁶: zero noise with probability 1 − 2e^{−10⁶/64})."""
    noisy, sd = PrivateClippedCount(family, data, full_weight).laplace_noisy(1e6, np.random.default_rng(0))
    assert sd < 1e-12
    return noisy


def test_a_row_counts_in_proportion_to_how_far_it_moved_fully_from_five_percent_of_its_bounds_width():
    # Weights on a grid of 1/64, rounded up: x_bounds (-1, 1) → full at 0.1, y_bounds (-3, 3) → 0.3, y_max = 20 → 1;
    # labels, NaN, inf and invalid group labels count fully whatever they moved by.
    assert CLIPPED_ROW_FULL_WEIGHT == 0.05 and CLIPPED_ROW_WEIGHT_GRID == 64
    linear = get_family("linear_regression", n_features=1, x_bounds=(-1, 1), y_bounds=(-3, 3))
    x = np.array([[1.019], [1.021], [-1.01], [0.0], [0.0], [np.nan], [np.inf], [0.5]])
    y = np.array([0.0, 0.0, 0.0, 3.05, -3.07, 0.0, 0.0, 2.0])
    # 0.019/0.1 → 13/64, 0.021/0.1 → 14/64, 0.01/0.1 → 7/64, 0.05/0.3 → 11/64, 0.07/0.3 → 15/64; NaN, inf: 1.
    assert _exact_count(linear, (x, y)) == (13 + 14 + 7 + 11 + 15 + 64 + 64) / 64
    assert _exact_count(linear, (x, y), full_weight=0.0) == 7  # any movement counts fully: the plain count
    counts = get_family("poisson_regression", n_features=1, x_bounds=(-1, 1), y_max=20)
    xc = np.zeros((4, 1))
    assert _exact_count(counts, (xc, np.array([20.1, 20.3, 21.0, -0.1]))) == (7 + 20 + 64 + 7) / 64
    logistic = get_family("logistic_regression", n_features=1, x_bounds=(-1, 1))
    assert _exact_count(logistic, (xc, np.array([0.001, 1.0, 0.999, 0.0]))) == 2  # a label: any change counts fully
    grouped = grouped_family("logistic_regression", n_groups=2, n_features=1, x_bounds=(-1, 1))
    assert _exact_count(grouped, (np.array([[1.01], [1.01], [1.03]]), np.ones(3), np.array([0, 2, 1]))) == 91 / 64
    # The full-weight movements in the families' row layouts: [x, y], [label, 1, x, y], one column.
    assert entry_scales(linear, 2) == pytest.approx([0.1, 0.3])
    assert entry_scales(grouped, 4) == pytest.approx([0.0, 0.0, 0.1, 0.0])
    assert entry_scales(get_family("poisson", upper=50), 1) == pytest.approx([2.5])
    assert entry_scales(get_family("categorical", n_categories=3), 1) == pytest.approx([0.0])
    assert entry_scales(linear, 3) == pytest.approx([0.0, 0.0, 0.0])  # a layout it cannot read: strict
    with pytest.raises(ValueError, match=r"`full_weight` must be a fraction in \[0, 1\]\. Found 1\.5"):
        entry_scales(linear, 2, 1.5)
    # Extreme values count fully and raise no floating-point warning (warnings are errors here): a warning would
    # depend on one row (review finding, 1e308 overflowed the division).
    extreme = np.array([[1e308], [-1.7e308], [np.inf], [-np.inf], [np.nan], [0.0]])
    assert _exact_count(linear, (extreme, np.array([0.0, 0.0, 0.0, 0.0, 0.0, 1e308]))) == 6


def test_the_count_noise_is_scaled_to_the_grid_so_one_row_is_one_noise_unit(monkeypatch):
    # Review finding: the 5-sd test above cannot see noise 64× too small. The samplers must get scale 64/ε grid
    # units (Laplace) and variance (64τ)² units² (Gaussian): one row is 64 units.
    from fractions import Fraction

    import pymc_dp.mechanisms.clipped_rows as clipped_rows

    asked = []
    monkeypatch.setattr(clipped_rows, "discrete_laplace_noise", lambda scale, size, source: asked.append(scale) or [0])
    monkeypatch.setattr(clipped_rows, "discrete_gaussian_noise", lambda var, size, source: asked.append(var) or [0])
    count = PrivateClippedCount(get_family("normal", sigma=1.0, bounds=(-1, 1)), np.array([0.0, 2.0]))
    assert count.laplace_noisy(0.5, None) == (1.0, pytest.approx(discrete_laplace_sd(0.5 / 64) / 64))
    assert count.gaussian_noisy(2.0, None) == (1.0, 2.0)
    assert asked == [Fraction(64) / Fraction(0.5), (Fraction(2.0) * 64) ** 2]
    assert discrete_laplace_sd(0.5 / 64) / 64 == pytest.approx(math.sqrt(2) / 0.5, rel=1e-4)  # ≈ the continuous sd


def test_rows_heaped_just_beyond_a_bound_are_counted_and_flag_the_release():
    # Review finding 1: with a 1 % tolerance, 20 % of 20,000 rows at x = 4.071 (bounds ±4: moved 0.9 % of the
    # width) counted 0, yet clipping them moves the OLS slope by 1.8 posterior sds. Each now weighs
    # ceil(64 · 0.071/0.4)/64 = 12/64, a share of 3.75 %, 5.3× the threshold 1/√N = 0.71 %.
    rng = np.random.default_rng(3)
    n_rows = 20_000
    x = rng.normal(size=(n_rows, 1)).clip(-3.9, 3.9)
    x[: n_rows // 5, 0] = 4.071
    y = (0.5 * x[:, 0] + rng.normal(size=n_rows)).clip(-7.9, 7.9)
    family = get_family("linear_regression", n_features=1, x_bounds=(-4, 4), y_bounds=(-8, 8))
    assert _exact_count(family, (x, y)) == n_rows // 5 * 12 / 64
    assert _exact_count(family, (x, y), full_weight=0.0) == n_rows // 5  # any movement counted fully: all of them
    release = pmdp.release_statistics(
        "linear_regression", (x, y), epsilon=2.0, n_features=1, x_bounds=(-4, 4), y_bounds=(-8, 8),
        clipping_check=True, random_seed=2, reproducible_noise=True,
    )  # fmt: skip
    check = release.clipping_check
    assert check["resolvable"] and abs(check["share_clipped"] - 0.0375) <= 5 * check["share_clipped_sd"]
    assert bounds_clipping_problem(check) is not None


def test_randhie_visits_clipped_at_twenty_are_flagged_at_epsilon_four_with_near_certainty():
    # The utility grid's randhie Poisson release (y_max = 20, covariates scaled to ±1) came back 6.75–44 NUTS sds off
    # at ε = 4, and the earlier count (1.02 % against a fire level of 0.92 %) flagged it in about 93 % of runs.
    pytest.importorskip("statsmodels.api")
    spec = importlib.util.spec_from_file_location("utility_benchmark", BENCHMARKS / "utility.py")
    utility = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utility)
    x, visits = utility._randhie(None)  # the grid's rows: covariates scaled by public ranges, the visit counts
    # The check's noise at ε = 4 (Gaussian, as the grid's release), from public settings only, as price_release sets it.
    n_rows = len(visits)
    tau = noise_multiplier_for_target(4.0, DELTA, 1) / math.sqrt(clipping_check_share("gaussian", 4.0, DELTA, n_rows))
    check = check_resolution(tau / n_rows, n_rows)
    family = get_family("poisson_regression", n_features=x.shape[1], x_bounds=(-1, 1), y_max=20)
    exact_share = _exact_count(family, (x, visits)) / n_rows
    assert check["resolvable"] and exact_share > 1.6 / math.sqrt(n_rows)
    # P(flag) = P(noise > fire level − exact share): at least 1 − 10⁻⁴ (3.7 noise sds).
    assert (exact_share - check["smallest_flagged_share"]) / (tau / n_rows) > 3.7


def test_the_record_names_the_weighting_and_the_flag_says_it():
    x, y, _ = _linear_rows(20_000, 0.03)
    check = _linear_release(x, y, clipping_check=True).clipping_check
    assert check["full_weight_movement"] == CLIPPED_ROW_FULL_WEIGHT and check["weight_grid"] == CLIPPED_ROW_WEIGHT_GRID
    assert check["resolvable"] is True and "note" not in check
    assert "weighted by how far it moved, fully from 5 % of a bound's width" in bounds_clipping_problem(check)
    assert bounds_clipping_note(check) is None


def test_a_check_whose_noise_hides_its_threshold_says_so_instead_of_passing_silently():
    # N = 400, ε = 0.5 (Laplace): the check's share is capped at 10 % of ε, so its count's sd is about
    # 1/0.05·√2 ≈ 28 rows, 2 sds = 57 rows against the threshold √N = 20 rows: it cannot flag a material share.
    x, y, _ = _linear_rows(400, 0.0)
    release = pmdp.release_statistics(
        "linear_regression", (x, y), epsilon=0.5, n_features=2, x_bounds=(-1, 1), y_bounds=(-3, 3),
        clipping_check=True, random_seed=1, reproducible_noise=True,
    )  # fmt: skip
    check = release.clipping_check
    assert check["budget_share"] == CLIPPING_CHECK_MAX_SHARE
    assert RELEASE_CLIPPING_MARGIN_SDS * check["share_clipped_sd"] >= check["bias_threshold_share"]
    assert check["resolvable"] is False
    assert check["smallest_flagged_share"] == pytest.approx(
        check["bias_threshold_share"] + RELEASE_CLIPPING_MARGIN_SDS * check["share_clipped_sd"], abs=2e-6
    )
    note = bounds_clipping_note(check)
    assert note is not None and "cannot resolve its threshold" in note and note == check["note"]
    kept = attach_diagnostics(_independent_draws(), "warn", method=RELEASED_STATISTICS_METHOD, bounds_clipping=[check])
    recorded = json.loads(kept.posterior.attrs["dp_diagnostics"])
    assert recorded["bounds_clipping"][0]["resolvable"] is False
    assert recorded["notes"] == [note] and f"Note: {note}." in verdict(recorded)  # said in the logged verdict too
    # The rule's edge, from public values only: 2 sd just below the threshold is resolvable, at it is not.
    threshold = 1 / math.sqrt(10_000)
    assert check_resolution(0.999 * threshold / 2, 10_000)["resolvable"] is True
    assert check_resolution(threshold / 2, 10_000)["resolvable"] is False


def _independent_draws(seed: int = 0):
    import arviz as az

    draws = np.random.default_rng(seed).normal(size=(4, 500))
    if int(az.__version__.split(".")[0]) >= 1:  # ArviZ 1.x (PyMC 6): groups in one mapping, a DataTree back
        return az.from_dict({"posterior": {"theta": draws}})
    return az.from_dict(posterior={"theta": draws})


def test_the_diagnostics_flag_a_material_check_say_why_and_what_to_do_and_keep_the_others_usable():
    n_rows = 20_000
    x, y, _ = _linear_rows(n_rows, 0.03)
    material = _linear_release(x, y, clipping_check=True).clipping_check
    x, y, _ = _linear_rows(n_rows, 0.0)
    clean = _linear_release(x, y, clipping_check=True).clipping_check
    kept = attach_diagnostics(_independent_draws(), "warn", method=RELEASED_STATISTICS_METHOD, bounds_clipping=[clean])
    recorded = json.loads(kept.posterior.attrs["dp_diagnostics"])
    assert recorded["usable"] and recorded["bounds_clipping"] == [clean]
    with pytest.warns(PoorMixingWarning, match=r"clipping: about [23](\.\d)? % .*x_bounds=.*y_bounds=") as caught:
        flagged = attach_diagnostics(
            _independent_draws(), "warn", method=RELEASED_STATISTICS_METHOD, bounds_clipping=[clean, material]
        )
    assert "rerunning the sampler does not remove it" in str(caught[0].message)
    recorded = json.loads(flagged.posterior.attrs["dp_diagnostics"])
    assert not recorded["usable"] and len([p for p in recorded["problems"] if p.startswith("clipping:")]) == 1
    with pytest.raises(PoorMixingError, match="clipping: about"):
        attach_diagnostics(_independent_draws(), "raise", method=RELEASED_STATISTICS_METHOD, bounds_clipping=[material])


@pytest.mark.slow
def test_a_result_sampled_from_a_release_whose_bounds_clip_is_flagged_with_the_bounds_named():
    rng = np.random.default_rng(2)
    n_rows = 20_000
    data = rng.normal(0.3, 1.0, size=n_rows)  # about 16 % of the rows lie outside (−1.4, 1.4)
    for bounds, flagged in (((-1.4, 1.4), True), ((-6.0, 6.0), False)):
        release = pmdp.release_statistics(
            "normal", data, epsilon=2.0, sigma=1.0, bounds=bounds, clipping_check=True, random_seed=4,
            reproducible_noise=True,
        )  # fmt: skip
        with pm.Model():
            mu = pm.Normal("mu", 0, 2)
            release.likelihood("lik", mu=mu)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                idata = release.sample(draws=200, tune=200, chains=2, cores=1, random_seed=1, progressbar=False)
        diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
        assert diagnostics["bounds_clipping"] == [release.clipping_check]
        clipping = [p for p in diagnostics["problems"] if p.startswith("clipping:")]
        assert bool(clipping) == flagged
        said = [str(w.message) for w in caught if issubclass(w.category, PoorMixingWarning)]
        if flagged:
            assert diagnostics["usable"] is False and "bounds=[-1.4, 1.4]" in clipping[0]
            assert said and "rerunning the sampler does not remove it" in said[0] and "bounds=" in said[0]
        record = json.loads(idata.posterior.attrs["dp_accountant"])
        assert record["clipping_check"]["noisy_clipped_rows"] == release.clipping_check["noisy_clipped_rows"]
        assert pmdp.privacy_spent(idata).epsilon == pytest.approx(2.0, rel=1e-9)


def test_the_one_call_release_route_asks_for_the_check(monkeypatch):
    import pymc_dp.exponential_family as family_module

    asked: dict = {}

    class Stop(Exception):
        pass

    def release_statistics(*args, **kwargs):
        asked.update(kwargs)
        raise Stop

    monkeypatch.setattr(family_module, "release_statistics", release_statistics)
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, size=(300, 2))
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Poisson("y", mu=pm.math.exp(0.2 + x @ b), observed=rng.poisson(1.0, size=300))
        with pytest.raises(Stop):
            pmdp.sample(epsilon=4.0, delta=DELTA, x_bounds=(-1, 1), y_bounds=(0, 10), progressbar=False)
    assert asked["clipping_check"] is True


def test_the_flag_names_the_bounds_the_user_gave_not_the_design_with_its_column_of_ones():
    # The one-call route releases the design (1, x) with bounds (1, 1) for the intercept's column: the message
    # names the covariates' (lower, upper) once, as the user gave it, and says the constant column clips nothing.
    check = {
        "share_clipped": 0.05,
        "share_clipped_sd": 0.001,
        "bias_threshold_share": 0.01,
        "bounds": {"x_bounds": ([1.0, -1.0, -1.0], [1.0, 1.0, 1.0]), "y_bounds": (-3.0, 3.0)},
    }
    problem = bounds_clipping_problem(check)
    assert "x_bounds=(-1, 1) for each of 2 covariates (and constant columns fixed at 1" in problem
    assert "[1.0, -1.0" not in problem and "y_bounds=(-3.0, 3.0)" in problem
    check["bounds"] = {"x_bounds": ([-1.0, -1.23456789], [1.0, 2.0])}
    assert "x_bounds=[(-1, 1), (-1.23456789, 2)]" in bounds_clipping_problem(check)  # as given, not rounded
