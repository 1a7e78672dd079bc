"""Coverage of 90 % central intervals, noise-aware vs naive, per family, N and ε (issue 15).

One-statistic families: quadrature posteriors (no MCMC), see
:func:`pymc_dp.testing.calibration.calibrate_univariate`. ``--regression``: linear regression
by NUTS (:func:`pymc_dp.testing.calibration.calibrate_linear_regression`), run in batches of
``--batch`` repeats with the running totals printed after each (β₀, β₁, σ per cell);
``--regression --logistic``: logistic regression on released (Σ s·x, Σ xxᵀ)
(:func:`pymc_dp.testing.calibration.calibrate_logistic_regression`, β₀, β₁ per cell).
Prints one markdown row per (family, N, ε) as it finishes.

    python scripts/noise_aware_coverage.py --repeats 200
    python scripts/noise_aware_coverage.py --regression --repeats 200 --sizes 100 --epsilons 0.1 1
    python scripts/noise_aware_coverage.py --regression --logistic --repeats 100
"""

import argparse
import math
import zlib

import numpy as np

from pymc_dp.testing.calibration import (
    calibrate_linear_regression,
    calibrate_logistic_regression,
    calibrate_univariate,
)


def regression(args) -> None:
    names = "β₀, β₁" if args.logistic else "β₀, β₁, σ"
    calibrate = calibrate_logistic_regression if args.logistic else calibrate_linear_regression
    print(f"| N | ε | repeats | noise-aware coverage {names} | naive coverage", end="")
    print(" | noise-aware width | naive width | min ESS |")
    print("|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        for eps in args.epsilons:
            label = "logistic" if args.logistic else "regression"
            suffix = f"-{args.seed}" if args.seed else ""  # another seed: more repeats of the same cell
            rng = np.random.default_rng(zlib.crc32(f"{label}-{eps}-{n}{suffix}".encode()))
            done, aware, naive, w_aware, w_naive, ess = 0, 0.0, 0.0, 0.0, 0.0, np.inf
            while done < args.repeats:
                k = min(args.batch, args.repeats - done)
                r = calibrate(n, eps, k, rng, draws=args.draws, tune=args.draws, chains=1)
                aware = aware + np.array(r.noise_aware_coverage) * k
                naive = naive + np.array(r.naive_coverage) * k
                w_aware = w_aware + np.array(r.noise_aware_width) * k
                w_naive = w_naive + np.array(r.naive_width) * k
                ess, done = min(ess, r.min_ess), done + k

                def fmt(v, count=done):
                    return ", ".join(f"{x / count:.3g}" for x in v)

                print(
                    f"| {n} | {eps:g} | {done} | {fmt(aware)} | {fmt(naive)} | {fmt(w_aware)} | {fmt(w_naive)} "
                    f"| {ess:.0f} |",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--families", nargs="+", default=["bernoulli", "binomial", "poisson", "normal"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 1.0])
    parser.add_argument("--regression", action="store_true", help="linear regression by NUTS instead")
    parser.add_argument("--logistic", action="store_true", help="with --regression: logistic regression")
    parser.add_argument("--seed", type=int, default=0, help="regression: another seed for more repeats of a cell")
    parser.add_argument("--batch", type=int, default=10, help="regression: repeats between printed totals")
    parser.add_argument("--draws", type=int, default=300, help="regression: NUTS draws (and tuning steps)")
    args = parser.parse_args()
    if args.regression:
        regression(args)
        return
    se = math.sqrt(0.09 / args.repeats)
    print(f"repeats {args.repeats}; binomial standard error of a coverage at 0.9: {se:.3f}")
    print("| family | N | ε | noise-aware coverage | naive coverage | noise-aware width | naive width |")
    print("|---|---|---|---|---|---|---|")
    for family in args.families:
        for n in args.sizes:
            for eps in args.epsilons:
                rng = np.random.default_rng(zlib.crc32(f"{family}-{eps}-{n}".encode()))
                r = calibrate_univariate(family, n, eps, args.repeats, rng)
                print(
                    f"| {family} | {n} | {eps:g} | {r.noise_aware_coverage:.3f} | {r.naive_coverage:.3f} "
                    f"| {r.noise_aware_width:.4g} | {r.naive_width:.4g} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
