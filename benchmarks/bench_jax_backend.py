"""The JAX backend vs the default backend per iteration (DPHMC, DPPenaltyMH), against PyMC's non-private steps.

Run: ``python benchmarks/bench_jax_backend.py [--rows 10000 100000] [--features 20] [--leapfrog 10]
[--iterations 20]``. Logistic regression with P = features + 1 parameters. For each N it times,
with ``pm.sample`` (one chain, after a warm-up run, compile excluded):

- ``pm.HamiltonianMC`` (same L, η, unit mass) beside ``pmdp.DPHMC`` on the default backend and on
  the JAX backend (float64 and float32);
- ``pm.Metropolis`` beside ``pmdp.DPPenaltyMH`` on both backends;

and prints each DP figure as a multiple of its non-private counterpart measured in the same run,
plus the float32 backend's relative error on one clipped gradient sum. A GPU, where JAX sees one,
is used by the JAX backend (the data put on it once, before the timed iterations).
"""

from __future__ import annotations

import argparse

import numpy as np
import pymc as pm
from _common import environment, logistic_regression, matched_hmc_steps, seconds_per_iteration

import pymc_dp as pmdp
from pymc_dp.backends.jax import attach_backend
from pymc_dp.backends.jax_rows import import_jax


def _timed(model, step, iterations: int, backend: pmdp.JaxBackend | None) -> float:
    detach = attach_backend(backend, [step])
    try:
        return seconds_per_iteration(model, step, iterations)
    finally:
        detach()


def _float32_error(step) -> float:
    """max |f32 − f64| / max |f64| of one clipped gradient sum at the model's initial point + 0.1."""
    sums = {}
    for dtype in ("float64", "float32"):
        detach = attach_backend(pmdp.JaxBackend(dtype=dtype), [step])
        try:
            rows = step._row_mechanisms.device_rows
            theta = np.full(rows.n_params, 0.1)
            sums[dtype] = rows.noisy_gradient_sum(theta, 3.0, 0.0, np.zeros(rows.n_params))
        finally:
            detach()
    return float(np.max(np.abs(sums["float32"] - sums["float64"])) / np.max(np.abs(sums["float64"])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--leapfrog", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument(
        "--skip",
        nargs="+",
        default=[],
        help="timers to leave out by name prefix, e.g. 'DPHMC default' 'pm.Metropolis' (slow at N = 10^7)",
    )
    args = parser.parse_args()
    jax = import_jax()
    print(environment(), f"| jax {jax.__version__} on {jax.devices()[0].platform}")
    n_params = args.features + 1
    for n_rows in args.rows:
        model = logistic_regression(n_rows, args.features)
        with model:
            hmc, dp_hmc = matched_hmc_steps(n_params, n_rows, args.leapfrog)
            metropolis = pm.Metropolis(tune=False)
            penalty = pmdp.DPPenaltyMH(llr_clip=3.0, noise_multiplier=50.0, tune=False)
        timers = {  # (function, arguments): called only when selected
            "pm.HamiltonianMC": (seconds_per_iteration, (model, hmc, args.iterations)),
            "DPHMC default": (_timed, (model, dp_hmc, args.iterations, None)),
            "DPHMC jax f64": (_timed, (model, dp_hmc, args.iterations, pmdp.JaxBackend())),
            "DPHMC jax f32": (_timed, (model, dp_hmc, args.iterations, pmdp.JaxBackend(dtype="float32"))),
            "pm.Metropolis": (seconds_per_iteration, (model, metropolis, 10 * args.iterations)),
            "DPPenaltyMH default": (_timed, (model, penalty, 10 * args.iterations, None)),
            "DPPenaltyMH jax f64": (_timed, (model, penalty, 10 * args.iterations, pmdp.JaxBackend())),
        }
        times = {
            name: function(*arguments)
            for name, (function, arguments) in timers.items()
            if not any(name.startswith(prefix) for prefix in args.skip)
        }
        print(f"\nN = {n_rows}, P = {n_params}, L = {args.leapfrog}")
        for name, seconds in times.items():
            base = times.get("pm.HamiltonianMC" if "HMC" in name or "HamiltonianMC" in name else "pm.Metropolis")
            ratio = f"{seconds / base:6.2f} x non-private" if base else "(non-private step not timed)"
            print(f"  {name:22s} {1e3 * seconds:9.2f} ms / iteration   {ratio}", flush=True)
        print(f"  float32 clipped gradient sum, relative error vs float64: {_float32_error(dp_hmc):.1e}")


if __name__ == "__main__":
    main()
