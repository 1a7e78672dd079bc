"""Released statistics of rows that never sit on the client (issue 37): a Dask cluster against one in-memory pass.

Writes a logistic-regression data set (N rows, P = 20 features: an intercept and 19 covariates, labels
y ∈ {0, 1}) to disk in partitions, written one partition at a time (the client never holds the table):
by default one Parquet file per partition (19 covariates and y; ``--format npy``: one ``.npy`` file of X
and one of y, read with ``dask.array.from_delayed``, where pyarrow is not installed). Then:

1. on a ``LocalCluster`` of 2 worker processes (1 thread each), the rows are read lazily by the workers
   (``dask.dataframe.read_parquet``, converted with ``to_dask_array(lengths=...)``, the lengths from the
   files' Parquet metadata; the intercept's column of ones made on the workers) and
   ``pmdp.release_statistics("logistic_regression", (X, y), ...)`` releases their d = P + P(P+1)/2 = 230
   statistics (discrete Laplace noise, reproducible seed): each partition's exact grid sums on its worker,
   Dask's tree reduction, the noise on the client. Timed over ``--repeats`` releases (each reads the
   partitions again, from the page cache); the client's peak RSS is read before and after;
2. in this process, the same rows loaded into memory and released once by the in-memory path (timed: one
   in-memory pass), and the two releases compared (they must be equal exactly).

Run: ``python benchmarks/dask_release.py --rows 1000000`` (the default; Parquet needs ``pyarrow``). Figures are
CPU-bound on a machine shared with other jobs: read the ratio, not the absolute times.

Measured 2026-11-28 with Parquet (pyarrow 26.0.1, pandas 3.1.1), Python 3.12, dask/distributed 2026.8.0,
2 cores shared with six other jobs (load average 11-12):

``--rows 1000000 --repeats 2`` (20 partitions of 50,000 rows, 181 MiB of Parquet): cluster release 9.99 CPU s
(median; client 0.87-0.95 s, workers 8.91-9.25 s), 16.5 s wall; one in-memory release 5.12 CPU s, 14.1 s
wall. Ratio 1.95 (CPU), 1.17 (wall). The workers' CPU per row is that of the ``.npy`` reads below (9 µs
against 10 µs): the ratio moved because the in-memory pass measured faster in this run (5.12 CPU s against
7.75 s), which on a shared machine is within the run-to-run spread. Client peak RSS
265 MiB after the imports, 358 MiB after writing the files (pyarrow), 401 MiB after the cluster's releases;
the in-memory release then took it to 1,397 MiB. Workers 395 and 377 MiB. Releases equal exactly, accountant
records equal.

``--rows 5000000 --partitions 100 --repeats 1 --no-in-memory`` (903 MiB of Parquet): cluster release
57.96 CPU s (client 5.52 s, workers 52.44 s: 10.5 µs per row), 141.7 s wall; client peak RSS 413 MiB (401
MiB at N = 10⁶); workers 410 and 385 MiB.

``--rows 20000000 --partitions 100`` (3,394 MiB of Parquet; the files written by a run stopped after writing
them, then released with ``--data-dir DIR --repeats 1 --no-in-memory --no-warm-up``, load average 13-14): the
first and only release took 237.1 CPU s (client 20.0 s, workers 217.1 s: 10.9 µs per row), 585 s wall;
client peak RSS 366 MiB (265 MiB after the imports), the issue's target being 500 MiB; workers 501 and 502
MiB. The in-memory pass was not run at this N (it needs the 3.2 GB of rows, and several copies, in one
process); at the 5.1-7.8 µs per row measured for it at N = 10⁶ it would take 100-155 CPU s. The files are
written in a child process, so that the client's peak is the release's (the first run's writer, in the
client's process, had taken it to 509 MiB).

Measured again 2026-11-29 (Parquet, load average 6-8): ``--rows 1000000 --repeats 2``: cluster 9.13 CPU s (client
0.70, workers 8.44), 9.96 s wall; in memory 5.70 CPU s, 8.51 s wall: ratio 1.60 (CPU), 1.17 (wall). With
``--partitions 100``: cluster 12.70 CPU s (1.86 + 10.85), 14.0 s wall; in memory 5.51 CPU s: 2.31 (CPU), 1.66
(wall). One partition costs about 14.5 CPU ms on the client and 30 on the workers (docs/dask.md).

Measured 2026-11-29 later, with the decoded blocks kept on the workers between releases (the default now;
``--no-keep`` decodes at every release, as before), on files written once (``--data-dir``), load average 8-10
(the in-memory pass took 7.2-8.7 CPU s: every figure inflated against the runs above). Median CPU of the
later releases (client + workers) and the ratio to the in-memory pass of the same run: 20 partitions, 3
releases: kept 14.68 s (1.75 + 12.93), 2.03× CPU, 1.42× wall; decoded 22.32 s (3.35 + 18.97), 2.58×, 2.03×.
100 partitions, 2 releases: kept 17.09 s (2.29 + 14.81), 2.29×, 1.41×; decoded 23.43 s (4.35 + 19.09), 3.12×,
1.98×. Releases equal exactly, records equal. The first release (not in the median) decodes either way:
21.1-26.8 CPU s (docs/dask.md).

With ``--format npy``, measured 2026-11-28 on the same machine with four other jobs (load average 10-14):

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
import multiprocessing
import resource
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
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


COLUMNS = [f"x{j}" for j in range(1, P)]  # the 19 covariates; the intercept's column is made on the workers


def write_parquet(folder: Path, n_rows: int, partitions: int) -> list[int]:
    """Write the partitions as Parquet files (19 covariates and y), one at a time; return their lengths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sizes = [n_rows // partitions + (1 if k < n_rows % partitions else 0) for k in range(partitions)]
    for k, n in enumerate(sizes):
        x, y = _partition(k, n)
        table = pa.table({**{name: x[:, j] for j, name in enumerate(COLUMNS, start=1)}, "y": y})
        pq.write_table(table, folder / f"part-{k:04d}.parquet")
    return sizes


def lazy_parquet(folder: Path):
    """X (with the intercept's column of ones) and y read lazily by the workers with ``dask.dataframe.read_parquet``.

    N and the partitions' lengths come from the files' Parquet metadata (their row counts: public), never from
    the rows; ``to_dask_array(lengths=True)`` would instead compute each partition's length from its data.
    """
    import dask.dataframe as dd
    import pyarrow.parquet as pq

    from pymc_dp.backends.dask_rows import with_ones_column

    files = sorted(folder.glob("part-*.parquet"))
    lengths = [pq.read_metadata(f).num_rows for f in files]
    frame = dd.read_parquet([str(f) for f in files], split_row_groups=False)
    # One array of the 20 columns, then its slices: two to_dask_array expressions over one read_parquet leave a
    # dependency out of the graph (dask 2026.8.0: "Missing dependency ('read_parquet-getitem-values-...', k)").
    columns = frame[[*COLUMNS, "y"]].to_dask_array(lengths=lengths)
    return with_ones_column(columns[:, :-1], sum(lengths), columns), columns[:, -1]


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
    parser.add_argument("--data-dir", type=Path, help="release the Parquet files already there (no writing)")
    parser.add_argument("--no-warm-up", action="store_true", help="time the first release too (large N)")
    parser.add_argument("--format", choices=("parquet", "npy"), default="parquet", help="parquet needs pyarrow")
    parser.add_argument("--no-keep", action="store_true", help="decode the files at every release (KEEP_SHARE = 0)")
    args = parser.parse_args()

    import dask
    import distributed

    import pymc_dp as pmdp

    print(f"client peak RSS after imports: {_peak_rss_mib():.0f} MiB")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) if args.data_dir is None else args.data_dir
        start = time.perf_counter()
        if args.data_dir is None:
            writer = write_parquet if args.format == "parquet" else write
            # In a child process, so that the client's peak RSS below is the release's, not the writer's.
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
                sizes = pool.submit(writer, folder, args.rows, args.partitions).result()
        else:
            import pyarrow.parquet as pq

            sizes = [pq.read_metadata(f).num_rows for f in sorted(folder.glob("part-*.parquet"))]
            args.rows, args.partitions = sum(sizes), len(sizes)
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
                dashboard_address=":0",
                silence_logs=logging.CRITICAL,
            )
        with cluster, distributed.Client(cluster) as client:
            client.run(lambda: __import__("pymc_dp.backends.dask_rows"))  # workers import once, outside the timing
            data = lazy_parquet(folder) if args.format == "parquet" else lazy(folder, sizes)
            if args.no_keep:  # decode the files at every release, as before the blocks were kept (issue 37)
                from pymc_dp.backends import dask_rows

                dask_rows.KEEP_SHARE = 0.0
            if not args.no_warm_up:
                start, workers, own = time.perf_counter(), client.run(_worker_cpu), _own_cpu()
                pmdp.release_statistics("logistic_regression", data, **SETTINGS)  # first: decodes the files, keeps them
                spent = sum(v - workers[k] for k, v in client.run(_worker_cpu).items())
                print(
                    "first cluster release (not in the median: ships the functions, decodes the files"
                    f"{'' if args.no_keep else ', keeps the blocks'}): "
                    f"{time.perf_counter() - start:.2f} s, CPU {_own_cpu() - own:.2f} + {spent:.2f} s"
                )
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
        if args.format == "parquet":
            import pandas as pd

            frame = pd.read_parquet(folder)
            x = np.column_stack([np.ones(len(frame)), frame[COLUMNS].to_numpy()])
            y = frame["y"].to_numpy()
            del frame
        else:
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
