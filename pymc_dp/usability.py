"""When a DP result is a usable posterior: the thresholds, the flags and the warning they raise.

Shared by the planner (:mod:`pymc_dp.planning`, which predicts before a run), the diagnostics
(:mod:`pymc_dp.diagnostics`, which measure the released draws after it) and DPADVI (which
flags its own fit), so that the three agree and DPADVI needs neither the planner nor the
diagnostics. Everything here is a function of public settings or of released values
(post-processing): nothing reads data or releases anything.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pymc_dp.clip_math import sensitivity_of_clipped_sum

__all__ = [
    "DPADVI_MAX_MEAN_ERROR",
    "MIN_USEFUL_ESS",
    "PoorMixingError",
    "PoorMixingWarning",
    "bounds_clipping_note",
    "bounds_clipping_problem",
    "clipping_problem",
    "dpadvi_mean_error",
    "share_is_material",
]

#: ESS per parameter below which a run is not a usable posterior (as :mod:`pymc_dp.diagnostics` flags).
MIN_USEFUL_ESS = 100.0
#: DPADVI's expected mean error (in posterior sds) above which its fit is not a usable posterior.
DPADVI_MAX_MEAN_ERROR = 0.5


class PoorMixingWarning(UserWarning):
    """The released draws are not a usable posterior (see ``dp_diagnostics``)."""


class PoorMixingError(RuntimeError):
    """Raised with ``on_poor_mixing="raise"``; ``result`` holds the (published, priced) result anyway.

    The run was charged: its result is kept on the error so that nothing paid for is lost.
    """

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


def dpadvi_mean_error(
    noise_multiplier: float, sampling_rate: float, n_rows: int, iterations: int, neighbouring: str = "substitute"
) -> float:
    """Expected error of DPADVI's (averaged) mean from the gradient noise, in posterior standard deviations.

    One released gradient carries noise of standard deviation σκC/q per coordinate; a step
    of one posterior standard deviation s = 2/(C√N) (per-row score ≈ C/2, as for the
    samplers) changes the data part of the gradient by about N (C/2)² s = C√N/2. Averaging
    the second half of the T iterates divides the noise by about √(T/2), so the mean's
    error is about 2σκ / (q √N √(T/2)) posterior standard deviations (C cancels).
    """
    kappa = sensitivity_of_clipped_sum(1.0, neighbouring)  # κ: 2 substitute, 1 add/remove
    return 2 * noise_multiplier * kappa / (sampling_rate * math.sqrt(n_rows) * math.sqrt(max(iterations / 2, 1)))


#: What to change when too many rows are clipped, and when the clip check's noise hides the answer, in
#: the arguments of the object that set the bound: pmdp.sample's private bound (``"auto"``), or DPADVI's
#: ``grad_clip`` (a number it is given) checked by a release of ``clip_check_share`` of its ε.
_CLIPPING_ADVICE = {
    "sample": (
        "raise clip_margin or clip_quantile (pmdp.sample), or use a likelihood with bounded scores",
        "give llr_clip (and grad_clip) as numbers from public knowledge, or raise clip_epsilon_share or N·ε",
    ),
    "DPADVI": (
        "raise DPADVI's grad_clip, or use a likelihood with bounded scores",
        "raise DPADVI's clip_check_share or N·ε",
    ),
}


#: Noise sds by which a noisy clipped share must exceed the bias threshold 1/√N before a result is flagged.
CLIPPING_MARGIN_SDS = 3.0
#: The same margin for a statistics release's check of its public bounds, whose noise sd is sized to a
#: tenth of the threshold wherever the budget allows
#: (:data:`pymc_dp.exponential_family.clipping_check.CLIPPING_CHECK_RESOLUTION`): two sds are then a
#: fifth of it, so noise alone flags a share of 0.8× the threshold with probability 3·10⁻⁵ (discrete
#: Gaussian noise) or 1.7·10⁻³ (discrete Laplace, the default), while a share of 1.4× the threshold (a
#: bias of 1.4 posterior sds per spread the rows moved) is flagged with probability 0.98 or 0.97 (0.84
#: or 0.88 with three sds).
RELEASE_CLIPPING_MARGIN_SDS = 2.0


def share_is_material(share: float, share_sd: float, threshold: float, margin_sds: float = CLIPPING_MARGIN_SDS) -> bool:
    """Whether a noisy share of clipped rows exceeds ``threshold`` (1/√N) by ``margin_sds`` noise sds.

    The rule of every clipping check (the samplers' private clip bound, DPADVI's ``grad_clip``
    and the released statistics' public bounds, the last with
    :data:`RELEASE_CLIPPING_MARGIN_SDS`): post-processing of a released count.
    """
    return share - margin_sds * share_sd > threshold


def clipping_problem(clipping: dict[str, Any] | None, setter: str = "sample") -> str | None:
    """A plain-words problem when the private clip bound clips too many rows (None when it does not).

    ``clipping`` is the ``clip_bound`` record of a :func:`pymc_dp.sample` run. The last
    release's noisy share of rows whose score norm is above the bound (at its reference
    point) is compared with 1/√N: the first-order clipping bias of the posterior mean is about
    √N × that share × (the clipped rows' excess over the bound, relative to a typical score)
    posterior standard deviations, so above 1/√N it is of the order of one posterior standard
    deviation or more. The share is noisy: it flags only when it exceeds 1/√N by three of its
    standard deviations (``share_above_bound_sd``), so that noise alone rarely flags a result
    (at small N·ε the check is weak; the mixing diagnostics usually flag such runs anyway).
    Post-processing of released values. ``setter`` (``"sample"`` or ``"DPADVI"``) names whose
    arguments the advice names.
    """
    if setter not in _CLIPPING_ADVICE:
        raise ValueError(f"`setter` must be one of {sorted(_CLIPPING_ADVICE)}. Found {setter!r}.")
    too_many, unresolved = _CLIPPING_ADVICE[setter]
    if not clipping or not clipping.get("releases"):
        return None
    last = clipping["releases"][-1]
    if last.get("resolvable") is False:
        return (
            f"clip bound: the private histogram's noise ({last['count_noise_rows']:.3g} rows in a cumulative count) "
            "is larger than half the rows above the quantile asked for, so the released bound "
            f"{last['bound']:.3g} may be anywhere between far too small (clipping bias) and far too large (noise): "
            + unresolved
        )
    share, threshold = last["share_above_bound_at_reference"], last["bias_threshold_share"]
    share_sd = last.get("share_above_bound_sd", 0.0)
    if not share_is_material(share, share_sd, threshold):
        return None
    return (
        f"clipping: about {100 * share:.2g} % (± {100 * share_sd:.2g} %) of rows' scores are above the clip bound "
        f"{last['bound']:.3g} at {last['reference']} (noisy; above 1/√N = {100 * threshold:.2g} % the clipping bias "
        "of the posterior mean "
        "is of the order of a posterior standard deviation or more, and R-hat cannot see it): " + too_many
    )


def _bound_text(name: str, value: Any) -> str:
    """``name=value`` of a public bound, per-column (lower, upper) lists compressed to what the user gave.

    A regression's released design holds a column of ones (the intercept) with bounds (1, 1)
    that clips nothing; it is left out, and covariates sharing one (lower, upper) pair are
    named by that pair once.
    """
    try:
        lower, upper = (np.asarray(side, dtype=float).ravel() for side in value)
    except (TypeError, ValueError):
        return f"{name}={value}"
    if lower.shape != upper.shape or lower.size < 2:
        return f"{name}={value}"
    varying = lower != upper
    if not varying.any():
        return f"{name}={value}"
    fixed = ", ".join(f"{v:.12g}" for v in lower[~varying])
    constant = f" (and constant columns fixed at {fixed}, e.g. the intercept's ones)" if fixed else ""
    lower, upper = lower[varying], upper[varying]
    if np.all(lower == lower[0]) and np.all(upper == upper[0]):
        each = f" for each of {lower.size} covariates" if lower.size > 1 else ""
        return f"{name}=({lower[0]:.12g}, {upper[0]:.12g}){each}{constant}"
    pairs = ", ".join(f"({lo:.12g}, {hi:.12g})" for lo, hi in zip(lower, upper, strict=True))
    return f"{name}=[{pairs}]{constant}"


def bounds_clipping_problem(check: dict[str, Any] | None) -> str | None:
    """A plain-words problem when a release's public bounds clipped a material share of the rows (else None).

    ``check`` is a release's clipping check (``ReleasedStatistics.clipping_check``: the noisy
    number of rows the bounds clipped, :mod:`pymc_dp.exponential_family.clipping_check`).

    **The threshold, from what the bias does.** Clipping moves a row's statistic by its excess
    beyond the bound. One row moves a posterior mean by about 1/√N of a posterior sd per
    typical row spread of its term (the posterior sd is about 1/√(N·I) and a row's influence
    about its score over N·I), so k clipped rows with a mean excess of r typical spreads move
    it by about √N·(k/N)·r sds. At the share 1/√N that is r sds: a posterior sd or more as soon
    as the clipped rows lie a spread or more beyond the bounds, which the noisy count cannot
    tell (the excess is not released); the posterior's width does not show the bias.
    Measured: ``randhie`` (N = 20,190, ``y_max`` = 20) clips 1.0 % (1.4/√N) of its counts, which
    reach 77, and its released-statistics posterior at ε = 4 was 6.75 NUTS sds off (r ≈ 5).
    The count is noisy: it flags only when the share exceeds 1/√N by
    :data:`RELEASE_CLIPPING_MARGIN_SDS` (two) of its noise sds (:func:`share_is_material`), so
    noise alone rarely flags a result; the check's budget share is sized so that one noise sd
    is a tenth of the threshold where the budget allows
    (:func:`pymc_dp.exponential_family.clipping_check.clipping_check_share`). A row counts in
    proportion to how far it moved, fully from the check's public ``full_weight_movement`` (a
    fraction of its bound's width), which the message names. Where the check cannot resolve the threshold
    (``"resolvable": False``) it is not a problem but a note (:func:`bounds_clipping_note`).
    Post-processing of a released count.
    """
    if not check:
        return None
    share, share_sd, threshold = check["share_clipped"], check["share_clipped_sd"], check["bias_threshold_share"]
    if not share_is_material(share, share_sd, threshold, RELEASE_CLIPPING_MARGIN_SDS):
        return None
    bounds = ", ".join(_bound_text(k, v) for k, v in check.get("bounds", {}).items())
    full_weight = check.get("full_weight_movement")
    by_more = (
        f" (each row weighted by how far it moved, fully from {100 * full_weight:.3g} % of a bound's width, of "
        "y_max for a count bound; NaN and invalid labels fully)"
        if full_weight
        else ""
    )
    counts = (
        " (the count likelihoods model the clipping only under their own distribution: over-dispersed counts, as "
        "on randhie, come back biased)"
        if "y_max" in check.get("bounds", {})
        else ""
    )
    return (
        f"clipping: about {100 * share:.2g} % (± {100 * share_sd:.2g} %) of the rows lie outside the public bounds "
        f"({bounds}){by_more} and were clipped into them (a noisy weighted count, so at least that share of the "
        f"rows was clipped; above 1/√N = {100 * threshold:.2g} % "
        "clipping can move the posterior means by a posterior standard deviation or more, and neither the "
        "posterior's width nor R-hat shows it): widen the bounds that clip from public knowledge of the data's "
        "range (for counts a larger y_max), or transform the data so that they lie within them, and release "
        "again" + counts
    )


def bounds_clipping_note(check: dict[str, Any] | None) -> str | None:
    """The check's own note when its noise cannot resolve the flag's threshold (``"resolvable": False``), else None.

    Not a problem (nothing was seen) but a limit of what the check could see, from public
    settings only: the flag fires only above 1/√N + 2 noise sds, so a material share may pass.
    """
    if not check or check.get("resolvable", True):
        return None
    return str(check.get("note") or "the clipping check cannot resolve its threshold 1/√N (its noise is too large)")
