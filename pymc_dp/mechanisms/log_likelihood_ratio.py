"""The DP-penalty release: a clipped, noised log-likelihood ratio (DPPenaltyMH, DPHMC)."""

from __future__ import annotations

import numpy as np

from pymc_dp._validation import check_finite_positive, check_neighbouring
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent
from pymc_dp.mechanisms.clipping import sensitivity_of_clipped_sum
from pymc_dp.mechanisms.noise import noisy_clipped_sum

__all__ = ["NoisyLogLikelihoodRatio"]


class NoisyLogLikelihoodRatio:
    """The DP-penalty release: a clipped, noised log-likelihood ratio between two points.

    For a current point θ and a proposal θ′ it evaluates the per-row log-likelihood ratios
    rᵢ = log p(xᵢ | θ′) − log p(xᵢ | θ), clips each to ±b‖θ′ − θ‖₂ and releases

        λ̂ = Σᵢ clip(rᵢ) + ξ,   ξ ~ N(0, σ²),   σ = τ Δ,

    with Δ = 2b‖θ′ − θ‖₂ (substitute neighbours) or b‖θ′ − θ‖₂ (add/remove). Only λ̂ and σ
    leave this object; the per-row values it caches for the current point never do.

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        The data access for the step's parameters.
    llr_clip : float
        b > 0, the per-row clip bound per unit of ‖θ′ − θ‖₂.
    noise_multiplier : float
        τ > 0, noise standard deviation per unit of sensitivity.
    neighbouring : {"substitute", "add_remove"}
        Relation under which Δ = 2b‖θ′ − θ‖₂ (substitute) or b‖θ′ − θ‖₂ (add/remove).

    Notes
    -----
    Each release is a Gaussian mechanism with sensitivity/σ = 1/τ, i.e. μ = 1/(2τ²) in
    Sommer et al. (2019, Lemma 12), whatever θ, θ′ and the data: the privacy cost is a
    function of τ and the number of releases only.

    References
    ----------
    .. [1] Yıldırım, S. and Ermiş, B. (2019). Exact MCMC with differentially private moves.
       Statistics and Computing 29, Algorithm 1 and eq. (2).
    .. [2] Räisä, O., Koskela, A. and Honkela, A. (2021). Differentially private Hamiltonian
       Monte Carlo, §3 (clip bound b‖θ − θ′‖ and σ = 2τb‖θ − θ′‖).
    """

    def __init__(self, rows, llr_clip: float, noise_multiplier: float, neighbouring: str = "substitute") -> None:
        self._rows = rows
        self.llr_clip = check_finite_positive("llr_clip", llr_clip)
        self.noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        self.neighbouring = check_neighbouring("neighbouring", neighbouring)
        self._cached_point: bytes | None = None
        self._cached_loglik: np.ndarray | None = None
        self._pending: tuple[bytes, np.ndarray] | None = None

    @staticmethod
    def sensitivity(llr_clip: float, distance: float, neighbouring: str) -> float:
        """L2 sensitivity of the clipped sum for a step of length ``distance``: 2b‖θ′ − θ‖ or b‖θ′ − θ‖."""
        return sensitivity_of_clipped_sum(llr_clip * distance, neighbouring)

    @staticmethod
    def events(noise_multiplier: float, count: int, label: str) -> list[PrivacyEvent]:
        """The accounting of ``count`` releases from public settings: Gaussian, Δ/σ = 1/τ each."""
        return [GaussianReleases(noise_multiplier, int(count), label=label)]

    @property
    def mu_per_release(self) -> float:
        """μ = 1/(2τ²) of one release."""
        return 0.5 / self.noise_multiplier**2

    def forget(self) -> None:
        """Drop the cached per-row values (new chain, other parameters changed, run over)."""
        self._cached_point = None
        self._cached_loglik = None
        self._pending = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()  # never pickle raw per-row values
        state.update(_cached_point=None, _cached_loglik=None, _pending=None)
        return state

    def _loglik(self, theta: np.ndarray) -> np.ndarray:
        key = theta.tobytes()
        if key != self._cached_point:
            self._cached_loglik = self._rows.loglik_rows(theta)
            self._cached_point = key
        return self._cached_loglik

    def release(self, theta: np.ndarray, theta_proposed: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
        """Release λ̂ for the move θ → θ′; returns (λ̂, σ).

        After the call the cache holds θ′, so that a caller who accepts θ′ pays one
        likelihood evaluation per iteration; call :meth:`keep` with the point kept.
        """
        theta = np.asarray(theta, dtype=float)
        theta_proposed = np.asarray(theta_proposed, dtype=float)
        distance = float(np.linalg.norm(theta_proposed - theta))
        current = self._loglik(theta)
        proposed = self._rows.loglik_rows(theta_proposed)
        self._pending = (theta_proposed.tobytes(), proposed)
        with np.errstate(invalid="ignore"):  # −∞ − (−∞) on an invalid row: NaN, clipped to −bound
            ratios = proposed - current
        noisy, std = noisy_clipped_sum(ratios, self.llr_clip * distance, self.noise_multiplier, rng, self.neighbouring)
        return noisy, std

    def keep(self, accepted: bool) -> None:
        """Tell the mechanism which point the chain kept after :meth:`release`."""
        if accepted and self._pending is not None:
            self._cached_point, self._cached_loglik = self._pending
        self._pending = None
