"""Rows that never leave the cluster: a copy of a model of row placeholders, and its rows on the Dask arrays' blocks.

Shared by DPADVI (:mod:`pymc_dp.backends.dask_partitions`) and the DP samplers
(:mod:`pymc_dp.backends.dask_sampler_rows`) on ``DaskBackend(client, rows={"X": X, "y": y})``:

- :func:`placeholder_model` matches every :func:`pymc_dp.row_placeholder` of a model to the Dask
  array it was made from (by the array's Dask name), checks their shapes and dtypes, and copies
  the model's graph with each placeholder replaced by an input that holds zeros (the user's
  model is unchanged); a model that also holds an array with an axis of the rows' length in
  this process is refused (:func:`_refuse_in_process_rows`);
- :class:`PartitionedClusterRows` is :class:`pymc_dp.backends.dask_cluster.ClusterRows` on the
  arrays' blocks: N from the chunk sizes, the warm-up (imports, compilation, a dummy row of the
  arrays' dtypes and trailing shapes on every worker) before the charge, and each block computed
  by Dask where Dask places it and kept there, aligned, at the first release, after the charge.

Metadata only on the client (shapes, dtypes, chunk sizes, Dask names): no row is read here.
Neighbouring relation: that of the fit or the steps (substitute by default, N public;
add/remove), unchanged: one row sits in one block and changes only its own clipped term.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pymc_dp.backends.dask_cluster import ClusterRows, DaskBackendError, WorkerError, _run_task, _worker_function
from pymc_dp.backends.dask_rows import ROW_PLACEHOLDER_NAME
from pymc_dp.backends.dask_warmup import warm_up_partition, warm_up_refusal
from pymc_dp.mechanisms.access import PARTITIONED_ROWS_NAME

__all__ = ["PartitionedClusterRows", "placeholder_model"]

#: The tag attribute in which :func:`pymc_dp.row_placeholder` records the Dask name of the array it stands for.
DASK_NAME_TAG = "dask_name"
#: Rows of zeros the copy's inputs hold while the model is checked (its graph takes any number): the checks' synthetic
#: rows are this long, whatever N, so the client's memory does not grow with N. Odd and prime, so that a parameter's
#: length rarely equals it (an array of this length in the likelihood would be taken for rows: refused, never fitted).
SETUP_ROWS = 257
#: The module of this backend's worker task: imported by every worker's warm-up, before the charge.
PARTITION_WORKER_MODULES = ("pymc_dp.backends.dask_blocks",)


def _placeholders(fgraph: Any) -> list[Any]:
    """The row placeholders of a model's graph, in a fixed order (by their Dask name; graph metadata only)."""
    found = {id(v): v for v in fgraph.variables if getattr(v, "name", None) == ROW_PLACEHOLDER_NAME}
    return sorted(found.values(), key=lambda v: str(getattr(v.tag, DASK_NAME_TAG, "")))


def _match(placeholders: Sequence[Any], rows: dict[str, Any]) -> dict[int, str]:
    """id(placeholder) → the role of the Dask array it was made from; refuses what does not match (naming ``rows``)."""
    by_name = {array.name: role for role, array in rows.items()}
    if len(by_name) < len(rows):
        raise ValueError(f"`rows` must give a different Dask array for each role. Found one twice in {sorted(rows)}.")
    matched = {}
    for holder in placeholders:
        role = by_name.get(getattr(holder.tag, DASK_NAME_TAG, None))
        trailing, dtype = holder.data.shape[1:], holder.data.dtype
        if role is None:
            raise ValueError(
                "`rows` must give the Dask array of every row placeholder of the model (matched by the array each "
                f"placeholder was made from, its Dask name). Found no array for a placeholder of rows of shape "
                f"(N, {', '.join(map(str, trailing))}) and dtype {dtype}; found roles {sorted(rows)}."
            )
        array = rows[role]
        if array.shape[1:] != trailing or array.dtype != dtype or array.shape[0] != holder.data.shape[0]:
            raise ValueError(
                f'`rows["{role}"]` must have the shape and dtype of its placeholder (rows of shape {trailing}, dtype '
                f"{dtype}). Found rows of shape {array.shape[1:]}, dtype {array.dtype}"
                f"{'' if array.shape[0] == holder.data.shape[0] else ', and another number of rows'}."
            )
        matched[id(holder)] = role
    unused = sorted(set(rows) - set(matched.values()))
    if unused or not placeholders:
        raise ValueError(
            "`rows` must give only the Dask arrays the model's row placeholders were made from (pmdp.row_placeholder"
            f"(array) in the model's likelihood). Found {unused or sorted(rows)} with no placeholder in the model."
        )
    return matched


def placeholder_model(
    model: Any, rows: dict[str, Any], setup_rows: int | None = SETUP_ROWS
) -> tuple[Any, dict[str, Any]]:
    """A copy of ``model`` with each row placeholder replaced by an input, and that input's name → its Dask array.

    The inputs are shared variables with an unknown number of rows, so that the per-row graph
    can be indexed by a batch, as a model of ``pm.Data`` rows; they hold ``setup_rows`` of
    the placeholders' zeros (a view: one element each), so that the checks run on that many
    synthetic rows (None: all N, for the samplers, whose steps read N from their model:
    :mod:`pymc_dp.backends.dask_sampler_rows`). They are named ``pymc_dp.partitioned_rows[role]``
    and carry their array's Dask name (``tag.dask_name``). Graph metadata only: no row is read,
    and ``model`` is unchanged.
    """
    import pytensor
    from pymc.model.fgraph import fgraph_from_model, model_from_fgraph
    from pytensor.graph.fg import FunctionGraph

    fgraph, _ = fgraph_from_model(model, inlined_views=True)
    placeholders = _placeholders(fgraph)
    roles = _match(placeholders, rows)
    _refuse_in_process_rows(fgraph.variables, int(next(iter(rows.values())).shape[0]))
    memo, arrays = {}, {}
    for holder in placeholders:
        name = f"{PARTITIONED_ROWS_NAME}[{roles[id(holder)]}]"
        shape = (None, *holder.type.shape[1:])
        zeros = holder.data if setup_rows is None else holder.data[:setup_rows]
        memo[holder] = pytensor.shared(zeros, name=name, borrow=True, shape=shape)
        setattr(memo[holder].tag, DASK_NAME_TAG, getattr(holder.tag, DASK_NAME_TAG, None))
        arrays[name] = rows[roles[id(holder)]]
    for node in fgraph.toposort():  # rebuilt node by node: the copies take any number of rows (no SpecifyShape)
        inputs = [memo.get(i, i) for i in node.inputs]
        if any(a is not b for a, b in zip(inputs, node.inputs, strict=True)):
            for old, new in zip(node.outputs, node.op.make_node(*inputs).outputs, strict=True):
                new.name = old.name
                memo[old] = new
    copy = FunctionGraph(outputs=[memo.get(o, o) for o in fgraph.outputs], clone=False)
    copy._coords = dict(getattr(fgraph, "_coords", {}))  # the model's coords and dims, as fgraph_from_model keeps them
    copy._dim_lengths = {k: memo.get(v, v) for k, v in getattr(fgraph, "_dim_lengths", {}).items()}
    return model_from_fgraph(copy, mutate_fgraph=True), arrays


def _refuse_in_process_rows(variables: Any, n_rows: int) -> None:
    """Refuse, naming ``rows``, a model that also holds an array with an axis of N in this process (shapes only).

    Such an array (a ``pm.Data`` or a constant beside the placeholders) would be read on the client,
    and its copy, rebuilt around :data:`SETUP_ROWS` synthetic rows, no longer shows the row-wise
    checks that it is row-aligned: a reduction over it (``w.sum()``) mixes every row's term and is
    refused in a model of in-memory rows, so it is refused here before anything is charged. Run on
    the model's graph (``variables``) and again on the per-row log-likelihood's graph, which holds
    what only a distribution's log-density reads (a ``pm.CustomDist``'s logp). N is the Dask arrays'
    length (metadata); only shapes are read. The copy's row inputs (:data:`PARTITIONED_ROWS_NAME`)
    are the rows themselves.
    """
    from pytensor.compile.sharedvalue import SharedVariable
    from pytensor.graph.basic import Constant

    for var in variables:
        if str(getattr(var, "name", None) or "").startswith(PARTITIONED_ROWS_NAME):
            continue
        if isinstance(var, SharedVariable):
            shape = np.shape(var.get_value(borrow=True))
        elif isinstance(var, Constant) and getattr(var, "name", None) != ROW_PLACEHOLDER_NAME:
            shape = np.shape(var.data)
        else:
            continue
        if n_rows in shape:
            raise ValueError(
                "`rows` must hold every row the model reads: a model of row placeholders may hold no other array "
                f"with an axis of the rows' length in this process (it would be read on the client, and could mix "
                f"rows). Found {getattr(var, 'name', None) or 'an unnamed array'} with shape {shape}, N = {n_rows}."
            )


# -- worker side ---------------------------------------------------------------------------------
def _stored_block(expected: tuple, *blocks: np.ndarray) -> tuple:
    """One partition's blocks, checked against their metadata and aligned (runs where Dask computed them).

    ``expected`` is (the block's length from the chunk sizes, then each array's trailing shape
    and dtype): public metadata. A block that disagrees fails here (its type only reaches the
    client), so the compiled per-row graph never reads arrays of another dtype or shape.
    """
    length, specs = expected[0], expected[1:]
    out = []
    for block, (trailing, dtype) in zip(blocks, specs, strict=True):
        block = np.asarray(block)
        if block.shape != (length, *trailing) or not np.can_cast(block.dtype, dtype, "same_kind"):
            raise ValueError("a block disagrees with its chunk sizes or dtype")
        out.append(np.require(block.astype(dtype, copy=False), requirements="AC"))
    return tuple(out)


def _store_partition(expected: tuple, *blocks: np.ndarray) -> tuple:
    """:func:`_stored_block` with its failure's message withheld (Dask's task on the worker)."""
    return _run_task(_stored_block, expected, *blocks)


# -- client side ---------------------------------------------------------------------------------
class PartitionedClusterRows(ClusterRows):
    """:class:`ClusterRows` on the blocks of Dask arrays: the rows are computed and kept where Dask places them.

    Built before the charge without reading a block: the per-row graphs are shipped and (with
    :meth:`warm_up`) compiled and run on a dummy row on every worker. The blocks are computed
    at the first release (:meth:`_read_partitions`), after the charge: each block's arrays (the
    arrays rechunked to the first one's row chunks, Dask's own placement) become one partition,
    kept aligned on the worker that computed it, where every later task on it runs. A block
    that fails raises :class:`DaskBackendError` naming the exception's type only.

    Notes
    -----
    Neighbouring relation: that of the fit. N and the partitions' lengths are the chunk sizes
    (metadata); each row sits in one partition, so the clipped sums and their sensitivity are
    those of scattered rows.
    """

    #: Its releases read the Dask arrays' own blocks on the workers (never rows held in this process).
    holds_partitioned_rows = True

    def __init__(self, client: Any, rows: Any, arrays: Sequence[Any], timeout: float | None) -> None:
        self._client, self._rows, self._timeout = client, rows, timeout
        self.n_rows, self.n_params = int(sum(arrays[0].chunks[0])), rows.n_params  # N from the chunk sizes
        self._chunk_rows = rows.chunk_rows
        self._compile_kwargs = dict(rows._compile_kwargs)
        self._batch, self._lik_batch = rows._batch_graph()
        self._loglik_spec, self._loglik_shared = self._ship([self._lik_batch])
        self._grad_spec, self._grad_shared = None, []
        self._parts, self._owners = [], {}
        if not client.scheduler_info()["workers"]:
            raise DaskBackendError("`backend`'s client must have at least one worker. Found none.")
        chunks = arrays[0].chunks[0]
        self._arrays = [a.rechunk({0: chunks, **{axis: -1 for axis in range(1, a.ndim)}}) for a in arrays]
        self._lengths = [int(size) for size in chunks]
        self._specs = tuple((tuple(a.shape[1:]), np.dtype(a.dtype)) for a in self._arrays)

    @property
    def n_partitions(self) -> int:
        """The number of partitions: the arrays' non-empty row chunks (metadata), read or not."""
        return sum(1 for length in self._lengths if length > 0)

    def warm_up(self, gradient: bool, modules: Sequence[str] = ()) -> None:
        """Before the charge: every worker compiles the graphs and runs them on a dummy row of the arrays' metadata.

        No block is read: the dummy is one row of zeros with each array's dtype and trailing
        shape (:func:`pymc_dp.backends.dask_warmup.warm_up_partition`), sent to every worker
        (Dask chooses where the blocks are computed).
        """
        specs, params = [self._loglik_spec], [self._params(self._loglik_shared)]
        if gradient:
            specs.append(self._gradient_spec())
            params.append(self._params(self._grad_shared))
        dummy = tuple(np.zeros((0, *shape), dtype=dtype) for shape, dtype in self._specs)
        args = (_worker_function, (*PARTITION_WORKER_MODULES, *modules), specs, params, self.n_params, dummy)
        client = self._client
        try:
            futures = [
                client.submit(_run_task, warm_up_partition, *args, workers=[w], allow_other_workers=False, pure=False)
                for w in sorted(client.scheduler_info()["workers"])
            ]
            _wait_all(futures, self._timeout)
            client.gather(futures, errors="raise")
        except Exception as error:  # WorkerError's text is ours: the worker's exception type, no message
            raise DaskBackendError(
                warm_up_refusal(str(error) if isinstance(error, WorkerError) else type(error).__name__)
            ) from None

    def _read_partitions(self) -> None:
        """Compute every block where Dask places it and keep it there (after the charge): the partitions."""
        import dask

        blocks = [a.to_delayed().reshape(-1) for a in self._arrays]
        tasks = [
            dask.delayed(_store_partition, pure=False)((length, *self._specs), *[b[k] for b in blocks])
            for k, length in enumerate(self._lengths)
            if length > 0
        ]
        try:
            futures = self._client.compute(tasks)
            _wait_all(futures, self._timeout)
            failed = next((f for f in futures if f.status != "finished"), None)
            if failed is not None:
                cause = failed.exception()  # ours (a WorkerError names a type only) or a Dask task's: its type only
                raise WorkerError(str(cause) if isinstance(cause, WorkerError) else type(cause).__name__)
            placed = self._client.who_has(futures)
        except Exception as error:
            cause = str(error) if isinstance(error, WorkerError) else type(error).__name__
            raise DaskBackendError(
                f"The Dask cluster failed while computing the rows' partitions ({cause}; its message is withheld, it "
                "may hold data values). The fit stops here; it was charged before any partition was read."
            ) from None
        self._parts = [(future, sorted(placed[future.key])[0]) for future in futures]

    def _map(self, task: Any, per_part: Any, what: str) -> list:
        if not self._parts:  # the first release, after the charge: the blocks are computed now
            self._read_partitions()
        return super()._map(task, per_part, what)


def _wait_all(futures: list, timeout: float | None) -> None:
    """Wait for ``futures`` (all of them, or ``timeout`` seconds: then :class:`TimeoutError`)."""
    from distributed import wait

    done = wait(futures, timeout=timeout, return_when="ALL_COMPLETED")
    if done.not_done:
        raise TimeoutError("timed out")
