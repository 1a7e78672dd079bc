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

from typing import Any

import numpy as np
import pytensor.tensor as pt

# The densities (densities.py) and the regressions' likelihoods (regression_likelihoods.py) are re-exported:
# other modules, the tests and the examples import them from here.
from pymc_dp.exponential_family.densities import _HALF_LOG_2PI as _HALF_LOG_2PI
from pymc_dp.exponential_family.densities import _MIN_VARIANCE as _MIN_VARIANCE
from pymc_dp.exponential_family.densities import _PARAMETER_LIMIT as _PARAMETER_LIMIT
from pymc_dp.exponential_family.densities import ReleaseReading, _parameter_tensor
from pymc_dp.exponential_family.densities import _binomial_window as _binomial_window
from pymc_dp.exponential_family.densities import _release_noise_variance as _release_noise_variance
from pymc_dp.exponential_family.densities import _scalar_param as _scalar_param
from pymc_dp.exponential_family.densities import _tensor as _tensor
from pymc_dp.exponential_family.densities import binomial_laplace_logpdf as binomial_laplace_logpdf
from pymc_dp.exponential_family.densities import clamped_normal_moments as clamped_normal_moments
from pymc_dp.exponential_family.densities import clamped_poisson_moments as clamped_poisson_moments
from pymc_dp.exponential_family.densities import gaussian_logpdf as gaussian_logpdf
from pymc_dp.exponential_family.densities import log_mills_ratio as log_mills_ratio
from pymc_dp.exponential_family.densities import normal_laplace_logpdf as normal_laplace_logpdf
from pymc_dp.exponential_family.densities import product_moments as product_moments
from pymc_dp.exponential_family.regression_likelihoods import ANCHOR_RIDGE as ANCHOR_RIDGE
from pymc_dp.exponential_family.regression_likelihoods import LOGISTIC_QUADRATURE_NODES as LOGISTIC_QUADRATURE_NODES
from pymc_dp.exponential_family.regression_likelihoods import X_PRIOR_FRACTION as X_PRIOR_FRACTION
from pymc_dp.exponential_family.regression_likelihoods import _covariate_start as _covariate_start
from pymc_dp.exponential_family.regression_likelihoods import gaussian_covariates as gaussian_covariates
from pymc_dp.exponential_family.regression_likelihoods import linear_regression_loglik as linear_regression_loglik
from pymc_dp.exponential_family.regression_likelihoods import linear_regression_moments as linear_regression_moments
from pymc_dp.exponential_family.regression_likelihoods import (
    linear_regression_release_logpdf as linear_regression_release_logpdf,
)
from pymc_dp.exponential_family.regression_likelihoods import logistic_anchor_point as logistic_anchor_point
from pymc_dp.exponential_family.regression_likelihoods import logistic_mean_function as logistic_mean_function
from pymc_dp.exponential_family.regression_likelihoods import (
    logistic_mean_function_numpy as logistic_mean_function_numpy,
)
from pymc_dp.exponential_family.regression_likelihoods import logistic_regression_loglik as logistic_regression_loglik
from pymc_dp.exponential_family.regression_likelihoods import logistic_regression_moments as logistic_regression_moments

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


def _mvnormal_logpdf(value: np.ndarray, mean: Any, cov: Any) -> Any:
    import pymc as pm

    return pm.logp(pm.MvNormal.dist(mu=mean, cov=cov), pt.as_tensor_variable(value))


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


def release_loglik(family: Any, reading: ReleaseReading, name: str, **params: Any) -> Any:
    """log p(Ŝ | θ) of the unprojected release ``reading.noisy`` under ``family`` (see the module docstring).

    ``reading`` (:class:`~pymc_dp.exponential_family.densities.ReleaseReading`) holds the release's
    public reading: ``scale`` is the Laplace scale b of the release. For a Gaussian release (linear
    and logistic regression only: ``release_statistics(..., mechanism="gaussian")``) its
    per-coordinate ``noise_variance`` σ² is given instead: the regressions' likelihood is then exact
    in the noise, where for a Laplace release it uses the normal of the same variance 2b².

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
    noisy, n_rows, scale, noise_variance, anchor = reading
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
    k = family.n_categories
    p = _parameter_tensor("p", p, 1, f"a vector of {k} class probabilities for the noise-aware categorical likelihood")
    tau = _noise_variances(name, k, scale)
    cov = n_rows * (pt.diag(p) - pt.outer(p, p)) + pt.diag(tau)
    return _mvnormal_logpdf(noisy, n_rows * p, _jittered(cov, k))
