"""How the noise-aware regression likelihoods are compiled for NUTS: JAX where it is installed.

The noise-aware linear- and logistic-regression likelihoods
(:mod:`pymc_dp.exponential_family.noise_aware`) are a few hundred operations on vectors and
matrices of at most a few dozen entries (the moments of one row's statistic, Gauss–Hermite
quadrature over the linear predictor, a small Gaussian density). PyTensor's default C backend
runs each operation as its own call, so one gradient costs the sum of ~850 call overheads
(measured 1.1 ms at N = 2,000 on an idle 2-core machine, ~10 ms when it is loaded;
``benchmarks/release_speed.py``), while the raw-rows model's gradient is one pass over the
rows. Compiled by PyTensor's JAX backend the same graph becomes one XLA program: one call, no
per-operation overhead. The function computed is the same (float64; JAX's 64-bit mode is what
PyTensor sets for float64), so the posterior is the same in distribution.

Neighbouring relation: none — this module only chooses how a likelihood built from a release
(post-processing, no ε) is compiled; it reads no data.
"""

from __future__ import annotations

import importlib.util
from typing import Any

__all__ = ["FAST_COMPILE_MODE", "jax_available", "noise_aware_sample_kwargs"]

#: The PyTensor mode the noise-aware regression likelihoods are compiled with when JAX is installed.
FAST_COMPILE_MODE = "JAX"


def jax_available() -> bool:
    """Whether JAX can be imported (the optional ``pymc-dp[jax]`` extra), without importing it."""
    return importlib.util.find_spec("jax") is not None


def noise_aware_sample_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``pm.sample`` keyword arguments for a model with a noise-aware regression likelihood.

    Two defaults, each only where the caller chose nothing:

    - ``init="adapt_diag"`` (no step method given): the covariate moments are pinned down by
      the release to about 1/√N of their scale, and they start there (read from the release);
      PyMC's default ±1 jitter would start them many posterior sds out, where the first
      trajectories diverge.
    - ``compile_kwargs={"mode": "JAX"}`` when JAX is installed and neither a step method,
      ``compile_kwargs`` nor an external ``nuts_sampler`` is given (each compiles the model its
      own way); parallel chains then start with the ``"forkserver"`` context unless ``mp_ctx``
      is given, since forking a process in which JAX runs its threads can deadlock.

    Returns a copy; ``kwargs`` is not changed.
    """
    out = dict(kwargs)
    if "step" in out:
        return out
    out.setdefault("init", "adapt_diag")
    if jax_available() and "compile_kwargs" not in out and out.get("nuts_sampler", "pymc") == "pymc":
        out["compile_kwargs"] = {"mode": FAST_COMPILE_MODE}
        out.setdefault("mp_ctx", "forkserver")
    return out
