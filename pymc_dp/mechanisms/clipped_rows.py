"""How many rows the public bounds clip, weighted by how far they moved: the clipping check of a release.

A sufficient-statistics release maps every row into the public bounds (``x_bounds``,
``y_bounds``, a count bound ``y_max``, valid labels) before anything is summed. That keeps the
sensitivity, but a bound narrower than the data biases the statistics, and with them the
posterior, by an amount its width does not show. :class:`PrivateClippedCount` reads the rows
once and keeps only a weighted number of the rows that the family's admission moved: a row
counts in proportion to how far its furthest-moved entry moved, fully from
:data:`CLIPPED_ROW_FULL_WEIGHT` (5 %) of that entry's bound's width; a NaN or an invalid label
counts fully. That number leaves only with noise (discrete Laplace or discrete Gaussian, exact
integer noise on a grid of 1/:data:`CLIPPED_ROW_WEIGHT_GRID` rows), priced by the release's
accountant with the statistics themselves. The rows, and which of them moved, never leave.

**Why weighted.** The bias a clipped row adds grows with how far it moved. An earlier rule
counted a row only when an entry moved by more than 1 % of its bound's width, so that a bound
stopping just inside the data (``randhie``'s ``lncoins`` bound 4.61 against ln 101 = 4.6151:
5.3 % of the rows moved by at most 0.2 % of the range) did not flag a harmless release. It left
a blind spot: many rows heaped just beyond a bound were never counted (20 % of 20,000 rows at
x = 4.071 with bounds ±4 moved an OLS slope by 1.8 posterior sds, count 0). Weighting keeps the
harmless case small (``lncoins``: 5.3 % × at most 0.05 ≈ 0.2 % of the rows) and counts the heap
(20 % × 0.19 ≈ 3.7 %), with one row still adding at most 1.

Neighbouring relation: substitute (one row replaced, N public; the release's own relation),
under which the weighted count has sensitivity 1: each row adds a weight in [0, 1], and so does
its replacement. Under add/remove it is 1 as well (the added or removed row adds at most 1).
The full-weight movement and the grid are public (functions of the family's public bounds
only), so they change how much each row adds, not how much one row can change the count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent, PureDPReleases
from pymc_dp.mechanisms.noise import SecureNoise, discrete_gaussian_noise, discrete_laplace_noise

__all__ = [
    "CLIPPED_COUNT_SENSITIVITY",
    "CLIPPED_ROW_FULL_WEIGHT",
    "CLIPPED_ROW_WEIGHT_GRID",
    "ClippedUnits",
    "PrivateClippedCount",
    "clipped_row_weights",
    "clipped_units",
    "discrete_laplace_sd",
    "entry_scales",
]

#: Sensitivity of the weighted clipped-row count (in rows), under substitution and under add/remove alike.
CLIPPED_COUNT_SENSITIVITY = 1
#: The public fraction of a bound's width (hi − lo; ``y_max`` for a count bound, the count
#: bound of a bounded-count family) by which an entry must move for its row to count fully;
#: a row that moved less counts in proportion.
CLIPPED_ROW_FULL_WEIGHT = 0.05
#: Row weights are rounded up to multiples of 1/64 of a row, so that the weighted count is a whole
#: number of grid units and its noise exact integer noise (sensitivity 64 units = 1 row).
CLIPPED_ROW_WEIGHT_GRID = 64


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


def entry_scales(family: Any, n_columns: int, full_weight: float = CLIPPED_ROW_FULL_WEIGHT) -> np.ndarray:
    """How far each entry of a row must move for the row to count fully (public: bounds and ``full_weight``).

    ``full_weight`` times the width of the entry's bound, read from ``family.settings()`` in the
    layout of ``check_data``: a covariate's hi − lo (``x_bounds``), the target's (``y_bounds``)
    or, for a one-sided count bound, ``y_max`` (``upper``, ``n_trials`` for a bounded count);
    zero for labels (a logistic target, a class, a group label: any change counts fully) and for
    the grouped rows' constant column. A layout this cannot read gets zeros (any movement counts
    fully).
    """
    full_weight = float(full_weight)
    if not (math.isfinite(full_weight) and 0.0 <= full_weight <= 1.0):
        raise ValueError(f"`full_weight` must be a fraction in [0, 1]. Found {full_weight!r}.")
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
    out = full_weight * np.asarray(widths, dtype=float)
    return out if out.shape == (n_columns,) else np.zeros(n_columns)


def clipped_row_weights(raw: np.ndarray, admitted: np.ndarray, scales: np.ndarray, grid: int) -> np.ndarray:
    """Each row's weight in grid units: how far its furthest-moved entry moved, over that entry's scale, at most 1.

    ``raw`` and ``admitted`` are (N, k) rows before and after the family's admission; ``scales``
    the k public full-weight movements (:func:`entry_scales`; 0: any change counts fully). A
    NaN or infinite entry counts fully. The weight in [0, 1] is rounded up to a multiple of
    1/``grid``, so a row that moved at all adds at least one unit and at most ``grid`` units
    (one row). A pure function of one row at a time: the sum over rows has sensitivity ``grid``
    units.
    """
    # No floating-point warning may depend on a row (one extreme value would show in a warning): every
    # operation is silenced, and the movement is capped at its scale before dividing, so nothing overflows.
    with np.errstate(all="ignore"):
        moved = np.abs(raw - admitted)  # NaN where the raw entry was NaN; inf where it was infinite
        moved = np.where(np.isnan(moved), np.inf, moved)
        positive = scales > 0
        capped = np.minimum(moved, np.where(positive, scales, 1.0)) / np.where(positive, scales, 1.0)
        ratio = np.where(positive, capped, np.where(moved > 0, 1.0, 0.0))  # in [0, 1]; a label: any change is 1
        weight = ratio.max(axis=1) if ratio.shape[1] else np.zeros(ratio.shape[0])
        return np.ceil(weight * grid).astype(np.int64)


@dataclass(frozen=True)
class ClippedUnits:
    """The exact weighted count of clipped rows (in 1/64-row grid units) and how many rows it covers.

    Held in the mechanism layer only (on a Dask worker, one partition's): added exactly over
    partitions, it reaches the client only inside :meth:`PrivateClippedCount.from_units`.
    """

    n_rows: int
    _exact_units: int

    def __add__(self, other: ClippedUnits) -> ClippedUnits:
        return ClippedUnits(self.n_rows + other.n_rows, self._exact_units + other._exact_units)


def clipped_units(family: Any, data: Any, full_weight: float = CLIPPED_ROW_FULL_WEIGHT) -> ClippedUnits:
    """``family``'s admission applied to ``data``, each row weighed by how far it moved (see PrivateClippedCount)."""
    admitted = np.asarray(family.check_data(data, "clamp"))
    n_rows = int(admitted.shape[0])
    admitted = admitted.reshape(n_rows, -1).astype(float)
    raw = _raw_rows(data, n_rows)
    if raw.shape != admitted.shape:  # public: the layouts, not the values
        raise ValueError(
            f"`data` must be laid out as the {family.name} family's rows. Found {raw.shape[1]} columns "
            f"against the family's {admitted.shape[1]}."
        )
    scales = entry_scales(family, admitted.shape[1], full_weight)  # public: bounds × full_weight
    grid = CLIPPED_ROW_WEIGHT_GRID
    units = clipped_row_weights(raw, admitted, scales, grid)
    if getattr(family, "n_groups", None) is not None:  # a grouped row whose label is not a group is dropped
        units = np.where(admitted[:, 0] < 0, grid, units)
    return ClippedUnits(n_rows, int(units.sum()))


class PrivateClippedCount:
    """The weighted number of rows a family's public bounds clip, held exactly; only a noisy count leaves.

    The constructor applies the family's own admission (``check_data(data, "clamp")``: numbers
    clipped to their bounds, counts and labels rounded into range, NaN to a bound, a grouped
    row's invalid label dropped) and weighs each row by how far the admission moved it: its
    furthest-moved entry's movement over ``full_weight`` of that entry's bound's width
    (:func:`entry_scales`), at most 1, rounded up to 1/``CLIPPED_ROW_WEIGHT_GRID`` of a row
    (:func:`clipped_row_weights`); a NaN, an infinite entry, a changed label or an invalid group
    label counts 1. Only the sum is kept.

    Parameters
    ----------
    family : pymc_dp.exponential_family.ExponentialFamily
        The release's family (its public bounds).
    data : array or (X, y) or (X, y, groups)
        The raw rows, as given to :func:`pymc_dp.release_statistics`.
    full_weight : float, default :data:`CLIPPED_ROW_FULL_WEIGHT`
        The public fraction of a bound's width an entry must move by for its row to count 1
        (0: any movement counts 1, the plain count of clipped rows).

    Notes
    -----
    **Neighbouring relation and sensitivity.** Substitute (one row replaced, N public): each
    row adds a weight in [0, 1], so the weighted count moves by at most 1 row (Δ₁ = Δ₂ = 1, that
    is :data:`CLIPPED_ROW_WEIGHT_GRID` grid units); under add/remove also by at most 1. The
    scales and the grid are public (functions of the public bounds), so they change how much a
    row adds, not how much one row can change the sum. :meth:`laplace_noisy` adds discrete
    Laplace noise of scale 1/ε rows (grid/ε units: ε-DP); :meth:`gaussian_noisy` discrete
    Gaussian noise of variance τ² rows² ((τ·grid)² units²: ρ = 1/(2τ²)-zCDP, the ρ of
    :meth:`gaussian_events`). Both are exact integer samplers on the grid (Canonne, Kamath and
    Steinke 2020), so the guarantee does not rest on floating-point noise.

    **What ε covers.** One noisy weighted count; the share of clipped rows and any flag computed
    from it are post-processing.

    References
    ----------
    .. [1] Canonne, C. L., Kamath, G. and Steinke, T. (2020). The discrete Gaussian for
       differential privacy. NeurIPS, Algorithms 2 and 3.
    """

    def __init__(self, family: Any, data: Any, full_weight: float = CLIPPED_ROW_FULL_WEIGHT) -> None:
        self._hold(clipped_units(family, data, full_weight))

    @classmethod
    def from_units(cls, counted: ClippedUnits) -> PrivateClippedCount:
        """The mechanism over rows already counted elsewhere (each Dask partition's :func:`clipped_units`, added)."""
        count = cls.__new__(cls)
        count._hold(counted)
        return count

    def _hold(self, counted: ClippedUnits) -> None:
        self.n_rows = counted.n_rows
        self.grid = CLIPPED_ROW_WEIGHT_GRID
        self._exact_clipped_units = counted._exact_units

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_rows={self.n_rows})"

    @staticmethod
    def laplace_events(epsilon: float, label: str) -> list[PrivacyEvent]:
        """One ε-DP count (discrete Laplace of scale 1/ε rows, sensitivity 1 row)."""
        return [PureDPReleases(epsilon, 1, label=label)]

    @staticmethod
    def gaussian_events(noise_multiplier: float, label: str) -> list[PrivacyEvent]:
        """One Gaussian count at multiplier τ (σ = τ rows, sensitivity 1 row)."""
        return [GaussianReleases(noise_multiplier, 1, label=label)]

    def laplace_noisy(self, epsilon: float, source: np.random.Generator | SecureNoise | None) -> tuple[float, float]:
        """(weighted count + discrete Laplace noise of scale 1/ε rows, the noise's sd in rows): one ε-DP release."""
        epsilon = check_finite_positive("epsilon", epsilon)
        scale_units = Fraction(CLIPPED_COUNT_SENSITIVITY * self.grid) / Fraction(epsilon)
        [noise] = discrete_laplace_noise(scale_units, 1, source)
        sd = discrete_laplace_sd(epsilon / self.grid) / self.grid
        return (self._exact_clipped_units + int(noise)) / self.grid, sd

    def gaussian_noisy(
        self, noise_multiplier: float, source: np.random.Generator | SecureNoise | None
    ) -> tuple[float, float]:
        """(weighted count + discrete Gaussian noise of variance τ² rows², τ): one release at ρ = 1/(2τ²)."""
        noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        variance_units = (Fraction(noise_multiplier) * CLIPPED_COUNT_SENSITIVITY * self.grid) ** 2
        [noise] = discrete_gaussian_noise(variance_units, 1, source)
        return (self._exact_clipped_units + int(noise)) / self.grid, noise_multiplier
