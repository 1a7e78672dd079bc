"""Released statistics of rows that never sit on the client (issue 37): a Dask cluster against one in-memory pass.

Writes a logistic-regression data set (N rows, P = 20 features: an intercept and 19 covariates, labels
y ∈ {0, 1}) to disk in partitions, one ``.npy`` file of X and one of y per partition, written one
partition at a time (the client never holds the table; pyarrow is not installed here, so Parquet is
replaced by ``.npy`` files read with ``dask.array.from_delayed``). Then:

1. on a ``LocalCluster`` of 2 worker processes (1 thread each), the rows are read lazily by the workers and
   ``pmdp.release_statistics("logistic_regression", (X, y), ...)`` releases their d = P + P(P+1)/2 = 230
   statistics (discrete Laplace noise, reproducible seed): each partition's exact grid sums on its worker,
   Dask's tree reduction, the noise on the client. Timed over ``--repeats`` releases (each reads the
   partitions again, from the page cache); the client's peak RSS is read before and after;
2. in this process, the same rows loaded into memory and released once by the in-memory path (timed: one
   in-memory pass), and the two releases compared (they must be equal exactly).

Run: ``python benchmarks/dask_release.py --rows 1000000`` (the default). Figures are CPU-bound on a
machine shared with other jobs: read the ratio, not the absolute times.

Measured 2026-11-28, Python 3.12, dask/distributed 2026.8.0, 2 cores shared with four other jobs (load
average 10-14 during the runs, so wall times are a busy machine's; the CPU seconds are the ones to compare):

``--rows 1000000`` (20 partitions of 50,000 rows; X and y 160 MiB on disk), 3 releases after a warm-up:

- cluster release: 11.28 CPU s (median; client 1.26 s incl. the in-process scheduler, workers 10.02 s),
  42.8 s wall; one in-memory release of the same rows: 7.75 CPU s, 29.7 s wall. Ratio 1.46 (CPU), 1.44
  (wall): the workers read their partitions from disk at every release, which the in-memory pass does not;
- client peak RSS: 210 MiB after the imports, 241 MiB after writing the data, 278 MiB after the cluster
  releases (the data: 160 MiB); the in-memory release then took it to 865 MiB. Each worker: 266-269 MiB;
- the releases are equal exactly (noisy statistics and accountant record).

``--rows 3000000 --partitions 60 --repeats 1 --no-in-memory`` (481 MiB on disk): client peak RSS 282 MiB
(278 MiB at N = 10⁶); the release took 40.9 CPU s (client 5.20 s, workers 35.68 s), 131.8 s wall. The
client's CPU follows the number of partitions: the LocalCluster's scheduler runs in the client's process.

Before the mechanism summed its rows in blocks (BLOCK_BYTES), the in-memory release at N = 10⁶ peaked at
5.9 GB of RSS and took 74 s (wall), the cluster's 30 s: a 0.41 ratio that measured the in-memory path's
memory, not the cluster's overhead.
"""

from __future__ import annotations

import argparse
import logging
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

P = 20
BETA = np.linspace(-1.0, 1.0, P)
SETTINGS = dict(n_features=P, x_bounds=(-4.0, 4.0), epsilon=1.0, random_seed=7, reproducible_noise=True)


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _worker_cpu() -> float:
    """CPU seconds of this worker process so far (run on each worker)."""
    import psutil

    times = psutil.Process().cpu_times()
    return times.user + times.system


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # kB on Linux


def _partition(seed: int, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n_rows), rng.normal(0.0, 1.0, size=(n_rows, P - 1))])
    y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-x @ BETA))).astype(float)
    return x, y


def write(folder: Path, n_rows: int, partitions: int) -> list[int]:
    """Write the partitions one at a time; return their lengths (public metadata, kept beside the files)."""
    sizes = [n_rows // partitions + (1 if k < n_rows % partitions else 0) for k in range(partitions)]
    for k, n in enumerate(sizes):
        x, y = _partition(k, n)
        np.save(folder / f"x-{k:04d}.npy", x)
        np.save(folder / f"y-{k:04d}.npy", y)
    return sizes


def lazy(folder: Path, sizes: list[int]):
    """X and y as Dask arrays whose partitions are read by the worker that computes them."""
    import dask
    import dask.array as da

    def read(path: str) -> np.ndarray:
        return np.load(path)

    xs = [
        da.from_delayed(dask.delayed(read)(str(folder / f"x-{k:04d}.npy")), shape=(n, P), dtype=float)
        for k, n in enumerate(sizes)
    ]
    ys = [
        da.from_delayed(dask.delayed(read)(str(folder / f"y-{k:04d}.npy")), shape=(n,), dtype=float)
        for k, n in enumerate(sizes)
    ]
    return da.concatenate(xs), da.concatenate(ys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-in-memory", action="store_true", help="skip the in-memory pass (the client's memory)")
    args = parser.parse_args()

    import dask
    import distributed

    import pymc_dp as pmdp

    print(f"client peak RSS after imports: {_peak_rss_mib():.0f} MiB")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        sizes = write(folder, args.rows, args.partitions)
        on_disk = sum(f.stat().st_size for f in folder.iterdir()) / 2**20
        print(
            f"wrote N = {args.rows:,} rows, P = {P}, {args.partitions} partitions: {on_disk:.0f} MiB on disk "
            f"in {time.perf_counter() - start:.1f} s; client peak RSS {_peak_rss_mib():.0f} MiB"
        )
        with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
            cluster = distributed.LocalCluster(
                n_workers=2,
                threads_per_worker=1,
                processes=True,
                memory_limit="3GiB",
                dashboard_address=None,
                silence_logs=logging.CRITICAL,
            )
        with cluster, distributed.Client(cluster) as client:
            client.run(lambda: __import__("pymc_dp.backends.dask_rows"))  # workers import once, outside the timing
            data = lazy(folder, sizes)
            start = time.perf_counter()
            pmdp.release_statistics("logistic_regression", data, **SETTINGS)  # first: ships the functions once
            print(f"first cluster release (warm-up, not in the median): {time.perf_counter() - start:.2f} s")
            times, cpus = [], []
            for _ in range(args.repeats):
                start, workers, own = time.perf_counter(), client.run(_worker_cpu), _own_cpu()
                remote = pmdp.release_statistics("logistic_regression", data, **SETTINGS)
                times.append(time.perf_counter() - start)
                spent = {k: v - workers[k] for k, v in client.run(_worker_cpu).items()}
                cpus.append((_own_cpu() - own, sum(spent.values())))
            worker_rss = client.run(lambda: __import__("psutil").Process().memory_info().rss / 2**20)
            cluster_peak = _peak_rss_mib()
        cluster_cpu = statistics.median(c + w for c, w in cpus)
        print(
            "cluster release CPU (client + workers): "
            + ", ".join(f"{c:.2f} + {w:.2f}" for c, w in cpus)
            + f" s (median total {cluster_cpu:.2f} s)"
        )
        print(
            f"cluster release: {', '.join(f'{t:.2f}' for t in times)} s (median {statistics.median(times):.2f} s); "
            f"client peak RSS {cluster_peak:.0f} MiB; worker RSS at the end "
            f"{', '.join(f'{v:.0f}' for v in worker_rss.values())} MiB"
        )

        if args.no_in_memory:
            return
        x = np.concatenate([np.load(folder / f"x-{k:04d}.npy") for k in range(len(sizes))])
        y = np.concatenate([np.load(folder / f"y-{k:04d}.npy") for k in range(len(sizes))])
        start, own = time.perf_counter(), _own_cpu()
        local = pmdp.release_statistics("logistic_regression", (x, y), **SETTINGS)
        in_memory, in_memory_cpu = time.perf_counter() - start, _own_cpu() - own
        print(
            f"in-memory release (one pass over the rows in memory): {in_memory:.2f} s, {in_memory_cpu:.2f} CPU s; "
            "client peak RSS then "
            f"{_peak_rss_mib():.0f} MiB (rows {(x.nbytes + y.nbytes) / 2**20:.0f} MiB)"
        )
    equal = np.array_equal(remote.noisy_statistics, local.noisy_statistics)
    same_record = remote.accountant_record() == local.accountant_record()
    print(
        f"ratio cluster / in-memory: {statistics.median(times) / in_memory:.2f} (wall), "
        f"{cluster_cpu / in_memory_cpu:.2f} (CPU); releases equal exactly: {equal}; "
        f"accountant records equal: {same_record}"
    )


if __name__ == "__main__":
    main()
