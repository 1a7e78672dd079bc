"""DPHMC vs pm.HamiltonianMC per iteration, same L, η and model (logistic regression).

Run: ``python benchmarks/bench_hmc.py [--rows 100000] [--features 10] [--leapfrog 10] [--iterations 40]``.
Both samplers use L leapfrog steps of the same size and a unit mass matrix; HMC's cost is
L + 1 full-data log-density gradients per iteration, DPHMC's L + 1 per-row gradient matrices
(clipped and noised, in row chunks) plus one per-row log-likelihood vector. Target ratio ≤ 1.2.
"""

from __future__ import annotations

import argparse

import numpy as np
import pymc as pm
from _common import environment, logistic_regression, seconds_per_iteration
from pymc.step_methods.hmc.quadpotential import QuadPotentialDiag

import pymc_dp as pmdp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--leapfrog", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--mode", default=None, help="PyTensor compile mode for pymc-dp, e.g. NUMBA")
    args = parser.parse_args()
    model = logistic_regression(args.rows, args.features)
    n_params = args.features + 1
    eta = 0.5 / np.sqrt(args.rows)

    with model:
        hmc = pm.HamiltonianMC(
            path_length=eta * args.leapfrog * 0.999999,  # int(path/η) = L exactly
            step_scale=eta * n_params**0.25,
            adapt_step_size=False,
            step_rand=lambda s, rng=None: s,
            potential=QuadPotentialDiag(np.ones(n_params)),
        )
        dp_hmc = pmdp.DPHMC(
            step_size=eta,
            n_leapfrog=args.leapfrog,
            grad_clip=3.0,
            llr_clip=3.0,
            grad_noise_multiplier=50.0,
            llr_noise_multiplier=50.0,
            tune=False,
            compile_kwargs={"mode": args.mode} if args.mode else None,
        )
    t_hmc = seconds_per_iteration(model, hmc, args.iterations)
    t_dp = seconds_per_iteration(model, dp_hmc, args.iterations)
    print(environment())
    print(
        f"rows N = {args.rows}, parameters P = {n_params}, leapfrog L = {args.leapfrog}, iterations = {args.iterations}"
    )
    print(f"pm.HamiltonianMC   {1e3 * t_hmc:9.2f} ms / iteration")
    print(f"pmdp.DPHMC         {1e3 * t_dp:9.2f} ms / iteration")
    print(f"ratio              {t_dp / t_hmc:9.2f} x   (target <= 1.2)")


if __name__ == "__main__":
    main()
