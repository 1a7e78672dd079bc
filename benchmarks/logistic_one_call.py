"""The one call (``pmdp.sample(epsilon=, delta=)``, no step) on a logistic data set, repeated: per-parameter error.

Run: ``python benchmarks/logistic_one_call.py --data randhie_logistic --epsilon 1 --runs 3
--reference-cache DIR`` (``utility.py``'s model, public bounds and NUTS reference, cached as
``utility.py --reference-cache`` does). Each run is a new release (noise from OS entropy; NUTS's
seed ``--seed + run``). Prints one JSON line per run: per parameter (DP mean − NUTS mean) in NUTS
sds and in DP sds, DP sd / NUTS sd, whether NUTS's mean lies in the DP 94 % interval, the worst
R-hat and bulk ESS, whether the result was flagged and the result's problems; CPU seconds.
About 200 CPU s a run on randhie (N = 20,190, P = 7).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
from utility import DATASETS, _flat, _free_names, _mixing, _nuts_reference, run_one_call

import pymc_dp as pmdp
from pymc_dp.diagnostics import PoorMixingWarning


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="randhie_logistic", choices=("randhie_logistic", "fair_logistic"))
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--reference-cache", type=Path, default=None)
    parser.add_argument("--save", type=Path, default=None, help="a folder for each run's result (NetCDF)")
    args = parser.parse_args()
    model, _ = DATASETS[args.data](None)
    names = _free_names(model)
    delta = 0.1 / pmdp.plan(model, epsilon=1.0, delta=1e-6).n_rows
    reference, _ = _nuts_reference(model, names, False, args.reference_cache, args.data)
    for run in range(args.runs):
        start = time.process_time()
        with model, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PoorMixingWarning)
            idata = run_one_call(model, args.data, args.epsilon, delta, False, args.seed + run)
        flagged = any(issubclass(w.category, PoorMixingWarning) for w in caught)
        dp = _flat(idata, names)
        cell: dict = {"data": args.data, "epsilon": args.epsilon, "run": run, "flagged": flagged}
        for key, ref in reference.items():
            draws = dp[key]
            low, high = np.quantile(draws, [0.03, 0.97])
            cell[key] = {
                "z_nuts_sd": round(float((draws.mean() - ref.mean()) / ref.std()), 2),
                "z_dp_sd": round(float((draws.mean() - ref.mean()) / draws.std()), 2),
                "sd_ratio": round(float(draws.std() / ref.std()), 2),
                "covered": bool(low <= ref.mean() <= high),
            }
        cell.update(_mixing(idata, names))
        diagnostics = json.loads(idata.posterior.attrs.get("dp_diagnostics", "{}"))
        cell["problems"] = list(diagnostics.get("problems", diagnostics.get("reasons", [])))
        cell["cpu_s"] = round(time.process_time() - start, 1)
        if args.save is not None:
            args.save.mkdir(parents=True, exist_ok=True)
            idata.to_netcdf(args.save / f"{args.data}_eps{args.epsilon:g}_run{run}.nc")
        print(json.dumps(cell), flush=True)


if __name__ == "__main__":
    main()
