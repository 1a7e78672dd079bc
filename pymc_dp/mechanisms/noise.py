"""Noise and generators: Gaussian and Laplace noise, the Gaussian mechanism on a clipped sum, the
OS-entropy noise source and the per-mechanism generators."""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets

import numpy as np

from pymc_dp._validation import check_finite_positive
from pymc_dp.mechanisms.clipping import _check_bound, clip_values, sensitivity_of_clipped_sum

__all__ = [
    "SecureNoise",
    "gaussian_noise",
    "laplace_noise",
    "mechanism_rng",
    "noisy_clipped_sum",
    "spawn_noise_rng",
]


def gaussian_noise(
    rng: np.random.Generator, std: float, size: int | tuple[int, ...] | None = None
) -> np.ndarray | float:
    """Draw N(0, std²) noise from ``rng``; ``std`` must be finite and > 0."""
    std = check_finite_positive("std", std)
    return rng.normal(0.0, std, size=size)


def laplace_noise(
    rng: np.random.Generator, scale: float, size: int | tuple[int, ...] | None = None
) -> np.ndarray | float:
    """Draw Laplace(0, scale) noise from ``rng``; ``scale`` must be finite and > 0."""
    scale = check_finite_positive("scale", scale)
    return rng.laplace(0.0, scale, size=size)


def noisy_clipped_sum(
    values: np.ndarray,
    bound: float,
    noise_multiplier: float,
    rng: np.random.Generator | SecureNoise,
    neighbouring: str = "substitute",
) -> tuple[float, float]:
    """The Gaussian mechanism on a sum of per-row scalars clipped to ±bound.

    Returns Σᵢ clip(vᵢ, ±bound) + N(0, σ²) with σ = τ·Δ, where Δ is the sensitivity of the
    clipped sum under ``neighbouring`` and τ = ``noise_multiplier``. A zero bound releases
    pure noise-free zero (nothing about the data), with σ = 0.

    Returns
    -------
    (noisy_sum, std)
        The release and the noise standard deviation σ used.

    Notes
    -----
    Each call is one Gaussian release costing μ = 1/(2τ²) (Sommer et al. 2019, Lemma 12),
    whatever the bound, because σ scales with Δ.
    """
    noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
    bound = _check_bound("bound", bound)
    if math.isinf(bound):
        raise ValueError(f"`bound` must be finite for a private release. Found {bound!r}.")
    clipped_sum = float(np.sum(clip_values(values, bound)))
    std = noise_multiplier * sensitivity_of_clipped_sum(bound, neighbouring)
    if std == 0.0:
        return clipped_sum, 0.0
    return clipped_sum + float(rng.normal(0.0, std)), std


#: The largest double below 1: (2⁵³ − 1 + ½)/2⁵³ rounds up to 1.0, which would make a Laplace variate infinite
#: and a uniform index out of range; that one value is taken as 1 − 2⁻⁵³ instead (off by 2⁻⁵⁴).
_BELOW_ONE = 1.0 - 2.0**-53


def _open_unit(words: np.ndarray) -> np.ndarray:
    """Uniforms on (0, 1) from 53-bit integers k: (k + ½)/2⁵³, the top one kept below 1."""
    return np.minimum((words.astype(np.float64) + 0.5) / 2.0**53, _BELOW_ONE)


class SecureNoise:
    """Gaussian and Laplace noise from the operating system's CSPRNG (``os.urandom``).

    Not reproducible by design: nobody, including whoever knows PyMC's ``random_seed``, can
    regenerate the noise and subtract it from a release. Uniforms carry 53 random bits;
    Gaussians use the Box–Muller transform and Laplace variates the inverse CDF. Like any
    floating-point noise it remains open to precision attacks (Mironov 2012).
    """

    @staticmethod
    def _uniform(size: int) -> np.ndarray:
        """Uniforms on (0, 1) with 53 random bits each."""
        words = np.frombuffer(os.urandom(8 * size), dtype=np.uint64) >> np.uint64(11)
        return _open_unit(words)

    def normal(self, loc: float = 0.0, scale: float = 1.0, size: int | tuple[int, ...] | None = None):
        count = 1 if size is None else int(np.prod(size))
        u1, u2 = self._uniform(count), self._uniform(count)
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        out = loc + scale * z
        return float(out[0]) if size is None else out.reshape(size)

    def laplace(self, loc: float = 0.0, scale: float = 1.0, size: int | tuple[int, ...] | None = None):
        count = 1 if size is None else int(np.prod(size))
        u = self._uniform(count) - 0.5
        out = loc - scale * np.sign(u) * np.log1p(-2.0 * np.abs(u))
        return float(out[0]) if size is None else out.reshape(size)

    def uniform(self, low: float = 0.0, high: float = 1.0, size: int | tuple[int, ...] | None = None):
        count = 1 if size is None else int(np.prod(size))
        out = low + (high - low) * self._uniform(count)
        return float(out[0]) if size is None else out.reshape(size)

    def geometric(self, p: float, size: int | tuple[int, ...] | None = None):
        """Geometric(p) variates on {1, 2, ...} (trials up to the first success), by the inverse CDF.

        K = ⌈log U / log(1 − p)⌉ with U uniform on (0, 1): P(K > k) = P(U < (1 − p)ᵏ) = (1 − p)ᵏ,
        the rule NumPy's generators use for small p, here on 53-bit uniforms from the OS. Values
        are held at 2⁶² (reached only for p below about 10⁻¹⁷), so they stay int64.
        """
        if not 0.0 < float(p) <= 1.0:
            raise ValueError(f"`p` must be in (0, 1]. Found {p!r}.")
        count = 1 if size is None else int(np.prod(size))
        if float(p) == 1.0:
            out = np.ones(count, dtype=np.int64)
        else:
            gaps = np.ceil(np.log(self._uniform(count)) / np.log1p(-float(p)))
            out = np.clip(gaps, 1.0, 2.0**62).astype(np.int64)  # p below ~1e-17: gaps past int64, held at 2⁶²
        return int(out[0]) if size is None else out.reshape(size)

    def choice(self, n: int, size: int, replace: bool = False) -> np.ndarray:
        """``size`` distinct indices from range(n), uniformly (Floyd's algorithm); ``replace`` must be False."""
        if replace:
            raise ValueError("`replace` must be False for SecureNoise.choice. Found True.")
        chosen: dict[int, None] = {}
        u = self._uniform(size)
        for i, j in enumerate(range(n - size, n)):
            t = int(u[i] * (j + 1))  # uniform on 0..j
            chosen[j if t in chosen else t] = None
        return np.fromiter(chosen, dtype=np.int64, count=size)


def mechanism_rng(seed_source: np.random.Generator | None, reproducible: bool) -> np.random.Generator:
    """The generator of one mechanism's secret randomness: its noise and its batch selection.

    Every mechanism of the package (each chain of a DP step, each data owner, each DPADVI
    fit, each sufficient-statistics release, each one-posterior-sample draw) gets its
    generator here, and nowhere else.

    Parameters
    ----------
    seed_source : numpy.random.Generator or None
        The (seeded, data-free) generator that a reproducible noise generator is derived
        from, without advancing it (:func:`spawn_noise_rng`). Ignored unless ``reproducible``.
    reproducible : bool
        False (the default everywhere): a fresh ``Generator(PCG64)`` seeded with 128 bits
        from the operating system's CSPRNG (:func:`secrets.randbits`). True: derived from
        ``seed_source`` — **for testing; do not publish**: whoever knows the seed can
        regenerate the noise and subtract it from the releases.

    Returns
    -------
    numpy.random.Generator

    Notes
    -----
    With ``reproducible=False`` the noise is independent of PyMC's ``random_seed`` and of
    every other mechanism's noise: two runs with the same seed never share noise, so
    subtracting two published results reveals nothing beyond what each reveals. The 128-bit
    OS-entropy seed lives only inside the generator's state in this process: it is never
    returned, logged, stored in a result or sent to another process (a chain run in a
    worker process draws its own seed there). PCG64 itself is not a cryptographic generator:
    an adversary who saw many of its raw outputs could in principle recover its state
    (Bouillaguet et al. 2020); the releases expose the noise only added to data-dependent
    sums and transformed to floating point. Drawing every variate from ``os.urandom``
    instead (:class:`SecureNoise`, what the JAX backend does) costs about 20 µs per scalar
    draw against under 1 µs (a few µs per variate when read in blocks); Poisson batches take
    O(qN) geometric gaps from either.

    References
    ----------
    .. [1] Bouillaguet, C., Martinez, F. and Sauvage, J. (2020). Practical seed-recovery for
       the PCG pseudo-random number generator. IACR Transactions on Symmetric Cryptology.
    """
    if not isinstance(reproducible, bool | np.bool_):
        raise TypeError(f"`reproducible` must be a bool. Found {type(reproducible).__name__}.")
    if not reproducible:
        return np.random.Generator(np.random.PCG64(secrets.randbits(128)))
    if not isinstance(seed_source, np.random.Generator):
        raise TypeError(
            f"`seed_source` must be a numpy Generator when `reproducible` is True. Found {type(seed_source).__name__}."
        )
    return spawn_noise_rng(seed_source)


def spawn_noise_rng(rng: np.random.Generator) -> np.random.Generator:
    """A generator for mechanism noise, derived from the chain's generator.

    The child is seeded from a hash of ``rng``'s current state, without advancing it, so it
    is reproducible from PyMC's ``random_seed`` whether the chain runs in this process or
    in a worker (where PyMC rebuilds the generator from its state and ``Generator.spawn``
    would draw fresh OS entropy), and it leaves the proposal stream untouched.

    Notes
    -----
    The noise is then a deterministic function of PyMC's ``random_seed``: anyone who knows
    the seed can regenerate it and subtract it from the releases, so a seed used with real
    data is as sensitive as the data (never publish it). The package uses it only with
    ``reproducible_noise=True`` (for testing; do not publish), through :func:`mechanism_rng`;
    by default the noise comes from OS entropy. NumPy's PCG64 is not a cryptographically
    secure generator.
    """
    state = json.dumps(rng.bit_generator.state, sort_keys=True, default=str).encode()
    digest = hashlib.sha256(b"pymc-dp mechanism noise\0" + state).digest()
    entropy = [int.from_bytes(digest[i : i + 8], "little") for i in range(0, 32, 8)]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))
