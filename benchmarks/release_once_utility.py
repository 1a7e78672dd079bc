"""Utility of the release-once route (pymc_dp.release_once) against NUTS on the raw rows (issue 34, deliverable 4).

Simulated logistic regression (intercept + 5 covariates, N = 10⁴ and 10⁵) and Poisson
regression (intercept + 3 covariates, N = 10⁴ and 10⁵), covariates standard normal clipped to
[−3, 3] (public bounds). For each data set: NUTS on the raw rows (2 chains × 1000 draws), then
``REPEATS`` release-once runs at ε = 1, δ = 1e-6 (independent release noise), and per
coefficient: |mean − NUTS mean| in NUTS sds, sd / NUTS sd, and whether NUTS's mean and the true
value lie in the 90 % interval. The clip bounds are fixed public numbers per model (below), and
the share of rows they clip at the NUTS mean is printed (non-private, for the reader).

At N = 10⁵ NUTS on the raw rows takes about half an hour on a loaded 2-core machine, so
``--laplace`` replaces it by the exact (non-private) Laplace approximation at the MAP (BFGS on
the model's log posterior, Hessian by central differences of its gradient), labelled as such in
the output; at N = 10⁴ the script prints how far that Laplace reference is from NUTS.

Run: ``python benchmarks/release_once_utility.py [--quick] [--large] [--laplace]``
(``--quick``: N = 10⁴ only; ``--large``: N = 10⁵ only).
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np
import pymc as pm

from pymc_dp.release_once import release_once

REPEATS = 5
EPSILON, DELTA = 1.0, 1e-6
#: Public clip bounds (score L2 norm, Hessian Frobenius norm) per model, unconstrained scale.
CLIPS = {"logistic": (3.0, 2.0), "poisson": (10.0, 30.0)}


def simulate(kind: str, n: int, seed: int):
    rng = np.random.default_rng(seed)
    p = 5 if kind == "logistic" else 3
    x = np.clip(rng.normal(size=(n, p)), -3, 3)
    if kind == "logistic":
        truth = np.array([-0.5, 1.0, -0.8, 0.5, 0.3, 0.0])
        y = rng.binomial(1, 1 / (1 + np.exp(-(truth[0] + x @ truth[1:]))))
    else:
        truth = np.array([1.0, 0.3, -0.2, 0.1])
        y = rng.poisson(np.exp(truth[0] + x @ truth[1:]))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 2.5, shape=p)
        eta = a + pm.math.dot(x, b)
        if kind == "logistic":
            pm.Bernoulli("y", logit_p=eta, observed=y)
        else:
            pm.Poisson("y", mu=pm.math.exp(eta), observed=y)
    return model, truth, x, y


def clipped_share(kind: str, x, y, theta, clips) -> tuple[float, float]:
    """Shares of rows whose score / Hessian exceed the clip bounds at θ (non-private; for the reader)."""
    design = np.column_stack([np.ones(len(x)), x])
    eta = design @ theta
    if kind == "logistic":
        p = 1 / (1 + np.exp(-eta))
        resid, weight = y - p, p * (1 - p)
    else:
        mu = np.exp(eta)
        resid, weight = y - mu, mu
    norms2 = np.sum(design**2, axis=1)
    score = np.abs(resid) * np.sqrt(norms2)
    hess = weight * norms2
    return float(np.mean(score > clips[0])), float(np.mean(hess > clips[1]))


def exact_laplace(model):
    """(mode, sds) of the exact Laplace approximation on the unconstrained scale (non-private reference)."""
    from scipy import optimize

    logp, dlogp = model.compile_logp(), model.compile_dlogp()
    start = model.initial_point()
    names = [v.name for v in model.value_vars]
    sizes = [np.asarray(start[n]).size for n in names]

    def point(theta):
        parts = np.split(theta, np.cumsum(sizes)[:-1])
        return {n: p.reshape(np.shape(start[n])) for n, p in zip(names, parts, strict=True)}

    theta0 = np.concatenate([np.asarray(start[n], float).ravel() for n in names])
    found = optimize.minimize(
        lambda t: -logp(point(t)), theta0, jac=lambda t: -dlogp(point(t)), method="BFGS", options={"gtol": 1e-8}
    )
    mode, p = found.x, theta0.size

    def hessian_at(theta):
        hessian = np.empty((p, p))
        for j in range(p):
            h = 1e-5 * max(1.0, abs(theta[j]))
            e = np.zeros(p)
            e[j] = h
            hessian[:, j] = (dlogp(point(theta + e)) - dlogp(point(theta - e))) / (2 * h)
        return 0.5 * (hessian + hessian.T)

    for _ in range(5):  # BFGS stops short on a log posterior of order N; exact Newton steps polish the mode
        mode = mode - np.linalg.solve(hessian_at(mode), dlogp(point(mode)))
    return mode, np.sqrt(np.diag(np.linalg.inv(-hessian_at(mode))))


def stacked(idata):
    post = idata.posterior
    return np.column_stack([post["a"].values.reshape(-1), post["b"].values.reshape(-1, post["b"].shape[-1])])


def main(sizes: list[int], reference: str) -> None:
    settings = [(kind, n) for n in sizes for kind in ("logistic", "poisson")]
    for kind, n in settings:
        model, truth, x, y = simulate(kind, n, seed=n + len(kind))
        start = time.perf_counter()
        laplace_mean, laplace_sd = exact_laplace(model)
        if reference == "nuts":
            with model, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                nuts = pm.sample(1000, tune=1000, chains=2, cores=1, random_seed=1, progressbar=False)
            ref = stacked(nuts)
            ref_mean, ref_sd = ref.mean(axis=0), ref.std(axis=0)
            gap = np.abs(laplace_mean - ref_mean) / ref_sd
            print(
                f"  [{kind} N={n}] exact Laplace vs NUTS: mean gap {gap.mean():.3f} sds (max {gap.max():.3f}), "
                f"sd ratio {np.median(laplace_sd / ref_sd):.3f}",
                flush=True,
            )
        else:
            ref_mean, ref_sd = laplace_mean, laplace_sd
        ref_time = time.perf_counter() - start
        share = clipped_share(kind, x, y, ref_mean, CLIPS[kind])
        errors, ratios, cover_ref, cover_truth, times = [], [], [], [], []
        for r in range(REPEATS):
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                idata = release_once(
                    model,
                    epsilon=EPSILON,
                    delta=DELTA,
                    grad_clip=CLIPS[kind][0],
                    hessian_clip=CLIPS[kind][1],
                    draws=2000,
                    random_seed=r,
                )
            times.append(time.perf_counter() - start)
            draws = stacked(idata)
            mean, sd = draws.mean(axis=0), draws.std(axis=0)
            lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
            errors.append(np.abs(mean - ref_mean) / ref_sd)
            ratios.append(sd / ref_sd)
            cover_ref.append((lo <= ref_mean) & (ref_mean <= hi))
            cover_truth.append((lo <= truth) & (truth <= hi))
        errors, ratios = np.array(errors), np.array(ratios)
        label = "NUTS" if reference == "nuts" else "exact-Laplace"
        print(
            f"{kind:8s} N={n:>6d} P={truth.size} eps={EPSILON:g} vs {label}: "
            f"mean error {errors.mean():.2f} sds (max {errors.max():.2f}), "
            f"sd ratio {np.median(ratios):.2f} (range {ratios.min():.2f}-{ratios.max():.2f}), "
            f"90% interval covers the {label} mean {np.mean(cover_ref):.2f}, truth {np.mean(cover_truth):.2f} "
            f"[{REPEATS} runs x {truth.size} coefs]; clipped rows at the reference mean: score {share[0]:.3f}, "
            f"Hessian {share[1]:.3f}; release_once {np.median(times):.1f} s/run, reference {ref_time:.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if "--quick" in arguments:
        chosen = [10_000]
    elif "--large" in arguments:
        chosen = [100_000]
    else:
        chosen = [10_000, 100_000]
    main(chosen, "laplace" if "--laplace" in arguments else "nuts")
