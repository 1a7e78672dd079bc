"""Clipping bias against noise, as the clip bound moves: what ``clip_quantile`` trades.

For each data set of ``benchmarks/utility.py`` (real public data) and each clip quantile q, the
bound b is the q-quantile of the per-row score norms ‖∇θ log p(xᵢ | θ)‖ at the model's initial
point — the noise-free value of what ``pmdp.sample`` releases with ``clip_quantile=q`` — and
two errors are computed, both in posterior standard deviations of NUTS on the raw data:

- **clipping bias**: the shift of the root of the score when each row's score is clipped,
  to first order: Σ_post · Σᵢ (clip_b(gᵢ) − gᵢ) at the NUTS posterior mean, with Σ_post
  NUTS's posterior covariance (the inverse Hessian), worst parameter. This is the shift of
  the fixed point DPADVI's clipped gradients converge to, and a conservative proxy for the
  penalty test (which clips the ratio along the move, |gᵢ·u| ≤ ‖gᵢ‖, so it clips less);
- **noise**: the standard error that the noise leaves at ε, from the planner's laws
  (:mod:`pymc_dp.planning`): for DPPenaltyMH 1/√(chains · ESS ceiling), the ESS ceiling
  0.331 (1 − f) 2μ*/(P κ² b² s²) with s the geometric mean of NUTS's sds; for DPADVI the
  expected mean error σκ b s / (q_batch √(T/2)) of the default fit (2,000 steps, batches of
  about 1,000 rows).

Both are computed offline on the raw data: this script is a benchmark that reads data to
measure what a private choice costs, never a route a user's result goes through.

Run: ``python benchmarks/clipping.py`` (a few minutes). Writes ``docs/images/clipping.png``,
``docs/images/clipping.json`` and ``docs/images/clipping.md`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pymc as pm

sys.path.insert(0, str(Path(__file__).resolve().parent))

from utility import DATASETS

from pymc_dp.accounting.calibrate import poisson_gaussian_noise_multiplier
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.data import RowLikelihood
from pymc_dp.mechanisms.clipping import clip_l2
from pymc_dp.planning import default_dpadvi_sampling_rate, penalty_ess_limit

QUANTILES = (0.5, 0.9, 0.95)
MARGINS = (1.0, 2.0, 4.0)
#: Where the norms are taken: the model's initial point (pmdp.sample with init="prior") and the
#: NUTS posterior mean (a stand-in for the DPADVI fit's mean, the reference of init="dpadvi").
REFERENCES = ("initial point", "posterior mean")
EPSILONS = (1.0, 4.0)
CHAINS = 4
DPADVI_STEPS = 2000


def _nuts_moments(model: pm.Model, rows: RowLikelihood, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """NUTS posterior mean and covariance of the flat unconstrained parameters (the reference)."""
    with model:
        idata = pm.sample(
            1000, tune=1000, chains=2, random_seed=seed, progressbar=False, compute_convergence_checks=False
        )
    flats = []
    for var in rows.value_vars:
        rv = model.values_to_rvs[var]
        draws = np.asarray(idata.posterior[rv.name])
        transform = model.rvs_to_transforms.get(rv)
        if transform is not None:
            draws = np.asarray(transform.forward(draws, *rv.owner.inputs).eval())
        flats.append(draws.reshape(draws.shape[0] * draws.shape[1], -1))
    flat = np.concatenate(flats, axis=1)
    return flat.mean(axis=0), np.atleast_2d(np.cov(flat, rowvar=False))


def _clipping_bias(grads: np.ndarray, bound: float, covariance: np.ndarray, sd: np.ndarray) -> float:
    """Worst |first-order shift| of the score's root from clipping at ``bound``, in posterior sds."""
    excess = (clip_l2(grads, bound) - grads).sum(axis=0)
    return float(np.max(np.abs(covariance @ excess) / sd))


def measure(name: str, seed: int = 1) -> dict:
    model, public_clip = DATASETS[name](None)
    rows = RowLikelihood(model)
    n, p = rows.n_rows, rows.n_params
    mean, covariance = _nuts_moments(model, rows, seed)
    sd = np.sqrt(np.diag(covariance))
    s = float(np.exp(np.mean(np.log(sd))))
    theta_ref = rows._theta_initial  # the model's initial point: what pmdp.sample uses
    norms = np.linalg.norm(rows.grad_rows(theta_ref), axis=1)
    grads_at_posterior = rows.grad_rows(mean)
    norms_at_posterior = np.linalg.norm(grads_at_posterior, axis=1)
    delta = 0.1 / n
    q_batch = default_dpadvi_sampling_rate(n)
    out = {"n_rows": n, "n_params": p, "public_clip": public_clip, "geometric_mean_sd": s, "cells": []}
    candidates = [
        (reference, q, m, m * float(np.quantile(ref_norms, q)))
        for reference, ref_norms in zip(REFERENCES, (norms, norms_at_posterior), strict=True)
        for q in QUANTILES
        for m in MARGINS
    ]
    candidates.append(("public", None, None, float(public_clip)))
    for reference, quantile, margin, bound in candidates:
        bias = _clipping_bias(grads_at_posterior, bound, covariance, sd)
        cell = {
            "reference": reference,
            "quantile": quantile,
            "margin": margin,
            "bound": bound,
            "share_clipped_at_posterior": float(np.mean(norms_at_posterior > bound)),
            "bias_sd": bias,
        }
        for epsilon in EPSILONS:
            mu = gaussian_mu_for_target(epsilon, delta)
            ess = CHAINS * penalty_ess_limit(mu_total=mu, llr_clip=bound, posterior_sd=s, n_params=p, chains=CHAINS)
            sigma = poisson_gaussian_noise_multiplier(epsilon, delta, q_batch, DPADVI_STEPS, "substitute")
            advi_noise = sigma * 2 * bound * s / (q_batch * math.sqrt(DPADVI_STEPS / 2))
            cell[f"penalty_noise_sd_eps{epsilon:g}"] = 1 / math.sqrt(ess)
            cell[f"dpadvi_noise_sd_eps{epsilon:g}"] = advi_noise
        out["cells"].append(cell)
        print(name, cell, flush=True)
    return out


def _figure(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, (name, res) in zip(axes[0], results.items(), strict=True):
        cells = sorted((c for c in res["cells"] if c["reference"] != "public"), key=lambda c: c["bound"])
        b = [c["bound"] for c in cells]
        ax.plot(b, [max(c["bias_sd"], 1e-3) for c in cells], "k-o", ms=3, label="clipping bias")
        for epsilon, style in zip(EPSILONS, ("--", ":"), strict=True):
            ax.plot(
                b,
                [c[f"penalty_noise_sd_eps{epsilon:g}"] for c in cells],
                "C0" + style,
                label=f"penalty noise ε={epsilon:g}",
            )
            ax.plot(
                b,
                [c[f"dpadvi_noise_sd_eps{epsilon:g}"] for c in cells],
                "C1" + style,
                label=f"DPADVI noise ε={epsilon:g}",
            )
        public = next(c for c in res["cells"] if c["reference"] == "public")
        ax.axvline(public["bound"], color="grey", lw=0.8)
        ax.annotate("public bound", (public["bound"], 1e-3), fontsize=7, rotation=90)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(1e-3, None)
        ax.set_xlabel("clip bound b")
        ax.set_ylabel("error in posterior sds")
        ax.set_title(f"{name} (N={res['n_rows']}, P={res['n_params']})")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _table(results: dict) -> str:
    lines = []
    for name, res in results.items():
        lines.append(f"\n**{name}** (N = {res['n_rows']}, P = {res['n_params']})\n")
        head = "| norms at | quantile | margin | b | share clipped at posterior | clipping bias (sd) |"
        head += "".join(f" penalty noise ε={e:g} | DPADVI noise ε={e:g} |" for e in EPSILONS)
        lines += [head, "|" + "---|" * (6 + 2 * len(EPSILONS))]
        for c in res["cells"]:
            q = "" if c["quantile"] is None else f"{c['quantile']:g}"
            m = "" if c["margin"] is None else f"{c['margin']:g}"
            row = f"| {c['reference']} | {q} | {m} | {c['bound']:.3g} | {c['share_clipped_at_posterior']:.4f} |"
            row += f" {c['bias_sd']:.3g} |"
            row += "".join(
                f" {c[f'penalty_noise_sd_eps{e:g}']:.3g} | {c[f'dpadvi_noise_sd_eps{e:g}']:.3g} |" for e in EPSILONS
            )
            lines.append(row)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="*", default=list(DATASETS))
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "images")
    args = parser.parse_args()
    results = {name: measure(name) for name in args.datasets}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "clipping.json").write_text(json.dumps(results, indent=1))
    (args.out / "clipping.md").write_text(_table(results))
    _figure(results, args.out / "clipping.png")
    print(_table(results))


if __name__ == "__main__":
    main()
