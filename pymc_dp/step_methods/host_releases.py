"""The kernels' releases on the host: a step's mechanisms, its data-free prior and its noise source."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["HostReleases"]


class HostReleases:
    """:class:`pymc_dp.step_methods.kernels.Releases` for the host loop: each call is one release of a mechanism.

    Parameters
    ----------
    prior
        The step's data-free prior (``prior_logp``, ``prior_logp_and_grad``).
    noise : numpy.random.Generator or SecureNoise
        The step's noise source (OS entropy unless ``reproducible_noise``); every release draws
        its noise from it, in the order the kernel asks.
    gradient, ratio, barker, batch_gradient : mechanism, optional
        :class:`pymc_dp.mechanisms.NoisyClippedGradient`, a log-likelihood-ratio release
        (:class:`pymc_dp.mechanisms.NoisyLogLikelihoodRatio` or a subclass's statistic with its
        ``release``/``keep``), :class:`pymc_dp.mechanisms.NoisyBarkerStatistic`,
        :class:`pymc_dp.mechanisms.NoisyPoissonGradientSum` (DPADVI's).
    correction : LogisticCorrection, optional
        The Barker test's V_cor, drawn from ``noise`` after the statistic's release.

    Notes
    -----
    Neighbouring relation, sensitivity and accounting: those of each mechanism. A ratio is not
    released (and no noise drawn) for a move the kernel marks invalid or whose length ‖θ′ − θ‖
    is not finite: a function of public or released values only.
    """

    def __init__(
        self, prior: Any, noise: Any, *, gradient=None, ratio=None, barker=None, correction=None, batch_gradient=None
    ) -> None:
        self._prior, self._noise = prior, noise
        self._gradient, self._ratio, self._barker, self._correction = gradient, ratio, barker, correction
        self._batch_gradient = batch_gradient

    def prior_logp(self, theta: np.ndarray) -> float:
        return self._prior.prior_logp(theta)

    def prior_grad(self, theta: np.ndarray) -> np.ndarray:
        return self._prior.prior_logp_and_grad(theta)[1]

    def gradient(self, theta: np.ndarray, index: int) -> np.ndarray:
        return self._gradient.release(theta, self._noise)

    def ratio(self, theta: np.ndarray, proposal: np.ndarray, valid: bool) -> tuple[float, float, bool]:
        if not valid:
            return np.nan, 0.0, False
        with np.errstate(over="ignore"):  # a finite proposal so far out that its distance overflows: no release
            if not np.isfinite(np.linalg.norm(proposal - theta)):
                return np.nan, 0.0, False
        noisy, std = self._ratio.release(theta, proposal, self._noise)
        return noisy, std, True

    def barker(self, theta: np.ndarray, proposal: np.ndarray) -> float:
        return self._barker.release(theta, proposal, self._noise)

    def barker_correction(self) -> float:
        return self._correction.sample(self._noise)

    def batch_gradient(self, thetas: np.ndarray, jacobians: list[np.ndarray]) -> np.ndarray:
        return self._batch_gradient.release(thetas, jacobians, self._noise)

    def keep(self, accepted: bool) -> None:
        if self._ratio is not None:
            self._ratio.keep(bool(accepted))
