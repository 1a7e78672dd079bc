"""Utility of the Poisson-regression release (issue 34, deliverable 2) against NUTS on the raw rows.

``simulated``: a Poisson regression with an intercept and four covariates (x ~ N(0, 1) clipped
to the public bounds [−2, 2], β = (0.5, 0.3, −0.2, 0.1, 0), counts clipped to y_max = 10), at
each N in ``--rows``; one data set per N, NUTS on its raw rows once, and ``--repeats`` releases
of it (fresh noise each) at ε = ``--epsilon``, δ = 0.1/N, each with one covariate anchor, then
NUTS on the noise-aware likelihood (2 × 1,000 draws). ``randhie``: the ``randhie_poisson`` row
of ``benchmarks/utility.py`` (its data, scaling and priors; covariate bounds ±1, the intercept a
column of ones), counts clipped to ``--y-max``.

The mechanism is the one of smaller noise variance at the public settings (the planner's rule:
Gaussian at δ when τ²Δ₂² < 2Δ₁²/ε², else Laplace). Per coefficient it reports
|DP mean − NUTS mean| / NUTS sd, DP sd / NUTS sd, whether NUTS's mean and (simulated) the true
β lie in the DP 90 % equal-tailed interval, R-hat and the wall time.

Run: ``python benchmarks/poisson_release.py simulated --rows 10000 100000`` or
``python benchmarks/poisson_release.py randhie``; ``--out`` writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_dp as pmdp
from pymc_dp.accounting.calibrate import noise_multiplier_for_target
from pymc_dp.exponential_family import get_family

TRUE_BETA = np.array([0.5, 0.3, -0.2, 0.1, 0.0])
DRAWS = {"draws": 1000, "tune": 1000, "chains": 2, "progressbar": False}


def simulated_data(n_rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.clip(rng.normal(size=(n_rows, TRUE_BETA.size - 1)), -2.0, 2.0)
    design = np.column_stack([np.ones(n_rows), x])
    return design, rng.poisson(np.exp(design @ TRUE_BETA))


def nuts_raw(design: np.ndarray, y: np.ndarray, prior_sd: np.ndarray, seed: int) -> np.ndarray:
    with pm.Model():
        beta = pm.Normal("beta", 0.0, prior_sd, shape=design.shape[1])
        pm.Poisson("y", mu=pm.math.exp(pm.math.dot(design, beta)), observed=y)
        idata = pm.sample(random_seed=seed, compute_convergence_checks=False, **DRAWS)
    return idata.posterior["beta"].values.reshape(-1, design.shape[1])


def mechanism(settings: dict, epsilon: float, delta: float) -> dict:
    family = get_family("poisson_regression", **settings)
    tau = noise_multiplier_for_target(epsilon, delta, 1)
    gaussian = (tau * family.l2_sensitivity()) ** 2 < 2.0 * (family.l1_sensitivity() / epsilon) ** 2
    return {"mechanism": "gaussian", "delta": delta} if gaussian else {"mechanism": "laplace"}


def release_posterior(design, y, settings: dict, epsilon: float, prior_sd: np.ndarray, seed: int) -> tuple:
    noise = mechanism(settings, epsilon, 0.1 / len(y))
    start = time.perf_counter()
    release = pmdp.release_statistics(
        "poisson_regression", (design, y), epsilon=epsilon, covariate_anchors=1, **noise, **settings
    )
    with pm.Model(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        release.likelihood("y", beta=pm.Normal("beta", 0.0, prior_sd, shape=design.shape[1]))
        idata = release.sample(random_seed=seed, on_poor_mixing="ignore", **DRAWS)
    seconds = time.perf_counter() - start
    rhat = float(pm.stats.rhat(idata)["beta"].max())
    return idata.posterior["beta"].values.reshape(-1, design.shape[1]), noise["mechanism"], rhat, seconds


def compare(dp: np.ndarray, ref: np.ndarray, truth: np.ndarray | None) -> dict:
    low, high = np.quantile(dp, [0.05, 0.95], axis=0)
    mean_ref, sd_ref = ref.mean(0), ref.std(0)
    out = {
        "error_in_nuts_sds": (np.abs(dp.mean(0) - mean_ref) / sd_ref).tolist(),
        "sd_ratio": (dp.std(0) / sd_ref).tolist(),
        "covers_nuts_mean": ((low <= mean_ref) & (mean_ref <= high)).tolist(),
    }
    if truth is not None:
        out["covers_truth"] = ((low <= truth) & (truth <= high)).tolist()
    return out


def simulated(rows: list[int], epsilon: float, repeats: int, seed: int) -> list[dict]:
    results = []
    for n_rows in rows:
        design, y = simulated_data(n_rows, seed)
        settings = {"n_features": 5, "x_bounds": ([1.0] + [-2.0] * 4, [1.0] + [2.0] * 4), "y_max": 10}
        prior_sd = np.full(5, 2.0)
        start = time.perf_counter()
        ref = nuts_raw(design, y, prior_sd, seed)
        nuts_seconds = time.perf_counter() - start
        for r in range(repeats):
            dp, kind, rhat, seconds = release_posterior(design, y, settings, epsilon, prior_sd, seed + 1 + r)
            cell = {"data": "simulated", "n_rows": n_rows, "epsilon": epsilon, "repeat": r, "mechanism": kind}
            cell.update(compare(dp, ref, TRUE_BETA), rhat=rhat, seconds=seconds, nuts_seconds=nuts_seconds)
            results.append(cell)
            print(json.dumps(cell), flush=True)
    return results


def randhie(epsilon: float, repeats: int, seed: int, y_max: int) -> list[dict]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from utility import _randhie

    x, y = _randhie(None)
    design = np.column_stack([np.ones(len(y)), x])
    d = design.shape[1]
    prior_sd = np.array([2.0] + [1.0] * (d - 1))  # utility.py's randhie_poisson priors
    settings = {"n_features": d, "x_bounds": ([1.0] + [-1.0] * (d - 1), [1.0] + [1.0] * (d - 1)), "y_max": y_max}
    start = time.perf_counter()
    ref = nuts_raw(design, y, prior_sd, seed)
    nuts_seconds = time.perf_counter() - start
    results = []
    for r in range(repeats):
        dp, kind, rhat, seconds = release_posterior(design, y, settings, epsilon, prior_sd, seed + 1 + r)
        cell = {"data": "randhie_poisson", "n_rows": len(y), "epsilon": epsilon, "repeat": r, "mechanism": kind}
        cell.update(compare(dp, ref, None), rhat=rhat, seconds=seconds, nuts_seconds=nuts_seconds, y_max=y_max)
        results.append(cell)
        print(json.dumps(cell), flush=True)
    return results


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", choices=["simulated", "randhie"])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--seed", type=int, default=20211)
    parser.add_argument("--y-max", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.data == "simulated":
        results = simulated(args.rows, args.epsilon, args.repeats, args.seed)
    else:
        results = randhie(args.epsilon, args.repeats, args.seed, args.y_max)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
