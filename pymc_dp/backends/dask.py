"""A Dask backend for the full-data mechanisms: rows on ``dask.distributed`` workers, noise on the client.

A model's rows are split into contiguous partitions and scattered once to the workers of a
:class:`distributed.Client`. Every worker compiles the in-process data layer's per-row functions
(shipped as a pickled PyTensor graph that holds no row) and returns for its partition only a
clipped sum: of log-likelihood ratios, of L2-clipped gradients, or the score norms' fixed-size
histogram. The client adds the partition sums and the noise once, as the in-process mechanisms
do: the sensitivity, the events and the accounting are unchanged. Users reach it through
:func:`pymc_dp.sample` (``backend=pmdp.DaskBackend(client)``; docs/dask.md). Released statistics
of Dask arrays: :mod:`pymc_dp.backends.dask_rows`; DPADVI's Poisson batches drawn on the workers:
:mod:`pymc_dp.backends.dask_dpadvi`, on Dask arrays' own blocks :mod:`pymc_dp.backends.dask_partitions`.
``dask[distributed]`` is an optional dependency (the ``dask`` extra), imported only when used.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import pickle
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pymc_dp._validation import check_one_core
from pymc_dp.backends.dask_warmup import warm_up_partition, warm_up_refusal
from pymc_dp.data import evaluate_rowwise
from pymc_dp.mechanisms.access import RowMechanisms
from pymc_dp.mechanisms.clip_bound import NoisyScoreNormHistogram, norm_histogram
from pymc_dp.mechanisms.clipping import clip_values, clipped_sum_l2
from pymc_dp.mechanisms.gradient import NoisyClippedGradient
from pymc_dp.mechanisms.log_likelihood_ratio import NoisyLogLikelihoodRatio
from pymc_dp.mechanisms.noise import clipped_sum_noise_std
from pymc_dp.mechanisms.owners import OwnerLogLikelihoodRatio

__all__ = ["DaskBackend", "DaskBackendError", "DaskRowMechanisms"]

#: The step methods whose releases the backend computes on the cluster (by class name).
SUPPORTED_STEPS = ("DPPenaltyMH", "DPHMC", "DPMultiOwnerPenaltyMH")


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
    try:
        return function(*(_aligned(a) for a in args))
    except Exception as error:
        raise WorkerError(f"{type(error).__name__} in {name} (message withheld)") from None


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
        try:
            for token in tokens:
                self._client.run(_forget_worker, token)
        except Exception:  # a cluster already gone holds nothing more
            pass
        for future, _ in [*self._parts, *self._owners.values()]:
            future.release()
        self._parts, self._owners = [], {}


def _gather(client, futures, timeout: float):
    from distributed import wait

    done = wait(futures, timeout=timeout, return_when="ALL_COMPLETED")
    if done.not_done:
        raise TimeoutError("timed out")
    return client.gather(futures, errors="raise")


# -- the mechanisms on cluster rows ---------------------------------------------------------------
class DaskLogLikelihoodRatio(NoisyLogLikelihoodRatio):
    """:class:`NoisyLogLikelihoodRatio` with the clipped sum computed by the workers.

    The same release, λ̂ = Σᵢ clip(rᵢ, ±b‖θ′ − θ‖₂) + ξ, ξ ~ N(0, σ²), σ = τ Δ: the workers
    return their partitions' clipped sums, the client adds them and the noise.

    Notes
    -----
    Neighbouring relation: that of ``neighbouring`` (substitute: one row replaced, N public;
    add/remove). Sensitivity 2b‖θ′ − θ‖₂ (substitute) or b‖θ′ − θ‖₂: one row changes one
    term of one partition's clipped sum. ε covers λ̂ alone, exactly as in-process: the
    partition sums stay on the client and are never released on their own.
    """

    def __init__(self, cluster: ClusterRows, llr_clip: float, noise_multiplier: float, neighbouring: str) -> None:
        super().__init__(cluster._rows, llr_clip, noise_multiplier, neighbouring)
        self._cluster = cluster

    def release(self, theta: np.ndarray, theta_proposed: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
        """Release λ̂ for the move θ → θ′; returns (λ̂, σ). The workers cache both points' per-row values."""
        theta = np.asarray(theta, dtype=float)
        theta_proposed = np.asarray(theta_proposed, dtype=float)
        bound = self.llr_clip * float(np.linalg.norm(theta_proposed - theta))
        std = clipped_sum_noise_std(bound, self.noise_multiplier, self.neighbouring)  # public, before any row
        if std == 0.0:  # a zero bound: the clipped sum is 0 whatever the data
            return 0.0, 0.0
        clipped = self._cluster.clipped_ratio_sum(theta, theta_proposed, bound)
        return clipped + float(rng.normal(0.0, std)), std

    def keep(self, accepted: bool) -> None:
        """Nothing to do: the workers keep the last two points' per-row values, keyed by the point."""


class DaskClippedGradient(NoisyClippedGradient):
    """:class:`NoisyClippedGradient` with the clipped sum computed by the workers.

    Releases Σᵢ clip_L2(∇θ log p(xᵢ | θ), b_g) + ξ, ξ ~ N(0, σ² I), σ = τ Δ.

    Notes
    -----
    Neighbouring relation: that of ``neighbouring``. L2 sensitivity 2b_g (substitute) or
    b_g (add/remove), as in-process: one row changes one clipped term of one partition.
    """

    def __init__(self, cluster: ClusterRows, grad_clip: float, noise_multiplier: float, neighbouring: str) -> None:
        super().__init__(cluster._rows, grad_clip, noise_multiplier, neighbouring)
        self._cluster = cluster

    def release(self, theta: np.ndarray, rng) -> np.ndarray:
        """One noisy clipped gradient of the log-likelihood at θ, shape (P,)."""
        clipped_sum = self._cluster.clipped_gradient_sum(np.asarray(theta, dtype=float), self.grad_clip)
        return clipped_sum + rng.normal(0.0, self.std, size=clipped_sum.shape)


class DaskScoreNormHistogram(NoisyScoreNormHistogram):
    """:class:`NoisyScoreNormHistogram` with the counts computed by the workers.

    Notes
    -----
    Neighbouring relation: that of ``neighbouring``; Δ = √2 (substitute) or 1 (add/remove),
    as in-process: every row counts once, in one partition.
    """

    def __init__(self, cluster: ClusterRows, noise_multiplier: float, neighbouring: str) -> None:
        super().__init__(cluster._rows, noise_multiplier, neighbouring)
        self._cluster = cluster

    def release_counts(self, reference, rng):
        """The noisy histogram of score norms at θ_ref = ``reference`` (one release)."""
        counts = self._cluster.score_norm_counts(np.asarray(reference, dtype=float))
        return counts + rng.normal(0.0, self.std, size=counts.shape)


class DaskOwnerRatio(OwnerLogLikelihoodRatio):
    """:class:`OwnerLogLikelihoodRatio` run on the worker that holds the owner's rows, with the owner's noise.

    The owner's rows sit on one worker; at every call the worker computes the owner's clipped
    ratio sum and adds the owner's Gaussian noise from the owner's own generator, which lives
    on that worker (OS entropy there, unless ``reproducible_noise=True``). Only the noisy
    number comes back.

    Notes
    -----
    Neighbouring relation: that of ``neighbouring``; per call a Gaussian mechanism on the
    owner's rows with Δ = 2b‖θ′ − θ‖₂ (substitute) or b‖θ′ − θ‖₂ and μ = 1/(2τ²), as in
    process: against the other owners and the client, who see only noisy numbers.
    """

    _count = 0

    def __init__(
        self, cluster: ClusterRows, owner_rows, llr_clip, noise_multiplier, rng, neighbouring, reproducible: bool
    ) -> None:
        # Without reproducible noise the owner's generator is drawn on its worker; the client keeps none.
        super().__init__(None, llr_clip, noise_multiplier, rng if reproducible else _OS_ENTROPY, neighbouring)
        self._cluster = cluster
        self._part = cluster.owner_partition(owner_rows)
        DaskOwnerRatio._count += 1  # a fresh key: a new chain's owners get new generators
        self._key = f"{cluster._loglik_spec[0]}-owner-{DaskOwnerRatio._count}"
        self._sent = False

    def __call__(self, theta: np.ndarray, theta_proposed: np.ndarray) -> float:
        theta = np.asarray(theta, dtype=float)
        theta_proposed = np.asarray(theta_proposed, dtype=float)
        bound = self.llr_clip * float(np.linalg.norm(theta_proposed - theta))
        std = self.std(theta, theta_proposed)
        rng = None if self._sent else self.rng  # the generator travels once, with the first call
        noisy = self._cluster.owner_release(self._part, self._key, theta, theta_proposed, bound, std, rng)
        self._sent = True
        return noisy


class DaskRowMechanisms(RowMechanisms):
    """:class:`RowMechanisms` whose full-data releases run on a Dask cluster.

    The log-likelihood ratio (DPPenaltyMH, DPHMC), the clipped gradient (DPHMC), the
    score-norm histogram (private clip bounds) and the data owners' noisy ratios
    (DPMultiOwnerPenaltyMH) are computed by the workers; subsampled batches are refused,
    naming ``backend``.
    """

    def __init__(self, rows, cluster: ClusterRows, reproducible_noise: bool = False) -> None:
        super().__init__(rows)
        self._cluster = cluster
        self._reproducible = bool(reproducible_noise)

    def log_likelihood_ratio(self, llr_clip, noise_multiplier, neighbouring) -> DaskLogLikelihoodRatio:
        return DaskLogLikelihoodRatio(self._cluster, llr_clip, noise_multiplier, neighbouring)

    def clipped_gradient(self, grad_clip, noise_multiplier, neighbouring) -> DaskClippedGradient:
        return DaskClippedGradient(self._cluster, grad_clip, noise_multiplier, neighbouring)

    def score_norm_histogram(self, noise_multiplier, neighbouring) -> DaskScoreNormHistogram:
        return DaskScoreNormHistogram(self._cluster, noise_multiplier, neighbouring)

    def _refuse(self, what: str):
        raise ValueError(
            f"`backend` computes full-data releases only (DPPenaltyMH, DPHMC, DPMultiOwnerPenaltyMH, private clip "
            f"bounds). Found a request for {what}; run this step without a backend."
        )

    def barker_statistic(self, **settings):
        self._refuse("DPBarkerMH's subsampled statistic")

    def poisson_gradient_sum(self, *args, **kwargs):
        self._refuse(
            "DPADVI's Poisson-subsampled gradient from a step (DPADVI runs on the cluster with "
            "pmdp.DPADVI(..., backend=pmdp.DaskBackend(client)))"
        )

    def centred_log_likelihood_ratio(self, *args, **kwargs):
        self._refuse("a centred log-likelihood ratio (anchor=; its per-row anchor scores are not on the workers)")

    def centred_gradient(self, *args, **kwargs):
        self._refuse("a centred gradient (anchor=; its per-row anchor scores are not on the workers)")

    def owner_ratio(self, owner_rows, llr_clip, noise_multiplier, rng, neighbouring) -> DaskOwnerRatio:
        return DaskOwnerRatio(
            self._cluster, owner_rows, llr_clip, noise_multiplier, rng, neighbouring, self._reproducible
        )


class DaskBackend:
    """Run the full-data mechanisms of :func:`pymc_dp.sample` on a Dask cluster.

    Pass it as ``pmdp.sample(..., backend=pmdp.DaskBackend(client))``. When the run starts
    (after it is planned, priced and, with a budget, charged... see Notes) every step's
    rows are split into ``partitions`` contiguous partitions and scattered once to the
    client's workers; each worker compiles the step's per-row functions from the model graph
    and returns only its partitions' clipped sums; the noise is added once, on the client, by
    the mechanism classes. When the run ends the partitions are released.

    Parameters
    ----------
    client : distributed.Client
        A client of a running cluster: ``Client(LocalCluster(...))`` on one machine, or
        ``Client("tcp://scheduler:8786")`` for an existing cluster (whose workers must have
        pymc-dp and the same PyMC installed).
    partitions : int, optional
        Number of row partitions (default: one per worker at the start of the run).
    timeout : float, optional
        Seconds to wait for one release's partition sums before the run is stopped with a
        :class:`DaskBackendError` (default: no limit).

    rows : dict of dask.array.Array, optional
        For :class:`~pymc_dp.DPADVI` only: the Dask arrays, by role (``{"X": X, "y": y}``), that
        replace the model's :func:`~pymc_dp.row_placeholder` stand-ins; each block is computed and
        kept where Dask places it (:mod:`pymc_dp.backends.dask_partitions`; ``partitions`` must
        then be None: the partitions are the arrays' row chunks). Checked from metadata only.

    Notes
    -----
    Supported steps: :class:`~pymc_dp.DPPenaltyMH` (full-data log-likelihood ratios),
    :class:`~pymc_dp.DPHMC` (clipped gradients and the ratio of its accept test),
    :class:`~pymc_dp.DPMultiOwnerPenaltyMH` (each owner's rows pinned to one worker, which adds
    the owner's noise from a generator drawn there from its OS entropy) and the private clip
    bound (``"auto"`` bounds). Others (DPBarkerMH, DPSuffStatsPenaltyMH, DPADVI starts, and any
    step with ``rows``) are refused before anything is planned, naming ``backend``. DPADVI runs
    on the cluster with ``pmdp.DPADVI(..., backend=DaskBackend(client))`` (its Poisson batches
    drawn per partition on the workers: :mod:`pymc_dp.backends.dask_dpadvi`). Chains run one
    after the other (``cores=1``); the workers parallelise each release over rows.

    Neighbouring relation: that of the steps, unchanged. Each release is the in-process
    release (same clipped sum up to summation order, same noise, same σ): the sensitivity, the
    events and ε are those of the run without a backend. Only partition sums of clipped terms
    come back, and a remote error's message is withheld. Placing the rows and the warm-up
    (:meth:`ClusterRows.warm_up`) come before the charge: a cluster that fails them leaves the
    budget as it was; a worker lost during the run stops it (:class:`DaskBackendError`), charged.
    """

    def __init__(
        self, client, *, partitions: int | None = None, timeout: float | None = None, rows: dict | None = None
    ) -> None:
        distributed = _import_distributed()
        if not isinstance(client, distributed.Client):
            raise TypeError(f"`client` must be a distributed.Client. Found {type(client).__name__}.")
        if partitions is not None and (
            isinstance(partitions, bool) or not isinstance(partitions, int | np.integer) or partitions < 1
        ):
            raise ValueError(f"`partitions` must be a positive integer or None. Found {partitions!r}.")
        if timeout is not None:
            timeout = float(timeout)
            if not math.isfinite(timeout) or timeout <= 0:
                raise ValueError(f"`timeout` must be a positive number of seconds or None. Found {timeout!r}.")
        if rows is not None:
            from pymc_dp.backends.dask_rows import check_rows

            rows = check_rows(rows)
            if partitions is not None:
                raise ValueError(f"`partitions` must be None with `rows` (their chunks). Found {partitions!r}.")
        self.client, self.rows, self.timeout = client, rows, timeout
        self.partitions = None if partitions is None else int(partitions)

    def __repr__(self) -> str:
        roles = "" if self.rows is None else f", rows={sorted(self.rows)}"
        return f"DaskBackend(client={self.client!r}, partitions={self.partitions}, timeout={self.timeout}{roles})"

    def check(self, steps: Sequence[Any], sample_kwargs: dict[str, Any]) -> None:
        """Refuse steps the backend cannot run and ``cores`` > 1; changes nothing."""
        names = [type(s).__name__ for s in steps]
        if self.rows is not None:
            raise ValueError(
                "`backend` with `rows` (Dask arrays) runs DPADVI only: the samplers' rows come from the model. Found "
                f"{', '.join(names)}; fit pmdp.DPADVI(..., backend=...) or hold the rows in the model."
            )
        unsupported = [n for n in names if n not in SUPPORTED_STEPS]
        if unsupported:
            raise ValueError(
                f"`backend` runs the steps {', '.join(SUPPORTED_STEPS)} on a Dask cluster. Found "
                f"{', '.join(unsupported)}; run those without a backend."
            )
        centred = [n for n, s in zip(names, steps, strict=True) if getattr(s, "anchor", None) is not None]
        if centred:
            raise ValueError(
                "`backend` runs uncentred releases only: a step's `anchor` (centred releases, issue 36) keeps its "
                f"per-row anchor scores in this process. Found anchor= on {', '.join(centred)}; run it without a "
                "backend."
            )
        from pymc_dp.data import ModelStructureError

        for step in steps:
            if step._row_mechanisms._rows.subset_mode != "index":
                raise ModelStructureError(
                    "`backend` needs rows that can be partitioned (subset mode 'index'). Found a log-likelihood that "
                    f"fixes the number of rows in a shape (subset mode 'slice', docs/data.md) in {type(step).__name__};"
                    " run it without a backend."
                )
        check_one_core(
            sample_kwargs.get("cores"),
            "(or left out) with a Dask backend: chains run one after the other here and the workers parallelise "
            "each release over rows",
        )

    def attach(self, steps: Sequence[Any]) -> Callable[[], None]:
        """Scatter every step's rows and route its releases to the cluster; returns the function that undoes it.

        Releases nothing. Every worker then warms up (:mod:`pymc_dp.backends.dask_warmup`), so a
        worker that cannot run the step is refused here, before the charge; the steps are left
        as they were on failure.
        """
        clusters, swapped = [], []
        try:
            for step in steps:
                mechanisms = step._row_mechanisms
                cluster = ClusterRows(self.client, mechanisms._rows, self.partitions or 0, self.timeout)
                clusters.append(cluster)
                swapped.append((step, mechanisms))
                step._row_mechanisms = DaskRowMechanisms(mechanisms._rows, cluster, step.reproducible_noise)
                _drop_built_mechanisms(step)
                _warm_up(cluster, step)
        except BaseException:
            _undo(swapped, clusters)
            raise

        def detach() -> None:
            _undo(swapped, clusters)

        return detach


def _warm_up(cluster: ClusterRows, step) -> None:
    """Before the charge: :meth:`ClusterRows.warm_up`, and each data owner's rows placed (``place_owners``)."""
    gradient = bool(getattr(step, "uses_row_gradients", False) or getattr(step, "auto_clip_attributes", ()))
    cluster.warm_up(gradient=gradient)
    cluster.place_owners(getattr(step, "owner_row_indices", ()))


#: The attributes in which DPPenaltyMH and DPHMC keep the mechanisms they built from their rows.
_BUILT_MECHANISMS = ("_mechanism", "_llr_mechanism", "_grad_mechanism")


def _drop_built_mechanisms(step) -> None:
    """Drop the mechanisms a step built on its previous rows (it builds new ones on first use)."""
    for name in _BUILT_MECHANISMS:
        if getattr(step, name, None) is not None:
            setattr(step, name, None)


def _undo(swapped, clusters) -> None:
    for step, mechanisms in swapped:
        step._row_mechanisms = mechanisms
        _drop_built_mechanisms(step)
    for cluster in clusters:
        with contextlib.suppress(Exception):
            cluster.close()
