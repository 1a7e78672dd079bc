"""How many rows the public bounds clip: one noisy count, the clipping check of a statistics release.

A sufficient-statistics release maps every row into the public bounds (``x_bounds``,
``y_bounds``, a count bound ``y_max``, valid labels) before anything is summed. That keeps the
sensitivity, but a bound narrower than the data biases the statistics, and with them the
posterior, by an amount its width does not show. :class:`PrivateClippedCount` reads the rows
once and keeps only the number of rows that the family's admission moved by more than a public
tolerance (:data:`CLIPPED_ROW_TOLERANCE` of the bound's width); that number leaves
only with noise (discrete Laplace or discrete Gaussian, exact integer noise), priced by the
release's accountant with the statistics themselves. The rows, and which of them moved, never
leave.

Neighbouring relation: substitute (one row replaced, N public; the release's own relation),
under which the count has sensitivity 1: the replaced row was clipped or not, and so is its
replacement. Under add/remove it is 1 as well (the added or removed row counts 0 or 1). The
tolerance is public (a function of the family's public bounds only), so it changes which rows
count, not how much one row can change the count.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent, PureDPReleases
from pymc_dp.mechanisms.noise import SecureNoise, discrete_gaussian_noise, discrete_laplace_noise

__all__ = [
    "CLIPPED_COUNT_SENSITIVITY",
    "CLIPPED_ROW_TOLERANCE",
    "PrivateClippedCount",
    "discrete_laplace_sd",
    "entry_tolerances",
]

#: Sensitivity of the clipped-row count, under substitution and under add/remove alike.
CLIPPED_COUNT_SENSITIVITY = 1
#: The public fraction of a bound's width (hi − lo; ``y_max`` for a count bound, the count
#: bound of a bounded-count family) by which an entry must move before its row counts as clipped.
CLIPPED_ROW_TOLERANCE = 0.01


def discrete_laplace_sd(epsilon: float) -> float:
    """Standard deviation of the discrete Laplace noise of scale t = 1/ε on ℤ (sensitivity 1; public).

    Var = 2e^{−1/t}/(1 − e^{−1/t})² (Canonne, Kamath and Steinke 2020): slightly below the
    continuous Laplace's 2t².
    """
    q = math.exp(-check_finite_positive("epsilon", epsilon))
    return math.sqrt(2.0 * q) / (1.0 - q)


def _raw_rows(data: Any, n_rows: int) -> np.ndarray:
    """The rows laid out as the families' ``check_data`` lays out the admitted ones, before admission.

    (X, y) → [x, y]; (X, y, groups) → [label, 1, x, y] (the grouped families' layout, X may be
    None); a single array → its values as one column. Called after ``check_data`` has checked
    the shapes.
    """
    if isinstance(data, tuple | list) and len(data) == 3:
        x, y, groups = data
        x = np.empty((n_rows, 0)) if x is None else np.asarray(x, dtype=float).reshape(n_rows, -1)
        labels = np.asarray(groups, dtype=float).reshape(n_rows)
        return np.column_stack([labels, np.ones(n_rows), x, np.asarray(y, dtype=float).reshape(n_rows)])
    if isinstance(data, tuple | list):
        x, y = data
        x = np.asarray(x, dtype=float).reshape(n_rows, -1)
        return np.column_stack([x, np.asarray(y, dtype=float).reshape(n_rows)])
    return np.asarray(data, dtype=float).reshape(n_rows, -1)


def _width(bounds: Any) -> float:
    lower, upper = bounds
    return float(upper) - float(lower)


def entry_tolerances(family: Any, n_columns: int, tolerance: float = CLIPPED_ROW_TOLERANCE) -> np.ndarray:
    """How far each entry of a row may move before the row counts as clipped (public: bounds and ``tolerance``).

    ``tolerance`` times the width of the entry's bound, read from ``family.settings()`` in the
    layout of ``check_data``: a covariate's hi − lo (``x_bounds``), the target's (``y_bounds``)
    or, for a one-sided count bound, ``y_max`` (``upper``, ``n_trials`` for a bounded count);
    zero for labels (a logistic target, a class, a group label: any change counts) and for the
    grouped rows' constant column. A layout this cannot read gets zeros (every movement counts).
    """
    tolerance = float(tolerance)
    if not (math.isfinite(tolerance) and 0.0 <= tolerance < 1.0):
        raise ValueError(f"`tolerance` must be a fraction in [0, 1). Found {tolerance!r}.")
    settings = family.settings()
    if "x_bounds" in settings or "n_groups" in settings:
        lower, upper = settings.get("x_bounds") or ((), ())
        widths = [float(u) - float(lo) for lo, u in zip(lower, upper, strict=True)]
        if "y_bounds" in settings:
            target = _width(settings["y_bounds"])
        else:
            target = float(settings.get("y_max", 0.0))  # a count bound; a label (logistic) gets 0
        widths = ([0.0, 0.0] if "n_groups" in settings else []) + widths + [target]  # [label, 1, x, y]
    elif "bounds" in settings:
        widths = [_width(settings["bounds"])]
    else:
        widths = [float(settings.get("upper", settings.get("n_trials", 0.0)))]  # a class label gets 0
    out = tolerance * np.asarray(widths, dtype=float)
    return out if out.shape == (n_columns,) else np.zeros(n_columns)


class PrivateClippedCount:
    """The number of rows a family's public bounds clip, held exactly; only a noisy count leaves.

    The constructor applies the family's own admission (``check_data(data, "clamp")``: numbers
    clipped to their bounds, counts and labels rounded into range, NaN to a bound, a grouped
    row's invalid label dropped) and counts the rows it changed by more than the tolerance: an
    entry that moved by more than ``tolerance`` of its bound's width (:func:`entry_tolerances`),
    a NaN, or an invalid label (any change). Nothing else is kept.

    Parameters
    ----------
    family : pymc_dp.exponential_family.ExponentialFamily
        The release's family (its public bounds).
    data : array or (X, y) or (X, y, groups)
        The raw rows, as given to :func:`pymc_dp.release_statistics`.
    tolerance : float, default :data:`CLIPPED_ROW_TOLERANCE`
        The public fraction of a bound's width an entry may move by without its row counting
        (0: any movement counts). A bound that stops just inside the data (``randhie``'s
        ``lncoins`` bound 4.61 against ln 101 = 4.6151 moves 5.3 % of rows by at most 0.2 % of
        the range) is then not counted; what it does not see is many rows each moved by less
        than the tolerance, whose bias is at most the tolerance times the width per row.

    Notes
    -----
    **Neighbouring relation and sensitivity.** Substitute (one row replaced, N public): the
    count moves by at most 1 (Δ₁ = Δ₂ = 1); under add/remove also by at most 1. The tolerance
    is public (a function of the public bounds), so each row still contributes 0 or 1.
    :meth:`laplace_noisy` adds discrete Laplace noise of scale 1/ε (ε-DP);
    :meth:`gaussian_noisy` discrete Gaussian noise of variance τ² (ρ = 1/(2τ²)-zCDP, the ρ of
    :meth:`gaussian_events`). Both are exact integer samplers (Canonne, Kamath and Steinke
    2020), so the guarantee does not rest on floating-point noise.

    **What ε covers.** One noisy count; the share of clipped rows and any flag computed from
    it are post-processing.

    References
    ----------
    .. [1] Canonne, C. L., Kamath, G. and Steinke, T. (2020). The discrete Gaussian for
       differential privacy. NeurIPS, Algorithms 2 and 3.
    """

    def __init__(self, family: Any, data: Any, tolerance: float = CLIPPED_ROW_TOLERANCE) -> None:
        admitted = np.asarray(family.check_data(data, "clamp"))
        n_rows = int(admitted.shape[0])
        admitted = admitted.reshape(n_rows, -1).astype(float)
        raw = _raw_rows(data, n_rows)
        if raw.shape != admitted.shape:  # public: the layouts, not the values
            raise ValueError(
                f"`data` must be laid out as the {family.name} family's rows. Found {raw.shape[1]} columns "
                f"against the family's {admitted.shape[1]}."
            )
        allowed = entry_tolerances(family, admitted.shape[1], tolerance)  # public: bounds × tolerance
        with np.errstate(invalid="ignore"):
            moved = np.any(np.isnan(raw) | (np.abs(raw - admitted) > allowed), axis=1)  # NaN always counts
        if getattr(family, "n_groups", None) is not None:  # a grouped row whose label is not a group is dropped
            moved |= admitted[:, 0] < 0
        self.n_rows = n_rows
        self._exact_clipped_count = int(np.count_nonzero(moved))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_rows={self.n_rows})"

    @staticmethod
    def laplace_events(epsilon: float, label: str) -> list[PrivacyEvent]:
        """One ε-DP count (discrete Laplace of scale 1/ε, sensitivity 1)."""
        return [PureDPReleases(epsilon, 1, label=label)]

    @staticmethod
    def gaussian_events(noise_multiplier: float, label: str) -> list[PrivacyEvent]:
        """One Gaussian count at multiplier τ (σ = τ, sensitivity 1)."""
        return [GaussianReleases(noise_multiplier, 1, label=label)]

    def laplace_noisy(self, epsilon: float, source: np.random.Generator | SecureNoise | None) -> tuple[int, float]:
        """(count + discrete Laplace noise of scale 1/ε, the noise's sd): one ε-DP release."""
        epsilon = check_finite_positive("epsilon", epsilon)
        [noise] = discrete_laplace_noise(Fraction(CLIPPED_COUNT_SENSITIVITY) / Fraction(epsilon), 1, source)
        return self._exact_clipped_count + int(noise), discrete_laplace_sd(epsilon)

    def gaussian_noisy(
        self, noise_multiplier: float, source: np.random.Generator | SecureNoise | None
    ) -> tuple[int, float]:
        """(count + discrete Gaussian noise of variance τ², τ): one release at ρ = 1/(2τ²)."""
        noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        variance = (Fraction(noise_multiplier) * CLIPPED_COUNT_SENSITIVITY) ** 2
        [noise] = discrete_gaussian_noise(variance, 1, source)
        return self._exact_clipped_count + int(noise), noise_multiplier
