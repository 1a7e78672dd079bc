"""Where NUTS struggles on a grouped release's noise-aware likelihood: divergences, R-hat and ESS per latent variable.

Runs the utility grid's one call (:func:`benchmarks.utility.run_one_call`: the grouped release, then NUTS, 2
chains, 500 + 500) on ``fair_hierarchical`` or ``diamonds_hierarchical`` at the given ε and prints, for every
free variable of the model NUTS ran (the user's priors and the likelihood's latent variables: the group sizes'
``…_group_size_shift``, the covariate moments ``…_x_…``), its worst R-hat and bulk ESS, and where the divergent
transitions sit: the mean of the divergent draws minus the mean of all draws, in posterior sds (a large value
names the variable whose funnel NUTS fell into). Also the utility grid's comparison with NUTS on the raw rows
(``--reference-cache``) and the CPU seconds of the call. Issue 34 (H34m).

Usage: ``python benchmarks/grouped_geometry.py fair_hierarchical 4 --runs 2 --reference-cache /tmp/ref``
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import arviz as az
import pymc as pm
from utility import (
    DATASETS,
    GROUP_EFFECTS,
    _free_names,
    _nuts_reference,
    compare,
    diamonds_hierarchical_data,
    fair_hierarchical_data,
)

import pymc_dp as pmdp
import pymc_dp.exponential_family.grouped_likelihood as grouped_likelihood

HIERARCHICAL_DATA = {"fair_hierarchical": fair_hierarchical_data, "diamonds_hierarchical": diamonds_hierarchical_data}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def divergence_locations(idata) -> dict[str, float]:
    """{variable[i]: (mean of the divergent draws − mean of all) / sd} over every scalar of the posterior."""
    diverging = np.asarray(idata.sample_stats["diverging"]).reshape(-1).astype(bool)
    out = {}
    if not diverging.any():
        return out
    for name, values in idata.posterior.data_vars.items():
        flat = np.asarray(values).reshape(diverging.size, -1)
        sd = flat.std(axis=0)
        shift = (flat[diverging].mean(axis=0) - flat.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
        for i, v in enumerate(shift):
            out[f"{name}[{i}]"] = float(v)
    return dict(sorted(out.items(), key=lambda kv: -abs(kv[1]))[:8])


def mixing(idata) -> dict[str, list[float]]:
    """{variable: [worst R-hat, least bulk ESS]} for every variable of the posterior."""
    rhat, ess = az.rhat(idata), az.ess(idata)
    return {
        name: [round(float(np.max(np.asarray(rhat[name]))), 4), round(float(np.min(np.asarray(ess[name]))), 1)]
        for name in idata.posterior.data_vars
    }


def _model(name: str, release, x: np.ndarray):
    """The utility grid's priors for ``name`` with the grouped release's noise-aware likelihood (as the one call)."""
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=x.shape[1])
        mu_group = pm.Normal("mu_group", 0, 1)
        sd_group = pm.HalfNormal("sd_group", 0.5)
        sigma = pm.HalfNormal("sigma", 1.0)
        groups = release.family.n_groups
        if name == "fair_hierarchical":  # non-centred, as the grid's model
            alpha = mu_group + sd_group * pm.Normal("offset", 0, 1, shape=groups)
        else:  # centred, as the grid's model
            alpha = pm.Normal("intercept", mu_group, sd_group, shape=groups)
        release.likelihood("y", alpha=alpha, beta=beta, sigma=sigma)
    return model


def _release(name: str, epsilon: float):
    """The grouped release the one call makes for ``name`` (its public bounds, the planner's mechanism rule)."""
    from pymc_dp.accounting.calibrate import noise_multiplier_for_target
    from pymc_dp.exponential_family.grouped import grouped_family

    x, group, y = HIERARCHICAL_DATA[name]()
    n, p = x.shape
    delta = 0.1 / n
    settings = {
        "n_groups": int(group.max()) + 1,
        "n_features": p,
        "x_bounds": ([-1.0] * p, [1.0] * p),
        "y_bounds": (-1.0, 1.0),
    }
    fam = grouped_family("linear_regression", **settings)
    tau = noise_multiplier_for_target(epsilon, delta, 1)
    gaussian = (tau * fam.l2_sensitivity()) ** 2 < 2.0 * (fam.l1_sensitivity() / epsilon) ** 2
    noise = {"mechanism": "gaussian", "delta": delta} if gaussian else {"mechanism": "laplace"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the release's advice is not measured here
        release = pmdp.release_statistics(
            "linear_regression", (x, y, group), epsilon=epsilon, clipping_check=False, **noise, **settings
        )
    return release, x


def one_run(name: str, epsilon: float, seed: int, cache: Path | None, draws: int = 500) -> dict:
    """One release and NUTS on its noise-aware likelihood (the one call's settings), measured."""
    model, _ = DATASETS[name]()
    names = _free_names(model)
    reference, _ = _nuts_reference(model, names, False, cache, name)
    start, cpu = time.perf_counter(), _cpu()
    release, x = _release(name, epsilon)
    with _model(name, release, x), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(
            draws=draws,
            tune=draws,
            chains=2,
            target_accept=0.95,
            random_seed=seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
    cell = {"dataset": name, "epsilon": epsilon, "seed": seed, "draws": draws, "mechanism": release.mechanism}
    cell["cpu_s"], cell["wall_s"] = round(_cpu() - cpu, 1), round(time.perf_counter() - start, 1)
    cell["divergences"] = int(np.asarray(idata.sample_stats["diverging"]).sum())
    summary = mixing(idata)
    cell["max_rhat"] = max(v[0] for v in summary.values())
    cell["min_ess"] = min(v[1] for v in summary.values())
    cell["flagged"] = bool(cell["divergences"] > 0 or cell["max_rhat"] > 1.01 or cell["min_ess"] < 200)
    cell.update({k: v for k, v in compare(idata, reference, names).items() if not isinstance(v, dict)})
    keep = [n for n in names if n not in GROUP_EFFECTS[name]]
    glob = compare(idata, {k: v for k, v in reference.items() if k.split("[")[0] in keep}, keep)
    cell["global"] = {k: glob[k] for k in ("max_z", "max_z_dp", "min_sd_ratio", "max_sd_ratio", "all_covered")}
    cell["mixing"] = summary
    cell["divergent_at"] = divergence_locations(idata)
    return cell


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", choices=sorted(GROUP_EFFECTS))
    parser.add_argument("epsilon", type=float)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--reference-cache", type=Path, default=None)
    parser.add_argument("--draws", type=int, default=500, help="draws and tuning steps per chain (the grid's 500)")
    parser.add_argument(
        "--sizes",
        choices=["default", "latent"],
        default="default",
        help="latent: every group size sampled (MARGINAL_SIZE_UNITS = inf, the likelihood before issue 34's H34m)",
    )
    args = parser.parse_args(argv)
    if args.sizes == "latent":
        grouped_likelihood.MARGINAL_SIZE_UNITS = float("inf")
    for run in range(args.runs):
        cell = one_run(args.dataset, args.epsilon, args.seed + run, args.reference_cache, args.draws)
        print(json.dumps({"sizes": args.sizes, **cell}), flush=True)


if __name__ == "__main__":
    main()
