"""Grouped Poisson regression on released per-group statistics against NUTS on the raw rows (issue 34, item 3).

A varying-intercept Poisson regression, y ~ Poisson(exp(α_g + β·x)), α_g = μ + τ·z_g, x ~ N(0, 1)
clipped to the public ``--x-bound``, counts clipped to ``--y-max``, group labels uniform over G
groups, α_g ~ N(0.5, 0.5), β = ``--slope``. One data set; NUTS on its raw rows (the same clipped
rows, the same priors) and NUTS on the noise-aware likelihood of one release at each ε in
``--epsilon``. Per parameter (α_g, β, μ, τ) it prints |DP mean − NUTS mean| in NUTS sds, the same
gap in combined Monte Carlo standard errors (z = gap / √(MCSE_DP² + MCSE_NUTS²)), DP sd / NUTS sd,
divergences, and the CPU seconds of each fit (process time, compile included).

Run: ``python benchmarks/grouped_poisson.py --rows 600 --groups 4 --epsilon 1e9 1e4`` (the limit
check) or ``--rows 5000 --groups 20 --epsilon 2 --x-bound 6 --y-max 60`` (the issue's case).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import arviz as az
import numpy as np
import pymc as pm

import pymc_dp as pmdp


def simulated(n_rows: int, n_groups: int, slope: float, x_bound: float, y_max: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    x = np.clip(rng.normal(size=(n_rows, 1)), -x_bound, x_bound)
    groups = rng.integers(0, n_groups, size=n_rows)
    alpha = rng.normal(0.5, 0.5, size=n_groups)
    y = np.minimum(rng.poisson(np.exp(alpha[groups] + slope * x[:, 0])), y_max)
    return x, y, groups


def priors(n_groups: int, hierarchical: bool = True) -> tuple:
    if not hierarchical:  # independent intercepts: no funnel, so both fits' MCSEs are trustworthy
        return pm.Normal("alpha", 0.0, 5.0, shape=n_groups), pm.Normal("beta", 0.0, 5.0, shape=1)
    mu = pm.Normal("mu", 0.0, 5.0)
    tau = pm.HalfNormal("tau", 2.0)
    alpha = pm.Deterministic("alpha", mu + tau * pm.Normal("z", 0.0, 1.0, shape=n_groups))
    return alpha, pm.Normal("beta", 0.0, 5.0, shape=1)


def draws_of(idata: object, n_groups: int) -> dict[str, np.ndarray]:
    post = idata.posterior
    out = {f"alpha[{g}]": post["alpha"].values[:, :, g] for g in range(n_groups)}
    out["beta"] = post["beta"].values[:, :, 0]
    if "mu" in post:
        out["mu"], out["tau"] = post["mu"].values, post["tau"].values
    return out


def fit(build, settings: dict, seed: int) -> tuple[dict, int, float]:
    start = time.process_time()
    with pm.Model():
        sample = build()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = sample(random_seed=seed, progressbar=False, cores=1, compute_convergence_checks=False, **settings)
    if "dp_diagnostics" in idata.posterior.attrs:  # a release's result: its sampler statistics are dropped
        divergent = int(json.loads(idata.posterior.attrs["dp_diagnostics"]).get("divergences", -1))
    else:
        divergent = int(idata.sample_stats["diverging"].values.sum())
    return idata, divergent, time.process_time() - start


def compare(mine: dict, ref: dict) -> dict[str, dict[str, float]]:
    rows = {}
    for name, draws in ref.items():
        sd = float(draws.std())
        gap = float(mine[name].mean() - draws.mean())
        mcse = float(np.hypot(az.mcse(mine[name]), az.mcse(draws)))
        rows[name] = {"gap_sd": gap / sd, "z": gap / mcse, "sd_ratio": float(mine[name].std()) / sd}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--epsilon", type=float, nargs="+", default=[1e9, 1e4])
    parser.add_argument("--slope", type=float, default=0.3)
    parser.add_argument("--x-bound", type=float, default=4.0)
    parser.add_argument("--y-max", type=int, default=15)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--independent", action="store_true", help="independent N(0, 5) intercepts, no μ, τ")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    g = args.groups
    x, y, groups = simulated(args.rows, g, args.slope, args.x_bound, args.y_max, args.seed)
    settings = {"draws": args.draws, "tune": args.draws, "chains": args.chains}

    def rows_model():
        alpha, beta = priors(g, not args.independent)
        pm.Poisson("y", mu=pm.math.exp(alpha[groups] + x[:, 0] * beta[0]), observed=y)
        return pm.sample

    exact, exact_divergent, exact_cpu = fit(rows_model, settings, args.seed + 1)
    ref = draws_of(exact, g)
    report = {"settings": vars(args), "nuts_rows": {"cpu_s": exact_cpu, "divergent": exact_divergent}, "release": {}}
    print(f"NUTS on the rows: {exact_cpu:.1f} CPU s, {exact_divergent} divergent")
    for epsilon in args.epsilon:
        release = pmdp.release_statistics(
            "poisson_regression",
            (x, y, groups),
            epsilon=epsilon,
            n_groups=g,
            n_features=1,
            x_bounds=(-args.x_bound, args.x_bound),
            y_max=args.y_max,
            random_seed=args.seed + 2,
            reproducible_noise=True,
        )

        def release_model(release=release):
            alpha, beta = priors(g, not args.independent)
            release.likelihood("lik", alpha=alpha, beta=beta)
            return release.sample

        idata, divergent, cpu = fit(release_model, {**settings, "on_poor_mixing": "ignore"}, args.seed + 3)
        rows = compare(draws_of(idata, g), ref)
        report["release"][str(epsilon)] = {"cpu_s": cpu, "divergent": divergent, "parameters": rows}
        print(f"ε = {epsilon:g}: {cpu:.1f} CPU s ({cpu / exact_cpu:.1f}× NUTS on rows), {divergent} divergent")
        for name, row in rows.items():
            print(f"  {name:10s} gap {row['gap_sd']:+7.3f} NUTS sd  z {row['z']:+7.2f}  sd ratio {row['sd_ratio']:.3f}")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(report, handle, indent=1)


if __name__ == "__main__":
    main()
