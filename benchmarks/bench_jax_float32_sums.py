"""Time of one clipped sum on the JAX backend, float64 and float32 (issue 33, hole 6: float32 sums in float64).

Run: ``python benchmarks/bench_jax_float32_sums.py [--rows 100000] [--repeats 40] [--against OLD.py]``.
For each dtype (and, with ``--against``, for another version of ``pymc_dp/backends/jax_rows.py`` in
float32, loaded beside the current one on the same data layer) it builds ``JaxRowMechanisms``
(default chunks) and times, in milliseconds per call (median; two warm-up calls, then the versions'
calls interleaved, so that a busy machine slows them alike; compilation excluded; noise-free:
``std = 0``), the releases as the mechanisms call them:

- the clipped ratio sum and the clipped gradient sum (the linear-predictor form) of a logistic
  regression (``_common.logistic_regression``, P = 21);
- the clipped gradient sum of y ~ Normal(μ, σ) (per-row reverse-mode gradients, P = 2);
- DPADVI's clipped batch sum (1,024 rows, one draw) and DPBarkerMH's batch moments (1,024 rows) of
  the logistic regression.

docs/jax.md ("float32") has the figures with ``--against`` the ``edd15ad`` module.
"""

from __future__ import annotations

import argparse
import importlib.util
import time

import numpy as np
import pymc as pm
from _common import environment, logistic_regression

from pymc_dp.backends import jax_rows
from pymc_dp.data import RowLikelihood
from pymc_dp.mechanisms.access import RowMechanisms


def normal_model(n_rows: int) -> pm.Model:
    rng = np.random.default_rng(0)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", mu, sigma, observed=rng.normal(1.0, 2.0, size=n_rows))
    return model


def releases(rows, small, batch: np.ndarray) -> dict:
    """The timed calls: name → a function of nothing (each a noise-free release)."""
    theta, proposal = np.full(rows.n_params, 0.1), np.full(rows.n_params, 0.11)
    current = rows.loglik(theta)
    jacobian = np.concatenate([np.eye(rows.n_params), np.zeros((rows.n_params, rows.n_params))], axis=1)[None]
    return {
        "ratio sum (GLM)": lambda: rows.noisy_ratio_sum(proposal, current, 0.5, 0.0, 0.0),
        f"gradient sum (GLM, {rows.gradient_mode})": lambda: rows.noisy_gradient_sum(
            theta, 3.0, 0.0, np.zeros(rows.n_params)
        ),
        "DPADVI batch sum (GLM, 1,024 rows)": lambda: rows.noisy_batch_gradient_sum(
            theta[None], jacobian, 3.0, 0.0, np.zeros(2 * rows.n_params), batch
        ),
        "Barker batch moments (GLM, 1,024 rows)": lambda: rows.batch_ratio_moments(theta, proposal, 0.5, batch),
        f"gradient sum (normal, {small.gradient_mode})": lambda: small.noisy_gradient_sum(
            np.array([0.1, 0.2]), 3.0, 0.0, np.zeros(2)
        ),
    }


def load_module(path: str):
    """Module ``jax_rows`` from another file (e.g. ``git show edd15ad:pymc_dp/mechanisms/jax_rows.py``)."""
    spec = importlib.util.spec_from_file_location("jax_rows_against", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--against", help="another jax_rows.py to time in float32 beside the current one")
    args = parser.parse_args()
    print(environment())
    glm, normal = RowLikelihood(logistic_regression(args.rows, 20)), RowLikelihood(normal_model(args.rows))
    batch = np.random.default_rng(1).choice(args.rows, size=1024, replace=False)
    versions = [("float64", jax_rows, "float64"), ("float32", jax_rows, "float32")]
    if args.against:
        versions.insert(0, ("float32 (--against)", load_module(args.against), "float32"))
    figures = {}
    for label, module, dtype in versions:
        rows = module.JaxRowMechanisms(RowMechanisms(glm), dtype=dtype).device_rows
        small = module.JaxRowMechanisms(RowMechanisms(normal), dtype=dtype).device_rows
        figures[label] = releases(rows, small, batch)
    names = list(figures["float64"])
    times = {(label, name): [] for label in figures for name in names}
    for name in names:  # two warm-up calls each, then the versions' calls interleaved
        for label in figures:
            figures[label][name]()
            figures[label][name]()
    for _ in range(args.repeats):
        for name in names:
            for label in figures:
                start = time.perf_counter()
                figures[label][name]()
                times[(label, name)].append(time.perf_counter() - start)
    for name in names:
        medians = {label: 1e3 * float(np.median(times[(label, name)])) for label in figures}
        line = ", ".join(f"{label} {ms:.3f} ms" for label, ms in medians.items())
        if args.against:
            line += f"; float32 now / against: {medians['float32'] / medians['float32 (--against)']:.2f}"
        print(f"N={args.rows}  {name}: {line}")


if __name__ == "__main__":
    main()
