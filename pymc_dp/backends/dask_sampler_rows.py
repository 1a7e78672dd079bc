"""The DP samplers on rows that never leave the cluster: DPPenaltyMH and DPHMC on the Dask arrays' own blocks.

``DaskBackend(client, rows={"X": X, "y": y})`` runs DPADVI on a model built on
:func:`pymc_dp.row_placeholder` stand-ins (:mod:`pymc_dp.backends.dask_partitions`); this module
lets the full-data samplers run on the same rows. A step is built on the model's data, which a
model of placeholders does not hold, so the steps are built in :func:`sampler_model`'s copy of
the model, whose placeholders are replaced by inputs of N rows of zeros (views that hold one
element each): the steps pass every check a model of in-memory rows passes, and read N from it;
the checks evaluate at most :data:`pymc_dp.row_graph.PROBE_ROWS` synthetic rows.
Sampled with the backend that holds the rows, every release of the steps (the clipped
log-likelihood ratios of DPPenaltyMH and of DPHMC's accept test, DPHMC's clipped gradients, the
score-norm histogram of an ``"auto"`` clip bound) runs on the workers, on the blocks
:class:`~pymc_dp.backends.dask_blocks.PartitionedClusterRows` computes where Dask places them
at the first release, after the charge, and keeps there; the client adds the partition sums and
the noise once.

Neighbouring relation: that of the steps (substitute by default, N public; add/remove),
unchanged: one row sits in one block and changes only its own clipped term, so the sensitivity,
the events and ε are those of the same steps on rows held in the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pymc_dp.backends.dask_blocks import (
    DASK_NAME_TAG,
    PARTITIONED_ROWS_NAME,
    PartitionedClusterRows,
    _refuse_in_process_rows,
    placeholder_model,
)
from pymc_dp.mechanisms.access import reads_partitioned_rows

__all__ = [
    "SAMPLER_STEPS",
    "check_sampler_steps",
    "partitioned_cluster",
    "reads_partitioned_rows",
    "result_idata_kwargs",
    "sampler_model",
]

#: The steps whose releases run on Dask ``rows`` (by class name): full-data sums, no batch to draw.
SAMPLER_STEPS = ("DPPenaltyMH", "DPHMC")


def sampler_model(model: Any, rows: dict[str, Any]) -> Any:
    """A copy of ``model`` to build DPPenaltyMH or DPHMC steps in, for the Dask arrays ``rows``.

    Each :func:`pymc_dp.row_placeholder` of ``model``'s likelihood is replaced by an input that
    holds N rows of zeros (a view of one element) and the Dask name of its array; ``model`` is
    unchanged. Build the steps inside the copy and sample it with the backend that holds the
    rows::

        backend = pmdp.DaskBackend(client, rows={"X": X, "y": y})
        with sampler_model(model, backend.rows):
            idata = pmdp.sample(step=pmdp.DPPenaltyMH(llr_clip=2.0), backend=backend, epsilon=2.0, delta=1e-6)

    Parameters
    ----------
    model : pm.Model
        A model whose likelihood reads ``row_placeholder`` stand-ins of the arrays of ``rows``.
    rows : dict of dask.array.Array
        The arrays, by role, that the placeholders were made from (matched by Dask name).

    Returns
    -------
    pm.Model
        The copy. Its zeros are no data: a step built in it releases only on the workers of a
        ``DaskBackend`` holding ``rows``; sampled anywhere else (``pm.sample``, another backend) it
        is refused, naming ``backend`` (it would fit the zeros).

    Notes
    -----
    Metadata only (shapes, dtypes, chunk sizes, Dask names): no row is read and nothing is
    charged. Refused, naming ``rows``: rows that do not match the placeholders, and a model
    that holds another array with an axis of the rows' length in this process. The checks every
    step runs on its model run on the copy as on a model of in-memory rows: the row-wise terms
    and the allow-list walk read the stand-ins' public shape (N rows, a zero-stride view), so an
    array of N values that a ``pm.CustomDist``'s logp reduces, or a product over the row axis, is
    refused from the shapes; the perturbation probe evaluates
    :data:`pymc_dp.row_graph.PROBE_ROWS` synthetic rows, whatever N. The client's memory while the
    steps are built does not grow with N (measured: ``benchmarks/dask_client_memory.py``).
    """
    from pymc_dp.backends.dask_rows import check_rows

    copy, _ = placeholder_model(model, check_rows(rows), setup_rows=None)
    return copy


def step_arrays(rows: dict[str, Any], row_likelihood: Any) -> list[Any]:
    """The Dask arrays of ``rows`` in the order of a step's row inputs; refuses a mismatch, naming ``backend``.

    Every row input of the step's per-row log-likelihood must be an input of
    :func:`sampler_model`'s copy whose array (by Dask name) is among ``rows``, and every array
    of ``rows`` must be read. Graph metadata only.
    """
    by_name = {array.name: array for array in rows.values()}
    arrays = []
    for var in row_likelihood._row_index_vars:
        name = str(getattr(var, "name", None) or "")
        array = by_name.get(getattr(var.tag, DASK_NAME_TAG, None))
        if not name.startswith(PARTITIONED_ROWS_NAME) or array is None:
            raise ValueError(
                "`backend` with `rows` must run steps built in pymc_dp.backends.dask_sampler_rows.sampler_model(model, "
                "rows) on the same Dask arrays: every row array the step reads must stand for one of them. Found a "
                f"step reading {'rows held in this process' if not name.startswith(PARTITIONED_ROWS_NAME) else name}"
                f" with rows {sorted(rows)}."
            )
        arrays.append(array)
    unread = sorted(role for role, array in rows.items() if all(array is not a for a in arrays))
    if unread:
        raise ValueError(
            f"`backend`'s `rows` must each be read by the steps' likelihood. Found {unread} read by no step's rows."
        )
    return arrays


def check_sampler_steps(rows: dict[str, Any], steps: Sequence[Any]) -> None:
    """Refuse, naming ``backend``, steps that cannot run on Dask ``rows`` (metadata only; changes nothing).

    Only :data:`SAMPLER_STEPS` (the data owners of DPMultiOwnerPenaltyMH are rows of the model;
    DPBarkerMH subsamples on the client), built in :func:`sampler_model`'s copy on these
    arrays (:func:`step_arrays`), whose per-row log-likelihood reads no other array with an
    axis of the rows' length (a ``pm.CustomDist``'s logp summing one would mix rows).
    """
    from pytensor.graph.traversal import ancestors

    names = [type(step).__name__ for step in steps]
    unsupported = [name for name in names if name not in SAMPLER_STEPS]
    if unsupported:
        raise ValueError(
            f"`backend` with `rows` (Dask arrays) runs the steps {', '.join(SAMPLER_STEPS)} and DPADVI. Found "
            f"{', '.join(unsupported)}; run those on rows held in the model."
        )
    n_rows = int(next(iter(rows.values())).shape[0])
    for step in steps:
        row_likelihood = step._row_mechanisms._rows
        step_arrays(rows, row_likelihood)
        if step.n_rows != n_rows:
            raise ValueError(
                f"`backend`'s `rows` must have the steps' N rows (public). Found {n_rows} rows for steps of "
                f"{step.n_rows}."
            )
        _refuse_in_process_rows(ancestors([row_likelihood._lik_index]), n_rows)


def partitioned_cluster(backend: Any, row_likelihood: Any) -> PartitionedClusterRows:
    """The step's rows on ``backend``'s workers: the Dask arrays' blocks, computed at the first release (none read)."""
    arrays = step_arrays(backend.rows, row_likelihood)
    return PartitionedClusterRows(backend.client, row_likelihood, arrays, backend.timeout)


def result_idata_kwargs(model: Any, idata_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """``pm.sample``'s ``idata_kwargs`` for a run in :func:`sampler_model`'s copy: the result without its data groups.

    PyMC converts the trace with the model it sampled (``pm.to_inference_data(trace, model=model,
    **idata_kwargs)``, on PyMC 5 and 6 alike), which builds ``observed_data`` from the copy's
    observed stand-in (a dense copy of N zeros, and an index of its N coordinates) and
    ``constant_data``: O(N) memory on the client, for groups that :func:`pymc_dp.sample` deletes
    (they would read the data). This converts it with an empty model instead (no observed or
    constant variables: nothing of N rows is built) and the copy's coordinates and dimensions,
    which name the variables' axes as the copy would; the caller's own ``coords`` and ``dims``
    still take precedence, as in PyMC. The posterior and sample statistics, PyMC's attributes and
    the warm-up groups (``discard_tuned_samples=False``) are those of the conversion with the copy.

    Notes
    -----
    Post-processing of the released draws: nothing is read. Neighbouring relation: that of the
    steps, unchanged.
    """
    import pymc as pm
    from pymc.backends.arviz import coords_and_dims_for_inferencedata

    coords, dims = coords_and_dims_for_inferencedata(model)
    given = dict(idata_kwargs or {})
    return {
        **given,
        "model": pm.Model(model=None),  # no parent, no variables: no observed or constant data to convert
        "coords": {**coords, **(given.get("coords") or {})},
        "dims": {**dims, **(given.get("dims") or {})},
    }
