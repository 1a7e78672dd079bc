"""DPADVI's two posteriors against NUTS: q widened by its optimisation noise, and the Laplace read-off.

For each ε and seed, one DPADVI fit (mean-field, Adam 0.05, 2,000 iterations, Poisson batches of
about 1,000 rows, the data set's public clip bound) on a utility-benchmark model, then
``approx.sample(posterior="variational")`` and ``approx.sample(posterior="laplace")`` from the
same fit (post-processing: one ε for both). Per posterior it reports, over seeds × parameters:
the share of NUTS means inside the DP 94 % equal-tailed interval, the median and largest DP sd
÷ NUTS sd, the largest |DP mean − NUTS mean| in NUTS sds, the fits flagged
(:class:`pymc_dp.diagnostics.PoorMixingWarning`), and the share covered among unflagged fits.

Run: ``python benchmarks/dpadvi_posteriors.py`` (``randhie_logistic``, ε ∈ {0.5, 1, 4}, 12
seeds: about 5 minutes on 2 cores); ``--model fair_logistic``, ``--epsilons``, ``--seeds``.
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
import pymc as pm
import utility  # benchmarks/utility.py: the models and their public clip bounds

import pymc_dp as pmdp
from pymc_dp.diagnostics import PoorMixingWarning
from pymc_dp.planning import default_dpadvi_sampling_rate

POSTERIORS = ("variational", "laplace")


def _summaries(idata, names):
    flat = utility._flat(idata, names)
    return {k: (v.mean(), v.std(), *np.quantile(v, [0.03, 0.97])) for k, v in flat.items()}


def run(model_name: str, epsilons: list[float], seeds: int) -> dict:
    model, clip = getattr(utility, model_name)()
    names = utility._free_names(model)
    with model:
        reference = pm.sample(1000, tune=1000, chains=2, random_seed=1, progressbar=False)
    nuts = {k: (v.mean(), v.std()) for k, v in utility._flat(reference, names).items()}
    n_rows = pmdp.plan(model, epsilon=1.0, delta=1e-6).n_rows
    result = {"model": model_name, "n_rows": n_rows, "seeds": seeds, "cells": []}
    for epsilon in epsilons:
        stats = {
            p: {"covered": [], "ratio": [], "error": [], "flagged": [], "unflagged_covered": []} for p in POSTERIORS
        }
        for seed in range(seeds):
            with model:
                fit = pmdp.DPADVI(
                    epsilon=epsilon,
                    delta=0.1 / n_rows,
                    sampling_rate=default_dpadvi_sampling_rate(n_rows),
                    grad_clip=clip,
                    optimizer="adam",
                    learning_rate=0.05,
                    random_seed=seed,
                )
                approx = fit.fit(2000, progressbar=False)
            for posterior in POSTERIORS:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", PoorMixingWarning)
                    idata = approx.sample(1000, random_seed=seed, posterior=posterior)
                flagged = any(issubclass(w.category, PoorMixingWarning) for w in caught)
                covered = []
                for key, (mean, sd, low, high) in _summaries(idata, names).items():
                    ref_mean, ref_sd = nuts[key]
                    covered.append(bool(low <= ref_mean <= high))
                    stats[posterior]["ratio"].append(sd / ref_sd)
                    stats[posterior]["error"].append(abs(mean - ref_mean) / ref_sd)
                stats[posterior]["covered"] += covered
                stats[posterior]["flagged"].append(flagged)
                if not flagged:
                    stats[posterior]["unflagged_covered"] += covered
        for posterior, s in stats.items():
            unflagged = s["unflagged_covered"]
            result["cells"].append(
                {
                    "epsilon": epsilon,
                    "posterior": posterior,
                    "coverage_94": float(np.mean(s["covered"])),
                    "median_sd_ratio": float(np.median(s["ratio"])),
                    "max_sd_ratio": float(np.max(s["ratio"])),
                    "max_error_sd": float(np.max(s["error"])),
                    "flagged": int(np.sum(s["flagged"])),
                    "unflagged_coverage_94": float(np.mean(unflagged)) if unflagged else None,
                }
            )
            print(json.dumps(result["cells"][-1]), flush=True)
    return result


def markdown(result: dict) -> str:
    lines = [
        f"`{result['model']}` (N = {result['n_rows']:,}), {result['seeds']} fits per ε",
        "",
        "| ε | posterior | NUTS means in 94 % interval | sd ÷ NUTS sd (median / max) | worst \\|Δmean\\| (NUTS sds)"
        " | fits flagged | covered, unflagged fits |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in result["cells"]:
        unflagged = "–" if c["unflagged_coverage_94"] is None else f"{c['unflagged_coverage_94']:.3f}"
        lines.append(
            f"| {c['epsilon']:g} | {c['posterior']} | {c['coverage_94']:.3f} | {c['median_sd_ratio']:.2f} / "
            f"{c['max_sd_ratio']:.3g} | {c['max_error_sd']:.2f} | {c['flagged']} | {unflagged} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="randhie_logistic")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 4.0])
    parser.add_argument("--seeds", type=int, default=12)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", FutureWarning)
    result = run(args.model, args.epsilons, args.seeds)
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
