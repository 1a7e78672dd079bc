"""Releases of an exponential family's aggregate sufficient statistics (Laplace once, or Gaussian per iteration).

The rows of a sufficient-statistics release are read here and nowhere else:
:class:`PrivateSufficientStatistics` checks them against the family's public bounds (or clamps
them into the bounds), sums the per-row statistics and keeps only that sum; the step and
``release_statistics`` hold this object, never the rows, and get back only noisy releases.
"""

from __future__ import annotations

import math

import numpy as np

from pymc_dp._validation import check_finite_positive
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent, PureDPReleases
from pymc_dp.mechanisms.noise import SecureNoise

__all__ = ["NoisySufficientStatistics", "PrivateSufficientStatistics", "laplace_sufficient_statistics"]


class PrivateSufficientStatistics:
    """The exact aggregate S = Σᵢ S(xᵢ) of one data set under an exponential family; only noisy releases leave.

    The constructor reads the rows once: it maps every row into the family's public bounds
    (``out_of_bounds="clamp"``, row by row, nothing reported) or refuses data with a row
    outside (``"raise"``, no count and no value in the message), checks their shapes and sums
    the per-row statistics. The rows are not kept. What the object exposes is public:
    ``family``, ``out_of_bounds``, N (``n_rows``, public under substitute neighbours) and the
    sensitivities; S itself leaves only through :meth:`laplace_release`,
    :meth:`laplace_noisy`, :meth:`gaussian_noisy` and :meth:`gaussian_releases`.

    Parameters
    ----------
    family : pymc_dp.exponential_family.ExponentialFamily
        Gives S(x), the bounds, Δ₁, Δ₂ and the projection from public settings.
    data : array or (X, y)
        The raw rows.
    out_of_bounds : {"clamp", "raise"}, default "clamp"
        What happens to a row outside the public bounds (see
        :meth:`pymc_dp.exponential_family.ExponentialFamily.check_data`).

    Notes
    -----
    Clamping maps each row on its own into the bounds, so replacing one raw row moves S by at
    most Δ₁ (L1) and Δ₂ (L2), the sensitivities of the family, whatever the raw rows. The
    object pickles (with S, not the rows) so that a step holding it can run its chains in
    worker processes; never publish a pickled step.
    """

    def __init__(self, family, data, out_of_bounds: str = "clamp") -> None:
        rows = family.check_data(data, out_of_bounds)
        self.family = family
        self.out_of_bounds = out_of_bounds
        self.n_rows = int(np.asarray(rows).shape[0])
        self._exact_statistics = family.row_statistics(rows).sum(axis=0)

    @property
    def l1_sensitivity(self) -> float:
        """Δ₁ = sup ‖S(x) − S(x′)‖₁ (substitute neighbours), from the family's public settings."""
        return self.family.l1_sensitivity()

    @property
    def l2_sensitivity(self) -> float:
        """Δ₂ = sup ‖S(x) − S(x′)‖₂ (substitute neighbours), from the family's public settings."""
        return self.family.l2_sensitivity()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.family!r}, n_rows={self.n_rows}, out_of_bounds={self.out_of_bounds!r})"

    @staticmethod
    def laplace_events(epsilon: float, label: str) -> list[PrivacyEvent]:
        """The accounting of one Laplace release at ε (b = Δ₁/ε): pure ε-DP."""
        return [PureDPReleases(epsilon, 1, label=label)]

    def laplace_release(self, epsilon: float, rng: np.random.Generator | SecureNoise) -> tuple[np.ndarray, float]:
        """One (ε, 0)-DP release Proj(S + Laplace(Δ₁/ε)^d); returns (statistics, Laplace scale b = Δ₁/ε)."""
        noisy, scale = self.laplace_noisy(epsilon, rng)
        return self.family.project(noisy, self.n_rows), scale

    def laplace_noisy(self, epsilon: float, rng: np.random.Generator | SecureNoise) -> tuple[np.ndarray, float]:
        """The mechanism's output itself, S + Laplace(Δ₁/ε)^d, before the projection; and b = Δ₁/ε.

        This is the (ε, 0)-DP release; the projection of :meth:`laplace_release` is
        post-processing of it. Noise-aware likelihoods model this unprojected vector.
        """
        epsilon = check_finite_positive("epsilon", epsilon)
        scale = self.l1_sensitivity / epsilon
        if scale == 0.0:  # every row has the same statistic: S = N·S(x) is public
            return self._exact_statistics.copy(), 0.0
        noisy = self._exact_statistics + np.asarray(
            rng.laplace(0.0, scale, size=self._exact_statistics.shape), dtype=float
        )
        return noisy, scale

    @staticmethod
    def gaussian_events(noise_multiplier: float, label: str) -> list[PrivacyEvent]:
        """The accounting of one Gaussian release at multiplier τ (σ = τΔ₂)."""
        return [GaussianReleases(noise_multiplier, 1, label=label)]

    def gaussian_noisy(
        self, noise_multiplier: float, rng: np.random.Generator | SecureNoise
    ) -> tuple[np.ndarray, float]:
        """One Gaussian release S + N(0, σ² I) with σ = τΔ₂, before any projection; and σ.

        Replacing one row moves S by at most Δ₂ in L2 norm, so this is the Gaussian mechanism
        with Δ₂/σ = 1/τ (its cost: :meth:`gaussian_events`).
        """
        noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        std = noise_multiplier * self.l2_sensitivity
        if std == 0.0:  # every row has the same statistic: S = N·S(x) is public
            return self._exact_statistics.copy(), 0.0
        noise = np.asarray(rng.normal(0.0, std, size=self._exact_statistics.shape), dtype=float)
        noisy = self._exact_statistics + noise
        return noisy, std

    def gaussian_releases(self, noise_multiplier: float) -> NoisySufficientStatistics:
        """A :class:`NoisySufficientStatistics` on S: a fresh Ŝ = S + N(0, (τΔ₂)² I) on every call."""
        return NoisySufficientStatistics._from_statistics(
            self, check_finite_positive("noise_multiplier", noise_multiplier)
        )


def laplace_sufficient_statistics(
    family, data, epsilon: float, rng: np.random.Generator | SecureNoise, out_of_bounds: str = "clamp"
) -> tuple[np.ndarray, float, int]:
    """The Laplace mechanism on the aggregate sufficient statistics of an exponential family.

    Maps every row into the family's public bounds (``out_of_bounds="clamp"``, row by row,
    nothing reported) or refuses data with a row outside (``"raise"``, no count and no value
    in the message), computes S = Σᵢ S(xᵢ), adds i.i.d. Laplace(0, b) noise with
    b = Δ₁/ε to every coordinate and projects the result onto the feasible set (e.g.
    non-negative counts summing to N). Only the projected noisy statistics leave.

    Parameters
    ----------
    family : pymc_dp.exponential_family.ExponentialFamily
        Gives S(x), Δ₁ and the projection from public settings.
    data : array or (X, y)
        The raw rows.
    epsilon : float
        ε > 0 of the release.
    rng : Generator or SecureNoise
        Noise source.
    out_of_bounds : {"clamp", "raise"}, default "clamp"
        What happens to a row outside the public bounds (see
        :meth:`pymc_dp.exponential_family.ExponentialFamily.check_data`).

    Returns
    -------
    (statistics, scale, n_rows)
        The released statistics, the Laplace scale b = Δ₁/ε and N.

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public). Replacing one row moves
    S by at most Δ₁ in L1 norm, so the release is (ε, 0)-DP (Dwork et al. 2006; Foulds et al.
    2016, eq. 16–17); the projection is post-processing. Clamping maps each row on its own
    into the bounds, so a replaced row still moves S by at most Δ₁.

    References
    ----------
    .. [1] Foulds, J., Geumlek, J., Welling, M. and Chaudhuri, K. (2016). On the theory and
       practice of privacy-preserving Bayesian data analysis. UAI, §3.2, eq. (16)–(17).
    """
    epsilon = check_finite_positive("epsilon", epsilon)
    statistics = PrivateSufficientStatistics(family, data, out_of_bounds)
    return (*statistics.laplace_release(epsilon, rng), statistics.n_rows)


class NoisySufficientStatistics:
    """Fresh Gaussian-noised copies of an exponential family's aggregate statistics (Alg. 3).

    Holds S = Σᵢ S(xᵢ), computed once from rows mapped into the family's public bounds
    (``out_of_bounds="clamp"``) or checked against them (``"raise"``), and releases
    Ŝ = S + N(0, ξ I) with √ξ = τ Δ₂ on every call. S itself never leaves.

    Parameters
    ----------
    family : pymc_dp.exponential_family.ExponentialFamily
    data : array or (X, y)
        Raw rows.
    noise_multiplier : float
        τ > 0.
    out_of_bounds : {"clamp", "raise"}, default "clamp"
        What happens to a row outside the public bounds (see
        :meth:`pymc_dp.exponential_family.ExponentialFamily.check_data`).

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public); Δ₂ = sup ‖S(x) − S(x′)‖₂.
    Each release is a Gaussian mechanism with Δ₂/√ξ = 1/τ, i.e. μ = 1/(2τ²) (Sommer et al.
    2019, Lemma 12), whatever the data. The cost of a release is O(d), independent of N.

    References
    ----------
    .. [1] Yıldırım, S. and Ermiş, B. (2019). Exact MCMC with differentially private moves.
       Statistics and Computing 29, §3.3, Algorithm 3, eq. (7)–(8).
    """

    def __init__(self, family, data, noise_multiplier: float, out_of_bounds: str = "clamp") -> None:
        noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        self._setup(PrivateSufficientStatistics(family, data, out_of_bounds), noise_multiplier)

    @classmethod
    def _from_statistics(
        cls, statistics: PrivateSufficientStatistics, noise_multiplier: float
    ) -> NoisySufficientStatistics:
        self = cls.__new__(cls)
        self._setup(statistics, noise_multiplier)
        return self

    def _setup(self, statistics: PrivateSufficientStatistics, noise_multiplier: float) -> None:
        self.noise_multiplier = noise_multiplier
        self.family = statistics.family
        self.n_rows = statistics.n_rows
        self._exact_statistics = statistics._exact_statistics
        self.variance = (self.noise_multiplier * statistics.l2_sensitivity) ** 2  # ξ

    def __getstate__(self) -> dict:
        raise TypeError("NoisySufficientStatistics holds exact statistics and cannot be pickled.")

    @staticmethod
    def events(noise_multiplier: float, count: int, label: str) -> list[PrivacyEvent]:
        """The accounting of ``count`` releases of fresh noisy statistics: Gaussian, Δ₂/σ = 1/τ each."""
        return [GaussianReleases(noise_multiplier, int(count), label=label)]

    def release(self, rng: np.random.Generator | SecureNoise) -> np.ndarray:
        """One fresh Ŝ ~ N(S, ξ I)."""
        if self.variance == 0.0:
            return self._exact_statistics.copy()
        return self._exact_statistics + np.asarray(
            rng.normal(0.0, math.sqrt(self.variance), size=self._exact_statistics.shape)
        )
