"""The noise of a sufficient-statistics release: the mechanism and sampler checks, the pricing, one noisy release.

Split out of :mod:`pymc_dp.exponential_family.release`. Everything here but :func:`noisy_release`
is a function of public settings only (checked and priced before any row is read);
:func:`noisy_release` asks the mechanism (:class:`pymc_dp.mechanisms.PrivateSufficientStatistics`)
for one release, inside the run that charged it.

Neighbouring relation: substitute (one row replaced, N public).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pymc_dp._validation import check_unit_interval_open
from pymc_dp.accounting.calibrate import noise_multiplier_for_target
from pymc_dp.accounting.composition import compose_epsilon
from pymc_dp.exponential_family.families import ExponentialFamily, LinearRegression, LogisticRegression
from pymc_dp.mechanisms import PrivateSufficientStatistics
from pymc_dp.mechanisms.clipped_rows import PrivateClippedCount

__all__ = ["NOISE_SAMPLERS", "check_mechanism", "check_noise", "noise_grid_scale", "noisy_release", "price_release"]

NOISE_SAMPLERS = ("discrete", "continuous")


def check_noise(noise: Any) -> str:
    if not isinstance(noise, str) or noise not in NOISE_SAMPLERS:
        raise ValueError(f"`noise` must be one of {list(NOISE_SAMPLERS)}. Found {noise!r}.")
    return noise


def noise_grid_scale(family: ExponentialFamily, mechanism: str, setting: float) -> float | None:
    """The noise scale a discrete release's grid is built for (public): Δ₁/ε or τΔ₂; None when it is 0."""
    scale = family.l1_sensitivity() / setting if mechanism == "laplace" else setting * family.l2_sensitivity()
    return scale if scale > 0.0 else None


def noisy_release(
    private: PrivateSufficientStatistics, mechanism: str, noise: str, setting: float, source: Any
) -> tuple[np.ndarray, float]:
    """One release of ``private`` at ``setting`` (ε or τ) with the chosen mechanism and sampler."""
    if noise == "continuous":
        return (
            private.laplace_noisy(setting, source)
            if mechanism == "laplace"
            else private.gaussian_noisy(setting, source)
        )
    if private.grid is None:  # zero sensitivity, no grid: the statistics are public, released without noise
        return (
            private.laplace_noisy(setting, source)
            if mechanism == "laplace"
            else private.gaussian_noisy(setting, source)
        )
    if mechanism == "laplace":
        return private.discrete_laplace_noisy(setting, source)
    return private.discrete_gaussian_noisy(setting, source)


def check_mechanism(family: ExponentialFamily, mechanism: Any, delta: Any) -> float:
    """δ of the release after checking ``mechanism`` and ``delta`` (nothing read, nothing charged)."""
    if mechanism not in ("laplace", "gaussian"):
        raise ValueError(f"`mechanism` must be 'laplace' or 'gaussian'. Found {mechanism!r}.")
    if mechanism == "laplace":
        if delta not in (None, 0, 0.0):
            raise ValueError(f"`delta` must be None for a Laplace release, which is (ε, 0)-DP. Found {delta!r}.")
        return 0.0
    if not (isinstance(family, LinearRegression | LogisticRegression) or getattr(family, "gaussian_noise", False)):
        raise ValueError(
            "`mechanism`='gaussian' is supported for linear_regression, logistic_regression and poisson_regression "
            "only (their "
            f"noise-aware likelihoods model Gaussian noise exactly). Found the {family.name} family."
        )
    if delta is None:
        raise ValueError("`delta` must be given with mechanism='gaussian', in (0, 1). Found None.")
    return check_unit_interval_open("delta", delta)


def price_release(
    mechanism: str,
    epsilon: float,
    delta: float,
    shares: list[float],
    label: str,
    anchor_label: str,
    check_share: float = 0.0,
    check_label: str = "",
) -> tuple[float, list[float], float | None, tuple]:
    """(the main release's setting, each anchor's, the clipping check's, the events): ε or τ per release.

    From public settings only. The clipping check (``check_share`` > 0:
    :mod:`pymc_dp.exponential_family.clipping_check`) takes ``check_share`` of the budget and
    the other releases share the rest as without it (the anchors' shares scaled by
    1 − ``check_share``). Laplace: anchor j gets sharesⱼ·ε, the check its share of ε and the
    statistics the rest, rounded down until the accountant's own sum of the events never exceeds
    ε. Gaussian: τ calibrated to (ε, δ) for one release, then τ/√(share) for each release (the
    statistics' share being what the others leave), whose 1/τ² add up to the target's (Dong, Roth
    and Su 2022, Corollary 3.3). The check's setting is None without it. Reads no data.
    """
    shares = [share * (1.0 - check_share) for share in shares]
    main_share = 1.0 - check_share - sum(shares)
    if mechanism == "laplace":
        anchor_settings = [share * epsilon for share in shares]
        check_setting = check_share * epsilon if check_share > 0.0 else None
        check_events = (
            () if check_setting is None else tuple(PrivateClippedCount.laplace_events(check_setting, check_label))
        )

        def laplace_events(main: float) -> tuple:
            anchors = tuple(
                e for value in anchor_settings for e in PrivateSufficientStatistics.laplace_events(value, anchor_label)
            )
            return tuple(PrivateSufficientStatistics.laplace_events(main, label)) + anchors + check_events

        noise_setting = epsilon - math.fsum(anchor_settings) - (check_setting or 0.0)
        events = laplace_events(noise_setting)
        while compose_epsilon(events, 0.0)[0] > epsilon:  # the accountant's own sum, rounded: never above ε
            noise_setting = float(np.nextafter(noise_setting, 0.0))
            events = laplace_events(noise_setting)
        return noise_setting, anchor_settings, check_setting, events
    # τ from the public target only; the releases' 1/τ² add up to the target's
    noise_multiplier = noise_multiplier_for_target(epsilon, delta, 1)
    noise_setting = noise_multiplier / math.sqrt(main_share)
    anchor_settings = [noise_multiplier / math.sqrt(share) for share in shares]
    check_setting = noise_multiplier / math.sqrt(check_share) if check_share > 0.0 else None
    events = tuple(PrivateSufficientStatistics.gaussian_events(noise_setting, label)) + tuple(
        e for value in anchor_settings for e in PrivateSufficientStatistics.gaussian_events(value, anchor_label)
    )
    if check_setting is not None:
        events += tuple(PrivateClippedCount.gaussian_events(check_setting, check_label))
    return noise_setting, anchor_settings, check_setting, events
