"""Shared models for the sampler tests.

The models are built once per session: on PyMC 6 every compiled function is JIT-compiled by
Numba on first use, so reusing models keeps the suite fast.
"""

import os
from dataclasses import dataclass
from pathlib import Path

# JAX's persistent compilation cache, for the JAX-backend tests: identical XLA programs (the same kernels built
# by many tests, by both xdist workers and by later runs) are compiled once and read back from disk. Set before
# anything imports JAX (JAX reads these at import); the caller's own settings win.
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR",
    str(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pymc-dp-tests" / "jax"),
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import numpy as np
import pymc as pm
import pytensor
import pytest
from threadpoolctl import threadpool_limits  # a PyMC dependency

# PyTensor's C modules (PyMC 5, the Python 3.11 line) compiled at gcc's -O0 instead of -O3, in the test
# processes only: with an empty compile cache, as in CI, compiling was about half of that line's time, and gcc
# compiles faster without optimising (issue 38; from empty caches on Python 3.11, CPU seconds, user + sys with
# gcc: test_penalty.py and test_sampling.py 71.1 -> 63.0, the release-once coverage test 37.8 -> 29.7, a script
# compiling three models' logp and gradients 38.6 -> 32.2; on a loaded machine, so about +-10 % each). The C code
# PyTensor generates is the same, so every graph computes the same values (to rounding: -O3 may fuse a multiply
# and an add); what a test checks is unchanged, and reproducible-noise reruns compare like with like. The flag is
# part of PyTensor's compile-cache key, so these modules never replace a user's -O3 ones in a shared cache.
# Subprocesses a test starts compile as a user's would. A caller's own -O flag in gcc__cxxflags wins.
if "-O" not in pytensor.config.gcc__cxxflags:
    pytensor.config.gcc__cxxflags = f"{pytensor.config.gcc__cxxflags} -O0".strip()


@pytest.fixture(autouse=True, scope="session")
def one_blas_thread_per_process():
    """One BLAS/LAPACK (and OpenMP) thread in every test process: the suite's workers already fill the cores.

    The default test command runs one pytest worker per core, and OpenBLAS starts one thread per core in
    each, so every LAPACK call on a tiny matrix hands work to threads that wait for a busy core (measured
    on the 2-core machine: 10 ms → 0.53 ms of CPU per gradient of the noise-aware categorical likelihood,
    ``SolveTriangular.perform`` 2.8 → 0.02 ms a call). A run-time setting that no
    assertion reads: both sides of every comparison run under it. Subprocesses a test starts run with
    the library defaults, as a user's would.
    """
    with threadpool_limits(limits=1):
        yield


@dataclass
class ConjugateNormal:
    """y_i ~ N(m, 1), m ~ N(0, prior_sd²): the posterior of m is Gaussian in closed form."""

    model: pm.Model
    y: np.ndarray
    prior_sd: float

    def posterior(self, temperature: float = 1.0) -> tuple[float, float]:
        precision = 1 / self.prior_sd**2 + temperature * self.y.size
        return temperature * self.y.sum() / precision, 1 / np.sqrt(precision)


@pytest.fixture(scope="session")
def conjugate_normal() -> ConjugateNormal:
    y = np.random.default_rng(7).normal(0.5, 1.0, size=200)
    with pm.Model() as model:
        m = pm.Normal("m", 0, 10)
        pm.Normal("y", m, 1.0, observed=y)
    return ConjugateNormal(model, y, 10.0)


@pytest.fixture(scope="session")
def regression():
    """A small linear regression with a positive parameter, pm.Data rows and two deterministics."""
    rng = np.random.default_rng(11)
    n = 150
    x = rng.normal(size=n)
    y = 1.0 + 2.0 * x + rng.normal(0, 0.5, size=n)
    with pm.Model(coords={"obs": range(n)}) as model:
        xd = pm.Data("x", x, dims="obs")
        yd = pm.Data("y_obs", y, dims="obs")
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5)
        s = pm.HalfNormal("s", 2)
        y_rv = pm.Normal("y", a + b * xd, s, observed=yd, dims="obs")
        pm.Deterministic("fitted_mean", (a + b * xd).mean())  # reads data: must never be released
        pm.Deterministic("first_residual", y_rv[0] - a)  # reads the observed variable
        pm.Deterministic("shifted_x", xd[:3] + 1.0)  # transformed data
        pm.Deterministic("slope_ratio", b / s)  # data-free: kept
    return model, x, y


#: Test files in decreasing order of their measured cost (issue 38: each file's summed ``--durations=0`` in a run of the
#: default command on Python 3.12 from empty compile caches, 2026-11-29; the files below about 1 % of the total are
#: left to xdist's order). The default
#: command sends whole files to two workers (``--dist loadfile``) in the order collected here
#: (``--no-loadscope-reorder``): the costliest first, so that the files left at the end, which decide how long one
#: worker waits for the other, are short. xdist's own order (most tests first) put test_readme.py (3 tests, about 35 s)
#: and test_utility_benchmark.py (1 test, about 20 s) near the end. Order only: a stale or missing entry costs balance,
#: never a check. Files not listed follow, the ones with more tests first (xdist's own rule).
COSTLIEST_FILES_FIRST = (
    "test_jax_backend.py",
    "test_data.py",
    "test_noise_aware.py",
    "test_gradient_mode.py",
    "test_audit.py",
    "test_dpadvi.py",
    "test_release_once.py",
    "test_contract.py",
    "test_row_gradient.py",
    "test_one_call.py",
    "test_dask_backend.py",
    "test_centred.py",
    "test_results.py",
    "test_sampling.py",
    "test_hmc.py",
    "test_barker.py",
    "test_count_release.py",
    "test_dask_dpadvi_rows.py",
    "test_dask_sampler_rows.py",
    "test_one_call_linear.py",
    "test_clipped_grad_sum.py",
    "test_row_independence.py",
    "test_one_call_centred.py",
    "test_clip_bound.py",
    "test_result_integrity.py",
    "test_readme.py",
    "test_noise.py",
    "test_boundary.py",
    "test_release_once_linear.py",
    "test_centred_dense_mass.py",
    "test_diagnostics.py",
    "test_planning.py",
    "test_exponential_family.py",
    "test_dpadvi_clipping_check.py",
    "test_privacy_holes_rows.py",
    "test_grouped_release.py",
    "test_utility_benchmark.py",
)


def pytest_collection_modifyitems(session, config, items):
    """Order the collected tests file by file, the costliest files first (``COSTLIEST_FILES_FIRST``).

    Each file's tests keep their order and stay together (module-scoped fixtures are built once).
    """
    rank = {name: i for i, name in enumerate(COSTLIEST_FILES_FIRST)}
    first_index, count = {}, {}
    for i, item in enumerate(items):
        path = item.path
        first_index.setdefault(path, i)
        count[path] = count.get(path, 0) + 1

    def file_key(item):
        path = item.path
        return (rank.get(path.name, len(rank)), -count[path], first_index[path])

    items.sort(key=file_key)  # stable: the order within a file is kept
