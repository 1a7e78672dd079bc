"""Shared pieces of the benchmarks: the logistic-regression model and a timer."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np
import pymc as pm


def logistic_regression(n_rows: int = 100_000, n_features: int = 10, seed: int = 0, use_data: bool = True) -> pm.Model:
    """Logistic regression: P = n_features + 1 parameters; rows in pm.Data, or numpy arrays (``use_data=False``)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, n_features))
    beta = rng.normal(size=n_features)
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-(0.3 + x @ beta)))).astype("int64")
    if not use_data:  # the way most PyMC models are written: numpy arrays in the graph
        with pm.Model() as model:
            alpha = pm.Normal("alpha", 0, 2)
            b = pm.Normal("beta", 0, 2, size=n_features)
            pm.Bernoulli("y", logit_p=alpha + x @ b, observed=y)
        return model
    coords = {"row": np.arange(n_rows), "feature": np.arange(n_features)}
    with pm.Model(coords=coords) as model:
        xd = pm.Data("x", x, dims=("row", "feature"))
        yd = pm.Data("y_obs", y, dims="row")
        alpha = pm.Normal("alpha", 0, 2)
        b = pm.Normal("beta", 0, 2, dims="feature")
        pm.Bernoulli("y", logit_p=alpha + xd @ b, observed=yd, dims="row")
    return model


def correlated_gaussian(n_rows: int = 100_000, dim: int = 10, seed: int = 0) -> pm.Model:
    """Räisä et al.'s 10-d Gaussian (DP-HMC paper, §4): x ~ N(θ, Σ), Σ = Q diag(Gamma(0.5)) Qᵀ, θ ~ N(0, 100² I).

    The model of ``examples/dp_hmc_experiments.py`` without its reference posterior; P = ``dim``.
    """
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.uniform(size=(dim, dim)))
    cov = q @ np.diag(rng.gamma(0.5, size=dim)) @ q.T
    x = rng.multivariate_normal(np.eye(dim)[1] * 3.0, cov, size=n_rows)
    with pm.Model(coords={"obs": np.arange(n_rows), "dim": np.arange(dim)}) as model:
        theta = pm.Normal("theta", 0, 100, dims="dim")
        pm.MvNormal("y", theta, cov=cov, observed=pm.Data("x", x, dims=("obs", "dim")), dims=("obs", "dim"))
    return model


def mvnormal(n_rows: int, dim: int = 20, seed: int = 0) -> pm.Model:
    """MvNormal with an unknown mean and a fixed dense covariance (P = 20)."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(dim, dim))
    cov = a @ a.T / dim + np.eye(dim)
    x = rng.multivariate_normal(np.zeros(dim), cov, size=n_rows)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5, size=dim)
        pm.MvNormal("x", mu, cov=cov, observed=x)
    return model


def negative_binomial(n_rows: int, features: int = 14, seed: int = 0) -> pm.Model:
    """Negative-binomial regression with a log link (P = features + 2 = 16)."""
    rng = np.random.default_rng(seed)
    x = 0.3 * rng.normal(size=(n_rows, features))
    y = rng.negative_binomial(5, 5 / (5 + np.exp(0.5 + x @ rng.normal(size=features) * 0.3)))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, size=features)
        alpha = pm.HalfNormal("alpha", 5)
        pm.NegativeBinomial("y", mu=pm.math.exp(a + x @ b), alpha=alpha, observed=y)
    return model


def hierarchical(n_rows: int, groups: int = 10, seed: int = 0) -> pm.Model:
    """Normal hierarchical model with a numpy group index ``theta[g]`` (P = groups + 3)."""
    rng = np.random.default_rng(seed)
    g = rng.integers(0, groups, size=n_rows)
    y = rng.normal(0.3 * g, 1.0)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfNormal("tau", 2)
        theta = pm.Normal("theta", mu, tau, size=groups)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", theta[g], sigma, observed=y)
    return model


def median_seconds(fn: Callable[[], object], repeats: int = 5, number: int = 5) -> float:
    """Median over ``repeats`` rounds of the mean time of ``number`` calls (after one warm-up call)."""
    fn()
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        rounds.append((time.perf_counter() - start) / number)
    return float(np.median(rounds))


def environment() -> str:
    import pytensor

    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    return (
        f"pymc {pm.__version__}, pytensor {pytensor.__version__}, linker {pytensor.config.linker}, "
        f"OMP_NUM_THREADS={threads}"
    )


def seconds_per_iteration(model: pm.Model, step, iterations: int) -> float:
    """Wall time per iteration of ``pm.sample`` with ``step`` (one chain, after a short warm-up run)."""
    kwargs = dict(chains=1, cores=1, random_seed=3, progressbar=False, compute_convergence_checks=False)
    with model:
        pm.sample(step=step, draws=5, tune=0, **kwargs)  # warm-up (compilation caches)
        start = time.perf_counter()
        pm.sample(step=step, draws=iterations, tune=0, **kwargs)
    return (time.perf_counter() - start) / iterations


def matched_hmc_steps(n_params: int, n_rows: int, leapfrog: int, compile_kwargs: dict | None = None) -> tuple:
    """``pm.HamiltonianMC`` and ``pmdp.DPHMC`` with the same L, step size η = 0.5/√N and unit mass.

    Built inside the model's context. The DP step clips at 3 with noise multipliers of 50 (the
    cost per iteration does not depend on them) and does not tune, so both make L leapfrog steps
    of η per iteration.
    """
    from pymc.step_methods.hmc.quadpotential import QuadPotentialDiag

    import pymc_dp as pmdp

    eta = 0.5 / np.sqrt(n_rows)
    hmc = pm.HamiltonianMC(
        path_length=eta * leapfrog * 0.999999,  # int(path/η) = L exactly
        step_scale=eta * n_params**0.25,
        adapt_step_size=False,
        step_rand=lambda s, rng=None: s,
        potential=QuadPotentialDiag(np.ones(n_params)),
    )
    dp_hmc = pmdp.DPHMC(
        step_size=eta,
        n_leapfrog=leapfrog,
        grad_clip=3.0,
        llr_clip=3.0,
        grad_noise_multiplier=50.0,
        llr_noise_multiplier=50.0,
        tune=False,
        compile_kwargs=compile_kwargs,
    )
    return hmc, dp_hmc
