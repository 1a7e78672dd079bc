"""The Dask backend's cluster side: the workers' tasks and :class:`ClusterRows`, the client's handle on the rows.

A model's rows are split into contiguous partitions and scattered once to the workers of a
:class:`distributed.Client` (:class:`ClusterRows`; the Dask arrays' own blocks:
:class:`pymc_dp.backends.dask_blocks.PartitionedClusterRows`). Every worker compiles the in-process
data layer's per-row functions (shipped as a pickled PyTensor graph that holds no row) and
returns for its partition only a clipped sum: of log-likelihood ratios, of L2-clipped gradients,
or the score norms' fixed-size histogram. The mechanisms that add the noise once, on the client,
and the backend users pass are in :mod:`pymc_dp.backends.dask`.

Neighbouring relation: that of the steps, unchanged: one row sits in one partition and changes
only its own clipped term of that partition's sum.
"""

from __future__ import annotations

import contextlib
import hashlib
import pickle
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pymc_dp.backends.dask_warmup import warm_up_partition, warm_up_refusal
from pymc_dp.data import evaluate_rowwise
from pymc_dp.mechanisms.clip_bound import norm_histogram
from pymc_dp.mechanisms.clipping import clip_values, clipped_sum_l2

__all__ = ["ClusterRows", "DaskBackendError", "WorkerError"]


class DaskBackendError(RuntimeError):
    """The Dask cluster failed during a run (a worker lost, a task failed); the remote message is withheld."""


def _import_distributed():
    try:
        import distributed
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "pymc_dp.DaskBackend needs `dask[distributed]`: install it with `pip install 'pymc-dp[dask]'`."
        ) from error
    return distributed


# -- worker side ---------------------------------------------------------------------------------
# A worker's state: compiled functions by graph token (one per thread: PyTensor's are not thread-safe) and the
# per-row log-likelihoods of the last two points per partition (a Metropolis step evaluates one new point).
_WORKER_FUNCTIONS: dict[tuple[str, int], Any] = {}
_WORKER_LOGLIK: dict[tuple[str, str], dict[bytes, np.ndarray]] = {}
_COMPILE_LOCK = threading.Lock()
_WORKER_OWNER_NOISE: dict[str, Any] = {}
#: Sent instead of a generator: the owner's worker draws its generator from its own OS entropy.
_OS_ENTROPY = "os-entropy"


def _worker_function(token: str, payload: bytes, compile_kwargs: dict[str, Any]):
    key = (token, threading.get_ident())
    fn = _WORKER_FUNCTIONS.get(key)
    if fn is None:
        from pymc.pytensorf import compile as pm_compile

        with _COMPILE_LOCK:  # PyTensor's compilation is not thread-safe within a process
            inputs, outputs = pickle.loads(payload)  # our own graph, pickled by the client
            fn = pm_compile(inputs, outputs[0], **compile_kwargs)
            fn.trust_input = True
        _WORKER_FUNCTIONS[key] = fn
    return fn


def _partition_loglik(spec, part_key: str, partition, theta: np.ndarray, params: list) -> np.ndarray:
    token, payload, compile_kwargs = spec
    key = theta.tobytes() + b"".join(np.asarray(p).tobytes() for p in params)
    cache = _WORKER_LOGLIK.setdefault((token, part_key), {})
    values = cache.get(key)
    if values is None:
        fn = _worker_function(token, payload, compile_kwargs)
        # a row whose evaluation raises is NaN (clipped to the bound), never a failed task
        values = np.asarray(evaluate_rowwise(fn, [theta, *params], partition, tail=(), summed=False), dtype=float)
        if len(cache) >= 2:  # keep the two most recent points
            cache.pop(next(iter(cache)))
        cache[key] = values
    return values


class WorkerError(RuntimeError):
    """A task failed on a worker; only the exception's type crosses the network, never its text."""


def _aligned(value):
    """Arrays as PyTensor's C code needs them (aligned, C order); a message may deliver unaligned buffers."""
    if isinstance(value, np.ndarray):
        return value if value.flags.aligned and value.flags.c_contiguous else np.require(value, requirements="AC")
    if isinstance(value, tuple | list):
        return type(value)(_aligned(v) for v in value)
    return value


def _run_task(name: str | Callable, *args):
    """Run the worker task ``name`` (or a module-level task function); a failure carries its exception's type only."""
    function = _TASKS[name] if isinstance(name, str) else name
    name = name if isinstance(name, str) else name.__name__
    failed = None
    try:
        return function(*(_aligned(a) for a in args))
    except Exception as error:
        failed = type(error).__name__
    # Raised after the handler, not inside it (``from None`` only hides the chain from the printed traceback): the
    # error pickled to the client then holds no link to the original exception, whose message may quote row values.
    raise WorkerError(f"{failed} in {name} (message withheld)")


def _ratio_partial(spec, part_key, partition, theta, theta_new, params, bound) -> float:
    """Σᵢ clip(log p(xᵢ | θ′) − log p(xᵢ | θ), ±bound) over one partition: one float."""
    current = _partition_loglik(spec, part_key, partition, theta, params)
    proposed = _partition_loglik(spec, part_key, partition, theta_new, params)
    with np.errstate(invalid="ignore"):  # −∞ − (−∞) on an invalid row: NaN, clipped to −bound
        ratios = proposed - current
    return float(np.sum(clip_values(ratios, bound)))


def _chunked(partition: Sequence[np.ndarray], chunk_rows: int):
    n = partition[0].shape[0]
    for start in range(0, n, chunk_rows):
        yield [a[start : start + chunk_rows] for a in partition]


def _gradient_partial(spec, partition, theta, params, bound, chunk_rows) -> np.ndarray:
    """Σᵢ clip_L2(∇θ log p(xᵢ | θ), bound) over one partition, in chunks: a vector of length P."""
    token, payload, compile_kwargs = spec
    fn = _worker_function(token, payload, compile_kwargs)
    total = np.zeros(theta.shape[0])
    for chunk in _chunked(partition, chunk_rows):
        total += clipped_sum_l2(evaluate_rowwise(fn, [theta, *params], chunk, tail=theta.shape, summed=False), bound)
    return total


def _histogram_partial(spec, partition, theta, params, chunk_rows) -> np.ndarray:
    """Counts of the score norms ‖∇θ log p(xᵢ | θ)‖ in the fixed bins, over one partition."""
    token, payload, compile_kwargs = spec
    fn = _worker_function(token, payload, compile_kwargs)
    counts = None
    for chunk in _chunked(partition, chunk_rows):
        grads = evaluate_rowwise(fn, [theta, *params], chunk, tail=theta.shape, summed=False)
        part = norm_histogram(np.linalg.norm(grads, axis=1))
        counts = part if counts is None else counts + part
    return counts


def _owner_release(spec, owner_key, partition, theta, theta_new, params, bound, std, rng) -> float:
    """One data owner's noisy number: its rows' clipped ratio sum plus noise from the owner's own generator.

    The generator is drawn on the worker from its OS entropy at the owner's first call (``rng`` is
    :data:`_OS_ENTROPY`), or (``reproducible_noise=True``, testing) arrives with the first call; it
    stays on the worker. Only the noisy number goes back.
    """
    if owner_key not in _WORKER_OWNER_NOISE and isinstance(rng, str) and rng == _OS_ENTROPY:
        from pymc_dp.mechanisms.noise import mechanism_rng

        rng = mechanism_rng(None, reproducible=False)  # drawn here: the client never sees its state
    rng = _WORKER_OWNER_NOISE.setdefault(owner_key, rng)
    clipped = _ratio_partial(spec, owner_key, partition, theta, theta_new, params, bound)
    return clipped + float(rng.normal(0.0, std)) if std > 0 else clipped


def _stored_partition(partition: tuple) -> tuple:
    """The partition, its arrays aligned (:func:`_run_task` copies unaligned ones): what later tasks read."""
    return partition


_TASKS: dict[str, Callable] = {
    "store": _stored_partition,
    "owner": _owner_release,
    "ratio": _ratio_partial,
    "gradient": _gradient_partial,
    "histogram": _histogram_partial,
}


def _forget_worker(token: str) -> None:
    for key in [k for k in _WORKER_FUNCTIONS if k[0] == token]:
        del _WORKER_FUNCTIONS[key]
    for key in [k for k in _WORKER_LOGLIK if k[0] == token]:
        del _WORKER_LOGLIK[key]
    for key in [k for k in _WORKER_OWNER_NOISE if k.startswith(token)]:
        del _WORKER_OWNER_NOISE[key]


# -- client side ---------------------------------------------------------------------------------
class ClusterRows:
    """One model's rows on a Dask cluster: the client's handle, which holds futures and sums only.

    Built by :meth:`DaskBackend.attach` from a checked :class:`pymc_dp.data.RowLikelihood`: the
    rows are split into ``n_partitions`` contiguous partitions, each scattered once to one worker
    (round-robin); every call sends θ (and the other parameters' values) to the workers and gets
    back one clipped sum per partition, added here in partition order. Nothing else comes back.
    """

    def __init__(self, client, rows, n_partitions: int, timeout: float | None) -> None:
        from pymc_dp.data import ModelStructureError

        if rows.subset_mode != "index":
            raise ModelStructureError(
                "`backend` needs rows that can be partitioned (subset mode 'index'). Found a log-likelihood that "
                "fixes the number of rows in a shape (subset mode 'slice', see docs/data.md); run it without a backend."
            )
        self._client = client
        self._rows = rows
        self._timeout = timeout
        self.n_rows, self.n_params = rows.n_rows, rows.n_params
        self._chunk_rows = rows.chunk_rows
        self._compile_kwargs = dict(rows._compile_kwargs)
        batch, lik_batch = rows._batch_graph()
        self._batch, self._lik_batch = batch, lik_batch
        self._loglik_spec, self._loglik_shared = self._ship([lik_batch])
        self._grad_spec, self._grad_shared = None, []
        workers = sorted(client.scheduler_info()["workers"])
        if not workers:
            raise DaskBackendError("`backend`'s client must have at least one worker. Found none.")
        n_parts = max(1, min(int(n_partitions or len(workers)), self.n_rows))
        bounds = np.linspace(0, self.n_rows, n_parts + 1).astype(np.int64)
        data = [v.get_value(borrow=True) for v in rows._row_index_vars]
        self._parts = []
        self._owners: dict[str, tuple] = {}
        for k in range(n_parts):
            piece = tuple(np.ascontiguousarray(a[bounds[k] : bounds[k + 1]]) for a in data)
            worker = workers[k % len(workers)]
            [raw] = client.scatter([piece], workers=[worker], broadcast=False, hash=False)
            # A message may deliver its arrays unaligned, which PyTensor's C code cannot read: the partition is
            # copied once into aligned arrays on its worker (the task's result, never gathered), not at each call.
            future = client.submit(_run_task, "store", raw, workers=[worker], allow_other_workers=False, pure=False)
            self._parts.append((future, worker))
            del raw  # the unaligned copy is dropped once the aligned one exists
        _import_distributed().wait([future for future, _ in self._parts])
        if any(future.status != "finished" for future, _ in self._parts):
            self.close()
            raise DaskBackendError("`backend`'s cluster must take the rows. Found a worker that failed to store them.")

    # -- the shipped graphs --------------------------------------------------------------------------
    def _ship(self, outputs: list) -> tuple[tuple[str, Any, dict], list]:
        """Pickle (inputs, outputs) of a per-row function of (θ, other parameters, batch) and scatter it once.

        Shared variables left in the graph (parameters a compound step holds fixed) become inputs,
        sent with θ. A constant with an axis of length N (row data left in the graph) is refused.
        """
        from pytensor.compile.sharedvalue import SharedVariable
        from pytensor.graph.basic import Constant
        from pytensor.graph.replace import clone_replace
        from pytensor.graph.traversal import ancestors

        from pymc_dp.data import ModelStructureError

        shared = [v for v in ancestors(outputs) if isinstance(v, SharedVariable)]
        for var in ancestors(outputs):
            if isinstance(var, Constant) and self.n_rows in np.shape(var.data) and np.ndim(var.data) >= 1:
                raise ModelStructureError(
                    "`backend` needs a per-row graph whose row arrays are all inputs. Found an array with a "
                    "row-length axis left in it, which cannot be shipped without its rows; run it without a backend."
                )
        inputs = [v.type() for v in shared]
        outputs = clone_replace(outputs, dict(zip(shared, inputs, strict=True))) if shared else outputs
        payload = pickle.dumps(([self._rows._theta, *inputs, *self._batch], outputs))
        token = hashlib.sha256(payload).hexdigest()
        [payload_future] = self._client.scatter([payload], broadcast=True, hash=False)
        return (token, payload_future, self._compile_kwargs), shared

    def _gradient_spec(self):
        if self._grad_spec is None:
            rows = self._rows
            if rows.gradient_mode == "reverse":
                jacobian = rows._reverse_jacobian(self._batch, self._lik_batch)
            else:
                jacobian = rows._forward_jacobian(self._lik_batch)
            self._grad_spec, self._grad_shared = self._ship([jacobian])
        return self._grad_spec

    @property
    def n_partitions(self) -> int:
        """The number of row partitions (public: from N and the backend's settings)."""
        return len(self._parts)

    @staticmethod
    def _params(shared: list) -> list[np.ndarray]:
        """Current values of the parameters held fixed (compound steps): sent with θ."""
        return [np.asarray(v.get_value(borrow=True)) for v in shared]

    # -- calls ---------------------------------------------------------------------------------------
    def _map(self, task: str | Callable, per_part: Callable[[int, Any], tuple], what: str) -> list:
        """Submit the worker task ``task`` on every partition (on the worker that holds it) and gather the results.

        ``task`` names a task of this module or is a module-level function the workers can import.
        Any failure (a worker lost with its partition, a task error, the timeout) is a
        :class:`DaskBackendError` naming the exception's type only: a remote message may hold
        data values (PyTensor quotes inputs).
        """
        client = self._client
        try:
            futures = [
                client.submit(
                    _run_task, task, *per_part(k, future), workers=[worker], allow_other_workers=False, pure=False
                )
                for k, (future, worker) in enumerate(self._parts)
            ]
            return (
                client.gather(futures, errors="raise")
                if self._timeout is None
                else _gather(client, futures, self._timeout)
            )
        except Exception as error:
            raise DaskBackendError(
                f"The Dask cluster failed while computing {what} ({type(error).__name__}; its message is withheld, it "
                "may hold data values). A worker holding rows may have been lost: its partition is gone with it, so "
                "the run stops here. What was released before this point was charged with the run."
            ) from None

    def clipped_ratio_sum(self, theta: np.ndarray, theta_new: np.ndarray, bound: float) -> float:
        """Σᵢ clip(log p(xᵢ | θ′) − log p(xᵢ | θ), ±bound) over all rows: partition sums, added here."""
        theta, theta_new = np.asarray(theta, dtype=float), np.asarray(theta_new, dtype=float)
        params, spec = self._params(self._loglik_shared), self._loglik_spec
        partials = self._map(
            "ratio",
            lambda k, part: (spec, f"part-{k}", part, theta, theta_new, params, float(bound)),
            "clipped log-likelihood ratios",
        )
        return float(np.sum(partials))

    def clipped_gradient_sum(self, theta: np.ndarray, bound: float) -> np.ndarray:
        """Σᵢ clip_L2(∇θ log p(xᵢ | θ), bound) over all rows: partition sums, added here."""
        theta = np.asarray(theta, dtype=float)
        spec = self._gradient_spec()
        params = self._params(self._grad_shared)
        partials = self._map(
            "gradient",
            lambda k, part: (spec, part, theta, params, float(bound), self._chunk_rows),
            "clipped gradients",
        )
        return np.sum(partials, axis=0)

    def owner_partition(self, owner_rows: np.ndarray):
        """(future, worker) of one data owner's rows, scattered once to the worker the owners are pinned to.

        Owners are spread over the workers in the order they are first asked for; an owner's
        rows stay on one worker, the owner's "machine".
        """
        owner_rows = np.asarray(owner_rows, dtype=np.int64)
        key = hashlib.sha256(owner_rows.tobytes()).hexdigest()
        if key not in self._owners:
            workers = sorted(self._client.scheduler_info()["workers"])
            worker = workers[len(self._owners) % len(workers)]
            data = [v.get_value(borrow=True) for v in self._rows._row_index_vars]
            piece = tuple(np.take(a, owner_rows, axis=0) for a in data)
            [raw] = self._client.scatter([piece], workers=[worker], broadcast=False, hash=False)
            future = self._client.submit(
                _run_task, "store", raw, workers=[worker], allow_other_workers=False, pure=False
            )
            del raw
            self._owners[key] = (future, worker)
        return self._owners[key]

    def place_owners(self, owners: Sequence[np.ndarray]) -> None:
        """Before the charge: every owner's rows on its worker (:meth:`owner_partition`), or a refusal.

        Releases nothing. A worker that cannot store an owner's rows (or not within ``timeout``) is
        refused with :class:`DaskBackendError` here, not at the owner's first release.
        """
        futures = [self.owner_partition(rows)[0] for rows in owners]
        if not futures:
            return
        try:
            _import_distributed().wait(futures, timeout=self._timeout)
        except TimeoutError:
            pass  # the futures still pending are refused below
        if any(future.status != "finished" for future in futures):
            raise DaskBackendError(
                "`backend`'s cluster must take every data owner's rows. Found a worker that failed to store them (or "
                "did not within `timeout`); refused before anything was charged."
            )

    def owner_release(self, part, owner_key: str, theta, theta_new, bound: float, std: float, rng) -> float:
        """One owner's noisy number for θ → θ′, computed and noised on the owner's worker."""
        future, worker = part
        params, spec = self._params(self._loglik_shared), self._loglik_spec
        client = self._client
        try:
            task = client.submit(
                _run_task,
                "owner",
                spec,
                owner_key,
                future,
                np.asarray(theta, dtype=float),
                np.asarray(theta_new, dtype=float),
                params,
                float(bound),
                float(std),
                rng,
                workers=[worker],
                allow_other_workers=False,
                pure=False,
            )
            return float(task.result(timeout=self._timeout))
        except Exception as error:
            raise DaskBackendError(
                f"The Dask cluster failed while computing a data owner's ratio ({type(error).__name__}; its message is "
                "withheld, it may hold data values). A worker holding rows may have been lost: its partition is gone "
                "with it, so the run stops here. What was released before this point was charged with the run."
            ) from None

    def score_norm_counts(self, theta: np.ndarray) -> np.ndarray:
        """The histogram counts of the score norms at θ over all rows: partition counts, added here."""
        theta = np.asarray(theta, dtype=float)
        spec = self._gradient_spec()
        params = self._params(self._grad_shared)
        partials = self._map(
            "histogram", lambda k, part: (spec, part, theta, params, self._chunk_rows), "score-norm counts"
        )
        return np.sum(partials, axis=0)

    def warm_up(self, gradient: bool, modules: Sequence[str] = ()) -> None:
        """Before the charge: every worker imports ``modules``, compiles the graphs and runs them on a dummy row.

        :mod:`pymc_dp.backends.dask_warmup`; the gradient graph too when ``gradient``. Releases
        nothing; a worker that cannot is refused with :class:`DaskBackendError`.
        """
        specs, params = [self._loglik_spec], [self._params(self._loglik_shared)]
        if gradient:
            specs.append(self._gradient_spec())
            params.append(self._params(self._grad_shared))
        args = (_worker_function, tuple(modules), specs, params, self.n_params)
        client = self._client
        try:
            futures = [
                client.submit(
                    _run_task, warm_up_partition, *args, part, workers=[w], allow_other_workers=False, pure=False
                )
                for part, w in self._parts
            ]
            client.gather(futures, errors="raise") if self._timeout is None else _gather(client, futures, self._timeout)
        except Exception as error:  # WorkerError's text is ours: the worker's exception type, no message
            raise DaskBackendError(
                warm_up_refusal(str(error) if isinstance(error, WorkerError) else type(error).__name__)
            ) from None

    def close(self) -> None:
        """Release the partitions and the workers' compiled functions and caches."""
        tokens = [self._loglik_spec[0]] + ([self._grad_spec[0]] if self._grad_spec else [])
        with contextlib.suppress(Exception):  # a cluster already gone holds nothing more
            for token in tokens:
                self._client.run(_forget_worker, token)
        for future, _ in [*self._parts, *self._owners.values()]:
            future.release()
        self._parts, self._owners = [], {}


def _gather(client, futures, timeout: float):
    from distributed import wait

    done = wait(futures, timeout=timeout, return_when="ALL_COMPLETED")
    if done.not_done:
        raise TimeoutError("timed out")
    return client.gather(futures, errors="raise")
