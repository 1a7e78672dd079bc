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
from _common import environment, hierarchical, logistic_regression, median_seconds, mvnormal, negative_binomial

from pymc_dp.data import RowLikelihood
from pymc_dp.mechanisms import NoisyClippedGradient


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
