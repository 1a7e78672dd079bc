"""The DP-HMC gradient release: clipped per-row gradients, summed, plus Gaussian noise."""

from __future__ import annotations

import numpy as np

from pymc_dp._validation import check_finite_positive, check_neighbouring
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent
from pymc_dp.mechanisms.clipping import clipped_sum_l2, row_chunks, sensitivity_of_clipped_sum
from pymc_dp.mechanisms.noise import SecureNoise

__all__ = ["NoisyClippedGradient"]


class _GaussianClippedSum:
    """What the Gaussian releases of a clipped per-row sum share: σ = τΔ and their accounting.

    Δ = κ·b is the L2 sensitivity of a sum of per-row terms each clipped to norm b (κ = 2 under
    substitute neighbours, 1 under add/remove:
    :func:`~pymc_dp.mechanisms.clipping.sensitivity_of_clipped_sum`); each release is a Gaussian
    mechanism with Δ/σ = 1/τ.
    """

    def _set_noise(self, clip_name: str, clip: float, noise_multiplier: float, neighbouring: str) -> float:
        """Check the clip bound (named ``clip_name``), τ and the relation; set them and σ; return the bound."""
        clip = check_finite_positive(clip_name, clip)
        self.noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        self.neighbouring = check_neighbouring("neighbouring", neighbouring)
        self.std = self.noise_multiplier * sensitivity_of_clipped_sum(clip, self.neighbouring)
        return clip

    @staticmethod
    def events(noise_multiplier: float, count: int, label: str) -> list[PrivacyEvent]:
        """The accounting of ``count`` releases from public settings: Gaussian, Δ/σ = 1/τ each."""
        return [GaussianReleases(noise_multiplier, int(count), label=label)]


class NoisyClippedGradient(_GaussianClippedSum):
    """The DP-HMC gradient release: clipped per-row gradients, summed, plus Gaussian noise.

    Releases Σᵢ clip_L2(∇θ log p(xᵢ | θ), b_g) + ξ with ξ ~ N(0, σ² I), σ = τ Δ and
    Δ = 2 b_g (substitute neighbours) or b_g (add/remove), the L2 sensitivity of the clipped
    sum. The per-row gradients never leave this object. On a
    :class:`pymc_dp.data.RowLikelihood` the clipped sum of each row chunk is computed in one
    compiled pass (:meth:`~pymc_dp.data.RowLikelihood.clipped_grad_sum`, the same clipping
    rule as :func:`~pymc_dp.mechanisms.clipping.clipped_sum_l2`, tested equal to 1e-10).

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        The data access for the step's parameters.
    grad_clip : float
        b_g > 0, the L2 bound on each row's gradient.
    noise_multiplier : float
        τ_g > 0, noise standard deviation per unit of sensitivity.
    neighbouring : {"substitute", "add_remove"}
        Relation under which Δ = 2b_g (substitute) or b_g (add/remove).

    Notes
    -----
    Each release is a Gaussian mechanism with Δ/σ = 1/τ_g, i.e. μ = 1/(2τ_g²) (Sommer et al.
    2019, Lemma 12), whatever θ and the data.

    References
    ----------
    .. [1] Räisä, O., Koskela, A. and Honkela, A. (2021). Differentially private Hamiltonian
       Monte Carlo, eq. (1) and Theorem 3.3.
    """

    def __init__(self, rows, grad_clip: float, noise_multiplier: float, neighbouring: str = "substitute") -> None:
        self._rows = rows
        self.grad_clip = self._set_noise("grad_clip", grad_clip, noise_multiplier, neighbouring)

    @staticmethod
    def sensitivity(grad_clip: float, neighbouring: str) -> float:
        """L2 sensitivity of the clipped gradient sum: 2C (substitute) or C (add/remove)."""
        return sensitivity_of_clipped_sum(grad_clip, neighbouring)

    def release(self, theta: np.ndarray, rng: np.random.Generator | SecureNoise) -> np.ndarray:
        """One noisy clipped gradient of the log-likelihood at θ, shape (P,)."""
        theta = np.asarray(theta, dtype=float)
        clipped_sum = np.zeros(self._rows.n_params)
        compiled = getattr(self._rows, "clipped_grad_sum", None)  # a stand-in table has only grad_rows
        for chunk in row_chunks(self._rows):  # at most one chunk's per-row work at a time
            if compiled is not None:  # the same clipping, in one compiled pass (RowLikelihood.clipped_grad_sum)
                clipped_sum += compiled(theta, self.grad_clip, chunk)
            else:
                clipped_sum += clipped_sum_l2(self._rows.grad_rows(theta, chunk), self.grad_clip)
        return clipped_sum + rng.normal(0.0, self.std, size=clipped_sum.shape)
