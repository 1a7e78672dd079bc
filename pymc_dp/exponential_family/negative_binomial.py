"""Negative-binomial regression with a log link on released statistics, noise-aware (issue 34, deliverable 2).

A row is (x, y) with covariates x in public bounds and a count y clipped to the public
``[0, y_max]``. The model is y | x ~ NegativeBinomial(μ, α) with mean μ = exp(xᵀβ) and
variance μ + μ²/α (PyMC's ``pm.NegativeBinomial(mu=..., alpha=...)``), α a **public, known**
dispersion. Its log-likelihood y·log μ − (y + α)·log(μ + α) (+ terms free of β) is not
linear in any finite statistic; as for the Poisson regression (:mod:`pymc_dp.exponential_family.
counts`, after Kulkarni et al. 2021) the release combines low-order statistics with
*anchors* released at public points β̂:

* the main release is that of the Poisson family, S = (Σ y·x, Σ x, Σ xxᵀ): it only places the
  first anchor (a quasi-Poisson estimate of β, consistent for the negative binomial's mean,
  :func:`~pymc_dp.exponential_family.counts.poisson_anchor_point`), so it takes the smaller
  share of the budget (:attr:`NegativeBinomialRegression.anchor_share`);
* each anchor at β̂ (:class:`NegativeBinomialScoreAnchor`) releases the negative binomial's
  score of the clipped counts and its slope there, U(β̂) = Σᵢ wᵢ·(yᵢ − m(μᵢ))·xᵢ and
  H(β̂) = Σᵢ wᵢ·h(μᵢ)·xᵢxᵢᵀ, with μᵢ = exp(xᵢᵀβ̂), wᵢ = α/(α + μᵢ), m(μ) = E[min(Y, M)] and
  h(μ) = μ·dm/dμ for Y ~ NegativeBinomial(μ, α) (:func:`clamped_nb_mean`,
  :func:`clamped_nb_hessian_weight`). Without clipping U is exactly the score of the
  negative-binomial log-likelihood at β̂ and H its Fisher information Σ μα/(α + μ)·xxᵀ.
  The next anchor is one Newton step, β̂ + Ĥ⁻¹Û (capped at one nat of the linear predictor).

The noise-aware likelihood reads the last anchor. Given the covariates, U(β̂) has mean
Σ wᵢ(m(μᵢ(β)) − m(μᵢ(β̂)))xᵢ ≈ H(β̂)(β − β̂) and covariance Σ wᵢ²·Var(min(Y, M))·xᵢxᵢᵀ, which equals
H(β̂) at β = β̂ without clipping (the information identity); the true U and all release noises
are marginalised in closed form:

    Û ~ N(Ĥ(β − β̂), Ĥ + (σₐ² + σ_H²‖β − β̂‖²)·I),

σₐ² the anchor's noise variance on Û and σ_H² its on each entry of Ĥ. Nothing is latent but β,
and NUTS costs O(1) in N. In β this is the Laplace (Bernstein–von Mises) form of the
negative-binomial likelihood around β̂ — centred on the one-step Newton estimate, with the
Fisher information as precision — so with β̂ near the MLE and the noise small it matches the
posterior of NUTS on the raw rows up to O(1/√N) of a posterior sd (its skewness). With clipping
(counts above M) the covariance Var(min(Y, M)) and the slope h differ slightly for rows whose μ
reaches M; the model is that of the clipped counts otherwise.

Why α is public and fixed. The released statistics carry next to no information about α: the
mean of U (and of Σ y·x) does not depend on α without clipping (E[y | x] = μ), and α enters
only the covariance of one d-vector, one draw of it — a posterior for α from these statistics
would return its prior. Learning α would need a released second moment of the counts (Σ y², of
sensitivity M²) and its anchored expansion, which this family does not release. So α is a
public setting (from earlier public data or domain knowledge, like the bounds); a model whose
α is a free variable is refused by the recognition of the one-call route.

Neighbouring relation: substitute (one row replaced, N public).

References
----------
.. [1] Kulkarni, T., Jälkö, J., Koskela, A., Kaski, S. and Honkela, A. (2021). Differentially
   private Bayesian inference for generalized linear models. ICML.
.. [2] Avella-Medina, M., Bradshaw, C. and Loh, P.-L. (2023). Differentially private inference
   via noisy optimization. Annals of Statistics (noisy Newton steps on released scores).
.. [3] Hilbe, J. M. (2011). Negative Binomial Regression, 2nd ed. Cambridge (the NB2 model, its
   score and expected information).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy import special

from pymc_dp.exponential_family.base import _check_finite_real, _interval_product
from pymc_dp.exponential_family.counts import (
    _MAX_LINEAR_PREDICTOR,
    PoissonRegression,
    _capped,
    _CountAnchor,
    _solve,
    poisson_anchor_point,
)
from pymc_dp.exponential_family.densities import ReleaseReading
from pymc_dp.exponential_family.families import SUPPORTED_FAMILIES
from pymc_dp.exponential_family.regressions import ANCHOR_HESSIAN_WEIGHT

__all__ = [
    "NegativeBinomialRegression",
    "NegativeBinomialScoreAnchor",
    "clamped_nb_hessian_weight",
    "clamped_nb_mean",
]


def _check_alpha(value: Any) -> float:
    if value is None or isinstance(value, bool):
        raise TypeError(
            "`alpha` must be a positive number: the public, known dispersion of the negative binomial (variance "
            f"μ + μ²/α). Found {value!r}."
        )
    alpha = _check_finite_real("alpha", value)
    if alpha <= 0.0:
        raise ValueError(f"`alpha` must be a positive number (the dispersion). Found {value!r}.")
    return alpha


def _nb_below(mu: np.ndarray, alpha: float, y_max: int) -> np.ndarray:
    """P(Y = k) for k = 0, …, M − 1 (rows × M) for Y ~ NegativeBinomial(μ, α), μ ≥ 0 elementwise."""
    mu = np.asarray(mu, dtype=float)[:, None]
    k = np.arange(int(y_max), dtype=float)[None, :]
    log_p = (
        special.gammaln(k + alpha)
        - special.gammaln(alpha)
        - special.gammaln(k + 1.0)
        + alpha * (math.log(alpha) - np.log(alpha + mu))
        + special.xlogy(k, mu)
        - k * np.log(alpha + mu)
    )
    return np.exp(log_p)


def clamped_nb_mean(mu: np.ndarray, alpha: float, y_max: int) -> np.ndarray:
    """m(μ) = E[min(Y, M)] for Y ~ NegativeBinomial(μ, α) (NumPy, elementwise in μ), in [0, min(μ, M)].

    m = Σ_{k<M} k·P(k) + M·P(Y ≥ M) = M − Σ_{k<M} (M − k)·P(k), a finite sum (no tail to subtract).
    """
    mu = np.atleast_1d(np.asarray(mu, dtype=float))
    k = np.arange(int(y_max), dtype=float)
    below = _nb_below(mu, alpha, y_max)
    return np.clip(y_max - below @ (y_max - k), 0.0, np.minimum(mu, float(y_max)))


def clamped_nb_hessian_weight(mu: np.ndarray, alpha: float, y_max: int) -> np.ndarray:
    """h(μ) = μ·dm/dμ = α/(α + μ)·Cov(min(Y, M), Y) for Y ~ NegativeBinomial(μ, α) (NumPy), in [0, μ].

    From μ·dP(k)/dμ = P(k)·α(k − μ)/(α + μ): h = α/(α + μ)·(E[min(Y, M)·Y] − μ·m), and with
    E[min(Y, M)·Y] = Σ_{k<M} k²P(k) + M·(μ − Σ_{k<M} k·P(k)) the covariance is the finite sum
    Σ_{k<M} P(k)(k − M)(k − μ) (no large terms cancel, whatever μ). Without clipping h = μ. m is
    non-decreasing in μ with slope at most 1 (m = μ − E[(Y − M)⁺], and Y grows stochastically
    with μ), so 0 ≤ h ≤ μ.
    """
    mu = np.atleast_1d(np.asarray(mu, dtype=float))
    k = np.arange(int(y_max), dtype=float)
    below = _nb_below(mu, alpha, y_max)
    # P(k)·(k − M) first: a zero probability stays zero whatever the size of k − μ
    cov = np.sum(below * (k - y_max) * (k - mu[:, None]), axis=1)
    return np.clip(alpha / (alpha + mu) * cov, 0.0, mu)


@dataclass(frozen=True, repr=False)
class NegativeBinomialRegression(PoissonRegression):
    """y | x ~ NegativeBinomial(exp(xᵀβ), α), α public and known, counts clipped to [0, ``y_max``].

    The main release is the Poisson family's, S(x, y) = (y·x, x, upper triangle of xxᵀ), and
    places the first anchor; the likelihood reads the last anchor's released score and
    information (:class:`NegativeBinomialScoreAnchor`; ``covariate_anchors`` ≥ 1 is required,
    2 recommended). Include a column of ones with bounds (1, 1) for an intercept. There is no
    naive likelihood (``noise_aware=False`` is refused): the negative binomial's log-likelihood
    is not a function of S. See :mod:`pymc_dp.exponential_family.negative_binomial`, also for
    why α must be known.

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public).

    Sensitivity, from the public settings only: every row is clipped, x into ``x_bounds``
    ([lⱼ, uⱼ]) and y into the integers 0..``y_max`` (M); the main release's coordinates lie in
    the intervals of :class:`~pymc_dp.exponential_family.counts.PoissonRegression` (y·xⱼ in the
    hull of {0, M·lⱼ, M·uⱼ}, xⱼ in [lⱼ, uⱼ], xⱼxₖ by interval arithmetic), each anchor's in those
    of :class:`NegativeBinomialScoreAnchor`; Δ₁ and Δ₂ are the L1 and L2 norms of the widths
    (Foulds et al. 2016, eq. 17). Everything is priced before any row is read. ε covers the main
    release and its anchors together: the anchors take :attr:`anchor_share` of it (of ρ for
    Gaussian noise), three quarters of that for the last one with two or more anchors
    (:func:`pymc_dp.exponential_family.anchors.anchor_shares`).

    Parameters
    ----------
    n_features, x_bounds, y_max
        As for :class:`~pymc_dp.exponential_family.counts.PoissonRegression`.
    alpha : float
        α > 0, the public dispersion: Var(y | x) = μ + μ²/α (``pm.NegativeBinomial``'s ``alpha``).
    approximation_interval
        Unused by this family's likelihood (kept from the Poisson statistics it shares).

    References
    ----------
    .. [1] Kulkarni, T., Jälkö, J., Koskela, A., Kaski, S. and Honkela, A. (2021).
       Differentially private Bayesian inference for generalized linear models. ICML.
    .. [2] Foulds, J., Geumlek, J., Welling, M. and Chaudhuri, K. (2016). On the theory and
       practice of privacy-preserving Bayesian data analysis. UAI, eq. (17).
    """

    alpha: float | None = None
    name: ClassVar[str] = "negative_binomial_regression"
    #: Of the release's privacy, the anchors' share: the main release only places the first anchor.
    anchor_share: ClassVar[float] = 0.8
    #: What :func:`~pymc_dp.exponential_family.counts.count_regression_loglik` names in its errors.
    _likelihood: ClassVar[str] = (
        "negative-binomial-regression likelihood (it reads the last anchor's released score and information)"
    )
    _anchor_hint: ClassVar[str] = "covariate_anchors=2"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "alpha", _check_alpha(self.alpha))

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "alpha": self.alpha}

    def natural(self, beta: Any) -> tuple[Any, Any]:
        raise ValueError(
            "`noise_aware` must be True for negative_binomial_regression: its log-likelihood is not a function of the "
            "released polynomial statistics (they only place the first anchor). Found noise_aware=False."
        )

    def anchor_point(
        self, noisy: np.ndarray, n_rows: int, previous: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    ) -> np.ndarray:
        """Where the next anchor is released (post-processing of earlier releases, NumPy).

        Without ``previous``: the quasi-Poisson estimate from the main release
        (:func:`~pymc_dp.exponential_family.counts.poisson_anchor_point`; the negative
        binomial's mean is the Poisson's). With ``previous`` = (β̂, Û, Ĥ): one Newton step on
        the released score, β̂ + Ĥ⁻¹Û, capped at one nat of the linear predictor over the box.
        """
        if previous is None:
            return poisson_anchor_point(self, noisy, n_rows)
        point, score, hessian = (np.asarray(v, dtype=float) for v in previous)
        lower, upper = (np.asarray(b, dtype=float) for b in self.x_bounds)
        reach = np.maximum(np.abs(lower), np.abs(upper))
        return point + _capped(_solve(hessian, score, n_rows), reach)

    def anchor_family(self, point: np.ndarray) -> NegativeBinomialScoreAnchor:
        """The family whose release is the anchor at ``point`` (public)."""
        return NegativeBinomialScoreAnchor(self.n_features, self.x_bounds, self.y_max, self.alpha, tuple(point))

    def _expansion_target(self, reading: ReleaseReading) -> tuple[np.ndarray, Any, Any, tuple[np.ndarray, np.ndarray]]:
        """The last anchor's released score Û (no offset), its noise variance σₐ², the anchor family's intervals.

        The main release does not enter (:func:`~pymc_dp.exponential_family.counts.count_regression_loglik`).
        """
        anchor_beta, score, score_noise, _, _ = reading.anchor
        intervals = self.anchor_family(np.asarray(anchor_beta, dtype=float)).intervals()
        return np.asarray(score, dtype=float), None, float(score_noise), intervals


@dataclass(frozen=True, repr=False)
class NegativeBinomialScoreAnchor(_CountAnchor):
    """The negative binomial's score of the clipped counts and its slope at one public point β̂ (Σ over rows).

    S(x, y) = (w·(y − m(μ))·x, w'·(upper triangle of w·h(μ)·xxᵀ)) with μ = exp(xᵀβ̂),
    w = α/(α + μ), m and h of :func:`clamped_nb_mean` and :func:`clamped_nb_hessian_weight` (M =
    ``y_max``), y the clipped count and w' = :data:`~pymc_dp.exponential_family.regressions.
    ANCHOR_HESSIAN_WEIGHT`. Reads the counts (the score does), unlike the Poisson anchor. Used
    by ``release_statistics("negative_binomial_regression", ..., covariate_anchors=k)``.

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public). With μ_max = exp(max of
    xᵀβ̂ over the public box): w ≤ 1 and w·m ≤ w·μ = αμ/(α + μ) ≤ min(α, μ_max), also ≤ M, so
    the score's weight w(y − m) lies in [−c₁, M] with c₁ = min(α, μ_max, M), and coordinate j in
    the interval product of [−c₁, M] and [lⱼ, uⱼ]; 0 ≤ w·h ≤ w·μ ≤ c₂ = min(α, μ_max)
    (:attr:`weight_bound`), so w'·w·h·xⱼxₖ lies in w'·c₂ times the hull of {0} and the interval
    of xⱼxₖ. Δ₁ and Δ₂ are the L1 and L2 norms of the widths: functions of the public bounds, α
    and β̂ (computed from earlier releases only). Each row's weights are also capped at these
    bounds, so the sensitivity holds whatever the floating-point rounding.

    Parameters
    ----------
    n_features, x_bounds, y_max, alpha
        As for :class:`NegativeBinomialRegression`.
    anchor : sequence of float
        β̂, the public point.
    """

    n_features: int = 1
    x_bounds: tuple[Any, Any] | None = None
    y_max: int = 1
    alpha: float | None = None
    anchor: tuple[float, ...] = ()
    name: ClassVar[str] = "negative_binomial_score_anchor"
    params: ClassVar[tuple[str, ...]] = ()
    _model: ClassVar[str] = "negative-binomial-regression"

    def _check_settings(self) -> None:
        super()._check_settings()
        object.__setattr__(self, "alpha", _check_alpha(self.alpha))

    def _extra_settings(self) -> dict[str, Any]:
        return {"y_max": self.y_max, "alpha": self.alpha}

    @property
    def weight_bound(self) -> float:
        """c₂ = min(α, μ_max): a public bound on w·h (and on w·m) for every admissible row."""
        return float(min(self.alpha, self._largest_mean()))

    def _score_weight_interval(self) -> tuple[float, float]:
        return -min(self.weight_bound, float(self.y_max)), float(self.y_max)

    def _mean_intervals(self, xl: np.ndarray, xu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        weight = self._score_weight_interval()
        pairs = [_interval_product(weight, (float(lo), float(hi))) for lo, hi in zip(xl, xu, strict=True)]
        return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])

    def _weights(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(w·(y − m), w·h) per row, capped at their public intervals."""
        mu = np.exp(np.minimum(x @ np.asarray(self.anchor), _MAX_LINEAR_PREDICTOR))
        w = self.alpha / (self.alpha + mu)
        low, high = self._score_weight_interval()
        score = np.clip(w * (y - clamped_nb_mean(mu, self.alpha, self.y_max)), low, high)
        return score, np.minimum(w * clamped_nb_hessian_weight(mu, self.alpha, self.y_max), self.weight_bound)

    def _row_weights(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError("the score anchor's weights read the counts: see row_statistics")

    def row_statistics(self, data: np.ndarray) -> np.ndarray:
        x, y = data[:, :-1], data[:, -1]
        score, hessian = self._weights(x, y)
        rows, cols = self._triu
        weight = ANCHOR_HESSIAN_WEIGHT * hessian
        return np.column_stack([score[:, None] * x, weight[:, None] * x[:, rows] * x[:, cols]])


SUPPORTED_FAMILIES.setdefault(NegativeBinomialRegression.name, NegativeBinomialRegression)
