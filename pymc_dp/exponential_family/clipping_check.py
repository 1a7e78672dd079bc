"""The clipping check of a sufficient-statistics release: how many rows its public bounds clip, priced.

A release maps every row into its public bounds (``x_bounds``, ``y_bounds``, a count bound
``y_max``) before summing, which keeps the sensitivity but biases the statistics when the bounds
are narrower than the data — a bias of the bound, not of the noise, that the posterior's width
does not show (measured: the ``randhie`` Poisson regression with ``y_max = 20`` clips 1.0 % of its
20,190 visit counts, up to 77, and its released-statistics posterior at ε = 4 came back 6.75 NUTS
sds off, unflagged). ``release_statistics(..., clipping_check=True)`` (the one-call route's
setting) therefore also releases a weighted number of the rows the bounds clip
(:class:`pymc_dp.mechanisms.clipped_rows.PrivateClippedCount`: sensitivity 1; a row counts in
proportion to how far its furthest-moved entry moved, fully from
:data:`~pymc_dp.mechanisms.clipped_rows.CLIPPED_ROW_FULL_WEIGHT` (5 %) of its bound's width, of
``y_max`` for a count bound; a NaN or an invalid label counts fully), priced with the statistics
inside the same ε and δ before any row is read, and records it; a result sampled from the
release is flagged (:func:`pymc_dp.usability.bounds_clipping_problem`) when the noisy share of
clipped rows is material: above 1/√N by :data:`~pymc_dp.usability.RELEASE_CLIPPING_MARGIN_SDS`
(two) of its noise sds.

**Its share of the budget** is a function of public settings only (ε, δ, the mechanism, N):
just enough for the count's noise sd to be :data:`CLIPPING_CHECK_RESOLUTION` (a tenth) of the
flag's threshold √N rows, at most :data:`CLIPPING_CHECK_MAX_SHARE` of ε (Laplace) or of ρ
(Gaussian): :func:`clipping_check_share`. The other releases share the rest as before. At that
resolution the flag fires at 1.2× the threshold: a share of 1.4× the threshold is flagged with
probability 0.98 (discrete Gaussian noise; 0.97 discrete Laplace), one at the threshold with 0.02
(0.03), one at 0.8× with 3·10⁻⁵ (1.7·10⁻³). (``randhie``'s Poisson release, ``y_max`` = 20,
whose posterior at ε = 4 was 6.75–44 NUTS sds off: its weighted share is 1.18 % = 1.68× the
threshold, flagged at ε = 4 with probability 1 − 10⁻⁶ by its Gaussian release, 1 − 6·10⁻⁴ by a Laplace one; the earlier
count of rows moved by more than 1 %, 1.02 %, with a margin of three sds was flagged in 93 % of
runs.) Where the cap binds
so that the flag's margin reaches the threshold itself (small N or ε), the check cannot resolve
a material share: its record says so (``"resolvable": False``, with the smallest share it would
flag and a ``"note"``), rather than passing silently.

Neighbouring relation: substitute (one row replaced, N public), the release's; the count's
sensitivity is 1 under it (and under add/remove).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from pymc_dp._validation import check_bool
from pymc_dp.accounting.calibrate import noise_multiplier_for_target
from pymc_dp.mechanisms.clipped_rows import CLIPPED_ROW_FULL_WEIGHT, CLIPPED_ROW_WEIGHT_GRID, PrivateClippedCount
from pymc_dp.usability import RELEASE_CLIPPING_MARGIN_SDS

__all__ = [
    "CLIPPING_CHECK_LABEL",
    "CLIPPING_CHECK_MAX_SHARE",
    "CLIPPING_CHECK_RESOLUTION",
    "check_clipping_check",
    "clipping_check_share",
    "plan_clipping_check",
    "public_row_count",
    "release_clipping_check",
]

#: The largest share of the release's budget (of ε for Laplace noise, of ρ = 1/(2τ²) for Gaussian) the check takes.
CLIPPING_CHECK_MAX_SHARE = 0.1
#: The count's noise sd the check's share aims at, in units of the flag's threshold √N rows (share 1/√N).
CLIPPING_CHECK_RESOLUTION = 0.1
#: The label of the check's accounting event.
CLIPPING_CHECK_LABEL = "clipping check: rows clipped by the public bounds"
#: The family settings that are bounds a row can be clipped to (named in the record and in the flag).
_BOUND_SETTINGS = ("x_bounds", "y_bounds", "y_max", "upper", "bounds", "n_trials", "n_categories", "n_groups")


def check_clipping_check(value: Any, out_of_bounds: str) -> bool:
    """``clipping_check`` as a bool; refused with ``out_of_bounds="raise"`` (nothing would be clipped)."""
    value = check_bool("clipping_check", value)
    if value and out_of_bounds != "clamp":
        raise ValueError(
            "`clipping_check` must be False with out_of_bounds='raise': data with a row outside the bounds are "
            f"refused there, so no row is clipped. Found clipping_check=True and out_of_bounds={out_of_bounds!r}."
        )
    return value


def plan_clipping_check(
    clipping_check: Any, out_of_bounds: str, mechanism: str, epsilon: float, delta: float, data: Any
) -> float:
    """The check's share of the budget (0.0 without it), from the checked setting and public values only.

    N is read from the data's shape (:func:`public_row_count`), not from any row.
    """
    if not check_clipping_check(clipping_check, out_of_bounds):
        return 0.0
    return clipping_check_share(mechanism, epsilon, delta, public_row_count(data))


def public_row_count(data: Any) -> int:
    """N from the data's shape alone (public under substitute neighbours): the length of y, or of the rows.

    A pair (X, y) or triple (X, y, groups) gives the length of y; an array (or a list of numbers)
    its length.
    """
    pair = isinstance(data, tuple | list) and len(data) in (2, 3) and np.ndim(data[1]) >= 1
    shape = np.shape(data[1] if pair else data)
    return int(shape[0]) if shape else 0


def clipping_check_share(mechanism: str, epsilon: float, delta: float, n_rows: int) -> float:
    """The check's share of the release's budget, from public settings only.

    The count's noise sd should be R·√N rows (R = :data:`CLIPPING_CHECK_RESOLUTION`), a tenth of
    the flag's threshold of √N clipped rows: Laplace noise of scale 1/ε_c has sd √2/ε_c, so
    ε_c = √2/(R√N) and the share is ε_c/ε; Gaussian noise at multiplier τ_c = τ/√c (τ calibrated
    to (ε, δ) for one release) has sd τ_c, so c = τ²/(R²N). At most
    :data:`CLIPPING_CHECK_MAX_SHARE`; where that binds (small N·ε) the count is noisier and the
    flag weaker (its margin is two noise sds).
    """
    n_rows = max(int(n_rows), 1)
    if mechanism == "laplace":
        wanted = math.sqrt(2.0) / (CLIPPING_CHECK_RESOLUTION * math.sqrt(n_rows)) / epsilon
    else:
        tau = noise_multiplier_for_target(epsilon, delta, 1)
        wanted = tau**2 / (CLIPPING_CHECK_RESOLUTION**2 * n_rows)
    return float(min(CLIPPING_CHECK_MAX_SHARE, wanted))


def bounds_named(family: Any) -> dict[str, Any]:
    """The family's public bounds that rows are clipped to (from its settings)."""
    settings = family.settings()
    return {k: settings[k] for k in _BOUND_SETTINGS if k in settings}


def release_clipping_check(
    family: Any,
    data: Any,
    mechanism: str,
    setting: float | None,
    share: float,
    source: Any,
    count_rows: Callable[[Any, Any], Any] | None = None,
) -> dict[str, Any] | None:
    """Release the noisy number of rows ``family``'s bounds clip, at ``setting`` (ε_c, or τ_c for Gaussian noise).

    ``setting`` None (no check priced): nothing is read and None is returned. ``count_rows``
    builds the count mechanism from (family, data) (default: the in-memory
    :class:`~pymc_dp.mechanisms.clipped_rows.PrivateClippedCount`; Dask rows pass
    :func:`pymc_dp.backends.dask_rows.partitioned_clipped_count`).

    Call inside the run that priced it (:func:`pymc_dp.release_statistics`). Returns the record
    (public: the noisy weighted count, its share of N and their noise sds, the threshold 1/√N,
    the bounds, the weighting, the check's ε_c or τ_c and budget share, and whether it can
    resolve the threshold, :func:`check_resolution`); the rows, and which were clipped, stay in
    the mechanism.
    """
    if setting is None:
        return None
    if count_rows is None:  # rows in memory; Dask rows pass their partitioned count (partitioned_check)
        private = PrivateClippedCount(family, data, CLIPPED_ROW_FULL_WEIGHT)
    else:
        private = count_rows(family, data)
    if mechanism == "laplace":
        noisy, sd = private.laplace_noisy(setting, source)
        noise = {"mechanism": "discrete laplace", "epsilon": setting, "noise_sd_rows": sd}
    else:
        noisy, sd = private.gaussian_noisy(setting, source)
        noise = {"mechanism": "discrete gaussian", "noise_multiplier": setting, "noise_sd_rows": sd}
    return {
        "bounds": bounds_named(family),
        "full_weight_movement": CLIPPED_ROW_FULL_WEIGHT,
        "weight_grid": CLIPPED_ROW_WEIGHT_GRID,
        "budget_share": share,
        **noise,
        **clipped_share_record(noisy, sd, private.n_rows),
    }


def clipped_share_record(noisy: float, sd: float, n_rows: int) -> dict[str, Any]:
    """A released clipped-row count read as a share of the public N (post-processing): the fields every clipping
    check's record holds (``bounds_clipping_problem`` reads them), with its resolution (:func:`check_resolution`)."""
    return {
        "noisy_clipped_rows": float(noisy),
        "n_rows": n_rows,
        "share_clipped": round(noisy / n_rows, 6),
        "share_clipped_sd": round(sd / n_rows, 6),
        "bias_threshold_share": round(1.0 / math.sqrt(n_rows), 6),
        "sensitivity": 1,
        **check_resolution(sd / n_rows, n_rows),
    }


def check_resolution(share_sd: float, n_rows: int) -> dict[str, Any]:
    """Whether a check whose share has noise sd ``share_sd`` can flag a material share (public values only).

    The flag needs the noisy share to exceed 1/√N by
    :data:`~pymc_dp.usability.RELEASE_CLIPPING_MARGIN_SDS` noise sds, so it fires only above
    1/√N + 2 sd (``"smallest_flagged_share"``). Where 2 sd ≥
    1/√N (the budget cap binds at small N·ε) a share at the material level, or twice it, passes:
    ``"resolvable"`` is then False and ``"note"`` says so in words (the result's diagnostics keep
    the record). A function of ε_c (or τ_c) and N only: it says nothing about the data.
    """
    threshold = 1.0 / math.sqrt(max(int(n_rows), 1))
    margin = RELEASE_CLIPPING_MARGIN_SDS * share_sd
    out: dict[str, Any] = {
        "resolvable": bool(margin < threshold),
        "smallest_flagged_share": round(threshold + margin, 6),
    }
    if not out["resolvable"]:
        out["note"] = (
            f"the clipping check cannot resolve its threshold: its noise ({100 * share_sd:.2g} % of the rows, one sd) "
            f"is at least half of 1/√N = {100 * threshold:.2g} %, so it flags only shares above "
            f"{100 * (threshold + margin):.2g} %; a smaller share of clipped rows, which can still bias the posterior "
            "by a posterior sd or more, passes unseen (more rows or a larger ε resolve it; or choose bounds from "
            "public knowledge that the data cannot exceed)"
        )
    return out
