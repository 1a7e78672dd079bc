"""The DP-SGD / DPADVI release: a Poisson batch of clipped per-row gradients, summed, plus noise."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from pymc_dp._validation import check_finite_positive, check_neighbouring, check_sampling_rate
from pymc_dp.accounting.events import PoissonGaussianReleases, PrivacyEvent
from pymc_dp.mechanisms.clipping import clipped_sum_l2, clipped_sum_l2_linear, row_chunks, sensitivity_of_clipped_sum
from pymc_dp.mechanisms.noise import SecureNoise
from pymc_dp.mechanisms.subsampling import poisson_sample

__all__ = ["NoisyPoissonGradientSum", "clipped_mapped_gradient_sum", "mapped_gradient_norms"]


def clipped_mapped_gradient_sum(
    row_gradients: Callable[[np.ndarray], np.ndarray],
    theta_draws: np.ndarray,
    parameter_jacobians: list[np.ndarray],
    bound: float,
) -> np.ndarray:
    """Σᵢ clip_L2(mean_s gᵢ(θ_s) M_s, bound) over one chunk of rows, shape (D,): raw data, for a mechanism only.

    ``row_gradients(θ)`` gives the chunk's per-row gradients (rows × P) at θ. One draw (the
    paper's n_mc = 1) takes the norms through M Mᵀ (:func:`clipped_sum_l2_linear`), with no
    rows × D matrix. Shared by the in-process release and the Dask workers' partial sums.
    """
    if len(theta_draws) == 1:
        return clipped_sum_l2_linear(row_gradients(theta_draws[0]), parameter_jacobians[0], bound)
    per_row = sum(row_gradients(t) @ m for t, m in zip(theta_draws, parameter_jacobians, strict=True))
    return clipped_sum_l2(per_row / len(theta_draws), bound)


def mapped_gradient_norms(
    row_gradients: Callable[[np.ndarray], np.ndarray], theta_draws: np.ndarray, parameter_jacobians: list[np.ndarray]
) -> np.ndarray:
    """‖mean_s gᵢ(θ_s) M_s‖ for every row of one chunk, shape (B,): raw data, for a mechanism only.

    The norm that :func:`clipped_mapped_gradient_sum` clips, computed the same way (one draw:
    through M Mᵀ; several: the mean of the mapped gradients). A row whose gradient is not
    finite gets ``inf`` (it counts above any bound).
    """
    if len(theta_draws) == 1:
        rows, linear_map = np.asarray(row_gradients(theta_draws[0]), dtype=float), parameter_jacobians[0]
        with np.errstate(invalid="ignore", over="ignore"):
            squared = np.einsum("ij,ij->i", rows @ (linear_map @ linear_map.T), rows)
    else:
        per_row = sum(row_gradients(t) @ m for t, m in zip(theta_draws, parameter_jacobians, strict=True))
        per_row = per_row / len(theta_draws)
        with np.errstate(invalid="ignore", over="ignore"):
            squared = np.einsum("ij,ij->i", per_row, per_row)
    norms = np.sqrt(np.maximum(squared, 0.0))
    return np.where(np.isfinite(norms), norms, np.inf)


class NoisyPoissonGradientSum:
    """The DP-SGD / DPADVI release: a Poisson batch of clipped per-row gradients, summed, plus noise.

    One release draws a Poisson batch S (each row with probability q), computes each batch
    row's gradient with respect to the optimised parameters, clips it to L2 norm C, sums,
    adds ξ ~ N(0, σ²Δ² I) with Δ = 2C (substitute) or C (add/remove), and divides by q:

        ĝ = (Σ_{i∈S} clip_C(gᵢ) + ξ) / q,

    an unbiased estimate of Σᵢ gᵢ over all N rows when nothing is clipped and ξ = 0 (the
    expected batch size qN normalises, never the realised one, which would be data-
    dependent under add/remove). Only ĝ leaves this object.

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        Data access for the model's parameters θ.
    grad_clip : float
        C > 0, finite: the L2 bound on each row's gradient.
    noise_multiplier : float
        σ > 0: noise standard deviation per unit of sensitivity Δ.
    sampling_rate : float
        q in (0, 1].
    neighbouring : {"substitute", "add_remove"}

    Notes
    -----
    Each release is one Poisson-subsampled Gaussian mechanism, accounted by
    :class:`pymc_dp.accounting.pld.PoissonGaussianReleases` with the same σ and q. The
    per-row gradient is taken with respect to the variational parameters, through the
    linear maps that :meth:`release` receives: data-free functions of the parameters and
    the Monte Carlo draws (the reparameterisation's chain rule).

    References
    ----------
    .. [1] Jälkö, J., Dikmen, O. and Honkela, A. (2017). Differentially private variational
       inference for non-conjugate models. UAI, Algorithm 1.
    .. [2] Abadi, M. et al. (2016). Deep learning with differential privacy. CCS, Algorithm 1.
    """

    def __init__(
        self, rows, grad_clip: float, noise_multiplier: float, sampling_rate: float, neighbouring: str = "substitute"
    ) -> None:
        self._rows = rows
        self.grad_clip = check_finite_positive("grad_clip", grad_clip)
        self.noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        self.sampling_rate = check_sampling_rate("sampling_rate", sampling_rate)
        self.neighbouring = check_neighbouring("neighbouring", neighbouring)
        self.std = self.noise_multiplier * sensitivity_of_clipped_sum(self.grad_clip, self.neighbouring)

    @staticmethod
    def events(
        noise_multiplier: float, sampling_rate: float, count: int, neighbouring: str, label: str = "dpadvi"
    ) -> list[PrivacyEvent]:
        """The accounting of ``count`` releases: Poisson-subsampled Gaussian at (σ, q) under ``neighbouring``."""
        return [PoissonGaussianReleases(noise_multiplier, sampling_rate, int(count), neighbouring, label)]

    def release(
        self, theta_draws: np.ndarray, parameter_jacobians: list[np.ndarray], rng: np.random.Generator | SecureNoise
    ) -> np.ndarray:
        """One noisy gradient estimate, shape (D,).

        Parameters
        ----------
        theta_draws : ndarray, shape (S, P)
            Points θ_s at which each batch row's log-likelihood gradient gᵢ(θ_s) is taken.
        parameter_jacobians : list of S ndarrays, shape (P, D)
            Data-free maps M_s: row i's gradient with respect to the D optimised parameters
            is mean_s gᵢ(θ_s) M_s (the reparameterisation's chain rule).
        rng : numpy Generator or SecureNoise
            Draws the batch and the noise.
        """
        batch = poisson_sample(rng, self._rows.n_rows, self.sampling_rate)
        draws = np.atleast_2d(theta_draws)
        clipped = np.zeros(np.shape(parameter_jacobians[0])[1])
        for chunk in row_chunks(self._rows, batch):  # at most one chunk's per-row matrix at a time
            gradients = partial(self._rows.grad_rows, rows=chunk)
            clipped += clipped_mapped_gradient_sum(gradients, draws, parameter_jacobians, self.grad_clip)
        return (clipped + rng.normal(0.0, self.std, size=clipped.shape)) / self.sampling_rate
