"""Noise-aware likelihoods of a Laplace release: p(Ŝ | θ) = ∫ p(Ŝ | S) p(S | θ) dS.

The release of :func:`pymc_dp.release_statistics` is Ŝ = S + Laplace(b)^d with S = Σᵢ S(xᵢ)
the aggregate of the clamped rows and b = Δ₁/ε. Treating Ŝ as S (the *naive* likelihood)
ignores the noise and gives over-confident posteriors where N·ε is small. The functions here
model the release itself (Bernstein and Sheldon 2018, §3–4; 2019, §3):

* p(Ŝ | S) is the Laplace mechanism, applied to the **unprojected** mechanism output
  (``ReleasedStatistics.noisy_statistics``; the projection onto the feasible set is
  post-processing and would otherwise have to be modelled as censoring);
* p(S | θ) is the exact distribution of the sum where it is tractable (Bernoulli and
  Binomial: S ~ Binomial(N·n_trials, p), marginalised by an exact finite sum), otherwise its
  central-limit normal approximation N(N·m(θ), N·v(θ)) with m, v the mean and variance of one
  *clamped* row under the model (Bernstein and Sheldon 2018, §4.1, eq. 5);
* in one dimension the normal ⊛ Laplace convolution has a closed form (the normal-Laplace
  density of Reed and Jorgensen 2004), implemented here with ``erfcx`` and a log-CDF so that
  it is finite and differentiable for any b ≥ 0 and any N;
* in several dimensions there is no closed form. Categorical: the Laplace noise is written
  as a Gaussian scale mixture, Laplace(0, b) = N(0, τ) with τ ~ Exponential(rate 1/(2b²))
  (Andrews and Mallows 1974), so that S is marginalised exactly given τ and only the d latent
  variances τ are sampled by NUTS with θ (Bernstein and Sheldon 2018 sample the same ω by
  Gibbs). Linear regression: each coordinate's Laplace noise is replaced by the normal of the
  same variance 2b², so that Ŝ ~ N(N·m, N·V + 2b²I) in closed form and only θ and the
  covariate moments are sampled (with latent variances NUTS mixed badly there: the τ of
  the five to twenty-eight statistics and θ form a funnel). Its calibration is measured
  (``pymc_dp.testing.calibration.calibrate_linear_regression``).

Pure PyTensor expressions, except :func:`release_loglik` which adds the latent variables of
the multivariate families to the model in context.

Neighbouring relation: substitute (one row replaced, N public) — the release's; these
likelihoods are post-processing of the release and cost no ε.

References
----------
.. [1] Bernstein, G. and Sheldon, D. (2018). Differentially private Bayesian inference for
   exponential families. NeurIPS, §3–4, eq. (3)–(5).
.. [2] Bernstein, G. and Sheldon, D. (2019). Differentially private Bayesian linear
   regression. NeurIPS, §3 (sufficient statistics of zzᵀ, CLT and covariate model).
.. [3] Reed, W. J. and Jorgensen, M. (2004). The double Pareto-lognormal distribution.
   Communications in Statistics 33(8), eq. (4) (normal-Laplace density).
.. [4] Andrews, D. F. and Mallows, C. L. (1974). Scale mixtures of normal distributions.
   JRSS B 36(1), 99–102.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytensor.tensor as pt
from scipy import special

__all__ = [
    "EXACT_SUM_LIMIT",
    "NOISE_AWARE_METHODS",
    "binomial_laplace_logpdf",
    "clamped_normal_moments",
    "clamped_poisson_moments",
    "gaussian_logpdf",
    "linear_regression_loglik",
    "linear_regression_moments",
    "linear_regression_release_logpdf",
    "log_mills_ratio",
    "logistic_anchor_point",
    "logistic_mean_function",
    "normal_laplace_logpdf",
    "product_moments",
    "release_loglik",
    "univariate_release_loglik",
]

#: Largest number of support points (2⌈60 b⌉ + 1, or N·n_trials + 1 if fewer) that the exact
#: Binomial sum visits; above it the CLT normal ⊛ Laplace closed form is used (error O(1/√N)).
EXACT_SUM_LIMIT = 200_001
_WINDOW_NATS = 60.0

#: How each family's release likelihood is computed (for documentation and the record).
NOISE_AWARE_METHODS = {
    "bernoulli": "exact: Binomial(N, p) ⊛ Laplace by a finite sum (CLT closed form above EXACT_SUM_LIMIT)",
    "binomial": "exact: Binomial(N·n_trials, p) ⊛ Laplace by a finite sum (CLT closed form above EXACT_SUM_LIMIT)",
    "poisson": "CLT of the clamped counts min(x, upper), normal ⊛ Laplace in closed form",
    "normal": "CLT of the clamped rows (censored-normal moments), normal ⊛ Laplace in closed form",
    "categorical": "CLT multivariate normal of the counts, Laplace as a scale mixture (latent variances)",
    "linear_regression": "CLT of zzᵀ with Gaussian covariates (latent moments), Laplace noise replaced by the "
    "normal of the same variance: Gaussian in closed form",
    "logistic_regression": "CLT of (s·x, xxᵀ) under the logistic model with Gaussian covariates (latent moments; "
    "expectations over xᵀβ by Gauss–Hermite quadrature), Laplace noise replaced by the normal of the same "
    "variance: Gaussian in closed form; with covariate anchors, Σ s·x given the covariates, its mean expanded "
    "around the released F(β̂) and slope H(β̂)",
}

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


def _mvnormal_logpdf(value: np.ndarray, mean: Any, cov: Any) -> Any:
    import pymc as pm

    return pm.logp(pm.MvNormal.dist(mu=mean, cov=cov), pt.as_tensor_variable(value))


def _scalar_param(family: Any, name: str, value: Any) -> Any:
    value = pt.as_tensor_variable(value)
    if value.ndim != 0:
        raise ValueError(
            f"`{name}` must be a scalar for the noise-aware {family.name} likelihood (one parameter for all rows). "
            f"Found a tensor with {value.ndim} dimensions."
        )
    return value


def univariate_release_loglik(family: Any, value: Any, n_rows: int, scale: float, param: Any) -> Any:
    """log p(Ŝ = value | θ) for the one-statistic families, elementwise over ``param`` (PyTensor).

    ``param`` is p (Bernoulli, Binomial) or mu (Poisson, Normal), of any shape — a scalar
    model variable, or a grid of values for quadrature; ``value`` is the unprojected release
    (a number or a symbolic scalar). Bernoulli/Binomial: exact sum while N·n_trials + 1 ≤
    :data:`EXACT_SUM_LIMIT`, else the CLT closed form. Poisson: CLT of min(x, upper).
    Normal: CLT of clip(x, lower, upper).
    """
    from pymc_dp.exponential_family import families as fams

    kind = type(family)
    if kind in (fams.Bernoulli, fams.Binomial):
        p = _tensor(param)
        n_total = n_rows * family.n_trials
        if _binomial_window(n_total, scale, n_rows) <= EXACT_SUM_LIMIT:
            return binomial_laplace_logpdf(value, n_total, p, scale, avoid_length=n_rows)
        return normal_laplace_logpdf(value, n_total * p, n_total * p * (1.0 - p), scale)
    if kind is fams.Poisson:
        mean, var = clamped_poisson_moments(param, family.upper, avoid_length=n_rows)
    elif kind is fams.Normal:
        mean, var = clamped_normal_moments(param, family.sigma, *family.bounds)
    else:
        raise ValueError(
            f"`family` must be one of bernoulli, binomial, poisson, normal for a one-statistic release "
            f"likelihood. Found {family.name!r}."
        )
    return normal_laplace_logpdf(value, n_rows * mean, n_rows * var, scale)


def release_loglik(
    family: Any,
    noisy: np.ndarray,
    n_rows: int,
    scale: float,
    name: str,
    noise_variance: float | None = None,
    anchor: tuple[np.ndarray, np.ndarray, float, np.ndarray, float] | None = None,
    **params: Any,
) -> Any:
    """log p(Ŝ | θ) of the unprojected release ``noisy`` under ``family`` (see the module docstring).

    ``scale`` is the Laplace scale b of the release. For a Gaussian release (linear and
    logistic regression only: ``release_statistics(..., mechanism="gaussian")``) pass its
    per-coordinate ``noise_variance`` σ² instead: the regressions' likelihood is then exact in
    the noise, where for a Laplace release it uses the normal of the same variance 2b².

    Bernoulli, Binomial, Poisson and Normal return a closed-form (or exactly summed) scalar
    graph (:func:`univariate_release_loglik`). Categorical and linear regression add latent
    variables to the model in context — Categorical ``{name}_noise_variance`` (τ, one per
    released count; Exponential(rate 1/(2b²))), linear regression the covariate moments
    ``{name}_x_mean_std`` (with the deterministic ``{name}_x_mean``) and ``{name}_x_chol``
    (or ``{name}_x_sd`` for one free feature; priors in :func:`linear_regression_loglik`) —
    and return the Gaussian log density of Ŝ given them. ``anchor`` (logistic regression
    only): the covariate anchor (β̂, F̂, σₐ², Ĥ, σ_H²) of :func:`logistic_regression_loglik`.

    Raises
    ------
    ValueError
        For a family without a noise-aware likelihood (a user-defined subclass),
        parameters of the wrong shape, or a linear regression with a constant target
        (``y_bounds`` of zero width).
    """
    from pymc_dp.exponential_family import families as fams

    fams._check_param_names(family, params)
    noisy = np.asarray(noisy, dtype=float)
    kind = type(family)
    regression = kind in (fams.LinearRegression, fams.LogisticRegression)
    if noise_variance is not None and not regression:
        raise ValueError(
            f"`noise_variance` (a Gaussian release) is supported for linear and logistic regression only. Found the "
            f"{family.name} family."
        )
    if anchor is not None and kind is not fams.LogisticRegression:
        raise ValueError(f"`anchor` applies to logistic regression only. Found the {family.name} family.")
    if kind in (fams.Bernoulli, fams.Binomial, fams.Poisson, fams.Normal):
        (param_name,) = family.params
        param = _scalar_param(family, param_name, params[param_name])
        return univariate_release_loglik(family, float(noisy[0]), n_rows, scale, param)
    if kind is fams.Categorical:
        return _categorical_loglik(family, noisy, n_rows, scale, name, params["p"])
    if kind is fams.LinearRegression:
        return linear_regression_loglik(
            family, noisy, n_rows, scale, name, params["beta"], params["sigma"], noise_variance=noise_variance
        )
    if kind is fams.LogisticRegression:
        return logistic_regression_loglik(family, noisy, n_rows, scale, name, params["beta"], noise_variance, anchor)
    raise ValueError(
        f"`noise_aware` must be False for the family {family!r}: a noise-aware likelihood exists only for the "
        f"built-in families {sorted(NOISE_AWARE_METHODS)}. Found a user-defined family."
    )


def _noise_variances(name: str, size: int, scale: float) -> Any:
    """τ ~ Exponential(rate 1/(2b²)), one per coordinate: Laplace(0, b) = N(0, τ) marginally."""
    import pymc as pm

    if scale == 0.0:
        return pt.zeros(size)
    return pm.Exponential(f"{name}_noise_variance", lam=1.0 / (2.0 * scale * scale), shape=size)


def _jittered(cov: Any, size: int) -> Any:
    return cov + 1e-10 * (pt.trace(cov) / size + 1e-300) * pt.eye(size)


def _categorical_loglik(family: Any, noisy: np.ndarray, n_rows: int, scale: float, name: str, p: Any) -> Any:
    p = pt.as_tensor_variable(p)
    k = family.n_categories
    if p.ndim != 1:
        raise ValueError(
            f"`p` must be a vector of {k} class probabilities for the noise-aware categorical likelihood. "
            f"Found a tensor with {p.ndim} dimensions."
        )
    tau = _noise_variances(name, k, scale)
    cov = n_rows * (pt.diag(p) - pt.outer(p, p)) + pt.diag(tau)
    return _mvnormal_logpdf(noisy, n_rows * p, _jittered(cov, k))


def _commutation(size: int) -> np.ndarray:
    """K with K vec(A) = vec(Aᵀ) for size × size matrices (row-major vec)."""
    k = np.zeros((size * size, size * size))
    i, j = np.divmod(np.arange(size * size), size)
    k[i * size + j, j * size + i] = 1.0
    return k


def _kron(a: Any, b: Any, size: int) -> Any:
    """a ⊗ b for two size × size tensors (row-major)."""
    return (a[:, None, :, None] * b[None, :, None, :]).reshape((size * size, size * size))


def linear_regression_moments(
    x_mean: Any, x_cov: Any, beta: Any, sigma: Any, rows: np.ndarray, cols: np.ndarray
) -> tuple[Any, Any]:
    """Mean and covariance of one row's statistic (zⱼzₖ) over (rows, cols), z = (x, y) (PyTensor).

    x ~ N(``x_mean``, ``x_cov``) and y | x ~ N(xᵀβ, σ²), so z is Gaussian with mean μ =
    (μₓ, μₓᵀβ) and covariance C = [[Σₓ, Σₓβ], [βᵀΣₓ, βᵀΣₓβ + σ²]]. With vec row-major,
    E vec(zzᵀ) = vec(C + μμᵀ) and Cov vec(zzᵀ) = (I + K)(C ⊗ C + C ⊗ μμᵀ + μμᵀ ⊗ C) (K the
    commutation matrix; Magnus and Neudecker 1979, Thm 4.3 — the same numbers as Isserlis'
    theorem in :func:`product_moments`), and a constant selection matrix picks the entries
    (rows, cols). Dense products with constants: the gradient is a few small dot products
    (Bernstein and Sheldon 2019, §3).
    """
    x_mean, x_cov, beta = (_tensor(v) for v in (x_mean, x_cov, beta))
    size = int(np.asarray(rows).max()) + 1 if len(rows) else 0
    size = max(size, int(np.asarray(cols).max()) + 1)
    xy = x_cov @ beta
    yy = beta @ xy + sigma * sigma
    mu = pt.concatenate([x_mean, pt.stack([x_mean @ beta])])
    c = pt.concatenate(
        [pt.concatenate([x_cov, xy[:, None]], axis=1), pt.concatenate([xy, pt.stack([yy])])[None, :]], axis=0
    )
    select = np.zeros((len(rows), size * size))
    select[np.arange(len(rows)), np.asarray(rows) * size + np.asarray(cols)] = 1.0
    outer = pt.outer(mu, mu)
    mean = pt.dot(select, (c + outer).reshape((size * size,)))
    four = _kron(c, c, size) + _kron(c, outer, size) + _kron(outer, c, size)
    left = select + select @ _commutation(size)
    return mean, pt.dot(pt.dot(left, four), select.T)


def linear_regression_release_logpdf(
    noisy: Any,
    n_rows: int,
    scale: float,
    x_mean: Any,
    x_cov: Any,
    beta: Any,
    sigma: Any,
    keep: np.ndarray,
    triu: Any,
    noise_variance: float | None = None,
) -> Any:
    """log N(Ŝ_keep; N·m, N·V + 2b²I): the closed-form release likelihood of linear regression (PyTensor).

    m, V are the mean and covariance of one row's statistic (:func:`linear_regression_moments`)
    on the coordinates ``keep`` of the upper triangle ``triu`` of zzᵀ; the Laplace noise of each
    coordinate is replaced by the normal of the same variance 2b², so that S and the noise are
    both marginalised in closed form and nothing latent but the covariate moments remains.
    ``noise_variance`` (a Gaussian release's σ²) replaces 2b² when given.
    """
    rows, cols = (np.asarray(v)[keep] for v in triu)
    x_mean, x_cov, beta, sigma = (_tensor(v) for v in (x_mean, x_cov, beta, sigma))
    # Parameters beyond ±1e25 (only a diverging trajectory goes there) get −inf; their fourth
    # powers would overflow and the moments would hold inf − inf.
    ok = pt.all(pt.le(pt.abs(beta), _PARAMETER_LIMIT)) & pt.le(pt.abs(sigma), _PARAMETER_LIMIT)
    ok = ok & pt.all(pt.le(pt.abs(x_mean), _PARAMETER_LIMIT)) & pt.all(pt.le(pt.abs(x_cov), _PARAMETER_LIMIT))
    beta, x_mean = pt.switch(ok, beta, 0.0), pt.switch(ok, x_mean, 0.0)
    sigma, x_cov = pt.switch(ok, sigma, 1.0), pt.switch(ok, x_cov, pt.eye(x_cov.shape[0]))
    mean, cov = linear_regression_moments(x_mean, x_cov, beta, sigma, rows, cols)
    total = n_rows * cov + _release_noise_variance(scale, noise_variance) * np.eye(keep.size)
    return pt.switch(ok, gaussian_logpdf(_tensor(noisy)[keep], n_rows * mean, total), -np.inf)


_PARAMETER_LIMIT = 1e25


def _release_noise_variance(scale: float, noise_variance: float | None) -> float:
    """Each released coordinate's noise variance: a Gaussian release's σ² when given, else Laplace's 2b²."""
    return 2.0 * float(scale) ** 2 if noise_variance is None else float(noise_variance)


def _covariate_start(
    family: Any, noisy: Any, n_rows: int, free: np.ndarray, position: dict[tuple[int, int], int]
) -> tuple[Any, Any]:
    """Starting values of the free covariates' means and sds from the release (public), or None.

    With a constant column c (bounds (c, c), c ≠ 0) the released Σ c·xⱼ gives the mean and
    Σ xⱼ² the second moment of every free feature; the sampler starts there rather than at the
    prior's centre, where at large N the release's gradient is steep enough to send the first
    trajectories far out. Only the start changes, not the model. ``position`` maps (j, k),
    j ≤ k, to the index of Σ xⱼxₖ in the release. None without a constant column or for a
    symbolic release.
    """
    if not isinstance(noisy, np.ndarray) or not free.size:
        return None, None
    lower, upper = (np.asarray(b, dtype=float) for b in family.x_bounds)
    constant = np.nonzero((upper == lower) & (lower != 0.0))[0]
    if not constant.size:
        return None, None
    k = int(constant[0])
    mean = np.array([noisy[position[(min(k, j), max(k, j))]] / (n_rows * lower[k]) for j in free])
    mean = np.clip(mean, lower[free], upper[free])
    second = np.array([noisy[position[(j, j)]] / n_rows for j in free])
    return mean, np.sqrt(np.maximum(second - mean * mean, 0.0))


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


#: Prior scale of the covariates' means and standard deviations, as a fraction of the half-width of
#: each feature's public interval: with μₓ ~ N(c, h/4) and sd ~ HalfNormal(h/4) a row falls outside
#: [c − h, c + h] with prior probability ≈ 0.5 % (the model does not describe clamping).
X_PRIOR_FRACTION = 0.25


def gaussian_covariates(
    family: Any, noisy: Any, n_rows: int, name: str, position: dict[tuple[int, int], int]
) -> tuple[Any, Any]:
    """Latent covariate moments (μₓ, Σₓ) with priors from the public ``x_bounds`` (adds them to the model).

    The features whose bounds have positive width are Gaussian; a feature with lower =
    upper (an intercept column) is that constant. Centre cⱼ, half-width hⱼ of each interval:
    μₓⱼ = cⱼ + (hⱼ/4)·uⱼ with uⱼ ~ N(0, 1) (non-centred, ``{name}_x_mean_std``, and the
    deterministic ``{name}_x_mean``), the standard deviations ~ HalfNormal(hⱼ/4), the
    correlation ~ LKJ(η = 2) (``{name}_x_chol``; ``{name}_x_sd`` for one free feature). The
    sampler starts from the release where it can (:func:`_covariate_start`, ``position`` the
    index of each Σ xⱼxₖ in it). Shared by linear and logistic regression.
    """
    import pymc as pm

    d = family.n_features
    lower, upper = (np.asarray(b, dtype=float) for b in family.x_bounds)
    free = np.nonzero(upper > lower)[0]
    centre, half = (lower + upper) / 2.0, X_PRIOR_FRACTION * (upper - lower) / 2.0
    x_mean = pt.as_tensor_variable(lower.copy())
    x_cov = pt.zeros((d, d))
    start_mean, start_sd = _covariate_start(family, noisy, n_rows, free, position)
    if free.size:
        start_u = None if start_mean is None else np.clip((start_mean - centre[free]) / half[free], -3.0, 3.0)
        u = pm.Normal(f"{name}_x_mean_std", 0.0, 1.0, shape=free.size, initval=start_u)
        x_mean = pt.set_subtensor(x_mean[free], pm.Deterministic(f"{name}_x_mean", centre[free] + half[free] * u))
        if free.size == 1:
            start = None if start_sd is None else np.clip(start_sd, 0.1 * half[free], 4.0 * half[free])
            sd = pm.HalfNormal(f"{name}_x_sd", sigma=half[free], shape=1, initval=start)
            block = pt.outer(sd, sd)
        else:
            chol, _, _ = pm.LKJCholeskyCov(
                f"{name}_x_chol",
                n=free.size,
                eta=2.0,
                sd_dist=pm.HalfNormal.dist(sigma=half[free], shape=free.size),
                compute_corr=True,
            )
            block = chol @ chol.T
        x_cov = pt.set_subtensor(x_cov[np.ix_(free, free)], block)
    return x_mean, x_cov


def linear_regression_loglik(
    family: Any,
    noisy: Any,
    n_rows: int,
    scale: float,
    name: str,
    beta: Any,
    sigma: Any,
    noise_variance: float | None = None,
) -> Any:
    """CLT likelihood of the released zzᵀ with Gaussian covariates (Bernstein and Sheldon 2019, §3).

    Adds the covariate moments to the model in context and returns log p(Ŝ | β, σ, μₓ, Σₓ).
    ``noisy`` is the unprojected release (an array, or a tensor such as a shared variable, so
    that one compiled model serves many releases in a simulation).

    Model of one row: x ~ N(μₓ, Σₓ) on the features whose bounds have positive width (a
    feature with lower = upper, e.g. an intercept column, is that constant), y | x ~
    N(xᵀβ, σ²). Priors on the covariate moments, from the public bounds [lⱼ, uⱼ] only
    (centre cⱼ, half-width hⱼ): μₓⱼ = cⱼ + (hⱼ/4)·uⱼ with uⱼ ~ N(0, 1) (non-centred,
    ``{name}_x_mean_std``), the standard deviations ~ HalfNormal(hⱼ/4), the correlation ~
    LKJ(η = 2) (``{name}_x_chol``; ``{name}_x_sd`` for one free feature). Statistics of
    constant entries (zero-width intervals) carry no information about θ and are left out.

    S and the Laplace noise are both marginalised: Ŝ ~ N(N·m, N·V + 2b²I)
    (:func:`linear_regression_release_logpdf`); for a Gaussian release, N·V + σ²I with
    ``noise_variance`` = σ², exact in the noise. An earlier version kept the noise as a
    Gaussian scale mixture with one latent variance per statistic; NUTS mixed badly on it
    (bulk ESS 5–12 in 300 draws), the funnel between those variances and θ being the cause.
    """

    d = family.n_features
    beta = pt.as_tensor_variable(beta)
    if beta.ndim != 1:
        raise ValueError(
            f"`beta` must be a vector of {d} coefficients for the noise-aware linear-regression likelihood. "
            f"Found a tensor with {beta.ndim} dimensions."
        )
    sigma = _scalar_param(family, "sigma", sigma)
    if family.y_bounds[0] == family.y_bounds[1]:
        raise ValueError(
            "`y_bounds` must have lower < upper for the noise-aware linear-regression likelihood (it models "
            f"y | x ~ N(xᵀβ, σ²), which a constant target contradicts). Found {family.y_bounds}; use "
            "noise_aware=False."
        )
    position = {(int(r), int(c)): i for i, (r, c) in enumerate(zip(*family._triu, strict=True))}
    x_mean, x_cov = gaussian_covariates(family, noisy, n_rows, name, position)
    lo, hi = family.intervals()
    keep = np.nonzero(hi > lo)[0]
    return linear_regression_release_logpdf(
        noisy, n_rows, scale, x_mean, x_cov, beta, sigma, keep, family._triu, noise_variance
    )


#: Gauss–Hermite nodes (probabilists') for the expectations over u = xᵀβ in the logistic moments.
LOGISTIC_QUADRATURE_NODES = 64


def _linear_predictor_quadrature(x_mean: Any, x_cov: Any, beta: Any) -> tuple[Any, Any, np.ndarray, Any]:
    """Gauss–Hermite quadrature over u = xᵀβ for x ~ N(μ, Σ): (c, g, weights, R) (PyTensor).

    x = μ + a·w + r with w = (u − m)/√v ~ N(0, 1), a = Σβ/√v, r ~ N(0, R), R = Σ − aaᵀ
    independent of w; c (K × d) = μ + a·wₖ at the K nodes, g = tanh(u/2) there.
    """
    nodes, weights = np.polynomial.hermite_e.hermegauss(LOGISTIC_QUADRATURE_NODES)
    weights = weights / weights.sum()
    sigma_beta = x_cov @ beta
    sd = pt.sqrt(beta @ sigma_beta + 1e-12)
    a = sigma_beta / sd
    c = x_mean[None, :] + nodes[:, None] * a[None, :]  # K × d
    g = pt.tanh(0.5 * (x_mean @ beta + sd * nodes))  # K
    return c, g, weights, x_cov - pt.outer(a, a)


def logistic_mean_function(x_mean: Any, x_cov: Any, beta: Any) -> tuple[Any, Any]:
    """(E[s·x], E[(1 − g²)·xxᵀ]) for one row under x ~ N(μ, Σ), g = tanh(xᵀβ/2) (PyTensor).

    The first is the mean of s·x (s = 2y − 1), the second the covariance of s·x given the
    covariates, averaged over them: Var(s | x) = 1 − g². Quadrature as in
    :func:`logistic_regression_moments`.
    """
    x_mean, x_cov, beta = (_tensor(v) for v in (x_mean, x_cov, beta))
    c, g, weights, residual = _linear_predictor_quadrature(x_mean, x_cov, beta)
    mean_sx = pt.dot(g * weights, c)
    g2w = g * g * weights
    e_g2_xx = pt.dot((g2w[:, None] * c).T, c) + pt.sum(g2w) * residual
    return mean_sx, x_cov + pt.outer(x_mean, x_mean) - e_g2_xx


def logistic_mean_function_numpy(
    x_mean: np.ndarray, x_cov: np.ndarray, beta: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The NumPy twin of :func:`logistic_mean_function`: (E[s·x], E[(1 − g²)·xxᵀ]) under x ~ N(μ, Σ)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(LOGISTIC_QUADRATURE_NODES)
    weights = weights / weights.sum()
    sigma_beta = x_cov @ beta
    sd = math.sqrt(float(beta @ sigma_beta) + 1e-12)
    a = sigma_beta / sd
    c = x_mean[None, :] + nodes[:, None] * a[None, :]
    g = np.tanh(0.5 * (x_mean @ beta + sd * nodes))
    g2w = g * g * weights
    e_g2_xx = (g2w[:, None] * c).T @ c + g2w.sum() * (x_cov - np.outer(a, a))
    return (g * weights) @ c, x_cov + np.outer(x_mean, x_mean) - e_g2_xx


def logistic_regression_moments(
    x_mean: Any, x_cov: Any, beta: Any, rows: np.ndarray, cols: np.ndarray
) -> tuple[Any, Any]:
    """Mean and covariance of one row's statistic t = (s·x, (xⱼxₖ) over (rows, cols)) (PyTensor).

    Model of one row: x ~ N(μ, Σ) (Σ may be singular: constant features), s = 2y − 1 with
    P(y = 1 | x) = σ(xᵀβ), so E[s | x] = g(u) = tanh(u/2) with u = xᵀβ ~ N(m, v), m = μᵀβ,
    v = βᵀΣβ. Writing x = μ + a·w + r with w = (u − m)/√v ~ N(0, 1), a = Σβ/√v and
    r ~ N(0, Σ − aaᵀ) independent of w, every moment is a one-dimensional expectation over w
    (Gauss–Hermite, :data:`LOGISTIC_QUADRATURE_NODES` nodes) of Gaussian moments of r:

    - E[s x] = E_w[g (μ + a w)];
    - E[(s xᵢ)(s xⱼ)] = E[xᵢxⱼ] = μᵢμⱼ + Σᵢⱼ (s² = 1);
    - E[(s xᵢ)(xⱼxₖ)] = E_w[g (cᵢcⱼcₖ + cᵢRⱼₖ + cⱼRᵢₖ + cₖRᵢⱼ)], c = μ + a w, R = Σ − aaᵀ;
    - the (xⱼxₖ) block by Isserlis' theorem (:func:`product_moments`).

    This is the moment computation of Kulkarni et al. (2021, §4) for the logistic model, with
    the expectations over the linear predictor done by quadrature rather than by sampling.
    """
    x_mean, x_cov, beta = (_tensor(v) for v in (x_mean, x_cov, beta))
    c, g, weights, residual = _linear_predictor_quadrature(x_mean, x_cov, beta)
    gw = g * weights
    mean_sx = pt.dot(gw, c)
    second = x_cov + pt.outer(x_mean, x_mean)
    j, k = np.asarray(rows), np.asarray(cols)
    third = (
        pt.dot((gw[:, None] * c).T, c[:, j] * c[:, k])
        + pt.outer(mean_sx, residual[j, k])
        + residual[:, k] * mean_sx[j][None, :]
        + residual[:, j] * mean_sx[k][None, :]
    )
    mean_xx, cov_xx = product_moments(x_mean, x_cov, j, k)
    cov_sx = second - pt.outer(mean_sx, mean_sx)
    cross = third - pt.outer(mean_sx, mean_xx)
    mean = pt.concatenate([mean_sx, mean_xx])
    cov = pt.concatenate([pt.concatenate([cov_sx, cross], axis=1), pt.concatenate([cross.T, cov_xx], axis=1)], axis=0)
    return mean, cov


def logistic_regression_loglik(
    family: Any,
    noisy: Any,
    n_rows: int,
    scale: float,
    name: str,
    beta: Any,
    noise_variance: float | None = None,
    anchor: tuple[np.ndarray, np.ndarray, float, np.ndarray, float] | None = None,
) -> Any:
    """CLT likelihood of the released (Σ s·x, Σ xxᵀ) with Gaussian covariates (Kulkarni et al. 2021, §4).

    Adds the covariate moments to the model in context (:func:`gaussian_covariates`) and
    returns log N(Ŝ_keep; N·m, N·V + 2b²I): m, V the moments of one row's statistic under the
    logistic model (:func:`logistic_regression_moments`), the coordinates ``keep`` those with
    an interval of positive width, and each coordinate's Laplace noise replaced by the normal
    of the same variance 2b² (as for linear regression: S and the noise marginalised in
    closed form, nothing latent but the covariate moments). The polynomial approximation of
    the naive likelihood is not used here: the CLT is of the statistic under the logistic
    model itself. For a Gaussian release ``noise_variance`` (σ²) replaces 2b²: exact in the
    noise.

    With ``anchor`` = (β̂, F̂, σₐ², Ĥ, σ_H²) — the release of F(β̂) = Σᵢ gᵢxᵢ and of
    H(β̂) = Σᵢ (1 − gᵢ²)xᵢxᵢᵀ (gᵢ = tanh(xᵢᵀβ̂/2)) with per-coordinate noise variances σₐ² and
    σ_H², Ĥ projected onto the positive semi-definite cone
    (:class:`~pymc_dp.exponential_family.families.LogisticCovariateAnchor`) — the Σ s·x block
    is modelled given the covariates instead, where its mean is exactly F(β) and its covariance
    exactly H(β). The mean function is expanded around β̂ with the released value and slope,
    F(β) ≈ F̂ + ½Ĥ(β − β̂) + N·[m(β) − m(β̂) − ½C(β̂)(β − β̂)] (m and C = E[(1 − g²)xxᵀ]
    under the Gaussian covariate model, :func:`logistic_mean_function`: it supplies only the
    second-order change), and the covariance is Ĥ plus the noise: σ² + σₐ² + ¼σ_H²‖β − β̂‖²
    per coordinate. So the covariate model no longer sets the level or the slope of the mean
    function: at the MLE the score vanishes (F(β̂) = Σ s·x), so with an anchor there the
    posterior centres on the MLE with the curvature of the exact likelihood, whatever the
    covariates. The Σ xxᵀ block keeps its CLT likelihood given the covariate moments; given
    the covariates the two blocks are independent.
    """
    d = family.n_features
    beta = pt.as_tensor_variable(beta)
    if beta.ndim != 1:
        raise ValueError(
            f"`beta` must be a vector of {d} coefficients for the noise-aware logistic-regression likelihood. "
            f"Found a tensor with {beta.ndim} dimensions."
        )
    x_mean, x_cov = gaussian_covariates(family, noisy, n_rows, name, family.product_positions())
    lo, hi = family.intervals()
    keep = np.nonzero(hi > lo)[0]
    rows, cols = family._triu
    # Only a diverging trajectory leaves the box below (covariate moments 10⁴ bound-widths out, in
    # prior terms 4·10⁴ prior sds): it gets −inf there, before the moments' powers grow so large that
    # the sampler's momentum overflows (the statistic's covariance is a quartic in the covariates).
    lower, upper = (np.asarray(b, dtype=float) for b in family.x_bounds)
    reach = 1e4 * float(np.max(upper - lower)) + float(np.max(np.abs([lower, upper])))
    ok = pt.all(pt.le(pt.abs(beta), _PARAMETER_LIMIT))
    ok = ok & pt.all(pt.le(pt.abs(x_mean), reach)) & pt.all(pt.le(pt.abs(x_cov), reach * reach))
    beta, x_mean = pt.switch(ok, beta, 0.0), pt.switch(ok, x_mean, 0.0)
    x_cov = pt.switch(ok, x_cov, pt.eye(d))
    noise = _release_noise_variance(scale, noise_variance)
    if anchor is None:
        mean, cov = logistic_regression_moments(x_mean, x_cov, beta, rows, cols)
        total = n_rows * cov[keep][:, keep] + noise * np.eye(keep.size)
        return pt.switch(ok, gaussian_logpdf(_tensor(noisy)[keep], n_rows * mean[keep], total), -np.inf)
    anchor_beta, anchor_value, anchor_noise, hessian, hessian_noise = anchor
    anchor_beta = np.asarray(anchor_beta, dtype=float)
    hessian = np.asarray(hessian, dtype=float)
    keep_sx, keep_xx = keep[keep < d], keep[keep >= d]
    step = beta - anchor_beta
    mean_sx, _ = logistic_mean_function(x_mean, x_cov, beta)
    mean_at_anchor, slope_at_anchor = logistic_mean_function(x_mean, x_cov, anchor_beta)
    second_order = n_rows * (mean_sx - mean_at_anchor - 0.5 * pt.dot(slope_at_anchor, step))
    shifted = _tensor(np.asarray(anchor_value, dtype=float)) + 0.5 * pt.dot(_tensor(hessian), step) + second_order
    spread = noise + float(anchor_noise) + 0.25 * float(hessian_noise) * pt.sum(step * step)
    sx_cov = _tensor(hessian[np.ix_(keep_sx, keep_sx)]) + spread * pt.eye(keep_sx.size)
    logp = gaussian_logpdf(_tensor(noisy)[keep_sx], shifted[keep_sx], sx_cov)
    if keep_xx.size:
        mean_xx, cov_xx = product_moments(x_mean, x_cov, rows, cols)
        xx = keep_xx - d
        xx_cov = n_rows * cov_xx[xx][:, xx] + noise * np.eye(xx.size)
        logp = logp + gaussian_logpdf(_tensor(noisy)[keep_xx], n_rows * mean_xx[xx], xx_cov)
    return pt.switch(ok, logp, -np.inf)


#: Ridge on β in :func:`logistic_anchor_point`'s least squares (per-row-mean scale): keeps the
#: solution finite when the noise puts the released Σ s·x outside what any β can reach.
ANCHOR_RIDGE = 1e-4


def logistic_anchor_point(
    family: Any,
    noisy: np.ndarray,
    n_rows: int,
    anchor: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """A point estimate of β from a logistic-regression release (post-processing, NumPy).

    Solves mean(β) = Ŝₛₓ/N in least squares (with a small ridge, :data:`ANCHOR_RIDGE`). Without
    an ``anchor``, mean = m, the mean of s·x under Gaussian covariates whose moments are read
    from the projected Σ xxᵀ (the mean from the row of a constant feature such as the intercept
    column, else 0). With an earlier ``anchor`` = (β̂, F̂, Ĥ), mean is the anchored mean
    function of :func:`logistic_regression_loglik` over N: F̂/N + ½(Ĥ/N)(β − β̂) +
    m(β) − m(β̂) − ½C(β̂)(β − β̂) — a Newton step on the exact score from β̂, with the
    Gaussian model's second-order term. This is where :func:`pymc_dp.release_statistics`
    places its covariate anchors.
    """
    from scipy.optimize import least_squares

    from pymc_dp.exponential_family.families import psd_projection

    d = family.n_features
    noisy = np.asarray(noisy, dtype=float)
    second = family.matrix(family.project(noisy, n_rows)) / n_rows
    lower, upper = (np.asarray(b, dtype=float) for b in family.x_bounds)
    constant = np.nonzero((upper == lower) & (lower != 0.0))[0]
    mean = second[constant[0]] / lower[constant[0]] if constant.size else np.zeros(d)
    mean = np.clip(mean, lower, upper)
    fixed = upper == lower
    mean[fixed] = lower[fixed]
    cov = second - np.outer(mean, mean)
    cov[fixed, :] = 0.0
    cov[:, fixed] = 0.0
    cov = psd_projection((cov + cov.T) / 2.0)
    target = noisy[:d] / n_rows
    start = np.zeros(d)
    shift, slope = np.zeros(d), np.zeros((d, d))
    if anchor is not None:
        start = np.asarray(anchor[0], dtype=float)
        level, model_slope = logistic_mean_function_numpy(mean, cov, start)
        shift = np.asarray(anchor[1], dtype=float) / n_rows - level
        slope = 0.5 * (np.asarray(anchor[2], dtype=float) / n_rows - model_slope)

    def residual(beta: np.ndarray) -> np.ndarray:
        fit = logistic_mean_function_numpy(mean, cov, beta)[0] + shift + slope @ (beta - start) - target
        return np.concatenate([fit, ANCHOR_RIDGE * beta])

    return least_squares(residual, start, method="lm", xtol=1e-12, ftol=1e-12, gtol=1e-12).x
