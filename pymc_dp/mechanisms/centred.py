"""Centred releases: each iteration releases only each row's residual against its expansion at a private anchor.

The penalty test's plain release clips every row's log-likelihood ratio at b‖θ′ − θ‖, so its
noise is proportional to the step and the chain's total travel is bounded whatever the number
of iterations (``docs/centred.md``). Here the data are read once at a public anchor θ̂ (a DP
start, or a point the caller gives) and the clipped sum of the per-row scores there is
released once,

    Ĝ = Σᵢ g̃ᵢ + η,   g̃ᵢ = clip_L2(∇θ log p(xᵢ | θ̂), b_g),   η ~ N(0, σ_G² I),   σ_G = τ_G Δ_G,

(:class:`CentringAnchor`, the existing gradient mechanism). Every later release reads only each
row's residual against its first-order expansion at θ̂:

- **ratio** (DPPenaltyMH, DPHMC's test), for θ → θ′ with Δθ = θ′ − θ,
  rᵢ = ℓᵢ(θ′) − ℓᵢ(θ) − g̃ᵢᵀΔθ, clipped to ±c with c = κ‖Δθ‖·max(‖θ − θ̂‖, ‖θ′ − θ̂‖), and
  λ̂ = Σᵢ clip(rᵢ, ±c) + ξ + ĜᵀΔθ, ξ ~ N(0, (τΔ)²);
- **gradient** (DPHMC), at θ: ĝ(θ) = Ĝ + Σᵢ clip_L2(gᵢ(θ) − g̃ᵢ, κ‖θ − θ̂‖) + ξ,
  ξ ~ N(0, (τ_gΔ)² I).

κ is a public constant: a per-row bound on the Lipschitz constant of the score,
‖gᵢ(a) − gᵢ(b)‖ ≤ κ‖a − b‖ (for logistic regression with ‖xᵢ‖ ≤ B, κ = B²/4). If it holds
for row i and g̃ᵢ = gᵢ(θ̂) (the anchor gradient not clipped), then by the mean value theorem
|rᵢ| = |∫₀¹ (gᵢ(θ + tΔθ) − gᵢ(θ̂))ᵀΔθ dt| ≤ κ‖Δθ‖·max_t ‖θ + tΔθ − θ̂‖ = c (the norm is
convex, so its maximum on the segment is at an end) and ‖gᵢ(θ) − g̃ᵢ‖ ≤ κ‖θ − θ̂‖: nothing
is clipped. Rows that break it are clipped, which biases the chain but never weakens privacy.

Notes
-----
**Neighbouring relation.** Substitute (N public, one row replaced) or add/remove, as set; the
anchor and every centred release must use the same one.

**Sensitivity.** Each row's term is clipped to ±c (the ratio) or to L2 norm κ‖θ − θ̂‖ (the
gradient), and depends on that row alone (g̃ᵢ is row i's own clipped anchor score). The clip
bounds are functions of θ, θ′, θ̂ and κ only: public (θ and θ′ are the chain's released
states, θ̂ is public by assumption). So the sum moves by at most Δ = 2c (2κ‖θ − θ̂‖) under
substitute, c (κ‖θ − θ̂‖) under add/remove, and σ = τΔ makes every release a Gaussian
mechanism with Δ/σ = 1/τ: μ = 1/(2τ²) (Sommer et al. 2019, Lemma 12), whatever θ, θ′ and the
data. Adding ĜᵀΔθ (or Ĝ) is post-processing of a released value.

**What ε covers.** The anchor's one gradient release (μ = 1/(2τ_G²)) plus every centred
release of every chain, tuning included: the same Gaussian composition as the plain steps,
with one extra event. The anchor point θ̂ itself is *not* covered here: it must be public
(a DP start, already charged, or a data-free point).

**The anchor's noise.** λ̂ is an unbiased estimate of the log-likelihood ratio plus ηᵀΔθ, so
without clipping the penalty test leaves p(θ | X)·exp(ηᵀθ) invariant, not the posterior: a
fixed tilt whose effect on the mean is about Σ_post η, η ~ N(0, σ_G² I) with σ_G public.
:func:`widen_for_anchor_noise` widens released draws by that known covariance.

References
----------
.. [1] Bardenet, R., Doucet, A. and Holmes, C. (2017). On Markov chain Monte Carlo methods for
   tall data. JMLR 18, §7 (control variates around a reference point).
.. [2] Yıldırım, S. and Ermiş, B. (2019). Exact MCMC with differentially private moves.
   Statistics and Computing 29 (the penalty test).
.. [3] Sommer, D. M., Meiser, S. and Mohammadi, E. (2019). Privacy loss classes. PoPETs,
   Lemma 12.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent
from pymc_dp.mechanisms.clipping import clip_l2, clipped_sum_l2, row_chunks, sensitivity_of_clipped_sum
from pymc_dp.mechanisms.gradient import NoisyClippedGradient
from pymc_dp.mechanisms.log_likelihood_ratio import NoisyLogLikelihoodRatio
from pymc_dp.mechanisms.noise import noisy_clipped_sum

__all__ = [
    "CentredClippedGradient",
    "CentredLogLikelihoodRatio",
    "CentringAnchor",
    "anchor_release",
    "check_centre_lipschitz",
    "widen_for_anchor_noise",
]


@dataclass(frozen=True, eq=False)
class CentringAnchor:
    """A released anchor: a public point θ̂ and the noisy clipped score sum Ĝ there (public after release).

    Attributes
    ----------
    point : numpy.ndarray
        θ̂, flat on the unconstrained scale (public: a DP start or a data-free point).
    gradient : numpy.ndarray
        Ĝ = Σᵢ clip_L2(gᵢ(θ̂), b_g) + N(0, σ_G² I), released.
    grad_clip : float
        b_g.
    noise_multiplier : float
        τ_G: σ_G = τ_G·Δ_G with Δ_G = 2b_g (substitute) or b_g (add/remove).
    neighbouring : str
        The relation Δ_G was computed for.
    var_names : tuple of str
        The value variables θ̂ is flattened from (in the order of the steps' flat vectors).

    Notes
    -----
    One Gaussian release: μ = 1/(2τ_G²) (:meth:`events`); the steps that take the anchor
    charge it once per run, inside their own ``privacy_events``.
    """

    point: np.ndarray
    gradient: np.ndarray
    grad_clip: float
    noise_multiplier: float
    neighbouring: str
    var_names: tuple[str, ...] = field(default=())

    @property
    def std(self) -> float:
        """σ_G, the standard deviation of each coordinate of the anchor's noise η."""
        return self.noise_multiplier * sensitivity_of_clipped_sum(self.grad_clip, self.neighbouring)

    @property
    def mu(self) -> float:
        """μ = 1/(2τ_G²) of the anchor's release."""
        return 0.5 / self.noise_multiplier**2

    def events(self, label: str = "centring anchor") -> list[PrivacyEvent]:
        """The anchor's accounting: one Gaussian release at τ_G."""
        return [GaussianReleases(self.noise_multiplier, 1, label=label)]

    def record(self) -> dict[str, Any]:
        """Public settings and values for a run's record."""
        return {
            "point": [float(v) for v in self.point],
            "gradient": [float(v) for v in self.gradient],
            "grad_clip": self.grad_clip,
            "noise_multiplier": self.noise_multiplier,
            "neighbouring": self.neighbouring,
            "noise_std": self.std,
        }


def check_centre_lipschitz(value: Any) -> float:
    """κ must be a positive finite number (a public per-row bound on the score's Lipschitz constant)."""
    return check_finite_positive("centre_lipschitz", value)


def check_anchor(anchor: Any, n_params: int, neighbouring: str) -> CentringAnchor:
    """An anchor must be a :class:`CentringAnchor` of ``n_params`` coordinates under ``neighbouring``."""
    if not isinstance(anchor, CentringAnchor):
        raise TypeError(
            f"`anchor` must be a CentringAnchor from pymc_dp.release_anchor(...). Found {type(anchor).__name__}."
        )
    if anchor.point.shape != (n_params,):
        raise ValueError(
            f"`anchor` must have one coordinate per flat parameter of the step ({n_params}). "
            f"Found {anchor.point.size} (was it released for other variables?)."
        )
    if anchor.neighbouring != neighbouring:
        raise ValueError(
            f"`anchor` must be released under the step's neighbouring relation ({neighbouring!r}). "
            f"Found {anchor.neighbouring!r}."
        )
    return anchor


def _clipped_anchor_rows(rows, anchor: CentringAnchor) -> np.ndarray:
    """g̃ᵢ = clip_L2(gᵢ(θ̂), b_g) for every row, shape (N, P): raw per-row values, kept in the mechanism."""
    parts = [clip_l2(rows.grad_rows(anchor.point, chunk), anchor.grad_clip) for chunk in row_chunks(rows)]
    return np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]


class CentredLogLikelihoodRatio(NoisyLogLikelihoodRatio):
    """The centred penalty release: residual ratios against the anchor's expansion, clipped at a shrinking bound.

    For θ → θ′ releases λ̂ = Σᵢ clip(ℓᵢ(θ′) − ℓᵢ(θ) − g̃ᵢᵀΔθ, ±c) + ξ + ĜᵀΔθ with
    c = κ‖Δθ‖·max(‖θ − θ̂‖, ‖θ′ − θ̂‖), ξ ~ N(0, σ²), σ = τΔ, Δ = 2c (substitute) or c
    (add/remove). The per-row anchor scores g̃ᵢ are computed once, here, and never leave.

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        The data access for the step's parameters.
    anchor : CentringAnchor
        θ̂ and the released Ĝ (its b_g is the clip of the g̃ᵢ, so that Σᵢ g̃ᵢ is what Ĝ noised).
    lipschitz : float
        κ > 0, public.
    noise_multiplier : float
        τ > 0.
    neighbouring : {"substitute", "add_remove"}
        Must be the anchor's.

    Notes
    -----
    Neighbouring relation, sensitivity and what ε covers: :mod:`pymc_dp.mechanisms.centred`.
    Each release is Gaussian with Δ/σ = 1/τ (μ = 1/(2τ²)); :meth:`events` is the plain
    ratio's. Without the anchor's noise and clipping, λ̂ − ξ is the exact log-likelihood ratio.
    """

    def __init__(self, rows, anchor: CentringAnchor, lipschitz: float, noise_multiplier: float, neighbouring: str):
        self.lipschitz = check_centre_lipschitz(lipschitz)
        super().__init__(rows, 1.0, noise_multiplier, neighbouring)
        self.llr_clip = None  # no plain bound: the centred bound c replaces it
        self.anchor = check_anchor(anchor, rows.n_params, self.neighbouring)
        self._anchor_rows: np.ndarray | None = None

    def forget(self) -> None:
        super().forget()
        self._anchor_rows = None

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_anchor_rows"] = None  # never pickle raw per-row values
        return state

    def bound(self, theta: np.ndarray, theta_proposed: np.ndarray) -> float:
        """c = κ‖θ′ − θ‖·max(‖θ − θ̂‖, ‖θ′ − θ̂‖): public quantities only."""
        centre = self.anchor.point
        reach = max(float(np.linalg.norm(theta - centre)), float(np.linalg.norm(theta_proposed - centre)))
        return self.lipschitz * float(np.linalg.norm(theta_proposed - theta)) * reach

    def release(self, theta: np.ndarray, theta_proposed: np.ndarray, rng: Any) -> tuple[float, float]:
        """Release λ̂ for θ → θ′; returns (λ̂, σ). The cache then holds θ′ (call :meth:`keep`)."""
        theta = np.asarray(theta, dtype=float)
        theta_proposed = np.asarray(theta_proposed, dtype=float)
        step = theta_proposed - theta
        bound = self.bound(theta, theta_proposed)
        if not math.isfinite(bound):  # a point out of range (public): nothing read, the move is rejected
            return math.nan, 0.0
        if self._anchor_rows is None:
            self._anchor_rows = _clipped_anchor_rows(self._rows, self.anchor)
        current = self._loglik(theta)
        proposed = self._rows.loglik_rows(theta_proposed)
        self._pending = (theta_proposed.tobytes(), proposed)
        with np.errstate(invalid="ignore"):  # −∞ − (−∞) on an invalid row: NaN, clipped to −bound
            residuals = proposed - current - self._anchor_rows @ step
        noisy, std = noisy_clipped_sum(residuals, bound, self.noise_multiplier, rng, self.neighbouring)
        return noisy + float(self.anchor.gradient @ step), std


class CentredClippedGradient(NoisyClippedGradient):
    """The centred DPHMC gradient: Ĝ + Σᵢ clip_L2(gᵢ(θ) − g̃ᵢ, κ‖θ − θ̂‖) + N(0, σ² I).

    σ = τ_g Δ with Δ = 2κ‖θ − θ̂‖ (substitute) or κ‖θ − θ̂‖ (add/remove): the noise shrinks as
    the chain nears θ̂. At θ = θ̂ the bound is 0 and the release is Ĝ itself (no row read).

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        The data access for the step's parameters.
    anchor : CentringAnchor
        θ̂ and Ĝ.
    lipschitz : float
        κ > 0, public.
    noise_multiplier : float
        τ_g > 0.
    neighbouring : {"substitute", "add_remove"}
        Must be the anchor's.

    Notes
    -----
    Each release is Gaussian with Δ/σ = 1/τ_g (μ = 1/(2τ_g²)); neighbouring relation and what
    ε covers: :mod:`pymc_dp.mechanisms.centred`.
    """

    def __init__(self, rows, anchor: CentringAnchor, lipschitz: float, noise_multiplier: float, neighbouring: str):
        self.lipschitz = check_centre_lipschitz(lipschitz)
        super().__init__(rows, 1.0, noise_multiplier, neighbouring)
        self.grad_clip = None  # no fixed bound: κ‖θ − θ̂‖ replaces it
        self.std = math.nan  # varies with θ
        self.anchor = check_anchor(anchor, rows.n_params, self.neighbouring)
        self._anchor_rows: np.ndarray | None = None

    def forget(self) -> None:
        """Drop the per-row anchor scores (recomputed at the next release)."""
        self._anchor_rows = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_anchor_rows"] = None  # never pickle raw per-row values
        return state

    def bound(self, theta: np.ndarray) -> float:
        """κ‖θ − θ̂‖: public."""
        return self.lipschitz * float(np.linalg.norm(np.asarray(theta, dtype=float) - self.anchor.point))

    def release(self, theta: np.ndarray, rng: Any) -> np.ndarray:
        """One centred noisy gradient of the log-likelihood at θ, shape (P,)."""
        theta = np.asarray(theta, dtype=float)
        bound = self.bound(theta)
        if not math.isfinite(bound):  # a point out of range (public): nothing read, the trajectory is rejected
            return np.full(self._rows.n_params, np.nan)
        if bound == 0.0:  # at the anchor: the residuals are zero by construction, nothing to read
            return self.anchor.gradient.copy()
        if self._anchor_rows is None:
            self._anchor_rows = _clipped_anchor_rows(self._rows, self.anchor)
        total = np.zeros(self._rows.n_params)
        start = 0
        for chunk in row_chunks(self._rows):
            values = self._rows.grad_rows(theta, chunk)
            total += clipped_sum_l2(values - self._anchor_rows[start : start + values.shape[0]], bound)
            start += values.shape[0]
        std = self.noise_multiplier * sensitivity_of_clipped_sum(bound, self.neighbouring)
        return self.anchor.gradient + total + rng.normal(0.0, std, size=total.shape)


def anchor_release(
    make_gradient: Any,
    point: np.ndarray,
    grad_clip: float,
    noise_multiplier: float,
    neighbouring: str,
    rng: Any,
    var_names: tuple[str, ...] = (),
) -> CentringAnchor:
    """The anchor's one release at a public θ̂, through ``make_gradient`` (``RowMechanisms.clipped_gradient``).

    ``make_gradient(b_g, τ_G, neighbouring).release(θ̂, rng)``: the Gaussian
    mechanism on the clipped score sum (sensitivity 2b_g substitute, b_g add/remove), μ = 1/(2τ_G²).
    """
    released = make_gradient(grad_clip, noise_multiplier, neighbouring).release(point, rng)
    return CentringAnchor(
        np.asarray(point, dtype=float).copy(),
        np.asarray(released, dtype=float),
        grad_clip,
        noise_multiplier,
        neighbouring,
        var_names,
    )


def widen_for_anchor_noise(
    draws: np.ndarray, anchor: CentringAnchor, temperature: float = 1.0, rng: Any = None
) -> np.ndarray:
    """Post-process draws of a centred chain to cover the anchor's tilt: add N(0, T² σ_G² Σ̂²).

    The centred chain targets p(θ | X)·exp(T ηᵀθ) with η ~ N(0, σ_G² I) the anchor's noise,
    whose mean is off by about T Σ η (Σ the posterior covariance). Adding independent
    N(0, T² σ_G² Σ̂Σ̂) to every draw, Σ̂ the draws' own covariance, gives draws whose spread
    includes that known uncertainty, so that intervals cover (a Laplace approximation).

    Parameters
    ----------
    draws : array, shape (..., P)
        Draws on the unconstrained scale (chains and draws flattened or not).
    anchor : CentringAnchor
        The anchor the chain used (σ_G is public).
    temperature : float, default 1
        T, the power of the likelihood.
    rng : numpy.random.Generator, optional
        Data-free randomness for the added noise.

    Returns
    -------
    numpy.ndarray
        The widened draws, same shape.

    Notes
    -----
    Post-processing of released draws and a public σ_G: no privacy cost.
    """
    draws = np.asarray(draws, dtype=float)
    flat = draws.reshape(-1, draws.shape[-1])
    covariance = np.atleast_2d(np.cov(flat, rowvar=False))
    scale = temperature * anchor.std * covariance
    rng = np.random.default_rng() if rng is None else rng
    extra = rng.multivariate_normal(np.zeros(flat.shape[1]), scale @ scale, size=flat.shape[0], method="eigh")
    return (flat + extra).reshape(draws.shape)
