"""Conjugate exponential families described by their aggregate sufficient statistics.

Pure math: no PyMC, no data. A family knows, from public settings alone (the number of
categories, trials, a count bound, data bounds), the per-row sufficient statistic S(x), the
interval each coordinate of S(x) lies in, the L1 and L2 sensitivities of the aggregate
Σᵢ S(xᵢ), the feasible set of the aggregate (for the projection after noise) and the
log-likelihood written through the aggregate,

    log p(X | θ) = n log g(θ) + φ(θ)ᵀ Σᵢ S(xᵢ) + Σᵢ log h(xᵢ),

where φ are the natural parameters (Yıldırım and Ermiş 2019, eq. 7; Foulds et al. 2016, §3.1).
The last term does not depend on θ and is dropped. The functions ``natural`` and
``loglik`` build PyTensor graphs; they accept NumPy values too (evaluate with ``.eval()``).

Neighbouring relation: substitute (one row replaced, N public). Replacing row x by x′ moves
the aggregate by S(x′) − S(x); each coordinate moves by at most the width of its interval,
so Δ₁ = sup ‖S(x) − S(x′)‖₁ ≤ Σⱼ (hiⱼ − loⱼ) and Δ₂ ≤ (Σⱼ (hiⱼ − loⱼ)²)^½ (Foulds et al.
2016, eq. 17; Yıldırım and Ermiş 2019, ∇₂S in §3.3). Families with a tighter exact value
(Categorical: one-hot rows, Δ₁ = 2, Δ₂ = √2) override it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytensor.tensor as pt

from pymc_dp._validation import check_positive_int

__all__ = [
    "ANCHOR_HESSIAN_WEIGHT",
    "SUPPORTED_FAMILIES",
    "Bernoulli",
    "Binomial",
    "Categorical",
    "ExponentialFamily",
    "LinearRegression",
    "LogisticCovariateAnchor",
    "LogisticRegression",
    "Normal",
    "Poisson",
    "get_family",
    "project_onto_scaled_simplex",
    "psd_projection",
    "split_anchor_statistics",
]


def _check_finite_real(name: str, value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must be a finite real number. Found {value!r}.") from None
    if not math.isfinite(x):
        raise ValueError(f"`{name}` must be a finite real number (a public data bound). Found {value!r}.")
    return x


def _check_bounds(name: str, bounds: Any, size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) arrays of finite public bounds with lower ≤ upper."""
    if bounds is None:
        raise ValueError(f"`{name}` must be given as (lower, upper): public, finite data bounds. Found None.")
    try:
        lower, upper = bounds
        lower = np.atleast_1d(np.asarray(lower, dtype=float))
        upper = np.atleast_1d(np.asarray(upper, dtype=float))
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a pair (lower, upper) of numbers or arrays. Found {bounds!r}.") from None
    if size is not None:
        try:
            lower, upper = np.broadcast_to(lower, (size,)).copy(), np.broadcast_to(upper, (size,)).copy()
        except ValueError:
            raise ValueError(
                f"`{name}` must hold scalars or {size} values per bound. Found shapes {lower.shape}, {upper.shape}."
            ) from None
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
        raise ValueError(f"`{name}` must be finite (public data bounds). Found {bounds!r}.")
    if np.any(lower > upper):
        raise ValueError(f"`{name}` must have lower ≤ upper. Found {bounds!r}.")
    return lower, upper


def _interval_product(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    products = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
    return min(products), max(products)


def _interval_square(a: tuple[float, float]) -> tuple[float, float]:
    low, high = a
    if low <= 0.0 <= high:
        return 0.0, max(low * low, high * high)
    return min(low * low, high * high), max(low * low, high * high)


def project_onto_scaled_simplex(values: np.ndarray, total: float) -> np.ndarray:
    """Euclidean projection of ``values`` onto {c ≥ 0, Σc = total} (Duchi et al. 2008, Fig. 1)."""
    v = np.asarray(values, dtype=float)
    u = np.sort(v)[::-1]
    cumulative = np.cumsum(u) - total
    index = np.arange(1, v.size + 1)
    rho = np.nonzero(u - cumulative / index > 0)[0][-1]
    shift = cumulative[rho] / (rho + 1.0)
    return np.maximum(v - shift, 0.0)


def _check_param_names(family: Any, params: dict[str, Any]) -> None:
    """Refuse a likelihood's parameters unless their names are exactly ``family.params``.

    Reads the names only (never the values), so the error holds nothing but public names.
    """
    missing = [p for p in family.params if p not in params]
    extra = [p for p in params if p not in family.params]
    if missing or extra:
        raise ValueError(
            f"The parameters of the {family.name} likelihood must be exactly {list(family.params)}. "
            f"Found {sorted(params)}."
        )


class ExponentialFamily:
    """Base class: a conjugate exponential-family likelihood known through Σᵢ S(xᵢ).

    Subclasses define ``params`` (names of the likelihood's parameters), ``row_statistics``
    (per-row S(x), shape rows × d), ``intervals`` (per-coordinate [lo, hi] of S(x)),
    ``natural`` (φ(θ), log g(θ)), ``check_data`` and optionally ``project``.
    """

    name: ClassVar[str] = ""
    params: ClassVar[tuple[str, ...]] = ()

    # -- public settings ----------------------------------------------------------------
    def intervals(self) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi): every coordinate of S(x) lies in [loⱼ, hiⱼ] for every admissible row x."""
        raise NotImplementedError

    @property
    def dim(self) -> int:
        """d, the length of the statistic vector."""
        return int(self.intervals()[0].size)

    def l1_sensitivity(self) -> float:
        """Δ₁ = sup ‖S(x) − S(x′)‖₁ under substitute neighbours (Foulds et al. 2016, eq. 17)."""
        lo, hi = self.intervals()
        return float(np.sum(hi - lo))

    def l2_sensitivity(self) -> float:
        """Δ₂ = sup ‖S(x) − S(x′)‖₂ under substitute neighbours (Yıldırım and Ermiş 2019, ∇₂S, §3.3)."""
        lo, hi = self.intervals()
        return float(np.sqrt(np.sum((hi - lo) ** 2)))

    def grid_intervals(self, exponent: int) -> tuple[list[int], list[int]]:
        """(Lⱼ, Uⱼ): the interval of every coordinate in units of the grid 2^``exponent``, rounded to nearest.

        A row statistic clipped to [loⱼ, hiⱼ] and rounded to the grid (round half to even, exact
        after the scaling by a power of two) lies in [Lⱼ, Uⱼ]: rounding is monotone.
        """
        lo, hi = self.intervals()
        return (
            [int(v) for v in np.rint(np.ldexp(lo, -exponent))],
            [int(v) for v in np.rint(np.ldexp(hi, -exponent))],
        )

    def grid_sensitivities(self, exponent: int) -> tuple[int, int]:
        """(Δ₁, Δ₂²) of the statistics rounded row by row to the grid 2^``exponent``, in grid units (exact integers).

        Every coordinate of a rounded row lies in [Lⱼ, Uⱼ] (:meth:`grid_intervals`), so replacing
        one row moves the integer sum by at most Uⱼ − Lⱼ in coordinate j: Δ₁ = Σ (Uⱼ − Lⱼ),
        Δ₂² = Σ (Uⱼ − Lⱼ)². Rounding can add at most one unit per coordinate to the exact
        widths; for bounds on the grid (integers, dyadic fractions) it adds nothing.
        """
        lower, upper = self.grid_intervals(exponent)
        widths = [u - v for v, u in zip(lower, upper, strict=True)]
        return sum(widths), sum(w * w for w in widths)

    def settings(self) -> dict[str, Any]:
        """Public settings, for the accountant record."""
        return {"family": self.name}

    # -- per-row formulas: pure functions, applied to data by the mechanism layer only ----------
    # (pymc_dp.mechanisms.PrivateSufficientStatistics; tests/test_boundary.py enforces it)
    def check_data(self, data: Any, out_of_bounds: str = "clamp") -> np.ndarray:
        """Raw rows mapped into the public bounds (``"clamp"``) or refused if any lies outside (``"raise"``).

        ``"clamp"`` maps each row, on its own, to the nearest admissible row: numbers are
        clipped to the bounds, counts and labels rounded to the nearest admissible integer,
        NaN replaced by the lower bound (or 0). Nothing is reported: which or how many rows
        moved is not released. ``"raise"`` refuses the data if any row lies outside, with a
        message that carries no count and no value. Shapes are checked in both modes.
        """
        raise NotImplementedError

    def row_statistics(self, data: np.ndarray) -> np.ndarray:
        """S(xᵢ) for every row, shape (rows, d)."""
        raise NotImplementedError

    # -- post-processing of released values -------------------------------------------------
    def project(self, statistics: np.ndarray, n_rows: int) -> np.ndarray:
        """Project noisy aggregate statistics onto the feasible set (default: the box n·[lo, hi])."""
        lo, hi = self.intervals()
        return np.clip(np.asarray(statistics, dtype=float), n_rows * lo, n_rows * hi)

    # -- likelihood -----------------------------------------------------------------------
    def natural(self, **params: Any) -> tuple[Any, Any]:
        """(φ(θ) as a length-d vector, log g(θ) as a scalar) — PyTensor graphs."""
        raise NotImplementedError

    def _check_params(self, params: dict[str, Any]) -> None:
        """Refuse the parameters unless their names are exactly :attr:`params` (:func:`_check_param_names`)."""
        _check_param_names(self, params)

    def loglik(self, statistics: Any, n_rows: int, **params: Any) -> Any:
        """n log g(θ) + φ(θ)ᵀ S: the log-likelihood up to a θ-free constant (Yıldırım and Ermiş 2019, eq. 7)."""
        self._check_params(params)
        phi, log_g = self.natural(**params)
        return n_rows * log_g + pt.dot(phi, pt.as_tensor_variable(np.asarray(statistics, dtype=float)))

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in self.settings().items() if k != "family")
        return f"{type(self).__name__}({settings})"


def _as_rows(data: Any, name: str = "data") -> np.ndarray:
    try:
        array = np.asarray(data, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must be an array of numbers. Found {type(data).__name__}.") from None
    if array.ndim == 0 or array.shape[0] == 0:
        raise ValueError(f"`{name}` must hold at least one row. Found shape {array.shape}.")
    return array


OUT_OF_BOUNDS_MODES = ("clamp", "raise")


def check_out_of_bounds(value: Any) -> str:
    """``out_of_bounds`` must be "clamp" (default) or "raise"."""
    if not isinstance(value, str) or value not in OUT_OF_BOUNDS_MODES:
        raise ValueError(f"`out_of_bounds` must be one of {list(OUT_OF_BOUNDS_MODES)}. Found {value!r}.")
    return value


def _outside(what: str) -> ValueError:
    # No count and no value: how many rows lie outside is itself a function of the data.
    return ValueError(
        f"`data` must lie within {what} (out_of_bounds='raise'). Some rows lie outside; which and how many "
        "are not shown. Use out_of_bounds='clamp' (the default) to map each row into the public bounds."
    )


def _clamp_real(x: np.ndarray, lower: Any, upper: Any) -> np.ndarray:
    """x clipped to [lower, upper] entry by entry; NaN → lower (±inf → the nearer bound)."""
    lower = np.broadcast_to(np.asarray(lower, dtype=float), x.shape)
    return np.clip(np.where(np.isnan(x), lower, x), lower, upper)


def _clamp_integers(x: np.ndarray, upper: int) -> np.ndarray:
    """x rounded to the nearest integer in 0..upper; NaN → 0."""
    return np.clip(np.round(np.nan_to_num(x, nan=0.0, posinf=upper, neginf=0.0)), 0, upper)


def _admit_integers(x: np.ndarray, upper: int, out_of_bounds: str, what: str) -> np.ndarray:
    bad = ~np.isfinite(x) | (x < 0) | (x > upper) | (x != np.round(x))
    if not bad.any():
        return x
    if check_out_of_bounds(out_of_bounds) == "raise":
        raise _outside(what)
    return _clamp_integers(x, upper)


def _admit_real(x: np.ndarray, lower: Any, upper: Any, out_of_bounds: str, what: str) -> np.ndarray:
    bad = ~np.isfinite(x) | (x < lower) | (x > upper)
    if not bad.any():
        return x
    if check_out_of_bounds(out_of_bounds) == "raise":
        raise _outside(what)
    return _clamp_real(x, lower, upper)


@dataclass(frozen=True, repr=False)
class Binomial(ExponentialFamily):
    """Binomial(n_trials, p) rows with known ``n_trials``: S(x) = x ∈ {0, …, n_trials}, Δ₁ = Δ₂ = n_trials.

    φ = logit p, log g = n_trials · log(1 − p). Feasible aggregate: [0, n · n_trials].

    Noise-aware likelihood: exact — S ~ Binomial(n · n_trials, p) summed against the Laplace
    density (no latent variable; :func:`pymc_dp.exponential_family.noise_aware.binomial_laplace_logpdf`).
    """

    n_trials: int = 1
    name: ClassVar[str] = "binomial"
    params: ClassVar[tuple[str, ...]] = ("p",)

    def __post_init__(self) -> None:
        check_positive_int("n_trials", self.n_trials)

    def intervals(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(1), np.full(1, float(self.n_trials))

    def settings(self) -> dict[str, Any]:
        return {"family": self.name, "n_trials": self.n_trials}

    def check_data(self, data: Any, out_of_bounds: str = "clamp") -> np.ndarray:
        check_out_of_bounds(out_of_bounds)
        x = _as_rows(data)
        if x.ndim != 1:
            raise ValueError(f"`data` must be a 1-d array of counts. Found shape {x.shape}.")
        return _admit_integers(x, self.n_trials, out_of_bounds, f"the integers 0..{self.n_trials}")

    def row_statistics(self, data: np.ndarray) -> np.ndarray:
        return data.reshape(-1, 1)

    def natural(self, p: Any) -> tuple[Any, Any]:
        p = pt.as_tensor_variable(p)
        return pt.stack([pt.log(p) - pt.log1p(-p)]), self.n_trials * pt.log1p(-p)


@dataclass(frozen=True, repr=False)
class Bernoulli(Binomial):
    """Bernoulli(p) rows: S(x) = x ∈ {0, 1}, Δ₁ = Δ₂ = 1 (N public). φ = logit p, log g = log(1 − p).

    Noise-aware likelihood: exact, as for :class:`Binomial` with n_trials = 1.
    """

    n_trials: int = 1
    name: ClassVar[str] = "bernoulli"

    def settings(self) -> dict[str, Any]:
        return {"family": self.name}


@dataclass(frozen=True, repr=False)
class Categorical(ExponentialFamily):
    """Categorical(p) rows over ``n_categories`` classes: S(x) = one-hot(x), the class counts.

    Replacing a row moves two counts by one: Δ₁ = 2, Δ₂ = √2. φ = log p, log g = 0. Feasible
    aggregate: {c ≥ 0, Σc = n} (Euclidean projection onto the scaled simplex).

    Noise-aware likelihood: CLT normal of the counts with the Laplace noise as a Gaussian
    scale mixture (latent variances sampled by NUTS): no closed form in several dimensions.
    """

    n_categories: int = 2
    name: ClassVar[str] = "categorical"
    params: ClassVar[tuple[str, ...]] = ("p",)

    def __post_init__(self) -> None:
        if check_positive_int("n_categories", self.n_categories) < 2:
            raise ValueError(f"`n_categories` must be at least 2. Found {self.n_categories}.")

    def intervals(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(self.n_categories), np.ones(self.n_categories)

    def l1_sensitivity(self) -> float:
        return 2.0

    def l2_sensitivity(self) -> float:
        return math.sqrt(2.0)

    def grid_sensitivities(self, exponent: int) -> tuple[int, int]:
        """One-hot rows rounded to the grid stay one-hot with entry u = round(2^−exponent): Δ₁ = 2u, Δ₂² = 2u²."""
        unit = self.grid_intervals(exponent)[1][0]
        return 2 * unit, 2 * unit * unit

    def settings(self) -> dict[str, Any]:
        return {"family": self.name, "n_categories": self.n_categories}

    def check_data(self, data: Any, out_of_bounds: str = "clamp") -> np.ndarray:
        check_out_of_bounds(out_of_bounds)
        x = _as_rows(data)
        if x.ndim != 1:
            raise ValueError(f"`data` must be a 1-d array of class labels. Found shape {x.shape}.")
        top = self.n_categories - 1
        return _admit_integers(x, top, out_of_bounds, f"the labels 0..{top}").astype(np.int64)

    def row_statistics(self, data: np.ndarray) -> np.ndarray:
        return np.eye(self.n_categories)[data]

    def project(self, statistics: np.ndarray, n_rows: int) -> np.ndarray:
        return project_onto_scaled_simplex(statistics, float(n_rows))

    def natural(self, p: Any) -> tuple[Any, Any]:
        return pt.log(pt.as_tensor_variable(p)), pt.constant(0.0)


@dataclass(frozen=True, repr=False)
class Poisson(ExponentialFamily):
    """Poisson(mu) rows with a public bound ``upper`` on each count: S(x) = x ∈ {0, …, upper}, Δ₁ = upper.

    φ = log mu, log g = −mu. Feasible aggregate: [0, n · upper].

    Noise-aware likelihood: CLT normal of the sum of the clamped counts min(x, upper) (their
    exact moments under Poisson(mu)) convolved with the Laplace noise in closed form; the
    clamped sum is not Poisson, so no exact form is used.
    """

    upper: int = 1
    name: ClassVar[str] = "poisson"
    params: ClassVar[tuple[str, ...]] = ("mu",)

    def __post_init__(self) -> None:
        check_positive_int("upper", self.upper)

    def intervals(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(1), np.full(1, float(self.upper))

    def settings(self) -> dict[str, Any]:
        return {"family": self.name, "upper": self.upper}

    def check_data(self, data: Any, out_of_bounds: str = "clamp") -> np.ndarray:
        check_out_of_bounds(out_of_bounds)
        x = _as_rows(data)
        if x.ndim != 1:
            raise ValueError(f"`data` must be a 1-d array of counts. Found shape {x.shape}.")
        return _admit_integers(x, self.upper, out_of_bounds, f"the integers 0..{self.upper} (`upper`)")

    def row_statistics(self, data: np.ndarray) -> np.ndarray:
        return data.reshape(-1, 1)

    def natural(self, mu: Any) -> tuple[Any, Any]:
        mu = pt.as_tensor_variable(mu)
        return pt.stack([pt.log(mu)]), -mu


@dataclass(frozen=True, repr=False)
class Normal(ExponentialFamily):
    """Normal(mu, sigma²) rows with known ``sigma`` and public ``bounds`` = (lower, upper) on x.

    S(x) = x ∈ [lower, upper], Δ₁ = Δ₂ = upper − lower. φ = mu/σ², log g = −mu²/(2σ²).
    Feasible aggregate: [n · lower, n · upper].

    Noise-aware likelihood: CLT normal with the censored-normal moments of clip(x, lower,
    upper) (exact when clamping is negligible: a sum of normals) convolved with the Laplace
    noise in closed form.
    """

    sigma: float = 1.0
    bounds: tuple[float, float] | None = None
    name: ClassVar[str] = "normal"
    params: ClassVar[tuple[str, ...]] = ("mu",)

    def __post_init__(self) -> None:
        sigma = _check_finite_real("sigma", self.sigma)
        if sigma <= 0:
            raise ValueError(f"`sigma` must be a positive finite number (the known standard deviation). Found {sigma}.")
        lower, upper = _check_bounds("bounds", self.bounds, 1)
        object.__setattr__(self, "bounds", (float(lower[0]), float(upper[0])))

    def intervals(self) -> tuple[np.ndarray, np.ndarray]:
        return np.array([self.bounds[0]]), np.array([self.bounds[1]])

    def settings(self) -> dict[str, Any]:
        return {"family": self.name, "sigma": float(self.sigma), "bounds": list(self.bounds)}

    def check_data(self, data: Any, out_of_bounds: str = "clamp") -> np.ndarray:
        check_out_of_bounds(out_of_bounds)
        x = _as_rows(data)
        if x.ndim != 1:
            raise ValueError(f"`data` must be a 1-d array. Found shape {x.shape}.")
        return _admit_real(x, self.bounds[0], self.bounds[1], out_of_bounds, f"`bounds` = {self.bounds}")

    def row_statistics(self, data: np.ndarray) -> np.ndarray:
        return data.reshape(-1, 1)

    def natural(self, mu: Any) -> tuple[Any, Any]:
        mu = pt.as_tensor_variable(mu)
        s2 = float(self.sigma) ** 2
        return pt.stack([mu / s2]), -(mu * mu) / (2.0 * s2)


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


SUPPORTED_FAMILIES: dict[str, type[ExponentialFamily]] = {
    "bernoulli": Bernoulli,
    "binomial": Binomial,
    "categorical": Categorical,
    "poisson": Poisson,
    "normal": Normal,
    "linear_regression": LinearRegression,
    "logistic_regression": LogisticRegression,
}


def get_family(family: str | ExponentialFamily, **settings: Any) -> ExponentialFamily:
    """A family instance from its name (``settings`` are its public parameters) or as given."""
    if isinstance(family, ExponentialFamily):
        if settings:
            raise ValueError(f"`settings` must be empty when `family` is an instance. Found {sorted(settings)}.")
        return family
    if not isinstance(family, str) or family.lower() not in SUPPORTED_FAMILIES:
        raise ValueError(
            "`family` must be one of the supported conjugate exponential families "
            f"{sorted(SUPPORTED_FAMILIES)} (Binomial with known n_trials, Poisson with a public count bound "
            f"`upper`, Normal with known sigma and public `bounds`, linear regression with public x/y bounds, logistic "
            f"regression with public x bounds and labels in {{0, 1}}). "
            f"Found {family!r}."
        )
    return SUPPORTED_FAMILIES[family.lower()](**settings)
