"""The base of the exponential families: the class, public-bound checks and how rows are admitted into the bounds.

Pure math: no PyMC, no data (split out of :mod:`pymc_dp.exponential_family.families`, which
re-exports every name). :class:`ExponentialFamily` is a likelihood known through Σᵢ S(xᵢ); the
helpers check public bounds and settings, and map raw rows into the public bounds one row at a
time (``out_of_bounds="clamp"``) or refuse them without naming a value (``"raise"``).

Neighbouring relation: substitute (one row replaced, N public); see
:mod:`pymc_dp.exponential_family.families` for the sensitivities the intervals give.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import pytensor.tensor as pt

__all__ = ["OUT_OF_BOUNDS_MODES", "ExponentialFamily", "check_out_of_bounds", "project_onto_scaled_simplex"]


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


def _column(data: Any, out_of_bounds: str, what: str) -> np.ndarray:
    """A one-statistic family's ``data`` as a 1-d float array of ``what`` (after checking ``out_of_bounds``)."""
    check_out_of_bounds(out_of_bounds)
    x = _as_rows(data)
    if x.ndim != 1:
        raise ValueError(f"`data` must be a 1-d array{what}. Found shape {x.shape}.")
    return x


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
