"""A re-centring release after the anchor (issue 36, H36i): the anchor's offset e with and without it, simulated.

What decides a centred run is e, the released anchor's Newton offset ‖ΣĜ‖ in posterior sds
(``docs/centred.md``: 17 runs, e ≤ 1.07 unflagged, e ≥ 1.14 flagged). Most of e is the anchor's own
score noise moved through Σ (anchored at the exact mode e is still 1.1 median, 1.9 at the 80th
percentile on ``randhie`` at ε = 4), so no split of μ between the pilots, the anchor and the chains
makes it small reliably (``centred_anchor_split.py``). The chains sit near the tilted target's mode
θ̂₂ = θ̂ + (−Ĥ)⁻¹Ĝ (post-processing of the anchor), so re-expand there: release, once, each row's change
of expansion, whose per-row bound is small because it is a Taylor residual over the short distance
d = ‖θ̂₂ − θ̂‖:

    rᵢ = clip_L2(gᵢ(θ̂₂) − g̃ᵢ − H̃ᵢ(θ̂₂ − θ̂), ½κd²),     ΔHᵢ = clip_F(Hᵢ(θ̂₂) − H̃ᵢ, κd),
    Ĝ₂ = Ĝ + Ĥ(θ̂₂ − θ̂) + Σᵢ rᵢ + N(0, (τ_r·2·½κd²)² I),  Ĥ₂ = Ĥ + Σᵢ ΔHᵢ + E₂ (σ = τ_rH·2κd).

(logistic regression with ‖x̃ᵢ‖ ≤ B: ‖gᵢ(u) − gᵢ(v) − Hᵢ(v)(u − v)‖ ≤ ½κ‖u − v‖², and Hᵢ(u) − Hᵢ(v) is rank one
with norm |Δw|‖x̃ᵢ‖² ≤ κ‖u − v‖, κ = B³/(6√3)). d is public (post-processing of the released anchor), so the
bounds are public and μ = 1/(2τ_r²) + 1/(2τ_rH²) whatever d and the rows: priced before sampling, like the anchor.
The chains' target is then the posterior tilted by (η + E(θ̂₂ − θ̂) + η₂)ᵀθ and ½θᵀ(E + E₂)θ: the same tilt as
before plus the small new noise, so the mean error the widening covers is unchanged, but the chains' offset from
the expansion point is e₂ = ‖(−Ĥ₂)⁻¹Ĝ₂‖ in sds, the tilted target's Newton step from θ̂₂.

Simulated in numpy on the target cells' real designs with :mod:`centred_anchor_landing`'s releases (the ×3 pilots
at the public clips from a DP start ``--start`` sds off, the anchor at the last point with clips 2× the 95 %
quantile of the norms there), the re-centring release taking ``share`` of μ_anchor from the anchor proper (score
0.75, Hessian 0.25 of it). Printed: e and e₂ (median, 80th and 95th percentiles, the share ≤ 1.07), and d in
√(tr Σ). A run whose released −Ĥ (or −Ĥ₂) is not positive definite counts as e = inf (the run's prediction then
falls back, and its chains start at θ̂). No sampler runs; about 20 CPU s.

Run: ``nice -n 10 python benchmarks/centred_recentre.py [--draws 100]``.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from centred_anchor_landing import CHAIN_SHARE, PRIOR_PRECISION, design, mode, newton, release, taus

from pymc_dp.accounting.calibrate import CALIBRATION_MARGIN
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.centred_predictions import (
    CENTRE_ANCHOR_SHARE,
    CENTRE_HESSIAN_SHARE,
    CENTRE_LAST_PILOT_HESSIAN_SHARE,
    CENTRE_NEWTON_SHARE,
    LOGISTIC_THIRD,
    newton_weights,
)


def symmetric_noise(rng, sigma: float, size: int) -> np.ndarray:
    """E: N(0, σ²) on the diagonal, N(0, σ²/2) off it (the Hessian release's noise)."""
    upper = np.triu(rng.normal(0, sigma / math.sqrt(2), (size, size)), 1)
    return upper + upper.T + np.diag(rng.normal(0, sigma, size))


def rows_at(x, y, theta) -> tuple[np.ndarray, np.ndarray]:
    """Per-row scores (y − p)x̃ and weights w = p(1 − p) (the Hessian is −w x̃x̃ᵀ)."""
    p = 1 / (1 + np.exp(-np.clip(x @ theta, -500, 500)))
    return (y - p)[:, None] * x, p * (1 - p)


def newton_offset(theta, score_sum, hessian_sum) -> tuple[float | None, np.ndarray | None]:
    """(e, step): the released expansion's Newton step from ``theta`` (prior included) and its RMS in sds."""
    precision = -hessian_sum + PRIOR_PRECISION * np.eye(theta.size)
    precision = 0.5 * (precision + precision.T)
    if np.linalg.eigvalsh(precision).min() <= 0:
        return None, None
    covariance = np.linalg.inv(precision)
    step = covariance @ (score_sum - PRIOR_PRECISION * theta)
    return float(np.sqrt(np.mean(step**2 / np.diag(covariance)))), step


def clip_rows(values: np.ndarray, norms: np.ndarray, bound: float) -> np.ndarray:
    scale = np.minimum(1.0, bound / np.maximum(norms, 1e-300))
    return values * (scale[:, None] if values.ndim == 2 else scale)


def curvature_error(hessian_sum, cov) -> tuple[float, float]:
    """(the largest generalised eigenvalue of the released C = (−Ĥ + prior)⁻¹ against the exact Laplace C₀, the
    smallest eigenvalue of −Ĥ + prior over the released Hessian noise's spectral edge σ√(2P)); (inf, ·) where −Ĥ
    + prior is not positive definite."""
    precision = -0.5 * (hessian_sum + hessian_sum.T) + PRIOR_PRECISION * np.eye(cov.shape[0])
    values, vectors = np.linalg.eigh(cov)
    root = vectors * np.sqrt(values)
    whitened = np.linalg.eigvalsh(root.T @ precision @ root)  # C₀^½ (−Ĥ) C₀^½: 1 where the release is exact
    return (math.inf if whitened.min() <= 0 else float(1.0 / whitened.min())), float(np.linalg.eigvalsh(precision)[0])


def one_run(x, y, best, sd, mu_anchor, share, start, kappa, rng, recentre_hessian_share=CENTRE_HESSIAN_SHARE,
            public_clips=False, cov=None):  # fmt: skip
    """(e, e₂, d, the widest direction's C/C₀ before and after, λ_min/edge after) of one simulated run: pilots,
    anchor (at 1 − newton share − ``share`` of μ_anchor), re-centring (``recentre_hessian_share`` of it to ΔH)."""
    size = x.shape[1]
    direction = rng.normal(size=size)
    theta = best + start * sd * math.sqrt(size) * direction / np.linalg.norm(direction)
    weights = newton_weights()
    for k, weight in enumerate(weights):
        hessian_share = CENTRE_LAST_PILOT_HESSIAN_SHARE if k == len(weights) - 1 else CENTRE_HESSIAN_SHARE
        tau_g, tau_h = taus(CENTRE_NEWTON_SHARE * mu_anchor * weight, hessian_share)
        theta = newton(theta, *release(x, y, theta, tau_g, tau_h, (math.sqrt(size), size / 4.0), rng))
    scores, w = rows_at(x, y, theta)
    score_norms, hessian_norms = np.linalg.norm(scores, axis=1), w * np.sum(x**2, axis=1)
    b_g, b_h = 2 * np.quantile(score_norms, 0.95), 2 * np.quantile(hessian_norms, 0.95)
    if public_clips:  # the runs' anchors kept the public worst cases B and B²/4 (their released clips were above)
        b_g, b_h = math.sqrt(size), size / 4.0
    scores, w = clip_rows(scores, score_norms, b_g), clip_rows(w, hessian_norms, b_h)
    tau_g, tau_h = taus((1 - CENTRE_NEWTON_SHARE - share) * mu_anchor, CENTRE_HESSIAN_SHARE)
    score_sum = scores.sum(0) + rng.normal(0, 2 * tau_g * b_g, size)
    hessian_sum = -(x * w[:, None]).T @ x + symmetric_noise(rng, 2 * tau_h * b_h, size)
    e, step = newton_offset(theta, score_sum, hessian_sum)
    wide = curvature_error(hessian_sum, cov)[0]
    if e is None or share <= 0:
        return e, None, None, wide, None, None
    d = float(np.linalg.norm(step))
    moved = theta + step
    scores2, w2 = rows_at(x, y, moved)
    residual = scores2 - scores + x * (w * (x @ step))[:, None]  # gᵢ(θ̂₂) − g̃ᵢ − H̃ᵢ(θ̂₂ − θ̂), H̃ᵢ = −w̃ᵢx̃x̃ᵀ
    residual = clip_rows(residual, np.linalg.norm(residual, axis=1), 0.5 * kappa * d**2)
    change = -(w2 - w)  # Hᵢ(θ̂₂) − H̃ᵢ = −(w₂ − w̃)x̃x̃ᵀ: Frobenius |Δw|‖x̃‖²
    change = clip_rows(change, np.abs(change) * np.sum(x**2, axis=1), kappa * d)
    tau_r, tau_rh = taus(share * mu_anchor, recentre_hessian_share)
    score_sum2 = score_sum + hessian_sum @ step + residual.sum(0) + rng.normal(0, 2 * tau_r * 0.5 * kappa * d**2, size)
    hessian_sum2 = hessian_sum + (x * change[:, None]).T @ x + symmetric_noise(rng, 2 * tau_rh * kappa * d, size)
    e2, _ = newton_offset(moved, score_sum2, hessian_sum2)
    wide2, smallest = curvature_error(hessian_sum2, cov)
    edge = math.hypot(2 * tau_h * b_h, 2 * tau_rh * kappa * d) * math.sqrt(2 * size)
    return e, (math.inf if e2 is None else e2), d, wide, wide2, smallest / edge


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--start", type=float, default=2.0)
    parser.add_argument("--shares", nargs="*", type=float, default=[0.0, 0.05, 0.15])
    parser.add_argument("--recentre-hessian-shares", nargs="*", type=float, default=[CENTRE_HESSIAN_SHARE])
    parser.add_argument("--public-clips", action="store_true", help="the anchor at B and B²/4 (as the runs had)")
    parser.add_argument("--cells", nargs="*", default=["fair:4", "randhie:4", "randhie:1"])
    args = parser.parse_args()
    for cell in args.cells:
        name, epsilon = cell.split(":")[0], float(cell.split(":")[1])
        x, y = design(name)
        best, cov = mode(x, y)
        sd = np.sqrt(np.diag(cov))
        kappa = math.sqrt(x.shape[1]) ** 3 * LOGISTIC_THIRD  # x_bounds=(-1, 1): B = √P
        mu = gaussian_mu_for_target(CHAIN_SHARE * epsilon * (1 - CALIBRATION_MARGIN), 0.1 / len(y))
        for share in args.shares:
            for hessian_share in args.recentre_hessian_shares if share > 0 else [None]:
                rng = np.random.default_rng(5)
                settings = (best, sd, CENTRE_ANCHOR_SHARE * mu, share, args.start, kappa)
                options = {"public_clips": args.public_clips, "cov": cov}
                if hessian_share is not None:
                    options["recentre_hessian_share"] = hessian_share
                runs = [one_run(x, y, *settings, rng, **options) for _ in range(args.draws)]
                e = np.array([r[0] if r[0] is not None else math.inf for r in runs])
                wide = np.array([r[3] for r in runs])
                text = f"{name} eps {epsilon:g} share {share:.2f} | e {summary(e)} | widest C/C0 {summary(wide, 1.5)}"
                if share > 0:
                    e2 = np.array([r[1] if r[1] is not None else math.inf for r in runs])
                    wide2 = np.array([r[4] if r[4] is not None else math.inf for r in runs])
                    below = np.array([r[5] is not None and r[5] < 1 for r in runs])
                    d = np.array([r[2] for r in runs if r[2] is not None]) / math.sqrt(np.trace(cov))
                    text += (
                        f" || recentre hessian share {hessian_share:.2f} | e2 {summary(e2)} | widest C2/C0 "
                        f"{summary(wide2, 1.5)} | lambda_min below edge {np.mean(below):.2f}"
                        f" | d/sqrt(tr C) median {np.median(d):.2f}"
                    )
                print(text, flush=True)


def summary(values: np.ndarray, limit: float = 1.07) -> str:
    q50, q80, q95 = np.quantile(values, [0.5, 0.8, 0.95], method="inverted_cdf")
    return f"median {q50:.2f}, q80 {q80:.2f}, q95 {q95:.2f}, share <= {limit:g}: {np.mean(values <= limit):.2f}"


if __name__ == "__main__":
    main()
