"""Densities and moments the noise-aware likelihoods are built from (PyTensor), and their shared helpers.

Split out of :mod:`pymc_dp.exponential_family.noise_aware` (which re-exports every name): the
normal ⊛ Laplace closed form (Reed and Jorgensen 2004), the exact Binomial ⊛ Laplace sum, the
moments of one clamped row (Poisson, normal), Isserlis' product moments, a Gaussian log density
for small dense covariances, and the checks and conversions every likelihood uses. Pure
functions of their arguments: no model, no data.

Neighbouring relation: substitute (the release's); post-processing of a release, no ε.

References
----------
.. [1] Reed, W. J. and Jorgensen, M. (2004). The double Pareto-lognormal distribution.
   Communications in Statistics 33(8), eq. (4) (normal-Laplace density).
.. [2] Bernstein, G. and Sheldon, D. (2019). Differentially private Bayesian linear
   regression. NeurIPS, §3 (moments of products of Gaussian entries).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import pytensor.tensor as pt
from scipy import special

__all__ = [
    "binomial_laplace_logpdf",
    "clamped_normal_moments",
    "clamped_poisson_moments",
    "gaussian_logpdf",
    "log_mills_ratio",
    "normal_laplace_logpdf",
    "product_moments",
]

_WINDOW_NATS = 60.0
_LOG_SQRT_PI_OVER_2 = 0.5 * math.log(math.pi / 2.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_MIN_VARIANCE = 1e-300


def _tensor(x: Any) -> Any:
    """A float64 tensor (PyTensor would autocast a Python float to float32)."""
    if isinstance(x, pt.variable.Variable):
        return x
    return pt.as_tensor_variable(np.asarray(x, dtype=np.float64))


def log_mills_ratio(z: Any) -> Any:
    """log R(z) = log[(1 − Φ(z)) / φ(z)], finite for every real z (PyTensor).

    z ≥ 0: R(z) = √(π/2)·erfcx(z/√2), which does not overflow for large z. z < 0:
    log R(z) = log Φ(−z) + z²/2 + ½ log 2π with Φ(−z) = 1 − ½ erfc(|z|/√2) ∈ [½, 1). Each
    branch reads its argument clipped to its own half-line, so neither produces inf or NaN
    (nor NaN gradients) where it is not selected.
    """
    z = _tensor(z)
    positive = z >= 0.0
    zp = pt.switch(positive, z, 0.0)
    zn = pt.switch(positive, 0.0, z)
    upper = _LOG_SQRT_PI_OVER_2 + pt.log(pt.erfcx(zp / math.sqrt(2.0)))
    lower = pt.log1p(-0.5 * pt.erfc(-zn / math.sqrt(2.0))) + 0.5 * zn * zn + _HALF_LOG_2PI
    return pt.switch(positive, upper, lower)


def normal_laplace_logpdf(value: Any, mean: Any, variance: Any, scale: float) -> Any:
    """log density at ``value`` of S + L with S ~ N(mean, variance) and L ~ Laplace(0, scale) (PyTensor).

    With λ = 1/b, s = √variance, d = value − mean (Reed and Jorgensen 2004, eq. 4, α = β = λ):

        f = (λ/2) φ(d/s) [R(λs − d/s) + R(λs + d/s)],

    R the Mills ratio. Each term is evaluated in the log domain as log R(zᵢ) − d²/(2s²); for
    zᵢ < 0 the two squares are combined algebraically into λ²s²/2 ∓ λd, so nothing overflows
    when b → 0 (the normal limit) or s → 0 (the Laplace limit). ``scale`` = 0 gives the
    normal log density.

    Parameters
    ----------
    value, mean, variance : tensor-like
        Broadcast together; ``variance`` is floored at 1e-300.
    scale : float
        Laplace scale b ≥ 0 (public).

    References
    ----------
    .. [1] Reed, W. J. and Jorgensen, M. (2004). The double Pareto-lognormal distribution.
       Communications in Statistics 33(8), eq. (4).
    """
    value, mean = _tensor(value), _tensor(mean)
    variance = pt.maximum(_tensor(variance), _MIN_VARIANCE)
    d = value - mean
    if float(scale) == 0.0:
        return -_HALF_LOG_2PI - 0.5 * pt.log(variance) - d * d / (2.0 * variance)
    lam = 1.0 / float(scale)
    s = pt.sqrt(variance)
    ds = d / s
    terms = []
    for sign in (-1.0, 1.0):  # R(λs − d/s) and R(λs + d/s)
        z = lam * s + sign * ds
        positive = z >= 0.0
        upper = log_mills_ratio(z) - 0.5 * ds * ds
        zn = pt.switch(positive, 0.0, z)
        lower = (
            pt.log1p(-0.5 * pt.erfc(-zn / math.sqrt(2.0))) + _HALF_LOG_2PI + 0.5 * lam * lam * variance + sign * lam * d
        )
        terms.append(pt.switch(positive, upper, lower))
    high, low = pt.maximum(terms[0], terms[1]), pt.minimum(terms[0], terms[1])
    # log(e^a + e^b) written so that its gradient stays finite when both terms underflow.
    return math.log(lam / 2.0) - _HALF_LOG_2PI + high + pt.log1p(pt.exp(low - high))


def _binomial_window(n_total: int, scale: float, avoid_length: int | None = None) -> int:
    """Number of support points the exact sum visits: 2K + 1 with K = ⌈60 b⌉ (all n_total + 1 if fewer).

    K grows by one if 2K + 1 would equal ``avoid_length`` (N): a model constant with an axis of
    length N looks like row data to :func:`pymc_dp.data.check_prior_reads_no_data`.
    """
    half = math.ceil(_WINDOW_NATS * float(scale))
    if 2 * half + 1 == avoid_length:
        half += 1
    return min(2 * half + 1, n_total + 1)


def binomial_laplace_logpdf(value: Any, n_total: int, p: Any, scale: float, avoid_length: int | None = None) -> Any:
    """log Σₛ Binomial(s; n_total, p) · Laplace(value − s; 0, b): the release likelihood (PyTensor).

    A finite sum over the values s of S within K = ⌈60 b⌉ of the release (centred on
    round(value) clipped into [0, n_total]; all n_total + 1 values if that is fewer). The
    terms left out have Laplace weight below e^{−60}/(2b), so they change log p(Ŝ | p) only
    where it lies about 60 nats below the largest density of the release — nowhere that
    matters to a posterior. ``p`` may have any shape (the result has its shape); ``value``
    is a scalar, a number or a symbolic one. Cost O(min(K, n_total)) per evaluation.
    """
    p = _tensor(p)[..., None]
    if float(scale) == 0.0:  # a number: Ŝ = S exactly
        support = np.arange(n_total + 1, dtype=float)
        keep = support == float(value)
        if not keep.any():
            return pt.zeros_like(p[..., 0]) - np.inf
        s = support[keep]
        valid = None
    else:
        width = _binomial_window(n_total, scale, avoid_length)
        if width == n_total + 1:
            s, valid = np.arange(n_total + 1, dtype=float), None
        else:
            value = _tensor(value)
            half = (width - 1) // 2
            centre = pt.clip(pt.round(value), 0.0, float(n_total))
            raw = centre + np.arange(-half, half + 1, dtype=float)
            valid = (raw >= 0.0) & (raw <= n_total)
            s = pt.clip(raw, 0.0, float(n_total))
    gammaln = special.gammaln if isinstance(s, np.ndarray) else pt.gammaln
    # scipy for the constant: PyTensor would autocast a Python float to float32.
    log_choose = float(special.gammaln(n_total + 1.0)) - gammaln(s + 1.0) - gammaln(n_total - s + 1.0)
    terms = log_choose + s * pt.log(p) + (n_total - s) * pt.log1p(-p)
    if float(scale) != 0.0:
        terms = terms - math.log(2.0 * scale) - pt.abs(value - s) / float(scale)
    if valid is not None:
        terms = pt.switch(valid, terms, -np.inf)
    top = pt.max(terms, axis=-1, keepdims=True)
    return (top + pt.log(pt.sum(pt.exp(terms - top), axis=-1, keepdims=True)))[..., 0]


def clamped_poisson_moments(mu: Any, upper: int, avoid_length: int | None = None) -> tuple[Any, Any]:
    """Mean and variance of min(X, upper), X ~ Poisson(mu) (PyTensor, elementwise in mu): one clamped row.

    The pmf is summed over k = 0, …, upper − 1; if ``upper`` equals ``avoid_length`` (N) the
    constant arrays get one more, zero-weighted, entry (see :func:`_binomial_window`).
    """
    mu = _tensor(mu)[..., None]
    size = int(upper) + (1 if int(upper) == avoid_length else 0)
    k = np.arange(size, dtype=float)
    mask = (k < upper).astype(float)
    pmf = mask * pt.exp(k * pt.log(mu) - mu - special.gammaln(k + 1.0))
    tail = pt.maximum(1.0 - pt.sum(pmf, axis=-1), 0.0)  # P(X ≥ upper)
    mean = pt.sum(k * pmf, axis=-1) + upper * tail
    second = pt.sum(k * k * pmf, axis=-1) + float(upper) ** 2 * tail
    return mean, pt.maximum(second - mean * mean, 0.0)


def clamped_normal_moments(mu: Any, sigma: float, lower: float, upper: float) -> tuple[Any, Any]:
    """Mean and variance of clip(X, lower, upper), X ~ N(mu, sigma²) (PyTensor): the censored normal.

    With α = (lower − mu)/σ, β = (upper − mu)/σ: E = lower·Φ(α) + upper·(1 − Φ(β)) +
    mu·(Φ(β) − Φ(α)) + σ(φ(α) − φ(β)); E[X²] adds (mu² + σ²)ΔΦ + 2muσ(φ(α) − φ(β)) +
    σ²(αφ(α) − βφ(β)) to the two atoms.
    """
    mu = _tensor(mu)
    sigma = float(sigma)
    a = (lower - mu) / sigma
    b = (upper - mu) / sigma

    def cdf(x):
        return 0.5 * pt.erfc(-x / math.sqrt(2.0))

    def pdf(x):
        return pt.exp(-0.5 * x * x - _HALF_LOG_2PI)

    ca, cb, pa, pb = cdf(a), cdf(b), pdf(a), pdf(b)
    inside = cb - ca
    mean = lower * ca + upper * (1.0 - cb) + mu * inside + sigma * (pa - pb)
    second = (
        lower**2 * ca
        + upper**2 * (1.0 - cb)
        + (mu * mu + sigma**2) * inside
        + 2.0 * mu * sigma * (pa - pb)
        + sigma**2 * (a * pa - b * pb)
    )
    return mean, pt.maximum(second - mean * mean, 0.0)


def product_moments(mean: Any, cov: Any, rows: np.ndarray, cols: np.ndarray) -> tuple[Any, Any]:
    """Mean and covariance of t = (zⱼzₖ) over the index pairs (rows, cols), z ~ N(mean, cov) (PyTensor).

    E[zᵢzⱼ] = Cᵢⱼ + μᵢμⱼ and, by Isserlis' theorem with a mean,
    Cov(zᵢzⱼ, zₖzₗ) = CᵢₖCⱼₗ + CᵢₗCⱼₖ + μᵢμₖCⱼₗ + μᵢμₗCⱼₖ + μⱼμₖCᵢₗ + μⱼμₗCᵢₖ
    (Bernstein and Sheldon 2019, §3, the moments of one row's statistic under the model).
    """
    i, j = np.asarray(rows)[:, None], np.asarray(cols)[:, None]
    k, m = np.asarray(rows)[None, :], np.asarray(cols)[None, :]
    mu = mean
    first = cov[rows, cols] + mu[rows] * mu[cols]
    second = (
        cov[i, k] * cov[j, m]
        + cov[i, m] * cov[j, k]
        + mu[i] * mu[k] * cov[j, m]
        + mu[i] * mu[m] * cov[j, k]
        + mu[j] * mu[k] * cov[i, m]
        + mu[j] * mu[m] * cov[i, k]
    )
    return first, second


def _parameter_tensor(name: str, value: Any, ndim: int, what: str) -> Any:
    """A likelihood's parameter ``value`` as a tensor, refused unless it has ``ndim`` dimensions.

    The error reads "`name` must be ``what``. Found a tensor with k dimensions." (a check of the
    model's graph: public).
    """
    value = pt.as_tensor_variable(value)
    if value.ndim != ndim:
        raise ValueError(f"`{name}` must be {what}. Found a tensor with {value.ndim} dimensions.")
    return value


def _scalar_param(family: Any, name: str, value: Any) -> Any:
    what = f"a scalar for the noise-aware {family.name} likelihood (one parameter for all rows)"
    return _parameter_tensor(name, value, 0, what)


_PARAMETER_LIMIT = 1e25


class ReleaseReading(NamedTuple):
    """What a noise-aware likelihood reads of a release: released values and public settings only.

    Built by :meth:`pymc_dp.exponential_family.release.ReleasedStatistics.likelihood` and handed
    to :func:`~pymc_dp.exponential_family.noise_aware.release_loglik` or to a family's own
    ``release_loglik``. Nothing in it is raw data: the likelihoods are post-processing (no ε).
    """

    #: The unprojected released vector (the mechanism's output).
    noisy: np.ndarray
    #: N, public under substitute neighbours.
    n_rows: int
    #: The Laplace scale b of the release.
    scale: float
    #: A Gaussian release's per-coordinate σ² (None for a Laplace release).
    noise_variance: float | None
    #: The last covariate anchor's (β̂, released value, its noise variance, Ĥ, Ĥ's noise variance), or None.
    anchor: tuple[np.ndarray, np.ndarray, float, np.ndarray, float] | None


def _release_noise_variance(scale: float, noise_variance: float | None) -> float:
    """Each released coordinate's noise variance: a Gaussian release's σ² when given, else Laplace's 2b²."""
    return 2.0 * float(scale) ** 2 if noise_variance is None else float(noise_variance)


def gaussian_logpdf(value: Any, mean: Any, cov: Any) -> Any:
    """log N(value; mean, cov) for a small dense covariance (PyTensor), without a Cholesky factor.

    The covariance is first scaled to unit diagonal (D⁻¹ cov D⁻¹, D = diag(cov)^½), so that
    the determinant of the scaled matrix lies in (0, 1] and cannot overflow whatever the
    scales of the statistics; then log N = −½ rᵀ R⁻¹ r − ½ log det R − Σ log Dᵢ − (K/2) log 2π
    with r = D⁻¹(value − mean), R the scaled matrix. The inverse and determinant of a K × K
    matrix (K ≤ 28 here) have cheap closed-form gradients, where the Cholesky factor's
    gradient costs several triangular solves per evaluation.
    """
    value, mean, cov = _tensor(value), _tensor(mean), _tensor(cov)
    size = value.shape[0]
    sd = pt.sqrt(pt.maximum(pt.diagonal(cov), _MIN_VARIANCE))
    scaled = cov / pt.outer(sd, sd)
    r = (value - mean) / sd
    # A trajectory that overflows (σ → ∞, say) gets −inf, and the linear algebra never sees inf
    # or NaN (whose warnings are errors in the tests); a 1e-10 ridge on the unit diagonal keeps
    # the inverse finite where the covariance is singular (a constant covariate, σ → 0).
    ok = ~(pt.any(pt.isinf(scaled) | pt.isnan(scaled)) | pt.any(pt.isinf(r) | pt.isnan(r)) | pt.any(pt.isinf(sd)))
    eye = pt.eye(size)
    scaled = pt.switch(ok, scaled, eye) + 1e-10 * eye
    r = pt.switch(ok, r, 0.0)
    sd = pt.switch(ok, sd, 1.0)
    quad = pt.dot(r, pt.dot(pt.linalg.inv(scaled), r))
    logp = -0.5 * quad - 0.5 * pt.log(pt.linalg.det(scaled)) - pt.sum(pt.log(sd)) - 0.5 * size * math.log(2 * math.pi)
    return pt.switch(ok, logp, -np.inf)
