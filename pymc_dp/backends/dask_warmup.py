"""A data-free warm-up of the Dask workers, before a run or a fit is charged.

Without it, a worker first imports the modules of its tasks, unpickles the shipped per-row
graph and compiles it at the first release, inside the charge: a worker with another pymc-dp or
PyMC version, or without a dependency, then fails after ε was spent. That failure depends on
the environment, not on the data, but the privacy contract promises that a run that cannot run
is refused before it is charged (rule 2). So before the charge every partition's worker runs
:func:`warm_up_partition` (sent by :meth:`pymc_dp.backends.dask_cluster.ClusterRows.warm_up`): it
imports the modules the run's tasks live in, unpickles and compiles each shipped graph the run
will use, and evaluates it once on a public dummy, one row of zeros with the partition's dtypes
and trailing shapes at θ = 0; no row of the data is read.
A worker that cannot is refused with :class:`pymc_dp.backends.dask.DaskBackendError`, naming the
exception's type only, and nothing is charged.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["WORKER_MODULES", "warm_up_partition", "warm_up_refusal"]

#: The modules whose functions the workers run: imported by every warm-up.
WORKER_MODULES = ("pymc_dp.backends.dask", "pymc_dp.backends.dask_cluster")


def _dummy_rows(partition: Sequence[np.ndarray]) -> list[np.ndarray]:
    """One row of zeros per row array, with its dtype and trailing shape: metadata only, no value of a row."""
    return [np.zeros((1, *np.shape(a)[1:]), dtype=np.asarray(a).dtype) for a in partition]


def warm_up_partition(
    compile_function: Callable[..., Any],
    modules: Sequence[str],
    specs: Sequence[tuple],
    params: Sequence[list],
    n_params: int,
    partition: Sequence[np.ndarray],
) -> None:
    """Import ``modules``, compile every shipped graph of ``specs`` and evaluate it once on a dummy row (worker side).

    ``compile_function(*spec)`` compiles (and caches, for the run's releases) a shipped graph:
    :func:`pymc_dp.backends.dask_cluster._worker_function`. Returns None; any failure raises (and
    :func:`pymc_dp.backends.dask_cluster._run_task` passes on its type only). The dummy is one row of
    zeros (:func:`_dummy_rows`) at θ = 0 with the current values of the parameters held fixed
    (``params``, as every release sends them): the outcome does not depend on any row of
    ``partition``, of which only the dtypes and shapes are read.
    """
    for name in (*WORKER_MODULES, *modules):
        importlib.import_module(name)
    dummy = _dummy_rows(partition)
    theta = np.zeros(n_params)
    for spec, values in zip(specs, params, strict=True):
        fn = compile_function(*spec)
        np.asarray(fn(theta, *values, *dummy))  # raises here, before the charge, if this worker cannot run it


def warm_up_refusal(cause: str) -> str:
    """The message of a refused warm-up; ``cause`` names an exception's type only (never a remote message)."""
    return (
        "`backend`'s workers must run this model's per-row functions. Found a worker that could not import "
        "pymc-dp's worker modules or compile and evaluate the shipped graph on a dummy row of zeros "
        f"({cause}). Check that the workers have the client's pymc-dp, PyMC and PyTensor versions and "
        "dependencies. Refused before anything was charged (no row was read)."
    )
