"""DPHMC per iteration on the JAX backend: the whole transition in one device call vs one call per release.

Run: ``python benchmarks/bench_jax_transition.py [--rows 1000000 10000000] [--features 20] [--leapfrog 10]
[--iterations 200] [--hmc-rows 1000000] [--skip NAME ...]``. Logistic regression with P = features + 1 parameters
(``_common.logistic_regression``), DPHMC and ``pm.HamiltonianMC`` matched as in
``bench_jax_backend.py`` (same L, η, unit mass; the DP step's noise set by hand, no tuning).
For each N it reports, in milliseconds per iteration, with the data already on the device and
compilation excluded (a warm-up run first), each ``pm.sample`` row per iteration of the whole call
and inside its loop (``pm.sample``'s callback time stamps from the end of the first block to the
last iteration: without the call's fixed costs):

- ``pm.sample`` with ``JaxBackend(scan_iterations=K)`` (``--scan-iterations``, default 64: K
  iterations, accept/reject included, in one ``lax.scan`` per device call);
- ``pm.sample`` with ``JaxBackend(scan_iterations=1)`` (``whole_transition=True``: one device call per iteration);
- ``pm.sample`` with ``JaxBackend(whole_transition=False)`` (L + 2 device calls per iteration);
- the transition alone, ``step.transition`` called in a loop (no ``pm.sample`` bookkeeping);
- DPPenaltyMH and full-data DPBarkerMH (random walk of scale 0.5/√N, no tuning) with
  ``scan_iterations=K`` and with one call per iteration (``scan_iterations=1``);
- DPPenaltyMH and DPHMC through ``pm.sample`` with as many tuning iterations as draws (at least
  200; the scale tuned every 100 iterations, or η by dual averaging and M in windows of 100, 200,
  ...: tuning in blocks cut at each interval's or window's end), per iteration of the whole run,
  with ``scan_iterations=K`` and with one call per iteration;
- ``pm.HamiltonianMC`` on the host's CPU, for N up to ``--hmc-rows``, and each DP figure as a
  multiple of it;
- the memory-bandwidth floor: each of the L + 2 releases must read X once
  (N × features × 8 bytes in float64), divided by the device's bandwidth measured here with a
  jitted read-and-write of a 2 GiB array; and each figure as a multiple of that floor.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pymc as pm
from _common import environment, logistic_regression, matched_hmc_steps, seconds_per_iteration

import pymc_dp as pmdp
from pymc_dp.backends.jax import attach_backend
from pymc_dp.backends.jax_rows import import_jax


def device_bandwidth(jax) -> float:
    """Bytes per second of a jitted x ↦ 1.000001·x on 2 GiB of float64 (bytes read plus written)."""
    import jax.numpy as jnp

    x = jnp.ones(2**28, dtype=jnp.float64)
    scale = jax.jit(lambda v: v * 1.000001)
    scale(x).block_until_ready()
    start = time.perf_counter()
    for _ in range(10):
        x = scale(x)
    x.block_until_ready()
    return 2 * x.nbytes * 10 / (time.perf_counter() - start)


#: ``pm.sample``'s settings for every timed call here: one chain, no progress bar, no convergence checks.
ONE_CHAIN = dict(chains=1, cores=1, random_seed=3, progressbar=False, compute_convergence_checks=False)


def _timed_sample(model, step, draws: int, tune: int, skip: int) -> tuple[float, float]:
    """Seconds per iteration of one ``pm.sample`` call, whole and inside its loop.

    Inside the loop: ``pm.sample``'s callback time stamps, from the end of the first ``skip``
    iterations (a whole first block) to the last iteration, so PyMC's fixed costs per call (its
    setup, the trace, the InferenceData) are left out.
    """
    stamps: list[float] = []
    with model:
        start = time.perf_counter()
        stamp = lambda **_: stamps.append(time.perf_counter())  # noqa: E731  (pm.sample's callback, every iteration)
        pm.sample(step=step, draws=draws, tune=tune, callback=stamp, **ONE_CHAIN)
    whole = (time.perf_counter() - start) / (draws + tune)
    if len(stamps) < 2 * skip:
        raise ValueError(f"`--iterations` must be at least {2 * skip} to time the loop. Found {draws}.")
    return whole, (stamps[-1] - stamps[skip - 1]) / (len(stamps) - skip)


def _sampled(model, step, iterations: int, backend) -> tuple[float, float]:
    """Per iteration of ``pm.sample`` drawing ``iterations`` (whole call, in its loop), after a warm-up call."""
    detach = attach_backend(backend, [step])
    try:
        with model:
            pm.sample(step=step, draws=5, tune=0, **ONE_CHAIN)  # warm-up (compilation caches)
        return _timed_sample(model, step, iterations, 0, min(backend.scan_iterations, iterations // 2))
    finally:
        detach()


def _sampled_with_tuning(model, make_step, iterations: int, backend) -> tuple[float, float]:
    """Per iteration of ``pm.sample`` with ``make_step()`` tuning ``iterations`` then drawing ``iterations``.

    ``pmdp.sample`` tells the step how long the run is (PyMC 6 does it itself); here
    ``planned_tune`` and ``planned_draws`` are set by hand so that ``pm.sample``'s loop alone is
    timed (``pmdp.sample`` adds its accounting and diagnostics once per run).
    """
    with model:
        step = make_step()
    detach = attach_backend(backend, [step])
    try:
        with model:
            step.planned_tune, step.planned_draws = 5, 5
            pm.sample(step=step, draws=5, tune=5, **ONE_CHAIN)  # warm-up (compilation caches)
        step.planned_tune, step.planned_draws = iterations, iterations
        return _timed_sample(model, step, iterations, iterations, min(backend.scan_iterations, iterations))
    finally:
        detach()


def _transition_only(model, step, iterations: int, backend) -> float:
    """Seconds per ``step.transition`` call (after a pm.sample warm-up that sets the chain's state)."""
    detach = attach_backend(backend, [step])
    try:
        with model:
            pm.sample(step=step, draws=3, tune=0, **ONE_CHAIN)
        theta = np.array(step._prior.initial_theta)
        step.transition(theta)
        start = time.perf_counter()
        for _ in range(iterations):
            theta, _ = step.transition(theta)
        return (time.perf_counter() - start) / iterations, None
    finally:
        detach()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--leapfrog", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--hmc-rows", type=int, default=1_000_000, help="largest N at which pm.HamiltonianMC runs")
    parser.add_argument("--chunk-rows", type=int, default=None, help="JaxBackend(chunk_rows=...); 0: all rows in one")
    parser.add_argument("--scan-iterations", type=int, default=64, help="K of the scan row")
    parser.add_argument(
        "--skip", nargs="*", default=[], help="leave out the rows whose name contains any of these (e.g. 'per release')"
    )
    args = parser.parse_args()

    def wanted(name: str) -> bool:
        return not any(part in name for part in args.skip)

    jax = import_jax()
    jax.config.update("jax_enable_x64", True)
    device = jax.devices()[0]
    bandwidth = device_bandwidth(jax)
    print(environment(), f"| jax {jax.__version__} on {device.platform} ({device.device_kind})")
    print(f"measured bandwidth: {bandwidth / 1e9:.0f} GB/s (read + write)")
    n_params = args.features + 1
    for n_rows in args.rows:
        model = logistic_regression(n_rows, args.features)
        with model:
            hmc, dp_hmc = matched_hmc_steps(n_params, n_rows, args.leapfrog)
        floor = (args.leapfrog + 2) * n_rows * args.features * 8 / bandwidth
        chunk = None if args.chunk_rows is None else (args.chunk_rows or n_rows)
        scan, whole, per_release = (
            pmdp.JaxBackend(chunk_rows=chunk, scan_iterations=args.scan_iterations),
            pmdp.JaxBackend(chunk_rows=chunk, scan_iterations=1),
            pmdp.JaxBackend(chunk_rows=chunk, whole_transition=False),
        )
        # (name, function, arguments): each run only if not skipped
        runs = [
            (f"DPHMC jax, scan of {args.scan_iterations}", _sampled, (model, dp_hmc, args.iterations, scan)),
            ("DPHMC jax, whole transition", _sampled, (model, dp_hmc, args.iterations, whole)),
            ("DPHMC jax, per release", _sampled, (model, dp_hmc, max(args.iterations // 4, 5), per_release)),
            ("DPHMC jax, transition only", _transition_only, (model, dp_hmc, args.iterations, whole)),
        ]
        with model:
            penalty = pmdp.DPPenaltyMH(
                proposal_scale=0.5 / np.sqrt(n_rows), llr_clip=3.0, noise_multiplier=50.0, tune=False
            )
            barker = pmdp.DPBarkerMH(full_data=True, proposal_scale=0.5 / np.sqrt(n_rows), llr_clip=0.01, tune=False)
        runs += [
            (f"DPPenaltyMH jax, scan of {args.scan_iterations}", _sampled, (model, penalty, args.iterations, scan)),
            ("DPPenaltyMH jax, one call / iteration", _sampled, (model, penalty, args.iterations, whole)),
        ]
        tuned = max(args.iterations, 200)

        def tuned_penalty(n_rows=n_rows):
            return pmdp.DPPenaltyMH(proposal_scale=0.5 / np.sqrt(n_rows), llr_clip=3.0, noise_multiplier=50.0)

        def tuned_hmc(n_rows=n_rows):
            return pmdp.DPHMC(
                step_size=0.5 / np.sqrt(n_rows),
                n_leapfrog=args.leapfrog,
                grad_clip=3.0,
                llr_clip=3.0,
                grad_noise_multiplier=50.0,
                llr_noise_multiplier=50.0,
            )

        for name, make_step in (("DPPenaltyMH", tuned_penalty), ("DPHMC", tuned_hmc)):
            runs += [
                (
                    f"{name} tuned, scan of {args.scan_iterations}",
                    _sampled_with_tuning,
                    (model, make_step, tuned, scan),
                ),
                (f"{name} tuned, one call / iteration", _sampled_with_tuning, (model, make_step, tuned, whole)),
            ]
        runs += [
            (f"DPBarkerMH jax, scan of {args.scan_iterations}", _sampled, (model, barker, args.iterations, scan)),
            ("DPBarkerMH jax, one call / iteration", _sampled, (model, barker, args.iterations, whole)),
        ]
        print(
            f"\nN = {n_rows}, P = {n_params}, L = {args.leapfrog}, float64, chunk_rows {chunk or 'default'}; "
            f"floor {1e3 * floor:.3f} ms / iteration",
            flush=True,
        )
        base = None
        if n_rows <= args.hmc_rows and wanted("pm.HamiltonianMC (CPU)"):
            base = seconds_per_iteration(model, hmc, 5)
            runs.insert(0, ("pm.HamiltonianMC (CPU)", lambda seconds: (seconds, None), (base,)))
        for name, run, arguments in runs:  # each row printed as it is measured
            if not wanted(name):
                continue
            seconds, in_loop = run(*arguments)
            ratio = f"{seconds / base:7.3f} x pm.HamiltonianMC" if base else ""
            # DPPenaltyMH and DPBarkerMH make one release per iteration: their floor is one read of X.
            own_floor = floor / (args.leapfrog + 2) if name.startswith(("DPPenaltyMH", "DPBarkerMH")) else floor
            loop = (
                "" if in_loop is None else f"; in the loop {1e3 * in_loop:9.3f} ms ({in_loop / own_floor:5.1f} x floor)"
            )
            line = (
                f"  {name:38s} {1e3 * seconds:9.3f} ms / iteration ({seconds / own_floor:5.1f} x floor){loop}  {ratio}"
            )
            print(line, flush=True)


if __name__ == "__main__":
    main()
