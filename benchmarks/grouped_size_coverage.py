"""Coverage of known group effects with the grouped release's sizes latent or integrated out (issue 34, H34m).

Run: ``python benchmarks/grouped_size_coverage.py --replicates 6 --epsilon 4``.
Each replicate draws (μ, τ, β, the group intercepts) from the prior, 8 groups of 5–500 rows, one covariate, and
releases the group cells once with Gaussian noise (δ = 10⁻⁶; noise from OS entropy); the same release is read
twice, with every group size latent (``MARGINAL_SIZE_UNITS`` = ∞, the likelihood before) and with the sizes of
groups many noise units above 0 integrated out (the default), NUTS 2 × 500 after 500 each. Prints the share of
the 90 % intervals of the group intercepts and β that cover the truth, their mean width, divergences and CPU s,
per variant. A confidently wrong change would show as coverage below the latent variant's at equal width.
"""

from __future__ import annotations

import argparse
import json
import resource
import warnings

import numpy as np
import pymc as pm

import pymc_dp.exponential_family.grouped_likelihood as grouped_likelihood
from pymc_dp import release_statistics

SIZES = np.array([5, 10, 20, 50, 100, 200, 300, 500])
#: The package's setting, read before this script sets it per fit.
INTEGRATED_UNITS = grouped_likelihood.MARGINAL_SIZE_UNITS


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _fit(release, units: float, seed: int):
    grouped_likelihood.MARGINAL_SIZE_UNITS = units
    with pm.Model(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the measured diagnostics are returned, not warned
        m = pm.Normal("mu", 0.0, 1.0)
        t = pm.HalfNormal("tau", 1.0)
        a = pm.Deterministic("alpha", m + t * pm.Normal("z", 0.0, 1.0, shape=SIZES.size))
        b = pm.Normal("beta", 0.0, 1.0, shape=1)
        s = pm.HalfNormal("sigma", 2.0)
        release.likelihood("lik", alpha=a, beta=b, sigma=s)
        return pm.sample(
            draws=500, tune=500, chains=2, target_accept=0.95, random_seed=seed, progressbar=False,
            compute_convergence_checks=False,
        )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=6)
    parser.add_argument("--epsilon", type=float, default=4.0)
    args = parser.parse_args()
    totals = {"latent": [], "integrated": []}
    for replicate in range(args.replicates):
        rng = np.random.default_rng(500 + replicate)
        mu, tau, beta = rng.normal(0.0, 1.0), abs(rng.normal(0.0, 1.0)), rng.normal(0.0, 1.0)
        alpha = mu + tau * rng.normal(size=SIZES.size)
        groups = np.repeat(np.arange(SIZES.size), SIZES)
        x = rng.uniform(-1.0, 1.0, size=(groups.size, 1))
        y = np.clip(alpha[groups] + beta * x[:, 0] + 0.5 * rng.normal(size=groups.size), -4.0, 4.0)
        release = release_statistics(
            "linear_regression", (x, y, groups), epsilon=args.epsilon, delta=1e-6, mechanism="gaussian",
            n_groups=SIZES.size, n_features=1, x_bounds=(-1.0, 1.0), y_bounds=(-4.0, 4.0),
        )  # fmt: skip
        for variant, units in (("latent", np.inf), ("integrated", INTEGRATED_UNITS)):
            cpu = _cpu()
            idata = _fit(release, units, 700 + replicate)
            draws = np.column_stack([idata.posterior["alpha"].values.reshape(-1, SIZES.size),
                                     idata.posterior["beta"].values.reshape(-1, 1)])  # fmt: skip
            truth = np.append(alpha, beta)
            low, high = np.quantile(draws, [0.05, 0.95], axis=0)
            row = {
                "replicate": replicate, "variant": variant, "noise_sd": round(float(release.scale), 2),
                "covered": ((low <= truth) & (truth <= high)).astype(int).tolist(),
                "width": np.round(high - low, 3).tolist(),
                "divergences": int(idata.sample_stats["diverging"].values.sum()), "cpu_s": round(_cpu() - cpu, 1),
            }  # fmt: skip
            totals[variant].append(row)
            print(json.dumps(row), flush=True)
    for variant, rows in totals.items():
        covered = np.array([r["covered"] for r in rows])
        width = np.array([r["width"] for r in rows])
        print(json.dumps({
            "variant": variant, "epsilon": args.epsilon, "checks": int(covered.size),
            "coverage": round(float(covered.mean()), 3), "coverage_by_group": covered.mean(axis=0).round(2).tolist(),
            "mean_width_by_group": width.mean(axis=0).round(3).tolist(),
            "divergences": int(sum(r["divergences"] for r in rows)), "cpu_s": round(sum(r["cpu_s"] for r in rows), 1),
        }))  # fmt: skip


if __name__ == "__main__":
    main()
