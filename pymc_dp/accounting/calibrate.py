"""Calibration: the noise that meets a target (ε, δ), always rounded towards privacy.

Every calibration in pymc-dp lives here: the Gaussian noise multiplier for a count of
releases (closed form, Sommer et al. 2019, Lemma 12), the Poisson-subsampled Gaussian noise
multiplier (bisection on the composed ε), and the per-iteration μ the step methods of one run
are set to (:func:`calibrate_releasers`; each step splits its μ between its releases).
Floating-point results are moved with :func:`round_towards_privacy` until the target
provably holds in floating point: a calibrated mechanism is never even one ulp less private
than asked.
"""

from __future__ import annotations

import copy
import functools
import math
from typing import Any

from pymc_dp._validation import (
    check_finite_positive,
    check_neighbouring,
    check_positive_int,
    check_sampling_rate,
    check_unit_interval_open,
)
from pymc_dp.accounting._floats import round_towards_privacy
from pymc_dp.accounting.budget import PrivacyBudgetExceededError
from pymc_dp.accounting.composition import compose_epsilon
from pymc_dp.accounting.events import GaussianReleases, PoissonGaussianReleases, PrivacyEvent
from pymc_dp.accounting.gaussian import _check_mu, gaussian_mu_for_target

__all__ = [
    "CALIBRATION_MARGIN",
    "calibrate_releasers",
    "noise_multiplier_for_target",
    "poisson_gaussian_noise_multiplier",
    "round_towards_privacy",
]

#: Relative margin by which calibration aims below a target ε, so that the ε recomputed from
#: the calibrated noise (by a root finder accurate to ~1e-13) never exceeds the target.
CALIBRATION_MARGIN = 1e-10


def noise_multiplier_for_target(epsilon: float, delta: float, count: int, mu_spent: float = 0.0) -> float:
    """Noise multiplier τ = σ/Δ so that ``count`` releases plus ``mu_spent`` stay (ε, δ)-DP.

    Each release at multiplier τ costs μ = 1/(2τ²); the result is the smallest τ (up to
    rounding, always on the private side) with mu_spent + count/(2τ²) ≤ μ*(ε, δ).

    Parameters
    ----------
    epsilon, delta : float
        Target (ε, δ).
    count : int
        Number of Gaussian releases to be made at the same τ.
    mu_spent : float, default 0
        μ already spent by other mechanisms that will be composed with these releases.

    Returns
    -------
    float
        τ > 0.

    Raises
    ------
    ValueError
        If ``mu_spent`` already uses up the target.
    """
    count = check_positive_int("count", count)
    mu_spent = _check_mu(mu_spent)
    epsilon = check_finite_positive("epsilon", epsilon)
    mu_total = gaussian_mu_for_target(epsilon * (1.0 - CALIBRATION_MARGIN), delta)
    mu_left = mu_total - mu_spent
    if mu_left <= 0.0:
        raise ValueError(
            f"`mu_spent` must be below the μ allowed by (ε={epsilon}, δ={delta}), which is {mu_total:.6g}. "
            f"Found {mu_spent!r}."
        )
    tau = math.sqrt(count / (2.0 * mu_left))
    return round_towards_privacy(tau, lambda t: mu_spent + count / (2.0 * t * t) <= mu_total, math.inf)


def poisson_gaussian_noise_multiplier(
    epsilon: float,
    delta: float,
    sampling_rate: float,
    iterations: int,
    neighbouring: str = "substitute",
    earlier: tuple = (),
    relative_tolerance: float = 1e-3,
) -> float:
    """Smallest noise multiplier σ (within ``relative_tolerance``, on the private side) meeting a target.

    Finds σ such that ``earlier`` plus ``iterations`` Poisson-subsampled Gaussian releases at
    (σ, q) compose to at most ``epsilon`` at ``delta``, as :func:`compose_epsilon` reports it
    (PLD where it is tighter). Regula falsi on log σ (:func:`_largest_root_below`); ε is decreasing
    in σ. The returned σ is always one whose composed ε was checked to be ≤ ``epsilon``.

    A pure function of public settings, so the last results are kept (as :func:`compose_epsilon`
    keeps its compositions): a search composes a PLD at each of a dozen σ, 1.4–19 s of CPU
    between them (ε 1–4, q 10⁻³–0.1, 10–10⁴ iterations), and the planner and the fit that
    follows it, or a refit with the same settings, ask for the same σ.

    Raises
    ------
    ValueError
        If ``earlier`` alone already spends ``epsilon``, or if not even σ = 10⁴ fits.
    """
    epsilon = check_finite_positive("epsilon", epsilon)
    delta = check_unit_interval_open("delta", delta)
    q = check_sampling_rate("sampling_rate", sampling_rate)
    if isinstance(iterations, bool) or int(iterations) != iterations or iterations < 1:
        raise ValueError(f"`iterations` must be a positive integer. Found {iterations!r}.")
    neighbouring = check_neighbouring("neighbouring", neighbouring)
    arguments = (float(epsilon), float(delta), float(q), int(iterations), neighbouring, tuple(earlier))
    try:
        hash((arguments, relative_tolerance))
    except TypeError:  # an unhashable event field or tolerance: searched without the cache
        return _poisson_gaussian_noise_multiplier(*arguments, relative_tolerance)
    return _cached_poisson_gaussian_noise_multiplier(*arguments, relative_tolerance)


@functools.lru_cache(maxsize=32, typed=True)
def _cached_poisson_gaussian_noise_multiplier(*arguments) -> float:
    return _poisson_gaussian_noise_multiplier(*arguments)


def _poisson_gaussian_noise_multiplier(
    epsilon: float,
    delta: float,
    q: float,
    iterations: int,
    neighbouring: str,
    earlier: tuple,
    relative_tolerance: float,
) -> float:
    """:func:`poisson_gaussian_noise_multiplier` on checked arguments, without its cache."""

    def spent(sigma: float) -> float:
        event = PoissonGaussianReleases(sigma, q, int(iterations), neighbouring, "calibration")
        return compose_epsilon((*earlier, event), delta)[0]

    low, high = 1e-2, 1e4
    if earlier and compose_epsilon(earlier, delta)[0] >= epsilon:
        raise ValueError(f"`epsilon`={epsilon:g} is already used up by earlier releases. Found nothing left.")
    if spent(high) > epsilon:
        raise ValueError(
            f"`epsilon`={epsilon:g} is too small for {iterations} iterations at sampling rate {q:g}: even a noise "
            "multiplier of 1e4 exceeds it. Found no σ that fits."
        )
    # The largest x = −log σ whose ε is within the target (ε decreases in σ): σ = exp(−x) on the private side.
    x = _largest_root_below(
        lambda x: spent(math.exp(-x)) - epsilon, -math.log(high), -math.log(low), math.log1p(relative_tolerance)
    )
    return math.exp(-x)


def calibrate_releasers(
    steps: list[Any],
    k: int,
    epsilon: float | None,
    delta: float,
    earlier: tuple[PrivacyEvent, ...] = (),
) -> list[Any]:
    """Copies of ``steps`` with unset noise calibrated so that ``earlier`` plus ``k`` iterations meet ε.

    ``steps`` are releasers (the DP step methods): objects with ``needs_calibration``,
    ``set_noise_for_mu(μ)`` and ``privacy_events(k)``; only public settings are read.

    Every step left unset gets the same μ per iteration. When everything else is Gaussian
    the largest such μ is found in closed form (μ adds); otherwise by bisection on the
    composed ε (RDP composition with the other events), which is increasing in μ.
    """
    planned = [copy.copy(s) for s in steps]
    unset = [s for s in planned if s.needs_calibration]
    if not unset:
        return planned
    if epsilon is None:
        names = ", ".join(type(s).__name__ for s in unset)
        raise ValueError(f"`epsilon` must be given when a step leaves its noise unset ({names}). Found epsilon=None.")
    target = epsilon * (1.0 - CALIBRATION_MARGIN)
    fixed = list(earlier) + [e for s in planned if not s.needs_calibration for e in s.privacy_events(k)]
    refusal = PrivacyBudgetExceededError(
        f"No privacy is left to calibrate the noise: the target (ε={epsilon:g}, δ={delta:g}) is already used up by "
        "earlier runs or by the steps whose noise is fixed. Nothing was run or charged."
    )

    def set_all(mu_per_iteration: float) -> list[PrivacyEvent]:
        for s in unset:
            s.set_noise_for_mu(mu_per_iteration)
        return fixed + [e for s in unset for e in s.privacy_events(k)]

    if all(isinstance(e, GaussianReleases) for e in fixed):
        mu_left = gaussian_mu_for_target(target, delta) - sum(e.mu for e in fixed)
        if mu_left <= 0:
            raise refusal
        set_all(mu_left / (k * len(unset)))
        return planned
    if compose_epsilon(fixed, delta)[0] >= target:
        raise refusal

    def excess(log_mu: float) -> float:
        return compose_epsilon(set_all(math.exp(log_mu)), delta)[0] - target

    set_all(
        math.exp(_largest_root_below(excess, -60.0, math.log(gaussian_mu_for_target(target, delta) / (k * len(unset)))))
    )
    return planned


def _largest_root_below(excess: Any, low: float, high: float, tolerance: float = 1e-8) -> float:
    """A point ``x`` in [low, high] with ``excess(x) <= 0``, within ``tolerance`` of where ``excess`` turns positive.

    ``excess`` is increasing; ``excess(low) <= 0`` is assumed. Regula falsi with the Illinois rule
    (superlinear: a dozen evaluations where bisection takes forty, each a PLD composition), keeping
    a bracket [low, high] with ``excess(low) <= 0 < excess(high)`` and returning its low end, so the
    result never exceeds the target whatever the accuracy.
    """
    f_low, f_high = excess(low), excess(high)
    if f_high <= 0:
        return high
    side = 0
    while high - low > tolerance:
        middle = (low * f_high - high * f_low) / (f_high - f_low)
        if not low < middle < high or high - low > 8.0:  # far apart (or no progress): bisect
            middle = 0.5 * (low + high)
        f_middle = excess(middle)
        if f_middle <= 0:
            low, f_low = middle, f_middle
            if side == -1:
                f_high *= 0.5
            side = -1
        else:
            high, f_high = middle, f_middle
            if side == 1:
                f_low *= 0.5
            side = 1
    return low
