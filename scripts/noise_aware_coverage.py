"""Coverage of 90 % central intervals, noise-aware vs naive, for the one-statistic families (issue 15).

Quadrature posteriors (no MCMC): see :func:`pymc_dp.testing.calibration.calibrate_univariate`.
Prints one markdown row per (family, N, ε) as it finishes.

    python scripts/noise_aware_coverage.py --repeats 200
"""

import argparse
import math
import zlib

import numpy as np

from pymc_dp.testing.calibration import calibrate_univariate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--families", nargs="+", default=["bernoulli", "binomial", "poisson", "normal"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 1.0])
    args = parser.parse_args()
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
