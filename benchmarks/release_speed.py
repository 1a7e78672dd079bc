"""Speed of the released-statistics route against NUTS on the raw rows (issue 34, deliverable 5).

Run: ``python benchmarks/release_speed.py [--rows 100000] [--anchors 2] [--modes default,JAX] [--repeats 1]``.

The quick start's survey (``examples/quickstart.py``: logistic regression, two standardised
covariates, ε = 4, δ = 0.1/N, Gaussian mechanism), released once with a fixed seed. For each
PyTensor compile mode it times, on this machine, in this process:

- compiling the model's joint log density and gradient, and one gradient evaluation;
- the whole ``ReleasedStatistics.sample`` call and PyMC's own ``sampling_time`` (NUTS alone);
- the NUTS tree depth and step size (a badly scaled posterior shows as deep trees);
- the posterior means and sds of β (the route's statistics must not depend on the mode);

and plain NUTS on the raw rows (same priors, draws, chains) for the ratio. The machine's load
average is printed with every run: the numbers are only comparable within one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
from pymc.blocking import DictToArrayBijection

import pymc_dp as pmdp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from quickstart import COVARIATE_BOUND, build_model, make_survey


def released_model(release) -> pm.Model:
    with pm.Model(coords={"covariate": ["age", "bmi"]}) as model:
        intercept = pm.Normal("intercept", 0, 2)
        slopes = pm.Normal("slopes", 0, 2, dims="covariate")
        beta = pm.math.concatenate([intercept[None], slopes])
        settings = {} if release.covariate_anchors else {"covariates": "gaussian"}
        release.likelihood("hypertension", beta=beta, **settings)
    return model


def gradient_timing(model: pm.Model, mode: str | None, repeats: int = 200) -> tuple[float, float]:
    """(seconds to compile and first call, microseconds per later call) of the joint log density and gradient."""
    start = time.perf_counter()
    function = model.logp_dlogp_function(ravel_inputs=True, mode=mode)
    function.set_extra_values({})
    point = model.initial_point()
    x0 = DictToArrayBijection.map({v.name: point[v.name] for v in model.value_vars}).data
    function(x0)
    compiled = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(repeats):
        function(x0)
    return compiled, (time.perf_counter() - start) / repeats * 1e6


class DrawClock:
    """A ``pm.sample`` callback: seconds from the first to the last draw (the NUTS loop, compilation excluded).

    ``pymc_dp`` drops PyMC's ``sampling_time`` from its results (wall time can depend on the data).
    """

    def __init__(self) -> None:
        self.first = self.last = None
        self.depths, self.steps, self.sizes = [], [], []

    def __call__(self, trace, draw) -> None:
        now = time.perf_counter()
        self.first = now if self.first is None else self.first
        self.last = now
        stats = draw.stats[0] if draw.stats else {}
        if not draw.tuning and "depth" in stats:
            self.depths.append(stats["depth"])
            self.steps.append(stats["step_size"])
            self.sizes.append(stats["tree_size"])

    def trees(self) -> str:
        if not self.depths:
            return "tree depth n/a"
        return (
            f"tree depth {np.mean(self.depths):.2f} (max {max(self.depths)}), "
            f"gradients {int(np.sum(self.sizes))}, step {np.mean(self.steps):.3f}"
        )

    def seconds(self) -> str:
        return "n/a" if self.first is None else f"{self.last - self.first:.1f} s"


def summary(idata) -> str:
    parts = []
    for name in ("intercept", "slopes"):
        draws = idata.posterior[name].values.reshape(
            idata.posterior[name].shape[0] * idata.posterior[name].shape[1], -1
        )
        parts += [f"{m:.4f}±{s:.4f}" for m, s in zip(draws.mean(0), draws.std(0), strict=True)]
    return " ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--anchors", type=int, default=2)
    parser.add_argument("--modes", default="default,JAX")
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--tune", type=int, default=300)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--skip-raw", action="store_true")
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)
    x, y = make_survey(args.rows, 2026)
    design = np.column_stack([np.ones(args.rows), x])
    bound = COVARIATE_BOUND
    release = pmdp.release_statistics(
        "logistic_regression",
        (design, y),
        epsilon=4.0,
        delta=0.1 / args.rows,
        mechanism="gaussian",
        random_seed=11,
        covariate_anchors=args.anchors,
        n_features=3,
        x_bounds=([1.0, -bound, -bound], [1.0, bound, bound]),
    )
    sampling = {"draws": args.draws, "tune": args.tune, "chains": args.chains, "progressbar": False}
    print(f"rows {args.rows}, anchors {args.anchors}, {args.chains} chains x ({args.tune}+{args.draws})")
    for repeat in range(args.repeats):
        if not args.skip_raw:
            start = time.perf_counter()
            with build_model(x, y):
                clock = DrawClock()
                raw = pm.sample(random_seed=repeat, callback=clock, **sampling)
            print(
                f"[{repeat}] raw rows NUTS: whole {time.perf_counter() - start:.1f} s, "
                f"NUTS {clock.seconds()}, {clock.trees()}, load {os.getloadavg()[0]:.1f}; {summary(raw)}"
            )
        for mode in args.modes.split(","):
            compile_mode = None if mode == "default" else mode
            model = released_model(release)
            compiled, per_call = gradient_timing(model, compile_mode)
            start = time.perf_counter()
            clock = DrawClock()
            kwargs = dict(sampling, random_seed=repeat, model=model, callback=clock)
            # Given explicitly: without compile_kwargs the route picks JAX itself where it is installed.
            kwargs["compile_kwargs"] = {} if compile_mode is None else {"mode": compile_mode}
            idata = release.sample(**kwargs)
            whole = time.perf_counter() - start
            print(
                f"[{repeat}] release {mode}: compile {compiled:.1f} s, gradient {per_call:.0f} us, "
                f"whole {whole:.1f} s, NUTS {clock.seconds()}, {clock.trees()}, "
                f"load {os.getloadavg()[0]:.1f}; {summary(idata)}"
            )


if __name__ == "__main__":
    main()
