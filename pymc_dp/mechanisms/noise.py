"""Noise and generators: Gaussian and Laplace noise, the Gaussian mechanism on a clipped sum, the
OS-entropy noise source, the per-mechanism generators, and exact integer (discrete) Laplace and
Gaussian samplers (Canonne, Kamath and Steinke 2020)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
from fractions import Fraction

import numpy as np

from pymc_dp._validation import check_finite_positive
from pymc_dp.mechanisms.clipping import _check_bound, clip_values, sensitivity_of_clipped_sum

__all__ = [
    "SecureNoise",
    "clipped_sum_noise_std",
    "discrete_gaussian_noise",
    "discrete_laplace_noise",
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


def clipped_sum_noise_std(bound: float, noise_multiplier: float, neighbouring: str = "substitute") -> float:
    """σ = τ·Δ of the Gaussian mechanism on a sum of per-row scalars clipped to ±``bound``, from public values.

    Every implementation of that release (this module's :func:`noisy_clipped_sum`, the JAX and
    Dask backends, the data owners' ratios) takes σ from here, before any row is read. Δ is the
    sensitivity of the clipped sum under ``neighbouring``
    (:func:`~pymc_dp.clip_math.sensitivity_of_clipped_sum`). A zero bound gives σ = 0: every term
    is clipped to 0, so the sum is 0 whatever the data and is released as it is.

    Raises
    ------
    ValueError
        For a ``noise_multiplier`` that is not positive and finite, a negative, NaN or infinite
        ``bound``, or a positive bound whose σ underflows to 0 (its clipped sum would leave
        without noise).

    Notes
    -----
    Neighbouring relation: ``neighbouring``, substitute (Δ = 2·bound) or add/remove (Δ = bound).
    A release with this σ costs μ = 1/(2τ²) whatever the bound (Sommer et al. 2019, Lemma 12).
    """
    noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
    bound = _check_bound("bound", bound)
    if math.isinf(bound):
        raise ValueError(f"`bound` must be finite for a private release. Found {bound!r}.")
    std = noise_multiplier * sensitivity_of_clipped_sum(bound, neighbouring)
    if bound > 0.0 and std == 0.0:  # refused from public values, nothing read
        raise ValueError(
            f"`bound` × `noise_multiplier` must give a positive noise standard deviation. Found bound={bound!r} "
            f"and noise_multiplier={noise_multiplier!r}, whose noise underflows to 0."
        )
    return std


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
    std = clipped_sum_noise_std(bound, noise_multiplier, neighbouring)
    if std == 0.0:  # a zero bound: every term clipped to 0, the sum is 0 whatever the data, nothing to hide
        return 0.0, 0.0
    clipped_sum = float(np.sum(clip_values(values, bound)))
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


# -- exact integer noise (Canonne, Kamath and Steinke 2020, Algorithms 1-3) ----------------------------


def _randbelow(source: np.random.Generator | SecureNoise | None, n: int) -> int:
    """A uniform integer on {0, …, n − 1}, exactly: from the OS (:func:`secrets.randbelow`) unless ``source``
    is a NumPy generator (reproducible noise), whose uniform integers are exact too (bits, then rejection)."""
    if source is None or isinstance(source, SecureNoise):
        return secrets.randbelow(n)
    if n <= 2**64:
        return int(source.integers(n, dtype=np.uint64)) if n > 1 else 0
    bits = n.bit_length()
    extra = 8 * ((bits + 7) // 8) - bits
    while True:  # rejection: accepted with probability > 1/2
        value = int.from_bytes(source.bytes((bits + 7) // 8), "little") >> extra
        if value < n:
            return value


def _bernoulli_exp_unit(numerator: int, denominator: int, source) -> bool:
    """Bernoulli(exp(−γ)) for γ = numerator/denominator in [0, 1] (CKS 2020, Algorithm 1).

    Draws A_k ~ Bernoulli(γ/k) for k = 1, 2, … until the first A_k = 0 and returns whether that k is odd:
    P(K > k) = γᵏ/k!, so P(K odd) = Σ_{k odd} (γᵏ⁻¹/(k − 1)! − γᵏ/k!) = e^{−γ}.
    """
    k = 1
    while _randbelow(source, denominator * k) < numerator:
        k += 1
    return k % 2 == 1


def _bernoulli_exp(numerator: int, denominator: int, source) -> bool:
    """Bernoulli(exp(−γ)) for a rational γ = numerator/denominator ≥ 0: ⌊γ⌋ draws at γ = 1, then one at γ − ⌊γ⌋."""
    whole, rest = divmod(numerator, denominator)
    for _ in range(whole):
        if not _bernoulli_exp_unit(1, 1, source):
            return False
    return _bernoulli_exp_unit(rest, denominator, source)


def _discrete_laplace(t: int, s: int, source) -> int:
    """One draw of the discrete Laplace distribution of scale t/s: P(z) ∝ exp(−|z|·s/t) on ℤ (CKS 2020, Algorithm 2)."""
    while True:
        u = _randbelow(source, t)
        if not _bernoulli_exp(u, t, source):
            continue
        v = 0
        while _bernoulli_exp_unit(1, 1, source):
            v += 1
        y = (u + t * v) // s  # u + t·v is geometric with P(x) ∝ e^{−x/t}; y with P(y) ∝ e^{−y·s/t}
        if _randbelow(source, 2):
            if y == 0:
                continue
            return -y
        return y


def _discrete_gaussian(a: int, b: int, source) -> int:
    """One draw of the discrete Gaussian of variance parameter σ² = a/b: P(z) ∝ exp(−z²/(2σ²)) on ℤ (CKS 2020,
    Algorithm 3): a discrete Laplace proposal of scale t = ⌊σ⌋ + 1 accepted with probability
    exp(−(|y| − σ²/t)²/(2σ²)) = exp(−(|y|bt − a)²/(2abt²))."""
    t = math.isqrt(a // b) + 1
    while True:
        y = _discrete_laplace(t, 1, source)
        if _bernoulli_exp((abs(y) * b * t - a) ** 2, 2 * a * b * t * t, source):
            return y


def _positive_fraction(name: str, value: float | int | Fraction) -> Fraction:
    if isinstance(value, Fraction | int) and not isinstance(value, bool):
        exact = Fraction(value)
    else:
        exact = Fraction(check_finite_positive(name, value))
    if exact <= 0:
        raise ValueError(f"`{name}` must be > 0. Found {float(exact)!r}.")
    return exact


def _check_source(source: object) -> None:
    if source is not None and not isinstance(source, SecureNoise | np.random.Generator):
        raise TypeError(
            f"`source` must be None (OS entropy), a SecureNoise or a numpy Generator. Found {type(source).__name__}."
        )


def discrete_laplace_noise(
    scale: float | int | Fraction, size: int, source: np.random.Generator | SecureNoise | None = None
) -> list[int]:
    """``size`` independent draws of the discrete Laplace distribution on ℤ, sampled exactly.

    P(Z = z) = (1 − e^{−1/t})/(1 + e^{−1/t}) · e^{−|z|/t} with t = ``scale``, by Algorithm 2 of
    Canonne, Kamath and Steinke (2020): only integer arithmetic and uniform integers, no floating
    point, so the distribution is exactly the one stated.

    Parameters
    ----------
    scale : float, int or Fraction
        t > 0, in grid units; a float is taken at its exact binary value.
    size : int
        How many draws.
    source : None, SecureNoise or numpy Generator, default None
        Where the uniform integers come from: None or a :class:`SecureNoise` read the operating
        system's CSPRNG (:func:`secrets.randbelow`); a numpy Generator gives reproducible noise
        (for testing; do not publish).

    Returns
    -------
    list of int
        Python integers (never rounded, however large).

    Notes
    -----
    With integer sensitivity Δ (L1, in grid units), adding independent draws of scale t = Δ/ε to
    an integer vector is (ε, 0)-DP with every output reachable from every input: the ratio of
    the probabilities of any output under neighbouring inputs is exp((‖o − y′‖₁ − ‖o − y‖₁)/t)
    ≤ exp(Δ/t) = e^ε. The variance is 2e^{−1/t}/(1 − e^{−1/t})², that of Laplace(t) minus
    1/6 + O(1/t²).

    References
    ----------
    .. [1] Canonne, C. L., Kamath, G. and Steinke, T. (2020). The discrete Gaussian for
       differential privacy. NeurIPS, Algorithms 1 and 2.
    """
    exact = _positive_fraction("scale", scale)
    size = _check_size(size)
    _check_source(source)
    return [_discrete_laplace(exact.numerator, exact.denominator, source) for _ in range(size)]


def discrete_gaussian_noise(
    variance: float | int | Fraction, size: int, source: np.random.Generator | SecureNoise | None = None
) -> list[int]:
    """``size`` independent draws of the discrete Gaussian distribution on ℤ, sampled exactly.

    P(Z = z) ∝ exp(−z²/(2σ²)) with σ² = ``variance``, by Algorithm 3 of Canonne, Kamath and
    Steinke (2020) (exact rejection from a discrete Laplace proposal; integer arithmetic only).

    Parameters
    ----------
    variance : float, int or Fraction
        σ² > 0, in squared grid units; a float is taken at its exact binary value.
    size : int
        How many draws.
    source : None, SecureNoise or numpy Generator, default None
        As for :func:`discrete_laplace_noise`: OS entropy unless a numpy Generator is given.

    Returns
    -------
    list of int

    Notes
    -----
    Adding independent draws to an integer vector whose L2 sensitivity is Δ (grid units) is
    Δ²/(2σ²)-zCDP, the same ρ as the continuous Gaussian mechanism (CKS 2020, the
    multivariate discrete Gaussian's concentrated DP). The variance is below σ² and equals it
    up to a relative error of order e^{−2π²σ²} (CKS 2020); the releases use σ ≥ 2¹⁰ (2²⁰·N unless bounds
    reach far beyond the noise scale).

    References
    ----------
    .. [1] Canonne, C. L., Kamath, G. and Steinke, T. (2020). The discrete Gaussian for
       differential privacy. NeurIPS, Algorithm 3.
    """
    exact = _positive_fraction("variance", variance)
    size = _check_size(size)
    _check_source(source)
    return [_discrete_gaussian(exact.numerator, exact.denominator, source) for _ in range(size)]


def _check_size(size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or int(size) < 0:
        raise ValueError(f"`size` must be a non-negative integer. Found {size!r}.")
    return int(size)
