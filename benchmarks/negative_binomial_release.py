"""Utility of the negative-binomial-regression release (issue 34, deliverable 2) against NUTS on the raw rows.

A negative-binomial regression with an intercept and four covariates (x ~ N(0, 1) clipped to
the public bounds [−2, 2], β = (0.5, 0.3, −0.2, 0.1, 0), α = 2 known, counts clipped to
``--y-max``), at each N in ``--rows``: one data set per N, NUTS with ``pm.NegativeBinomial`` on
its raw rows once, and ``--repeats`` releases of it (fresh noise each) at ε = ``--epsilon``,
δ = 0.1/N, each with ``--anchors`` anchors, then NUTS on the noise-aware likelihood
(2 × 1,000 draws). The mechanism is the one of smaller noise variance at the public settings
(the planner's rule, as in ``benchmarks/poisson_release.py``). Per coefficient it reports
|DP mean − NUTS mean| / NUTS sd, DP sd / NUTS sd, whether NUTS's mean and the true β lie in the
DP 90 % interval, R-hat and the wall time.

Run: ``python benchmarks/negative_binomial_release.py --rows 10000 100000``; ``--out`` writes the JSON.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from poisson_release import DRAWS, TRUE_BETA, compare  # the same comparison and draws

ALPHA = 2.0


def simulated_data(n_rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.clip(rng.normal(size=(n_rows, TRUE_BETA.size - 1)), -2.0, 2.0)
    design = np.column_stack([np.ones(n_rows), x])
    mu = np.exp(design @ TRUE_BETA)
    return design, rng.negative_binomial(ALPHA, ALPHA / (ALPHA + mu))


def nuts_raw(design: np.ndarray, y: np.ndarray, prior_sd: np.ndarray, seed: int) -> np.ndarray:
    with pm.Model(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        beta = pm.Normal("beta", 0.0, prior_sd, shape=design.shape[1])
        pm.NegativeBinomial("y", mu=pm.math.exp(pm.math.dot(design, beta)), alpha=ALPHA, observed=y)
        idata = pm.sample(random_seed=seed, compute_convergence_checks=False, **DRAWS)
    return idata.posterior["beta"].values.reshape(-1, design.shape[1])


def release_posterior(design, y, settings, epsilon, anchors, prior_sd, seed) -> tuple:
    family = get_family("negative_binomial_regression", **settings)
    delta = 0.1 / len(y)
    tau = noise_multiplier_for_target(epsilon, delta, 1)
    gaussian = (tau * family.l2_sensitivity()) ** 2 < 2.0 * (family.l1_sensitivity() / epsilon) ** 2
    noise = {"mechanism": "gaussian", "delta": delta} if gaussian else {"mechanism": "laplace"}
    start = time.perf_counter()
    release = pmdp.release_statistics(
        "negative_binomial_regression", (design, y), epsilon=epsilon, covariate_anchors=anchors, **noise, **settings
    )
    with pm.Model(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        release.likelihood("y", beta=pm.Normal("beta", 0.0, prior_sd, shape=design.shape[1]))
        idata = release.sample(random_seed=seed, on_poor_mixing="ignore", **DRAWS)
    seconds = time.perf_counter() - start
    rhat = float(pm.stats.rhat(idata)["beta"].max())
    return idata.posterior["beta"].values.reshape(-1, design.shape[1]), noise["mechanism"], rhat, seconds


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--anchors", type=int, default=2)
    parser.add_argument("--seed", type=int, default=20211)
    parser.add_argument("--y-max", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    results = []
    for n_rows in args.rows:
        design, y = simulated_data(n_rows, args.seed)
        settings = {
            "n_features": 5,
            "x_bounds": ([1.0] + [-2.0] * 4, [1.0] + [2.0] * 4),
            "y_max": args.y_max,
            "alpha": ALPHA,
        }
        prior_sd = np.full(5, 2.0)
        start = time.perf_counter()
        ref = nuts_raw(design, y, prior_sd, args.seed)
        nuts_seconds = time.perf_counter() - start
        for r in range(args.repeats):
            dp, kind, rhat, seconds = release_posterior(
                design, y, settings, args.epsilon, args.anchors, prior_sd, args.seed + 1 + r
            )
            cell = {"n_rows": n_rows, "epsilon": args.epsilon, "repeat": r, "mechanism": kind, "anchors": args.anchors}
            cell.update(compare(dp, ref, TRUE_BETA), rhat=rhat, seconds=seconds, nuts_seconds=nuts_seconds)
            cell["clipped_share"] = float(np.mean(y > args.y_max))
            results.append(cell)
            print(json.dumps(cell), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
