"""Peak memory of one full-data gradient release: row chunks vs the whole N × P matrix at once.

Run: ``python benchmarks/bench_memory.py [--rows 1000000 10000000] [--features 19]``. Each N
runs in its own subprocess: logistic regression written with numpy arrays, P = features + 1.
For one DPHMC gradient release (clipped per-row gradients summed, noised) prints the peak
memory allocated during the release (``tracemalloc``: NumPy's and PyTensor's arrays) with the
default memory limit (``pymc_dp.data.CHUNK_BYTES``) and with all rows in one chunk, the size
of the N × P matrix, and the time of each against one full-data logp + gradient of the model
(``model.logp_dlogp_function``, what ``pm.HamiltonianMC`` evaluates per leapfrog step),
medians of 3 calls.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tracemalloc

import numpy as np
from _common import environment, logistic_regression, median_seconds


def child(n_rows: int, features: int) -> None:
    from pymc_dp.data import CHUNK_BYTES, RowLikelihood
    from pymc_dp.mechanisms import NoisyClippedGradient

    model = logistic_regression(n_rows, features, use_data=False)
    total = model.logp_dlogp_function(ravel_inputs=True)
    total.set_extra_values({})
    theta = np.full(features + 1, 0.05)
    t_total = median_seconds(lambda: total(theta), repeats=3, number=1)
    rng = np.random.default_rng(0)
    line = [f"N = {n_rows:>10}  P = {features + 1}  N×P matrix {8 * n_rows * (features + 1) / 2**20:8.0f} MiB"]
    line.append(f"full logp+grad {1e3 * t_total:8.1f} ms")
    for label, chunk_bytes in (("chunked", None), ("one chunk", 2**62)):
        rows = RowLikelihood(model, chunk_bytes=chunk_bytes)
        release = NoisyClippedGradient(rows, 1.0, 1.0)
        release.release(theta, rng)  # compile and warm
        tracemalloc.start()
        release.release(theta, rng)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        elapsed = median_seconds(lambda release=release: release.release(theta, rng), repeats=3, number=1)
        limit = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
        chunks = len(rows.row_chunks())
        line.append(
            f"{label}: {chunks} chunk(s) of {rows.chunk_rows if chunk_bytes is None else n_rows} rows, "
            f"peak {peak / 2**20:8.1f} MiB, {elapsed / t_total:5.2f}x full grad"
            + (f" (limit {limit / 2**20:.0f} MiB)" if chunk_bytes is None else "")
        )
        del rows, release
    print("\n    ".join(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--features", type=int, default=19)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.features)
        return
    print(environment())
    for n in args.rows:
        cmd = [sys.executable, __file__, "--child", str(n), "--features", str(args.features)]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        print(result.stdout.strip() or f"N = {n}: failed ({result.stderr.strip().splitlines()[-1:]})", flush=True)


if __name__ == "__main__":
    main()
