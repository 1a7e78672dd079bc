"""The same DP model on one process and on a Dask cluster: same guarantee, same accounting.

Run: ``python examples/dask_cluster.py [--rows 200000] [--workers 2] [--draws 300] [--tune 100]
[--address tcp://scheduler:8786]``.

Logistic regression (P = 6) sampled with DPPenaltyMH twice, at the same ε: in this process, then
with ``backend=pmdp.DaskBackend(client)``, where the rows are scattered once to the workers and
each release gets back only the partitions' clipped sums (docs/dask.md). Without ``--address``
the cluster is a ``distributed.LocalCluster`` of ``--workers`` processes on this machine; with
it, ``Client(address)`` connects to an existing cluster (its workers need pymc-dp and the same
PyMC installed). Prints each run's ε, its time and the posterior means.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pymc as pm

import pymc_dp as pmdp
from pymc_dp.accounting.events import format_epsilon


def build_model(n_rows: int, seed: int = 0) -> pm.Model:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, 5))
    beta = np.array([1.0, -0.5, 0.25, 0.0, 0.75])
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-(0.3 + x @ beta)))).astype("int64")
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 2)
        b = pm.Normal("beta", 0, 2, shape=5)
        pm.Bernoulli("y", logit_p=alpha + x @ b, observed=y)
    return model


def run(model: pm.Model, draws: int, tune: int, backend=None):
    with model:
        step = pmdp.DPPenaltyMH(llr_clip=2.0)
        start = time.perf_counter()
        idata = pmdp.sample(
            step=step,
            epsilon=2.0,
            delta=1e-6,
            draws=draws,
            tune=tune,
            chains=2,
            cores=1,
            random_seed=1,
            progressbar=False,
            backend=backend,
        )
    return idata, time.perf_counter() - start


def report(label: str, idata, seconds: float) -> None:
    posterior = idata.posterior
    means = np.concatenate([np.ravel(posterior[v].mean(("chain", "draw")).values) for v in ("alpha", "beta")])
    epsilon = format_epsilon(posterior.attrs["dp_epsilon"])
    print(f"{label}: ε = {epsilon} in {seconds:.1f} s; posterior means {np.round(means, 2)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--tune", type=int, default=100)
    parser.add_argument("--address", default=None, help="an existing Dask scheduler, e.g. tcp://10.0.0.5:8786")
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    model = build_model(args.rows)
    report("one process", *run(model, args.draws, args.tune))

    if args.address is None:
        cluster = LocalCluster(processes=True, n_workers=args.workers, threads_per_worker=1, dashboard_address=":0")
        client = Client(cluster)
    else:
        cluster, client = None, Client(args.address)  # an existing cluster
    try:
        report(
            f"Dask ({len(client.scheduler_info()['workers'])} workers)",
            *run(model, args.draws, args.tune, backend=pmdp.DaskBackend(client)),
        )
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


if __name__ == "__main__":
    main()
