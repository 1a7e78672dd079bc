"""What any release of clipped counts can reach on ``randhie`` Poisson: clipping bias against noise floor.

For the utility grid's ``randhie`` Poisson regression (N = 20,190, P = 7, covariates on [−1, 1])
this computes, with no release noise at all (NumPy, seconds; an oracle, not a DP method):

- ``clip_bias``: the root of the clipped-count estimating equation Σᵢ (min(yᵢ, M) − m(λᵢ))·xᵢ = 0
  that the released-statistics route's noise-aware likelihood targets (m(λ) = E[min(Y, M)] under
  the Poisson model, :func:`pymc_dp.exponential_family.counts.clamped_poisson_mean`), in posterior sds
  from the raw rows' Poisson posterior, for bounds M on the counts;
- ``nb_tail_bias``: the same with m(λ) from a negative binomial of dispersion α (a model of the
  clipped tail instead of the Poisson one: candidate (c)), the best α of a scan;
- ``clipped_share``: the clipping check's weighted share of rows (each row by how far the bound
  moved it, full weight from 5 % of M) and its flag threshold 1/√N;
- ``noise_floor``: the sd ratio over the raw posterior's that Gaussian noise on Σ min(y, M)·x alone
  leaves when that one release takes the whole (ε, δ) and the Hessian is exact: σ = τ·Δ₂ with
  Δ₂ = M·√(1 + 4·6) (substitute neighbours, the route's own sensitivity), carried through H⁻¹;
  every real release splits ε further, so real routes are wider;
- ``release_once``'s score clipping: the root of Σᵢ clip₂((yᵢ − λᵢ)xᵢ, b) = 0 with b four times the
  median score norm at the raw MLE (what its ``"auto"`` bound reads there without noise).

The reference is the Laplace approximation at the raw rows' Poisson MLE (NUTS's 2 × 1,000 draws
on the grid agree with it within 0.06 sds in every mean and 0.97–1.07× in every sd), or NUTS's cached
draws with ``--reference-cache``. Run: ``python benchmarks/count_clip_frontier.py`` (about 35 CPU s).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))

from utility import _randhie

from pymc_dp.accounting.calibrate import noise_multiplier_for_target
from pymc_dp.exponential_family.counts import clamped_poisson_mean

NAMES = ["alpha"] + [f"beta[{i}]" for i in range(6)]


def _newton(score_and_jacobian, start: np.ndarray, steps: int = 80) -> np.ndarray:
    beta = start.copy()
    for _ in range(steps):
        score, jacobian = score_and_jacobian(beta)
        step = np.linalg.solve(jacobian, score)
        beta = beta + step
        if np.max(np.abs(step)) < 1e-11:
            break
    return beta


def _nb_clipped_mean(lam: np.ndarray, y_max: int, alpha: float) -> np.ndarray:
    """E[min(Y, M)] = Σ_{k<M} P(Y > k) for Y ~ NB(mean λ, variance λ + λ²/α)."""
    k = np.arange(y_max)
    return stats.nbinom.sf(k[None, :], alpha, (alpha / (alpha + lam))[:, None]).sum(axis=1)


def clipped_root(x: np.ndarray, y: np.ndarray, y_max: int, start: np.ndarray, alpha: float | None = None):
    """The root of Σ (min(y, M) − m(λ))·x = 0 (m Poisson's, or NB's with ``alpha``), Jacobian by differences."""
    clipped = np.minimum(y, y_max)

    def mean(lam):
        return clamped_poisson_mean(lam, y_max) if alpha is None else _nb_clipped_mean(lam, y_max, alpha)

    def score_and_jacobian(beta):
        lam = np.exp(x @ beta)
        m = mean(lam)
        slope = (mean(lam * np.exp(1e-5)) - m) / 1e-5
        return x.T @ (clipped - m), (x * slope[:, None]).T @ x

    return _newton(score_and_jacobian, start)


def weighted_clipped_share(y: np.ndarray, y_max: int) -> float:
    """The clipping check's weighted share: a row weighs (y − M)/(0.05·M), at most 1, rounded up to 1/64."""
    weight = np.minimum(np.maximum(y - y_max, 0) / (0.05 * y_max), 1.0)
    return float(np.mean(np.ceil(weight * 64) / 64))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--y-max", type=int, nargs="+", default=[10, 20, 30, 40, 60, 80])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[4.0, 1.0])
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.6, 1.0, 2.0, 4.0, 8.0])
    parser.add_argument("--reference-cache", type=Path, default=None, help="utility.py's NUTS cache folder")
    args = parser.parse_args(argv)
    covariates, y = _randhie(None)
    x = np.column_stack([np.ones(len(y)), np.clip(covariates, -1.0, 1.0)])  # the route's public box
    n_rows, n_params = x.shape

    def poisson(beta):
        lam = np.exp(x @ beta)
        return x.T @ (y - lam), (x * lam[:, None]).T @ x

    mle = _newton(poisson, np.zeros(n_params))
    hessian = poisson(mle)[1]
    ref_mean, ref_sd = mle, np.sqrt(np.diag(np.linalg.inv(hessian)))
    if args.reference_cache is not None:
        saved = np.load(args.reference_cache / "nuts_randhie_poisson.npz")
        ref_mean = np.array([saved[k].mean() for k in NAMES])
        ref_sd = np.array([saved[k].std() for k in NAMES])
    inverse = np.linalg.inv(hessian)
    rows = []
    for y_max in args.y_max:
        root = clipped_root(x, y, y_max, mle)
        row = {
            "y_max": y_max,
            "clip_bias": [round(float(v), 2) for v in (root - ref_mean) / ref_sd],
            "clipped_share": weighted_clipped_share(y, y_max),
            "threshold": 1 / np.sqrt(n_rows),
        }
        nb = {a: float(np.max(np.abs((clipped_root(x, y, y_max, mle, a) - ref_mean) / ref_sd))) for a in args.alphas}
        best = min(nb, key=nb.get)
        row["nb_tail_bias"] = {
            "alpha": best,
            "max": round(nb[best], 2),
            "scan": {str(a): round(v, 2) for a, v in nb.items()},
        }
        for epsilon in args.epsilons:
            tau = noise_multiplier_for_target(epsilon, 0.1 / n_rows, 1)
            sd = tau * y_max * np.sqrt(1 + 4 * (n_params - 1)) * np.sqrt(np.diag(inverse @ inverse))
            row[f"noise_floor_eps{epsilon:g}"] = round(float(np.max(np.sqrt(1 + (sd / ref_sd) ** 2))), 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    norms = np.abs(y - np.exp(x @ mle)) * np.linalg.norm(x, axis=1)
    bound = 4.0 * float(np.median(norms))

    def clipped_score(beta):
        lam = np.exp(x @ beta)
        residual = y - lam
        scale = np.minimum(1.0, bound / np.maximum(np.abs(residual) * np.linalg.norm(x, axis=1), 1e-300))
        # Jacobian of the clipped score: unclipped rows −λxxᵀ, clipped rows (nearly) constant in β
        weight = np.where(scale < 1.0, 0.0, lam)
        return x.T @ (residual * scale), (x * weight[:, None]).T @ x + 1e-9 * np.eye(n_params)

    root = _newton(clipped_score, mle)
    once = {
        "release_once_grad_clip": round(bound, 3),
        "share_clipped": round(float(np.mean(norms > bound)), 4),
        "score_clip_bias": [round(float(v), 2) for v in (root - ref_mean) / ref_sd],
    }
    print(json.dumps(once), flush=True)
    return {"rows": rows, "release_once": once}


if __name__ == "__main__":
    main()
