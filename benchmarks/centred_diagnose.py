"""Why a centred run with a small anchor offset e does not mix: its saved anchor and chains read against the data.

A diagnostic (issue 36, H36j), never part of the product: it reads the raw rows and the exact Hessian, which only a
benchmark may. Input: an ``.npz`` that ``centred_auto.py --save`` wrote (the chains' draws, the released anchor θ̂,
Ĝ, Ĥ and its clips and κ). Printed:

- the spectrum of the released C = (−Ĥ)⁻¹ against the exact C₀ = (−H − ∇²log p)⁻¹ at θ̂ (H the unclipped Hessian sum)
  and NUTS's covariance: the generalised eigenvalues of C against each (1 everywhere: the same shape);
- the chains along C's eigen-directions: their variance over C's, their mean's offset from θ̂ in C's sds, R-hat and
  bulk ESS per direction (where they do not mix, and whether it is a wide or a narrow direction);
- how many rows the anchor's clips cut (scores at b_g, Hessians at b_H), at θ̂.

Run: ``python benchmarks/centred_diagnose.py --save /tmp/run.npz --dataset fair_logistic --reference-cache
/tmp/nuts_refs`` (a second or so).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import arviz as az
import numpy as np
from utility import LOGISTIC_DATA

PRIOR_SD = {"fair_logistic": 2.0, "randhie_logistic": 2.0}


def logistic_rows(x: np.ndarray, y: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's score (N, P) and Hessian (N, P, P) of the Bernoulli log-likelihood, design (1, x)."""
    design = np.column_stack([np.ones(len(x)), x])
    p = 1.0 / (1.0 + np.exp(-(design @ theta)))
    scores = (y - p)[:, None] * design
    hessians = -(p * (1 - p))[:, None, None] * design[:, :, None] * design[:, None, :]
    return scores, hessians


def reference_covariance(cache: Path, name: str) -> np.ndarray:
    files = sorted(cache.glob(f"*{name}*.npz"))
    saved = np.load(files[0])
    keys = ["alpha", *sorted((k for k in saved.files if k.startswith("beta")), key=lambda k: int(k[5:-1]))]
    return np.cov(np.column_stack([saved[k] for k in keys]).T)


def generalised(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Eigenvalues of b^(-1/2) a b^(-1/2), ascending: 1 everywhere where a and b have the same shape."""
    values, vectors = np.linalg.eigh(b)
    root = vectors / np.sqrt(values)
    return np.linalg.eigvalsh(root.T @ a @ root)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--save", type=Path, required=True)
    parser.add_argument("--dataset", default="fair_logistic")
    parser.add_argument("--reference-cache", type=Path, required=True)
    args = parser.parse_args()
    saved = np.load(args.save)
    x, y = LOGISTIC_DATA[args.dataset](None)
    point, hessian = saved["point"], saved["hessian"]
    size = point.size
    prior_precision = np.eye(size) / PRIOR_SD[args.dataset] ** 2
    scores, hessians = logistic_rows(x, y, point)
    exact = np.linalg.inv(-hessians.sum(0) + prior_precision)
    curvature = -0.5 * (hessian + hessian.T)
    released = np.linalg.inv(curvature + prior_precision) if np.all(np.linalg.eigvalsh(curvature) > 0) else None
    nuts = reference_covariance(args.reference_cache, args.dataset)
    out: dict = {"e_released": None}
    if released is not None:
        out["C_over_exact"] = generalised(released, exact).round(3).tolist()
        out["C_over_nuts"] = generalised(released, nuts).round(3).tolist()
        out["exact_over_nuts"] = generalised(exact, nuts).round(3).tolist()
        sds = np.sqrt(np.diag(released))
        out["e_released"] = float(np.sqrt(np.mean(((released @ saved["gradient"]) / sds) ** 2)))
        chains = saved["chains"]  # (chains, draws, P)
        values, vectors = np.linalg.eigh(released)
        along = np.einsum("cdp,pk->cdk", chains - point, vectors) / np.sqrt(values)  # whitened by C
        out["C_eigen_sd"] = np.sqrt(values).round(4).tolist()
        out["chains_var_over_C"] = along.reshape(-1, size).var(0).round(2).tolist()
        out["chains_mean_in_C_sds"] = along.reshape(-1, size).mean(0).round(2).tolist()
        out["rhat"] = [round(float(az.rhat(np.ascontiguousarray(along[..., k]))), 3) for k in range(size)]
        out["ess_bulk"] = [
            round(float(az.ess(np.ascontiguousarray(along[..., k]), method="bulk")), 1) for k in range(size)
        ]
        out["chain_means"] = along.mean(1).round(2).tolist()
        out["distance2_over_trC"] = float(np.mean(np.sum((chains - point) ** 2, axis=-1)) / np.trace(released))
    grad_clip = float(saved["grad_clip"]) if "grad_clip" in saved.files else np.nan
    hess_clip = float(saved["hessian_clip"]) if "hessian_clip" in saved.files else np.nan
    out["grad_clip"], out["hessian_clip"] = grad_clip, hess_clip
    out["rows_score_clipped"] = float(np.mean(np.linalg.norm(scores, axis=1) > grad_clip))
    out["rows_hessian_clipped"] = float(np.mean(np.linalg.norm(hessians, axis=(1, 2)) > hess_clip))
    for key in ("hessian_noise_std", "noise_std", "lipschitz"):
        if key in saved.files:
            out[key] = float(saved[key])
    if "hessian_noise_std" in saved.files:  # DPHMC's dense mass floors −Ĥ − ∇²log p's eigenvalues at this edge
        edge = float(saved["hessian_noise_std"]) * np.sqrt(2.0 * size)
        out["curvature_over_edge"] = (np.linalg.eigvalsh(curvature + prior_precision) / edge).round(3).tolist()
    for key in ("stat_dp_accept", "stat_dp_proposal_scale", "stat_dp_step_size"):
        if key in saved.files:
            out[key[5:] + "_mean_per_chain"] = np.asarray(saved[key]).mean(axis=-1).round(4).tolist()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
