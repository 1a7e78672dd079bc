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

# The base class and the row helpers (base.py) and the regressions (regressions.py) are re-exported: other
# modules and the tests import them from here.
from pymc_dp.exponential_family.base import OUT_OF_BOUNDS_MODES as OUT_OF_BOUNDS_MODES
from pymc_dp.exponential_family.base import ExponentialFamily as ExponentialFamily
from pymc_dp.exponential_family.base import _admit_integers as _admit_integers
from pymc_dp.exponential_family.base import _admit_real as _admit_real
from pymc_dp.exponential_family.base import _as_rows as _as_rows
from pymc_dp.exponential_family.base import _check_bounds as _check_bounds
from pymc_dp.exponential_family.base import _check_finite_real as _check_finite_real
from pymc_dp.exponential_family.base import _check_param_names as _check_param_names
from pymc_dp.exponential_family.base import _clamp_integers as _clamp_integers
from pymc_dp.exponential_family.base import _clamp_real as _clamp_real
from pymc_dp.exponential_family.base import _column
from pymc_dp.exponential_family.base import check_out_of_bounds as check_out_of_bounds
from pymc_dp.exponential_family.base import project_onto_scaled_simplex as project_onto_scaled_simplex
from pymc_dp.exponential_family.regressions import ANCHOR_HESSIAN_WEIGHT as ANCHOR_HESSIAN_WEIGHT
from pymc_dp.exponential_family.regressions import LinearRegression as LinearRegression
from pymc_dp.exponential_family.regressions import LogisticCovariateAnchor as LogisticCovariateAnchor
from pymc_dp.exponential_family.regressions import LogisticRegression as LogisticRegression
from pymc_dp.exponential_family.regressions import _CovariateAnchorBase as _CovariateAnchorBase
from pymc_dp.exponential_family.regressions import _CovariateFamily as _CovariateFamily
from pymc_dp.exponential_family.regressions import _logistic_rows as _logistic_rows
from pymc_dp.exponential_family.regressions import _product_intervals as _product_intervals
from pymc_dp.exponential_family.regressions import _psd_triu as _psd_triu
from pymc_dp.exponential_family.regressions import _regression_rows as _regression_rows
from pymc_dp.exponential_family.regressions import _symmetric as _symmetric
from pymc_dp.exponential_family.regressions import chebyshev_log_sigmoid as chebyshev_log_sigmoid
from pymc_dp.exponential_family.regressions import psd_projection as psd_projection
from pymc_dp.exponential_family.regressions import split_anchor_statistics as split_anchor_statistics

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


class _BoundedCount(ExponentialFamily):
    """A family of one count per row in 0..K, K the public integer setting named :attr:`bound_field`.

    S(x) = x ∈ {0, …, K}; its interval [0, K] gives Δ₁ = Δ₂ = K (substitute neighbours, N
    public; :class:`~pymc_dp.exponential_family.base.ExponentialFamily`). :class:`Binomial`
    (K = n_trials) and :class:`Poisson` (K = upper) share the checks, the interval, the row
    statistic and the admission of the rows (clamped into 0..K, or refused).
    """

    bound_field: ClassVar[str]
    bound_note: ClassVar[str] = ""  # after "the integers 0..K" in the out-of-bounds error

    @property
    def count_bound(self) -> int:
        """K, the largest count a row may hold."""
        return getattr(self, self.bound_field)

    def __post_init__(self) -> None:
        check_positive_int(self.bound_field, self.count_bound)

    def intervals(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(1), np.full(1, float(self.count_bound))

    def settings(self) -> dict[str, Any]:
        return {"family": self.name, self.bound_field: self.count_bound}

    def check_data(self, data: Any, out_of_bounds: str = "clamp") -> np.ndarray:
        x = _column(data, out_of_bounds, " of counts")
        bound = self.count_bound
        return _admit_integers(x, bound, out_of_bounds, f"the integers 0..{bound}{self.bound_note}")

    def row_statistics(self, data: np.ndarray) -> np.ndarray:
        return data.reshape(-1, 1)


@dataclass(frozen=True, repr=False)
class Binomial(_BoundedCount):
    """Binomial(n_trials, p) rows with known ``n_trials``: S(x) = x ∈ {0, …, n_trials}, Δ₁ = Δ₂ = n_trials.

    φ = logit p, log g = n_trials · log(1 − p). Feasible aggregate: [0, n · n_trials].

    Noise-aware likelihood: exact — S ~ Binomial(n · n_trials, p) summed against the Laplace
    density (no latent variable; :func:`pymc_dp.exponential_family.noise_aware.binomial_laplace_logpdf`).
    """

    n_trials: int = 1
    name: ClassVar[str] = "binomial"
    params: ClassVar[tuple[str, ...]] = ("p",)
    bound_field: ClassVar[str] = "n_trials"

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
        x = _column(data, out_of_bounds, " of class labels")
        top = self.n_categories - 1
        return _admit_integers(x, top, out_of_bounds, f"the labels 0..{top}").astype(np.int64)

    def row_statistics(self, data: np.ndarray) -> np.ndarray:
        return np.eye(self.n_categories)[data]

    def project(self, statistics: np.ndarray, n_rows: int) -> np.ndarray:
        return project_onto_scaled_simplex(statistics, float(n_rows))

    def natural(self, p: Any) -> tuple[Any, Any]:
        return pt.log(pt.as_tensor_variable(p)), pt.constant(0.0)


@dataclass(frozen=True, repr=False)
class Poisson(_BoundedCount):
    """Poisson(mu) rows with a public bound ``upper`` on each count: S(x) = x ∈ {0, …, upper}, Δ₁ = upper.

    φ = log mu, log g = −mu. Feasible aggregate: [0, n · upper].

    Noise-aware likelihood: CLT normal of the sum of the clamped counts min(x, upper) (their
    exact moments under Poisson(mu)) convolved with the Laplace noise in closed form; the
    clamped sum is not Poisson, so no exact form is used.
    """

    upper: int = 1
    name: ClassVar[str] = "poisson"
    params: ClassVar[tuple[str, ...]] = ("mu",)
    bound_field: ClassVar[str] = "upper"
    bound_note: ClassVar[str] = " (`upper`)"

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
        x = _column(data, out_of_bounds, "")
        return _admit_real(x, self.bounds[0], self.bounds[1], out_of_bounds, f"`bounds` = {self.bounds}")

    def row_statistics(self, data: np.ndarray) -> np.ndarray:
        return data.reshape(-1, 1)

    def natural(self, mu: Any) -> tuple[Any, Any]:
        mu = pt.as_tensor_variable(mu)
        s2 = float(self.sigma) ** 2
        return pt.stack([mu / s2]), -(mu * mu) / (2.0 * s2)


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
