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

import numpy as np

from pymc_dp._validation import check_finite_positive, check_neighbouring

__all__ = [
    "NoisyBarkerStatistic",
    "NoisyClippedGradient",
    "NoisyLogLikelihoodRatio",
    "SecureNoise",
    "clip_l2",
    "clip_values",
    "clipped_sum_l2",
    "gaussian_noise",
    "laplace_noise",
    "noise_generator",
    "noisy_clipped_sum",
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
    scale = np.minimum(1.0, bound / np.maximum(norms, np.finfo(float).tiny))
    return safe * scale[:, None]


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
    scale = np.minimum(1.0, bound / np.maximum(norms, np.finfo(float).tiny))
    return scale @ rows


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


def noise_generator(rng: np.random.Generator, secure: bool) -> np.random.Generator | SecureNoise:
    """The noise source of a chain: OS entropy when ``secure``, else derived from ``rng``."""
    return SecureNoise() if secure else spawn_noise_rng(rng)


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
    data is as sensitive as the data (never publish it). Use :class:`SecureNoise`
    (``secure_noise=True`` on the steps) when reproducibility is not needed. NumPy's PCG64 is
    not a cryptographically secure generator.
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
        noisy, std = noisy_clipped_sum(
            proposed - current, self.llr_clip * distance, self.noise_multiplier, rng, self.neighbouring
        )
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
    mechanism-noise generator (OS entropy with ``secure_noise=True``).
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
