"""The one-call route on a model no released-statistics family covers (issue 34, deliverable 4).

A simulated Student-t regression (ν = 4 known, intercept + 3 covariates standard normal clipped
to [−3, 3], σ = 1; P = 5 unconstrained parameters with log σ) at ε = 1, δ = 1e-6, run as a user
would: ``pmdp.sample(epsilon=1.0, delta=1e-6)`` without a step, which takes the release-once
route (``"auto"`` clip bounds: 5 % of ε on noisy medians of the rows' score and Hessian norms).
For each N, one data set, then ``REPEATS`` one-call runs (independent release noise) against a
non-private reference: NUTS on the raw rows (2 chains × 1000 draws) at N = 10⁴, and the exact
Laplace approximation at the MAP at N = 10⁵ (NUTS there takes tens of minutes on the loaded
2-core machine; at N = 10⁴ the script prints how far that Laplace reference is from NUTS). Per
parameter on the unconstrained scale (a, b, log σ): |mean − reference mean| in reference sds,
sd / reference sd, and whether the reference mean and the truth lie in the 90 % interval; also
the plan's predicted sd ratio.

Run: ``python benchmarks/release_once_one_call.py [--quick] [--large] [--repeats K]``.
"""

from __future__ import annotations

import json
import sys
import time
import warnings

import numpy as np
import pymc as pm
from release_once_utility import exact_laplace

import pymc_dp as pmdp

EPSILON, DELTA, NU = 1.0, 1e-6, 4.0
TRUTH = np.array([0.5, 1.0, -0.5, 0.25, 0.0])  # a, b (3), log σ


def simulate(n: int, seed: int):
    rng = np.random.default_rng(seed)
    x = np.clip(rng.normal(size=(n, 3)), -3, 3)
    y = TRUTH[0] + x @ TRUTH[1:4] + np.exp(TRUTH[4]) * rng.standard_t(NU, size=n)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 2.5, shape=3)
        s = pm.HalfNormal("s", 2)
        pm.StudentT("y", nu=NU, mu=a + pm.math.dot(x, b), sigma=s, observed=y)
    return model


def stacked(idata):
    post = idata.posterior
    return np.column_stack(
        [post["a"].values.reshape(-1), post["b"].values.reshape(-1, 3), np.log(post["s"].values.reshape(-1))]
    )


def main(sizes: list[int], repeats: int) -> None:
    for n in sizes:
        model = simulate(n, seed=n)
        start = time.perf_counter()
        laplace_mean, laplace_sd = exact_laplace(model)  # value variables in model order: a, b, s_log__
        if n <= 20_000:
            with model, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                nuts = pm.sample(1000, tune=1000, chains=2, cores=1, random_seed=1, progressbar=False)
            ref = stacked(nuts)
            ref_mean, ref_sd, label = ref.mean(axis=0), ref.std(axis=0), "NUTS"
            gap = np.abs(laplace_mean - ref_mean) / ref_sd
            print(
                f"  [N={n}] exact Laplace vs NUTS: mean gap {gap.mean():.3f} sds (max {gap.max():.3f}), "
                f"sd ratio {np.median(laplace_sd / ref_sd):.3f}",
                flush=True,
            )
        else:
            ref_mean, ref_sd, label = laplace_mean, laplace_sd, "exact-Laplace"
        ref_time = time.perf_counter() - start
        plan = pmdp.plan(model, epsilon=EPSILON, delta=DELTA, chains=2)
        predicted = plan.method("release_once").sd_ratio
        errors, ratios, cover_ref, cover_truth, times, routes, usable = [], [], [], [], [], set(), []
        for r in range(repeats):
            start = time.perf_counter()
            with model, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                idata = pmdp.sample(epsilon=EPSILON, delta=DELTA, draws=1000, chains=2, random_seed=r)
            times.append(time.perf_counter() - start)
            routes.add(idata.posterior.attrs["dp_route"])
            usable.append(json.loads(idata.posterior.attrs["dp_diagnostics"])["usable"])
            draws = stacked(idata)
            mean, sd = draws.mean(axis=0), draws.std(axis=0)
            lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
            errors.append(np.abs(mean - ref_mean) / ref_sd)
            ratios.append(sd / ref_sd)
            cover_ref.append((lo <= ref_mean) & (ref_mean <= hi))
            cover_truth.append((lo <= TRUTH) & (TRUTH <= hi))
        errors, ratios = np.array(errors), np.array(ratios)
        print(
            f"Student-t N={n:>6d} P=5 eps={EPSILON:g} route {sorted(routes)} vs {label}: "
            f"mean error {errors.mean():.2f} sds (max {errors.max():.2f}), "
            f"sd ratio {np.median(ratios):.2f} (range {ratios.min():.2f}-{ratios.max():.2f}; plan predicted "
            f"{predicted:.2f}), 90% interval covers the {label} mean {np.mean(cover_ref):.2f}, truth "
            f"{np.mean(cover_truth):.2f} [{repeats} runs x 5 params]; usable {sum(usable)}/{repeats}; "
            f"{np.median(times):.1f} s/run, reference {ref_time:.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    arguments = sys.argv[1:]
    chosen = [10_000] if "--quick" in arguments else [100_000] if "--large" in arguments else [10_000, 100_000]
    k = int(arguments[arguments.index("--repeats") + 1]) if "--repeats" in arguments else 5
    main(chosen, k)
