"""d3p's DP-VI per iteration on the settings of ``bench_dpadvi_jax.py``, for a like-for-like comparison.

Run in an environment with d3p (not a dependency of pymc-dp: its pins on numpyro and
jax-chacha-prng would constrain ours), for example::

    python3.11 -m venv /tmp/d3p && /tmp/d3p/bin/pip install d3p
    /tmp/d3p/bin/python benchmarks/bench_d3p.py --rows 100000 1000000

then ``python benchmarks/bench_dpadvi_jax.py`` with the same ``--rows``, ``--features``,
``--rate`` and ``--iterations`` on the same machine. The model is the logistic regression of
``_common.logistic_regression`` written in NumPyro (standard-normal covariates, N(0, 1) prior,
P = features + 1 with an intercept), the guide mean-field (``AutoDiagonalNormal``), Adam at 0.01,
clipping threshold 3, noise scale 1 (``dp_scale``), one Monte Carlo draw. Batches are d3p's
fixed-size minibatches of ``rate · N`` rows drawn on the device with its ChaCha20 generator
(``subsample_batchify_data``, ``d3p.random``): d3p's own defaults, not DPADVI's Poisson batches.
Two timings per N, wall time per iteration after a warm-up (compilation excluded):

- ``update per call``: a jitted ``batch + DPSVI.update`` called once per iteration from Python,
  as ``DPADVI.fit`` makes one device call per iteration;
- ``fori_loop``: all iterations in one ``jax.lax.fori_loop`` call (d3p's fastest form).
"""

from __future__ import annotations

import argparse
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np


def seconds_per_iteration(n_rows: int, features: int, rate: float, iterations: int) -> tuple[float, float]:
    """d3p's (update per call, fori_loop) wall time per iteration at N = ``n_rows``."""
    import d3p.random
    from d3p.minibatch import subsample_batchify_data
    from d3p.svi import DPSVI
    from numpyro.distributions import Bernoulli, Normal
    from numpyro.infer import Trace_ELBO
    from numpyro.infer.autoguide import AutoDiagonalNormal
    from numpyro.optim import Adam
    from numpyro.primitives import plate, sample

    def model(xs, ys, N):  # d3p passes the static keyword N
        batch, _ = xs.shape
        w = sample("w", Normal(0.0, 1.0), sample_shape=(xs.shape[1],))
        with plate("batch", N, batch):
            sample("ys", Bernoulli(logits=xs @ w), obs=ys)

    rng = np.random.default_rng(0)
    x = rng.normal(size=(n_rows, features))
    xs = np.column_stack([np.ones(n_rows), x])
    ys = rng.binomial(1, 1.0 / (1.0 + np.exp(-(x @ rng.normal(0, 0.5, features)))))
    xs, ys = jnp.asarray(xs), jnp.asarray(ys, dtype=jnp.float64)  # the rows on the device once
    svi = DPSVI(model, AutoDiagonalNormal(model), Adam(0.01), Trace_ELBO(), 3.0, 1.0, N=n_rows)
    key = d3p.random.PRNGKey(0)
    batch_init, get_batch = subsample_batchify_data((xs, ys), round(rate * n_rows))
    _, batch_state = batch_init(key)
    state = svi.init(key, *get_batch(0, batch_state))

    @jax.jit
    def one(i, state):
        state, _ = svi.update(state, *get_batch(i, batch_state))
        return state

    @jax.jit
    def many(start, state):
        return jax.lax.fori_loop(start, start + iterations, one, state)

    state = jax.block_until_ready(one(0, state))
    begin = time.perf_counter()
    for i in range(1, iterations + 1):
        state = one(i, state)
    jax.block_until_ready(state)
    per_call = (time.perf_counter() - begin) / iterations
    state = jax.block_until_ready(many(0, state))
    begin = time.perf_counter()
    jax.block_until_ready(many(iterations, state))
    return per_call, (time.perf_counter() - begin) / iterations


def main() -> None:
    import d3p
    import numpyro

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--rate", type=float, default=0.01)
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)  # float64, as DPADVI
    print(
        f"python {platform.python_version()} | jax {jax.__version__} on {jax.devices()[0].platform} | "
        f"numpyro {numpyro.__version__} | d3p {getattr(d3p, '__version__', '?')}"
    )
    for n_rows in args.rows:
        per_call, looped = seconds_per_iteration(n_rows, args.features, args.rate, args.iterations)
        print(
            f"N = {n_rows}, P = {args.features + 1}, batch {round(args.rate * n_rows)}: "
            f"update per call {1e3 * per_call:.3f} ms / iteration, fori_loop {1e3 * looped:.3f} ms / iteration",
            flush=True,
        )


if __name__ == "__main__":
    main()
