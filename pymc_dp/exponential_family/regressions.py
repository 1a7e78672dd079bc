"""The regression families: linear and logistic regression on released statistics, and the covariate anchors.

Pure math: no PyMC, no data (split out of :mod:`pymc_dp.exponential_family.families`, which
re-exports every name). The statistics are products of a row's entries (zzᵀ, s·x and xxᵀ),
their intervals come from the public bounds by interval arithmetic; a covariate anchor
releases a model's mean function and its slope at a public point β̂.

Neighbouring relation: substitute (one row replaced, N public). Each coordinate of the
aggregate moves by at most its interval's width when one row is replaced: Δ₁ is the sum of
the widths and Δ₂ their L2 norm (Foulds et al. 2016, eq. 17).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytensor.tensor as pt

from pymc_dp._validation import check_positive_int
from pymc_dp.exponential_family.base import (
    ExponentialFamily,
    _admit_integers,
    _admit_real,
    _as_rows,
    _check_bounds,
    _check_finite_real,
    _interval_product,
    _interval_square,
    check_out_of_bounds,
)

__all__ = [
    "ANCHOR_HESSIAN_WEIGHT",
    "LinearRegression",
    "LogisticCovariateAnchor",
    "LogisticRegression",
    "chebyshev_log_sigmoid",
    "psd_projection",
    "split_anchor_statistics",
]


def _regression_rows(data: Any, n_features: int, out_of_bounds: str, x_bounds: Any, kind: str) -> tuple:
    """(X admitted into ``x_bounds``, raw y) from a pair (X, y), shapes checked; ``kind`` names the model."""
    check_out_of_bounds(out_of_bounds)
    if not isinstance(data, tuple | list) or len(data) != 2:
        raise TypeError(f"`data` must be a pair (X, y) for {kind}. Found another object.")
    x, y = _as_rows(data[0], "X"), _as_rows(data[1], "y")
    if x.ndim == 1:
        x = x.reshape(-1, 1)
    if x.ndim != 2 or x.shape[1] != n_features or y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise ValueError(
            f"`data` must be X of shape (rows, {n_features}) and y of shape (rows,). Found {x.shape} and {y.shape}."
        )
    xl, xu = (np.asarray(b) for b in x_bounds)
    return _admit_real(x, xl, xu, out_of_bounds, "`x_bounds`"), y


def _product_intervals(bounds: list, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of zⱼzₖ over the index pairs (rows, cols), each zⱼ in its interval ``bounds[j]``."""
    pairs = [
        _interval_square(bounds[j]) if j == k else _interval_product(bounds[j], bounds[k]) for j, k in zip(rows, cols)
    ]
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def _symmetric(values: np.ndarray, size: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The symmetric size × size matrix whose upper triangle (rows, cols) holds ``values``."""
    out = np.zeros((size, size))
    out[rows, cols] = values
    out[cols, rows] = values
    return out


def psd_projection(matrix: np.ndarray) -> np.ndarray:
    """The symmetric ``matrix`` with its eigenvalues clipped to ≥ 0 (the nearest positive semi-definite one)."""
    values, vectors = np.linalg.eigh(matrix)
    return (vectors * np.maximum(values, 0.0)) @ vectors.T


def _psd_triu(matrix: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The upper triangle (rows, cols) of ``matrix`` with its eigenvalues clipped to ≥ 0."""
    return psd_projection(matrix)[rows, cols]


@dataclass(frozen=True, repr=False)
class LinearRegression(ExponentialFamily):
    """y = Xβ + N(0, σ²) with public bounds on every feature and on the target.

    Rows z = (x₁, …, x_d, y). The statistic is the upper triangle (row-major, diagonal
    included) of z zᵀ, i.e. of [[XᵀX, Xᵀy], [yᵀX, yᵀy]] after summing; its coordinate
    intervals come from the bounds by interval arithmetic. Include a column of ones with
    bounds (1, 1) for an intercept (it costs nothing: its interval has width 0).

    log-likelihood = −n log σ − (yᵀy − 2βᵀXᵀy + βᵀXᵀXβ)/(2σ²) (+ const). Feasible aggregate:
    the (d+1)×(d+1) matrix ZᵀZ is positive semi-definite; the projection clips the entries to
    their boxes and then the eigenvalues to ≥ 0, which keeps the quadratic form non-negative
    and the likelihood proper.

    Noise-aware likelihood (Bernstein and Sheldon 2019): CLT of zzᵀ with Gaussian covariates
    whose mean and covariance are latent (priors from the public bounds), the Laplace noise
    replaced by the normal of the same variance so that the release is Gaussian in closed
    form; NUTS on θ and the covariate moments. Clamping is not modelled there.

    Parameters
    ----------
    x_bounds : (lower, upper)
        Scalars or one value per feature.
    y_bounds : (lower, upper)
        Bounds on the target.
    n_features : int
        d.
    """

    n_features: int = 1
    x_bounds: tuple[Any, Any] | None = None
    y_bounds: tuple[float, float] | None = None
    name: ClassVar[str] = "linear_regression"
    params: ClassVar[tuple[str, ...]] = ("beta", "sigma")

    def __post_init__(self) -> None:
        d = check_positive_int("n_features", self.n_features)
        xl, xu = _check_bounds("x_bounds", self.x_bounds, d)
        yl, yu = _check_bounds("y_bounds", self.y_bounds, 1)
        object.__setattr__(self, "x_bounds", (tuple(map(float, xl)), tuple(map(float, xu))))
        object.__setattr__(self, "y_bounds", (float(yl[0]), float(yu[0])))

    @property
    def _z_bounds(self) -> list[tuple[float, float]]:
        xl, xu = self.x_bounds
        return [*zip(xl, xu, strict=True), self.y_bounds]

    @property
    def _triu(self) -> tuple[np.ndarray, np.ndarray]:
        return np.triu_indices(self.n_features + 1)

    def intervals(self) -> tuple[np.ndarray, np.ndarray]:
        return _product_intervals(self._z_bounds, *self._triu)

    def settings(self) -> dict[str, Any]:
        return {
            "family": self.name,
            "n_features": self.n_features,
            "x_bounds": [list(b) for b in self.x_bounds],
            "y_bounds": list(self.y_bounds),
        }

    def check_data(self, data: Any, out_of_bounds: str = "clamp") -> np.ndarray:
        x, y = _regression_rows(data, self.n_features, out_of_bounds, self.x_bounds, "linear regression")
        y = _admit_real(y, self.y_bounds[0], self.y_bounds[1], out_of_bounds, f"`y_bounds` = {self.y_bounds}")
        return np.column_stack([x, y])

    def row_statistics(self, data: np.ndarray) -> np.ndarray:
        rows, cols = self._triu
        return data[:, rows] * data[:, cols]

    def matrix(self, statistics: np.ndarray) -> np.ndarray:
        """The symmetric (d+1)×(d+1) matrix ZᵀZ from the statistic vector."""
        return _symmetric(statistics, self.n_features + 1, *self._triu)

    def project(self, statistics: np.ndarray, n_rows: int) -> np.ndarray:
        boxed = super().project(statistics, n_rows)
        return _psd_triu(self.matrix(boxed), *self._triu)

    def natural(self, beta: Any, sigma: Any) -> tuple[Any, Any]:
        beta = pt.as_tensor_variable(beta)
        sigma = pt.as_tensor_variable(sigma)
        w = pt.concatenate([beta.reshape((-1,)), pt.constant(np.array([-1.0]))])
        rows, cols = self._triu
        # zᵀ W z with W = −wwᵀ/(2σ²): diagonal entries once, off-diagonal ones twice.
        weight = np.where(rows == cols, 1.0, 2.0)
        phi = -weight * w[rows] * w[cols] / (2.0 * sigma * sigma)
        return phi, -pt.log(sigma)


def chebyshev_log_sigmoid(radius: float, degree: int = 2) -> np.ndarray:
    """Power-basis coefficients (a₀, a₁, …) of the Chebyshev interpolant of log σ(u) on [−radius, radius].

    log σ(u) = −log(1 + e⁻ᵘ), interpolated at the ``degree + 1`` Chebyshev points of the
    interval and written as Σₖ aₖ uᵏ (Huggins, Adams and Broderick 2017, PASS-GLM, §3; the
    approximation Kulkarni et al. 2021 build their released statistics on). Pure NumPy.
    """
    radius = _check_finite_real("approximation_radius", radius)
    if radius <= 0.0:
        raise ValueError(f"`approximation_radius` must be a positive number. Found {radius!r}.")
    chebyshev = np.polynomial.chebyshev.Chebyshev.interpolate(
        lambda u: -np.logaddexp(0.0, -u), degree, domain=[-radius, radius]
    )
    return chebyshev.convert(kind=np.polynomial.Polynomial).coef


def _logistic_rows(data: Any, n_features: int, out_of_bounds: str, x_bounds: Any) -> np.ndarray:
    """(X, y) of a logistic regression as rows [x, y], x clamped to (or checked against) the bounds, y ∈ {0, 1}."""
    x, y = _regression_rows(data, n_features, out_of_bounds, x_bounds, "logistic regression")
    y = _admit_integers(y, 1, out_of_bounds, "the labels {0, 1}")
    return np.column_stack([x, y])


class _CovariateFamily(ExponentialFamily):
    """A family whose rows carry d covariates in a public box (fields ``n_features``, ``x_bounds``).

    Shared by the logistic and Poisson regressions and their covariate anchors: the check of
    those two settings, the upper-triangle indices of xxᵀ and the head of :meth:`settings`.
    """

    n_features: int
    x_bounds: tuple[Any, Any]

    def _check_covariates(self) -> int:
        """Check ``n_features`` and ``x_bounds`` (stored as float tuples); return d."""
        d = check_positive_int("n_features", self.n_features)
        xl, xu = _check_bounds("x_bounds", self.x_bounds, d)
        object.__setattr__(self, "x_bounds", (tuple(map(float, xl)), tuple(map(float, xu))))
        return d

    @property
    def _triu(self) -> tuple[np.ndarray, np.ndarray]:
        return np.triu_indices(self.n_features)

    def _covariate_settings(self) -> dict[str, Any]:
        return {
            "family": self.name,
            "n_features": self.n_features,
            "x_bounds": [list(b) for b in self.x_bounds],
        }


@dataclass(frozen=True, repr=False)
class LogisticRegression(_CovariateFamily):
    """y ∈ {0, 1} with P(y = 1 | x) = σ(xᵀβ), public bounds on every feature (Kulkarni et al. 2021).

    With s = 2y − 1 ∈ {−1, 1} the log-likelihood of a row is log σ(s xᵀβ). Its degree-2
    Chebyshev approximation on [−R, R] (R = ``approximation_radius``),
    log σ(u) ≈ a₀ + a₁u + a₂u², turns the data's log-likelihood into
    N a₀ + a₁ βᵀ Σ sx + a₂ βᵀ (Σ xxᵀ) β (s² = 1), an exponential family in the statistic
    S(x, y) = (s·x, upper triangle of xxᵀ) (Huggins, Adams and Broderick 2017; Kulkarni et
    al. 2021, §3). Include a column of ones with bounds (1, 1) for an intercept: its s·1 entry
    counts the classes, its 1·1 entry is the constant N (width 0, no noise needed).

    The naive likelihood is that approximation read at the projected release (accurate while
    |xᵀβ| stays within R for most rows; a₂ < 0 and the projected Σ xxᵀ is positive
    semi-definite, so it is a proper Gaussian in β). The noise-aware likelihood does not use
    the approximation: it is the CLT of S under the logistic model itself, with Gaussian
    covariates whose moments are latent (as for linear regression), and the Laplace noise
    replaced by the normal of its variance (:func:`pymc_dp.exponential_family.noise_aware.
    logistic_regression_loglik`).

    Neighbouring relation: substitute (one row replaced, N public); Δ₁ is the sum of the
    coordinate interval widths (s·xⱼ ∈ [−mⱼ, mⱼ] with mⱼ = max |boundⱼ|; xⱼxₖ by interval
    arithmetic).

    Parameters
    ----------
    n_features : int
        d, the number of columns of X (an intercept column included).
    x_bounds : (lower, upper)
        Scalars or one value per feature.
    approximation_radius : float, default 4.0
        R, the interval [−R, R] of xᵀβ on which the naive likelihood's polynomial is fitted.

    References
    ----------
    Kulkarni, T., Jälkö, J., Koskela, A., Kaski, S. and Honkela, A. (2021). Differentially
    private Bayesian inference for generalized linear models. ICML.
    Huggins, J. H., Adams, R. P. and Broderick, T. (2017). PASS-GLM: polynomial approximate
    sufficient statistics for scalable Bayesian GLM inference. NeurIPS.
    """

    n_features: int = 1
    x_bounds: tuple[Any, Any] | None = None
    approximation_radius: float = 4.0
    name: ClassVar[str] = "logistic_regression"
    params: ClassVar[tuple[str, ...]] = ("beta",)

    def __post_init__(self) -> None:
        self._check_covariates()
        coefficients = chebyshev_log_sigmoid(self.approximation_radius)
        object.__setattr__(self, "approximation_radius", float(self.approximation_radius))
        object.__setattr__(self, "_coefficients", coefficients)

    @property
    def coefficients(self) -> np.ndarray:
        """(a₀, a₁, a₂) of log σ(u) ≈ a₀ + a₁u + a₂u² on [−R, R] (:func:`chebyshev_log_sigmoid`)."""
        return self._coefficients

    def product_positions(self) -> dict[tuple[int, int], int]:
        """{(j, k), j ≤ k: index of Σ xⱼxₖ in the statistic vector} (after the d entries of Σ s·x)."""
        d = self.n_features
        return {(int(r), int(c)): d + i for i, (r, c) in enumerate(zip(*self._triu, strict=True))}

    def intervals(self) -> tuple[np.ndarray, np.ndarray]:
        xl, xu = self.x_bounds
        reach = np.maximum(np.abs(xl), np.abs(xu))
        lo, hi = _product_intervals(list(zip(xl, xu, strict=True)), *self._triu)
        return np.concatenate([-reach, lo]), np.concatenate([reach, hi])

    def settings(self) -> dict[str, Any]:
        return {**self._covariate_settings(), "approximation_radius": self.approximation_radius}

    def check_data(self, data: Any, out_of_bounds: str = "clamp") -> np.ndarray:
        return _logistic_rows(data, self.n_features, out_of_bounds, self.x_bounds)

    def row_statistics(self, data: np.ndarray) -> np.ndarray:
        x, s = data[:, :-1], 2.0 * data[:, -1:] - 1.0
        rows, cols = self._triu
        return np.column_stack([s * x, x[:, rows] * x[:, cols]])

    def matrix(self, statistics: np.ndarray) -> np.ndarray:
        """The symmetric d × d matrix Σ xxᵀ from the statistic vector."""
        return _symmetric(statistics[self.n_features :], self.n_features, *self._triu)

    def project(self, statistics: np.ndarray, n_rows: int) -> np.ndarray:
        boxed = super().project(statistics, n_rows)
        return np.concatenate([boxed[: self.n_features], _psd_triu(self.matrix(boxed), *self._triu)])

    def natural(self, beta: Any) -> tuple[Any, Any]:
        beta = pt.as_tensor_variable(beta).reshape((-1,))
        a0, a1, a2 = (float(a) for a in self.coefficients)
        rows, cols = self._triu
        # βᵀ(Σ xxᵀ)β from the upper triangle: diagonal entries once, off-diagonal ones twice.
        weight = np.where(rows == cols, 1.0, 2.0)
        phi = pt.concatenate([a1 * beta, a2 * weight * beta[rows] * beta[cols]])
        return phi, pt.constant(a0)


def split_anchor_statistics(statistics: np.ndarray, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """(F, H) from a covariate anchor's (noisy) statistic vector: F the first d entries, H the symmetric d × d
    matrix of the rest, unweighted (divided by :data:`ANCHOR_HESSIAN_WEIGHT`)."""
    statistics = np.asarray(statistics, dtype=float)
    d = n_features
    return statistics[:d], _symmetric(statistics[d:] / ANCHOR_HESSIAN_WEIGHT, d, *np.triu_indices(d))


#: Weight w of the Σ (1 − g²)xxᵀ block in a covariate anchor's released vector: the block's share of the
#: anchor's L2 sensitivity shrinks by w (its noise, read back as Ĥ, grows by 1/w), because the mean
#: function's level F̂ sets the posterior's location and the Hessian only its slope near β̂.
ANCHOR_HESSIAN_WEIGHT = 0.5


class _CovariateAnchorBase(_CovariateFamily):
    """What the covariate anchors of the regression families share (not a family on its own).

    A covariate anchor at a public point β̂ releases S(x) = (m·x, w·(upper triangle of h·xxᵀ)),
    with per-row weights m and h of the model at xᵀβ̂ and w = :data:`ANCHOR_HESSIAN_WEIGHT`.
    Subclasses are frozen dataclasses with the fields ``n_features``, ``x_bounds`` and ``anchor``
    (and their own public settings), and define ``check_data``, :meth:`_mean_intervals` (the
    per-coordinate bounds of m·x), :meth:`_hessian_bound` (c with h ∈ [0, c]) and
    :meth:`_row_weights` (m and h per row); :attr:`_model` names the likelihood that reads them.

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public). Coordinate (j, k) of the
    Hessian block lies in w·c times the hull of {0} and the interval of xⱼxₖ; Δ₁ and Δ₂ are the
    L1 and L2 norms of the widths: functions of the public bounds and of β̂, which is public.
    """

    _model: ClassVar[str] = ""

    anchor: tuple[float, ...]

    def __post_init__(self) -> None:
        d = self._check_covariates()
        self._check_settings()
        anchor = np.asarray(self.anchor, dtype=float)
        if anchor.shape != (d,) or not np.all(np.isfinite(anchor)):
            raise ValueError(f"`anchor` must be {d} finite numbers (one per feature). Found shape {anchor.shape}.")
        object.__setattr__(self, "anchor", tuple(map(float, anchor)))

    def _check_settings(self) -> None:
        """Check and normalise the subclass's own public settings (after the bounds, before the anchor)."""

    def _extra_settings(self) -> dict[str, Any]:
        """The subclass's own public settings, as recorded by :meth:`settings`."""
        return {}

    def _mean_intervals(self, xl: np.ndarray, xu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) of m·x per coordinate over the public box."""
        raise NotImplementedError

    def _hessian_bound(self) -> float:
        """c: h ∈ [0, c] for every admissible row."""
        raise NotImplementedError

    def _row_weights(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(m, h), one value per row of the covariates ``x``."""
        raise NotImplementedError

    def intervals(self) -> tuple[np.ndarray, np.ndarray]:
        xl, xu = (np.asarray(b) for b in self.x_bounds)
        f_lo, f_hi = self._mean_intervals(xl, xu)
        lo, hi = _product_intervals(list(zip(xl, xu, strict=True)), *self._triu)
        w = ANCHOR_HESSIAN_WEIGHT * self._hessian_bound()
        return np.concatenate([f_lo, w * np.minimum(lo, 0.0)]), np.concatenate([f_hi, w * np.maximum(hi, 0.0)])

    def settings(self) -> dict[str, Any]:
        return {
            **self._covariate_settings(),
            **self._extra_settings(),
            "anchor": list(self.anchor),
            "hessian_weight": ANCHOR_HESSIAN_WEIGHT,
        }

    def row_statistics(self, data: np.ndarray) -> np.ndarray:
        x = data[:, :-1]
        mean, hessian = self._row_weights(x)
        weight = ANCHOR_HESSIAN_WEIGHT * hessian
        rows, cols = self._triu
        return np.column_stack([mean[:, None] * x, weight[:, None] * x[:, rows] * x[:, cols]])

    def split(self, statistics: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(F, H) from a (noisy) statistic vector (:func:`split_anchor_statistics`)."""
        return split_anchor_statistics(statistics, self.n_features)

    def natural(self, **params: Any) -> tuple[Any, Any]:
        raise ValueError(
            f"The covariate anchor has no likelihood of its own: it is read by the noise-aware {self._model} "
            "likelihood of the release it belongs to."
        )


@dataclass(frozen=True, repr=False)
class LogisticCovariateAnchor(_CovariateAnchorBase):
    """The logistic model's mean function and its slope at one public point β̂ (Σ over rows).

    S(x) = (g·x, w·(upper triangle of (1 − g²)·xxᵀ)) with g = tanh(xᵀβ̂/2) and w =
    :data:`ANCHOR_HESSIAN_WEIGHT`. Under P(y = 1 | x) = σ(xᵀβ), s = 2y − 1 has E[s | x] = g, so
    F(β̂) = Σᵢ gᵢxᵢ is what Σ s·x averages to at β = β̂ *for these covariates*, its Jacobian is
    ½H(β̂) with H(β̂) = Σᵢ (1 − gᵢ²) xᵢxᵢᵀ, and H(β̂) is also the covariance of Σ s·x given the
    covariates at β̂. Released next to the (Σ s·x, Σ xxᵀ) of :class:`LogisticRegression`, it
    anchors that release's Gaussian covariate model: the noise-aware likelihood's mean function
    is F̂ + ½Ĥ(β − β̂) plus only the Gaussian model's second-order change
    (:func:`pymc_dp.exponential_family.noise_aware.logistic_regression_loglik`). Reads the
    covariates only; the labels are checked and ignored. Used by
    ``release_statistics("logistic_regression", ..., covariate_anchors=k)``, not on its own.

    Neighbouring relation: substitute (one row replaced, N public). |g| ≤ 1, so coordinate j of
    g·x lies in [−mⱼ, mⱼ] (mⱼ = max |boundⱼ|); 1 − g² ∈ [0, 1], so w(1 − g²)xⱼxₖ lies in w times
    the hull of {0} and the interval of xⱼxₖ. Δ₁ and Δ₂ are the L1 and L2 norms of the widths.

    Parameters
    ----------
    n_features, x_bounds
        As for :class:`LogisticRegression`.
    anchor : sequence of float
        β̂, the public point (a function of earlier releases only).
    """

    n_features: int = 1
    x_bounds: tuple[Any, Any] | None = None
    anchor: tuple[float, ...] = ()
    name: ClassVar[str] = "logistic_covariate_anchor"
    params: ClassVar[tuple[str, ...]] = ()
    _model: ClassVar[str] = "logistic-regression"

    def check_data(self, data: Any, out_of_bounds: str = "clamp") -> np.ndarray:
        return _logistic_rows(data, self.n_features, out_of_bounds, self.x_bounds)

    def _mean_intervals(self, xl: np.ndarray, xu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        reach = np.maximum(np.abs(xl), np.abs(xu))  # |g| ≤ 1
        return -reach, reach

    def _hessian_bound(self) -> float:
        return 1.0  # 1 − g² ∈ [0, 1]

    def _row_weights(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g = np.tanh(0.5 * (x @ np.asarray(self.anchor)))
        return g, 1.0 - g * g
