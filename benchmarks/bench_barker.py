"""DPBarkerMH: cost per iteration against N, and against pm.Metropolis on the full data.

Run: ``python benchmarks/bench_barker.py [--batch-size 1000] [--features 10]``.

Logistic regression, written twice: with ``pm.Data`` rows and with numpy arrays
(``observed=y``, ``x @ beta``); both are indexed, so a batch of b rows costs O(b). Prints

- for each, the time per DPBarkerMH iteration at N = 10⁶ divided by the time at N = 10⁴,
  same b (target ≤ 1.2: the cost must not grow with N);
- the speed-up of DPBarkerMH at N = 10⁶ over ``pm.Metropolis`` on the full data, per
  iteration (PyMC's Metropolis updates a vector one coordinate at a time, so one of its
  iterations evaluates the full-data log-density once per coordinate) and per proposal.
"""

from __future__ import annotations

import argparse

import pymc as pm
from _common import environment, logistic_regression, seconds_per_iteration

import pymc_dp as pmdp


def barker_seconds(n_rows: int, features: int, batch_size: int, iterations: int, use_data: bool = True) -> float:
    model = logistic_regression(n_rows, features, use_data=use_data)
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

    times = {
        (kind, n): barker_seconds(n, args.features, args.batch_size, args.iterations, use_data=kind == "pm.Data")
        for kind in ("pm.Data", "numpy")
        for n in (args.small, args.large)
    }
    t_large = times[("pm.Data", args.large)]
    model = logistic_regression(args.large, args.features)
    with model:
        metropolis = pm.Metropolis()
    t_metropolis = seconds_per_iteration(model, metropolis, args.metropolis_iterations)

    print(environment())
    print(f"logistic regression, P = {n_params}, batch b = {args.batch_size}")
    for kind in ("pm.Data", "numpy"):
        t_s, t_l = times[(kind, args.small)], times[(kind, args.large)]
        print(f"{kind:8} DPBarkerMH N = {args.small:>9}  {1e3 * t_s:9.3f} ms / iteration")
        print(f"{kind:8} DPBarkerMH N = {args.large:>9}  {1e3 * t_l:9.3f} ms / iteration")
        print(f"{kind:8} ratio large / small              {t_l / t_s:9.2f} x   (target <= 1.2)")
    print(f"pm.Metropolis N = {args.large:>6}  {1e3 * t_metropolis:9.3f} ms / iteration ({n_params} proposals each)")
    print(f"speed-up per iteration           {t_metropolis / t_large:9.1f} x   (expect >= 20)")
    print(f"speed-up per proposal            {t_metropolis / n_params / t_large:9.1f} x")


if __name__ == "__main__":
    main()
