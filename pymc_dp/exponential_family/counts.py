"""Count regressions on released statistics: Poisson regression with a log link (Kulkarni et al. 2021).

A row is (x, y) with covariates x in public bounds and a count y clipped to the public
``[0, y_max]``. The model is y | x ~ Poisson(λ), λ = exp(xᵀβ). Its log-likelihood
y·xᵀβ − exp(xᵀβ) − log y! is linear in the statistic Σ y·x; the exponential term is not a
function of a finite statistic, and it is what the polynomial approximations of PASS-GLM
(Huggins, Adams and Broderick 2017) and of Kulkarni, Jälkö, Koskela, Kaski and Honkela (2021)
replace by a low-order polynomial in u = xᵀβ: exp(u) ≈ a₀ + a₁u + a₂u², so that the data enter
only through S = (Σ y·x, Σ x, Σ xxᵀ).

Two likelihoods read the release (:class:`PoissonRegression`):

* the **naive** one (``noise_aware=False``) is that degree-2 approximation read at the projected
  release, fitted by Chebyshev interpolation on the public ``approximation_interval``: accurate
  only while xᵀβ stays inside it for most rows; kept for comparison.
* the **noise-aware** one (the default) uses *anchors*, as the logistic family does
  (``release_statistics(..., covariate_anchors=k)``, k ≥ 1 required here): at a public point β̂
  computed from the earlier releases only, the mechanism also releases F(β̂) = Σᵢ m(λᵢ)·xᵢ and
  H(β̂) = Σᵢ h(λᵢ)·xᵢxᵢᵀ, with m(λ) = E[min(Y, y_max)] and h(λ) = λ·dm/dλ = E[Y·1{Y ≤ y_max}]
  for Y ~ Poisson(λ), λᵢ = exp(xᵢᵀβ̂) (:class:`PoissonCovariateAnchor`). Given the covariates,
  the true Σ y·x has mean F(β) and covariance Σᵢ Var(min(Y, y_max) | λᵢ)·xᵢxᵢᵀ; both are
  expanded around β̂ to the order the release supports: the mean as F̂ + Ĥ(β − β̂) (a
  second-order Taylor polynomial of the log-likelihood around β̂, whose coefficients are the
  released anchor), the covariance as Ĥ. The true statistic and the release noise are
  marginalised in closed form: Ŝ_yx ~ N(F̂ + Ĥ(β − β̂), Ĥ + (σ² + σₐ² + σ_H²‖β − β̂‖²)·I), with σ²
  the main release's noise variance per coordinate, σₐ² the anchor's on F̂ and σ_H² its on each
  entry of Ĥ. Nothing is latent but β: NUTS costs O(1) in N.

Known bias of the noise-aware likelihood (it vanishes as N grows): the mean function's terms of
third and higher order around β̂ are dropped, so the log-likelihood is exact to second order
at β̂ — the Laplace (Bernstein–von Mises) form of the exact clipped-count likelihood, centred
where the anchors place β̂. With β̂ at the MLE (as the anchors' Newton steps approach when the
noise is small), this is the Gaussian approximation of the exact posterior: its error in means
and sds is O(1/√N) of a posterior sd (the posterior's skewness). The covariance uses
h(λ) = λ·P(Y < y_max) for Var(min(Y, y_max)); they are equal without clipping (both λ) and
differ only for rows whose λ reaches y_max.

Neighbouring relation: substitute (one row replaced, N public).

References
----------
.. [1] Kulkarni, T., Jälkö, J., Koskela, A., Kaski, S. and Honkela, A. (2021). Differentially
   private Bayesian inference for generalized linear models. ICML (logistic and Poisson
   regression on noisy polynomial sufficient statistics).
.. [2] Huggins, J. H., Adams, R. P. and Broderick, T. (2017). PASS-GLM: polynomial approximate
   sufficient statistics for scalable Bayesian GLM inference. NeurIPS, §3.
.. [3] Bernstein, G. and Sheldon, D. (2018). Differentially private Bayesian inference for
   exponential families. NeurIPS (noise-aware likelihoods of released statistics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytensor.tensor as pt
from scipy import special

from pymc_dp._validation import check_positive_int
from pymc_dp.exponential_family.base import _admit_integers, _check_finite_real
from pymc_dp.exponential_family.densities import ReleaseReading, _parameter_tensor, _release_noise_variance, _tensor
from pymc_dp.exponential_family.families import SUPPORTED_FAMILIES
from pymc_dp.exponential_family.regressions import (
    _CovariateAnchorBase,
    _CovariateFamily,
    _product_intervals,
    _psd_triu,
    _regression_rows,
    _symmetric,
    psd_projection,
)

__all__ = [
    "MAX_ANCHOR_STEP",
    "PoissonCovariateAnchor",
    "PoissonRegression",
    "chebyshev_exp",
    "clamped_poisson_hessian_weight",
    "clamped_poisson_mean",
    "count_regression_loglik",
    "poisson_anchor_point",
]

#: Largest change of the linear predictor, over the public covariate box, that one anchor step
#: (:func:`poisson_anchor_point`) may make: a Newton step on a noisy release is capped at one nat.
MAX_ANCHOR_STEP = 1.0

_MAX_LINEAR_PREDICTOR = 700.0  # exp() overflows float64 just above 709


def clamped_poisson_mean(lam: np.ndarray, y_max: int) -> np.ndarray:
    """m(λ) = E[min(Y, y_max)] for Y ~ Poisson(λ) (NumPy, elementwise), in [0, y_max].

    E[min(Y, M)] = E[Y·1{Y ≤ M − 1}] + M·P(Y ≥ M) = λ·P(Y ≤ M − 2) + M·P(Y ≥ M), using
    k·P(Y = k) = λ·P(Y = k − 1).
    """
    lam = np.asarray(lam, dtype=float)
    m = int(y_max)
    below = special.pdtr(m - 2, lam) if m >= 2 else np.zeros_like(lam)
    return np.clip(lam * below + m * special.pdtrc(m - 1, lam), 0.0, float(m))


def clamped_poisson_hessian_weight(lam: np.ndarray, y_max: int) -> np.ndarray:
    """h(λ) = λ·dm/dλ = λ·P(Y ≤ y_max − 1) = E[Y·1{Y ≤ y_max}] for Y ~ Poisson(λ) (NumPy), in [0, y_max].

    The weight of xxᵀ in the Jacobian of F(β) = Σ m(exp(xᵀβ))·x: dm/dλ = P(Y ≤ M − 1).
    """
    lam = np.asarray(lam, dtype=float)
    return np.clip(lam * special.pdtr(int(y_max) - 1, lam), 0.0, float(y_max))


def chebyshev_exp(interval: tuple[float, float], degree: int = 2) -> np.ndarray:
    """Power-basis coefficients (a₀, a₁, …) of the Chebyshev interpolant of exp(u) on ``interval``.

    The polynomial approximation of the Poisson log-likelihood's exp(xᵀβ) term (Huggins et al.
    2017, §3; Kulkarni et al. 2021). Pure NumPy.
    """
    low, high = interval
    chebyshev = np.polynomial.chebyshev.Chebyshev.interpolate(np.exp, degree, domain=[low, high])
    return chebyshev.convert(kind=np.polynomial.Polynomial).coef


def _y_max(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"`y_max` must be a positive integer (the public bound on the counts). Found {value!r}.")
    return check_positive_int("y_max", int(value))


def _count_rows(data: Any, n_features: int, out_of_bounds: str, x_bounds: Any, y_max: int) -> np.ndarray:
    """Rows [x, y] of a count regression: x admitted into the bounds, y into the integers 0..y_max."""
    x, y = _regression_rows(data, n_features, out_of_bounds, x_bounds, "Poisson regression")
    y = _admit_integers(y, y_max, out_of_bounds, f"the integers 0..{y_max} (`y_max`)")
    return np.column_stack([x, y])


def _hull(low: np.ndarray, high: np.ndarray, factor: float) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of c·v for c ∈ [0, factor] and v ∈ [low, high] (entrywise)."""
    return np.minimum(factor * low, 0.0), np.maximum(factor * high, 0.0)


@dataclass(frozen=True, repr=False)
class PoissonRegression(_CovariateFamily):
    """y | x ~ Poisson(exp(xᵀβ)), counts clipped to [0, ``y_max``], public bounds on every feature.

    The statistic of a row is S(x, y) = (y·x, x, upper triangle of xxᵀ) (d + d + d(d+1)/2
    numbers): Σ y·x is the sufficient statistic of the log-likelihood's linear term, and Σ x,
    Σ xxᵀ those of its degree-2 polynomial approximation exp(u) ≈ a₀ + a₁u + a₂u² (Kulkarni et
    al. 2021; Huggins et al. 2017). Include a column of ones with bounds (1, 1) for an
    intercept (its entries have width 0 where they are constant and cost no noise).

    The naive likelihood (``noise_aware=False``) is the approximation at the projected release,
    N·(−a₀) + βᵀΣ y·x − a₁βᵀΣ x − a₂βᵀ(Σ xxᵀ)β, with the Chebyshev coefficients on
    ``approximation_interval`` (a₂ > 0 and the projected Σ xxᵀ is positive semi-definite, so it
    is a proper Gaussian in β). The noise-aware likelihood reads the release's anchors
    (``covariate_anchors`` ≥ 1 is required) and is described in
    :mod:`pymc_dp.exponential_family.counts` and :func:`count_regression_loglik`.

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public).

    Sensitivity, from the public settings only: every row is clipped, x into ``x_bounds``
    ([lⱼ, uⱼ]) and y into the integers 0..``y_max`` (M). Then y·xⱼ lies in the hull of
    {0, M·lⱼ, M·uⱼ}, xⱼ in [lⱼ, uⱼ], xⱼxₖ in its interval by interval arithmetic; replacing one
    row moves each coordinate of the sum by at most its interval's width, so Δ₁ is the sum of
    the widths and Δ₂ their L2 norm (Foulds et al. 2016, eq. 17). ε covers the one release of
    this vector (and the anchors', inside the same ε: :func:`pymc_dp.release_statistics`).

    Parameters
    ----------
    n_features, x_bounds
        As for :class:`~pymc_dp.exponential_family.families.LogisticRegression`: d, the number of
        columns of X (an intercept column included), and their bounds (scalars or one per feature).
    y_max : int
        M, the public bound on the counts: y is clipped to [0, M] before anything is summed.
        The model of the noise-aware likelihood is that of the clipped counts, so a bound below
        the counts' range costs information rather than bias near the anchors; but where it
        clips where the mean bends, the expansion around the last anchor holds over a shorter
        reach (the anchor-reach check, :mod:`~pymc_dp.exponential_family.expansion_reach`,
        flags it). A larger M costs noise (Δ grows with M).
    approximation_interval : (float, float), default (-2.0, 2.0)
        The interval of xᵀβ on which the naive likelihood's exp(u) is interpolated.

    References
    ----------
    .. [1] Kulkarni, T., Jälkö, J., Koskela, A., Kaski, S. and Honkela, A. (2021).
       Differentially private Bayesian inference for generalized linear models. ICML.
    .. [2] Huggins, J. H., Adams, R. P. and Broderick, T. (2017). PASS-GLM: polynomial
       approximate sufficient statistics for scalable Bayesian GLM inference. NeurIPS.
    .. [3] Foulds, J., Geumlek, J., Welling, M. and Chaudhuri, K. (2016). On the theory and
       practice of privacy-preserving Bayesian data analysis. UAI, eq. (17).
    """

    n_features: int = 1
    x_bounds: tuple[Any, Any] | None = None
    y_max: int = 1
    approximation_interval: tuple[float, float] = (-2.0, 2.0)
    name: ClassVar[str] = "poisson_regression"
    params: ClassVar[tuple[str, ...]] = ("beta",)
    #: The release needs at least this many anchors (its noise-aware likelihood reads the last one).
    min_covariate_anchors: ClassVar[int] = 1
    #: Gaussian noise is modelled exactly by the noise-aware likelihood.
    gaussian_noise: ClassVar[bool] = True
    #: What :func:`count_regression_loglik` names in its errors: the likelihood, and how to get an anchor.
    _likelihood: ClassVar[str] = (
        "Poisson-regression likelihood (it reads the last anchor's released mean function and slope)"
    )
    _anchor_hint: ClassVar[str] = "covariate_anchors=1, or use noise_aware=False"

    def __post_init__(self) -> None:
        self._check_covariates()
        object.__setattr__(self, "y_max", _y_max(self.y_max))
        try:
            low, high = self.approximation_interval
        except (TypeError, ValueError):
            raise ValueError(
                f"`approximation_interval` must be a pair (low, high). Found {self.approximation_interval!r}."
            ) from None
        low = _check_finite_real("approximation_interval", low)
        high = _check_finite_real("approximation_interval", high)
        if not low < high:
            raise ValueError(f"`approximation_interval` must have low < high. Found {self.approximation_interval!r}.")
        object.__setattr__(self, "approximation_interval", (low, high))
        object.__setattr__(self, "_coefficients", chebyshev_exp((low, high)))

    @property
    def coefficients(self) -> np.ndarray:
        """(a₀, a₁, a₂) of exp(u) ≈ a₀ + a₁u + a₂u² on ``approximation_interval`` (:func:`chebyshev_exp`)."""
        return self._coefficients

    def intervals(self) -> tuple[np.ndarray, np.ndarray]:
        xl, xu = (np.asarray(b) for b in self.x_bounds)
        yx_lo, yx_hi = _hull(xl, xu, float(self.y_max))
        lo, hi = _product_intervals(list(zip(xl, xu, strict=True)), *self._triu)
        return np.concatenate([yx_lo, xl, lo]), np.concatenate([yx_hi, xu, hi])

    def settings(self) -> dict[str, Any]:
        return {
            **self._covariate_settings(),
            "y_max": self.y_max,
            "approximation_interval": list(self.approximation_interval),
        }

    def check_data(self, data: Any, out_of_bounds: str = "clamp") -> np.ndarray:
        return _count_rows(data, self.n_features, out_of_bounds, self.x_bounds, self.y_max)

    def row_statistics(self, data: np.ndarray) -> np.ndarray:
        x, y = data[:, :-1], data[:, -1:]
        rows, cols = self._triu
        return np.column_stack([y * x, x, x[:, rows] * x[:, cols]])

    def product_positions(self) -> dict[tuple[int, int], int]:
        """{(j, k), j ≤ k: index of Σ xⱼxₖ in the statistic vector} (after the 2d entries of Σ y·x and Σ x)."""
        d = self.n_features
        return {(int(r), int(c)): 2 * d + i for i, (r, c) in enumerate(zip(*self._triu, strict=True))}

    def split(self, statistics: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(Σ y·x, Σ x, the symmetric Σ xxᵀ) from a statistic vector."""
        d = self.n_features
        s = np.asarray(statistics, dtype=float)
        return s[:d], s[d : 2 * d], _symmetric(s[2 * d :], d, *self._triu)

    def project(self, statistics: np.ndarray, n_rows: int) -> np.ndarray:
        boxed = super().project(statistics, n_rows)
        d = self.n_features
        return np.concatenate([boxed[: 2 * d], _psd_triu(self.split(boxed)[2], *self._triu)])

    def natural(self, beta: Any) -> tuple[Any, Any]:
        beta = pt.as_tensor_variable(beta).reshape((-1,))
        a0, a1, a2 = (float(a) for a in self.coefficients)
        rows, cols = self._triu
        weight = np.where(rows == cols, 1.0, 2.0)  # βᵀ(Σ xxᵀ)β from the upper triangle
        phi = pt.concatenate([beta, -a1 * beta, -a2 * weight * beta[rows] * beta[cols]])
        return phi, pt.constant(-a0)

    # -- anchors (the release calls these: post-processing of earlier releases, then a new family) --
    def anchor_point(
        self, noisy: np.ndarray, n_rows: int, previous: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    ) -> np.ndarray:
        """Where the next anchor is released (:func:`poisson_anchor_point`)."""
        return poisson_anchor_point(self, noisy, n_rows, previous)

    def anchor_family(self, point: np.ndarray) -> PoissonCovariateAnchor:
        """The family whose release is the anchor at ``point`` (public)."""
        return PoissonCovariateAnchor(self.n_features, self.x_bounds, self.y_max, tuple(point))

    def release_loglik(self, reading: ReleaseReading, name: str, **params: Any) -> Any:
        """The noise-aware likelihood of a release of this family (:func:`count_regression_loglik`)."""
        self._check_params(params)
        return count_regression_loglik(self, reading, params["beta"])

    def _expansion_target(self, reading: ReleaseReading) -> tuple[np.ndarray, Any, Any, tuple[np.ndarray, np.ndarray]]:
        """What :func:`count_regression_loglik` expands around the anchor: (observed, offset, noise, intervals).

        Here the main release's Σ min(y, M)·x (its first d numbers), the offset F̂ (the anchor's
        mean function), the main release's noise variance plus the anchor's σₐ², and this
        family's intervals (which coordinates have width). Post-processing of released values.
        """
        _, anchor_value, anchor_noise, _, _ = reading.anchor
        noise = _release_noise_variance(reading.scale, reading.noise_variance) + float(anchor_noise)
        observed = np.asarray(reading.noisy, dtype=float)[: self.n_features]
        return observed, _tensor(np.asarray(anchor_value, dtype=float)), noise, self.intervals()


class _CountAnchor(_CovariateAnchorBase):
    """What the count regressions' anchors share (they hold ``y_max`` and the public point ``anchor``).

    Rows (x, y) with the count clipped to 0..``y_max`` (the same admission as the main
    release), the Hessian block's weight bounded by :attr:`weight_bound`, and the largest mean
    exp(xᵀβ̂) over the public covariate box, from which each family's weight bound follows.
    Public settings only: β̂ is computed from earlier releases.
    """

    def _check_settings(self) -> None:
        object.__setattr__(self, "y_max", _y_max(self.y_max))

    def _largest_mean(self) -> float:
        """exp(max over the covariate box of xᵀβ̂) = exp(Σⱼ max(lⱼβ̂ⱼ, uⱼβ̂ⱼ)), the linear predictor capped."""
        xl, xu = (np.asarray(b) for b in self.x_bounds)
        beta = np.asarray(self.anchor)
        top = float(np.sum(np.maximum(xl * beta, xu * beta)))
        return float(np.exp(min(top, _MAX_LINEAR_PREDICTOR)))

    def check_data(self, data: Any, out_of_bounds: str = "clamp") -> np.ndarray:
        return _count_rows(data, self.n_features, out_of_bounds, self.x_bounds, self.y_max)

    def _hessian_bound(self) -> float:
        return self.weight_bound


@dataclass(frozen=True, repr=False)
class PoissonCovariateAnchor(_CountAnchor):
    """The clipped-count mean function and its slope at one public point β̂ (Σ over rows).

    S(x, y) = (m(λ)·x, w·(upper triangle of h(λ)·xxᵀ)) with λ = exp(xᵀβ̂), m(λ) = E[min(Y, M)]
    and h(λ) = E[Y·1{Y ≤ M}] for Y ~ Poisson(λ) (:func:`clamped_poisson_mean`,
    :func:`clamped_poisson_hessian_weight`), M = ``y_max`` and w = :data:`~pymc_dp.exponential_family.
    families.ANCHOR_HESSIAN_WEIGHT`. F(β̂) = Σ m(λᵢ)xᵢ is what Σ min(y, M)·x averages to at
    β = β̂ for these covariates, and H(β̂) = Σ h(λᵢ)xᵢxᵢᵀ is its Jacobian. Reads the covariates
    only; the counts are checked and ignored. Used by
    ``release_statistics("poisson_regression", ..., covariate_anchors=k)``, not on its own.

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public). m and h lie in [0, c] with
    c = min(M, λ_max) (:attr:`weight_bound`: m ≤ min(M, λ) by the clipping and Jensen,
    h = E[Y·1{Y ≤ M}] ≤ min(M, λ), and λ ≤ λ_max = exp(max of xᵀβ̂ over the public box)), so
    coordinate j of m·x lies in the hull of {0, c·lⱼ, c·uⱼ}, and w·h·xⱼxₖ in w·c times the hull
    of {0} and the interval of xⱼxₖ. Δ₁ and Δ₂ are the L1 and L2 norms of the widths: functions
    of the public bounds and of β̂, which is public (computed from earlier releases only).

    Parameters
    ----------
    n_features, x_bounds, y_max
        As for :class:`PoissonRegression`.
    anchor : sequence of float
        β̂, the public point (a function of earlier releases only).
    """

    n_features: int = 1
    x_bounds: tuple[Any, Any] | None = None
    y_max: int = 1
    anchor: tuple[float, ...] = ()
    name: ClassVar[str] = "poisson_covariate_anchor"
    params: ClassVar[tuple[str, ...]] = ()
    _model: ClassVar[str] = "Poisson-regression"

    def _extra_settings(self) -> dict[str, Any]:
        return {"y_max": self.y_max}

    @property
    def weight_bound(self) -> float:
        """c = min(M, λ_max), a public bound on m(λᵢ) and h(λᵢ) for every admissible row.

        λ_max = exp(max over the covariate box of xᵀβ̂) = exp(Σⱼ max(lⱼβ̂ⱼ, uⱼβ̂ⱼ)), and both
        m(λ) ≤ min(M, E[Y]) = min(M, λ) and h(λ) = λ·P(Y ≤ M − 1) ≤ min(M, λ).
        """
        return float(min(float(self.y_max), self._largest_mean()))

    def _mean_intervals(self, xl: np.ndarray, xu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _hull(xl, xu, self.weight_bound)

    def _row_weights(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lam = np.exp(np.minimum(x @ np.asarray(self.anchor), _MAX_LINEAR_PREDICTOR))
        cap = self.weight_bound  # m, h ≤ cap exactly; the clip only guards floating-point rounding
        mean = np.minimum(clamped_poisson_mean(lam, self.y_max), cap)
        return mean, np.minimum(clamped_poisson_hessian_weight(lam, self.y_max), cap)


#: Ridge (per-row-mean scale) on the anchor steps' linear systems: keeps them solvable when the
#: noise leaves the released Σ xxᵀ or Ĥ singular.
ANCHOR_RIDGE = 1e-6


def _solve(matrix: np.ndarray, vector: np.ndarray, n_rows: int) -> np.ndarray:
    matrix = psd_projection((matrix + matrix.T) / 2.0) / n_rows
    scale = max(float(np.trace(matrix)) / matrix.shape[0], 1e-12)
    return np.linalg.solve(matrix + ANCHOR_RIDGE * scale * np.eye(matrix.shape[0]), vector / n_rows)


def _capped(step: np.ndarray, reach: np.ndarray) -> np.ndarray:
    """``step`` shrunk so that |xᵀstep| ≤ :data:`MAX_ANCHOR_STEP` for every x in the public box."""
    largest = float(np.abs(step) @ reach)
    return step if largest <= MAX_ANCHOR_STEP else step * (MAX_ANCHOR_STEP / largest)


def poisson_anchor_point(
    family: PoissonRegression,
    noisy: np.ndarray,
    n_rows: int,
    previous: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    iterations: int = 50,
) -> np.ndarray:
    """A point estimate of β from a Poisson-regression release (post-processing, NumPy).

    Without ``previous``: the polynomial statistics (Σ y·x, Σ x, Σ xxᵀ) alone, with exp(u)
    expanded to second order around the mean linear predictor c = βᵀ(Σ x)/N, exp(u) ≈
    e^c(1 + (u − c) + (u − c)²/2), whose score Σ y·x − e^c((1 − c)Σ x + (Σ xxᵀ)β) = 0 is solved
    for β with c updated, steps capped (:data:`MAX_ANCHOR_STEP`), ``iterations`` times; for an
    intercept alone it is the exact MLE log ȳ. With ``previous`` = (β̂, F̂, Ĥ), an earlier
    anchor: one Newton step on the exact clipped-count score, β̂ + Ĥ⁻¹(Σ y·x − F̂), capped.
    The linear systems take a small ridge (:data:`ANCHOR_RIDGE`).
    """
    d = family.n_features
    syx, sx, sxx = family.split(family.project(noisy, n_rows))
    lower, upper = (np.asarray(b, dtype=float) for b in family.x_bounds)
    reach = np.maximum(np.abs(lower), np.abs(upper))
    if previous is not None:
        point, value, hessian = (np.asarray(v, dtype=float) for v in previous)
        return point + _capped(_solve(hessian, syx - value, n_rows), reach)
    beta = np.zeros(d)
    for _ in range(iterations):
        c = float(np.clip(beta @ sx / n_rows, -_MAX_LINEAR_PREDICTOR, _MAX_LINEAR_PREDICTOR))
        target = _solve(sxx, syx * np.exp(-c) - (1.0 - c) * sx, n_rows)
        beta = beta + _capped(target - beta, reach)
    return beta


def count_regression_loglik(family: PoissonRegression, reading: ReleaseReading, beta: Any) -> Any:
    """log p(released | β) of a count-regression release with its last anchor (PyTensor).

    The last anchor ``reading.anchor`` (β̂, V̂, σₐ², Ĥ, σ_H²) — V̂ and Ĥ released at β̂ with noise variances σₐ² and σ_H²
    per entry, Ĥ projected onto the positive semi-definite cone — gives a Gaussian expansion in
    β − β̂ whose true statistic and noises are marginalised in closed form; the family says what
    it is fitted to (:meth:`PoissonRegression._expansion_target`):

    * Poisson regression: the main release's Ŝ_yx = Σ min(yᵢ, M)·xᵢ + noise (the first d released
      numbers), whose true value has mean F(β) ≈ F̂ + Ĥ(β − β̂) and covariance about Ĥ, V̂ = F̂:

          Ŝ_yx ~ N(F̂ + Ĥ(β − β̂), Ĥ + (σ² + σₐ² + σ_H²‖β − β̂‖²)·I),

      σ² the main release's noise variance per coordinate (2b² for Laplace noise, replaced by the
      normal of that variance; exact for a Gaussian release, ``reading.noise_variance``). The expansion
      drops the mean function's terms of third and higher order in β − β̂: see
      :mod:`pymc_dp.exponential_family.counts` for this known bias.
    * Negative-binomial regression: the anchor's released score V̂ = Û itself,
      Û ~ N(Ĥ(β − β̂), Ĥ + (σₐ² + σ_H²‖β − β̂‖²)·I) (see
      :mod:`pymc_dp.exponential_family.negative_binomial` for the model and its O(1/√N) bias);
      the main release does not enter: it only placed the first anchor.

    Coordinates of zero width (a zero column) are left out.

    Raises
    ------
    ValueError
        Without an anchor (release with ``covariate_anchors`` ≥ 1), or for a ``beta`` that
        is not a vector.

    Notes
    -----
    Neighbouring relation: substitute (the release's). Post-processing of the release: no ε.
    """
    d = family.n_features
    beta = _anchored_beta(beta, reading.anchor, d, family._likelihood, family._anchor_hint)
    anchor_beta, _, _, hessian, hessian_noise = reading.anchor
    observed, offset, noise, (lo, hi) = family._expansion_target(reading)
    keep = np.nonzero(hi[:d] > lo[:d])[0]
    step = beta - _tensor(np.asarray(anchor_beta, dtype=float))
    hessian = np.asarray(hessian, dtype=float)
    mean = pt.dot(_tensor(hessian), step) if offset is None else offset + pt.dot(_tensor(hessian), step)
    spread = noise + float(hessian_noise) * pt.sum(step * step)
    return expansion_logpdf(observed, mean, hessian, keep, spread)


def _anchored_beta(beta: Any, anchor: Any, d: int, likelihood: str, hint: str) -> Any:
    """``beta`` as a tensor, refused unless the release has an anchor and ``beta`` is a vector (public checks)."""
    if anchor is None:
        raise ValueError(
            f"`covariate_anchors` must be at least 1 for the noise-aware {likelihood}. Found a release without "
            f"anchors; release again with {hint}."
        )
    return _parameter_tensor(
        "beta", beta, 1, f"a vector of {d} coefficients for the noise-aware {likelihood.split(' (')[0]}"
    )


def expansion_logpdf(observed: np.ndarray, mean: Any, hessian: np.ndarray, keep: np.ndarray, spread: Any) -> Any:
    """log N(``observed`` | ``mean``, Ĥ + ``spread``·I) on the coordinates ``keep``, Ĥ = ``hessian`` public.

    Ĥ = QΛQᵀ (Λ raised to 0 where negative): the quadratic form and log-determinant in Ĥ's
    eigenbasis (exact; cheap to compile and to differentiate, unlike a general inverse and
    determinant). Post-processing of released values: no ε.
    """
    values, vectors = np.linalg.eigh(hessian[np.ix_(keep, keep)])
    values = np.maximum(values, 0.0)
    residual = pt.dot(_tensor(vectors.T), _tensor(observed)[keep] - mean[keep])
    variances = _tensor(values) + spread
    return -0.5 * (
        pt.sum(residual * residual / variances) + pt.sum(pt.log(variances)) + keep.size * np.log(2.0 * np.pi)
    )


SUPPORTED_FAMILIES.setdefault(PoissonRegression.name, PoissonRegression)
