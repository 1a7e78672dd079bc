"""DPHMC vs pm.HamiltonianMC per iteration, same L, η and model (logistic regression or the 10-d Gaussian).

Run: ``python benchmarks/bench_hmc.py [--model logistic] [--rows 100000] [--features 10] [--leapfrog
10] [--iterations 40] [--repeats 5]``. ``--model gaussian``: the DP-HMC paper's 10-d correlated
Gaussian with an unknown mean (``_common.correlated_gaussian``, P = 10; ``--features`` ignored),
whose clipped sums need per-row gradients (no linear predictor). Both samplers use L leapfrog steps
of the same size and a unit mass matrix; HMC's cost is L + 1 full-data log-density gradients per
iteration, DPHMC's L + 1 clipped gradient sums (each one compiled pass per row chunk, see
``RowLikelihood.clipped_sum_mode``) plus one per-row log-likelihood vector. Target ratio ≤ 1.3
(issue 38). Then the pieces, each the fastest of ``--repeats`` × 3 calls in CPU ms: the per-row
gradient matrix, the clipped sum and PyMC's own ``model.compile_dlogp()`` on all N rows.

The two samplers are timed alternately ``--repeats`` times in the same process; the ratio is
reported from the fastest round of each (wall clock, and CPU time of this process, which a
machine shared with other jobs disturbs less) and from the medians. Set
``OMP_NUM_THREADS=1`` for single-threaded figures (CPU time then equals the work done).
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
import pymc as pm
from _common import correlated_gaussian, environment, logistic_regression, matched_hmc_steps


def _seconds_per_iteration(model: pm.Model, step, iterations: int) -> tuple[float, float]:
    """(wall, CPU) seconds per iteration of ``pm.sample`` with ``step``, one chain, after a short warm-up run."""
    kwargs = dict(chains=1, cores=1, random_seed=3, progressbar=False, compute_convergence_checks=False)
    with model:
        pm.sample(step=step, draws=3, tune=0, **kwargs)  # warm-up (compilation caches)
        wall, cpu = time.perf_counter(), time.process_time()
        pm.sample(step=step, draws=iterations, tune=0, **kwargs)
    return (time.perf_counter() - wall) / iterations, (time.process_time() - cpu) / iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("logistic", "gaussian"), default="logistic")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--leapfrog", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5, help="alternating timing rounds of both samplers")
    parser.add_argument("--mode", default=None, help="PyTensor compile mode for pymc-dp, e.g. NUMBA")
    args = parser.parse_args()
    logging.getLogger("pymc").setLevel(logging.ERROR)  # one line per pm.sample call otherwise
    if args.model == "gaussian":
        model, n_params = correlated_gaussian(args.rows), 10
    else:
        model, n_params = logistic_regression(args.rows, args.features), args.features + 1

    with model:
        hmc, dp_hmc = matched_hmc_steps(
            n_params, args.rows, args.leapfrog, compile_kwargs={"mode": args.mode} if args.mode else None
        )
    rounds = {"hmc": [], "dp": []}
    for _ in range(args.repeats):
        for key, step in (("hmc", hmc), ("dp", dp_hmc)):
            rounds[key].append(_seconds_per_iteration(model, step, args.iterations))
    hmc_t, dp_t = np.array(rounds["hmc"]), np.array(rounds["dp"])
    print(environment())
    print(
        f"{args.model}: rows N = {args.rows}, parameters P = {n_params}, leapfrog L = {args.leapfrog}, "
        f"iterations = {args.iterations} x {args.repeats} rounds"
    )
    print("                    wall min   wall median   cpu min   cpu median   (ms / iteration)")
    for name, t in (("pm.HamiltonianMC", hmc_t), ("pmdp.DPHMC", dp_t)):
        mins, meds = 1e3 * t.min(axis=0), 1e3 * np.median(t, axis=0)
        print(f"{name:18s} {mins[0]:9.2f} {meds[0]:12.2f} {mins[1]:10.2f} {meds[1]:11.2f}")
    ratio_min, ratio_med = dp_t.min(axis=0) / hmc_t.min(axis=0), np.median(dp_t, axis=0) / np.median(hmc_t, axis=0)
    print(
        f"ratio              {ratio_min[0]:9.2f} {ratio_med[0]:12.2f} {ratio_min[1]:10.2f} {ratio_med[1]:11.2f}"
        "   (target <= 1.3)"
    )
    pieces = _pieces_ms(model, {"mode": args.mode} if args.mode else None, args.repeats)
    print("; ".join(f"{name} {ms:.2f} ms" for name, ms in pieces.items()), "(CPU, fastest call)")


def _pieces_ms(model: pm.Model, compile_kwargs: dict | None, repeats: int) -> dict[str, float]:
    """CPU ms of the per-row gradient matrix, its clipped sum and PyMC's dlogp on all rows (fastest call)."""
    from pymc_dp.data import RowLikelihood

    rows = RowLikelihood(model, compile_kwargs=compile_kwargs)
    theta = rows.prior.initial_theta + 0.1
    dlogp, point = model.compile_dlogp(), model.initial_point()
    calls = {
        f"per-row gradient ({rows.gradient_mode})": lambda: rows.grad_rows(theta),
        "clipped sum": lambda: rows.clipped_grad_sum(theta, 3.0),
        "model.compile_dlogp()": lambda: dlogp(point),
    }
    best = dict.fromkeys(calls, np.inf)
    for _ in range(3 * repeats):
        for name, call in calls.items():
            start = time.process_time()
            call()
            best[name] = min(best[name], time.process_time() - start)
    return {name: 1e3 * t for name, t in best.items()}


if __name__ == "__main__":
    main()
