"""DPHMC and DPPenaltyMH on the DP-HMC paper's two models, against exact posterior draws.

Räisä, Koskela and Honkela (2021), §4: a 2-d banana (n = 1e5, a = 20, θ = (0, 3)) and a 10-d
correlated Gaussian (n = 1e5), with the paper's hyperparameters (its τ times √n, because our
noise scales are per unit of sensitivity), δ = 0.1/n, 4 chains started around the posterior,
the first half of each chain discarded, and the number of iterations the largest that ε allows
(the paper's protocol: noise fixed, iterations from the budget). One run per setting (the
paper repeats each ten times), so single-run figures scatter. Reports the maximum mean
discrepancy (Gaussian kernel, median-heuristic bandwidth, unbiased estimate) and the error of
the posterior mean against exact posterior draws, as a table and, when matplotlib is
installed, a plot of error against ε.

Run: ``python examples/dp_hmc_experiments.py`` for the full size: the banana takes about 5
minutes, but DPHMC on the 10-d Gaussian needs about 0.9 s per iteration (13 per-row gradient
matrices of a 100,000 × 10 multivariate normal) and 2,152 iterations at ε = 15, so budget an
hour, or pick ``--models``, ``--samplers`` and ``--epsilons``. ``--rows 2000 --epsilons 8
--max-iterations 40`` is a quick smoke run.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_dp as pmdp
from pymc_dp.accounting import gaussian_mu_for_target


@dataclass
class Problem:
    name: str
    model: pm.Model
    reference: np.ndarray  # exact posterior draws, (draws, d)
    centre: np.ndarray
    spread: np.ndarray
    to_point: callable  # flat θ -> initvals dict


def banana(n_rows: int, seed: int, a: float = 20.0) -> Problem:
    """Räisä et al.'s banana: θ1 ~ N(0, 1/τ0), θ2 + aθ1² ~ N(0, 1/τ0); x1 ~ N(θ1, 1/τ1), x2 ~ N(θ2 + aθ1², 1/τ2)."""
    tau0, tau1, tau2 = 0.001, 0.0005, 0.0004
    rng = np.random.default_rng(seed)
    theta = np.array([0.0, 3.0])
    x1 = rng.normal(theta[0], 1 / math.sqrt(tau1), n_rows)
    x2 = rng.normal(theta[1] + a * theta[0] ** 2, 1 / math.sqrt(tau2), n_rows)
    with pm.Model(coords={"obs": np.arange(n_rows)}) as model:
        d1 = pm.Data("x1", x1, dims="obs")
        d2 = pm.Data("x2", x2, dims="obs")
        t1 = pm.Normal("theta1", 0, 1 / math.sqrt(tau0))
        t2 = pm.Normal("theta2", -a * t1**2, 1 / math.sqrt(tau0))
        pm.Normal("y1", t1, 1 / math.sqrt(tau1), observed=d1, dims="obs")
        pm.Normal("y2", t2 + a * t1**2, 1 / math.sqrt(tau2), observed=d2, dims="obs")
    # Exact posterior: θ1 and φ = θ2 + aθ1² are independent Gaussians (unit Jacobian).
    prec1, prec2 = tau0 + n_rows * tau1, tau0 + n_rows * tau2
    m1, m2 = tau1 * x1.sum() / prec1, tau2 * x2.sum() / prec2
    draws = np.random.default_rng(seed + 1).normal(size=(2000, 2))
    t1d = m1 + draws[:, 0] / math.sqrt(prec1)
    phi = m2 + draws[:, 1] / math.sqrt(prec2)
    reference = np.column_stack([t1d, phi - a * t1d**2])
    return Problem(
        "banana",
        model,
        reference,
        reference.mean(0),
        reference.std(0),
        lambda v: {"theta1": np.asarray(v[0]), "theta2": np.asarray(v[1])},
    )


def correlated_gaussian(n_rows: int, seed: int, dim: int = 10) -> Problem:
    """Räisä et al.'s 10-d Gaussian: Σ = Q diag(Gamma(0.5)) Qᵀ, x ~ N((0, 3, 0, ...), Σ), prior N(0, 100² I)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.uniform(size=(dim, dim)))
    cov = q @ np.diag(rng.gamma(0.5, size=dim)) @ q.T
    mean = np.zeros(dim)
    mean[1] = 3.0
    x = rng.multivariate_normal(mean, cov, size=n_rows)
    with pm.Model(coords={"obs": np.arange(n_rows), "dim": np.arange(dim)}) as model:
        xd = pm.Data("x", x, dims=("obs", "dim"))
        theta = pm.Normal("theta", 0, 100, dims="dim")
        pm.MvNormal("y", theta, cov=cov, observed=xd, dims=("obs", "dim"))
    precision = np.eye(dim) / 100**2 + n_rows * np.linalg.inv(cov)
    post_cov = np.linalg.inv(precision)
    post_mean = post_cov @ (n_rows * np.linalg.solve(cov, x.mean(0)))
    reference = np.random.default_rng(seed + 1).multivariate_normal(post_mean, post_cov, size=2000)
    return Problem("gauss", model, reference, post_mean, np.sqrt(np.diag(post_cov)), lambda v: {"theta": np.asarray(v)})


def mmd(sample: np.ndarray, reference: np.ndarray, rng: np.random.Generator, max_points: int = 2000) -> float:
    """√|unbiased MMD²| with a Gaussian kernel whose bandwidth is the median distance of 500 random pairs."""
    if len(sample) > max_points:
        sample = sample[rng.choice(len(sample), max_points, replace=False)]
    pairs = np.linalg.norm(
        sample[rng.integers(len(sample), size=500)] - reference[rng.integers(len(reference), size=500)], axis=1
    )
    bandwidth = max(float(np.median(pairs)), 1e-12)

    def kernel(a, b):
        sq = (a**2).sum(1)[:, None] + (b**2).sum(1)[None, :] - 2 * a @ b.T
        return np.exp(-np.maximum(sq, 0) / (2 * bandwidth**2))

    kxx, kyy, kxy = kernel(sample, sample), kernel(reference, reference), kernel(sample, reference)
    m, n = len(sample), len(reference)
    value = (kxx.sum() - np.trace(kxx)) / (m * (m - 1)) + (kyy.sum() - np.trace(kyy)) / (n * (n - 1)) - 2 * kxy.mean()
    return math.sqrt(abs(value))


def make_step(problem: Problem, sampler: str, sqrt_n: float):
    """The paper's hyperparameters (params/*.py of DP-HMC-experiments), τ scaled by √n."""
    settings = {
        ("banana", "DPPenaltyMH"): dict(noise_multiplier=0.17 * sqrt_n, proposal_scale=0.06, llr_clip=0.15),
        ("gauss", "DPPenaltyMH"): dict(noise_multiplier=0.05 * sqrt_n, proposal_scale=0.0007, llr_clip=10.0),
        ("banana", "DPHMC"): dict(
            llr_noise_multiplier=0.10 * sqrt_n,
            grad_noise_multiplier=0.55 * sqrt_n,
            step_size=0.006 / 2,
            n_leapfrog=25,
            llr_clip=0.1,
            grad_clip=0.05,
        ),
        ("gauss", "DPHMC"): dict(
            llr_noise_multiplier=0.1 * sqrt_n,
            grad_noise_multiplier=0.25 * sqrt_n,
            step_size=0.00015 / 2,
            n_leapfrog=12,
            llr_clip=6.0,
            grad_clip=10.0,
        ),
    }[(problem.name, sampler)]
    with problem.model:
        if sampler == "DPHMC":
            # The paper's code multiplies η by a Halton number in [0, 1) each iteration: η/2 ± η/2 here.
            return pmdp.DPHMC(tune=False, step_size_jitter=0.999, **settings)
        return pmdp.DPPenaltyMH(tune=False, **settings)


def run(problem: Problem, sampler: str, epsilon: float, delta: float, args: argparse.Namespace):
    chains, seed = args.chains, args.seed
    step = make_step(problem, sampler, math.sqrt(args.rows))
    per_chain = int(gaussian_mu_for_target(epsilon, delta) / step.gaussian_mu_per_iteration()) // chains
    if args.max_iterations:
        per_chain = min(per_chain, args.max_iterations)
    if per_chain < 2:
        return None
    rng = np.random.default_rng(seed)
    initvals = [
        problem.to_point(problem.centre + problem.spread * rng.normal(size=problem.centre.shape)) for _ in range(chains)
    ]
    start = time.perf_counter()
    idata = pmdp.sample(
        step=step,
        epsilon=epsilon,
        delta=delta,
        draws=per_chain - per_chain // 2,
        tune=per_chain // 2,
        chains=chains,
        initvals=initvals,
        random_seed=seed,
        model=problem.model,
        progressbar=False,
        compute_convergence_checks=False,
    )
    seconds = time.perf_counter() - start
    names = ["theta1", "theta2"] if problem.name == "banana" else ["theta"]
    draws = np.column_stack(
        [idata.posterior[v].values.reshape(chains * idata.posterior.sizes["draw"], -1) for v in names]
    )
    return {
        "model": problem.name,
        "sampler": sampler,
        "epsilon": epsilon,
        "spent": float(idata.posterior.attrs["dp_epsilon"]),
        "iterations_per_chain": per_chain,
        "mmd": mmd(draws, problem.reference, np.random.default_rng(seed + 7)),
        "mean_error": float(np.linalg.norm(draws.mean(0) - problem.reference.mean(0))),
        "acceptance": float(idata.sample_stats["dp_accepted"].mean()),
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[2.0, 4.0, 8.0, 15.0])
    parser.add_argument("--models", nargs="+", default=["banana", "gauss"], choices=["banana", "gauss"])
    parser.add_argument("--samplers", nargs="+", default=["DPHMC", "DPPenaltyMH"], choices=["DPHMC", "DPPenaltyMH"])
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--max-iterations", type=int, default=None, help="cap per chain (smoke runs)")
    parser.add_argument("--seed", type=int, default=43247)
    parser.add_argument("--output", type=Path, default=None, help="folder for the table (markdown) and plot")
    args = parser.parse_args()

    problems = {"banana": banana, "gauss": correlated_gaussian}
    delta = 0.1 / args.rows
    rows = []
    for name in args.models:
        problem = problems[name](args.rows, args.seed)
        for sampler in args.samplers:
            for epsilon in args.epsilons:
                result = run(problem, sampler, epsilon, delta, args)
                if result is None:
                    print(f"{name} {sampler} eps={epsilon}: the budget allows fewer than 2 iterations per chain")
                    continue
                rows.append(result)
                print(
                    f"{name:7s} {sampler:12s} eps={epsilon:5.1f} (spent {result['spent']:.3f}) "
                    f"iters/chain={result['iterations_per_chain']:5d} MMD={result['mmd']:.4f} "
                    f"mean error={result['mean_error']:.4f} accept={result['acceptance']:.2f} "
                    f"({result['seconds']:.0f} s)",
                    flush=True,
                )
    table = [
        "| model | sampler | ε | iterations per chain | MMD | mean error | acceptance |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    table += [
        f"| {r['model']} | {r['sampler']} | {r['epsilon']:g} | {r['iterations_per_chain']} | {r['mmd']:.4f} | "
        f"{r['mean_error']:.4f} | {r['acceptance']:.2f} |"
        for r in rows
    ]
    print("\n" + "\n".join(table))
    if args.output is not None:
        args.output.mkdir(parents=True, exist_ok=True)
        (args.output / "dp_hmc_experiments.md").write_text("\n".join(table) + "\n")
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib is not installed: no plot")
            return
        fig, axes = plt.subplots(2, 2, figsize=(9, 7), sharex=True)
        for col, name in enumerate(args.models[:2]):
            for sampler, marker in (("DPHMC", "o-"), ("DPPenaltyMH", "s--")):
                sel = [r for r in rows if r["model"] == name and r["sampler"] == sampler]
                eps = [r["epsilon"] for r in sel]
                axes[0, col].plot(eps, [r["mmd"] for r in sel], marker, label=sampler)
                axes[1, col].plot(eps, [r["mean_error"] for r in sel], marker, label=sampler)
            axes[0, col].set_title(name)
            axes[1, col].set_xlabel("ε")
        axes[0, 0].set_ylabel("MMD")
        axes[1, 0].set_ylabel("mean error")
        axes[0, 0].legend()
        fig.tight_layout()
        fig.savefig(args.output / "dp_hmc_experiments.png", dpi=120)
        print(f"wrote {args.output / 'dp_hmc_experiments.png'}")


if __name__ == "__main__":
    main()
