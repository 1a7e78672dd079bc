"""Per-row gradients against the model's own full-data logp + gradient, for the model zoo.

Run: ``python benchmarks/bench_data_layer.py [--scale 1.0]``. For each model prints the
milliseconds of one full-data logp + gradient (``model.logp_dlogp_function``, the non-private
counterpart) and, as multiples of it: the per-row gradient matrix in forward mode, in reverse
mode and in the mode ``RowLikelihood`` chose (``gradient_mode="auto"``), and the clipped
per-row gradient sum that DPHMC releases (chunked, noised; in ``RowLikelihood.clipped_sum_mode``,
printed after it). ``--models logistic`` runs only the models whose name contains that text.
Targets (issue 21): the clipped sum ≤ 2×, the matrix ≤ 3×. Timings are never asserted in tests.
"""

from __future__ import annotations

import argparse

import numpy as np
import pymc as pm
from _common import environment, logistic_regression, median_seconds

from pymc_dp.data import RowLikelihood
from pymc_dp.mechanisms import NoisyClippedGradient


def mvnormal(n_rows: int, dim: int = 20, seed: int = 0) -> pm.Model:
    """MvNormal with an unknown mean and a fixed dense covariance (P = 20)."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(dim, dim))
    cov = a @ a.T / dim + np.eye(dim)
    x = rng.multivariate_normal(np.zeros(dim), cov, size=n_rows)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5, size=dim)
        pm.MvNormal("x", mu, cov=cov, observed=x)
    return model


def negative_binomial(n_rows: int, features: int = 14, seed: int = 0) -> pm.Model:
    """Negative-binomial regression with a log link (P = features + 2)."""
    rng = np.random.default_rng(seed)
    x = 0.3 * rng.normal(size=(n_rows, features))
    y = rng.negative_binomial(5, 5 / (5 + np.exp(0.5 + x @ rng.normal(size=features) * 0.3)))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, size=features)
        alpha = pm.HalfNormal("alpha", 5)
        pm.NegativeBinomial("y", mu=pm.math.exp(a + x @ b), alpha=alpha, observed=y)
    return model


def hierarchical(n_rows: int, groups: int = 10, seed: int = 0) -> pm.Model:
    """Normal hierarchical model with a numpy group index (P = groups + 3)."""
    rng = np.random.default_rng(seed)
    g = rng.integers(0, groups, size=n_rows)
    y = rng.normal(0.3 * g, 1.0)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfNormal("tau", 2)
        theta = pm.Normal("theta", mu, tau, size=groups)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", theta[g], sigma, observed=y)
    return model


def zoo(scale: float) -> dict[str, pm.Model]:
    n = int(100_000 * scale)
    return {
        "logistic, pm.Data, N=1e5 P=11": logistic_regression(n, 10),
        "logistic, numpy, N=1e5 P=11": logistic_regression(n, 10, use_data=False),
        "MvNormal mean, N=5e4 P=20": mvnormal(n // 2),
        "neg. binomial, N=1e5 P=16": negative_binomial(n),
        "hierarchical, N=1e5 P=13": hierarchical(n),
    }


def measure(name: str, model: pm.Model) -> str:
    """One table line: full-data logp + gradient, and the per-row forms as multiples of it."""
    total = model.logp_dlogp_function(ravel_inputs=True)
    total.set_extra_values({})
    rows = RowLikelihood(model)
    theta = rows.prior.initial_theta + 0.1
    t_total = median_seconds(lambda: total(theta))
    assert rows.subset_mode == "index"
    data = [v.get_value(borrow=True) for v in rows._row_index_vars]
    times = {}
    for mode in ("forward", "reverse"):
        fn = rows._compile_batch_grad(mode)
        times[mode] = median_seconds(lambda fn=fn: fn(theta, *data))
    t_chosen = median_seconds(lambda: rows.grad_rows(theta))
    release = NoisyClippedGradient(rows, 1.0, 1.0)
    rng = np.random.default_rng(0)
    t_clipped = median_seconds(lambda: release.release(theta, rng))
    return (
        f"{name:34} {1e3 * t_total:8.2f}ms {times['forward'] / t_total:7.2f}x {times['reverse'] / t_total:7.2f}x "
        f"{t_chosen / t_total:7.2f}x {rows.gradient_mode:>9} {t_clipped / t_total:11.2f}x {rows.clipped_sum_mode:>8}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every N by this")
    parser.add_argument("--models", default="", help="run only the models whose name contains this text")
    args = parser.parse_args()
    print(environment())
    print("ratios to one full-data logp + gradient of the same model, measured in the same run")
    header = (
        f"{'model':34} {'full grad':>10} {'forward':>8} {'reverse':>8} {'chosen':>8} {'(mode)':>9} "
        f"{'clipped sum':>12} {'(mode)':>8}"
    )
    print(header)
    for name, model in zoo(args.scale).items():
        if args.models in name:
            print(measure(name, model), flush=True)


if __name__ == "__main__":
    main()
