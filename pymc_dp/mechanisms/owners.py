"""One data owner's noisy log-likelihood ratio (DPMultiOwnerPenaltyMH)."""

from __future__ import annotations

import numpy as np

from pymc_dp._validation import check_finite_positive, check_neighbouring
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent
from pymc_dp.mechanisms.noise import SecureNoise, clipped_sum_noise_std, noisy_clipped_sum

__all__ = ["OwnerLogLikelihoodRatio"]


class OwnerLogLikelihoodRatio:
    """One data owner's contribution to the penalty test (Yıldırım and Ermiş 2019, Alg. 2, eq. 6).

    Called with (θ, θ′), it returns one noisy number: Σ_{i ∈ owner} clip(rᵢ, ±b‖θ′ − θ‖₂) + ξ,
    ξ ~ N(0, σ²), σ = τ Δ, Δ = 2b‖θ′ − θ‖₂ (substitute) or b‖θ′ − θ‖₂ (add/remove). It
    needs only the owner's rows (a per-row log-likelihood function on them), its clip bound,
    its τ and its own noise generator, so it can run where the owner's data live.

    Parameters
    ----------
    loglik_rows : callable
        θ ↦ per-row log-likelihoods of this owner's rows.
    llr_clip, noise_multiplier, neighbouring
        As for :class:`NoisyLogLikelihoodRatio`.
    rng : Generator or SecureNoise
        The owner's noise source.

    Notes
    -----
    Each call is a Gaussian mechanism on the owner's rows with μ = 1/(2τ²) (Sommer et al.
    2019, Lemma 12); it reads no other owner's rows, so against the other owners (who see
    every release and know their own rows) each owner's rows are protected at μ = 1/(2τ²)
    per iteration.
    """

    def __init__(
        self,
        loglik_rows,
        llr_clip: float,
        noise_multiplier: float,
        rng: np.random.Generator | SecureNoise,
        neighbouring: str = "substitute",
    ) -> None:
        self._loglik_rows = loglik_rows
        self.llr_clip = check_finite_positive("llr_clip", llr_clip)
        self.noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        self.neighbouring = check_neighbouring("neighbouring", neighbouring)
        self.rng = rng

    @staticmethod
    def events(noise_multiplier: float, count: int, label: str) -> list[PrivacyEvent]:
        """The accounting of ``count`` releases of the owners' summed ratios: Gaussian, Δ/σ = 1/τ each."""
        return [GaussianReleases(noise_multiplier, int(count), label=label)]

    def __call__(self, theta: np.ndarray, theta_proposed: np.ndarray) -> float:
        theta = np.asarray(theta, dtype=float)
        theta_proposed = np.asarray(theta_proposed, dtype=float)
        distance = float(np.linalg.norm(theta_proposed - theta))
        with np.errstate(invalid="ignore"):  # −∞ − (−∞) on an invalid row: NaN, clipped to −bound
            ratios = self._loglik_rows(theta_proposed) - self._loglik_rows(theta)
        bound = self.llr_clip * distance
        noisy, _ = noisy_clipped_sum(ratios, bound, self.noise_multiplier, self.rng, self.neighbouring)
        return noisy

    def std(self, theta: np.ndarray, theta_proposed: np.ndarray) -> float:
        """σ of the noise for the move θ → θ′ (public)."""
        distance = float(np.linalg.norm(np.asarray(theta_proposed, float) - np.asarray(theta, float)))
        return clipped_sum_noise_std(self.llr_clip * distance, self.noise_multiplier, self.neighbouring)
