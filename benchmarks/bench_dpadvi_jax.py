"""DPADVI per iteration on the default backend and on the JAX backend (CPU or GPU).

Run: ``python benchmarks/bench_dpadvi_jax.py [--rows 100000 1000000] [--features 20] [--rate 0.01]
[--iterations 200] [--backends default jax jax-one-call] [--noise default seeded]``. Logistic
regression with P = features + 1 parameters (``_common.logistic_regression``), mean-field DPADVI
with the noise multiplier set by hand (no calibration), Poisson batches at ``--rate``. For each N
and backend it reports the wall time per iteration of ``DPADVI.fit`` after a warm-up fit on the same
object (compilation and the rows' transfer to the device excluded), with the default noise (on the
JAX backend the operating system's CSPRNG, read in blocks; on the default backend a PCG64 generator
seeded from it) and with ``reproducible_noise=True`` (a seeded generator): the whole call, and
inside its loop (callback time stamps from the end of the first block, 64 iterations, to the last: the
iterations without the fit's fixed costs, its pricing before and its record after, which the third
column gives per fit). ``jax`` runs the iterations in ``lax.scan`` blocks of
``JaxBackend().scan_iterations``; ``jax-one-call`` one device call per iteration. d3p's figure on
the same settings: ``bench_d3p.py``, in its own environment.
"""

from __future__ import annotations

import argparse
import time

from _common import environment, logistic_regression

import pymc_dp as pmdp

BACKENDS = ("default", "jax", "jax-one-call")


def per_iteration(model, backend, rate: float, iterations: int, reproducible: bool) -> tuple[float, float]:
    """Seconds per iteration of the whole ``fit`` call, and inside its loop (after its first block)."""
    if backend == "jax-one-call":
        backend = pmdp.JaxBackend(scan_iterations=1)
    # From the end of the first block (the JAX backend's scan_iterations; 64 elsewhere): whole blocks, each with
    # its device call, so the loop's figure counts every block's call.
    skip = backend.scan_iterations if isinstance(backend, pmdp.JaxBackend) else pmdp.JaxBackend().scan_iterations
    if iterations < 2 * skip:
        raise ValueError(f"`--iterations` must be at least {2 * skip} to time the loop. Found {iterations}.")
    fit = pmdp.DPADVI(
        noise_multiplier=1.0,
        delta=1e-6,
        sampling_rate=rate,
        grad_clip=3.0,
        optimizer="adam",
        learning_rate=0.01,
        random_seed=1,
        reproducible_noise=reproducible,
        backend=backend,
    )
    fit.fit(10, model=model, progressbar=False)  # warm-up: compilation, rows on the device
    stamps: list[float] = []
    start = time.perf_counter()
    fit.fit(iterations, model=model, progressbar=False, callbacks=[lambda *_: stamps.append(time.perf_counter())])
    whole = (time.perf_counter() - start) / iterations
    return whole, (stamps[-1] - stamps[skip - 1]) / (iterations - skip)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--rate", type=float, default=0.01)
    parser.add_argument("--iterations", type=int, default=256)
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument(
        "--noise",
        nargs="+",
        default=["default", "seeded"],
        choices=["default", "seeded"],
        help="the default noise source and/or reproducible_noise=True",
    )
    args = parser.parse_args()
    print(environment())
    try:
        import jax

        print(f"jax {jax.__version__}, device {jax.devices()[0]}")
    except ImportError:
        print("jax not installed")
    print("| N | P | q | backend | noise | ms per iteration of fit | ms per iteration in its loop | fixed ms per fit |")
    print("|---|---|---|---|---|---:|---:|---:|")
    for n_rows in args.rows:
        model = logistic_regression(n_rows, args.features)
        for backend in args.backends:
            for reproducible in [mode == "seeded" for mode in args.noise]:
                whole, loop = per_iteration(model, backend, args.rate, args.iterations, reproducible)
                fixed = (whole - loop) * args.iterations
                noise = "seeded" if reproducible else ("PCG64 (OS seed)" if backend == "default" else "os.urandom")
                print(
                    f"| {n_rows} | {args.features + 1} | {args.rate:g} | {backend} | {noise} | {1e3 * whole:.3f} | "
                    f"{1e3 * loop:.3f} | {1e3 * fixed:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
