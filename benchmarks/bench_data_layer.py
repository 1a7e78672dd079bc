"""Per-row gradient matrix vs the model's own total logp + gradient (logistic regression).

Run: ``python benchmarks/bench_data_layer.py [--rows 100000] [--features 10]``. Prints the
milliseconds per call of each and their ratio (target: ≤ 1.5). Timings are never asserted
in tests.
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import environment, logistic_regression, median_seconds

from pymc_dp.data import RowLikelihood


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=10)
    parser.add_argument("--mode", default=None, help="PyTensor compile mode for pymc-dp, e.g. NUMBA or FAST_RUN")
    args = parser.parse_args()
    model = logistic_regression(args.rows, args.features)

    total = model.logp_dlogp_function(ravel_inputs=True)
    total.set_extra_values({})
    theta = np.random.default_rng(1).normal(scale=0.1, size=args.features + 1)
    rows = RowLikelihood(model, compile_kwargs={"mode": args.mode} if args.mode else None)

    t_total = median_seconds(lambda: total(theta))
    t_grad = median_seconds(lambda: rows.grad_rows(theta))
    t_rows = median_seconds(lambda: rows.loglik_grad_rows(theta))
    t_ll = median_seconds(lambda: rows.loglik_rows(theta))
    subset = np.sort(np.random.default_rng(2).choice(args.rows, 1000, replace=False))
    t_subset = median_seconds(lambda: rows.loglik_grad_rows(theta, subset), number=50)

    print(environment())
    print(f"rows N = {args.rows}, parameters P = {args.features + 1}, pymc-dp compile mode: {args.mode or 'default'}")
    print(f"model total logp + gradient            {1e3 * t_total:8.3f} ms")
    print(f"per-row log-likelihood vector (N,)     {1e3 * t_ll:8.3f} ms")
    print(f"per-row gradient matrix (N,P)          {1e3 * t_grad:8.3f} ms")
    print(f"  ratio to total logp + gradient       {t_grad / t_total:8.2f} x   (target <= 1.5)")
    print(f"per-row log-lik + gradient matrix      {1e3 * t_rows:8.3f} ms   ({t_rows / t_total:.2f} x)")
    print(f"1000-row subset, log-lik + gradients   {1e3 * t_subset:8.3f} ms   (subset mode: {rows.subset_mode})")


if __name__ == "__main__":
    main()
