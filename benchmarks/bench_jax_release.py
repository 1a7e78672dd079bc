"""One release on the JAX backend, taken apart: where the time of a clipped gradient sum goes.

Run: ``python benchmarks/bench_jax_release.py [--rows 1000000] [--features 20] [--repeats 50]``.
Logistic regression (``_common.logistic_regression``, P = features + 1), the rows on the device
(``JaxRowMechanisms``, default chunks), compilation excluded. Reports, in milliseconds per
call with the result blocked on (no host noise, no Python step):

- the jitted clipped gradient sum (``JaxRows._f_gradient_sum``), the clipped ratio sum and the
  per-row log-likelihoods, with the number of kernels XLA compiled each into (fusions, library
  calls and loops in the optimised HLO);
- the two matrix–vector products every gradient release must make (X w and Xᵀv), jitted alone on
  the same device array: what one release would cost with no other work;
- one read of X (a jitted sum over it): the bandwidth floor of one pass;
- the same logistic clipped sum written by hand in JAX (z = Xw, g = y − σ(z), clip factors
  from precomputed ‖xᵢ‖², Xᵀ(c ⊙ g)), with X stored as N × P and transposed (P × N): what
  the release would cost without PyTensor's graph, and whether the layout matters.
"""

from __future__ import annotations

import argparse
import re
import time

import numpy as np
from _common import environment, logistic_regression

from pymc_dp.backends.jax_rows import JaxRowMechanisms, import_jax
from pymc_dp.data import RowLikelihood
from pymc_dp.mechanisms.access import RowMechanisms


def blocked_seconds(fn, repeats: int) -> float:
    """Median seconds of ``fn()`` with its result blocked on, after two warm-up calls."""
    jax = import_jax()
    for _ in range(2):
        jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def kernels(jitted, *args) -> str:
    """Counts of the optimised HLO's kernels: fusions, library calls (custom-call: cuBLAS) and while loops."""
    text = jitted.lower(*args).compile().as_text() or ""
    entry = text  # every computation: loop bodies included
    counts = {name: len(re.findall(rf"= [^ ]+ {name}\(", entry)) for name in ("fusion", "custom-call", "while")}
    return ", ".join(f"{v} {k}" for k, v in counts.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    jax = import_jax()
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    device = jax.devices()[0]
    print(environment(), f"| jax {jax.__version__} on {device.platform} ({device.device_kind})")
    for n_rows in args.rows:
        model = logistic_regression(n_rows, args.features)
        rows = RowLikelihood(model)
        device_rows = JaxRowMechanisms(RowMechanisms(rows), reproducible_noise=True).device_rows
        theta = jnp.asarray(np.full(rows.n_params, 0.05))
        bound = np.float64(2.0)
        data, mask = device_rows._data, device_rows._mask
        current = device_rows._f_loglik(theta, data)
        x = jax.device_put(np.random.default_rng(0).normal(size=(n_rows, args.features)))
        w, v = jnp.ones(args.features), jnp.ones(n_rows)
        matvec, rmatvec = jax.jit(lambda a, b: a @ b), jax.jit(lambda a, b: a.T @ b)
        read = jax.jit(lambda a: a.sum())
        both = jax.jit(lambda a, b, c: (a @ b, a.T @ c))
        xt = jax.device_put(np.asarray(x).T.copy())
        y = jnp.asarray(np.random.default_rng(1).integers(0, 2, n_rows).astype(np.float64))
        squares = jnp.sum(x * x, axis=1)

        def by_hand(z, y, squares, bound=2.0):
            g = y - jax.nn.sigmoid(z)
            norms = jnp.sqrt(g * g * (squares + 1.0))  # intercept's coordinate included
            return jnp.where(norms > bound, bound / norms, 1.0) * g

        rows_layout = jax.jit(lambda x, w, y, sq: x.T @ by_hand(x @ w, y, sq))
        columns_layout = jax.jit(lambda xt, w, y, sq: xt @ by_hand(w @ xt, y, sq))
        rows_ = {
            "clipped gradient sum": (device_rows._f_gradient_sum, (theta, bound, data, mask)),
            "clipped ratio sum": (device_rows._f_ratio_sum, (theta + 0.01, current, bound, data, mask)),
            "per-row log-likelihoods": (device_rows._f_loglik, (theta, data)),
            "X w and X^T v alone": (both, (x, w, v)),
            "X w alone": (matvec, (x, w)),
            "X^T v alone": (rmatvec, (x, v)),
            "one read of X": (read, (x,)),
            "X w, X stored P x N": (matvec, (w, xt)),
            "X^T v, X stored P x N": (matvec, (xt, v)),
            "by hand, X stored N x P": (rows_layout, (x, w, y, squares)),
            "by hand, X stored P x N": (columns_layout, (xt, w, y, squares)),
        }
        print(
            f"\nN = {n_rows}, P = {rows.n_params}, gradient mode {device_rows.gradient_mode}, "
            f"{device_rows.n_chunks} chunk(s) of {device_rows.chunk_rows} rows"
        )
        for name, (fn, fn_args) in rows_.items():
            seconds = blocked_seconds(lambda fn=fn, fn_args=fn_args: fn(*fn_args), args.repeats)
            print(f"  {name:26s} {1e3 * seconds:8.3f} ms   [{kernels(fn, *fn_args)}]", flush=True)


if __name__ == "__main__":
    main()
