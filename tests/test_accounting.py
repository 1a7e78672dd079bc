"""Accountant tests. Every reference value names its source."""

import math
import re

import dp_accounting
import mpmath as mp
import numpy as np
import pytest
from dp_accounting import rdp as dp_rdp

from pymc_dp.accounting import (
    DEFAULT_ORDERS,
    GaussianReleases,
    PrivacyBudget,
    PrivacyBudgetExceededError,
    RdpReleases,
    compose_epsilon,
    event_from_dict,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_mu_for_target,
    noise_multiplier_for_target,
    rdp_to_epsilon,
)
from pymc_dp.accounting.spent import format_epsilon


def delta_mpmath(eps: float, mu: float, dps: int = 50) -> float:
    """Sommer et al. (2019) Lemma 12, literally, in 50-digit arithmetic (independent oracle)."""
    with mp.workdps(dps):
        eps, mu = mp.mpf(eps), mp.mpf(mu)
        s = 2 * mp.sqrt(mu)
        return float(0.5 * (mp.erfc((eps - mu) / s) - mp.exp(eps) * mp.erfc((eps + mu) / s)))


# design/notes/accounting.md §2(a): closed form (erfcx-stable float + brentq), agreeing with the
# 50-digit mpmath evaluation, dp_accounting.get_epsilon_gaussian, PLD, PRV and autodp.
NOTES_2A = {10.0: 17.856586830107616, 30.0: 4.652984530968507, 100.0: 1.1993695737531684}


@pytest.mark.parametrize("tau", sorted(NOTES_2A))
def test_closed_form_matches_notes_values(tau):
    eps = gaussian_epsilon(1e-5, 1000 / (2 * tau**2))
    assert eps == pytest.approx(NOTES_2A[tau], rel=1e-9)


@pytest.mark.parametrize("k", [1, 10, 1000, 100_000])
@pytest.mark.parametrize("tau", [0.5, 3.0, 30.0, 300.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
def test_closed_form_matches_dp_accounting(k, tau, delta):
    # dp_accounting's analytic Gaussian (Balle & Wang 2018) on the composed std τ/√k.
    ours = gaussian_epsilon(delta, k / (2 * tau**2))
    theirs = dp_accounting.get_epsilon_gaussian(sigma=tau / math.sqrt(k), delta=delta)
    assert ours == pytest.approx(theirs, rel=1e-8, abs=1e-10)


@pytest.mark.parametrize("mu", [1e-4, 0.05, 5.0, 80.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-12])
def test_closed_form_matches_mpmath(mu, delta):
    eps = gaussian_epsilon(delta, mu)
    assert delta_mpmath(eps, mu) == pytest.approx(delta, rel=1e-9)
    assert gaussian_delta(eps, mu) == pytest.approx(delta_mpmath(eps, mu), rel=1e-9)


def test_epsilon_is_on_the_private_side():
    for mu in (1e-3, 0.5, 20.0):
        eps = gaussian_epsilon(1e-6, mu)
        assert gaussian_delta(eps, mu) <= 1e-6
        assert gaussian_delta(eps * (1 - 1e-9), mu) > 1e-6


def test_zero_mu_and_tiny_mu():
    assert gaussian_epsilon(1e-5, 0.0) == 0.0
    assert gaussian_delta(0.0, 0.0) == 0.0
    # For tiny μ δ(0) < target, so ε = 0 (the mechanism is (0, δ)-DP).
    assert gaussian_epsilon(0.5, 1e-6) == 0.0


def test_heterogeneous_gaussians_add_mu():
    # notes §2(e): 4000 releases at τ=100 plus 2000 at τ=50 give 4.86608 (closed form = PLD).
    events = [GaussianReleases(100.0, 4000), GaussianReleases(50.0, 2000)]
    eps, method, mu = compose_epsilon(events, 1e-5)
    assert method == "gaussian_closed_form"
    assert mu == pytest.approx(4000 / 20000 + 2000 / 5000)
    assert eps == pytest.approx(4.86608, abs=5e-6)


@pytest.mark.parametrize(
    ("epsilon", "k", "expected"),
    # notes §4: τ = √k · get_sigma_gaussian(ε, δ), δ = 1e-5.
    [(1.0, 1000, 117.97293), (4.0, 10_000, 108.11618)],
)
def test_calibration_matches_notes(epsilon, k, expected):
    tau = noise_multiplier_for_target(epsilon, 1e-5, k)
    assert tau == pytest.approx(expected, abs=5e-5)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 8.0])
@pytest.mark.parametrize("k", [1, 500, 40_000])
def test_calibration_round_trip_is_tight_and_private(epsilon, k):
    delta = 1e-6
    tau = noise_multiplier_for_target(epsilon, delta, k)
    achieved = gaussian_epsilon(delta, k / (2 * tau**2))
    assert achieved <= epsilon
    assert achieved == pytest.approx(epsilon, rel=1e-9)
    # inversion: μ* round trip
    mu_star = gaussian_mu_for_target(epsilon, delta)
    assert gaussian_epsilon(delta, mu_star) == pytest.approx(epsilon, rel=1e-9)
    assert gaussian_delta(epsilon, mu_star) <= delta


def test_calibration_with_spent_mu():
    mu_star = gaussian_mu_for_target(2.0, 1e-6)
    tau = noise_multiplier_for_target(2.0, 1e-6, 100, mu_spent=mu_star / 2)
    assert 100 / (2 * tau**2) == pytest.approx(mu_star / 2, rel=1e-9)
    with pytest.raises(ValueError, match="mu_spent"):
        noise_multiplier_for_target(2.0, 1e-6, 100, mu_spent=mu_star * 1.01)


def improved_conversion(orders, rdp, delta):
    """Balle et al. 2020 Thm 21, written out independently of dp_accounting."""
    orders, rdp = np.asarray(orders), np.asarray(rdp)
    eps = rdp + np.log1p(-1 / orders) - (np.log(delta) + np.log(orders)) / (orders - 1)
    return max(0.0, float(np.min(eps)))


@pytest.mark.parametrize("mu", [0.05, 0.5556, 5.0])
def test_rdp_conversion_matches_hand_formula_and_is_looser_than_exact(mu):
    orders = DEFAULT_ORDERS
    eps, _ = rdp_to_epsilon(orders, orders * mu, 1e-5)
    assert eps == pytest.approx(improved_conversion(orders, orders * mu, 1e-5), rel=1e-12)
    basic = float(np.min(orders * mu + np.log(1e5) / (orders - 1)))
    assert gaussian_epsilon(1e-5, mu) < eps < basic  # exact < improved RDP < basic RDP


@pytest.mark.parametrize("tau", [10.0, 30.0, 100.0])
def test_rdp_path_matches_dp_accounting_rdp_accountant(tau):
    # dp_accounting RdpAccountant (add/remove, noise multiplier τ) on its default grid; our grid
    # contains that grid, so ours is never larger, and notes §2(a) gives the continuous-α optimum
    # (19.04726, 5.02393, 1.30812) as a lower bound for any grid.
    acc = dp_rdp.RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(tau), count=1000)
    theirs = acc.get_epsilon(1e-5)
    zero_curve = RdpReleases(tuple(DEFAULT_ORDERS), (0.0,) * len(DEFAULT_ORDERS), 1)  # forces the RDP path
    ours, method, _ = compose_epsilon([GaussianReleases(tau, 1000), zero_curve], 1e-5)
    assert method == "rdp"
    continuous = {10.0: 19.04726, 30.0: 5.02393, 100.0: 1.30812}[tau]
    assert continuous - 1e-5 <= ours <= theirs + 1e-12


def test_events_round_trip_through_json_dicts():
    events = [GaussianReleases(3.5, 12, "a"), RdpReleases((2.0, 3.0), (0.1, 0.2), 7, "b")]
    rebuilt = [event_from_dict(e.to_dict()) for e in events]
    assert rebuilt == events
    with pytest.raises(ValueError, match="type"):
        event_from_dict({"type": "laplace"})


class TestPrivacyBudget:
    def test_refusal_leaves_ledger_unchanged(self):
        budget = PrivacyBudget(epsilon=1.0, delta=1e-6, n_rows=100)
        tau = noise_multiplier_for_target(0.7, 1e-6, 1000)
        budget.charge([GaussianReleases(tau, 1000)], label="first")
        before = (budget.events, budget.labels, budget.spent())
        with pytest.raises(PrivacyBudgetExceededError, match="Nothing was run or charged"):
            budget.charge([GaussianReleases(tau, 1000)], label="second")
        assert (budget.events, budget.labels, budget.spent()) == before

    def test_printed_spend_is_rounded_up_to_six_digits(self):
        # Issue 35: every printed ε is rounded up (never below the guarantee), in the repr and in a refusal.
        budget = PrivacyBudget(epsilon=1.0, delta=1e-6, n_rows=100)
        budget.charge([GaussianReleases(noise_multiplier_for_target(0.7, 1e-6, 1000), 1000)])
        spent = budget.spent().epsilon
        printed = re.search(r"spent=([0-9.]+)", repr(budget)).group(1)
        assert printed == format_epsilon(spent, 6) and spent <= float(printed) < spent + 1e-5
        with pytest.raises(PrivacyBudgetExceededError) as refusal:
            budget.charge([GaussianReleases(noise_multiplier_for_target(0.7, 1e-6, 1000), 1000)])
        after, before = re.search(r"ε to ([0-9.]+) .*already spent: ([0-9.]+)\)", str(refusal.value)).groups()
        assert before == printed and float(after) > 1.0 and len(after.replace(".", "").lstrip("0")) <= 6

    def test_format_epsilon_rounds_up_beyond_float_error_only(self):
        assert format_epsilon(1.0000000005, 6) == "1.00001"  # 5e-10 above: printed above, never at 1.00000
        assert format_epsilon(1.0 + 2.2e-16) == "1.000" and format_epsilon(0.9999999998985) == "1.000"
        assert format_epsilon(1.00004) == "1.001" and format_epsilon(12.3401) == "12.35"

    def test_two_runs_cost_the_same_as_one_long_run(self):
        budget = PrivacyBudget(epsilon=5.0, delta=1e-6, n_rows=100)
        budget.charge([GaussianReleases(40.0, 600)])
        budget.charge([GaussianReleases(40.0, 400)])
        assert budget.spent().epsilon == pytest.approx(gaussian_epsilon(1e-6, 1000 / (2 * 40.0**2)), rel=1e-12)

    def test_remaining_mu_allows_exactly_the_budget(self):
        budget = PrivacyBudget(epsilon=2.0, delta=1e-6, n_rows=100)
        budget.charge([GaussianReleases(80.0, 500)])
        tau = math.sqrt(800 / (2 * budget.remaining_mu()))
        assert budget.would_spend([GaussianReleases(tau * (1 + 1e-9), 800)]).epsilon <= 2.0

    @pytest.mark.parametrize(
        ("kwargs", "name"),
        [
            ({"epsilon": -1.0}, "epsilon"),
            ({"epsilon": float("nan")}, "epsilon"),
            ({"delta": 0.0}, "delta"),
            ({"delta": 1.0}, "delta"),
            ({"n_rows": 0}, "n_rows"),
            ({"neighbouring": "swap"}, "neighbouring"),
        ],
    )
    def test_bad_arguments_name_the_parameter(self, kwargs, name):
        args = {"epsilon": 1.0, "delta": 1e-6, "n_rows": 10} | kwargs
        with pytest.raises(ValueError, match=f"`{name}` must"):
            PrivacyBudget(**args)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: gaussian_epsilon(1.5, 1.0), "delta"),
        (lambda: gaussian_epsilon(1e-5, -1.0), "mu"),
        (lambda: gaussian_epsilon(1e-5, float("nan")), "mu"),
        (lambda: noise_multiplier_for_target(0.0, 1e-5, 10), "epsilon"),
        (lambda: noise_multiplier_for_target(1.0, 1e-5, 0), "count"),
        (lambda: GaussianReleases(0.0, 10), "noise_multiplier"),
        (lambda: GaussianReleases(1.0, -1), "count"),
        (lambda: rdp_to_epsilon([2.0], [float("nan")], 1e-5), "rdp"),
        (lambda: RdpReleases((2.0,), (-0.1,), 1), "rdp"),
        (lambda: RdpReleases((1.0,), (0.1,), 1), "orders"),
    ],
)
def test_accounting_errors_name_the_parameter(call, name):
    with pytest.raises(ValueError, match=f"`{name}` must"):
        call()


def test_round_towards_privacy_moves_to_the_private_side_only():
    from pymc_dp.accounting import round_towards_privacy

    boundary = 0.1 + 0.2  # 0.30000000000000004: a value computed in floating point
    assert round_towards_privacy(0.3, lambda x: x >= boundary, math.inf) >= boundary
    assert round_towards_privacy(0.3, lambda x: x >= boundary, math.inf) - boundary < 1e-15
    assert round_towards_privacy(0.5, lambda x: x >= boundary, math.inf) == 0.5  # already private: unchanged
    assert round_towards_privacy(0.30000000000000004, lambda x: x <= 0.3, 0.0) <= 0.3
    with pytest.raises(RuntimeError, match="private side"):
        round_towards_privacy(1.0, lambda x: x > 2.0, math.inf, max_steps=10)


def test_accounting_modules_import_each_other_without_cycles():
    import ast
    from pathlib import Path

    import pymc_dp.accounting as accounting

    folder = Path(accounting.__file__).parent
    edges = {}
    for path in folder.glob("*.py"):
        tree = ast.parse(path.read_text())
        edges[path.stem] = {
            node.module.rsplit(".", 1)[-1]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pymc_dp.accounting.")
        }

    def reaches(start, target, seen=()):
        return any(n == target or (n not in seen and reaches(n, target, (*seen, n))) for n in edges.get(start, ()))

    assert not [m for m in edges if reaches(m, m)], "accounting modules must not import each other in a cycle"


def test_every_event_answers_rdp_at_and_the_old_import_paths_still_work():
    # The vocabulary (events.py) and the composition (composition.py) are apart; every event prices
    # itself in RDP through one method, and the names stay importable from where they were.
    import typing

    import pymc_dp.accounting as accounting
    from pymc_dp.accounting import composition, events, spent

    orders = np.array([1.5, 2.0, 32.0])
    examples = {
        GaussianReleases: GaussianReleases(3.0, 4),
        RdpReleases: RdpReleases((1.5, 2.0, 32.0), (0.1, 0.2, 3.0), 2),
        events.PureDPReleases: events.PureDPReleases(0.5, 3),
        events.PoissonGaussianReleases: events.PoissonGaussianReleases(2.0, 0.1, 5),
    }
    assert set(typing.get_args(events.PrivacyEvent)) == set(examples)
    expected = {
        GaussianReleases: orders * 4 / (2 * 3.0**2),
        RdpReleases: np.array([0.2, 0.4, 6.0]),
        events.PureDPReleases: 3 * np.minimum(0.5, orders * 0.5**2 / 2),
    }
    for cls, event in examples.items():
        curve = event.rdp_at(orders)
        assert curve.shape == orders.shape and np.all(curve > 0)
        if cls in expected:
            np.testing.assert_allclose(curve, expected[cls], rtol=1e-12)
    assert composition.compose_epsilon is accounting.compose_epsilon
    assert events.PrivacySpent is spent.PrivacySpent is accounting.PrivacySpent
    assert events.format_epsilon is spent.format_epsilon
