"""Per-row gradient matrix in forward and reverse mode, and the mode ``RowLikelihood`` chooses (issue 38).

Run: ``python benchmarks/gradient_modes.py [--rows 10000] [--repeats 7] [--models student]``.
For each model of the zoo, builds ``RowLikelihood(model)`` (``gradient_mode="auto"``: chosen
from the compiled graphs' cost model, never timed), compiles the per-row gradient matrix of a
batch of rows in both modes, and times each on all N rows: the two alternate ``--repeats``
times in the same process and each keeps its fastest round (the mean of ``--number`` calls),
so that a machine shared with other jobs disturbs the comparison as little as it can. Prints
milliseconds per call in each mode, the mode chosen, the cost model's estimate for each mode
(``RowLikelihood._gradient_mode_costs``, in elementary operations per row), the ratio
chosen ÷ faster, and whether it is within 1.2x (the issue's target). Timings are never
asserted in tests. Run with ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1``: on a loaded machine
OpenBLAS's threads made a 10⁴ × 10 matrix product 20-100x slower, which swamps the modes.
Figures: docs/data.md.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pymc as pm
from _common import correlated_gaussian, environment, hierarchical, logistic_regression, mvnormal, negative_binomial

from pymc_dp.data import RowLikelihood

TARGET = 1.2


def linear_regression(n_rows: int, features: int = 10, seed: int = 0) -> pm.Model:
    """Normal linear regression with an unknown noise scale (P = features + 2)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, features))
    y = 0.5 + x @ rng.normal(size=features) + rng.normal(size=n_rows)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, size=features)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", a + x @ b, sigma, observed=y)
    return model


def student_t(n_rows: int, features: int = 9, seed: int = 0) -> pm.Model:
    """Robust regression with Student-t errors, unknown scale and degrees of freedom (P = features + 3 = 12)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, features))
    y = 0.5 + x @ rng.normal(size=features) + rng.standard_t(4, size=n_rows)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, size=features)
        sigma = pm.HalfNormal("sigma", 2)
        nu = pm.Gamma("nu", 2, 0.1)
        pm.StudentT("y", nu=nu, mu=a + x @ b, sigma=sigma, observed=y)
    return model


def poisson(n_rows: int, features: int = 10, seed: int = 0) -> pm.Model:
    """Poisson regression with a log link (P = features + 1)."""
    rng = np.random.default_rng(seed)
    x = 0.3 * rng.normal(size=(n_rows, features))
    y = rng.poisson(np.exp(0.5 + x @ rng.normal(size=features) * 0.3))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, size=features)
        pm.Poisson("y", mu=pm.math.exp(a + x @ b), observed=y)
    return model


def zoo(n: int) -> dict[str, pm.Model]:
    return {
        "Gaussian 10-d (MvNormal mean), P=10": correlated_gaussian(n),
        "MvNormal mean, P=20": mvnormal(n),
        "linear regression, P=12": linear_regression(n),
        "logistic, pm.Data, P=11": logistic_regression(n, 10),
        "logistic, numpy, P=11": logistic_regression(n, 10, use_data=False),
        "Student-t regression, P=12": student_t(n),
        "negative binomial, P=16": negative_binomial(n),
        "Poisson regression, P=11": poisson(n),
        "hierarchical theta[g], P=13": hierarchical(n),
    }


def _best_round(fns: dict, args: tuple, repeats: int, number: int) -> dict[str, float]:
    """Fastest round (mean of ``number`` calls) of each function, the functions alternating."""
    for fn in fns.values():
        fn(*args)  # warm-up
    best = dict.fromkeys(fns, np.inf)
    for _ in range(repeats):
        for key, fn in fns.items():
            start = time.perf_counter()
            for _ in range(number):
                fn(*args)
            best[key] = min(best[key], (time.perf_counter() - start) / number)
    return best


def measure(name: str, model: pm.Model, repeats: int, number: int) -> tuple[str, bool]:
    """One table line and whether the chosen mode is within ``TARGET`` of the faster."""
    rows = RowLikelihood(model)
    start = time.perf_counter()
    chosen = rows.gradient_mode
    choose_s = time.perf_counter() - start
    costs = getattr(rows, "_gradient_mode_costs", None) or {}
    theta = rows.prior.initial_theta + 0.1
    data = [v.get_value(borrow=True) for v in rows._row_index_vars]
    fns = {mode: rows._compile_batch_grad(mode) for mode in ("forward", "reverse")}
    best = _best_round(fns, (theta, *data), repeats, number)
    ratio = best[chosen] / min(best.values())
    ok = ratio <= TARGET
    cost_text = " ".join(f"{costs.get(mode, np.nan):9.3g}" for mode in ("forward", "reverse"))
    line = (
        f"{name:38} {1e3 * best['forward']:9.2f} {1e3 * best['reverse']:9.2f} {chosen:>8} {cost_text} "
        f"{ratio:8.2f} {'yes' if ok else 'NO':>6} {choose_s:7.1f}s"
    )
    return line, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7, help="alternating timing rounds of the two modes")
    parser.add_argument("--number", type=int, default=3, help="calls per round")
    parser.add_argument("--models", default="", help="run only the models whose name contains this text")
    args = parser.parse_args()
    print(environment())
    print(f"N = {args.rows}; fastest of {args.repeats} alternating rounds of {args.number} calls, ms per call")
    print(
        f"{'model':38} {'forward':>9} {'reverse':>9} {'chosen':>8} {'cost fwd':>9} {'cost rev':>9} "
        f"{'ch/fast':>8} {'<=1.2':>6} {'choice':>8}"
    )
    results = []
    for name, model in zoo(args.rows).items():
        if args.models.lower() in name.lower():
            line, ok = measure(name, model, args.repeats, args.number)
            results.append(ok)
            print(line, flush=True)
    print(f"chosen mode within {TARGET}x of the faster: {sum(results)} of {len(results)} models")


if __name__ == "__main__":
    main()
