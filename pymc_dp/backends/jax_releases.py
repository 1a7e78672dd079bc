"""The JAX backend's releases: the default mechanisms' releases with their sums computed on the device.

:class:`JaxLogLikelihoodRatio`, :class:`JaxClippedGradient`, :class:`JaxBarkerStatistic` and
:class:`JaxPoissonGradientSum` are the releases of :class:`pymc_dp.mechanisms.NoisyLogLikelihoodRatio`,
:class:`pymc_dp.mechanisms.NoisyClippedGradient`, :class:`pymc_dp.mechanisms.NoisyBarkerStatistic`
and :class:`pymc_dp.mechanisms.NoisyPoissonGradientSum` with the same bounds, sensitivities,
noise scales and accounting events: subclasses that override only where the clipped sums are
computed (on :class:`pymc_dp.backends.jax_device.JaxRows`). Their noise comes from
:class:`BufferedSecureNoise` (the operating system's CSPRNG, read in blocks) or, with
``reproducible_noise`` (testing only), from the step's generator.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from pymc_dp.backends.jax_device import JaxRows
from pymc_dp.mechanisms.barker import NoisyBarkerStatistic
from pymc_dp.mechanisms.gradient import NoisyClippedGradient
from pymc_dp.mechanisms.log_likelihood_ratio import NoisyLogLikelihoodRatio
from pymc_dp.mechanisms.noise import SecureNoise, _open_unit, clipped_sum_noise_std
from pymc_dp.mechanisms.poisson_gradient import NoisyPoissonGradientSum
from pymc_dp.mechanisms.subsampling import poisson_sample, sample_without_replacement

__all__ = [
    "BufferedSecureNoise",
    "JaxBarkerStatistic",
    "JaxClippedGradient",
    "JaxLogLikelihoodRatio",
    "JaxPoissonGradientSum",
]


class BufferedSecureNoise(SecureNoise):
    """:class:`pymc_dp.mechanisms.SecureNoise` reading ``os.urandom`` in blocks of ``block_bytes``.

    The same variates (53-bit uniforms from the operating system's CSPRNG, Box–Muller
    Gaussians), with one system call per block instead of one per draw: a DPHMC iteration
    makes L + 2 releases, and one ``os.urandom`` call per release cost about 50–100 µs on the
    2-core development machine (measured under load), more than a release of a small model.
    The unread part of the block lives only in this object's memory, as a generator's state
    does; it is never returned, logged or pickled (a copy starts with an empty block).

    Parameters
    ----------
    block_bytes : int, default 65536
        Bytes read per system call (8 per uniform).
    """

    def __init__(self, block_bytes: int = 65536) -> None:
        if isinstance(block_bytes, bool) or not isinstance(block_bytes, int) or block_bytes < 8:
            raise ValueError(f"`block_bytes` must be an integer of at least 8. Found {block_bytes!r}.")
        self._block_words = block_bytes // 8
        self._words = np.empty(0, dtype=np.uint64)

    def __getstate__(self) -> dict:
        return {"_block_words": self._block_words, "_words": np.empty(0, dtype=np.uint64)}

    def _uniform(self, size: int) -> np.ndarray:
        """Uniforms on (0, 1) with 53 random bits each, from the buffered OS entropy."""
        if self._words.size < size:
            fresh = np.frombuffer(os.urandom(8 * max(self._block_words, size)), dtype=np.uint64)
            self._words = np.concatenate([self._words, fresh])
        words, self._words = self._words[:size], self._words[size:]
        return _open_unit(words >> np.uint64(11))


def _noise_source(noise: Any, rng: Any) -> Any:
    """The generator of a release's noise: the mechanism's own (OS entropy) or, when reproducible, the step's."""
    return rng if noise is None else noise


class JaxLogLikelihoodRatio(NoisyLogLikelihoodRatio):
    """:class:`pymc_dp.mechanisms.NoisyLogLikelihoodRatio` with the per-row ratios on a JAX device.

    Releases λ̂ = Σᵢ clip(rᵢ, ±b‖θ′ − θ‖₂) + ξ, ξ ~ N(0, σ²), σ = τΔ, Δ = 2b‖θ′ − θ‖₂
    (substitute) or b‖θ′ − θ‖₂ (add/remove), exactly as the default mechanism; the per-row
    log-likelihood of the current point is cached on the device.

    Parameters
    ----------
    rows : JaxRows
        The rows on the device.
    llr_clip, noise_multiplier, neighbouring
        As for :class:`pymc_dp.mechanisms.NoisyLogLikelihoodRatio`.
    noise : SecureNoise or None
        The noise source; None draws from the generator the step passes to :meth:`release`
        (``reproducible_noise=True``, for testing).

    Notes
    -----
    Neighbouring relation, sensitivity and accounting: those of the parent class (one
    Gaussian release with Δ/σ = 1/τ, μ = 1/(2τ²), per call). The standard normal ξ/σ is drawn
    on the host and sent to the device, where it is scaled and added in float64; the
    clipped sum itself never leaves the device.

    References
    ----------
    .. [1] Yıldırım, S. and Ermiş, B. (2019). Exact MCMC with differentially private moves.
       Statistics and Computing 29, Algorithm 1 and eq. (2).
    """

    def __init__(
        self, rows: JaxRows, llr_clip: float, noise_multiplier: float, neighbouring: str = "substitute", noise=None
    ) -> None:
        super().__init__(rows, llr_clip, noise_multiplier, neighbouring)
        self._noise = noise

    def _loglik(self, theta: np.ndarray):
        key = theta.tobytes()
        if key != self._cached_point:
            self._cached_loglik = self._rows.loglik(theta)
            self._cached_point = key
        return self._cached_loglik

    def release(self, theta: np.ndarray, theta_proposed: np.ndarray, rng: Any) -> tuple[float, float]:
        """Release λ̂ for the move θ → θ′; returns (λ̂, σ). The cache then holds θ′ (see :meth:`keep`)."""
        theta = np.asarray(theta, dtype=float)
        theta_proposed = np.asarray(theta_proposed, dtype=float)
        distance = float(np.linalg.norm(theta_proposed - theta))
        bound = self.llr_clip * distance
        std = clipped_sum_noise_std(bound, self.noise_multiplier, self.neighbouring)  # public, before any row
        # As the default mechanism: no draw for a zero bound (the release is then the data-free 0).
        z = 0.0 if std == 0.0 else float(_noise_source(self._noise, rng).normal(0.0, 1.0))
        noisy, proposed = self._rows.noisy_ratio_sum(theta_proposed, self._loglik(theta), bound, std, z)
        self._pending = (theta_proposed.tobytes(), proposed)
        return noisy, std


class JaxBarkerStatistic(NoisyBarkerStatistic):
    """:class:`pymc_dp.mechanisms.NoisyBarkerStatistic` with the per-row ratios on a JAX device.

    Full data: releases z = t Σᵢ clip(rᵢ, ±B) + ξ, ξ ~ N(0, C), exactly as the default
    mechanism (Heikkilä et al. 2019, eq. 9); the per-row log-likelihoods of the current and the
    proposed point stay on the device, and only z comes back. Subsampled (``batch_size=b``,
    eq. 18): the batch of b distinct rows is drawn on the host from the noise source, the
    device returns the mean and variance of the batch's clipped ratios, and z = N₀ r̄ +
    N(0, C − s²) is released here, with the default mechanism's draws in its order.

    Parameters
    ----------
    rows : JaxRows
        The rows on the device.
    correction_variance, llr_clip, likelihood_scale, batch_size
        As for :class:`pymc_dp.mechanisms.NoisyBarkerStatistic` (full data: t the temperature;
        subsampled: N₀ and b).
    noise : SecureNoise or None
        The noise source; None draws from the generator the step passes to :meth:`release`
        (``reproducible_noise=True``, for testing).

    Notes
    -----
    Neighbouring relation, sensitivity and accounting: those of the parent class (full data:
    substitute 2tB or add/remove tB, one Gaussian release with μ = Δ²/(2C) per call;
    subsampled: substitute neighbours, batches of b without replacement, the RDP of Theorem 2
    amplified by eq. 22). Full data: the standard normal ξ/√C is drawn on the host, sent to
    the device, scaled by √C/t and added to the clipped sum in float64 there; the sum never
    leaves the device. Subsampled: the batch's mean and variance come back to this mechanism,
    which adds the noise; only z leaves it.

    References
    ----------
    .. [1] Heikkilä, M., Jälkö, J., Dikmen, O. and Honkela, A. (2019). Differentially private
       Markov chain Monte Carlo. NeurIPS, eq. (9), Theorem 1.
    """

    def __init__(
        self,
        rows: JaxRows,
        *,
        correction_variance: float,
        llr_clip: float,
        likelihood_scale: float,
        batch_size: int | None = None,
        noise=None,
    ) -> None:
        super().__init__(
            rows,
            correction_variance=correction_variance,
            llr_clip=llr_clip,
            likelihood_scale=likelihood_scale,
            batch_size=batch_size,
        )
        self._noise = noise
        self._cached: dict[bytes, Any] = {}  # θ → per-row log-likelihoods on the device (the last move's two points)

    def _loglik(self, theta: np.ndarray):
        key = theta.tobytes()
        if key not in self._cached:
            self._cached = {key: self._rows.loglik(theta)}
        return self._cached[key]

    def release(self, theta: np.ndarray, theta_proposed: np.ndarray, rng: Any) -> float:
        """Release z for the move θ → θ′ (``rng`` draws the batch and the noise when the noise is reproducible)."""
        theta = np.asarray(theta, dtype=float)
        theta_proposed = np.asarray(theta_proposed, dtype=float)
        if self.batch_size is not None:
            return self._release_subsampled(theta, theta_proposed, _noise_source(self._noise, rng))
        current = self._loglik(theta)
        z = float(_noise_source(self._noise, rng).normal(0.0, 1.0))
        t = self.likelihood_scale
        noisy, proposed = self._rows.noisy_ratio_sum(
            theta_proposed, current, self.llr_clip, math.sqrt(self.correction_variance) / t, z
        )
        self._cached = {theta.tobytes(): current, theta_proposed.tobytes(): proposed}
        return t * noisy

    def _release_subsampled(self, theta: np.ndarray, theta_proposed: np.ndarray, noise: Any) -> float:
        """Eq. 18: z = N₀ r̄ + N(0, C − s²) on a batch of b distinct rows drawn from ``noise``, as the parent's."""
        batch = sample_without_replacement(noise, self._rows.n_rows, int(self.batch_size))
        mean, variance = self._rows.batch_ratio_moments(theta, theta_proposed, self.llr_clip, batch)
        return self._subsampled_statistic(mean, variance, batch.size, noise)


class JaxClippedGradient(NoisyClippedGradient):
    """:class:`pymc_dp.mechanisms.NoisyClippedGradient` with the per-row gradients on a JAX device.

    Releases Σᵢ clip_L2(∇θ log p(xᵢ | θ), b_g) + ξ, ξ ~ N(0, σ² I), σ = τΔ, Δ = 2b_g
    (substitute) or b_g (add/remove), exactly as the default mechanism.

    Parameters
    ----------
    rows : JaxRows
        The rows on the device; their per-row gradients are computed there, one chunk at a time.
    grad_clip, noise_multiplier, neighbouring
        As for :class:`pymc_dp.mechanisms.NoisyClippedGradient`.
    noise : SecureNoise or None
        The noise source; None draws from the generator the step passes to :meth:`release`.

    Notes
    -----
    Neighbouring relation, sensitivity and accounting: those of the parent class (one
    Gaussian release with Δ/σ = 1/τ_g per call). Per-row gradients exist only on the device,
    one chunk at a time.

    References
    ----------
    .. [1] Räisä, O., Koskela, A. and Honkela, A. (2021). Differentially private Hamiltonian
       Monte Carlo, eq. (1) and Theorem 3.3.
    """

    def __init__(
        self, rows: JaxRows, grad_clip: float, noise_multiplier: float, neighbouring: str = "substitute", noise=None
    ) -> None:
        super().__init__(rows, grad_clip, noise_multiplier, neighbouring)
        self._noise = noise

    def release(self, theta: np.ndarray, rng: Any) -> np.ndarray:
        """One noisy clipped gradient of the log-likelihood at θ, shape (P,)."""
        z = _noise_source(self._noise, rng).normal(0.0, 1.0, size=self._rows.n_params)
        return self._rows.noisy_gradient_sum(np.asarray(theta, dtype=float), self.grad_clip, self.std, z)


class JaxPoissonGradientSum(NoisyPoissonGradientSum):
    """DPADVI's release (:class:`pymc_dp.mechanisms.NoisyPoissonGradientSum`), the batch's gradients on a JAX device.

    Releases ĝ = (Σ_{i∈S} clip_C(gᵢ) + ξ) / q, ξ ~ N(0, σ²Δ² I), Δ = 2C (substitute) or C
    (add/remove), exactly as the default mechanism: the Poisson batch S and the standard
    normals are drawn on the host, in the default mechanism's order, from ``noise`` (the
    operating system's CSPRNG, read in blocks) or, where it is None (``reproducible_noise``,
    testing only), from the generator DPADVI passes — then the default backend's draws; the
    batch's rows are gathered, differentiated, mapped to the variational parameters, clipped
    and summed on the device, and the noise is added there in float64.

    Parameters
    ----------
    rows : JaxRows
        The rows on the device.
    grad_clip, noise_multiplier, sampling_rate, neighbouring
        As for :class:`pymc_dp.mechanisms.NoisyPoissonGradientSum`.
    noise : SecureNoise or None
        The source of the batches and the noise; None: the generator passed to :meth:`release`.

    Notes
    -----
    Neighbouring relation, sensitivity and accounting: those of the parent class (one
    Poisson-subsampled Gaussian release per call, accounted by
    :class:`pymc_dp.accounting.pld.PoissonGaussianReleases`). The batch is secret: it is
    drawn from the mechanism's generator and sent to the device as indices only.

    References
    ----------
    .. [1] Jälkö, J., Dikmen, O. and Honkela, A. (2017). Differentially private variational
       inference for non-conjugate models. UAI, Algorithm 1.
    """

    def __init__(
        self,
        rows: JaxRows,
        grad_clip: float,
        noise_multiplier: float,
        sampling_rate: float,
        neighbouring: str,
        noise: SecureNoise | None = None,
    ) -> None:
        super().__init__(rows, grad_clip, noise_multiplier, sampling_rate, neighbouring)
        self._noise = noise

    def release(self, theta_draws: np.ndarray, parameter_jacobians: list[np.ndarray], rng: Any) -> np.ndarray:
        """One noisy gradient estimate, shape (D,) (see the parent class)."""
        rng = _noise_source(self._noise, rng)
        batch = poisson_sample(rng, self._rows.n_rows, self.sampling_rate)
        jacobians = np.stack([np.asarray(m, dtype=float) for m in parameter_jacobians])
        z = rng.normal(0.0, 1.0, size=jacobians.shape[2])
        noisy = self._rows.noisy_batch_gradient_sum(theta_draws, jacobians, self.grad_clip, self.std, z, batch)
        return noisy / self.sampling_rate
