"""Accounting of Poisson-subsampled Gaussian releases (DPADVI). Every reference value names its source."""

import json
import math

import mpmath as mp
import numpy as np
import pytest

from pymc_dp.accounting import (
    DEFAULT_ORDERS,
    GaussianReleases,
    PrivacyBudget,
    PureDPReleases,
    RdpReleases,
    compose_epsilon,
    event_from_dict,
    gaussian_epsilon,
    rdp_to_epsilon,
)
from pymc_dp.accounting.calibrate import poisson_gaussian_noise_multiplier
from pymc_dp.accounting.events import PoissonGaussianReleases
from pymc_dp.accounting.pld import poisson_gaussian_rdp

# design/notes/accounting.md §2(b): q = 0.05, T = 1000, δ = 1e-5. dp_accounting PLD (pessimistic,
# vdi 1e-4), agreeing with the Fourier accountant and PRV to ≤ 1e-5 ("abs=2e-5 is safe").
# Add/remove with noise std σC; substitute with the DPVI paper's noise std 2σC (Fourier get_epsilon_S).
NOTES_2B_ADD_REMOVE = {1.0: 10.98668, 2.0: 3.69974, 4.0: 1.58377}
NOTES_2B_SUBSTITUTE = {1.0: 7.50029, 2.0: 3.33729, 4.0: 1.53414}
# Same section: RDP with dp_accounting's default order grid and the improved conversion (add/remove).
NOTES_2B_RDP_ADD_REMOVE = {1.0: 12.01696, 2.0: 4.02435, 4.0: 1.72878}


@pytest.mark.parametrize("sigma", sorted(NOTES_2B_ADD_REMOVE))
def test_pld_matches_notes_under_add_remove(sigma):
    eps, method, _ = compose_epsilon([PoissonGaussianReleases(sigma, 0.05, 1000, "add_remove")], 1e-5)
    assert method == "pld"
    assert eps == pytest.approx(NOTES_2B_ADD_REMOVE[sigma], abs=2e-5)


@pytest.mark.parametrize("sigma", sorted(NOTES_2B_SUBSTITUTE))
def test_pld_matches_notes_under_substitute(sigma):
    eps, method, _ = compose_epsilon([PoissonGaussianReleases(sigma, 0.05, 1000, "substitute")], 1e-5)
    assert method == "pld"
    assert eps == pytest.approx(NOTES_2B_SUBSTITUTE[sigma], abs=2e-5)


@pytest.mark.parametrize("sigma", sorted(NOTES_2B_RDP_ADD_REMOVE))
def test_add_remove_rdp_matches_notes(sigma):
    # dp_accounting's default RdpAccountant orders.
    orders = np.concatenate([1.0 + np.arange(1, 100) / 10.0, np.arange(11, 64), [128.0, 256.0, 512.0, 1024.0]])
    rdp = 1000 * poisson_gaussian_rdp(sigma, 0.05, orders, "add_remove")
    assert rdp_to_epsilon(orders, rdp, 1e-5)[0] == pytest.approx(NOTES_2B_RDP_ADD_REMOVE[sigma], abs=1e-5)


def rdp_substitute_mpmath(q: float, s: float, alpha: float) -> float:
    """Rényi divergence of (1−q)N(0,s²)+qN(1,s²) from (1−q)N(0,s²)+qN(−1,s²), by 30-digit quadrature."""
    with mp.workdps(30):
        q, s, alpha = mp.mpf(q), mp.mpf(s), mp.mpf(alpha)

        def density(x, shift):
            return (1 - q) * mp.npdf(x, 0, s) + q * mp.npdf(x, shift, s)

        def integrand(x):
            return density(x, 1) ** alpha * density(x, -1) ** (1 - alpha)

        value = mp.quad(integrand, [-mp.inf, -1, 0, 1, 2 * alpha - 1, mp.inf])
        return float(mp.log(value) / (alpha - 1))


@pytest.mark.parametrize(
    ("q", "sigma", "alpha"), [(0.05, 1.0, 2.0), (0.05, 1.0, 7.5), (0.01, 2.0, 32.0), (0.3, 0.8, 3.0)]
)
def test_substitute_rdp_matches_mpmath(q, sigma, alpha):
    # Substitute: noise std 2σC, so s = 2σ in units of the per-row bound C.
    ours = poisson_gaussian_rdp(sigma, q, np.array([alpha]), "substitute")[0]
    assert ours == pytest.approx(rdp_substitute_mpmath(q, 2 * sigma, alpha), rel=1e-6)


@pytest.mark.parametrize("neighbouring", ["substitute", "add_remove"])
def test_full_batch_is_the_gaussian_mechanism(neighbouring):
    # q = 1: every row is used, the release is a Gaussian mechanism with Δ/std = 1/σ (closed form).
    orders = np.array([2.0, 5.0, 20.0])
    assert poisson_gaussian_rdp(1.5, 1.0, orders, neighbouring) == pytest.approx(orders / (2 * 1.5**2), rel=1e-9)
    eps = compose_epsilon([PoissonGaussianReleases(3.0, 1.0, 10, neighbouring)], 1e-5)[0]
    assert eps == pytest.approx(gaussian_epsilon(1e-5, 10 / (2 * 3.0**2)), abs=1e-4)


@pytest.mark.parametrize("neighbouring", ["substitute", "add_remove"])
def test_bound_orderings(neighbouring):
    event = PoissonGaussianReleases(1.5, 0.02, 500, neighbouring)
    eps_pld = compose_epsilon([event], 1e-6)[0]
    eps_rdp = rdp_to_epsilon(DEFAULT_ORDERS, event.rdp_at(DEFAULT_ORDERS), 1e-6)[0]
    no_sampling = gaussian_epsilon(1e-6, 500 / (2 * 1.5**2))
    assert eps_pld < eps_rdp < no_sampling  # PLD tight, RDP looser, subsampling amplifies
    smaller_q = compose_epsilon([PoissonGaussianReleases(1.5, 0.01, 500, neighbouring)], 1e-6)[0]
    more_noise = compose_epsilon([PoissonGaussianReleases(2.0, 0.02, 500, neighbouring)], 1e-6)[0]
    assert smaller_q < eps_pld and more_noise < eps_pld


def test_substitute_costs_more_than_add_remove_at_equal_noise_std():
    # Same noise std (σ_sub = σ_ar / 2): replacing a row moves the sum twice as far (notes §2(b): 18.74 vs 10.99).
    substitute = compose_epsilon([PoissonGaussianReleases(0.5, 0.05, 1000, "substitute")], 1e-5)[0]
    add_remove = compose_epsilon([PoissonGaussianReleases(1.0, 0.05, 1000, "add_remove")], 1e-5)[0]
    assert substitute == pytest.approx(18.74232, abs=1e-4)  # notes §2(b), dp_accounting PLD / Fourier S
    assert add_remove < substitute


def test_event_round_trips_through_json():
    event = PoissonGaussianReleases(2.5, 0.01, 1234, "add_remove", "dpadvi")
    again = event_from_dict(json.loads(json.dumps(event.to_dict())))
    assert again == event


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"noise_multiplier": 0.0}, "noise_multiplier"),
        ({"noise_multiplier": math.inf}, "noise_multiplier"),
        ({"sampling_rate": 0.0}, "sampling_rate"),
        ({"sampling_rate": 1.5}, "sampling_rate"),
        ({"count": -1}, "count"),
        ({"neighbouring": "replace"}, "neighbouring"),
    ],
)
def test_event_rejects_bad_settings(kwargs, name):
    settings = {"noise_multiplier": 1.0, "sampling_rate": 0.1, "count": 10, "neighbouring": "substitute"} | kwargs
    with pytest.raises(ValueError, match=f"`{name}`"):
        PoissonGaussianReleases(**settings)


@pytest.mark.parametrize("neighbouring", ["substitute", "add_remove"])
def test_calibration_round_trip(neighbouring):
    sigma = poisson_gaussian_noise_multiplier(1.0, 1e-5, 0.05, 1000, neighbouring)
    spent = compose_epsilon([PoissonGaussianReleases(sigma, 0.05, 1000, neighbouring)], 1e-5)[0]
    assert spent <= 1.0
    # Smallest within the 1e-3 tolerance: 0.2 % less noise overshoots.
    assert compose_epsilon([PoissonGaussianReleases(sigma / 1.002, 0.05, 1000, neighbouring)], 1e-5)[0] > 1.0


def test_calibration_matches_dp_accounting_planning_value():
    # notes §2(b) "Budget planning": dp_accounting calibrate_dp_mechanism (PLD), add/remove, ε = 1 → 5.99045.
    sigma = poisson_gaussian_noise_multiplier(1.0, 1e-5, 0.05, 1000, "add_remove")
    assert sigma == pytest.approx(5.99045, rel=1.5e-3)


def test_calibration_counts_earlier_releases_and_refuses_when_nothing_is_left():
    # ε = 1 over 100 iterations at q = 0.02 (σ ≈ 0.77 alone, 0.82 after the earlier releases): the same properties
    # as at ε = 2 over 500 at q = 0.01, in 13.4 CPU-seconds instead of 27.8 (Python 3.11).
    earlier = (GaussianReleases(100.0, 100),)
    alone = poisson_gaussian_noise_multiplier(1.0, 1e-5, 0.02, 100)
    after = poisson_gaussian_noise_multiplier(1.0, 1e-5, 0.02, 100, earlier=earlier)
    assert after > alone
    total = compose_epsilon([*earlier, PoissonGaussianReleases(after, 0.02, 100)], 1e-5)[0]
    assert total <= 1.0
    with pytest.raises(ValueError, match="already used up"):
        poisson_gaussian_noise_multiplier(0.5, 1e-5, 0.01, 500, earlier=(GaussianReleases(1.0, 100),))


def test_calibration_is_kept_per_public_settings_and_refusals_are_not(monkeypatch):
    # A pure function of public settings: the same question (numpy scalars and Python numbers alike) is
    # answered from the cache without composing anything; other settings, and refusals, are searched afresh.
    from pymc_dp.accounting import calibrate

    first = poisson_gaussian_noise_multiplier(1.0, 1e-5, 0.05, 1000, "add_remove")
    composed = []
    monkeypatch.setattr(calibrate, "compose_epsilon", lambda *a: composed.append(a) or compose_epsilon(*a))
    assert poisson_gaussian_noise_multiplier(np.float64(1.0), 1e-5, 0.05, np.int64(1000), "add_remove") == first
    assert composed == []
    other = poisson_gaussian_noise_multiplier(1.0, 1e-5, 0.05, 500, "add_remove")
    assert composed and other < first / 1.2  # half the iterations need less noise (σ ∝ √T roughly)
    for _ in range(2):  # a refusal is raised each time (never cached as an answer)
        composed.clear()
        with pytest.raises(ValueError, match="already used up"):
            poisson_gaussian_noise_multiplier(0.5, 1e-5, 0.01, 500, earlier=(GaussianReleases(1.0, 100),))
        assert composed


def test_gaussian_and_poisson_gaussian_compose_as_one_pld():
    # The PLD of the composition is at most the sum of the parts' ε (basic composition) and at least each part.
    gaussian = GaussianReleases(30.0, 1000)
    subsampled = PoissonGaussianReleases(2.0, 0.05, 1000, "substitute")
    eps, method, _ = compose_epsilon([gaussian, subsampled], 1e-5)
    parts = [compose_epsilon([e], 1e-5)[0] for e in (gaussian, subsampled)]
    assert method == "pld"
    assert max(parts) < eps < sum(parts)
    assert eps <= compose_epsilon([gaussian, subsampled], 1e-5)[0] + 1e-12  # deterministic


def test_a_repeated_composition_comes_from_the_cache_and_equals_the_uncached_one():
    # PrivateRun prices its events before the run and records the same events after it: composed once.
    from pymc_dp.accounting.composition import _cached_composition, _composition

    events = (GaussianReleases(30.0, 1000), PoissonGaussianReleases(2.0, 0.05, 1000, "substitute"))
    _cached_composition.cache_clear()
    first = compose_epsilon(list(events), 1e-5)
    assert compose_epsilon(events, 1e-5) == first == _composition(events, 1e-5)
    assert _cached_composition.cache_info().hits == 1
    # 0, 0.0 and False are cached apart: pure releases hold at δ = 0, but a bool δ is still refused
    pure = (PureDPReleases(0.5, 2),)
    assert compose_epsilon(pure, 0)[0] == compose_epsilon(pure, 0.0)[0] == 1.0
    with pytest.raises(TypeError, match="delta"):
        compose_epsilon(pure, False)
    with pytest.raises(ValueError, match="delta"):  # an invalid δ raises every time (errors are not cached)
        compose_epsilon(events, 1.5)
    with pytest.raises(ValueError, match="delta"):
        compose_epsilon(events, 1.5)


@pytest.mark.parametrize(("count", "expected_method"), [(1, "pld+rdp"), (100, "rdp")])
def test_rdp_events_compose_by_the_tighter_of_all_rdp_and_a_delta_split(count, expected_method):
    # A small RDP event beside a large subsampled one: the δ split wins (the PLD part is much tighter
    # than its RDP curve); a larger one: all-RDP wins (splitting δ costs more than PLD saves).
    subsampled = PoissonGaussianReleases(2.0, 0.05, 1000, "substitute")
    barker_like = RdpReleases(tuple(range(2, 40)), tuple(1e-4 * a for a in range(2, 40)), count)
    eps, method, _ = compose_epsilon([subsampled, barker_like], 1e-5)
    orders = np.unique(np.concatenate([DEFAULT_ORDERS, np.arange(2.0, 40.0)]))
    all_rdp = rdp_to_epsilon(orders, subsampled.rdp_at(orders) + barker_like.rdp_at(orders), 1e-5)[0]
    assert method == expected_method
    assert eps <= all_rdp + 1e-12
    assert (eps < all_rdp) == (method == "pld+rdp")
    assert eps > compose_epsilon([subsampled], 1e-5)[0]


def test_budget_holds_dpadvi_and_penalty_runs():
    budget = PrivacyBudget(epsilon=6.0, delta=1e-5, n_rows=1000)
    budget.charge([PoissonGaussianReleases(2.0, 0.05, 1000, "substitute")], "dpadvi")
    budget.charge([GaussianReleases(60.0, 1000)], "penalty")
    spent = budget.spent()
    assert spent.method == "pld" and spent.epsilon <= 6.0
    assert spent.epsilon == pytest.approx(
        compose_epsilon([PoissonGaussianReleases(2.0, 0.05, 1000), GaussianReleases(60.0, 1000)], 1e-5)[0]
    )


@pytest.mark.parametrize("with_rdp_event", [False, True])
def test_pure_releases_are_never_dropped_beside_poisson_gaussian_ones(with_rdp_event):
    # A Laplace release (ε = 5) composed with DPADVI's releases costs at least its own ε, and at most the
    # basic sum; the all-RDP bound of everything is also an upper bound the result may not exceed.
    subsampled = PoissonGaussianReleases(3.0, 0.02, 500)
    pure = PureDPReleases(5.0)
    events = [subsampled, pure]
    if with_rdp_event:
        events.append(RdpReleases(tuple(range(2, 40)), tuple(1e-4 * a for a in range(2, 40)), 1))
    eps, method, _ = compose_epsilon(events, 1e-5)
    alone = compose_epsilon([e for e in events if e is not pure], 1e-5)[0]
    assert eps >= 5.0 and eps > alone
    assert eps <= 5.0 + alone + 1e-9  # pure ε adds to the rest's (ε, δ): basic composition
    orders = np.unique(np.concatenate([DEFAULT_ORDERS, np.arange(2.0, 40.0)]))
    all_rdp = sum(e.rdp_at(orders) for e in events)
    assert eps <= rdp_to_epsilon(orders, all_rdp, 1e-5)[0] + 1e-9
    assert method in ("rdp", "pld+rdp") or method.startswith("pure_sum+")


def test_zero_count_pld_events_beside_rdp_events():
    barker_like = RdpReleases(tuple(range(2, 40)), tuple(1e-3 * a for a in range(2, 40)), 10)
    eps = compose_epsilon([PoissonGaussianReleases(2.0, 0.05, 0), barker_like], 1e-5)[0]
    assert eps == pytest.approx(compose_epsilon([barker_like], 1e-5)[0], rel=1e-9)


def test_pld_discretization_is_the_default_up_to_epsilon_10_then_doubles_with_the_bound():
    from pymc_dp.accounting.pld import PLD_VALUE_DISCRETIZATION, pld_discretization

    assert [pld_discretization(e) for e in (0.1, 10.0, math.inf)] == [PLD_VALUE_DISCRETIZATION] * 3
    assert pld_discretization(10.5) == pld_discretization(20.0) == 2 * PLD_VALUE_DISCRETIZATION
    assert pld_discretization(20.1) == pld_discretization(40.0) == 4 * PLD_VALUE_DISCRETIZATION
    bounds = np.geomspace(10, 1e3, 50)
    assert np.all(np.array([pld_discretization(b) for b in bounds]) / bounds <= 2 * PLD_VALUE_DISCRETIZATION / 10)


@pytest.mark.parametrize("mu", [3.0, 10.0])
def test_a_coarser_pld_at_large_epsilon_is_still_an_upper_bound_and_tight(mu):
    # One Gaussian composition of total μ at ε ≈ 15 and ≈ 31: the closed form (Balle & Wang 2018,
    # gaussian_epsilon) against the PLD at the coarser interval the accountant uses there, with a
    # Poisson-Gaussian release beside it (so the PLD route is taken).
    from pymc_dp.accounting.pld import gaussian_pld, pld_discretization, pld_epsilon

    exact = gaussian_epsilon(1e-5, mu)
    coarse = pld_epsilon([gaussian_pld(mu, pld_discretization(2 * exact))], 1e-5)
    assert exact <= coarse <= exact * (1 + 1e-4)
    events = [GaussianReleases(1.0 / math.sqrt(2.0 * mu), 1), PoissonGaussianReleases(50.0, 0.01, 10, "substitute")]
    eps, method, _ = compose_epsilon(events, 1e-5)
    assert method == "pld" and exact < eps <= exact * (1 + 1e-3)


def test_the_root_search_returns_a_point_on_the_private_side_within_its_tolerance():
    from pymc_dp.accounting.calibrate import _largest_root_below

    calls = []

    def excess(x):  # increasing, with 1e-4 steps like a discretised PLD's ε, root at x = log(1/3)
        calls.append(x)
        return math.floor((math.exp(x) * 3 - 1) * 1e4) / 1e4 + 1e-4

    x = _largest_root_below(excess, -60.0, 3.0, tolerance=1e-8)
    assert excess(x) <= 0 < excess(x + 1e-8 + 1e-12) or excess(x + 2e-8) > 0
    assert abs(math.exp(x) * 3 - 1) < 2e-4 and len(calls) < 40
    assert _largest_root_below(lambda x: x - 10.0, 0.0, 5.0) == 5.0  # no root inside: the high end


def test_calibration_at_a_large_epsilon_meets_its_target_to_1e_6():
    # A run calibrated to ε = 50 behind a Poisson-Gaussian start (the tests' workflow fixture took
    # minutes here before the PLD's interval grew with ε).
    from pymc_dp.accounting.calibrate import calibrate_releasers

    class Releaser:
        needs_calibration = True
        mu = None

        def set_noise_for_mu(self, mu):
            self.mu = mu

        def privacy_events(self, k):
            return [GaussianReleases(1.0 / math.sqrt(2.0 * self.mu), k)]

    start = (PoissonGaussianReleases(1.0, 0.05, 100, "substitute"),)
    (step,) = calibrate_releasers([Releaser()], 90, 50.0, 1e-5, earlier=start)
    eps = compose_epsilon([*start, *step.privacy_events(90)], 1e-5)[0]
    assert 50.0 * (1 - 1e-6) <= eps <= 50.0
