"""The client's memory while DPPenaltyMH is built and run on rows that never leave the cluster (issue 37).

For each N (its own child process, so that each peak is its own): N logistic-regression rows with P = 20
columns (an intercept and 19 covariates, the labels y) are written to Parquet, one partition at a time, by
a child of the child (the client never holds the table: ``dask_release.write_parquet``); then, in the
client process, a ``LocalCluster`` of 2 worker processes (1 thread each, ``--memory-limit`` each) reads
them lazily (``dask.dataframe.read_parquet``, N and the partitions' lengths from the Parquet metadata),
a model of ``pmdp.row_placeholder`` stand-ins is built, DPPenaltyMH is built in
``sampler_model(model, rows)``'s copy and a short run (``--draws`` + ``--tune`` iterations, one chain,
reproducible noise) is sampled with ``pmdp.DaskBackend(client, rows=rows)``: every release runs on the
workers' blocks. Printed: the client's peak RSS (``ru_maxrss``; the ``LocalCluster``'s scheduler runs in
the client's process) after the imports, after the cluster started, after the step was built and after
the run; the client's CPU for building the step and for the run; the workers' CPU and RSS.

Run: ``python benchmarks/dask_client_memory.py --rows 100000 1000000 10000000`` (needs ``pyarrow``;
``--keep DIR`` writes the files there and reuses them). The issue's target: under 500 MiB independent of
N, at N = 2·10⁷ (3.2 GB of rows on the workers).

Measured 2026-11-29 (Python 3.12, load average 7-10), after the run converts its trace without the observed
stand-in and the diagnostics import ``arviz_stats``: client peak after the run 541, 533, 533 and 542 MiB at
N = 10⁵, 10⁶, 10⁷ (20 partitions) and 2·10⁷ (100 partitions), where the run imports JAX through
``arviz_base`` (JAX installed, NumPyro not); with ``--without-jax`` 414 (100 partitions), 402, 401 and 411 MiB.
Before: 530, 532, 818 and 1,123 MiB (docs/dask.md). Python 3.11 (PyMC 5.28, ArviZ 0.23; no JAX imported), 100
partitions: 460 MiB at N = 10⁵, 461 MiB at 2·10⁷.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from dask_release import P, _own_cpu, _worker_cpu, lazy_parquet, write_parquet


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # kB on Linux


def _files(folder: Path, n_rows: int, partitions: int) -> None:
    """Parquet partitions in ``folder`` (written by a child process unless there already)."""
    if sorted(folder.glob("part-*.parquet")):
        return
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        pool.submit(write_parquet, folder, n_rows, partitions).result()


def child(n_rows: int, partitions: int, args: argparse.Namespace) -> None:
    if args.without_jax:  # as in an environment without JAX (the `dask` extra alone): `import jax` fails
        sys.modules["jax"] = None
    import dask
    import distributed
    import pymc as pm

    import pymc_dp as pmdp
    from pymc_dp.backends.dask_sampler_rows import sampler_model
    from pymc_dp.results import group_names

    line = [f"N = {n_rows:,}, P = {P}, {partitions} partitions ({8 * n_rows * (P + 1) / 2**20:,.0f} MiB of rows)"]
    line.append(f"client peak RSS after imports {_peak_rss_mib():.0f} MiB")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) if args.keep is None else args.keep / f"rows-{n_rows}-{partitions}"
        folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        _files(folder, n_rows, partitions)
        line.append(f"files {time.perf_counter() - start:.0f} s")
        with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
            cluster = distributed.LocalCluster(
                n_workers=2,
                threads_per_worker=1,
                processes=True,
                memory_limit=args.memory_limit,
                dashboard_address=":0",
                silence_logs=logging.CRITICAL,
            )
        with cluster, distributed.Client(cluster) as client:
            line.append(f"after the cluster started {_peak_rss_mib():.0f} MiB")
            X, y = lazy_parquet(folder)
            rows = {"X": X, "y": y.astype("int64")}
            with pm.Model() as model:
                beta = pm.Normal("beta", 0.0, 2.0, shape=P)
                pm.Bernoulli(
                    "y", logit_p=pmdp.row_placeholder(rows["X"]) @ beta, observed=pmdp.row_placeholder(rows["y"])
                )
            own = _own_cpu()
            copy = sampler_model(model, rows)
            with copy:
                step = pmdp.DPPenaltyMH(llr_clip=1.0, reproducible_noise=True)
            line.append(f"after the step was built {_peak_rss_mib():.0f} MiB ({_own_cpu() - own:.1f} CPU s)")
            own, workers, start = _own_cpu(), client.run(_worker_cpu), time.perf_counter()
            with copy:
                idata = pmdp.sample(
                    step=step,
                    backend=pmdp.DaskBackend(client, rows=rows),
                    epsilon=4.0,
                    delta=1e-6,
                    draws=args.draws,
                    tune=args.tune,
                    chains=1,
                    cores=1,
                    init="prior",
                    random_seed=3,
                    progressbar=False,
                )
            spent = sum(v - workers[k] for k, v in client.run(_worker_cpu).items())
            worker_rss = client.run(lambda: __import__("psutil").Process().memory_info().rss / 2**20)
            line.append(
                f"after the run {_peak_rss_mib():.0f} MiB (run: client {_own_cpu() - own:.1f} CPU s, workers "
                f"{spent:.1f} CPU s, {time.perf_counter() - start:.0f} s wall, {args.draws + args.tune} iterations; "
                f"workers {', '.join(f'{v:.0f}' for v in worker_rss.values())} MiB; "
                f"eps {idata.posterior.attrs['dp_epsilon']:.2f}; JAX imported: {'jax._src' in sys.modules}; "
                f"groups {sorted(group_names(idata))})"
            )
    print("\n    ".join(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--draws", type=int, default=2)
    parser.add_argument("--tune", type=int, default=2)
    parser.add_argument("--memory-limit", default="4GiB", help="each worker's (LocalCluster's memory_limit)")
    parser.add_argument("--keep", type=Path, help="write the Parquet files below this folder and reuse them")
    parser.add_argument(
        "--without-jax",
        action="store_true",
        help="block `import jax` in the client, as where JAX is not installed (with JAX but not NumPyro, arviz_base, "
        "which PyMC 6 converts the trace with, imports JAX: about 130 MiB)",
    )
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.partitions, args)
        return
    for n in args.rows:
        cmd = [sys.executable, __file__, *sys.argv[1:], "--child", str(n)]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        failed = (result.stderr.strip().splitlines() or ["no output"])[-1]
        print(result.stdout.strip() or f"N = {n}: failed ({failed})", flush=True)


if __name__ == "__main__":
    main()
