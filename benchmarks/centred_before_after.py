"""Before and after centring (issue 36): ``pmdp.sample(step=DPHMC() or DPPenaltyMH())`` plain vs centred, same data.

On a logistic regression of the utility grid (``utility.fair_logistic``: statsmodels' ``fair``,
6,366 rows, P = 5; or ``utility.randhie_logistic``: 20,190 rows, P = 7; covariates scaled by
public codebook ranges to [−1, 1], so ``x_bounds=(-1, 1)``), at ε (default 4) and δ = 0.1/N, each
step runs twice as a user would, at its defaults otherwise (DPADVI start, ``"auto"`` clip
bounds, 1,000 + 1,000 iterations per chain, 2 chains): with ``centre=False`` ("before") and
with ``x_bounds`` (centred: five noisy Newton steps, a second-order anchor, the anchor's noise
widening the draws; "after"). The reference is NUTS (``pm.sample``, 2 × (1,000 + 1,000)).

Per run, over the P coefficients: the largest |mean − NUTS mean| in NUTS sds, the median (and
largest) sd over NUTS's sd, the published result's R-hat max and bulk ESS min (what the user
sees; a centred run's draws are widened by independent noise, which raises ESS), the chains'
own R-hat and ESS before the widening (centred runs), whether the result was flagged and why,
and the CPU and wall seconds of the ``pmdp.sample`` call.

Run (niced, one at a time): ``nice -n 10 python benchmarks/centred_before_after.py [--dataset
fair_logistic] [--epsilon 4] [--methods DPHMC DPPenaltyMH] [--seed 0] [--centred-only]
[--reference-cache /tmp/nuts_refs]``. ``--centred-only`` skips the plain runs (issue 36's target
cells, ``docs/hmc.md``); ``--reference-cache`` reuses ``utility.py``'s NUTS draws (seed 1). Each
centred run also prints the plan's row and the run's own prediction
(``dp_accountant["centring"]["prediction"]``), the sd ratio's range, whether NUTS's means lie in
the 94 % intervals, the acceptance and step size.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
from centred_planner_check import RawDraws, ess_and_rhat
from utility import _nuts_reference, fair_logistic, randhie_logistic

import pymc_dp as pmdp

DATASETS = {"fair_logistic": fair_logistic, "randhie_logistic": randhie_logistic}


def stacked(posterior: dict[str, np.ndarray]) -> np.ndarray:
    """(chains, draws, P): alpha then beta."""
    alpha = np.asarray(posterior["alpha"])
    beta = np.asarray(posterior["beta"])
    return np.concatenate([alpha[..., None], beta.reshape(*alpha.shape, -1)], axis=-1)


def nuts_reference(model, seed: int, cache=None, name: str = "") -> tuple[np.ndarray, np.ndarray, float]:
    """NUTS's means and sds (alpha, then beta); from ``cache`` (``utility.py``'s reference cache, NUTS at seed 1,
    2 × (1,000 + 1,000)) when given, its wall seconds then in place of CPU seconds."""
    if cache is not None:
        reference, seconds = _nuts_reference(model, ["alpha", "beta"], False, cache, name)
        keys = ["alpha", *sorted((k for k in reference if k.startswith("beta")), key=lambda k: int(k[5:-1]))]
        flat = np.column_stack([reference[k] for k in keys])
        return flat.mean(0), flat.std(0), seconds
    start = time.process_time()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(1000, tune=1000, chains=2, cores=1, random_seed=seed, progressbar=False)
    draws = stacked({name: idata.posterior[name].values for name in ("alpha", "beta")})
    flat = draws.reshape(-1, draws.shape[-1])
    return flat.mean(0), flat.std(0), time.process_time() - start


def run(model, method: str, centre: bool, epsilon: float, delta: float, seed: int, ref_mean, ref_sd) -> dict:
    kwargs = {"x_bounds": (-1.0, 1.0)} if centre else {"centre": False}
    cpu, wall = time.process_time(), time.perf_counter()
    with model, warnings.catch_warnings(), RawDraws() as raw:
        warnings.simplefilter("ignore")  # a flagged run is a measurement here, not an error
        step = pmdp.DPHMC() if method == "DPHMC" else pmdp.DPPenaltyMH()
        idata = pmdp.sample(
            step=step,
            epsilon=epsilon,
            delta=delta,
            chains=2,
            cores=1,
            random_seed=seed,
            progressbar=False,
            on_poor_mixing="ignore",
            **kwargs,
        )
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    draws = stacked({name: idata.posterior[name].values for name in ("alpha", "beta")})
    flat = draws.reshape(-1, draws.shape[-1])
    ess, rhat = ess_and_rhat(draws)
    diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
    ratio = flat.std(0) / ref_sd
    low, high = np.quantile(flat, [0.03, 0.97], axis=0)
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    prediction = (record.get("centring") or {}).get("prediction") or {}
    stats = idata.sample_stats
    out = {
        "method": method,
        "centred": centre,
        "err_max_sd": float(np.max(np.abs(flat.mean(0) - ref_mean) / ref_sd)),
        "sd_ratio_median": float(np.median(ratio)),
        "sd_ratio_max": float(np.max(ratio)),
        "sd_ratio_min": float(np.min(ratio)),
        "nuts_means_in_94": bool(np.all((low <= ref_mean) & (ref_mean <= high))),
        "acceptance": float(stats["dp_accept"].mean()) if "dp_accept" in stats else None,
        "step_size": float(stats["dp_step_size"].mean()) if "dp_step_size" in stats else None,
        "iterations": int(idata.posterior.sizes["draw"]),
        "own_prediction_per_chain": prediction.get("ess_per_chain"),
        "own_prediction": prediction,
        "rhat_max": rhat,
        "bulk_ess_min": ess,
        "flagged": not diagnostics["usable"],
        "problems": diagnostics.get("problems"),
        "cpu_s": round(cpu, 1),
        "wall_s": round(wall, 1),
        "epsilon_spent": idata.posterior.attrs["dp_epsilon"],
    }
    if raw.draws is not None:
        out["chains_rhat_max"], out["chains_bulk_ess_min"] = ess_and_rhat(stacked(raw.draws))[::-1]
        out["chains_ess_per_chain"] = out["chains_bulk_ess_min"] / 2
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="fair_logistic")
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--methods", nargs="+", default=["DPHMC", "DPPenaltyMH"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--centred-only", action="store_true", help="skip the plain (centre=False) runs")
    parser.add_argument("--reference-cache", type=Path, default=None, help="utility.py's NUTS reference cache")
    args = parser.parse_args()
    model, _ = DATASETS[args.dataset]()
    n_rows = int(model.observed_RVs[0].shape.eval()[0])
    delta = 0.1 / n_rows
    ref_mean, ref_sd, nuts_cpu = nuts_reference(model, args.seed, args.reference_cache, args.dataset)
    print(json.dumps({"dataset": args.dataset, "N": n_rows, "nuts_cpu_s": round(nuts_cpu, 1)}), flush=True)
    for method in args.methods:
        the_plan = pmdp.plan(model, epsilon=args.epsilon, delta=delta, chains=2, x_bounds=(-1.0, 1.0))
        row = the_plan.method(f"{method} (centred)")
        plan_row = {"iterations": row.iterations, "ess_per_chain": row.expected_ess, "usable": row.usable}
        head = {"dataset": args.dataset, "eps": args.epsilon, "method": method}
        print(json.dumps({**head, "plan": plan_row}), flush=True)
        for centre in (True,) if args.centred_only else (False, True):
            result = run(model, method, centre, args.epsilon, delta, args.seed, ref_mean, ref_sd)
            print(json.dumps({"dataset": args.dataset, "eps": args.epsilon, **result}, default=float), flush=True)


if __name__ == "__main__":
    main()
