"""Time per release and per iteration on a Dask cluster vs in process, by number of workers, with peak memory.

Run: ``python benchmarks/bench_dask.py [--rows 10000000] [--features 19] [--workers 1 2]``.
Logistic regression written with numpy arrays, P = features + 1. For each configuration
(in process; a ``distributed.LocalCluster`` of 1, 2, … worker processes with one thread each)
prints the median time of one clipped log-likelihood ratio release (what DPPenaltyMH pays per
iteration) and of one clipped gradient release (DPHMC pays L + 1 of them and one ratio per
iteration), against the non-private counterpart measured in the same run: one full-data
logp + gradient of the model (``model.logp_dlogp_function``, what ``pm.HamiltonianMC``
evaluates per leapfrog step) and one full-data logp (what ``pm.Metropolis`` evaluates per
iteration). Peak memory is the peak resident set size of each process (Linux ``VmHWM``).

A second, small-N pass (``--overhead-rows``) times a ratio release with 2 and with 8
partitions on the same workers: the difference per partition is the per-task cost of the
scheduler and the round trip, the input of the paper estimate for 100 workers printed last.

``--dpadvi`` instead fits DPADVI (mean-field, AdaGrad, sampling rate ``--sampling-rate``) on
the logistic regression in process and with ``backend=pmdp.DaskBackend(client)`` on each
``--workers`` count, once for each of the two ``--iterations`` counts (fresh objects), and
prints each fit's CPU seconds: this process (which, on a ``LocalCluster``, also runs the
scheduler) plus the workers' (``resource.getrusage`` on each worker, before and after the
fit), after unreported warm-up fits: the first fit of a process, and of a worker, pays
PyTensor's compilation, and the first fit at an iteration count pays σ's calibration and ε's
composition (privacy-loss distributions, seconds), which the accountant caches and which run
on the client with or without a backend. A fit's CPU then holds its model checks, the
scattering of the rows and its iterations; the difference between the two counts divided by
the difference in iterations is the CPU per iteration. With ``--rows-on-workers`` each worker count
also fits a model of ``pmdp.row_placeholder`` stand-ins with ``DaskBackend(client, rows=...)``:
the rows (the same N and P, drawn per partition, one per worker) are Dask arrays made where their
tasks run and never sit on the client, computed anew by each fit after its charge.

``--sampler`` instead times, on a ``LocalCluster`` of 2 worker processes, one clipped log-likelihood
ratio release (DPPenaltyMH's iteration) and one clipped gradient release (DPHMC pays L + 1) per
``--partitions`` count: on scattered rows and on the blocks of Dask arrays made where their tasks run
(``DaskBackend(client, rows=...)`` with a step built in ``dask_sampler_rows.sampler_model``), each
with the partition sums gathered to the client (what the backend does) and added on the workers in
a tree of 4 (the alternative measured, patched in here only). CPU of this process (the scheduler's
too) plus the workers', over ``--repeats`` × 10 releases.
"""

from __future__ import annotations

import argparse
import logging
import os
import time

import numpy as np
from _common import environment, logistic_regression, median_seconds


def _peak_mib() -> float:
    """Peak resident set size of this process in MiB (Linux ``VmHWM``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_seconds() -> float:
    """CPU seconds (user + system) of this process so far: its threads included."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _dpadvi_fit(model, iterations: int, rate: float, backend) -> tuple[float, float, float, object]:
    """One DPADVI fit: (CPU s here, CPU s on the workers, wall s, the approximation)."""
    import pymc_dp as pmdp

    client = None if backend == "default" else backend.client
    workers_before = sum(client.run(_cpu_seconds).values()) if client is not None else 0.0
    here, wall = _cpu_seconds(), time.perf_counter()
    fit = pmdp.DPADVI(epsilon=2.0, delta=1e-6, sampling_rate=rate, grad_clip=5.0, random_seed=1, backend=backend)
    approx = fit.fit(iterations, model=model, progressbar=False)
    here, wall = _cpu_seconds() - here, time.perf_counter() - wall
    workers = sum(client.run(_cpu_seconds).values()) - workers_before if client is not None else 0.0
    return here, workers, wall, approx


def _worker_rows(seed: int, n_rows: int, n_features: int, part: str) -> np.ndarray:
    """One partition's logistic-regression rows, made where its task runs (a worker): x, or y."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, n_features))
    beta = np.random.default_rng(0).normal(size=n_features)
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-(0.3 + x @ beta)))).astype("int64")
    return x if part == "x" else y


def _placeholder_logistic(n_rows: int, n_features: int, partitions: int):
    """(model on row placeholders, Dask rows by role): the logistic regression whose rows stay on the workers."""
    import dask
    import dask.array as da
    import pymc as pm

    import pymc_dp as pmdp

    sizes = np.diff(np.linspace(0, n_rows, partitions + 1).astype(int))
    make = dask.delayed(_worker_rows, pure=True)
    parts = {"x": ((n_features,), float), "y": ((), "int64")}
    rows = {
        role: da.concatenate(
            [da.from_delayed(make(k, n, n_features, part), (n, *tail), dtype) for k, n in enumerate(sizes)]
        )
        for role, (part, (tail, dtype)) in zip(("X", "y"), parts.items(), strict=True)
    }
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 2)
        b = pm.Normal("beta", 0, 2, size=n_features)
        pm.Bernoulli("y", logit_p=alpha + pmdp.row_placeholder(rows["X"]) @ b, observed=pmdp.row_placeholder(rows["y"]))
    return model, rows


def dpadvi_main(args) -> None:
    """DPADVI in process and on 2 (``--workers``) worker processes: CPU seconds per fit and their ratio."""
    import distributed

    import pymc_dp as pmdp

    print(environment(), f"| dask/distributed {distributed.__version__} | {os.cpu_count()} CPUs", flush=True)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    model = logistic_regression(args.rows, args.features, use_data=False)
    short, long = sorted(args.iterations)[:2] if len(args.iterations) > 1 else (0, args.iterations[0])
    print(
        f"DPADVI, N = {args.rows:,}, P = {args.features + 1}, {short} and {long} iterations at q = "
        f"{args.sampling_rate:g} (expected batch {args.rows * args.sampling_rate:,.0f} rows)",
        flush=True,
    )

    def fits(label: str, backend, model=model) -> float:
        # Warm-up, unreported: compilation here and on the workers, and (in process, first) σ's calibration and ε's
        # composition at both counts, which the accountant caches: the client's accounting is the same either way.
        for n in (10,) if backend != "default" else (10, short, long) if short else (10, long):
            _dpadvi_fit(model, n, args.sampling_rate, backend)
        cpu = {}
        for n in (short, long) if short else (long,):
            here, on_workers, wall, approx = _dpadvi_fit(model, n, args.sampling_rate, backend)
            cpu[n] = here + on_workers
            print(
                f"{label:>14}, {n:>5} iterations: CPU {cpu[n]:.2f} s (this process {here:.2f} s, workers "
                f"{on_workers:.2f} s), wall {wall:.1f} s, mean {np.round(approx.mean.eval()[:3], 3)}",
                flush=True,
            )
        return (cpu[long] - cpu[short]) / (long - short) if short else cpu[long] / long

    local = fits("in process", "default")
    print(f"{'in process':>14}: {local * 1e3:.2f} CPU ms per iteration", flush=True)
    for workers in args.workers:
        cluster = distributed.LocalCluster(
            processes=True, n_workers=workers, threads_per_worker=1, dashboard_address=":0", silence_logs=logging.ERROR
        )
        client = distributed.Client(cluster)
        remote = fits(f"{workers} worker(s)", pmdp.DaskBackend(client))
        print(
            f"{workers:>3} worker(s): {remote * 1e3:.2f} CPU ms per iteration = {remote / local:.2f}x in process",
            flush=True,
        )
        if args.rows_on_workers:
            placeholders, rows = _placeholder_logistic(args.rows, args.features, workers)
            on_workers = fits(f"{workers} w., rows=", pmdp.DaskBackend(client, rows=rows), placeholders)
            print(
                f"{workers:>3} worker(s), rows on the workers: {on_workers * 1e3:.2f} CPU ms per iteration = "
                f"{on_workers / local:.2f}x in process, {on_workers / remote:.2f}x scattered rows; client peak "
                f"{_peak_mib():.0f} MiB",
                flush=True,
            )
        client.close()
        cluster.close()
    print(f"load average at end: {os.getloadavg()}", flush=True)


def _added(*partials):
    """Worker side of the tree reduction (``--sampler``): the sum of some partitions' partial sums."""
    return np.sum(partials, axis=0)


def _tree_map(self, task, per_part, what: str, split_every: int = 4) -> list:
    """``ClusterRows._map`` with the partition sums added on the workers (tree of ``split_every``): one result back."""
    from pymc_dp.backends.dask_cluster import _run_task

    if not self._parts and hasattr(self, "_read_partitions"):
        self._read_partitions()
    client = self._client
    futures = [
        client.submit(_run_task, task, *per_part(k, f), workers=[w], allow_other_workers=False, pure=False)
        for k, (f, w) in enumerate(self._parts)
    ]
    while len(futures) > 1:
        groups = range(0, len(futures), split_every)
        futures = [client.submit(_added, *futures[i : i + split_every], pure=False) for i in groups]
    return [futures[0].result()]


def sampler_main(args) -> None:
    """CPU per release of DPPenaltyMH's ratio and DPHMC's gradient on 2 worker processes: scattered rows against
    rows on the Dask arrays' blocks (``DaskBackend(client, rows=...)``), by number of partitions, with and without a
    tree reduction of the partition sums on the workers (client + workers' CPU, ``--repeats`` × 10 releases)."""
    import distributed

    import pymc_dp as pmdp
    from pymc_dp.backends.dask import DaskClippedGradient, DaskLogLikelihoodRatio
    from pymc_dp.backends.dask_cluster import ClusterRows
    from pymc_dp.backends.dask_sampler_rows import partitioned_cluster, sampler_model
    from pymc_dp.mechanisms import model_access

    print(environment(), f"| dask/distributed {distributed.__version__} | {os.cpu_count()} CPUs", flush=True)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    n, p = args.rows, args.features + 1
    _, mechanisms = model_access(logistic_regression(n, args.features, use_data=False), None, None, None, None)
    rng = np.random.default_rng(0)
    theta = np.full(p, 0.05)
    moves = [theta + 0.001 * rng.normal(size=p) for _ in range(64)]
    cluster = distributed.LocalCluster(
        processes=True, n_workers=2, threads_per_worker=1, dashboard_address=":0", silence_logs=logging.ERROR
    )
    client = distributed.Client(cluster)
    releases = 10 * args.repeats
    original_map = ClusterRows._map
    for parts in args.partitions:
        placeholders, dask_rows = _placeholder_logistic(n, args.features, parts)
        _, placed = model_access(sampler_model(placeholders, dask_rows), None, None, None, None)
        makers = {
            "scattered": lambda parts=parts: ClusterRows(client, mechanisms._rows, parts, None),
            "rows=": lambda dask_rows=dask_rows, placed=placed: partitioned_cluster(
                pmdp.DaskBackend(client, rows=dask_rows), placed._rows
            ),
        }
        for label, make in makers.items():
            for tree in (False, True):
                ClusterRows._map = _tree_map if tree else original_map
                remote = make()
                remote.warm_up(gradient=True)
                ratio = DaskLogLikelihoodRatio(remote, 0.5, 1.0, "substitute")
                gradient = DaskClippedGradient(remote, 1.0, 1.0, "substitute")
                ratio.release(theta, moves[0], rng), gradient.release(theta, rng)  # the blocks are computed here
                cpu = {}
                for name, release in (
                    ("ratio", lambda k, ratio=ratio: ratio.release(moves[k % 64], moves[(k + 1) % 64], rng)),
                    ("gradient", lambda k, gradient=gradient: gradient.release(moves[k % 64], rng)),
                ):
                    workers, here = sum(client.run(_cpu_seconds).values()), _cpu_seconds()
                    for k in range(releases):
                        release(k)
                    here, workers = _cpu_seconds() - here, sum(client.run(_cpu_seconds).values()) - workers
                    cpu[name] = (here + workers) / releases
                    print(
                        f"P = {p}, N = {n:,}, {parts:>3} partitions, {label:>9}, tree {tree!s:>5}: {name:>8} release "
                        f"{cpu[name] * 1e3:6.1f} CPU ms (client {here / releases * 1e3:5.1f}, workers "
                        f"{workers / releases * 1e3:5.1f})",
                        flush=True,
                    )
                remote.close()
    ClusterRows._map = original_map
    client.close()
    cluster.close()
    print(f"load average at end: {os.getloadavg()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--features", type=int, default=19)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--overhead-rows", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dpadvi", action="store_true", help="time DPADVI fits instead of single releases")
    parser.add_argument("--iterations", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--sampling-rate", type=float, default=0.01)
    parser.add_argument("--rows-on-workers", action="store_true", help="--dpadvi: also fit rows that stay on workers")
    parser.add_argument("--sampler", action="store_true", help="time the samplers' releases on rows= (2 workers)")
    parser.add_argument("--partitions", type=int, nargs="+", default=[8, 32], help="--sampler: partitions")
    args = parser.parse_args()
    if args.sampler:
        sampler_main(args)
        return
    if args.dpadvi:
        dpadvi_main(args)
        return

    import distributed

    from pymc_dp.backends.dask import ClusterRows, DaskClippedGradient, DaskLogLikelihoodRatio
    from pymc_dp.mechanisms import NoisyClippedGradient, NoisyLogLikelihoodRatio, model_access

    print(environment(), f"| dask/distributed {distributed.__version__} | {os.cpu_count()} CPUs", flush=True)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    n, p = args.rows, args.features + 1
    start = time.perf_counter()
    model = logistic_regression(n, args.features, use_data=False)
    _, mechanisms = model_access(model, None, None, None, None)
    rows = mechanisms._rows
    print(f"N = {n:,}, P = {p}: model and row checks {time.perf_counter() - start:.0f} s", flush=True)
    rng = np.random.default_rng(0)
    theta = np.full(p, 0.05)
    moves = [theta + 0.001 * rng.normal(size=p) for _ in range(64)]
    counter = iter(range(10**9))

    def proposal():
        return moves[next(counter) % len(moves)]

    total = model.logp_dlogp_function(ravel_inputs=True)
    total.set_extra_values({})
    t_hmc = median_seconds(lambda: total(theta), repeats=args.repeats, number=1)
    logp = model.compile_logp()
    point = model.initial_point()
    t_metropolis = median_seconds(lambda: logp(point), repeats=args.repeats, number=1)
    print(f"non-private: full logp+grad {t_hmc * 1e3:.0f} ms, full logp {t_metropolis * 1e3:.0f} ms", flush=True)

    table = []

    def measure(label, ratio, gradient, memory):
        t_ratio = median_seconds(lambda: ratio.release(theta, proposal(), rng), repeats=args.repeats, number=1)
        t_grad = median_seconds(lambda: gradient.release(theta, rng), repeats=args.repeats, number=1)
        row = (label, t_ratio, t_grad, memory())
        table.append(row)
        print(
            f"{label:>14}: ratio release {t_ratio * 1e3:8.0f} ms ({t_ratio / t_metropolis:5.2f}x logp), "
            f"gradient release {t_grad * 1e3:8.0f} ms ({t_grad / t_hmc:5.2f}x logp+grad), peak RSS {row[3]}",
            flush=True,
        )

    measure(
        "in process",
        NoisyLogLikelihoodRatio(rows, 0.5, 1.0),
        NoisyClippedGradient(rows, 1.0, 1.0),
        lambda: f"client {_peak_mib():.0f} MiB",
    )
    for workers in args.workers:
        cluster = distributed.LocalCluster(
            processes=True, n_workers=workers, threads_per_worker=1, dashboard_address=":0", silence_logs=logging.ERROR
        )
        client = distributed.Client(cluster)
        scatter_start = time.perf_counter()
        remote = ClusterRows(client, rows, workers, None)
        scatter = time.perf_counter() - scatter_start

        def memory(client=client):
            peaks = client.run(_peak_mib)
            return f"client {_peak_mib():.0f} MiB, workers " + ", ".join(f"{v:.0f}" for v in peaks.values()) + " MiB"

        measure(
            f"{workers} worker(s)",
            DaskLogLikelihoodRatio(remote, 0.5, 1.0, "substitute"),
            DaskClippedGradient(remote, 1.0, 1.0, "substitute"),
            memory,
        )
        print(f"{'':>14}  (scattering the rows once: {scatter:.1f} s)", flush=True)
        remote.close()
        client.close()
        cluster.close()

    # Per-task overhead at small N: 2 vs 8 partitions on 2 workers.
    small = logistic_regression(args.overhead_rows, args.features, use_data=False)
    _, small_mechanisms = model_access(small, None, None, None, None)
    cluster = distributed.LocalCluster(
        processes=True, n_workers=2, threads_per_worker=1, dashboard_address=":0", silence_logs=logging.ERROR
    )
    client = distributed.Client(cluster)
    per_parts = {}
    for parts in (2, 8):
        remote = ClusterRows(client, small_mechanisms._rows, parts, None)
        release = DaskLogLikelihoodRatio(remote, 0.5, 1.0, "substitute")
        per_parts[parts] = median_seconds(lambda release=release: release.release(theta, proposal(), rng), 5, 5)
        remote.close()
    client.close()
    cluster.close()
    per_task = max((per_parts[8] - per_parts[2]) / 6, 0.0)
    print(
        f"N = {args.overhead_rows:,}: ratio release with 2 partitions {per_parts[2] * 1e3:.1f} ms, with 8 "
        f"{per_parts[8] * 1e3:.1f} ms: {per_task * 1e3:.2f} ms per extra task",
        flush=True,
    )

    # Paper estimate for 100 workers: compute per row from the one-worker run, a fixed round trip, and the
    # scheduler's per-task cost paid once per partition (tasks are submitted and gathered one by one).
    one = next((r for r in table if r[0] == "1 worker(s)"), None)
    if one is not None:
        round_trip = max(per_parts[2] - 2 * per_task, 0.0)
        for name, t_one in (("ratio", one[1]), ("gradient", one[2])):
            compute = t_one - round_trip - per_task
            estimate = compute / 100 + round_trip + 100 * per_task
            print(
                f"paper estimate, 100 workers, {name} release at N = {n:,}: compute {compute / 100 * 1e3:.1f} ms "
                f"+ round trip {round_trip * 1e3:.1f} ms + 100 tasks × {per_task * 1e3:.2f} ms = "
                f"{estimate * 1e3:.0f} ms (vs {t_one * 1e3:.0f} ms on one worker)",
                flush=True,
            )
    print(f"load average at end: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
