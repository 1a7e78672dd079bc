"""The releases of a Gaussian linear likelihood's rows: one noisy Σ zzᵀ, and clipped score sums.

A Gaussian likelihood yᵢ ~ N(zᵢᵀψ, σ²) whose mean is linear in ψ (group intercepts and
coefficients) has the Hessian −Σᵢ zᵢzᵢᵀ/σ² in ψ: it reads the covariates only. So one
release of the Gram matrix Σ zzᵀ of the covariates, clamped to a public box, gives the
curvature of every Newton step of :func:`pymc_dp.release_once_linear`, instead of a noisy
clipped Hessian per anchor (:class:`pymc_dp.mechanisms.hessian.NoisyClippedHessian`). The
score sums in (ψ, log σ) are released as clipped sums, with the score-norm histograms of
``"auto"`` bounds, as :func:`pymc_dp.release_once` does.

:class:`GaussianLinearRows` holds the rows; only the noisy releases leave it. The model's
arrays are read here (:func:`linear_rows`), in the mechanism layer, never above it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive, check_neighbouring
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent
from pymc_dp.mechanisms.access import observed_array
from pymc_dp.mechanisms.clip_bound import norm_histogram
from pymc_dp.mechanisms.clipped_rows import (
    CLIPPED_ROW_FULL_WEIGHT,
    CLIPPED_ROW_WEIGHT_GRID,
    ClippedUnits,
    PrivateClippedCount,
    clipped_row_weights,
)
from pymc_dp.mechanisms.clipping import clipped_sum_l2, sensitivity_of_clipped_sum
from pymc_dp.mechanisms.hessian import packed_size, symmetric_from_packed, symmetric_to_packed
from pymc_dp.mechanisms.noise import SecureNoise

__all__ = [
    "GaussianLinearRows",
    "checked_box",
    "gram_row_bound",
    "gram_sensitivity",
    "linear_rows",
    "linear_rows_count",
]

#: Rows per chunk of the per-row work (rows × K × K doubles at most at one time).
_CHUNK = 4096


def checked_box(x_bounds: Any, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) of the public box as two arrays of length ``n_features`` (checked, public; 1 for a model
    without covariates, whose box is checked all the same and recorded). Raises a ValueError naming ``x_bounds``."""
    n_features = max(int(n_features), 1)
    if not isinstance(x_bounds, tuple | list) or len(x_bounds) != 2:
        raise ValueError(
            f"`x_bounds` must be a pair (lower, upper) of numbers or of arrays of length {n_features}. Found "
            f"{type(x_bounds).__name__}"
            + (f" of length {len(x_bounds)}." if isinstance(x_bounds, tuple | list) else ".")
        )
    sides = []
    for name, side in zip(("lower", "upper"), x_bounds, strict=True):
        try:
            value = np.asarray(side, dtype=float)
        except (TypeError, ValueError):
            value = None
        if value is None or value.ndim > 1 or (value.ndim == 1 and value.shape[0] != n_features):
            found = type(side).__name__ if value is None else f"shape {value.shape}"
            raise ValueError(
                f"`x_bounds` must be a pair (lower, upper) of numbers or of arrays of length {n_features} (one entry "
                f"per covariate). Found {name} with {found}."
            )
        sides.append(np.broadcast_to(value, (n_features,)).copy())
    lower, upper = sides
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper)) and np.all(lower < upper)):
        raise ValueError(
            f"`x_bounds` must be finite with lower < upper in every column. Found lower={lower.tolist()}, "
            f"upper={upper.tolist()}."
        )
    with np.errstate(over="ignore"):  # bounds so wide that the widths, r² or r⁴ overflow: refused here, not later
        row_bound_sq = 1.0 + float(np.sum(np.maximum(lower**2, upper**2)))
        representable = np.all(np.isfinite(upper - lower)) and math.isfinite(row_bound_sq**2)
    if not representable:
        raise ValueError(
            "`x_bounds` must be narrow enough that the box's widths and the rows' largest squared norm r² (and r⁴) "
            f"are finite in double precision. Found lower={lower.tolist()}, upper={upper.tolist()}."
        )
    return lower, upper


def gram_row_bound(x_bounds: Any, n_features: int, indicator: bool) -> float:
    """r² = max ‖z‖² over the public box: Σⱼ max(lowerⱼ², upperⱼ²), plus 1 for an indicator or intercept column.

    The box is checked (:func:`checked_box`) even without covariates (r² = 1 then)."""
    lower, upper = checked_box(x_bounds, n_features)
    if n_features == 0:
        return 1.0
    return float(indicator) + float(np.sum(np.maximum(lower**2, upper**2)))


def gram_sensitivity(row_bound_sq: float, neighbouring: str) -> float:
    """Frobenius (packed L2) sensitivity of Σ zzᵀ with ‖z‖² ≤ r²: √2 r² (substitute) or r² (add/remove).

    Substitute: the sum moves by aaᵀ − bbᵀ, and ‖aaᵀ − bbᵀ‖²_F = ‖a‖⁴ + ‖b‖⁴ − 2(aᵀb)² ≤ 2r⁴,
    with equality for orthogonal a, b of norm r (two groups, covariates at orthogonal corners of
    the box). Add/remove: ‖aaᵀ‖_F = ‖a‖² ≤ r².
    """
    row_bound_sq = check_finite_positive("row_bound_sq", row_bound_sq)
    neighbouring = check_neighbouring("neighbouring", neighbouring)
    return (math.sqrt(2.0) if neighbouring == "substitute" else 1.0) * row_bound_sq


class GaussianLinearRows:
    """The rows (x, y, group) of a Gaussian linear likelihood, and its three releases.

    z = (the group's indicator, x) with G groups, or (1, x) with a scalar intercept, or x; the
    covariates are clamped to the public box [lower, upper] here (a row outside it is moved to
    the nearest point of the box, never refused; a non-finite entry is set to the lower bound),
    a group index −G ≤ g < 0 is group G + g (as the model's ``a[g]`` reads it), and one outside
    [−G, G) gives no indicator (each row has one indicator at most either way). Then ‖z‖² ≤ r² =
    :func:`gram_row_bound` for every row, whatever the data.

    Releases (each the Gaussian mechanism; σ = τΔ with τ the caller's noise multiplier):

    - :meth:`release_gram`: Σ zzᵀ + E, E symmetric with E_jj ~ N(0, σ²), E_jk = E_kj ~ N(0, σ²/2)
      (the isometric packing of the upper triangle, N(0, σ² I), mirrored), Δ = :func:`gram_sensitivity`;
    - :meth:`release_score`: Σᵢ clip₂(sᵢ(ψ, log σ), b) + N(0, σ² I), sᵢ the row's score
      ((rᵢ/σ²) zᵢ, rᵢ²/σ² − 1) with rᵢ = yᵢ − zᵢᵀψ, Δ = 2b (b under add/remove); a row whose
      score is not finite contributes zero;
    - :meth:`release_score_norm_histogram`: the histogram of the rows' ‖sᵢ‖ on the public grid
      of :data:`pymc_dp.mechanisms.clip_bound.NORM_GRID_EDGES` plus N(0, σ² I), Δ = √2 (1);
    - :meth:`release_clamped_count`: the weighted number of rows the box clamped (each in [0, 1])
      plus discrete Gaussian noise of sd τ rows, Δ = 1 (substitute and add/remove alike).

    Parameters
    ----------
    x : array (N, P) or None
        The covariates (P may be 0: None).
    y : array (N,)
        The outcomes.
    groups : array (N,) of int or None
        The group index; None without groups.
    n_groups : int
        G (public); 0 without groups.
    intercept : bool
        Without groups: whether z starts with a column of ones (a scalar intercept).
    x_bounds : (lower, upper)
        The public box of the covariates (numbers or arrays of length P).
    neighbouring : {"substitute", "add_remove"}
        The relation of every release.

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public; default) or add/remove.
    Row i's terms (zᵢzᵢᵀ, its clipped score, its histogram count) depend on row i alone, so one
    substitution moves Σ zzᵀ by aaᵀ − bbᵀ, of Frobenius norm at most √2 r² (the packed vector's
    L2 norm: Δ = √2 r², r² under add/remove; :func:`gram_sensitivity`), the clipped score sum by
    at most 2b, the histogram by one unit between two bins (√2) and the clamped count by at most
    1 (each row adds a weight in [0, 1]). Each release is the Gaussian
    mechanism with Δ/σ = 1/τ, μ = 1/(2τ²) in zCDP (Sommer et al. 2019, Lemma 12), whatever ψ and
    the data; ε covers the noisy outputs; ψ must be public or post-processing of earlier
    releases. The events are :meth:`events` (from public settings only), priced before any
    row is read.

    References
    ----------
    .. [1] Avella-Medina, M., Bradshaw, C. and Loh, P.-L. (2023). Differentially private inference
       via noisy optimization. The Annals of Statistics 51(5), 2067–2092.
    .. [2] Sheffet, O. (2017). Differentially private ordinary least squares. ICML (a noisy Σ zzᵀ).
    """

    def __init__(
        self,
        x: np.ndarray | None,
        y: np.ndarray,
        groups: np.ndarray | None,
        n_groups: int,
        intercept: bool,
        x_bounds: Any,
        neighbouring: str = "substitute",
    ) -> None:
        self.neighbouring = check_neighbouring("neighbouring", neighbouring)
        y = np.asarray(y, dtype=float).ravel()
        n_rows = y.shape[0]
        n_features = 0 if x is None else int(np.shape(x)[1])
        self.row_bound_sq = gram_row_bound(x_bounds, n_features, groups is not None or intercept)
        columns, clamped_units = [], np.zeros(n_rows, dtype=np.int64)
        if groups is not None:
            index = np.asarray(groups).ravel()
            # −G ≤ g < 0 is group G + g, as PyMC's a[g] reads it (NumPy's wrapping); out of range: no indicator.
            index = np.where((index < 0) & (index >= -n_groups), index + n_groups, index)
            inside = (index >= 0) & (index < n_groups)
            indicator = np.zeros((n_rows, n_groups))
            indicator[np.flatnonzero(inside), index[inside].astype(int)] = 1.0
            clamped_units = np.where(inside, 0, CLIPPED_ROW_WEIGHT_GRID)  # a row without its group counts fully
            columns.append(indicator)
        elif intercept:
            columns.append(np.ones((n_rows, 1)))
        if n_features:
            lower, upper = checked_box(x_bounds, n_features)
            x = np.asarray(x, dtype=float).reshape(n_rows, n_features)
            columns.append(np.clip(np.where(np.isfinite(x), x, lower), lower, upper))
            scales = CLIPPED_ROW_FULL_WEIGHT * (upper - lower)  # public: the box's widths
            moved = clipped_row_weights(x, columns[-1], scales, CLIPPED_ROW_WEIGHT_GRID)
            clamped_units = np.maximum(clamped_units, moved)
        self._z = np.column_stack(columns)
        self._y = y
        self._clamped = ClippedUnits(n_rows, int(clamped_units.sum()))
        self.n_rows, self.n_coefficients = n_rows, self._z.shape[1]

    @staticmethod
    def events(noise_multiplier: float, count: int, label: str) -> list[PrivacyEvent]:
        """The accounting of ``count`` releases at τ (public settings): Gaussian, Δ/σ = 1/τ each."""
        return [GaussianReleases(noise_multiplier, int(count), label=label)]

    def gram_std(self, noise_multiplier: float) -> float:
        """σ of the packed Gram release at τ: τ · Δ (public)."""
        return check_finite_positive("noise_multiplier", noise_multiplier) * gram_sensitivity(
            self.row_bound_sq, self.neighbouring
        )

    def _gram_sum(self) -> np.ndarray:
        """Σ zzᵀ of the clamped rows. Not private: only :meth:`release_gram` calls it (and tests)."""
        return self._z.T @ self._z

    def release_gram(self, noise_multiplier: float, rng: np.random.Generator | SecureNoise) -> np.ndarray:
        """One noisy Σ zzᵀ: the packed upper triangle plus N(0, σ² I), mirrored; a symmetric (K, K) matrix."""
        std = self.gram_std(noise_multiplier)
        packed = symmetric_to_packed(self._gram_sum())
        noisy = packed + rng.normal(0.0, std, size=packed_size(self.n_coefficients))
        return symmetric_from_packed(noisy, self.n_coefficients)

    def _scores(self, psi: np.ndarray, log_sigma: float, rows: slice) -> np.ndarray:
        """Per-row scores in (ψ, log σ) of ``rows``: (B, K + 1). Not private."""
        z, y = self._z[rows], self._y[rows]
        inv_var = math.exp(-2.0 * float(log_sigma))
        with np.errstate(invalid="ignore", over="ignore"):
            residual = y - z @ psi
            return np.column_stack([(residual * inv_var)[:, None] * z, residual**2 * inv_var - 1.0])

    def _checked_point(self, psi: Any, log_sigma: Any) -> tuple[np.ndarray, float]:
        psi = np.asarray(psi, dtype=float)
        if psi.shape != (self.n_coefficients,):
            raise ValueError(f"`psi` must be a flat vector of length {self.n_coefficients}. Found shape {psi.shape}.")
        if not (np.all(np.isfinite(psi)) and math.isfinite(float(log_sigma))):
            raise ValueError("`psi` and `log_sigma` must be finite (public anchors). Found a non-finite value.")
        return psi, float(log_sigma)

    def release_score(
        self,
        psi: Any,
        log_sigma: Any,
        grad_clip: float,
        noise_multiplier: float,
        rng: np.random.Generator | SecureNoise,
    ) -> np.ndarray:
        """One noisy clipped score sum at (ψ, log σ): shape (K + 1,), log σ last."""
        psi, log_sigma = self._checked_point(psi, log_sigma)
        grad_clip = check_finite_positive("grad_clip", grad_clip)
        std = check_finite_positive("noise_multiplier", noise_multiplier) * sensitivity_of_clipped_sum(
            grad_clip, self.neighbouring
        )
        total = np.zeros(self.n_coefficients + 1)
        for start in range(0, self.n_rows, _CHUNK):
            total += clipped_sum_l2(self._scores(psi, log_sigma, slice(start, start + _CHUNK)), grad_clip)
        return total + rng.normal(0.0, std, size=total.shape)

    def release_clamped_count(
        self, noise_multiplier: float, rng: np.random.Generator | SecureNoise
    ) -> tuple[float, float]:
        """(the weighted number of rows the box clamped + discrete Gaussian noise of sd τ rows, τ): one release.

        A row counts in proportion to how far its furthest-moved covariate moved, fully from
        ``CLIPPED_ROW_FULL_WEIGHT`` of that column's width (a non-finite covariate, or a group
        index outside [−G, G), counts 1): :class:`pymc_dp.mechanisms.clipped_rows.PrivateClippedCount`'s
        weighting and noise, Δ = 1 row. Events: ``PrivateClippedCount.gaussian_events``.
        """
        return PrivateClippedCount.from_units(self._clamped).gaussian_noisy(noise_multiplier, rng)

    def histogram_std(self, noise_multiplier: float) -> float:
        """σ of the score-norm histogram at τ: τ√2 (substitute) or τ (add/remove)."""
        unit = math.sqrt(2.0) if self.neighbouring == "substitute" else 1.0
        return check_finite_positive("noise_multiplier", noise_multiplier) * unit

    def release_score_norm_histogram(
        self, psi: Any, log_sigma: Any, noise_multiplier: float, rng: np.random.Generator | SecureNoise
    ) -> np.ndarray:
        """The noisy histogram of the rows' score norms at (ψ, log σ) (every row in one bin; non-finite: the top)."""
        psi, log_sigma = self._checked_point(psi, log_sigma)
        std = self.histogram_std(noise_multiplier)
        counts = np.zeros(len(norm_histogram(np.zeros(0))))
        for start in range(0, self.n_rows, _CHUNK):
            with np.errstate(invalid="ignore", over="ignore"):
                counts += norm_histogram(
                    np.linalg.norm(self._scores(psi, log_sigma, slice(start, start + _CHUNK)), axis=1)
                )
        return counts + rng.normal(0.0, std, size=counts.shape)


def linear_rows(model: Any, parts: Any, x_bounds: Any, neighbouring: str = "substitute") -> GaussianLinearRows:
    """The :class:`GaussianLinearRows` of a model recognised as a (grouped) linear regression
    (:func:`pymc_dp.regression_graph.regression_parts`): its arrays are read here, in the mechanism layer."""
    x = None if parts.matrix is None else observed_array(parts.matrix, "design matrix")
    y = observed_array(model.rvs_to_values[parts.outcome], "observed variable")
    groups = None if parts.groups is None else observed_array(parts.groups, "group index")
    n_groups = int(parts.n_groups or 0)
    return GaussianLinearRows(x, y, groups, n_groups, parts.intercept is not None, x_bounds, neighbouring)


def linear_rows_count(model: Any, neighbouring: str = "substitute") -> int:
    """N of the rows :func:`linear_rows` will read: the observed variable's shape (public under substitute
    neighbours, as :attr:`pymc_dp.mechanisms.RowMechanisms.n_rows`), known before anything is charged or read."""
    from pymc_dp.model_structure import observed_rows

    return int(observed_rows(model, neighbouring))
