"""The mechanism layer: where data-dependent numbers become releasable.

Everything a sampler may release about the data passes through here: per-row values are
clipped (bounding each row's influence, i.e. the sensitivity), summed, and perturbed with
calibrated noise. The step methods call these functions with the raw per-row values they
got from :mod:`pymc_dp.data` and keep only the returned noisy result. This is the code to
audit.

Every privacy parameter is validated before use: a negative or NaN clip bound, a
non-positive noise scale or a δ outside (0, 1) is an error, never silently accepted.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive, check_neighbouring, check_sampling_rate

__all__ = [
    "NoisyBarkerStatistic",
    "NoisyClippedGradient",
    "NoisyLogLikelihoodRatio",
    "NoisySufficientStatistics",
    "OwnerLogLikelihoodRatio",
    "RowMechanisms",
    "SecureNoise",
    "clip_l2",
    "clip_values",
    "clipped_sum_l2",
    "clipped_sum_l2_linear",
    "gaussian_noise",
    "laplace_noise",
    "laplace_sufficient_statistics",
    "mechanism_rng",
    "model_access",
    "noisy_clipped_sum",
    "poisson_sample",
    "sample_without_replacement",
    "sensitivity_of_clipped_sum",
    "spawn_noise_rng",
]


def _check_bound(name: str, bound: float) -> float:
    bound = float(bound)
    if math.isnan(bound) or bound < 0:
        raise ValueError(f"`{name}` must be a non-negative number (inf disables clipping). Found {bound!r}.")
    return bound


def clip_values(values: np.ndarray, bound: float) -> np.ndarray:
    """Clip every entry of ``values`` to [−bound, bound].

    NaN entries are mapped to −bound so that a row whose value cannot be computed still has
    bounded influence (treated as the least favourable value for an acceptance ratio).

    Parameters
    ----------
    values : ndarray
        Per-row values.
    bound : float
        Clip bound ≥ 0; ``inf`` disables clipping (and then sensitivity is unbounded).

    Returns
    -------
    ndarray
        A new clipped array.
    """
    bound = _check_bound("bound", bound)
    values = np.asarray(values, dtype=float)
    out = np.clip(values, -bound, bound)
    out[np.isnan(out)] = -bound
    return out


def clip_l2(rows: np.ndarray, bound: float) -> np.ndarray:
    """Scale each row of ``rows`` (shape rows × dims) to L2 norm at most ``bound``.

    Rows with a non-finite entry are replaced by zeros (their influence is then bounded).
    """
    bound = _check_bound("bound", bound)
    rows = np.asarray(rows, dtype=float)
    if rows.ndim != 2:
        raise ValueError(f"`rows` must be a 2-d array (rows × dims). Found shape {rows.shape}.")
    finite = np.all(np.isfinite(rows), axis=1)
    safe = np.where(finite[:, None], rows, 0.0)
    if math.isinf(bound):
        return safe
    norms = np.sqrt(np.einsum("ij,ij->i", safe, safe))
    scale = _clip_factors(norms, bound)
    return safe * scale[:, None]


def _clip_factors(norms: np.ndarray, bound: float) -> np.ndarray:
    """min(1, bound/‖row‖) for every row norm (1 for zero rows, without dividing by zero)."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        return np.where(norms > bound, bound / norms, 1.0)


def clipped_sum_l2(rows: np.ndarray, bound: float) -> np.ndarray:
    """Σᵢ clip_L2(rowᵢ, bound): the same as ``clip_l2(rows, bound).sum(axis=0)``, in two passes.

    Computes the row norms, then one matrix-vector product with the clip factors, instead of
    materialising the clipped matrix. Rows with a non-finite entry contribute zero.
    """
    bound = _check_bound("bound", bound)
    rows = np.asarray(rows, dtype=float)
    if rows.ndim != 2:
        raise ValueError(f"`rows` must be a 2-d array (rows × dims). Found shape {rows.shape}.")
    with np.errstate(invalid="ignore", over="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    finite = np.isfinite(norms)
    if not finite.all():
        rows = np.where(finite[:, None], rows, 0.0)
        norms = np.where(finite, norms, 0.0)
    scale = _clip_factors(norms, bound)
    return scale @ rows


def clipped_sum_l2_linear(rows: np.ndarray, linear_map: np.ndarray, bound: float) -> np.ndarray:
    """Σᵢ clip_L2(rowᵢ M, bound) without forming the (rows × D) matrix of rowᵢ M.

    ‖rowᵢ M‖² = rowᵢ (M Mᵀ) rowᵢᵀ, so the norms cost O(B P²) and the sum (Σᵢ sᵢ rowᵢ) M, where
    M is (P × D). Equal to ``clipped_sum_l2(rows @ linear_map, bound)``; rows with a
    non-finite entry contribute zero.
    """
    bound = _check_bound("bound", bound)
    rows = np.asarray(rows, dtype=float)
    linear_map = np.asarray(linear_map, dtype=float)
    if rows.ndim != 2 or linear_map.ndim != 2 or rows.shape[1] != linear_map.shape[0]:
        raise ValueError(
            f"`rows` (B × P) and `linear_map` (P × D) must be 2-d and conformable. Found shapes {rows.shape} and "
            f"{linear_map.shape}."
        )
    with np.errstate(invalid="ignore", over="ignore"):
        norms = np.sqrt(np.maximum(np.einsum("ij,ij->i", rows @ (linear_map @ linear_map.T), rows), 0.0))
    finite = np.isfinite(norms)
    if not finite.all():
        rows = np.where(finite[:, None], rows, 0.0)
        norms = np.where(finite, norms, 0.0)
    scale = _clip_factors(norms, bound)
    return (scale @ rows) @ linear_map


def sensitivity_of_clipped_sum(bound: float, neighbouring: str = "substitute") -> float:
    """L2 sensitivity of a sum of rows each clipped to norm ``bound``.

    Substitute neighbours (one row replaced): 2·bound. Add/remove neighbours: bound.
    """
    bound = _check_bound("bound", bound)
    neighbouring = check_neighbouring("neighbouring", neighbouring)
    return (2.0 if neighbouring == "substitute" else 1.0) * bound


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
        return (words.astype(np.float64) + 0.5) / 2.0**53

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
    instead (:class:`SecureNoise`) costs about 20 µs per scalar draw against under 1 µs,
    and one uniform per row for Poisson batches instead of O(qN) geometric gaps.

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
        Relation the sensitivity is computed under.

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


def sample_without_replacement(rng: np.random.Generator | SecureNoise, n_rows: int, batch_size: int) -> np.ndarray:
    """A uniformly random subset of ``batch_size`` distinct row indices out of ``n_rows``.

    The fixed-size sampling without replacement that subsampling amplification by Wang,
    Balle and Kasiviswanathan (2019) assumes. The subset is secret: draw it from the
    mechanism-noise generator (:func:`mechanism_rng`: OS entropy by default).
    """
    if not 0 < batch_size < n_rows:
        raise ValueError(f"`batch_size` must lie in 1..{n_rows - 1} (fewer than the rows). Found {batch_size}.")
    return np.asarray(rng.choice(n_rows, batch_size, replace=False), dtype=np.int64)


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
        ratios = self._rows.loglik_ratio_rows(theta, theta_proposed, batch)
        clipped = clip_values(ratios, self.llr_clip)
        n0, b = self.likelihood_scale, clipped.size
        batch_variance = n0 * n0 * float(np.var(clipped)) / b
        # |clipped| ≤ c ≤ √b/N₀ gives np.var ≤ c², so s² ≤ 1 (up to rounding).
        batch_variance = min(batch_variance, 1.0)
        noise_std = math.sqrt(self.correction_variance - batch_variance)
        return n0 * float(np.mean(clipped)) + float(rng.normal(0.0, noise_std))


class NoisyClippedGradient:
    """The DP-HMC gradient release: clipped per-row gradients, summed, plus Gaussian noise.

    Releases Σᵢ clip_L2(∇θ log p(xᵢ | θ), b_g) + ξ with ξ ~ N(0, σ² I), σ = τ Δ and
    Δ = 2 b_g (substitute neighbours) or b_g (add/remove), the L2 sensitivity of the clipped
    sum. The per-row gradients never leave this object.

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        The data access for the step's parameters.
    grad_clip : float
        b_g > 0, the L2 bound on each row's gradient.
    noise_multiplier : float
        τ_g > 0, noise standard deviation per unit of sensitivity.
    neighbouring : {"substitute", "add_remove"}
        Relation the sensitivity is computed under.

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
        self.grad_clip = check_finite_positive("grad_clip", grad_clip)
        self.noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        self.neighbouring = check_neighbouring("neighbouring", neighbouring)
        self.std = self.noise_multiplier * sensitivity_of_clipped_sum(self.grad_clip, self.neighbouring)

    def release(self, theta: np.ndarray, rng: np.random.Generator | SecureNoise) -> np.ndarray:
        """One noisy clipped gradient of the log-likelihood at θ, shape (P,)."""
        clipped_sum = clipped_sum_l2(self._rows.grad_rows(np.asarray(theta, dtype=float)), self.grad_clip)
        return clipped_sum + rng.normal(0.0, self.std, size=clipped_sum.shape)


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
    rows = family.check_data(data, out_of_bounds)
    n_rows = int(np.asarray(rows).shape[0])
    exact = family.row_statistics(rows).sum(axis=0)
    scale = family.l1_sensitivity() / epsilon
    if scale == 0.0:  # every row has the same statistic: S = N·S(x) is public
        return family.project(exact, n_rows), 0.0, n_rows
    noisy = exact + np.asarray(rng.laplace(0.0, scale, size=exact.shape), dtype=float)
    return family.project(noisy, n_rows), scale, n_rows


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
        self.noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        self.family = family
        rows = family.check_data(data, out_of_bounds)
        self.n_rows = int(np.asarray(rows).shape[0])
        self._statistics = family.row_statistics(rows).sum(axis=0)
        self.variance = (self.noise_multiplier * family.l2_sensitivity()) ** 2  # ξ

    def __getstate__(self) -> dict:
        raise TypeError("NoisySufficientStatistics holds exact statistics and cannot be pickled.")

    def release(self, rng: np.random.Generator | SecureNoise) -> np.ndarray:
        """One fresh Ŝ ~ N(S, ξ I)."""
        if self.variance == 0.0:
            return self._statistics.copy()
        return self._statistics + np.asarray(rng.normal(0.0, math.sqrt(self.variance), size=self._statistics.shape))


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
        return self.noise_multiplier * sensitivity_of_clipped_sum(self.llr_clip * distance, self.neighbouring)


def poisson_sample(rng: np.random.Generator | SecureNoise, n_rows: int, sampling_rate: float) -> np.ndarray:
    """Poisson sampling: every row of ``n_rows`` joins the batch independently with probability q.

    The batch size is random (Binomial(N, q)); this is the sampling that the Poisson
    subsampled-Gaussian accountant assumes. With a NumPy generator the included rows are
    found by their gaps, which in a sequence of independent Bernoulli(q) trials are
    independent Geometric(q) variables: exactly the same distribution at O(qN) cost.
    :class:`SecureNoise` draws one uniform per row. The batch is secret: draw it from the
    mechanism-noise generator. Returns the sorted row indices.
    """
    q = check_sampling_rate("sampling_rate", sampling_rate)
    if q == 1.0:
        return np.arange(n_rows, dtype=np.int64)
    if isinstance(rng, SecureNoise):
        return np.flatnonzero(rng.uniform(size=n_rows) < q).astype(np.int64)
    expected = n_rows * q
    chunk = int(expected + 6.0 * math.sqrt(expected) + 8)
    positions = np.cumsum(rng.geometric(q, size=chunk)) - 1  # index of each included row
    while positions[-1] < n_rows:  # rarely: more gaps are needed to pass the last row
        positions = np.concatenate([positions, positions[-1] + np.cumsum(rng.geometric(q, size=chunk))])
    return positions[: np.searchsorted(positions, n_rows)].astype(np.int64, copy=False)


class NoisyPoissonGradientSum:
    """The DP-SGD / DPADVI release: a Poisson batch of clipped per-row gradients, summed, plus noise.

    One release draws a Poisson batch S (each row with probability q), computes each batch
    row's gradient with respect to the optimised parameters, clips it to L2 norm C, sums,
    adds ξ ~ N(0, σ²Δ² I) with Δ = 2C (substitute) or C (add/remove), and divides by q:

        ĝ = (Σ_{i∈S} clip_C(gᵢ) + ξ) / q,

    an unbiased estimate of Σᵢ gᵢ over all N rows when nothing is clipped and ξ = 0 (the
    expected batch size qN normalises, never the realised one, which would be data-
    dependent under add/remove). Only ĝ leaves this object.

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        Data access for the model's parameters θ.
    clip : float
        C > 0, finite: the L2 bound on each row's gradient.
    noise_multiplier : float
        σ > 0: noise standard deviation per unit of sensitivity Δ.
    sampling_rate : float
        q in (0, 1].
    neighbouring : {"substitute", "add_remove"}

    Notes
    -----
    Each release is one Poisson-subsampled Gaussian mechanism, accounted by
    :class:`pymc_dp.accounting.pld.PoissonGaussianReleases` with the same σ and q. The
    per-row gradient is taken with respect to the variational parameters, through the
    linear maps that :meth:`release` receives: data-free functions of the parameters and
    the Monte Carlo draws (the reparameterisation's chain rule).

    References
    ----------
    .. [1] Jälkö, J., Dikmen, O. and Honkela, A. (2017). Differentially private variational
       inference for non-conjugate models. UAI, Algorithm 1.
    .. [2] Abadi, M. et al. (2016). Deep learning with differential privacy. CCS, Algorithm 1.
    """

    def __init__(
        self, rows, clip: float, noise_multiplier: float, sampling_rate: float, neighbouring: str = "substitute"
    ) -> None:
        self._rows = rows
        self.clip = check_finite_positive("clip", clip)
        self.noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        self.sampling_rate = check_sampling_rate("sampling_rate", sampling_rate)
        self.neighbouring = check_neighbouring("neighbouring", neighbouring)
        self.std = self.noise_multiplier * sensitivity_of_clipped_sum(self.clip, self.neighbouring)

    def release(
        self, theta_draws: np.ndarray, parameter_jacobians: list[np.ndarray], rng: np.random.Generator | SecureNoise
    ) -> np.ndarray:
        """One noisy gradient estimate, shape (D,).

        Parameters
        ----------
        theta_draws : ndarray, shape (S, P)
            Points θ_s at which each batch row's log-likelihood gradient gᵢ(θ_s) is taken.
        parameter_jacobians : list of S ndarrays, shape (P, D)
            Data-free maps M_s: row i's gradient with respect to the D optimised parameters
            is mean_s gᵢ(θ_s) M_s (the reparameterisation's chain rule).
        rng : numpy Generator or SecureNoise
            Draws the batch and the noise.
        """
        batch = poisson_sample(rng, self._rows.n_rows, self.sampling_rate)
        draws = np.atleast_2d(theta_draws)
        if len(draws) == 1:
            clipped = clipped_sum_l2_linear(self._rows.grad_rows(draws[0], batch), parameter_jacobians[0], self.clip)
        else:
            per_row = sum(self._rows.grad_rows(t, batch) @ m for t, m in zip(draws, parameter_jacobians, strict=True))
            clipped = clipped_sum_l2(per_row / len(draws), self.clip)
        return (clipped + rng.normal(0.0, self.std, size=clipped.shape)) / self.sampling_rate


class RowMechanisms:
    """The mechanisms of one model's rows: the only route from a step method or DPADVI to its data.

    Steps and DPADVI receive this object and a data-free :class:`pymc_dp.data.PriorDensity`
    (:func:`model_access`), never the per-row functions: everything they get back from here is
    a mechanism whose ``release`` clips and noises before it returns. ``n_rows`` and
    ``n_params`` are public settings (N is public under substitute neighbours).
    """

    def __init__(self, rows) -> None:
        self._rows = rows
        self.n_rows = rows.n_rows
        self.n_params = rows.n_params

    def log_likelihood_ratio(
        self, llr_clip: float, noise_multiplier: float, neighbouring: str
    ) -> NoisyLogLikelihoodRatio:
        """A :class:`NoisyLogLikelihoodRatio` on every row."""
        return NoisyLogLikelihoodRatio(self._rows, llr_clip, noise_multiplier, neighbouring)

    def clipped_gradient(self, grad_clip: float, noise_multiplier: float, neighbouring: str) -> NoisyClippedGradient:
        """A :class:`NoisyClippedGradient` on every row."""
        return NoisyClippedGradient(self._rows, grad_clip, noise_multiplier, neighbouring)

    def barker_statistic(self, **settings: Any) -> NoisyBarkerStatistic:
        """A :class:`NoisyBarkerStatistic` (settings by name, as its constructor takes them)."""
        return NoisyBarkerStatistic(self._rows, **settings)

    def poisson_gradient_sum(
        self, clip: float, noise_multiplier: float, sampling_rate: float, neighbouring: str
    ) -> NoisyPoissonGradientSum:
        """A :class:`NoisyPoissonGradientSum` on Poisson batches of the rows."""
        return NoisyPoissonGradientSum(self._rows, clip, noise_multiplier, sampling_rate, neighbouring)

    def owner_ratio(
        self, owner_rows: np.ndarray, llr_clip: float, noise_multiplier: float, rng: Any, neighbouring: str
    ) -> OwnerLogLikelihoodRatio:
        """One owner's :class:`OwnerLogLikelihoodRatio`, on that owner's rows alone."""
        rows, index = self._rows, np.asarray(owner_rows, dtype=np.int64)
        return OwnerLogLikelihoodRatio(
            lambda theta: rows.loglik_rows(theta, index), llr_clip, noise_multiplier, rng, neighbouring
        )

    def check_subsets(self) -> None:
        """Build the subset path now (raises ``ModelStructureError`` if it disagrees with all rows); releases nothing.

        Mechanisms on row subsets (DPBarkerMH's batches, DPADVI's Poisson batches) call it
        before anything is charged, so that the subset-vs-slice probe refuses a model then,
        not at the first batch.
        """
        _ = self._rows.subset_mode

    def check_differentiable(self) -> None:
        """Build the per-row gradient now (raises if the likelihood is not differentiable); releases nothing."""
        self._rows.warm_gradient()


def model_access(model, value_vars, shared, initial_point, compile_kwargs, neighbouring: str = "substitute"):
    """The data-free prior and the row mechanisms of ``model`` for the parameters ``value_vars``.

    The one place a step method or DPADVI reaches its model's data: it gets back a
    :class:`pymc_dp.data.PriorDensity` (no row data) and a :class:`RowMechanisms`.
    ``neighbouring`` is the relation of the mechanisms: under add/remove N is private and a
    per-row log-likelihood that depends on it is refused (:func:`pymc_dp.data.row_loglik`).
    """
    from pymc_dp.data import RowLikelihood

    rows = RowLikelihood(
        model,
        value_vars,
        shared,
        initial_point=initial_point,
        compile_kwargs=compile_kwargs,
        neighbouring=neighbouring,
    )
    return rows.prior, RowMechanisms(rows)
