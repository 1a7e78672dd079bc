"""The noise-aware likelihood of a grouped release: every group's true statistics and size kept latent.

The release of :func:`pymc_dp.release_statistics` with ``n_groups=G`` is one vector of G cells
(:class:`~pymc_dp.exponential_family.grouped.GroupedRegression`); cell g is Ŝ_g = S_g + η_g with
S_g the sum of the regression's statistic over the n_g rows of group g and η_g the release
noise. Its likelihood given the parameters marginalises the true S_g and keeps the true n_g
latent:

* the count coordinate of cell g is n_g + its noise, so log p(n̂_g | n_g) is the noise's own
  density (Laplace or Gaussian, exact);
* the other coordinates, given n_g, are the central-limit normal of the group's sum,
  S_g ~ N(n_g·m_g(θ), n_g·V_g(θ)), with m_g, V_g the mean and covariance of one row's cell
  statistic under the model with the group's coefficients (α_g, β_g), plus the release noise —
  the Laplace noise replaced by the normal of its variance 2b², exactly as the ungrouped
  regressions do (Bernstein and Sheldon 2019, §3; Kulkarni et al. 2021, §4). One row's moments
  are those of :func:`~pymc_dp.exponential_family.noise_aware.linear_regression_moments`,
  :func:`~pymc_dp.exponential_family.noise_aware.logistic_regression_moments` and
  :func:`~pymc_dp.exponential_family.regression_likelihoods.poisson_regression_moments` (the
  clipped count's Poisson moments, log link) on z = (1, x, y) (x̃ = (1, x)), vectorised over the
  groups. A Poisson cell holds n_g twice (Σ 1·1 and Σ x̃₀), two independent noisy readings of
  the same latent size (both read by the count's density), and Σ x̃ⱼ next to the identical
  Σ x̃₀x̃ⱼ: each such pair is read as its average, whose noise variance is half (for Gaussian
  noise the average is sufficient for the pair; two copies would make the CLT covariance
  singular as the noise vanishes);
* linear regression whose covariates' released group means shift the groups' mean responses by
  more than two intercept sds beyond chance (:func:`_per_group_means`): group g's covariates are
  Gaussian with its own latent mean μ_g, partially pooled around a population mean, and one
  within-group covariance shared by all groups
  (:func:`~pymc_dp.exponential_family.grouped_moments.grouped_gaussian_covariates`, priors from
  the public bounds; design, and the case it cannot tell apart, in
  :mod:`~pymc_dp.exponential_family.grouped_moments`). The cells' Σ x̃_g and Σ x̃_gx̃_gᵀ inform
  μ_g (post-processing of the same release: no new release, no ε, the sensitivity unchanged)
  instead of pushing the intercepts, as they did while all groups shared one mean (``diamonds``:
  15–80 NUTS sds off); a group whose covariates' within-group spread differs is still
  misspecified;
* otherwise, and for logistic and Poisson regressions, one latent mean and covariance shared by
  all groups (:func:`~pymc_dp.exponential_family.regression_likelihoods.gaussian_covariates`):
  covariates that hardly shift (``fair``) cost less shared than per group, and per-group means
  for logistic or Poisson would need the between-group check that linear regression has
  (:mod:`~pymc_dp.exponential_family.group_covariates`); a covariate shift between groups
  misleads them as it did the linear one.

The group sizes n_g are latent with a flat prior on n_g > 0, sampled on the release noise's own
scale (:func:`latent_group_sizes`, ``{name}_group_size_shift``: n_g ≈ n̄_g + s·v_g, s the noise's
unit), so that their width does not vanish with the noise: the count's noise alone determines
them for a large group; for a small one the sizes, the statistics and the group effects are
uncertain together, and a group whose cell is mostly noise gives a group effect near its prior —
a wide interval, not a confident wrong one. With Gaussian noise, a group whose released size is at
least :data:`MARGINAL_SIZE_UNITS` noise units above 0 has its size integrated out in closed form
instead (:func:`group_sizes`, :func:`marginal_group_sizes`, :func:`integrated_size_covariance`: its
sums' covariance gains (σ²/k)·m_g m_gᵀ, the CLT part read at the size's conditional mean n_*), one
latent variable fewer per large group and no size–effect correlation for NUTS (issue 34: 0
divergences in 11 runs against 11 in 10 with every size latent); Laplace copies stay latent. The
central-limit normal is an approximation for
groups of a handful of rows; there the noise, whose variance is the same for every cell,
dominates it.

Neighbouring relation: substitute (the release's; N public). This likelihood is
post-processing of the release and costs no ε.

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
from pytensor.graph.replace import vectorize_graph

from pymc_dp.exponential_family.densities import (
    _HALF_LOG_2PI,
    _PARAMETER_LIMIT,
    ReleaseReading,
    _release_noise_variance,
    _tensor,
)
from pymc_dp.exponential_family.grouped_moments import GROUP_SHIFT_LIMIT, group_mean_shift, grouped_gaussian_covariates
from pymc_dp.exponential_family.regression_likelihoods import (
    gaussian_covariates,
    logistic_regression_moments,
    poisson_regression_moments,
)

__all__ = [
    "MARGINAL_SIZE_UNITS",
    "batched_gaussian_logpdf",
    "group_sizes",
    "grouped_cell_moments",
    "grouped_release_loglik",
    "integrated_size_covariance",
    "latent_group_sizes",
    "marginal_group_sizes",
]

#: A group whose released size (the mean of its copies) is at least this many noise units s above 0 has its size
#: integrated out (:func:`marginal_group_sizes`) instead of sampled (:func:`latent_group_sizes`). The one
#: approximation, the covariance's n_g held at one value over the integral (n̄_g, then n_* in
#: :func:`integrated_size_covariance`), is of order s/n̄_g ≤ 10 % of the CLT part (less against the release
#: noise), and the cut at n_g > 0 lies 10 units away. Public: s is the release noise's, n̄_g a released value.
#: (Benchmarks set it to ∞ to compare with every size latent.)
MARGINAL_SIZE_UNITS = 10.0


def _diagonal(matrices: Any, unit: np.ndarray | None) -> Any:
    """The diagonals of a batch of square matrices (PyTensor): Σ_k M[..., j, k]·I[j, k] when the size is static."""
    if unit is None:
        return pt.diagonal(matrices, axis1=-2, axis2=-1)
    return pt.sum(matrices * unit, axis=-1)


def batched_gaussian_logpdf(value: Any, mean: Any, cov: Any) -> Any:
    """Σ_g log N(value_g; mean_g, cov_g) over the leading axis (PyTensor), by Cholesky factors.

    ``value`` and ``mean`` are G × K, ``cov`` is G × K × K. Each covariance is scaled to unit
    diagonal first (so its determinant lies in (0, 1]), with a 10⁻¹⁰ ridge; a covariance
    whose factor fails (not positive definite, inf or NaN anywhere) gives −inf.
    """
    value, mean, cov = _tensor(value), _tensor(mean), _tensor(cov)
    size = value.shape[-1]
    # Diagonals as sums against a constant identity: the gradient of pt.diagonal on a batch is a Python-looped
    # Blockwise AllocDiag (measured: 42 % of the log density's gradient time at G = 20).
    unit = np.eye(int(np.asarray(cov.type.shape[-1]))) if cov.type.shape[-1] is not None else None
    sd = pt.sqrt(pt.maximum(_diagonal(cov, unit), 1e-300))
    scaled = cov / (sd[..., :, None] * sd[..., None, :])
    r = (value - mean) / sd
    ok = ~(pt.any(pt.isinf(scaled) | pt.isnan(scaled)) | pt.any(pt.isinf(r) | pt.isnan(r)))
    eye = pt.eye(size)
    scaled = pt.switch(ok, scaled, eye) + 1e-10 * eye
    r, sd = pt.switch(ok, r, 0.0), pt.switch(ok, sd, 1.0)
    chol = pt.linalg.cholesky(scaled, lower=True)
    bad = pt.any(pt.isnan(chol))
    chol = pt.switch(bad, eye, chol)
    w = pt.linalg.solve_triangular(chol, r[..., None], lower=True)[..., 0]
    logdet = 2.0 * pt.sum(pt.log(_diagonal(chol, unit)))
    logp = -0.5 * pt.sum(w * w) - 0.5 * logdet - pt.sum(pt.log(sd)) - _HALF_LOG_2PI * value.shape[0] * size
    return pt.switch(ok & ~bad, logp, -np.inf)


def batched_product_moments(mu: Any, cov: Any, rows: np.ndarray, cols: np.ndarray) -> tuple[Any, Any]:
    """Means (G × K) and covariances (G × K × K) of t = (zⱼzₖ) over (rows, cols), z_g ~ N(mu_g, cov_g) (PyTensor).

    :func:`~pymc_dp.exponential_family.noise_aware.product_moments` (Isserlis' theorem with a mean)
    for a batch of G Gaussians at once, by broadcasting: ``mu`` is G × D, ``cov`` G × D × D.
    """
    i, j = np.asarray(rows), np.asarray(cols)
    ik, jk, il, jl = i[:, None], j[:, None], i[None, :], j[None, :]
    mean = cov[:, i, j] + mu[:, i] * mu[:, j]
    second = (
        cov[:, ik, il] * cov[:, jk, jl]
        + cov[:, ik, jl] * cov[:, jk, il]
        + mu[:, i][:, :, None] * mu[:, i][:, None, :] * cov[:, jk, jl]
        + mu[:, i][:, :, None] * mu[:, j][:, None, :] * cov[:, jk, il]
        + mu[:, j][:, :, None] * mu[:, i][:, None, :] * cov[:, ik, jl]
        + mu[:, j][:, :, None] * mu[:, j][:, None, :] * cov[:, ik, il]
    )
    return mean, second


def grouped_cell_moments(
    family: Any, x_mean: Any, x_cov: Any, coefficients: Any, sigma: Any, keep: np.ndarray
) -> tuple[Any, Any]:
    """(m, V): G × K means and G × K × K covariances of one row's cell statistic, coordinates ``keep`` (PyTensor).

    Row g uses the coefficients ``coefficients[g]`` = (α_g, β_g) on x̃ = (1, x); x̃ ~ N(``x_mean[g]``,
    ``x_cov``) (its first entry the constant 1; ``x_mean`` G × (p + 1), or one mean for all
    groups). Linear regression: z = (x̃, y) with y | x ~ N(x̃ᵀb, σ²) is
    Gaussian with mean (μ, μᵀb) and covariance [[Σ, Σb], [bᵀΣ, bᵀΣb + σ²]], and the moments of zzᵀ follow
    from Isserlis' theorem for all groups at once (:func:`batched_product_moments`; the same numbers as
    :func:`~pymc_dp.exponential_family.noise_aware.linear_regression_moments`). Logistic regression: the
    moments of (s·x̃, x̃x̃ᵀ) of :func:`~pymc_dp.exponential_family.noise_aware.logistic_regression_moments`,
    vectorised over the groups (:func:`pytensor.graph.replace.vectorize_graph`); Poisson regression
    likewise with :func:`~pymc_dp.exponential_family.regression_likelihoods.poisson_regression_moments`
    ((y·x̃, x̃, x̃x̃ᵀ), y clipped to 0..``y_max``).
    """
    coefficients = pt.as_tensor_variable(coefficients)
    g = coefficients.shape[0]
    x_mean = pt.as_tensor_variable(x_mean)
    if family.base == "linear_regression":
        if x_mean.ndim == 1:  # one mean shared by every group
            x_mean = pt.ones((g, 1)) * x_mean[None, :]
        rows, cols = np.triu_indices(family.n_features + 2)
        mu_y = pt.sum(coefficients * x_mean, axis=1)  # G
        xb = pt.dot(coefficients, x_cov)  # G × (p + 1): (Σb)ᵀ per group
        yy = pt.sum(xb * coefficients, axis=1) + sigma * sigma
        mu = pt.concatenate([x_mean, mu_y[:, None]], axis=1)
        top = pt.concatenate([pt.broadcast_to(x_cov[None, :, :], (g, *x_cov.shape)), xb[:, :, None]], axis=2)
        bottom = pt.concatenate([xb, yy[:, None]], axis=1)[:, None, :]
        cov = pt.concatenate([top, bottom], axis=1)
        return batched_product_moments(mu, cov, rows[keep], cols[keep])
    one = pt.vector(f"{family.name}_coefficients", dtype="float64")
    shared = x_mean.ndim == 1  # one mean for all groups: vectorised over the coefficients only
    one_mean = x_mean if shared else pt.vector(f"{family.name}_x_mean", dtype="float64")
    rows, cols = np.triu_indices(family.n_features + 1)
    if family.base == "poisson_regression":
        mean, cov = poisson_regression_moments(one_mean, x_cov, one, rows, cols, family.y_max)
    else:
        mean, cov = logistic_regression_moments(one_mean, x_cov, one, rows, cols)
    mean, cov = mean[keep], cov[keep][:, keep]
    replace = {one: coefficients} if shared else {one: coefficients, one_mean: pt.cast(x_mean, "float64")}
    return tuple(vectorize_graph([mean, cov], replace))


def latent_group_sizes(released: np.ndarray, scale: float, noise_variance: float | None, name: str) -> tuple[Any, Any]:
    """(n, log p): the G latent group sizes, parameterised on the release noise's own scale, and their density.

    ``released`` (G × k) holds the k noisy copies n̂_gk = n_g + η_gk of each group's size. With
    s the noise's unit — the Laplace scale b, or for Gaussian noise of variance σ² the sd σ/√k of
    the copies' mean n̄_g (sufficient for n_g) — the sampler's free variable is v_g
    (``{name}_group_size_shift``, flat) and

        n_g = s·softplus(n̄_g/s + v_g) = n̄_g + s·v_g + s·softplus(−(n̄_g/s + v_g)),

    so n_g > 0 for every v_g and n_g = n̄_g + s·v_g wherever n̄_g is many units above 0: v_g is
    the noise in its own units, of width O(1) at every ε. (Sampled as n_g itself, or as log n_g,
    the size's width shrinks with the noise — to 10⁻⁹ of a group at ε = 10⁹ — and NUTS's step
    cannot follow: every transition diverged.) The returned log density is that of the copies
    given n_g (Laplace or Gaussian, exact) plus the Jacobian log s + log σ(n̄_g/s + v_g) of the
    flat prior on n_g > 0, every gap n̂_gk − n_g computed in units of s from public differences
    so that nothing is lost to rounding at huge n̄_g/s. Post-processing of released values (no ε).
    """
    import pymc as pm

    released = np.asarray(released, dtype=float)
    copies = released.shape[1]
    laplace, unit, variance = _size_unit(scale, noise_variance, copies)
    mean = released.mean(axis=1)
    shift = pm.Flat(f"{name}_group_size_shift", shape=released.shape[0])
    argument = mean / unit + shift
    correction = pt.softplus(-argument)  # n/s − (n̄/s + v), and −log σ(n̄/s + v)
    sizes = unit * (argument + correction)
    gap = (released - mean[:, None]) / unit - (shift + correction)[:, None]  # (n̂_gk − n_g)/s
    if laplace:
        count_logp = pt.sum(-math.log(2.0 * unit) - pt.abs(gap))
    else:
        count_logp = pt.sum(-0.5 * gap**2 / copies - 0.5 * math.log(2.0 * math.pi * variance))
    jacobian = released.shape[0] * math.log(unit) - pt.sum(correction)
    return sizes, count_logp + jacobian


def _size_unit(scale: float, noise_variance: float | None, copies: int) -> tuple[bool, float, float]:
    """(Laplace?, the noise's unit s, the release noise variance per coordinate) for a group size read from
    ``copies`` noisy copies: s the Laplace scale b, or σ/√k for Gaussian noise of variance σ² (public)."""
    laplace = noise_variance is None and scale > 0.0
    variance = _release_noise_variance(scale, noise_variance)
    return laplace, float(scale) if laplace else math.sqrt(variance / copies), variance


def marginal_group_sizes(
    released: np.ndarray, scale: float, noise_variance: float | None
) -> tuple[np.ndarray, float, float]:
    """(n̄, v, log C): each group's size integrated out, for groups many noise units above 0 (released values only).

    With a flat prior on n_g, the copies n̂_gk = n_g + η_gk give n_g the density
    Π_k p(n̂_gk | n_g) = C_g·q(n_g), q of mean n̄_g (the copies' mean) and variance v: σ²/k for
    Gaussian noise of variance σ² (q normal, exact), 2b²/k for Laplace noise of scale b (q replaced
    by the normal of its variance, as the release's other coordinates are). The group's other
    sums, S_g ~ N(n_g·m_g, n_g·V_g + noise), then integrate in closed form,

        ∫ q(n) N(S_g; n·m_g, n̄_g·V_g + noise) dn = N(S_g; n̄_g·m_g, n̄_g·V_g + noise + v·m_g m_gᵀ),

    reading n_g·V_g as n̄_g·V_g (relative error s/n̄_g, s the noise's unit) and leaving out the
    cut at n_g > 0 (n̄_g/s units away): for a group of many units the latent size and its
    correlation with the group's effect (S_g's mean is n_g·m_g) leave the sampler, which is where
    they slowed it. Returns n̄ (G), v, and Σ_g log C_g (exact: Gaussian copies, or one or two
    Laplace copies). Post-processing of released values: no ε.
    """
    released = np.asarray(released, dtype=float)
    copies = released.shape[1]
    laplace, unit, variance = _size_unit(scale, noise_variance, copies)
    mean = released.mean(axis=1)
    if laplace:
        size_variance = 2.0 * unit**2 / copies
        if copies == 1:
            log_c = 0.0
        else:  # ∫ Π_k Laplace(n̂_k − n; b) dn for two copies: (1 + |d|/b)·e^(−|d|/b)/(4b), d their difference
            gap = np.abs(released[:, 0] - released[:, 1]) / unit
            log_c = float(np.sum(np.log1p(gap) - gap - math.log(4.0 * unit)))
    else:
        size_variance = variance / copies
        spread = np.sum((released - mean[:, None]) ** 2, axis=1)
        log_c = float(np.sum(-0.5 * spread / variance - 0.5 * (copies - 1) * math.log(2.0 * math.pi * variance)))
        log_c -= 0.5 * released.shape[0] * math.log(copies)
    return mean, size_variance, log_c


def group_sizes(released: np.ndarray, scale: float, noise_variance: float | None, name: str) -> tuple[Any, Any, Any]:
    """(n, log p, v): every group's size, latent (:func:`latent_group_sizes`) or integrated out
    (:func:`marginal_group_sizes`) as its released size lies below or above :data:`MARGINAL_SIZE_UNITS`
    noise units; v (G) the integrated sizes' variance (0 where latent), to be added as v·m mᵀ to the
    group's covariance. ``{name}_group_size_shift`` holds the latent ones only (absent if none).
    """
    released = np.asarray(released, dtype=float)
    laplace, unit, _ = _size_unit(scale, noise_variance, released.shape[1])
    mean = released.mean(axis=1)
    # NaN-safe: a group not far above 0 stays latent. Laplace copies stay latent: where the sums pin n_g more tightly
    # than the copy does, the copy's cusp matters and its normal of the same variance was 0.17 nats off (tests).
    far = mean >= MARGINAL_SIZE_UNITS * unit
    latent = np.nonzero(~far if not laplace else np.ones(mean.size, dtype=bool))[0]
    integrated = np.setdiff1d(np.arange(mean.size), latent)
    variances = np.zeros(mean.size)
    log_c = 0.0
    if integrated.size:
        _, variances[integrated], log_c = marginal_group_sizes(released[integrated], scale, noise_variance)
    if not latent.size:
        return pt.as_tensor_variable(mean), pt.as_tensor_variable(log_c), variances
    sizes, count_logp = latent_group_sizes(released[latent], scale, noise_variance, name)
    if not integrated.size:
        return sizes, count_logp, variances
    return pt.set_subtensor(pt.as_tensor_variable(mean)[latent], sizes), count_logp + log_c, variances


def grouped_release_loglik(
    family: Any, reading: ReleaseReading, name: str, alpha: Any = None, beta: Any = None, sigma: Any = None
) -> Any:
    """log p(release | α, β[, σ]) of a grouped release, with the group sizes and covariate moments latent.

    Adds to the model in context ``{name}_group_size_shift`` (the G latent sizes, flat on (0, ∞),
    in units of the release noise: :func:`latent_group_sizes`) and the covariate moments of
    :func:`~pymc_dp.exponential_family.grouped_moments.grouped_gaussian_covariates` (``{name}_x_…``:
    the population's and the within-group covariance, started from the pooled within-group sums,
    and each group's mean, started from its cell), and returns the log density of the
    whole released vector (module docstring). ``alpha``: the G group intercepts; ``beta``: p
    shared slopes or a G × p matrix of group slopes (varying slopes); ``sigma``: the residual
    sd (linear regression). ``reading`` (:class:`~pymc_dp.exponential_family.densities.ReleaseReading`):
    the released vector, N, and the noise, a Gaussian release's σ² (``noise_variance``) or else
    the Laplace scale (``scale``, giving 2b²).
    """
    noisy, n_rows, scale, noise_variance, _ = reading

    cells = family.cells(noisy)
    cell = family.cell
    counts = list(family.count_indices)
    lo, hi = cell.intervals()
    keep = np.nonzero((hi > lo) & ~np.isin(np.arange(lo.size), counts))[0]
    sizes, count_logp, size_variance = group_sizes(cells[:, counts], scale, noise_variance, name)
    position = _product_positions(family)
    if _per_group_means(family, cells, position, _release_noise_variance(scale, noise_variance)):
        x_mean, x_cov = grouped_gaussian_covariates(cell, cells, n_rows, name, position)
    else:  # one shared mean: covariates that hardly shift, and logistic and Poisson (module docstring)
        x_mean, x_cov = gaussian_covariates(cell, cells.sum(axis=0), n_rows, name, position)
    coefficients = family._coefficients(alpha, beta)
    if family.base == "linear_regression":
        sigma = _tensor(sigma)
        if sigma.ndim != 0:
            raise ValueError(
                f"`sigma` must be a scalar (one residual sd for all groups). Found {sigma.ndim} dimensions."
            )
    ok = pt.all(pt.le(pt.abs(coefficients), _PARAMETER_LIMIT)) & pt.all(pt.le(sizes, _PARAMETER_LIMIT))
    ok = ok & pt.all(pt.le(pt.abs(x_mean), _PARAMETER_LIMIT)) & pt.all(pt.le(pt.abs(x_cov), _PARAMETER_LIMIT))
    if sigma is not None:
        ok = ok & pt.le(pt.abs(sigma), _PARAMETER_LIMIT)
        sigma = pt.switch(ok, sigma, 1.0)
    coefficients = pt.switch(ok, coefficients, 0.0)
    x_mean = pt.switch(ok, x_mean, 0.0)
    x_cov = pt.switch(ok, x_cov, pt.eye(family.n_features + 1))
    values, keep, noise_weights = _merged_copies(family, cells, keep)
    mean, cov = grouped_cell_moments(family, x_mean, x_cov, coefficients, sigma, keep)
    noise = _release_noise_variance(scale, noise_variance)
    total = sizes[:, None, None] * cov + noise * np.diag(noise_weights)
    if np.any(size_variance > 0.0):  # the integrated sizes (marginal_group_sizes)
        total = integrated_size_covariance(values, sizes, mean, cov, total, size_variance)
    logp = batched_gaussian_logpdf(values, sizes[:, None] * mean, total)
    return pt.switch(ok, count_logp + logp, -np.inf)


def integrated_size_covariance(
    values: Any, sizes: Any, mean: Any, cov: Any, total: Any, size_variance: np.ndarray
) -> Any:
    """The covariance of the sums S_g with the group's size n_g ~ N(n̄_g, v_g) integrated out (PyTensor, G × K × K).

    ``total`` is n̄_g·V_g + noise (``cov`` V_g, ``mean`` m_g, ``values`` S_g, ``sizes`` n̄_g where integrated).
    S_g | n ~ N(n·m_g, n·V_g + noise) integrates to N(n̄_g·m_g, n_*·V_g + noise + v_g·m_g m_gᵀ) with the
    covariance's n read at n_*, the size's posterior mean under the linear-Gaussian model,

        n_* = n̄_g + v_g·m_gᵀC⁻¹(S_g − n̄_g·m_g) / (1 + v_g·m_gᵀC⁻¹m_g),  C = ``total``,

    so that the one approximation (the covariance's n held at one value over the integral) is of second
    order in (n − n_*)/n_*: a release whose sums pin n_g more tightly than its count does (a large mean
    against its spread) moves n_* away from n̄_g, and n̄_g·V_g alone was off by a nat there. n_* is kept in
    [n̄_g/2, 2n̄_g] (far outside any posterior: n̄_g is at least 10 noise units). Groups with v_g = 0 (latent
    sizes) are unchanged.
    """
    size_variance = pt.as_tensor_variable(size_variance)
    size = total.shape[-1]
    chol = pt.linalg.cholesky(total + 1e-10 * pt.eye(size), lower=True)
    residual = pt.linalg.solve_triangular(chol, (values - sizes[:, None] * mean)[..., None], lower=True)[..., 0]
    direction = pt.linalg.solve_triangular(chol, mean[..., None], lower=True)[..., 0]
    along = pt.sum(residual * direction, axis=1)
    information = pt.sum(direction * direction, axis=1)
    moved = sizes + size_variance * along / (1.0 + size_variance * information)
    moved = pt.clip(moved, 0.5 * sizes, 2.0 * sizes)
    rank_one = size_variance[:, None, None] * mean[:, :, None] * mean[:, None, :]
    return total + (moved - sizes)[:, None, None] * cov + rank_one


def _per_group_means(family: Any, cells: np.ndarray, position: dict[tuple[int, int], int], noise: float) -> bool:
    """Whether a grouped release's likelihood gives each group its own covariate mean (module docstring).

    Linear regression whose covariates' released group means move the groups' mean responses by more than
    :data:`~pymc_dp.exponential_family.grouped_moments.GROUP_SHIFT_LIMIT` intercept sds beyond chance
    (:func:`~pymc_dp.exponential_family.grouped_moments.group_mean_shift`). Below that one shared mean costs
    less than it biases (``fair``, one noise draw each at ε = 4: sds up to 2.1× NUTS's shared, 2.8× per group;
    means within 1.0 NUTS sds either way). Reads released values only.
    """
    if family.base != "linear_regression" or not family.n_features:
        return False
    shift = group_mean_shift(cells, position, family.n_features, noise)
    return shift is not None and shift > GROUP_SHIFT_LIMIT


def _product_positions(family: Any) -> dict[tuple[int, int], int]:
    """{(j, k), j ≤ k: index of Σ x̃ⱼx̃ₖ in a cell} (x̃ = (1, x); linear regression: of Σ zⱼzₖ, z = (x̃, y))."""
    cell = family.cell
    if family.base == "linear_regression":
        return {(int(r), int(c)): i for i, (r, c) in enumerate(zip(*cell._triu, strict=True))}
    return cell.product_positions()  # the logistic and Poisson cells' own layouts


def _merged_copies(family: Any, cells: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values G × K, the kept coordinates, each one's share of the noise variance): a repeated statistic read once.

    A Poisson cell releases Σ x̃ⱼ (j ≥ 1) and Σ x̃₀x̃ⱼ, the same sum (x̃₀ = 1), with independent
    noise: the pair is read as its average at Σ x̃₀x̃ⱼ's place, noise variance halved, and Σ x̃ⱼ is
    dropped. Other cells are returned as they are (shares 1). Post-processing of the release.
    """
    values = cells[:, keep].copy()
    weights = np.ones(keep.size)
    if family.base != "poisson_regression":
        return values, keep, weights
    d = family.cell.n_features
    position = _product_positions(family)
    for j in range(1, d):
        found = np.nonzero(keep == position[(0, j)])[0]
        if not found.size:  # a constant covariate (zero-width bounds): neither copy is released, nothing to merge
            continue
        at = int(found[0])
        values[:, at] = 0.5 * (cells[:, d + j] + cells[:, position[(0, j)]])
        weights[at] = 0.5
    single = ~((keep > d) & (keep < 2 * d))  # Σ x̃ⱼ, j ≥ 1: read in the averages
    return values[:, single], keep[single], weights[single]
