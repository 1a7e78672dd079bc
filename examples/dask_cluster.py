"""The same DP model on one process and on a Dask cluster: same guarantee, same accounting.

Run: ``python examples/dask_cluster.py [--rows 200000] [--workers 2] [--draws 300] [--tune 100]
[--iterations 300] [--parts sampler dpadvi one-call] [--address tcp://scheduler:8786]``.

Three parts (``--parts``), each run in this process and then with
``backend=pmdp.DaskBackend(client)``, at the same ε (docs/dask.md):

- ``sampler``: logistic regression (P = 6) sampled with DPPenaltyMH; the rows are scattered once
  to the workers and each release gets back only the partitions' clipped sums.
- ``dpadvi``: the same model fitted with ``pmdp.DPADVI``; at every iteration each worker draws
  its partition's Poisson batch (OS entropy there) and returns the clipped gradient sum of the
  sampled rows; the noise is added once, here.
- ``one-call``: ``pmdp.sample(epsilon=..., backend=...)`` without a step on a model whose plan
  picks DPADVI (a Student-t regression with 200 group intercepts at ε = 0.5; the plan needs
  ``--rows`` of 50,000 or so); the route's DPADVI fit runs its batches on the workers. The route
  warns (``PoorMixingWarning``) that a mean-field fit ignores the group intercepts' posterior
  correlations: this part shows where the fit runs, not a result to publish.

Without ``--address`` the cluster is a ``distributed.LocalCluster`` of ``--workers`` processes
on this machine; with it, ``Client(address)`` connects to an existing cluster (its workers need
pymc-dp and the same PyMC installed). Prints each run's ε, its time and the posterior means.
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


def fit_dpadvi(model: pm.Model, iterations: int, backend="default"):
    start = time.perf_counter()
    fit = pmdp.DPADVI(epsilon=2.0, delta=1e-6, sampling_rate=0.01, grad_clip=5.0, random_seed=1, backend=backend)
    approx = fit.fit(iterations, model=model, progressbar=False)
    return approx.sample(1000, random_seed=1), time.perf_counter() - start


def build_grouped_model(n_rows: int, groups: int = 200, seed: int = 0) -> pm.Model:
    """A robust regression with one intercept per group: at ε = 0.5 pmdp.plan's one-call route is DPADVI."""
    rng = np.random.default_rng(seed)
    group = rng.integers(0, groups, size=n_rows)
    x = rng.normal(size=(n_rows, 2))
    y = rng.normal(0, 0.5, size=groups)[group] + x @ [1.0, -1.0] + rng.standard_t(3, size=n_rows)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2, shape=2)
        intercept = pm.Normal("intercept", 0, 1, shape=groups)
        sigma = pm.HalfNormal("sigma", 2)
        pm.StudentT("y", nu=4, mu=intercept[group] + x @ beta, sigma=sigma, observed=y)
    return model


def one_call(model: pm.Model, backend="default"):
    start = time.perf_counter()
    with model:
        idata = pmdp.sample(epsilon=0.5, delta=1e-6, random_seed=1, progressbar=False, backend=backend)
    return idata, time.perf_counter() - start


def report(label: str, idata, seconds: float, names=("alpha", "beta")) -> None:
    posterior = idata.posterior
    means = np.concatenate([np.ravel(posterior[v].mean(("chain", "draw")).values) for v in names])
    epsilon = format_epsilon(posterior.attrs["dp_epsilon"])
    route = f" ({posterior.attrs['dp_route']})" if "dp_route" in posterior.attrs else ""
    print(f"{label}{route}: ε = {epsilon} in {seconds:.1f} s; posterior means {np.round(means, 2)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--tune", type=int, default=100)
    parser.add_argument("--iterations", type=int, default=300, help="DPADVI iterations (part dpadvi)")
    parser.add_argument("--parts", nargs="+", default=["sampler", "dpadvi", "one-call"])
    parser.add_argument("--address", default=None, help="an existing Dask scheduler, e.g. tcp://10.0.0.5:8786")
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    model = build_model(args.rows)
    grouped = build_grouped_model(args.rows) if "one-call" in args.parts else None
    if "sampler" in args.parts:
        report("DPPenaltyMH, one process", *run(model, args.draws, args.tune))
    if "dpadvi" in args.parts:
        report("DPADVI, one process", *fit_dpadvi(model, args.iterations))
    if "one-call" in args.parts:
        report("pmdp.sample, one process", *one_call(grouped), names=("beta", "sigma"))

    if args.address is None:
        cluster = LocalCluster(processes=True, n_workers=args.workers, threads_per_worker=1, dashboard_address=":0")
        client = Client(cluster)
    else:
        cluster, client = None, Client(args.address)  # an existing cluster
    try:
        where = f"Dask ({len(client.scheduler_info()['workers'])} workers)"
        if "sampler" in args.parts:
            report(f"DPPenaltyMH, {where}", *run(model, args.draws, args.tune, backend=pmdp.DaskBackend(client)))
        if "dpadvi" in args.parts:
            report(f"DPADVI, {where}", *fit_dpadvi(model, args.iterations, backend=pmdp.DaskBackend(client)))
        if "one-call" in args.parts:
            report(f"pmdp.sample, {where}", *one_call(grouped, pmdp.DaskBackend(client)), names=("beta", "sigma"))
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


if __name__ == "__main__":
    main()
