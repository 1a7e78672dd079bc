"""DPADVI on rows that never leave the cluster: a model of row placeholders fitted on the Dask arrays' own blocks.

``pmdp.DPADVI(..., backend=pmdp.DaskBackend(client, rows={"X": X, "y": y}))`` fits a model built on
:func:`pymc_dp.row_placeholder` stand-ins (zeros of the rows' shape and dtype that hold one element)
to the Dask arrays they were made from. Nothing here reads a row on the client:

- :func:`pymc_dp.backends.dask_rows.check_rows` checks ``rows`` from metadata (kinds, chunk sizes, dtypes, lengths);
- :func:`placeholder_access` matches every placeholder of the model to the Dask array it was made
  from (by the array's Dask name, recorded by ``row_placeholder``), checks their shapes and dtypes,
  and builds the model's per-row graph with each placeholder replaced by an input (a copy of the
  model's graph: the user's model is unchanged), through the same row-independence checks as any
  model (:func:`pymc_dp.mechanisms.model_access`); the row mechanisms it returns refuse every
  in-process release (they hold zeros);
- :class:`PartitionedClusterRows` (:mod:`pymc_dp.backends.dask_blocks`, with the model's copy,
  shared with the samplers) is :class:`pymc_dp.backends.dask_cluster.ClusterRows` on the arrays'
  blocks: N from the chunk sizes, the warm-up (imports, compilation, a dummy row of the arrays'
  dtypes and trailing shapes on every worker) before the charge, and each block computed by Dask
  where Dask places it and kept there, aligned, at the first release, after the charge. From then
  on DPADVI's Poisson batches and clipped sums run on those workers exactly as on scattered rows
  (:mod:`pymc_dp.backends.dask_dpadvi`).

Neighbouring relation: that of the fit (substitute by default, N public; add/remove), unchanged:
where the rows sit changes where the clipped sums are computed, not what is released.
"""

from __future__ import annotations

from typing import Any

from pymc_dp.backends.dask_blocks import (  # noqa: F401  (re-exported: DPADVI's and the tests' names, as before)
    DASK_NAME_TAG,
    PARTITION_WORKER_MODULES,
    PARTITIONED_ROWS_NAME,
    SETUP_ROWS,
    PartitionedClusterRows,
    _refuse_in_process_rows,
    placeholder_model,
)
from pymc_dp.mechanisms.access import RowMechanisms

__all__ = [
    "PartitionedClusterRows",
    "PlaceholderRowMechanisms",
    "dpadvi_route_backend",
    "placeholder_access",
]


class PlaceholderRowMechanisms(RowMechanisms):
    """The row mechanisms of a model of placeholders: its rows are zeros here, so every in-process release is refused.

    Holds the Dask arrays (``arrays``, in the order of the per-row graph's row inputs) that
    :func:`pymc_dp.backends.dask_dpadvi.attach_dpadvi_rows` places on the workers in their
    stead. Only the checks that run on synthetic rows (the subset path, the gradient's build)
    are inherited.
    """

    def __init__(self, rows: Any, arrays: list[Any]) -> None:
        super().__init__(rows)
        self.arrays = arrays

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise ValueError(
            "`backend` must compute this release on the workers: the model's rows are Dask arrays (its row "
            "placeholders hold zeros). Found an in-process release requested; fit with DPADVI on the DaskBackend."
        )

    log_likelihood_ratio = clipped_gradient = score_norm_histogram = mapped_gradient_histogram = _refuse
    barker_statistic = poisson_gradient_sum = centred_log_likelihood_ratio = centred_gradient = owner_ratio = _refuse


def placeholder_access(
    model: Any, rows: dict[str, Any], compile_kwargs: Any, neighbouring: str, reproducible: bool
) -> tuple[Any, PlaceholderRowMechanisms]:
    """DPADVI's prior and row mechanisms for a model of placeholders and its Dask ``rows``: metadata only.

    The copy of the model (:func:`placeholder_model`) passes the checks every model passes
    (:func:`pymc_dp.mechanisms.model_access`: row-wise checks, the allow-list walk and the
    perturbation probe on synthetic rows, a prior that reads no row). Refused, naming ``rows``,
    before anything is charged: rows that do not match the placeholders, and a model whose
    likelihood also reads rows held in this process (they would be read on the client).
    """
    from pymc_dp.data import ModelStructureError
    from pymc_dp.mechanisms import model_access

    copy, arrays = placeholder_model(model, rows)
    prior, mechanisms = model_access(
        copy, None, None, None, compile_kwargs, neighbouring, reproducible=reproducible, partitioned_rows=True
    )
    prior.n_rows = int(next(iter(arrays.values())).shape[0])  # N of the rows (metadata), not of the checks' copy
    from pytensor.graph.traversal import ancestors

    _refuse_in_process_rows(ancestors([mechanisms._rows._lik_index]), prior.n_rows)  # what only a logp reads
    if mechanisms._rows.subset_mode != "index":  # decided on synthetic rows (the graph alone)
        raise ModelStructureError(
            "`backend` needs rows that can be partitioned (subset mode 'index'). Found a log-likelihood that fixes "
            "the number of rows in a shape (subset mode 'slice', see docs/data.md)."
        )
    inputs = mechanisms._rows._row_index_vars
    names = [getattr(v, "name", None) for v in inputs]
    if not inputs or any(name not in arrays for name in names) or set(names) != set(arrays):
        raise ValueError(
            "`rows` must replace every row array of the model's likelihood: each must be a pmdp.row_placeholder, "
            "read row by row (a model that also reads rows held in this process, or a placeholder used other than "
            "as rows, would read them on the client). Found a likelihood whose row arrays are not all placeholders "
            "of the given rows."
        )
    placed = PlaceholderRowMechanisms(mechanisms._rows, [arrays[name] for name in names])
    placed.n_rows = prior.n_rows
    return prior, placed


def dpadvi_route_backend(backend: Any, rows: dict[str, Any]) -> Any:
    """The backend the one-call route's DPADVI fit takes for Dask ``rows``: ``backend``'s client, or the default one.

    ``backend`` is the call's ``backend`` (None or ``"default"``, or a :class:`~pymc_dp.DaskBackend`
    without rows of its own); with None the client is ``distributed``'s default (the one open in a ``with
    Client(...)`` block), as for the released-statistics route's sums. Refused, naming
    ``backend``, when there is none.
    """
    from pymc_dp.backends.dask import DaskBackend, _import_distributed

    backend = None if isinstance(backend, str) and backend == "default" else backend
    if backend is not None and (not isinstance(backend, DaskBackend) or backend.rows is not None):
        raise ValueError(
            "`backend` must be None or a pymc_dp.DaskBackend without rows of its own when `rows` is given (the rows "
            f"are fitted on its client). Found {backend!r}."
        )
    if backend is None:
        try:
            client = _import_distributed().default_client()
        except ValueError:
            raise ValueError(
                "`backend` must be a pymc_dp.DaskBackend(client), or a distributed.Client must be open, to fit DPADVI "
                "on Dask `rows` (its clipped sums run on the workers). Found neither."
            ) from None
        return DaskBackend(client, rows=rows)
    return DaskBackend(backend.client, timeout=backend.timeout, rows=rows)
