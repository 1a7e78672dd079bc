"""Cost of the discrete-noise default of ``release_statistics`` against the float64 samplers (``noise="continuous"``).

Times whole ``release_statistics`` calls (row checks, per-row statistics, the grid's rounding and exact
integer sums, the noise, the projection, the record) on simulated regressions, alternating the two
samplers, and prints the median time of each and their ratio; then the noise draws alone per
coordinate.

    python benchmarks/bench_discrete_noise.py [--rows 100000] [--features 5] [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics
import time
from fractions import Fraction

import numpy as np

import pymc_dp as pmdp
from pymc_dp.mechanisms.noise import discrete_gaussian_noise, discrete_laplace_noise


def _data(kind: str, rows: int, features: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (rows, features))
    if kind == "linear_regression":
        return (x, np.clip(x @ np.linspace(-1, 1, features) + rng.normal(0, 0.5, rows), -3, 3)), {"y_bounds": (-3, 3)}
    y = (rng.uniform(size=rows) < 1 / (1 + np.exp(-x @ np.linspace(-1, 1, features)))).astype(float)
    return (x, y), {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    print(f"N = {args.rows}, P = {args.features}, {args.repeats} calls each, medians (s)")
    print("family              mechanism  continuous  discrete  ratio")
    for kind in ("linear_regression", "logistic_regression"):
        data, bounds = _data(kind, args.rows, args.features)
        for mechanism, extra in (("laplace", {}), ("gaussian", {"delta": 1e-6})):
            times: dict[str, list[float]] = {"continuous": [], "discrete": []}
            for _ in range(args.repeats):
                for noise in ("continuous", "discrete"):
                    start = time.perf_counter()
                    pmdp.release_statistics(
                        kind,
                        data,
                        epsilon=1.0,
                        n_features=args.features,
                        x_bounds=(-1, 1),
                        mechanism=mechanism,
                        noise=noise,
                        **bounds,
                        **extra,
                    )
                    times[noise].append(time.perf_counter() - start)
            c, d = statistics.median(times["continuous"]), statistics.median(times["discrete"])
            print(f"{kind:19s} {mechanism:9s}  {c:10.4f}  {d:8.4f}  {d / c:5.2f}")
    count = 2000
    for name, draw in (
        ("discrete Laplace, t ~ 2^40 (rational)", lambda: discrete_laplace_noise(Fraction(3 * 2**40 + 1, 7), count)),
        ("discrete Gaussian, sigma ~ 2^40", lambda: discrete_gaussian_noise(Fraction(3 * 2**80 + 1, 7), count)),
    ):
        start = time.perf_counter()
        draw()
        print(f"{name}: {1e6 * (time.perf_counter() - start) / count:.1f} µs per draw (OS entropy)")


if __name__ == "__main__":
    main()
