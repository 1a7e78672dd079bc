"""Centred releases: each iteration releases only each row's residual against its expansion at a private anchor.

The penalty test's plain release clips every row's log-likelihood ratio at b‖θ′ − θ‖, so its
noise is proportional to the step and the chain's total travel is bounded whatever the number
of iterations (``docs/centred.md``). Here the data are read once at a public anchor θ̂ (a DP
start, or a point the caller gives) and released there once (:class:`CentringAnchor`):

- **first order**: the clipped score sum Ĝ = Σᵢ g̃ᵢ + η, g̃ᵢ = clip_L2(gᵢ(θ̂), b_g),
  η ~ N(0, σ_G² I), σ_G = τ_G Δ_G (the existing gradient mechanism);
- **second order**: also the clipped Hessian sum Ĥ = Σᵢ H̃ᵢ + E, H̃ᵢ = clip_F(Hᵢ(θ̂), b_H),
  E symmetric Gaussian with σ_H = τ_H Δ_H on the diagonal and σ_H/√2 off it
  (:class:`pymc_dp.mechanisms.hessian.NoisyClippedHessian`).

With a = θ − θ̂, a′ = θ′ − θ̂ and Δθ = θ′ − θ, each row's expansion at θ̂ is
qᵢ(θ) = g̃ᵢᵀa + ½ aᵀH̃ᵢa (H̃ᵢ = 0 at first order). Every later release reads only each row's
residual against it (:func:`ratio_residuals`, :func:`gradient_residuals`):

- **ratio** (DPPenaltyMH, DPHMC's test), rᵢ = ℓᵢ(θ′) − ℓᵢ(θ) − (qᵢ(θ′) − qᵢ(θ)), clipped to
  ±c, and λ̂ = Σᵢ clip(rᵢ, ±c) + ξ + [ĜᵀΔθ + ½(a′ᵀĤa′ − aᵀĤa)], ξ ~ N(0, (τΔ)²);
- **gradient** (DPHMC), ĝ(θ) = [Ĝ + Ĥa] + Σᵢ clip_L2(gᵢ(θ) − g̃ᵢ − H̃ᵢa, c_g) + ξ,
  ξ ~ N(0, (τ_gΔ)² I).

The bracketed terms are the released anchor's expansion (:func:`expansion_ratio`,
:func:`expansion_gradient`): post-processing.

**The bounds** (public: functions of θ, θ′, θ̂ and a public constant κ only).

*First order* (:func:`first_order_ratio_bound`). κ bounds the Lipschitz constant of each row's
score, ‖gᵢ(u) − gᵢ(v)‖ ≤ κ‖u − v‖ (logistic regression with ‖xᵢ‖ ≤ B: κ = B²/4). If it holds
for row i and g̃ᵢ = gᵢ(θ̂), then |rᵢ| = |∫₀¹ (gᵢ(θ + tΔθ) − gᵢ(θ̂))ᵀΔθ dt|
≤ κ‖Δθ‖·max(‖a‖, ‖a′‖) = c (a norm is convex: its maximum on a segment is at an end) and
‖gᵢ(θ) − g̃ᵢ‖ ≤ κ‖a‖ = c_g.

*Second order* (:func:`second_order_ratio_bound`). κ bounds the Lipschitz constant of each
row's Hessian in operator norm, ‖Hᵢ(u) − Hᵢ(v)‖ ≤ κ‖u − v‖ (a third-derivative bound; logistic
regression with ‖xᵢ‖ ≤ B: the weight p(1 − p) has slope at most 1/(6√3) in xᵀθ, so
κ = B³/(6√3)). If it holds for row i and g̃ᵢ = gᵢ(θ̂), H̃ᵢ = Hᵢ(θ̂), let eᵢ = ℓᵢ − qᵢ. Then
∇eᵢ(x) = gᵢ(x) − gᵢ(θ̂) − Hᵢ(θ̂)(x − θ̂) = ∫₀¹ (Hᵢ(θ̂ + s(x − θ̂)) − Hᵢ(θ̂))(x − θ̂) ds, so
‖∇eᵢ(x)‖ ≤ ∫₀¹ κs‖x − θ̂‖² ds = ½κ‖x − θ̂‖² = c_g at x = θ. And rᵢ = eᵢ(θ′) − eᵢ(θ)
= ∫₀¹ ∇eᵢ(θ + tΔθ)ᵀΔθ dt, so |rᵢ| ≤ ½κ‖Δθ‖∫₀¹ ‖a + tΔθ‖² dt
= ½κ‖Δθ‖·((‖a‖² + ‖a′‖²)/2 − ‖Δθ‖²/6) = c (the integral of a quadratic in t, exactly). The
bound falls like ‖Δθ‖·R² with R the distance to θ̂, against ‖Δθ‖·R at first order and
b‖Δθ‖ without centring.

In both cases nothing is clipped where the constant holds. Rows that break it (an outlier, a
κ below the worst case, an anchor clip b_g or b_H that binds) are clipped, which biases the
chain but never weakens privacy: privacy rests on the clip, not on κ being right.

Notes
-----
**Neighbouring relation.** Substitute (N public, one row replaced) or add/remove, as set; the
anchor and every centred release must use the same one.

**Sensitivity.** Each row's term is clipped to ±c (the ratio) or to L2 norm c_g (the
gradient), and depends on that row alone (g̃ᵢ and H̃ᵢ are row i's own clipped anchor score
and Hessian). The clip bounds are functions of θ, θ′, θ̂ and κ only: public (θ and θ′ are the
chain's released states, θ̂ is public by assumption). So the sum moves by at most Δ = 2c (2c_g)
under substitute, c (c_g) under add/remove, and σ = τΔ makes every release a Gaussian
mechanism with Δ/σ = 1/τ: μ = 1/(2τ²) (Sommer et al. 2019, Lemma 12), whatever θ, θ′ and the
data. Adding the anchor's expansion is post-processing of released values.

**What ε covers.** The anchor's one score release (μ = 1/(2τ_G²)) and, at second order, its one
Hessian release (μ = 1/(2τ_H²)), plus every centred release of every chain, tuning included:
the same Gaussian composition as the plain steps, with one or two extra events. The anchor
point θ̂ itself is *not* covered here: it must be public (a DP start, already charged, or a
data-free point).

**The anchor's noise.** Without clipping λ̂ is the exact log-likelihood ratio plus
ηᵀΔθ + ½(a′ᵀEa′ − aᵀEa) (+ ξ), so the penalty test leaves
p(θ | X)·exp(T[ηᵀθ + ½(θ − θ̂)ᵀE(θ − θ̂)]) invariant, not the posterior: a fixed perturbation.
With the posterior near Gaussian (mean m, covariance Σ) its mean moves by about
TΣ(η + E(m − θ̂)), whose covariance T²Σ(σ_G² I + (σ_H²/2)(‖v‖² I + vvᵀ))Σ, v = m − θ̂, is
known; :func:`widen_for_anchor_noise` widens released draws by it.

References
----------
.. [1] Bardenet, R., Doucet, A. and Holmes, C. (2017). On Markov chain Monte Carlo methods for
   tall data. JMLR 18, §7 (control variates around a reference point, first and second order).
.. [2] Yıldırım, S. and Ermiş, B. (2019). Exact MCMC with differentially private moves.
   Statistics and Computing 29 (the penalty test).
.. [3] Sommer, D. M., Meiser, S. and Mohammadi, E. (2019). Privacy loss classes. PoPETs,
   Lemma 12.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive
from pymc_dp.accounting.events import PrivacyEvent
from pymc_dp.mechanisms.clipping import clip_l2, clipped_sum_l2, row_chunks, sensitivity_of_clipped_sum
from pymc_dp.mechanisms.gradient import NoisyClippedGradient
from pymc_dp.mechanisms.hessian import NoisyClippedHessian, packed_size, symmetric_from_packed
from pymc_dp.mechanisms.log_likelihood_ratio import NoisyLogLikelihoodRatio
from pymc_dp.mechanisms.noise import noisy_clipped_sum

__all__ = [
    "CentredClippedGradient",
    "CentredLogLikelihoodRatio",
    "CentringAnchor",
    "Recentring",
    "anchor_noise_covariance",
    "anchor_release",
    "check_centre_lipschitz",
    "expansion_gradient",
    "expansion_ratio",
    "first_order_gradient_bound",
    "first_order_ratio_bound",
    "gradient_residuals",
    "ratio_residuals",
    "recentring_release",
    "second_order_gradient_bound",
    "second_order_ratio_bound",
    "widen_for_anchor_noise",
]


@dataclass(frozen=True, eq=False)
class CentringAnchor:
    """A released anchor: a public point θ̂, the noisy clipped score sum Ĝ there and, at second order, the Hessian sum Ĥ.

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
        The relation the sensitivities were computed for.
    var_names : tuple of str
        The value variables θ̂ is flattened from (in the order of the steps' flat vectors).
    hessian : numpy.ndarray or None
        Ĥ = Σᵢ clip_F(Hᵢ(θ̂), b_H) + E (P × P, symmetric), released; None for a first-order anchor.
    hessian_clip : float or None
        b_H, the Frobenius clip of each row's Hessian.
    hessian_noise_multiplier : float or None
        τ_H: E_jj ~ N(0, σ_H²), E_jk ~ N(0, σ_H²/2), σ_H = τ_H·Δ_H, Δ_H = 2b_H (b_H add/remove).

    Notes
    -----
    One Gaussian release (μ = 1/(2τ_G²)) at first order, two at second order
    (μ = 1/(2τ_G²) + 1/(2τ_H²)) (:meth:`events`); the steps that take the anchor charge it
    once per run, inside their own ``privacy_events``.
    """

    point: np.ndarray
    gradient: np.ndarray
    grad_clip: float
    noise_multiplier: float
    neighbouring: str
    var_names: tuple[str, ...] = field(default=())
    hessian: np.ndarray | None = None
    hessian_clip: float | None = None
    hessian_noise_multiplier: float | None = None
    reproducible_noise: bool = False
    #: The release that moved the expansion here from an earlier anchor (:func:`recentring_release`), or None.
    recentring: Recentring | None = None

    @property
    def order(self) -> int:
        """1 (scores only) or 2 (scores and Hessians)."""
        return 1 if self.hessian is None else 2

    @property
    def std(self) -> float:
        """σ_G, the standard deviation of each coordinate of the anchor's score noise η (re-centred: with η₂'s)."""
        std = self.noise_multiplier * sensitivity_of_clipped_sum(self.grad_clip, self.neighbouring)
        return std if self.recentring is None else math.hypot(std, self.recentring.std)

    @property
    def hessian_std(self) -> float:
        """σ_H, the standard deviation of each diagonal entry of the Hessian noise E (0 at first order; re-centred:
        of E + E₂, the noise of the Hessian sum the steps expand with)."""
        if self.hessian is None:
            return 0.0
        std = self.hessian_noise_multiplier * sensitivity_of_clipped_sum(self.hessian_clip, self.neighbouring)
        return std if self.recentring is None else math.hypot(std, self.recentring.hessian_std)

    @property
    def mu(self) -> float:
        """μ of the anchor's release(s): 1/(2τ_G²), plus 1/(2τ_H²) at second order, plus a re-centring's."""
        mu = 0.5 / self.noise_multiplier**2
        if self.hessian is not None:
            mu += 0.5 / self.hessian_noise_multiplier**2
        return mu + (self.recentring.mu if self.recentring is not None else 0.0)

    def events(self, label: str = "centring anchor") -> list[PrivacyEvent]:
        """The anchor's accounting: one Gaussian release at τ_G, and one at τ_H at second order (and a
        re-centring's two)."""
        events = NoisyClippedGradient.events(self.noise_multiplier, 1, label)
        if self.hessian is not None:
            events += NoisyClippedHessian.events(self.hessian_noise_multiplier, 1, f"{label} (Hessian)")
        if self.recentring is not None:
            events += self.recentring.events(f"{label} re-centring")
        return events

    def record(self) -> dict[str, Any]:
        """Public settings and values for a run's record."""
        record = {
            "order": self.order,
            "point": [float(v) for v in self.point],
            "gradient": [float(v) for v in self.gradient],
            "grad_clip": self.grad_clip,
            "noise_multiplier": self.noise_multiplier,
            "neighbouring": self.neighbouring,
            "noise_std": self.std,
            "reproducible_noise": self.reproducible_noise,
        }
        if self.hessian is not None:
            record.update(
                hessian=[[float(v) for v in row] for row in self.hessian],
                hessian_clip=self.hessian_clip,
                hessian_noise_multiplier=self.hessian_noise_multiplier,
                hessian_noise_std=self.hessian_std,
            )
        if self.recentring is not None:
            record["recentring"] = self.recentring.record()
        return record


@dataclass(frozen=True, eq=False)
class Recentring:
    """The release that moved a second-order anchor's expansion from ``earlier.point`` to a new public point.

    Attributes
    ----------
    earlier : CentringAnchor
        The anchor re-centred (θ̂, its released Ĝ and Ĥ).
    score_bound, hessian_bound : float
        The per-row clips ½κd² (L2) and κd (Frobenius), d = ‖θ̂₂ − θ̂‖ (public).
    noise_multiplier, hessian_noise_multiplier : float
        τ_r and τ_rH: σ = τ·Δ with Δ = 2 × the clip (substitute) or the clip (add/remove).
    """

    earlier: CentringAnchor
    score_bound: float
    hessian_bound: float
    noise_multiplier: float
    hessian_noise_multiplier: float

    @property
    def std(self) -> float:
        """σ_r of η₂, each coordinate of the score change's noise."""
        return self.noise_multiplier * sensitivity_of_clipped_sum(self.score_bound, self.earlier.neighbouring)

    @property
    def hessian_std(self) -> float:
        """σ_rH of E₂'s diagonal entries (N(0, σ_rH²/2) off it)."""
        return self.hessian_noise_multiplier * sensitivity_of_clipped_sum(self.hessian_bound, self.earlier.neighbouring)

    @property
    def mu(self) -> float:
        """μ = 1/(2τ_r²) + 1/(2τ_rH²), whatever d and the rows."""
        return 0.5 / self.noise_multiplier**2 + 0.5 / self.hessian_noise_multiplier**2

    def events(self, label: str) -> list[PrivacyEvent]:
        """Two Gaussian releases, Δ/σ = 1/τ each (the bounds are public)."""
        return NoisyClippedGradient.events(self.noise_multiplier, 1, label) + NoisyClippedHessian.events(
            self.hessian_noise_multiplier, 1, f"{label} (Hessian)"
        )

    def record(self) -> dict[str, Any]:
        """Public settings and values for a run's record (the earlier anchor's included)."""
        return {
            "earlier": self.earlier.record(),
            "score_bound": self.score_bound,
            "hessian_bound": self.hessian_bound,
            "noise_multiplier": self.noise_multiplier,
            "hessian_noise_multiplier": self.hessian_noise_multiplier,
            "noise_std": self.std,
            "hessian_noise_std": self.hessian_std,
        }


def check_centre_lipschitz(value: Any) -> float:
    """κ must be a positive finite number (a public per-row Lipschitz bound of the score, or of the Hessian)."""
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
    if anchor.hessian is not None and np.shape(anchor.hessian) != (n_params, n_params):
        raise ValueError(f"`anchor`'s Hessian must be {n_params} × {n_params}. Found shape {np.shape(anchor.hessian)}.")
    if anchor.hessian is not None and (anchor.hessian_clip is None or anchor.hessian_noise_multiplier is None):
        raise ValueError(
            "`anchor` with a Hessian must give its `hessian_clip` and `hessian_noise_multiplier` (the clip of the "
            "per-row Hessians and the noise it was released with). Found None."
        )
    # The step charges the noise the anchor claims: a claim that prices nothing (0, ∞, NaN, negative) is refused.
    claims = {"grad_clip": anchor.grad_clip, "noise_multiplier": anchor.noise_multiplier}
    if anchor.hessian is not None:
        claims.update(hessian_clip=anchor.hessian_clip, hessian_noise_multiplier=anchor.hessian_noise_multiplier)
    for name, value in claims.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
            raise ValueError(f"`anchor`'s `{name}` must be a finite positive number. Found {value!r}.")
    if np.shape(anchor.gradient) != (n_params,):
        raise ValueError(
            f"`anchor`'s gradient must have {n_params} coordinates. Found shape {np.shape(anchor.gradient)}."
        )
    return anchor


# -- the pure math: bounds, residuals and the anchor's expansion (no data access, no PyMC) ----------
def first_order_ratio_bound(
    theta: np.ndarray, theta_proposed: np.ndarray, point: np.ndarray, lipschitz: float
) -> float:
    """c = κ‖Δθ‖·max(‖θ − θ̂‖, ‖θ′ − θ̂‖): the first-order residual ratio's per-row bound (κ: score Lipschitz)."""
    reach = max(float(np.linalg.norm(theta - point)), float(np.linalg.norm(theta_proposed - point)))
    return lipschitz * float(np.linalg.norm(theta_proposed - theta)) * reach


def first_order_gradient_bound(theta: np.ndarray, point: np.ndarray, lipschitz: float) -> float:
    """c_g = κ‖θ − θ̂‖: the first-order residual gradient's per-row L2 bound."""
    return lipschitz * float(np.linalg.norm(theta - point))


def second_order_ratio_bound(
    theta: np.ndarray, theta_proposed: np.ndarray, point: np.ndarray, lipschitz: float
) -> float:
    """c = ½κ‖Δθ‖·((‖a‖² + ‖a′‖²)/2 − ‖Δθ‖²/6), a = θ − θ̂, a′ = θ′ − θ̂ (κ: Hessian Lipschitz).

    ½κ‖Δθ‖·∫₀¹ ‖a + tΔθ‖² dt, evaluated exactly; at most ½κ‖Δθ‖·max(‖a‖, ‖a′‖)².
    """
    step = float(np.linalg.norm(theta_proposed - theta))
    a2 = float(np.sum((theta - point) ** 2))
    b2 = float(np.sum((theta_proposed - point) ** 2))
    return 0.5 * lipschitz * step * max(0.5 * (a2 + b2) - step**2 / 6.0, 0.0)


def second_order_gradient_bound(theta: np.ndarray, point: np.ndarray, lipschitz: float) -> float:
    """c_g = ½κ‖θ − θ̂‖²: the second-order residual gradient's per-row L2 bound."""
    return 0.5 * lipschitz * float(np.sum((theta - point) ** 2))


def _packed_outer(a: np.ndarray) -> np.ndarray:
    """The isometric packing of aaᵀ (:func:`pymc_dp.mechanisms.hessian.symmetric_to_packed`): ⟨H, aaᵀ⟩_F = aᵀHa."""
    upper_i, upper_j = np.triu_indices(a.size, k=1)
    return np.concatenate([a * a, math.sqrt(2.0) * a[upper_i] * a[upper_j]])


def _packed_times(a: np.ndarray) -> np.ndarray:
    """J(a), (P(P+1)/2, P), with pack(H) @ J(a) = H a for every symmetric H."""
    p = a.size
    upper_i, upper_j = np.triu_indices(p, k=1)
    out = np.zeros((packed_size(p), p))
    out[np.arange(p), np.arange(p)] = a
    rows = p + np.arange(upper_i.size)
    out[rows, upper_i] = a[upper_j] / math.sqrt(2.0)
    out[rows, upper_j] = a[upper_i] / math.sqrt(2.0)
    return out


def ratio_residuals(
    current: np.ndarray,
    proposed: np.ndarray,
    scores: np.ndarray,
    hessians: np.ndarray | None,
    theta: np.ndarray,
    theta_proposed: np.ndarray,
    point: np.ndarray,
) -> np.ndarray:
    """Each row's rᵢ = ℓᵢ(θ′) − ℓᵢ(θ) − g̃ᵢᵀΔθ − ½(a′ᵀH̃ᵢa′ − aᵀH̃ᵢa): raw per-row values (mechanism layer only).

    ``scores`` (N, P) are the g̃ᵢ, ``hessians`` (N, P(P+1)/2) the packed H̃ᵢ (None: first order).
    """
    with np.errstate(invalid="ignore"):  # −∞ − (−∞) on an invalid row: NaN, which the clip maps to −bound
        residuals = proposed - current - scores @ (theta_proposed - theta)
        if hessians is not None:
            residuals = residuals - 0.5 * (
                hessians @ (_packed_outer(theta_proposed - point) - _packed_outer(theta - point))
            )
    return residuals


def gradient_residuals(
    grads: np.ndarray, scores: np.ndarray, hessians: np.ndarray | None, theta: np.ndarray, point: np.ndarray
) -> np.ndarray:
    """Each row's gᵢ(θ) − g̃ᵢ − H̃ᵢ(θ − θ̂) (N, P): raw per-row values (mechanism layer only)."""
    residuals = grads - scores
    if hessians is not None:
        residuals = residuals - hessians @ _packed_times(theta - point)
    return residuals


def expansion_ratio(
    gradient: np.ndarray, hessian: np.ndarray | None, theta: np.ndarray, theta_proposed: np.ndarray, point: np.ndarray
) -> float:
    """ĜᵀΔθ + ½(a′ᵀĤa′ − aᵀĤa): the released anchor's share of the ratio (public)."""
    value = float(gradient @ (theta_proposed - theta))
    if hessian is not None:
        a, b = theta - point, theta_proposed - point
        value += 0.5 * float(b @ hessian @ b - a @ hessian @ a)
    return value


def expansion_gradient(
    gradient: np.ndarray, hessian: np.ndarray | None, theta: np.ndarray, point: np.ndarray
) -> np.ndarray:
    """Ĝ + Ĥ(θ − θ̂): the released anchor's share of the gradient (public)."""
    if hessian is None:
        return np.array(gradient, dtype=float)
    return gradient + hessian @ (theta - point)


def _clipped_anchor_rows(rows, anchor: CentringAnchor) -> tuple[np.ndarray, np.ndarray | None]:
    """(g̃ᵢ, packed H̃ᵢ) for every row, shapes (N, P) and (N, P(P+1)/2) or None: raw, kept in the mechanism.

    The same per-row values, clipped the same way, as the sums the anchor released (the Hessians
    from :class:`pymc_dp.mechanisms.hessian.NoisyClippedHessian`'s own differences).
    """
    parts = [clip_l2(rows.grad_rows(anchor.point, chunk), anchor.grad_clip) for chunk in row_chunks(rows)]
    scores = np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
    if anchor.hessian is None:
        return scores, None
    hessian = NoisyClippedHessian(rows, anchor.hessian_clip, anchor.hessian_noise_multiplier, anchor.neighbouring)
    pieces = [
        clip_l2(hessian._packed_rows(anchor.point, piece), anchor.hessian_clip)
        for chunk in row_chunks(rows)
        for piece in hessian._pieces(chunk)
    ]
    return scores, (np.concatenate(pieces, axis=0) if len(pieces) > 1 else pieces[0])


class CentredLogLikelihoodRatio(NoisyLogLikelihoodRatio):
    """The centred penalty release: residual ratios against the anchor's expansion, clipped at a shrinking bound.

    For θ → θ′ releases λ̂ = Σᵢ clip(rᵢ, ±c) + ξ + [ĜᵀΔθ + ½(a′ᵀĤa′ − aᵀĤa)] with rᵢ the
    residual of :func:`ratio_residuals`, c the bound of :func:`first_order_ratio_bound` or
    :func:`second_order_ratio_bound` (the anchor's order decides; the Ĥ term only at second
    order), ξ ~ N(0, σ²), σ = τΔ, Δ = 2c (substitute) or c (add/remove). The per-row anchor
    scores g̃ᵢ (and Hessians H̃ᵢ) are computed once, here, and never leave.

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        The data access for the step's parameters.
    anchor : CentringAnchor
        θ̂ and the released Ĝ (and Ĥ); its b_g (b_H) is the clip of the g̃ᵢ (H̃ᵢ), so that
        Σᵢ g̃ᵢ (Σᵢ H̃ᵢ) is what it noised.
    lipschitz : float
        κ > 0, public: the score's Lipschitz constant for a first-order anchor, the Hessian's
        (in operator norm) for a second-order one.
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
        self._anchor_rows: tuple[np.ndarray, np.ndarray | None] | None = None

    def forget(self) -> None:
        super().forget()
        self._anchor_rows = None

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_anchor_rows"] = None  # never pickle raw per-row values
        return state

    def bound(self, theta: np.ndarray, theta_proposed: np.ndarray) -> float:
        """c: :func:`first_order_ratio_bound` or :func:`second_order_ratio_bound` (public quantities only)."""
        theta, theta_proposed = np.asarray(theta, dtype=float), np.asarray(theta_proposed, dtype=float)
        rule = second_order_ratio_bound if self.anchor.order == 2 else first_order_ratio_bound
        return rule(theta, theta_proposed, self.anchor.point, self.lipschitz)

    def release(self, theta: np.ndarray, theta_proposed: np.ndarray, rng: Any) -> tuple[float, float]:
        """Release λ̂ for θ → θ′; returns (λ̂, σ). The cache then holds θ′ (call :meth:`keep`)."""
        theta = np.asarray(theta, dtype=float)
        theta_proposed = np.asarray(theta_proposed, dtype=float)
        bound = self.bound(theta, theta_proposed)
        if not math.isfinite(bound):  # a point out of range (public): nothing read, the move is rejected
            return math.nan, 0.0
        if self._anchor_rows is None:
            self._anchor_rows = _clipped_anchor_rows(self._rows, self.anchor)
        scores, hessians = self._anchor_rows
        current = self._loglik(theta)
        proposed = self._rows.loglik_rows(theta_proposed)
        self._pending = (theta_proposed.tobytes(), proposed)
        point = self.anchor.point
        residuals = ratio_residuals(current, proposed, scores, hessians, theta, theta_proposed, point)
        noisy, std = noisy_clipped_sum(residuals, bound, self.noise_multiplier, rng, self.neighbouring)
        return noisy + expansion_ratio(self.anchor.gradient, self.anchor.hessian, theta, theta_proposed, point), std


class CentredClippedGradient(NoisyClippedGradient):
    """The centred DPHMC gradient: [Ĝ + Ĥ(θ − θ̂)] + Σᵢ clip_L2(gᵢ(θ) − g̃ᵢ − H̃ᵢ(θ − θ̂), c_g) + N(0, σ² I).

    c_g is :func:`first_order_gradient_bound` (κ‖θ − θ̂‖, no Ĥ or H̃ᵢ terms) or
    :func:`second_order_gradient_bound` (½κ‖θ − θ̂‖²), as the anchor's order says;
    σ = τ_g Δ with Δ = 2c_g (substitute) or c_g (add/remove): the noise shrinks as the chain
    nears θ̂. At θ = θ̂ the bound is 0 and the release is Ĝ itself (no row read).

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        The data access for the step's parameters.
    anchor : CentringAnchor
        θ̂ and Ĝ (and Ĥ).
    lipschitz : float
        κ > 0, public (the score's Lipschitz constant at first order, the Hessian's at second).
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
        self.grad_clip = None  # no fixed bound: c_g replaces it
        self.std = math.nan  # varies with θ
        self.anchor = check_anchor(anchor, rows.n_params, self.neighbouring)
        self._anchor_rows: tuple[np.ndarray, np.ndarray | None] | None = None

    def forget(self) -> None:
        """Drop the per-row anchor scores and Hessians (recomputed at the next release)."""
        self._anchor_rows = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_anchor_rows"] = None  # never pickle raw per-row values
        return state

    def bound(self, theta: np.ndarray) -> float:
        """c_g: :func:`first_order_gradient_bound` or :func:`second_order_gradient_bound` (public)."""
        rule = second_order_gradient_bound if self.anchor.order == 2 else first_order_gradient_bound
        return rule(np.asarray(theta, dtype=float), self.anchor.point, self.lipschitz)

    def release(self, theta: np.ndarray, rng: Any) -> np.ndarray:
        """One centred noisy gradient of the log-likelihood at θ, shape (P,)."""
        theta = np.asarray(theta, dtype=float)
        bound = self.bound(theta)
        if not math.isfinite(bound):  # a point out of range (public): nothing read, the trajectory is rejected
            return np.full(self._rows.n_params, np.nan)
        if bound == 0.0:  # at the anchor: the residuals are zero by construction, nothing to read
            return self.anchor.gradient.copy()
        point = self.anchor.point
        std = self.noise_multiplier * sensitivity_of_clipped_sum(bound, self.neighbouring)
        if std == 0.0:  # a bound so small (θ within ~1e-160 of θ̂) that its noise underflows: clip to 0, read nothing
            return expansion_gradient(self.anchor.gradient, self.anchor.hessian, theta, point)
        if self._anchor_rows is None:
            self._anchor_rows = _clipped_anchor_rows(self._rows, self.anchor)
        scores, hessians = self._anchor_rows
        total = np.zeros(self._rows.n_params)
        start = 0
        for chunk in row_chunks(self._rows):
            values = self._rows.grad_rows(theta, chunk)
            stop = start + values.shape[0]
            part = None if hessians is None else hessians[start:stop]
            total += clipped_sum_l2(gradient_residuals(values, scores[start:stop], part, theta, point), bound)
            start = stop
        expansion = expansion_gradient(self.anchor.gradient, self.anchor.hessian, theta, point)
        return expansion + total + rng.normal(0.0, std, size=total.shape)


def anchor_release(
    make_gradient: Any,
    point: np.ndarray,
    grad_clip: float,
    noise_multiplier: float,
    neighbouring: str,
    rng: Any,
    var_names: tuple[str, ...] = (),
    make_hessian: Any = None,
    hessian_clip: float | None = None,
    hessian_noise_multiplier: float | None = None,
    reproducible_noise: bool = False,
) -> CentringAnchor:
    """The anchor's release(s) at a public θ̂, through ``make_gradient`` (and ``make_hessian`` at second order).

    ``make_gradient(b_g, τ_G, neighbouring).release(θ̂, rng)``: the Gaussian mechanism on the
    clipped score sum (sensitivity 2b_g substitute, b_g add/remove), μ = 1/(2τ_G²). With
    ``make_hessian`` (``functools.partial(pymc_dp.mechanisms.hessian.clipped_hessian, mechanisms)``)
    also ``make_hessian(b_H, τ_H, neighbouring).release(θ̂, rng)``: the clipped Hessian sum
    (Frobenius sensitivity 2b_H, b_H add/remove), μ = 1/(2τ_H²). Pricing is the caller's
    (:func:`pymc_dp.release_anchor` prices both before either is made). ``reproducible_noise``:
    ``rng`` is the caller's seeded generator (recorded, so that a published result says so).
    """
    released = make_gradient(grad_clip, noise_multiplier, neighbouring).release(point, rng)
    hessian = None
    if make_hessian is not None:
        hessian = np.asarray(
            make_hessian(hessian_clip, hessian_noise_multiplier, neighbouring).release(
                np.asarray(point, dtype=float), rng
            ),
            dtype=float,
        )
    return CentringAnchor(
        np.asarray(point, dtype=float).copy(),
        np.asarray(released, dtype=float),
        grad_clip,
        noise_multiplier,
        neighbouring,
        var_names,
        hessian,
        hessian_clip if make_hessian is not None else None,
        hessian_noise_multiplier if make_hessian is not None else None,
        bool(reproducible_noise),
    )


def recentring_release(
    mechanisms: Any,
    anchor: CentringAnchor,
    target: np.ndarray,
    lipschitz: float,
    noise_multiplier: float,
    hessian_noise_multiplier: float,
    rng: Any,
) -> CentringAnchor:
    """Move a second-order anchor's expansion from θ̂ to a public θ̂₂ by releasing each row's change of expansion.

    With a = θ̂₂ − θ̂, d = ‖a‖ and g̃ᵢ, H̃ᵢ each row's clipped score and Hessian (at the anchor's
    clips b_g, b_H) at θ̂ and, primed, at θ̂₂:

        rᵢ = clip_L2(g̃ᵢ′ − g̃ᵢ − H̃ᵢa, ½κd²),   ΔHᵢ = clip_F(H̃ᵢ′ − H̃ᵢ, κd),
        Ĝ₂ = Ĝ + Ĥa + Σᵢ rᵢ + η₂,   η₂ ~ N(0, σ_r² I),   σ_r = τ_r·Δ(½κd²),
        Ĥ₂ = Ĥ + Σᵢ ΔHᵢ + E₂,   E₂ symmetric, N(0, σ_rH²) diagonal, N(0, σ_rH²/2) off it, σ_rH = τ_rH·Δ(κd).

    Where κ bounds each row's Hessian's Lipschitz constant and no clip binds, rᵢ is the score's
    Taylor residual, ‖gᵢ(θ̂₂) − gᵢ(θ̂) − Hᵢ(θ̂)a‖ = ‖∫₀¹ (Hᵢ(θ̂ + sa) − Hᵢ(θ̂))a ds‖ ≤ ½κd², and
    ‖Hᵢ(θ̂₂) − Hᵢ(θ̂)‖ ≤ κd (Frobenius = operator norm for the rank-one logistic Hessian change;
    packed L2 is Frobenius), so nothing is clipped and Ĝ₂, Ĥ₂ are the clipped sums at θ̂₂ plus the
    anchor's noise carried along (η + Ea, E) and the new (η₂, E₂). The bounds are small where d is:
    the release costs little of ε for a large move of the expansion point, which is what the centred
    chains' noise (∝ their distance² from the expansion point) needs (``docs/centred.md``, "Re-centring").

    Parameters
    ----------
    mechanisms : pymc_dp.mechanisms.RowMechanisms
        The step's row mechanisms (the rows stay in this layer).
    anchor : CentringAnchor
        A released second-order anchor at θ̂.
    target : numpy.ndarray
        θ̂₂, public (e.g. the anchor's own Newton point: post-processing of Ĝ, Ĥ and the prior).
    lipschitz : float
        κ, the public per-row bound on the Hessian's Lipschitz constant.
    noise_multiplier, hessian_noise_multiplier : float
        τ_r and τ_rH (priced by the caller before any row is read).
    rng : numpy.random.Generator or SecureNoise
        The noise source.

    Returns
    -------
    CentringAnchor
        The anchor at θ̂₂ with Ĝ₂ and Ĥ₂, the same clips, and ``recentring`` recording the release.

    Notes
    -----
    **Neighbouring relation:** the anchor's (substitute or add/remove). **Sensitivity:** each row's
    rᵢ is clipped at ½κd² (L2) and ΔHᵢ at κd (Frobenius) and depends on that row alone; the bounds
    are functions of θ̂, θ̂₂ and κ, all public; so Δ = 2 × the bound (substitute) or the bound
    (add/remove), and σ = τΔ makes each sum a Gaussian mechanism of μ = 1/(2τ²) whatever d and the
    rows: μ = 1/(2τ_r²) + 1/(2τ_rH²) in all. Adding Ĝ + Ĥa and Ĥ is post-processing. **What ε
    covers:** these two releases; θ̂₂ must be public. A row that breaks κ, or whose anchor clip
    binds at either point, is clipped: the expansion is biased for it, never less private.

    References
    ----------
    .. [1] Bardenet, R., Doucet, A. and Holmes, C. (2017). On Markov chain Monte Carlo methods for
       tall data. JMLR 18, §7 (control variates, and moving their reference point).
    """
    if anchor.hessian is None:
        raise ValueError("`anchor` must be a second-order anchor (with a released Hessian) to be re-centred.")
    target = np.asarray(target, dtype=float)
    if target.shape != anchor.point.shape or not np.all(np.isfinite(target)):
        raise ValueError(f"`target` must be {anchor.point.size} finite numbers. Found shape {target.shape}.")
    kappa = check_centre_lipschitz(lipschitz)
    move = target - anchor.point
    distance = max(float(np.linalg.norm(move)), 1e-12)  # a zero move clips every row to ~0: nothing read
    score_bound, hessian_bound = 0.5 * kappa * distance**2, kappa * distance
    rows = mechanisms._rows_here()
    scores, hessians = _clipped_anchor_rows(rows, anchor)
    moved = CentringAnchor(
        target, anchor.gradient, anchor.grad_clip, anchor.noise_multiplier, anchor.neighbouring, anchor.var_names,
        anchor.hessian, anchor.hessian_clip, anchor.hessian_noise_multiplier,
    )  # fmt: skip
    scores_there, hessians_there = _clipped_anchor_rows(rows, moved)
    residual = clipped_sum_l2(gradient_residuals(scores_there, scores, hessians, target, anchor.point), score_bound)
    change = clipped_sum_l2(hessians_there - hessians, hessian_bound)
    recentring = Recentring(
        anchor, score_bound, hessian_bound,
        check_finite_positive("noise_multiplier", noise_multiplier),
        check_finite_positive("hessian_noise_multiplier", hessian_noise_multiplier),
    )  # fmt: skip
    gradient = anchor.gradient + anchor.hessian @ move + residual + rng.normal(0.0, recentring.std, move.size)
    noisy_change = change + rng.normal(0.0, recentring.hessian_std, size=change.shape)
    hessian = anchor.hessian + symmetric_from_packed(noisy_change, move.size)
    return CentringAnchor(
        target.copy(), np.asarray(gradient, dtype=float), anchor.grad_clip, anchor.noise_multiplier,
        anchor.neighbouring, anchor.var_names, hessian, anchor.hessian_clip, anchor.hessian_noise_multiplier,
        anchor.reproducible_noise, recentring,
    )  # fmt: skip


def anchor_noise_covariance(anchor: CentringAnchor, offset: np.ndarray) -> np.ndarray:
    """S = σ_G² I + (σ_H²/2)(‖v‖² I + vvᵀ): the covariance of η + E v, v = ``offset`` (m − θ̂).

    E's entries are independent, N(0, σ_H²) on the diagonal and N(0, σ_H²/2) off it, so
    Var((Ev)_j) = σ_H² v_j² + (σ_H²/2) Σ_{k≠j} v_k² and Cov((Ev)_j, (Ev)_l) = (σ_H²/2) v_j v_l.
    """
    offset = np.asarray(offset, dtype=float)
    if anchor.recentring is not None:  # η + E(m − θ̂) + η₂ + E₂(m − θ̂₂): independent parts
        moved = anchor.recentring
        earlier = anchor_noise_covariance(moved.earlier, offset + anchor.point - moved.earlier.point)
        return earlier + _gaussian_tilt_covariance(moved.std, moved.hessian_std, offset)
    hessian_std = anchor.hessian_std if anchor.hessian is not None else 0.0
    return _gaussian_tilt_covariance(anchor.std, hessian_std, offset)


def _gaussian_tilt_covariance(std: float, hessian_std: float, offset: np.ndarray) -> np.ndarray:
    """σ² I + (σ_H²/2)(‖v‖² I + vvᵀ): the covariance of η + E v for one release pair."""
    p = offset.size
    return std**2 * np.eye(p) + 0.5 * hessian_std**2 * (float(offset @ offset) * np.eye(p) + np.outer(offset, offset))


def widen_for_anchor_noise(
    draws: np.ndarray, anchor: CentringAnchor, temperature: float = 1.0, rng: Any = None
) -> np.ndarray:
    """Post-process draws of a centred chain to cover the anchor's perturbation: add N(0, T² Σ̂ S Σ̂).

    The centred chain targets p(θ | X)·exp(T[ηᵀθ + ½(θ − θ̂)ᵀE(θ − θ̂)]) with η ~ N(0, σ_G² I)
    the anchor's score noise and E its Hessian noise (second order only), whose mean is off by
    about TΣ(η + E v) (Σ the posterior covariance, v = m − θ̂): covariance T²ΣSΣ with S from
    :func:`anchor_noise_covariance`. Adding independent N(0, T²Σ̂SΣ̂) to every draw, Σ̂ and m
    the draws' own covariance and mean, gives draws whose spread includes that known
    uncertainty, so that intervals cover (a Laplace approximation, to first order in the noise;
    E's effect on the target's spread, of second order, is left out).

    Parameters
    ----------
    draws : array, shape (..., P)
        Draws on the unconstrained scale (chains and draws flattened or not).
    anchor : CentringAnchor
        The anchor the chain used (σ_G, σ_H and θ̂ are public).
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
    Post-processing of released draws and public σ_G, σ_H, θ̂: no privacy cost.
    """
    draws = np.asarray(draws, dtype=float)
    flat = draws.reshape(-1, draws.shape[-1])
    covariance = np.atleast_2d(np.cov(flat, rowvar=False))
    noise = anchor_noise_covariance(anchor, flat.mean(axis=0) - anchor.point)
    added = temperature**2 * covariance @ noise @ covariance
    rng = np.random.default_rng() if rng is None else rng
    extra = rng.multivariate_normal(np.zeros(flat.shape[1]), added, size=flat.shape[0], method="eigh")
    return (flat + extra).reshape(draws.shape)
