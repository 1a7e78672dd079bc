"""DPBarkerMH: cost per iteration against N, and against pm.Metropolis on the full data.

Run: ``python benchmarks/bench_barker.py [--batch-size 1000] [--features 10]``.

Logistic regression with ``pm.Data`` rows (so a batch of b rows costs O(b)). Prints

- the time per DPBarkerMH iteration at N = 10⁶ divided by the time at N = 10⁴, same b
  (target ≤ 1.3: the cost must not grow with N);
- the speed-up of DPBarkerMH at N = 10⁶ over ``pm.Metropolis`` on the full data, per
  iteration (PyMC's Metropolis updates a vector one coordinate at a time, so one of its
  iterations evaluates the full-data log-density once per coordinate) and per proposal.
"""

from __future__ import annotations

import argparse

import pymc as pm
from _common import environment, logistic_regression, seconds_per_iteration

import pymc_dp as pmdp


def barker_seconds(n_rows: int, features: int, batch_size: int, iterations: int) -> float:
    model = logistic_regression(n_rows, features)
    with model:
        step = pmdp.DPBarkerMH(batch_size=batch_size, tempered_size=100.0)
    return seconds_per_iteration(model, step, iterations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--metropolis-iterations", type=int, default=20)
    args = parser.parse_args()
    n_params = args.features + 1

    t_small = barker_seconds(args.small, args.features, args.batch_size, args.iterations)
    t_large = barker_seconds(args.large, args.features, args.batch_size, args.iterations)
    model = logistic_regression(args.large, args.features)
    with model:
        metropolis = pm.Metropolis()
    t_metropolis = seconds_per_iteration(model, metropolis, args.metropolis_iterations)

    print(environment())
    print(f"logistic regression, P = {n_params}, batch b = {args.batch_size}")
    print(f"DPBarkerMH N = {args.small:>9}  {1e3 * t_small:9.3f} ms / iteration")
    print(f"DPBarkerMH N = {args.large:>9}  {1e3 * t_large:9.3f} ms / iteration")
    print(f"ratio large / small              {t_large / t_small:9.2f} x   (target <= 1.3)")
    print(f"pm.Metropolis N = {args.large:>6}  {1e3 * t_metropolis:9.3f} ms / iteration ({n_params} proposals each)")
    print(f"speed-up per iteration           {t_metropolis / t_large:9.1f} x   (expect >= 20)")
    print(f"speed-up per proposal            {t_metropolis / n_params / t_large:9.1f} x")


if __name__ == "__main__":
    main()
