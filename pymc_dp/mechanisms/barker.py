"""The DP Barker release: the log-likelihood ratio of a move plus Gaussian noise (DPBarkerMH)."""

from __future__ import annotations

import math

import numpy as np

from pymc_dp._validation import check_finite_positive
from pymc_dp.accounting.barker import barker_subsampled_rdp
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent, RdpReleases
from pymc_dp.mechanisms.clipping import clip_values, sensitivity_of_clipped_sum
from pymc_dp.mechanisms.noise import SecureNoise
from pymc_dp.mechanisms.subsampling import sample_without_replacement

__all__ = ["NoisyBarkerStatistic"]


class NoisyBarkerStatistic:
    """The DP Barker release: the log-likelihood ratio of a move plus Gaussian noise.

    For a move θ → θ′ with per-row ratios rᵢ = log p(xᵢ | θ′) − log p(xᵢ | θ):

    - **Full data** (``batch_size=None``, Heikkilä et al. 2019, eq. 9): releases
      z = t Σᵢ clip(rᵢ, ±B) + ξ with ξ ~ N(0, C), t the likelihood temperature.
    - **Subsampled** (eq. 18): draws a batch S of b distinct rows, clips rᵢ to ±c with
      c ≤ √b/N₀, and releases z = N₀ r̄ + ξ with ξ ~ N(0, C − s²), where r̄ and v are the
      mean and (population) variance of the clipped batch ratios and s² = N₀² v / b
      estimates Var(N₀ r̄). The clip guarantees v ≤ c², so s² ≤ 1 < C = 2: the batch is
      never grown (that would make its size depend on the data).

    Only z leaves this object; the batch, the ratios, r̄ and s² never do.

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        The data access for the step's parameters.
    correction_variance : float
        C, the variance of the Gaussian part of the logistic noise.
    llr_clip : float
        B (full data) or c (subsampled), the bound on each row's ratio.
    likelihood_scale : float
        t (full data: the temperature, N₀/N under tempering) or N₀ (subsampled: the
        tempered size, N without tempering).
    batch_size : int, optional
        b; None for the full-data test.

    Notes
    -----
    Neighbouring relation: substitute for the subsampled test (Theorem 2 and eq. 22 assume
    it); substitute or add/remove for the full-data test (sensitivity 2tB or tB). The full
    test is a Gaussian mechanism with μ = (2tB)²/(2C) per release under substitution; the
    subsampled one is accounted by :func:`pymc_dp.accounting.barker.barker_subsampled_rdp`.

    References
    ----------
    .. [1] Heikkilä, M., Jälkö, J., Dikmen, O. and Honkela, A. (2019). Differentially private
       Markov chain Monte Carlo. NeurIPS, eq. (9), (18), (19), (23), Theorems 1–2.
    """

    def __init__(
        self,
        rows,
        *,
        correction_variance: float,
        llr_clip: float,
        likelihood_scale: float,
        batch_size: int | None = None,
    ) -> None:
        self._rows = rows
        self.correction_variance = check_finite_positive("correction_variance", correction_variance)
        self.llr_clip = check_finite_positive("llr_clip", llr_clip)
        self.likelihood_scale = check_finite_positive("likelihood_scale", likelihood_scale)
        self.batch_size = batch_size
        if batch_size is not None:
            n0, b = self.likelihood_scale, int(batch_size)
            if self.llr_clip * n0 > math.sqrt(b) * (1.0 + 1e-12):
                raise ValueError(
                    f"`llr_clip` must be at most √b/N₀ = {math.sqrt(b) / n0:.6g} for the subsampled test "
                    f"(Heikkilä et al. 2019, eq. 23). Found {llr_clip!r}."
                )
            if self.correction_variance <= 1.0:
                raise ValueError(
                    "`correction_variance` must exceed 1 for the subsampled test (s² ≤ 1 < C). "
                    f"Found {correction_variance!r}."
                )

    @staticmethod
    def sensitivity(llr_clip: float, temperature: float, neighbouring: str) -> float:
        """L2 sensitivity of the full-data statistic: 2tB (substitute) or tB (add/remove)."""
        return sensitivity_of_clipped_sum(temperature * llr_clip, neighbouring)

    @staticmethod
    def full_data_events(
        correction_variance: float, llr_clip: float, temperature: float, neighbouring: str, count: int, label: str
    ) -> list[PrivacyEvent]:
        """``count`` full-data releases: Gaussian with σ/Δ = √C / (κtB) (Heikkilä et al. 2019, Thm 1)."""
        sensitivity = NoisyBarkerStatistic.sensitivity(llr_clip, temperature, neighbouring)
        return [GaussianReleases(math.sqrt(correction_variance) / sensitivity, int(count), label=label)]

    @staticmethod
    def subsampled_events(n_rows: int, batch_size: int, count: int, label: str = "DPBarkerMH") -> list[PrivacyEvent]:
        """``count`` subsampled releases on N rows with batches of b: RDP of Theorem 2 amplified by eq. 22."""
        return [subsampled_barker_releases(n_rows, batch_size, count, label)]

    def release(self, theta: np.ndarray, theta_proposed: np.ndarray, rng: np.random.Generator | SecureNoise) -> float:
        """Release z for the move θ → θ′ (``rng`` draws the batch and the noise)."""
        theta = np.asarray(theta, dtype=float)
        theta_proposed = np.asarray(theta_proposed, dtype=float)
        if self.batch_size is None:
            with np.errstate(invalid="ignore"):  # −∞ − (−∞) on an invalid row: NaN, clipped to −bound
                ratios = self._rows.loglik_rows(theta_proposed) - self._rows.loglik_rows(theta)
            statistic = self.likelihood_scale * float(np.sum(clip_values(ratios, self.llr_clip)))
            return statistic + float(rng.normal(0.0, math.sqrt(self.correction_variance)))
        batch = sample_without_replacement(rng, self._rows.n_rows, int(self.batch_size))
        clipped = clip_values(self._rows.loglik_ratio_rows(theta, theta_proposed, batch), self.llr_clip)
        return self._subsampled_statistic(float(np.mean(clipped)), float(np.var(clipped)), clipped.size, rng)

    def _subsampled_statistic(
        self, mean: float, variance: float, batch_size: int, rng: np.random.Generator | SecureNoise
    ) -> float:
        """Eq. 18 from the batch's clipped ratios' mean and population variance: N₀ r̄ + N(0, C − s²), s² = N₀² v / b."""
        n0 = self.likelihood_scale
        # |clipped| ≤ c ≤ √b/N₀ gives v ≤ c², so s² ≤ 1 (up to rounding).
        batch_variance = min(n0 * n0 * variance / batch_size, 1.0)
        noise_std = math.sqrt(self.correction_variance - batch_variance)
        return n0 * mean + float(rng.normal(0.0, noise_std))


def subsampled_barker_releases(n_rows: int, batch_size: int, iterations: int, label: str = "DPBarkerMH") -> RdpReleases:
    """``iterations`` subsampled Barker releases on N rows with batches of b (Theorem 2 with eq. 22)."""
    orders, rdp = barker_subsampled_rdp(n_rows, batch_size)
    return RdpReleases(tuple(orders.tolist()), tuple(rdp.tolist()), int(iterations), label=label)
