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

``--rng-suite threefry`` runs d3p with JAX's threefry generator as its ``rng_suite`` (passed to
``DPSVI`` and ``subsample_batchify_data``: d3p's own hook, which its ``d3p.random.debug`` fills
the same way), where jax-chacha-prng cannot run: its wheels hold a CPU kernel only and lower
through APIs JAX removed after 0.4, so there is no ChaCha20 for d3p on a GPU with a current JAX;
and ``d3p.random.debug`` itself imports a private JAX function removed since, so the suite is
written here (``threefry_suite``). ``d3p.random`` imports ``chacha`` when d3p loads; a stand-in
module that raises on any use is installed then, so nothing draws from it. Threefry costs less
than ChaCha20, so d3p's figure in that mode is a lower bound on its secure default's time, never
an overstatement of DPADVI's advantage.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import types

import jax
import jax.numpy as jnp
import numpy as np


def threefry_suite() -> types.ModuleType:
    """d3p's ``rng_suite`` interface (what ``d3p.random.debug`` provides) on JAX's threefry generator."""

    def random_bits(key, bit_width, shape):
        return jax.random.bits(
            key, shape, dtype={8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32, 64: jnp.uint64}[bit_width]
        )

    suite = types.ModuleType("threefry_suite")  # a module, as d3p's suites are: hashable for jit's static arguments
    suite.PRNGState = jax.Array
    suite.PRNGKey = lambda seed=0: jax.random.PRNGKey(seed)
    suite.split, suite.fold_in = jax.random.split, jax.random.fold_in
    suite.uniform, suite.normal = jax.random.uniform, jax.random.normal
    suite.random_bits = random_bits
    suite.convert_to_jax_rng_key = lambda key: key
    return suite


def install_refusing_chacha() -> None:
    """Stand-in ``chacha`` modules so that ``d3p.random`` imports without jax-chacha-prng; any use raises."""

    def refuse(*args, **kwargs):
        raise RuntimeError("jax-chacha-prng is not installed: run with --rng-suite threefry")

    package, random, defs = (types.ModuleType(name) for name in ("chacha", "chacha.random", "chacha.defs"))
    for name in ("split", "fold_in", "random_bits", "uniform", "PRNGKey"):
        setattr(random, name, refuse)
    random.RNGState = object
    defs.ChaChaKeySizeInBytes = 32
    package.random, package.defs = random, defs
    sys.modules.update({"chacha": package, "chacha.random": random, "chacha.defs": defs})


def seconds_per_iteration(
    n_rows: int, features: int, rate: float, iterations: int, rng_suite: str = "secure"
) -> tuple[float, float]:
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
    if rng_suite == "threefry":
        suite = threefry_suite()
    else:
        suite = d3p.random
    svi = DPSVI(model, AutoDiagonalNormal(model), Adam(0.01), Trace_ELBO(), 3.0, 1.0, N=n_rows, rng_suite=suite)
    key = suite.PRNGKey(0)
    batch_init, get_batch = subsample_batchify_data((xs, ys), round(rate * n_rows), rng_suite=suite)
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--rate", type=float, default=0.01)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument(
        "--rng-suite",
        choices=("secure", "threefry"),
        default="secure",
        help="d3p.random (ChaCha20, d3p's default) or JAX's threefry (where jax-chacha-prng cannot run)",
    )
    args = parser.parse_args()
    try:
        import chacha.random  # noqa: F401
    except ImportError:
        if args.rng_suite == "secure":
            raise
        install_refusing_chacha()
    if not hasattr(jax.lib, "xla_bridge"):
        # d3p 0.2.0's __init__ probes jax.lib.xla_bridge.get_backend("gpu") (gone from JAX >= 0.5) and then
        # calls numpyro.set_platform("gpu") (refused by NumPyro >= 0.16, which says "cuda"): answer its probe
        # with the RuntimeError it catches. JAX places the arrays on its default device, the GPU where there is one.
        def get_backend(platform_name):
            raise RuntimeError("no jax.lib.xla_bridge: JAX's default device is used")

        jax.lib.xla_bridge = types.SimpleNamespace(get_backend=get_backend)
    import d3p
    import numpyro

    jax.config.update("jax_enable_x64", True)  # float64, as DPADVI
    print(
        f"python {platform.python_version()} | jax {jax.__version__} on {jax.devices()[0].device_kind} | "
        f"numpyro {numpyro.__version__} | d3p {getattr(d3p, '__version__', '?')} | rng suite {args.rng_suite}"
    )
    for n_rows in args.rows:
        per_call, looped = seconds_per_iteration(n_rows, args.features, args.rate, args.iterations, args.rng_suite)
        print(
            f"N = {n_rows}, P = {args.features + 1}, batch {round(args.rate * n_rows)}: "
            f"update per call {1e3 * per_call:.3f} ms / iteration, fori_loop {1e3 * looped:.3f} ms / iteration",
            flush=True,
        )


if __name__ == "__main__":
    main()
