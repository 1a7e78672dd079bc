"""Issue 36's target cells at the defaults: ``pmdp.sample(step=..., x_bounds=(-1, 1))``, draws and tune unset.

On the utility grid's logistic data sets (``utility.fair_logistic``: 6,366 rows, P = 5;
``utility.randhie_logistic``: 20,190 rows, P = 7; covariates scaled by public ranges to [−1, 1])
at ε and δ = 0.1/N, each step runs as a user would: DPADVI start, ``"auto"`` clips, the Newton
pilots, the second-order anchor, 2 chains, and the iterations a centred run takes with ``draws`` and ``tune``
unset since H36i, ``draws="auto"``'s (``--draws-auto`` passes it explicitly, as before H36i) (the
centred row, capped per sampler: :data:`pymc_dp.step_methods.centred_plan.CENTRED_AUTO_MAX_ITERATIONS`
for DPHMC, :data:`pymc_dp.step_methods.centred_plan.CENTRED_PENALTY_AUTO_MAX_ITERATIONS` for
DPPenaltyMH). The reference is NUTS (2 × (1,000 + 1,000), ``utility.py``'s cache).

Per run: the largest |mean − NUTS mean| in NUTS sds, the sd ratio's min, median and max, whether
NUTS's means lie in the 94 % intervals, the chains' own R-hat and bulk ESS per chain (before the
anchor's widening), the run's predicted ESS per chain, the iterations, whether the result was
flagged and why, and the CPU seconds of the call. And, to check the ESS law's inputs against the
chains: e (the anchor's released offset in sds, what the law reads), the chains' own mean
distance² from θ̂ over the law's R² = tr C (1 + e²) (C = (−Ĥ)⁻¹), and for DPHMC the whitened step
the dual averaging settled on (η̄ / r, r² = tr C / P) against the law's.

Run (niced, one at a time): ``nice -n 10 python benchmarks/centred_auto.py --dataset randhie_logistic
--epsilon 4 --method DPPenaltyMH --reference-cache /tmp/nuts_refs [--seed 0]``; one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
from centred_before_after import DATASETS, nuts_reference, stacked
from centred_planner_check import RawDraws, ess_and_rhat

import pymc_dp as pmdp
from pymc_dp.step_methods.centred_plan import anchor_posterior_scale, anchor_posterior_shape


def law_inputs(centring: dict, draws: np.ndarray) -> dict:
    """The anchor's e and R² as the law reads them (post-processing of the record), and the chains' own distance²."""
    anchor = centring["steps"][0]["centring"] if "steps" in centring else centring
    point = np.asarray(anchor["point"], dtype=float)

    class Released:
        hessian = np.asarray(anchor["hessian"], dtype=float)
        gradient = np.asarray(anchor["gradient"], dtype=float)

    shape = anchor_posterior_shape(Released)
    if shape is None:
        return {}
    _, offset = anchor_posterior_scale(Released, float("nan"), float("nan"))
    law_r2 = float(np.trace(shape)) * (1.0 + offset**2)
    flat = draws.reshape(-1, draws.shape[-1]) - point
    sds = np.sqrt(np.diag(shape))
    chains_offset = float(np.sqrt(np.mean((flat.mean(0) / sds) ** 2)))
    mean = flat.mean(0)
    return {
        "e_released": offset,
        "e_chains": chains_offset,
        "distance2_over_law_r2": float(np.mean(np.sum(flat**2, axis=1)) / law_r2),
        # the law since H36h: R² = tr C + ‖CĜ‖² (the released offset vector's own length)
        "distance2_over_new_r2": float(
            np.mean(np.sum(flat**2, axis=1)) / (np.trace(shape) + np.sum((shape @ Released.gradient) ** 2))
        ),
        # its two parts: the chains' spread over tr C, and their offset² over e² tr C (the law's split of R²)
        "spread_over_trace": float(np.sum(flat.var(0)) / np.trace(shape)),
        "offset2_over_law": float(np.sum(mean**2) / (offset**2 * np.trace(shape))),
        "rms_sd": float(np.sqrt(np.trace(shape) / shape.shape[0])),
    }


def run(
    model,
    method: str,
    epsilon: float,
    delta: float,
    seed: int,
    ref_mean,
    ref_sd,
    save=None,
    draws_auto=False,
    centre="auto",
) -> dict:
    """One ``pmdp.sample(step=method(), x_bounds=(-1, 1))`` call (``draws="auto"`` if asked) and its measurements."""
    cpu = time.process_time()
    with model, warnings.catch_warnings(), RawDraws() as raw:
        warnings.simplefilter("ignore")  # a flagged run is a measurement here, not an error
        idata = pmdp.sample(
            step=pmdp.DPHMC() if method == "DPHMC" else pmdp.DPPenaltyMH(),
            epsilon=epsilon,
            delta=delta,
            **({"draws": "auto"} if draws_auto else {}),
            chains=2,
            cores=1,
            random_seed=seed,
            progressbar=False,
            on_poor_mixing="ignore",
            x_bounds=(-1.0, 1.0),
            centre=centre,
        )
    cpu = time.process_time() - cpu
    flat = stacked({name: idata.posterior[name].values for name in ("alpha", "beta")})
    flat = flat.reshape(-1, flat.shape[-1])
    ratio = flat.std(0) / ref_sd
    low, high = np.quantile(flat, [0.03, 0.97], axis=0)
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
    prediction = (record.get("centring") or {}).get("prediction") or {}
    chains = stacked(raw.draws)
    ess, rhat = ess_and_rhat(chains)
    out = {
        "method": method,
        "iterations": record.get("plan", {}).get("iterations"),
        "draws": int(idata.posterior.sizes["draw"]),
        "err_max_sd": float(np.max(np.abs(flat.mean(0) - ref_mean) / ref_sd)),
        "sd_ratio": [float(np.min(ratio)), float(np.median(ratio)), float(np.max(ratio))],
        "nuts_means_in_94": bool(np.all((low <= ref_mean) & (ref_mean <= high))),
        "chains_rhat_max": rhat,
        "chains_ess_per_chain": ess / 2,
        "predicted_ess_per_chain": prediction.get("ess_per_chain"),
        "flagged": not diagnostics["usable"],
        "problems": diagnostics.get("problems"),
        "cpu_s": round(cpu, 1),
        "acceptance": float(idata.sample_stats["dp_accept"].mean()),
    }
    out.update(law_inputs(record["steps"][0]["centring"], chains))
    if save is not None:  # the chains' own draws and the released anchor, for reading the law's inputs again
        anchor = record["steps"][0]["centring"]
        scalars = ("grad_clip", "hessian_clip", "noise_std", "hessian_noise_std", "lipschitz")
        kept = ("dp_accept", "dp_accepted", "dp_proposal_scale", "dp_step_size")
        stats = {f"stat_{k}": np.asarray(idata.sample_stats[k]) for k in kept if k in idata.sample_stats}
        np.savez(
            save,
            chains=chains,
            **{k: np.asarray(anchor[k]) for k in ("point", "gradient", "hessian")},
            **{k: np.asarray(float(anchor[k])) for k in scalars if anchor.get(k) is not None},
            **stats,
            record=np.asarray(json.dumps(anchor)),
        )
    if method == "DPHMC" and "rms_sd" in out:
        out["whitened_step"] = float(idata.sample_stats["dp_step_size"].mean()) / out["rms_sd"]
        out["law_whitened_step"] = prediction.get("step_size")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="fair_logistic")
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--method", choices=["DPHMC", "DPPenaltyMH"], default="DPPenaltyMH")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference-cache", type=Path, default=None, help="utility.py's NUTS reference cache")
    parser.add_argument("--save", type=Path, default=None, help="an .npz for the chains' draws and the anchor")
    parser.add_argument("--draws-auto", action="store_true", help='pass draws="auto" (the default since H36i)')
    parser.add_argument("--centre", default="auto", help='"recentre": the re-centring release (H36i)')
    args = parser.parse_args()
    model, _ = DATASETS[args.dataset]()
    n_rows = int(model.observed_RVs[0].shape.eval()[0])
    ref_mean, ref_sd, _ = nuts_reference(model, args.seed, args.reference_cache, args.dataset)
    settings = (args.method, args.epsilon, 0.1 / n_rows, args.seed, ref_mean, ref_sd, args.save, args.draws_auto)
    result = run(model, *settings, args.centre)
    line = {"dataset": args.dataset, "eps": args.epsilon, "centre": args.centre, **result}
    print(json.dumps(line, default=float), flush=True)


if __name__ == "__main__":
    main()
