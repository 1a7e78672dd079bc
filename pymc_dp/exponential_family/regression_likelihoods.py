"""Noise-aware likelihoods of the regression releases: linear and logistic regression, Poisson moments (PyTensor).

Split out of :mod:`pymc_dp.exponential_family.noise_aware` (which re-exports every name and
dispatches to them). The CLT of the released statistic under the model with Gaussian covariates
whose moments are latent (Bernstein and Sheldon 2019, §3; Kulkarni et al. 2021, §4), the release
noise replaced by the normal of its variance (exact for a Gaussian release); for logistic
regression with covariate anchors, Σ s·x given the covariates with its mean expanded around the
released F(β̂) and slope H(β̂); and where the anchors are placed (:func:`logistic_anchor_point`).
The moments of one row's Poisson-regression statistic under Gaussian covariates
(:func:`poisson_regression_moments`) serve the grouped Poisson release's CLT likelihood.

Neighbouring relation: substitute (the release's); post-processing of a release, no ε.

References
----------
.. [1] Bernstein, G. and Sheldon, D. (2019). Differentially private Bayesian linear
   regression. NeurIPS, §3.
.. [2] Kulkarni, T., Jälkö, J., Koskela, A., Kaski, S. and Honkela, A. (2021). Differentially
   private Bayesian inference for generalized linear models. ICML, §4.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytensor.tensor as pt
from scipy.special import gammaln as special_gammaln

from pymc_dp.exponential_family.densities import (
    _PARAMETER_LIMIT,
    _parameter_tensor,
    _release_noise_variance,
    _scalar_param,
    _tensor,
    gaussian_logpdf,
    product_moments,
)

__all__ = [
    "X_PRIOR_FRACTION",
    "gaussian_covariates",
    "linear_regression_loglik",
    "linear_regression_moments",
    "linear_regression_release_logpdf",
    "logistic_anchor_point",
    "logistic_anchored_gaussian",
    "logistic_mean_function",
    "logistic_mean_function_numpy",
    "logistic_regression_loglik",
    "logistic_regression_moments",
    "poisson_regression_moments",
]


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
    beta = _parameter_tensor(
        "beta", beta, 1, f"a vector of {d} coefficients for the noise-aware linear-regression likelihood"
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
    c, u, weights, residual = _predictor_nodes(x_mean, x_cov, beta)
    return c, pt.tanh(0.5 * u), weights, residual


def _predictor_nodes(x_mean: Any, x_cov: Any, beta: Any) -> tuple[Any, Any, np.ndarray, Any]:
    """(c, u, weights, R): :func:`_linear_predictor_quadrature` with the linear predictor u at the nodes."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(LOGISTIC_QUADRATURE_NODES)
    weights = weights / weights.sum()
    sigma_beta = x_cov @ beta
    sd = pt.sqrt(beta @ sigma_beta + 1e-12)
    a = sigma_beta / sd
    c = x_mean[None, :] + nodes[:, None] * a[None, :]  # K × d
    return c, x_mean @ beta + sd * nodes, weights, x_cov - pt.outer(a, a)


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
    what = f"a vector of {d} coefficients for the noise-aware logistic-regression likelihood"
    beta = _parameter_tensor("beta", beta, 1, what)
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


def logistic_anchored_gaussian(
    family: Any,
    noisy: np.ndarray,
    n_rows: int,
    noise_variance: float,
    anchor: tuple[np.ndarray, np.ndarray, float, np.ndarray, float],
) -> tuple[np.ndarray, np.ndarray]:
    """The Gaussian that the anchored noise-aware logistic likelihood is close to: (centre, covariance) (NumPy).

    ``anchor`` = (β̂, F̂, σₐ², Ĥ, σ_H²) as for :func:`logistic_regression_loglik`
    (``CovariateAnchor.likelihood_anchor()``), ``noise_variance`` the main release's per-coordinate
    noise variance (2b², or σ² of a Gaussian release), ``noisy`` its unprojected statistics. The
    centre β̃ solves the likelihood's anchored estimating equation, mean(β) = Ŝₛₓ
    (:func:`logistic_anchor_point` with the anchor); the covariance is that of the root of the
    linearised equation, J⁻¹(Ĥ + s·I)J⁻ᵀ with J = ½Ĥ the mean function's released slope and
    s = σ² + σₐ² + ¼σ_H²‖β̃ − β̂‖² the likelihood's noise per coordinate. So it carries the same
    release noise as the likelihood, and no prior. Where Ĥ is singular the covariance is
    infinite in its null directions (a pseudo-inverse would hide that): ``numpy.linalg.LinAlgError``.

    What it is for: a check of the likelihood's calibration that needs no sampler (many releases
    in seconds; ``tests/test_logistic_route_honesty.py``, ``benchmarks/logistic_calibration.py``).
    Measured on ``randhie`` logistic at ε = 1 (the one call's releases, NUTS 2 × 500 draws each,
    ``benchmarks/logistic_one_call.py --save``): NUTS's means within 0.2 of these sds of the
    centre and its sds 1.00–1.08× these.

    Notes
    -----
    Post-processing of the release (substitute neighbours, N public): no ε, nothing read from
    the rows.
    """
    beta_hat, value, anchor_noise, hessian, hessian_noise = anchor
    beta_hat = np.asarray(beta_hat, dtype=float)
    hessian = np.asarray(hessian, dtype=float)
    centre = logistic_anchor_point(family, noisy, n_rows, (beta_hat, np.asarray(value, dtype=float), hessian))
    step = centre - beta_hat
    spread = float(noise_variance) + float(anchor_noise) + 0.25 * float(hessian_noise) * float(step @ step)
    slope = 0.5 * hessian
    inner = np.linalg.solve(slope, hessian + spread * np.eye(hessian.shape[0]))
    covariance = np.linalg.solve(slope, inner.T)
    return centre, 0.5 * (covariance + covariance.T)


def clamped_poisson_moments(log_rate: Any, y_max: int) -> tuple[Any, Any]:
    """(E[min(Y, M)], E[min(Y, M)²]) for Y ~ Poisson(λ), log λ = ``log_rate``, M = ``y_max`` (PyTensor, elementwise).

    E[min(Y, M)] = M − Σ_{k<M} (M − k)·P(Y = k) and E[min(Y, M)²] = M² − Σ_{k<M} (M² − k²)·P(Y = k),
    with log P(Y = k) = k·log λ − λ − log k!: M terms per value, differentiable, no incomplete gamma
    function (measured with gradients: PyTensor's about 0.2 ms a value, this sum under 1 μs at
    M = 60). The twin of :func:`~pymc_dp.exponential_family.counts.clamped_poisson_mean` (NumPy).
    """
    m = int(y_max)
    k = np.arange(m, dtype=float)
    log_rate = _tensor(log_rate)
    log_pmf = log_rate[..., None] * k - pt.exp(log_rate)[..., None] - special_gammaln(k + 1.0)
    pmf = pt.exp(log_pmf)
    first = m - pt.sum((m - k) * pmf, axis=-1)
    second = m * m - pt.sum((m * m - k * k) * pmf, axis=-1)
    return first, second


def poisson_regression_moments(
    x_mean: Any, x_cov: Any, beta: Any, rows: np.ndarray, cols: np.ndarray, y_max: int
) -> tuple[Any, Any]:
    """Mean and covariance of one row's statistic t = (y·x, x, (xⱼxₖ) over (rows, cols)) (PyTensor).

    The statistic of :class:`~pymc_dp.exponential_family.counts.PoissonRegression`. Model of one
    row: x ~ N(μ, Σ) (Σ may be singular: constant features), y = min(Y, M) with
    Y | x ~ Poisson(λ), λ = exp(xᵀβ), M = ``y_max``. With the decomposition of
    :func:`logistic_regression_moments` (x = μ + a·w + r, c = μ + a w, R = Σ − aaᵀ, Gauss–Hermite
    over w) and m₁(λ), m₂(λ) the clipped count's first two moments (:func:`clamped_poisson_moments`):

    - E[y x] = E_w[m₁ c]; E[y² xᵢxⱼ] = E_w[m₂ (cᵢcⱼ + Rᵢⱼ)]; E[y xᵢxⱼ] = E_w[m₁ (cᵢcⱼ + Rᵢⱼ)];
    - E[y xᵢ xⱼxₖ] = E_w[m₁ (cᵢcⱼcₖ + cᵢRⱼₖ + cⱼRᵢₖ + cₖRᵢⱼ)];
    - Cov(xᵢ, xⱼxₖ) = μⱼΣᵢₖ + μₖΣᵢⱼ, and the (xⱼxₖ) block by Isserlis' theorem (:func:`product_moments`).

    λ is capped at 4M + 50 (where P(Y ≤ M) is negligible and the clipped moments are M and M²) so
    that far-out parameters do not overflow. The moment computation of Kulkarni et al. (2021, §4)
    for the Poisson model, with quadrature instead of sampling.
    """
    x_mean, x_cov, beta = (_tensor(v) for v in (x_mean, x_cov, beta))
    c, u, weights, residual = _predictor_nodes(x_mean, x_cov, beta)
    first, second = clamped_poisson_moments(pt.minimum(u, math.log(4.0 * int(y_max) + 50.0)), y_max)
    w1, w2 = first * weights, second * weights
    mean_yx = pt.dot(w1, c)
    j, k = np.asarray(rows), np.asarray(cols)
    cov_yx = pt.dot((w2[:, None] * c).T, c) + pt.sum(w2) * residual - pt.outer(mean_yx, mean_yx)
    cov_yx_x = pt.dot((w1[:, None] * c).T, c) + pt.sum(w1) * residual - pt.outer(mean_yx, x_mean)
    mean_xx, cov_xx = product_moments(x_mean, x_cov, j, k)
    cross = (
        pt.dot((w1[:, None] * c).T, c[:, j] * c[:, k])
        + pt.outer(mean_yx, residual[j, k])
        + residual[:, k] * mean_yx[j][None, :]
        + residual[:, j] * mean_yx[k][None, :]
        - pt.outer(mean_yx, mean_xx)
    )
    cov_x_xx = x_cov[:, k] * x_mean[j][None, :] + x_cov[:, j] * x_mean[k][None, :]
    mean = pt.concatenate([mean_yx, x_mean, mean_xx])
    cov = pt.concatenate(
        [
            pt.concatenate([cov_yx, cov_yx_x, cross], axis=1),
            pt.concatenate([cov_yx_x.T, x_cov, cov_x_xx], axis=1),
            pt.concatenate([cross.T, cov_x_xx.T, cov_xx], axis=1),
        ],
        axis=0,
    )
    return mean, cov
