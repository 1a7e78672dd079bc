"""DPADVI vs pm.ADVI per iteration at the same (expected) batch size, logistic regression.

Run: ``python benchmarks/bench_dpadvi.py [--rows 100000] [--features 10] [--batch 1000] [--iterations 2000]``.

pm.ADVI runs on ``pm.Minibatch`` batches of ``--batch`` rows (its own compiled step with the
optimiser updates); DPADVI runs Poisson batches of expected size ``--batch`` (q = batch/N) with
per-row gradients, clipping, noise and the same optimiser (Adam). Each is timed as the
difference between two runs of different length on a warm object (median of three), so
compilation and the per-fit accounting are excluded. Target for mean-field: DPADVI ≤ 2×
pm.ADVI.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pymc as pm
from _common import environment

import pymc_dp as pmdp


def data(n_rows: int, n_features: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, n_features))
    beta = rng.normal(size=n_features)
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-(0.3 + x @ beta)))).astype("int64")
    return x, y


def dp_model(x, y) -> pm.Model:
    with pm.Model() as model:
        xd, yd = pm.Data("x", x), pm.Data("y_obs", y)
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 2, shape=x.shape[1])
        pm.Bernoulli("y", logit_p=alpha + xd @ beta, observed=yd)
    return model


def minibatch_model(x, y, batch: int) -> pm.Model:
    with pm.Model() as model:
        xb, yb = pm.Minibatch(x, y.astype("int32"), batch_size=batch)
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 2, shape=x.shape[1])
        pm.Bernoulli("y", logit_p=alpha + xb @ beta, observed=yb, total_size=x.shape[0])
    return model


def per_iteration(run, short: int, long: int, repeats: int = 3) -> float:
    """Median over ``repeats`` of (t(long) − t(short)) / (long − short): an iteration's cost without fixed costs."""
    run(short)  # warm-up: compilation, first accounting
    estimates = []
    for _ in range(repeats):
        times = {}
        for n in (short, long):
            start = time.perf_counter()
            run(n)
            times[n] = time.perf_counter() - start
        estimates.append((times[long] - times[short]) / (long - short))
    return float(np.median(estimates))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--mode", default=None, help="compile mode of DPADVI's per-row functions, e.g. NUMBA")
    args = parser.parse_args()
    x, y = data(args.rows, args.features)
    q = args.batch / args.rows
    short, long = args.iterations // 4, args.iterations

    print(environment())
    print(f"rows N = {args.rows}, parameters P = {args.features + 1}, batch = {args.batch} (q = {q:g})")
    print(f"DPADVI compile mode: {args.mode or 'default'}")
    for approximation, method in (("meanfield", pm.ADVI), ("fullrank", pm.FullRankADVI)):
        with minibatch_model(x, y, args.batch):
            plain = method(random_seed=1)
        optimizer = pm.adam(learning_rate=0.01)
        plain.fit(10, obj_optimizer=optimizer, progressbar=False)
        t_plain = per_iteration(lambda n, p=plain: p.refine(n, progressbar=False), short, long)

        dpadvi = pmdp.DPADVI(
            noise_multiplier=1.0, delta=1e-6, sampling_rate=q, grad_clip=5.0, approximation=approximation,
            optimizer="adam", learning_rate=0.01, random_seed=1,
            compile_kwargs=None if args.mode is None else {"mode": args.mode},
        )  # fmt: skip
        model = dp_model(x, y)
        t_dp = per_iteration(lambda n, d=dpadvi, m=model: d.fit(n, model=m, progressbar=False), short, long)
        print(
            f"{approximation:9s}  pm.ADVI {1e3 * t_plain:7.3f} ms/it   DPADVI {1e3 * t_dp:7.3f} ms/it   "
            f"ratio {t_dp / t_plain:5.2f} x" + ("   (target <= 2)" if approximation == "meanfield" else "")
        )


if __name__ == "__main__":
    main()
