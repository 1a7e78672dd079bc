"""The release of a clipped sum of per-row Hessians (the curvature of a noisy Newton step).

Each row's Hessian Hᵢ(θ) = ∇²θ log p(xᵢ | θ) is the Jacobian of its gradient, computed here by
central differences of the data layer's per-row gradients; it is symmetrised, clipped to
Frobenius norm b_H and summed, and symmetric Gaussian noise is added. Only the noisy sum leaves.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pymc_dp.mechanisms.clip_bound import NoisyScoreNormHistogram, norm_histogram
from pymc_dp.mechanisms.clipping import clipped_sum_l2, row_chunks, sensitivity_of_clipped_sum
from pymc_dp.mechanisms.gradient import _GaussianClippedSum
from pymc_dp.mechanisms.noise import SecureNoise

__all__ = [
    "NoisyClippedHessian",
    "NoisyHessianNormHistogram",
    "clipped_hessian",
    "hessian_norm_histogram",
    "packed_size",
    "symmetric_from_packed",
    "symmetric_to_packed",
]

#: Memory limit (bytes) of the per-row Hessians held at one time (rows × P × P doubles).
HESSIAN_CHUNK_BYTES = 64 * 2**20
#: Relative step of the central differences: about the cube root of the float64 epsilon, the step
#: that balances truncation (h²) against rounding (eps/h).
DIFFERENCE_STEP = 6e-6


def packed_size(n_params: int) -> int:
    """P(P + 1)/2: the length of the packed upper triangle of a P × P symmetric matrix."""
    return n_params * (n_params + 1) // 2


def symmetric_to_packed(matrices: np.ndarray) -> np.ndarray:
    """The isometric packing of symmetric matrices (…, P, P) → (…, P(P+1)/2).

    The diagonal entries, then √2 times each entry above the diagonal (row-major), so that the
    L2 norm of the packed vector is the Frobenius norm of the matrix.
    """
    matrices = np.asarray(matrices, dtype=float)
    p = matrices.shape[-1]
    upper_i, upper_j = np.triu_indices(p, k=1)
    diagonal = np.diagonal(matrices, axis1=-2, axis2=-1)
    off = matrices[..., upper_i, upper_j] * math.sqrt(2.0)
    return np.concatenate([diagonal, off], axis=-1)


def symmetric_from_packed(packed: np.ndarray, n_params: int) -> np.ndarray:
    """The symmetric P × P matrix of an isometric packing (:func:`symmetric_to_packed`'s inverse)."""
    packed = np.asarray(packed, dtype=float)
    if packed.shape != (packed_size(n_params),):
        raise ValueError(
            f"`packed` must be a vector of length P(P+1)/2 = {packed_size(n_params)}. Found shape {packed.shape}."
        )
    matrix = np.diag(packed[:n_params])
    upper_i, upper_j = np.triu_indices(n_params, k=1)
    off = packed[n_params:] / math.sqrt(2.0)
    matrix[upper_i, upper_j] = off
    matrix[upper_j, upper_i] = off
    return matrix


class _RowHessians:
    """Per-row Hessians by central differences of the per-row gradients (``self._rows``, ``self.n_params``)."""

    _rows: Any
    n_params: int

    def _packed_rows(self, theta: np.ndarray, chunk) -> np.ndarray:
        """Per-row Hessians of ``chunk`` by central differences, symmetrised and packed: (B, P(P+1)/2)."""
        p = self.n_params
        columns = []
        for j in range(p):
            h = DIFFERENCE_STEP * max(1.0, abs(float(theta[j])))
            up, down = theta.copy(), theta.copy()
            up[j] += h
            down[j] -= h
            with np.errstate(invalid="ignore", over="ignore"):
                columns.append((self._rows.grad_rows(up, chunk) - self._rows.grad_rows(down, chunk)) / (2.0 * h))
        jacobian = np.stack(columns, axis=2)  # (B, P, P): [i, k, j] = ∂gᵢₖ/∂θⱼ
        with np.errstate(invalid="ignore", over="ignore"):
            return symmetric_to_packed(0.5 * (jacobian + np.swapaxes(jacobian, 1, 2)))

    def _pieces(self, chunk) -> list:
        """``chunk`` cut so that one piece's per-row Hessians fit :data:`HESSIAN_CHUNK_BYTES`."""
        size = max(64, HESSIAN_CHUNK_BYTES // (8 * 3 * self.n_params**2))
        if isinstance(chunk, slice):
            if chunk.stop - chunk.start <= size or getattr(self._rows, "subset_mode", "index") != "index":
                return [chunk]
            return [slice(s, min(s + size, chunk.stop)) for s in range(chunk.start, chunk.stop, size)]
        if chunk is None:
            return [None]
        return [chunk[s : s + size] for s in range(0, len(chunk), size)] or [chunk]


class NoisyClippedHessian(_RowHessians, _GaussianClippedSum):
    """The clipped sum of per-row Hessians plus symmetric Gaussian noise.

    Releases Ĥ = Σᵢ clip_F(Hᵢ(θ), b_H) + E, where Hᵢ(θ) is row i's Hessian of its
    log-likelihood in the unconstrained parameters θ (symmetrised), clip_F scales a matrix to
    Frobenius norm at most b_H, and E is symmetric with E_jj ~ N(0, σ²) and E_jk = E_kj ~
    N(0, σ²/2) (j < k), independent, σ = τ Δ. In the isometric packing
    (:func:`symmetric_to_packed`: the diagonal and √2 × the upper triangle, whose L2 norm is
    the Frobenius norm) this is the Gaussian mechanism on a clipped sum of vectors, with
    N(0, σ² I) noise on the packed vector. The per-row Hessians never leave this object.

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        The data access for the parameters (its :meth:`~pymc_dp.data.RowLikelihood.grad_rows`
        and :meth:`~pymc_dp.data.RowLikelihood.row_chunks`).
    hessian_clip : float
        b_H > 0, the Frobenius bound on each row's Hessian.
    noise_multiplier : float
        τ_H > 0, noise standard deviation per unit of sensitivity.
    neighbouring : {"substitute", "add_remove"}
        Relation under which Δ = 2b_H in Frobenius norm (substitute) or b_H (add/remove).

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public) or add/remove. Row i's
    clipped term depends on row i alone (the data layer's row checks; the differences below
    evaluate row i's gradient only), so replacing one row moves the clipped sum by at most
    2 b_H in Frobenius norm (b_H under add/remove): Δ = 2 b_H or b_H, the L2 sensitivity of
    the packed sum. Each release is then a Gaussian mechanism with Δ/σ = 1/τ_H (Gaussian DP
    with parameter 1/τ_H; Sommer et al. 2019, Lemma 12), counted as μ = 1/(2τ_H²) in this
    package's accounting (:class:`~pymc_dp.accounting.GaussianReleases`), whatever θ, the data and the
    accuracy of the differences. ε covers the noisy sum only; θ must be public or the output
    of earlier priced releases (post-processing).

    The per-row Hessian is the Jacobian of the per-row gradient by central differences,
    column j from the gradients at θ ± hⱼeⱼ with hⱼ = 6·10⁻⁶·max(1, |θⱼ|) (2P passes of the
    per-row gradient): relative error about 10⁻¹⁰ on smooth log-likelihoods. A row whose
    Hessian has a non-finite entry contributes zero (its influence stays bounded).

    References
    ----------
    .. [1] Avella-Medina, M., Bradshaw, C. and Loh, P.-L. (2023). Differentially private
       inference via noisy optimization. The Annals of Statistics 51(5), Section 3 (noisy
       Newton).
    """

    def __init__(self, rows, hessian_clip: float, noise_multiplier: float, neighbouring: str = "substitute") -> None:
        self._rows = rows
        self.hessian_clip = self._set_noise("hessian_clip", hessian_clip, noise_multiplier, neighbouring)
        self.n_params = int(rows.n_params)

    @staticmethod
    def sensitivity(hessian_clip: float, neighbouring: str) -> float:
        """Frobenius (packed L2) sensitivity of the clipped Hessian sum: 2 b_H (substitute) or b_H (add/remove)."""
        return sensitivity_of_clipped_sum(hessian_clip, neighbouring)

    def noise_covariance(self) -> tuple[float, float]:
        """(variance of a diagonal entry, variance of an off-diagonal entry) of the noise E: (σ², σ²/2)."""
        return self.std**2, self.std**2 / 2.0

    def clipped_sum(self, theta: np.ndarray) -> np.ndarray:
        """Σᵢ clip_F(Hᵢ(θ), b_H), packed. Not private: only :meth:`release` calls it (and tests)."""
        theta = np.asarray(theta, dtype=float)
        total = np.zeros(packed_size(self.n_params))
        for chunk in row_chunks(self._rows):
            for piece in self._pieces(chunk):
                total += clipped_sum_l2(self._packed_rows(theta, piece), self.hessian_clip)
        return total

    def release(self, theta: np.ndarray, rng: np.random.Generator | SecureNoise) -> np.ndarray:
        """One noisy clipped Hessian sum of the log-likelihood at θ: a symmetric (P, P) matrix."""
        theta = np.asarray(theta, dtype=float)
        if theta.shape != (self.n_params,):
            raise ValueError(f"`theta` must be a flat vector of length {self.n_params}. Found shape {theta.shape}.")
        packed = self.clipped_sum(theta)
        noisy = packed + rng.normal(0.0, self.std, size=packed.shape)
        return symmetric_from_packed(noisy, self.n_params)


def clipped_hessian(
    mechanisms, hessian_clip: float, noise_multiplier: float, neighbouring: str = "substitute"
) -> NoisyClippedHessian:
    """A :class:`NoisyClippedHessian` on every row of a :class:`pymc_dp.mechanisms.RowMechanisms`.

    The route from a front-end (:func:`pymc_dp.release_once`), which holds only the row
    mechanisms of :func:`pymc_dp.mechanisms.model_access`, to this release: the rows stay in
    the mechanism layer.
    """
    return NoisyClippedHessian(mechanisms._rows_here(), hessian_clip, noise_multiplier, neighbouring)


class NoisyHessianNormHistogram(_RowHessians, NoisyScoreNormHistogram):
    """The Gaussian mechanism on the histogram of per-row Hessian Frobenius norms at a public point.

    Releases h + ξ with hₖ the number of rows whose Hessian norm ‖∇²θ log p(xᵢ | θ_ref)‖_F
    (by central differences, as :class:`NoisyClippedHessian` computes it) falls in bin k of
    :data:`pymc_dp.mechanisms.clip_bound.NORM_GRID_EDGES` (every row in exactly one bin; a row
    whose Hessian is not finite in the top bin), ξ ~ N(0, σ² I), σ = τ Δ. The per-row Hessians
    never leave this object; a clip bound for :class:`NoisyClippedHessian` is read off the noisy
    cumulative counts (:meth:`release`, post-processing).

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        The data access for the parameters.
    noise_multiplier : float
        τ > 0, noise standard deviation per unit of sensitivity.
    neighbouring : {"substitute", "add_remove"}
        Relation under which Δ = √2 (substitute) or 1 (add/remove), as for the score norms.

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public; one unit moves between two
    bins, Δ = √2) or add/remove (one count changes by one, Δ = 1). Row i's norm depends on row
    i alone, so one release is a Gaussian mechanism with Δ/σ = 1/τ, μ = 1/(2τ²) in zCDP, whatever
    θ_ref and the data (the score-norm histogram's accounting,
    :class:`pymc_dp.mechanisms.clip_bound.NoisyScoreNormHistogram`). ε covers the noisy counts;
    θ_ref must be public or the output of earlier priced releases.
    """

    def __init__(self, rows, noise_multiplier: float, neighbouring: str = "substitute") -> None:
        super().__init__(rows, noise_multiplier, neighbouring)
        self.n_params = int(rows.n_params)

    def release_counts(self, reference, rng: np.random.Generator | SecureNoise) -> np.ndarray:
        """The noisy histogram of per-row Hessian Frobenius norms at θ_ref = ``reference`` (one release)."""
        theta = np.asarray(reference, dtype=float)
        if theta.shape != (self.n_params,):
            raise ValueError(f"`theta` must be a flat vector of length {self.n_params}. Found shape {theta.shape}.")
        counts = np.zeros(len(norm_histogram(np.zeros(0))))
        for chunk in row_chunks(self._rows):
            for piece in self._pieces(chunk):
                with np.errstate(invalid="ignore", over="ignore"):
                    norms = np.linalg.norm(self._packed_rows(theta, piece), axis=1)
                counts += norm_histogram(norms)
        return counts + rng.normal(0.0, self.std, size=counts.shape)


def hessian_norm_histogram(mechanisms, noise_multiplier: float, neighbouring: str = "substitute"):
    """A :class:`NoisyHessianNormHistogram` on every row of a :class:`pymc_dp.mechanisms.RowMechanisms`
    (the private Hessian clip bound of :func:`pymc_dp.release_once`; the rows stay in this layer)."""
    return NoisyHessianNormHistogram(mechanisms._rows_here(), noise_multiplier, neighbouring)
