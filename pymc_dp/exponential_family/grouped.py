"""Grouped (hierarchical) regressions on one release of per-group sufficient statistics.

A row (x, y, g) belongs to one group g ∈ {0, …, G − 1}. The released vector is the
concatenation over the G groups of each group's *cell*: the regression's sufficient
statistic summed over the group's rows, with a constant column prepended so that the cell
also holds the group's size n_g and its sums Σx, Σy (linear regression: the upper triangle
of Σ zzᵀ with z = (1, x, y); logistic regression: (Σ s·x̃, Σ x̃x̃ᵀ) with x̃ = (1, x) and
s = 2y − 1; Poisson regression with a log link: the statistics of
:class:`~pymc_dp.exponential_family.counts.PoissonRegression`, (Σ y·x̃, Σ x̃, Σ x̃x̃ᵀ) with y
clipped to 0..``y_max``, whose Σ x̃ repeats the first row of Σ x̃x̃ᵀ: n_g is released twice, and
the noise-aware likelihood reads both copies). A row touches only its own group's cell, so one
release covers all groups at the price of one (the per-group statistics form a partition of the
rows). The number of groups G is public (stated by the caller, never read from the data); a
row's label is private, and a row whose label is not an integer in 0..G − 1 contributes
nothing (a zero statistic), which the sensitivities below cover.

The group sizes are private: each n_g is a noisy coordinate of the release, and the
noise-aware likelihood (:meth:`GroupedRegression.noise_aware_loglik`) keeps the true n_g
latent next to the true statistics (marginalised), so a small group, whose cell is mostly
noise, gives group effects that fall back to the population prior — honestly wide.

Neighbouring relation: substitute (one row replaced; N public), the relation of
:func:`pymc_dp.release_statistics`. Sensitivities of the concatenated vector are computed
here for both relations (:meth:`GroupedRegression.sensitivities`); write rⱼ = max(|loⱼ|,
|hiⱼ|) for the reach of coordinate j of one row's cell, [loⱼ, hiⱼ] its interval:

* add/remove one row: one cell moves by that row's statistic, Δ₁ = Σⱼ rⱼ, Δ₂² = Σⱼ rⱼ²;
* substitute, the row stays in its group: that cell moves by S(x′) − S(x), at most
  Σⱼ (hiⱼ − loⱼ) in L1 and (Σⱼ (hiⱼ − loⱼ)²)^½ in L2;
* substitute, the row moves from group g to g′ (or from or to an unused label): cell g
  loses S(x) and cell g′ gains S(x′), at most 2Σⱼ rⱼ in L1 and (2Σⱼ rⱼ²)^½ in L2.

So Δ₁ = 2Σⱼ rⱼ under substitution (hiⱼ − loⱼ ≤ 2rⱼ) and Δ₂ = max((Σⱼ (hiⱼ − loⱼ)²)^½,
(2Σⱼ rⱼ²)^½) — whatever G is: the G cells are priced as one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytensor.tensor as pt

from pymc_dp._validation import check_positive_int
from pymc_dp.clip_math import partitioned_cell_sensitivities
from pymc_dp.exponential_family.counts import PoissonRegression, _count_rows
from pymc_dp.exponential_family.families import (
    ExponentialFamily,
    LinearRegression,
    LogisticRegression,
    _admit_real,
    _as_rows,
    _logistic_rows,
    _regression_rows,
    check_out_of_bounds,
)

__all__ = ["GROUPED_BASES", "MAX_GROUPS", "GroupedRegression", "grouped_family"]

#: The regressions a grouped release supports: the name given to ``release_statistics``.
GROUPED_BASES = ("linear_regression", "logistic_regression", "poisson_regression")
#: The settings each grouped regression takes besides ``n_features`` and ``x_bounds``.
_BASE_SETTINGS = {
    "linear_regression": ("y_bounds",),
    "logistic_regression": ("approximation_radius",),
    "poisson_regression": ("y_max", "approximation_interval"),
}

#: Most groups one release takes (the released vector has G cells; its noise-aware likelihood G blocks).
MAX_GROUPS = 10_000


def _check_features(n_features: Any) -> int:
    if isinstance(n_features, bool) or not isinstance(n_features, int | np.integer) or n_features < 0:
        raise ValueError(
            f"`n_features` must be a non-negative integer (the covariates, no intercept). Found {n_features!r}."
        )
    return int(n_features)


@dataclass(frozen=True, repr=False)
class GroupedRegression(ExponentialFamily):
    """A linear, logistic or Poisson regression with one cell of statistics per group (public settings only).

    Parameters
    ----------
    base : {"linear_regression", "logistic_regression", "poisson_regression"}
        The regression within each group (Poisson: log link).
    n_groups : int
        G, the number of groups (public: stated by the caller, never read from the data).
    n_features : int
        p, the number of covariates (columns of X), without an intercept column: the cell
        holds the group's size and sums through a constant column prepended internally.
    x_bounds : (lower, upper)
        Public bounds of the covariates (scalars or one value per covariate); ``None`` for
        p = 0.
    y_bounds : (lower, upper)
        Linear regression: public bounds of the target.
    approximation_radius : float, default 4.0
        Logistic regression: the naive likelihood's polynomial (see
        :class:`~pymc_dp.exponential_family.families.LogisticRegression`).
    y_max : int
        Poisson regression: the public bound the counts are clipped to (0..``y_max``).
    approximation_interval : (float, float), default (-2.0, 2.0)
        Poisson regression: the naive likelihood's polynomial (see
        :class:`~pymc_dp.exponential_family.counts.PoissonRegression`).

    Notes
    -----
    Neighbouring relation: substitute (the release's; N public). Δ₁ and Δ₂ of the G
    concatenated cells from :meth:`sensitivities` (module docstring): one row reaches at most
    two cells, whatever G is.
    """

    base: str = "linear_regression"
    n_groups: int = 1
    n_features: int = 0
    x_bounds: tuple[Any, Any] | None = None
    y_bounds: tuple[float, float] | None = None
    approximation_radius: float = 4.0
    y_max: int | None = None
    approximation_interval: tuple[float, float] = (-2.0, 2.0)
    cell: ExponentialFamily = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.base, str) or self.base not in GROUPED_BASES:
            raise ValueError(
                f"`family` must be one of {list(GROUPED_BASES)} for a grouped release. Found {self.base!r}."
            )
        g = check_positive_int("n_groups", self.n_groups)
        if g > MAX_GROUPS:
            raise ValueError(f"`n_groups` must be at most {MAX_GROUPS}. Found {g}.")
        p = _check_features(self.n_features)
        if p == 0:
            if self.x_bounds is not None:
                raise ValueError(f"`x_bounds` must be None with n_features=0. Found {self.x_bounds!r}.")
            lower, upper = np.ones(1), np.ones(1)
        else:
            if self.x_bounds is None:
                raise ValueError(
                    "`x_bounds` must be given as (lower, upper): public, finite covariate bounds. Found None."
                )
            probe = LinearRegression(n_features=p, x_bounds=self.x_bounds, y_bounds=(0.0, 1.0))  # checks the bounds
            lower = np.concatenate([[1.0], probe.x_bounds[0]])
            upper = np.concatenate([[1.0], probe.x_bounds[1]])
            object.__setattr__(self, "x_bounds", probe.x_bounds)
        bounds = (tuple(lower), tuple(upper))
        if self.base == "linear_regression":
            if self.y_bounds is None:
                raise ValueError(
                    "`y_bounds` must be given as (lower, upper) for a grouped linear regression. Found None."
                )
            cell = LinearRegression(n_features=p + 1, x_bounds=bounds, y_bounds=self.y_bounds)
            object.__setattr__(self, "y_bounds", cell.y_bounds)
        elif self.base == "logistic_regression":
            if self.y_bounds is not None:
                raise ValueError(
                    f"`y_bounds` must be None for a logistic regression (labels 0/1). Found {self.y_bounds!r}."
                )
            cell = LogisticRegression(n_features=p + 1, x_bounds=bounds, approximation_radius=self.approximation_radius)
            object.__setattr__(self, "approximation_radius", cell.approximation_radius)
        else:
            if self.y_bounds is not None:
                raise ValueError(
                    f"`y_bounds` must be None for a grouped Poisson regression (give y_max). Found {self.y_bounds!r}."
                )
            if self.y_max is None:
                raise ValueError(
                    "`y_max` must be given for a grouped Poisson regression: the public bound the counts are clipped "
                    "to. Found None."
                )
            cell = PoissonRegression(
                n_features=p + 1, x_bounds=bounds, y_max=self.y_max, approximation_interval=self.approximation_interval
            )
            object.__setattr__(self, "y_max", cell.y_max)
            object.__setattr__(self, "approximation_interval", cell.approximation_interval)
        if self.base != "poisson_regression" and self.y_max is not None:
            raise ValueError(f"`y_max` must be None for a grouped {self.base.replace('_', ' ')}. Found {self.y_max!r}.")
        object.__setattr__(self, "n_groups", g)
        object.__setattr__(self, "n_features", p)
        object.__setattr__(self, "cell", cell)

    # -- names ---------------------------------------------------------------------------
    @property
    def name(self) -> str:  # type: ignore[override]
        return f"grouped_{self.base}"

    @property
    def params(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("alpha", "beta", "sigma") if self.base == "linear_regression" else ("alpha", "beta")

    @property
    def cell_size(self) -> int:
        """c, the length of one group's cell."""
        return self.cell.dim

    @property
    def count_index(self) -> int:
        """Where n_g (the constant column's Σ 1·1) sits in a cell (the first of :attr:`count_indices`)."""
        return self.count_indices[0]

    @property
    def count_indices(self) -> tuple[int, ...]:
        """Every place n_g sits in a cell: Σ 1·1, and for Poisson regression also Σ x̃₀ (x̃₀ = 1)."""
        d = self.n_features + 1
        if self.base == "linear_regression":
            return (0,)
        if self.base == "logistic_regression":
            return (d,)
        return (2 * d, d)  # Σ x̃x̃ᵀ[0, 0] and Σ x̃₀

    def settings(self) -> dict[str, Any]:
        out = {"family": self.name, "n_groups": self.n_groups, "n_features": self.n_features}
        if self.n_features:
            out["x_bounds"] = [list(b) for b in self.x_bounds]
        if self.base == "linear_regression":
            out["y_bounds"] = list(self.y_bounds)
        elif self.base == "logistic_regression":
            out["approximation_radius"] = self.approximation_radius
        else:
            out.update(y_max=self.y_max, approximation_interval=list(self.approximation_interval))
        return out

    def __repr__(self) -> str:
        return f"GroupedRegression({', '.join(f'{k}={v!r}' for k, v in self.settings().items())})"

    # -- intervals and sensitivities ---------------------------------------------------------
    def _cell_hull(self) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.cell.intervals()
        return np.minimum(lo, 0.0), np.maximum(hi, 0.0)

    def intervals(self) -> tuple[np.ndarray, np.ndarray]:
        """Every coordinate of a row's statistic lies in the hull of {0} and its cell interval (G copies)."""
        lo, hi = self._cell_hull()
        return np.tile(lo, self.n_groups), np.tile(hi, self.n_groups)

    def sensitivities(self, neighbouring: str = "substitute") -> tuple[float, float]:
        """(Δ₁, Δ₂) of the concatenated cells under ``neighbouring`` (module docstring; public settings only)."""
        return partitioned_cell_sensitivities(*self.cell.intervals(), neighbouring)

    def l1_sensitivity(self) -> float:
        """Δ₁ under substitution: 2Σⱼ rⱼ (a row moving between two groups)."""
        return self.sensitivities("substitute")[0]

    def l2_sensitivity(self) -> float:
        """Δ₂ under substitution: max((Σⱼ (hiⱼ − loⱼ)²)^½, (2Σⱼ rⱼ²)^½)."""
        return self.sensitivities("substitute")[1]

    def grid_sensitivities(self, exponent: int) -> tuple[int, int]:
        """(Δ₁, Δ₂²) under substitution of the rows rounded to the grid 2^``exponent``, in grid units (exact).

        A rounded row's cell lies in [Lⱼ, Uⱼ] (the cell's rounded intervals) and every other
        cell is 0, so the module docstring's bounds hold with rⱼ = max(|Lⱼ|, |Uⱼ|).
        """
        lower, upper = self.cell.grid_intervals(exponent)
        reach = [max(abs(a), abs(b)) for a, b in zip(lower, upper, strict=True)]
        widths = [b - a for a, b in zip(lower, upper, strict=True)]
        l1 = max(sum(widths), 2 * sum(reach))
        l2 = max(sum(w * w for w in widths), 2 * sum(r * r for r in reach))
        return l1, l2

    # -- rows (applied by the mechanism layer only) ------------------------------------------------
    def check_data(self, data: Any, out_of_bounds: str = "clamp") -> np.ndarray:
        """Rows [label, 1, x, y] from (X, y, groups): x and y admitted as by the regression, labels checked.

        A label that is not a finite integer in 0..G − 1 becomes −1: that row contributes
        nothing (in both ``out_of_bounds`` modes; nothing is reported). X may be ``None`` for
        n_features = 0.
        """
        check_out_of_bounds(out_of_bounds)
        if not isinstance(data, tuple | list) or len(data) != 3:
            raise TypeError(
                f"`data` must be a triple (X, y, groups) for a grouped {self.base.replace('_', ' ')}. "
                "Found another object."
            )
        x, y, groups = data
        y = _as_rows(y, "y")
        labels = _as_rows(groups, "groups")
        if labels.ndim != 1 or y.ndim != 1 or labels.shape[0] != y.shape[0]:
            raise ValueError(
                f"`data` must hold y and groups of shape (rows,) each. Found {y.shape} and {labels.shape}."
            )
        n = y.shape[0]
        if x is None:
            if self.n_features:
                raise ValueError(f"`data` must hold X of shape (rows, {self.n_features}). Found None.")
            x = np.empty((n, 0))
        x = _as_rows(x, "X")
        if x.ndim == 1 and self.n_features == 1:
            x = x.reshape(-1, 1)
        if x.ndim != 2 or x.shape != (n, self.n_features):
            raise ValueError(f"`data` must hold X of shape ({n}, {self.n_features}). Found {x.shape}.")
        pair = (np.column_stack([np.ones(n), x]), y)
        if self.base == "linear_regression":
            x1, y = _regression_rows(pair, self.n_features + 1, out_of_bounds, self.cell.x_bounds, "linear regression")
            y = _admit_real(y, *self.y_bounds, out_of_bounds, f"`y_bounds` = {self.y_bounds}")
            cell_rows = np.column_stack([x1, y])
        elif self.base == "poisson_regression":
            cell_rows = _count_rows(pair, self.n_features + 1, out_of_bounds, self.cell.x_bounds, self.y_max)
        else:
            cell_rows = _logistic_rows(pair, self.n_features + 1, out_of_bounds, self.cell.x_bounds)
        valid = np.isfinite(labels) & (labels == np.round(labels)) & (labels >= 0) & (labels < self.n_groups)
        label = np.where(valid, labels, -1.0)
        return np.column_stack([label, cell_rows])

    def row_statistics(self, data: np.ndarray) -> np.ndarray:
        """Each row's cell statistic in its group's block, zeros elsewhere (and everywhere for label −1)."""
        label = data[:, 0].astype(np.int64)
        z = data[:, 1:]
        if self.base == "linear_regression":  # the upper triangle of zzᵀ, z = (1, x, y)
            rows, cols = np.triu_indices(self.n_features + 2)
            cells = z[:, rows] * z[:, cols]
        else:
            rows, cols = np.triu_indices(self.n_features + 1)
            x, y = z[:, :-1], z[:, -1:]
            if self.base == "logistic_regression":  # (s·x̃, upper triangle of x̃x̃ᵀ), x̃ = (1, x), s = 2y − 1
                cells = np.column_stack([(2.0 * y - 1.0) * x, x[:, rows] * x[:, cols]])
            else:  # Poisson: (y·x̃, x̃, upper triangle of x̃x̃ᵀ), y clipped to 0..y_max
                cells = np.column_stack([y * x, x, x[:, rows] * x[:, cols]])
        c = self.cell_size
        out = np.zeros((data.shape[0], self.n_groups * c))
        keep = np.nonzero(label >= 0)[0]
        columns = label[keep, None] * c + np.arange(c)[None, :]
        out[keep[:, None], columns] = cells[keep]
        return out

    # -- post-processing -------------------------------------------------------------------------------
    def cells(self, statistics: Any) -> np.ndarray:
        """The released vector as a G × c array of cells."""
        return np.asarray(statistics, dtype=float).reshape(self.n_groups, self.cell_size)

    def project(self, statistics: np.ndarray, n_rows: int) -> np.ndarray:
        """Each cell projected as the regression's release of a group of max(n̂_g, 0) rows (clipped at N)."""
        out = []
        counts = list(self.count_indices)
        for cell in self.cells(statistics):
            size = float(np.clip(np.mean(cell[counts]), 0.0, n_rows))  # n_g's copies averaged
            cell = cell.copy()
            cell[counts] = size
            out.append(self.cell.project(cell, size))
        return np.concatenate(out)

    # -- likelihoods ------------------------------------------------------------------------------------
    def _coefficients(self, alpha: Any, beta: Any) -> Any:
        """B (G × (p + 1)): row g = (α_g, β) with β shared ((p,)) or per group ((G, p))."""
        alpha = pt.as_tensor_variable(alpha)
        if alpha.ndim != 1 or (alpha.type.shape[0] is not None and alpha.type.shape[0] != self.n_groups):
            raise ValueError(
                f"`alpha` must be a vector of {self.n_groups} group intercepts. "
                f"Found a tensor of shape {alpha.type.shape}."
            )
        if self.n_features == 0:
            return alpha[:, None]
        beta = pt.as_tensor_variable(beta)
        if beta.ndim == 1:
            beta = pt.broadcast_to(beta[None, :], (self.n_groups, self.n_features))
        elif beta.ndim != 2:
            raise ValueError(
                f"`beta` must be a vector of {self.n_features} shared slopes or a ({self.n_groups}, {self.n_features}) "
                f"matrix of group slopes. Found a tensor with {beta.ndim} dimensions."
            )
        return pt.concatenate([alpha[:, None], beta], axis=1)

    def _check_params(self, params: dict[str, Any]) -> None:
        wanted = set(self.params) - ({"beta"} if self.n_features == 0 else set())
        if not wanted <= set(params) or not set(params) <= set(self.params):
            raise ValueError(
                f"The parameters of the {self.name} likelihood must be {sorted(wanted)}"
                f"{' (beta optional with no covariates)' if self.n_features == 0 else ''}. Found {sorted(params)}."
            )

    def loglik(self, statistics: Any, n_rows: int, **params: Any) -> Any:
        """The naive likelihood: Σ_g of the regression's log-likelihood read at the projected cell g."""
        self._check_params(params)
        coefficients = self._coefficients(params["alpha"], params.get("beta"))
        total = 0.0
        for g, cell in enumerate(self.cells(statistics)):
            extra = {"sigma": params["sigma"]} if self.base == "linear_regression" else {}
            total = total + self.cell.loglik(cell, float(cell[self.count_index]), beta=coefficients[g], **extra)
        return total

    #: A Gaussian release is modelled exactly by :meth:`release_loglik` (``mechanism="gaussian"`` allowed).
    gaussian_noise = True

    def release_loglik(self, reading: Any, name: str, **params: Any) -> Any:
        """The noise-aware likelihood: :func:`~pymc_dp.exponential_family.grouped_likelihood.grouped_release_loglik`.

        ``reading``: the release's :class:`~pymc_dp.exponential_family.densities.ReleaseReading`.
        """
        from pymc_dp.exponential_family.grouped_likelihood import grouped_release_loglik

        if reading.anchor is not None:
            raise ValueError("`covariate_anchors` must be 0 for a grouped release. Found a covariate anchor.")
        self._check_params(params)
        return grouped_release_loglik(self, reading, name, **params)


def grouped_family(family: Any, n_groups: Any, **settings: Any) -> GroupedRegression:
    """The :class:`GroupedRegression` of ``release_statistics(..., family, n_groups=G, **settings)``."""
    if not isinstance(family, str) or family.lower() not in GROUPED_BASES:
        raise ValueError(
            f"`family` must be one of {list(GROUPED_BASES)} with `n_groups` (a grouped release). Found {family!r}."
        )
    extra = _BASE_SETTINGS[family.lower()]
    unknown = sorted(set(settings) - {"n_features", "x_bounds", *extra})
    if unknown:
        raise ValueError(
            f"`{unknown[0]}` is not a setting of a grouped {family}: give n_features, x_bounds, "
            f"{', '.join(extra)}. Found {unknown}."
        )
    return GroupedRegression(base=family.lower(), n_groups=n_groups, **settings)
