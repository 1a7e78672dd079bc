"""Data access: the compiled rows of a PyMC model (per-row log-likelihoods and gradients).

This module, together with :mod:`pymc_dp.mechanisms`, is the only code that evaluates
anything depending on the observed data. :class:`RowLikelihood` (internal: only the mechanism
layer receives one, through :func:`pymc_dp.mechanisms.model_access`) returns *raw* per-row
values; callers must pass them through a mechanism (clip + noise) before anything leaves a
step method.

The model must be made of rows: every observed variable has a leading row axis of the same
length N (:func:`observed_rows`), rows are conditionally independent given the parameters
(checked on the graph against an allow-list of row-wise operations, :mod:`pymc_dp.model_structure`,
and by a one-row probe, :func:`row_loglik` in :mod:`pymc_dp.row_graph`; see docs/data.md), and
the prior does not read row data (:func:`check_prior_reads_no_data`; the data-free prior is
:class:`PriorDensity`, :mod:`pymc_dp.prior`). Potentials are allowed only when they do not read
data (they are then part of the prior). Those names, and the others the package imports from
here, are re-exported from the modules below this one.

Rows are addressed on the flat unconstrained parameter vector θ, in the order of the value
variables given (sorted into model order), exactly as PyMC's ``RaveledVars`` lays it out.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.model import modelcontext
from pymc.pytensorf import compile as pm_compile
from pymc.pytensorf import join_nonshared_inputs, make_shared_replacements
from pymc.vartypes import continuous_types
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.replace import graph_replace

from pymc_dp._errors import withholds_chains
from pymc_dp.clip_graph import _is_matrix_product as _is_matrix_product
from pymc_dp.clip_graph import _linear_clipped_sum as _linear_clipped_sum
from pymc_dp.clip_graph import _toposort_nodes as _toposort_nodes
from pymc_dp.gradient_cost import COST_PROBE_ROWS, _graph_cost, is_numba, rewritten_graph
from pymc_dp.model_structure import (
    ModelStructureError,
    _is_n_mark,
    _row_axes,
    _row_inputs,
    data_dependent_deterministics,
    observed_rows,
    sorted_value_vars,
)
from pymc_dp.model_structure import _check_rowwise as _check_rowwise
from pymc_dp.model_structure import _check_rowwise_params as _check_rowwise_params
from pymc_dp.model_structure import _row_structure as _row_structure
from pymc_dp.prior import PriorDensity, check_prior_reads_no_data, prior_graph
from pymc_dp.row_graph import (
    _batch_placeholder,
    _indexable,
    _probe_points,
    _retyped,
    _synthetic_values,
    evaluate_rowwise,
    forward_jacobian,
    probe_row_count,
    reverse_jacobian,
    row_loglik,
)
from pymc_dp.row_graph import _perturbation_probe as _perturbation_probe

__all__ = [
    "ModelStructureError",
    "PriorDensity",
    "check_prior_reads_no_data",
    "data_dependent_deterministics",
    "evaluate_rowwise",
    "observed_rows",
    "row_loglik",
    "sorted_value_vars",
]

#: Default memory limit of one chunk of a full-data gradient pass, in bytes (256 MiB); see
#: :attr:`RowLikelihood.chunk_rows`. Change it here, or per object with ``chunk_bytes``.
CHUNK_BYTES = 256 * 2**20


def _value_of(var: Variable) -> np.ndarray:
    if isinstance(var, Constant):
        return np.asarray(var.data)
    if isinstance(var, SharedVariable):
        return np.asarray(var.get_value(borrow=True))
    return np.asarray(pytensor.function([], var)())


def _check_row_settings(gradient_mode: str, chunk_bytes: int | None) -> None:
    """Refuse a bad ``gradient_mode`` or ``chunk_bytes`` of :class:`RowLikelihood`, naming it (public settings only)."""
    if gradient_mode not in ("auto", "forward", "reverse"):
        raise ValueError(f"`gradient_mode` must be 'auto', 'forward' or 'reverse'. Found {gradient_mode!r}.")
    if chunk_bytes is not None and (
        isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int | np.integer) or chunk_bytes <= 0
    ):
        raise ValueError(f"`chunk_bytes` must be a positive integer number of bytes or None. Found {chunk_bytes!r}.")


class RowLikelihood:
    """Per-row log-likelihood and gradients of a PyMC model.

    All functions take the flat unconstrained parameter vector θ of ``vars`` (sorted into
    model order) and an optional index array of rows; the other value variables are read
    from ``shared_inputs`` (the shared variables an ``ArrayStepShared`` keeps up to date).
    Nothing is recompiled between calls, whatever the subset.

    Parameters
    ----------
    model : pm.Model, optional
        Taken from the context if omitted.
    vars : list, optional
        Parameters to differentiate with respect to (RVs or value variables). Default: all
        value variables.
    shared_inputs : dict, optional
        Value variable → shared variable for every value variable not in ``vars``. Default:
        shared variables holding ``initial_point``.
    initial_point : dict, optional
        Used for shapes and for the default ``shared_inputs``.
    compile_kwargs : dict, optional
        Passed to ``pymc.pytensorf.compile`` (e.g. ``{"mode": "FAST_COMPILE"}``).
    neighbouring : {"substitute", "add_remove"}, default "substitute"
        The relation of the mechanisms built on these rows. Under add/remove N is private:
        a per-row log-likelihood that depends on the number of rows is refused and no
        message shows N (:func:`row_loglik`).
    gradient_mode : {"auto", "forward", "reverse"}, default "auto"
        How the per-row gradient matrix is computed (see the property :attr:`gradient_mode`).
    reproducible : bool, default False
        Resolve ``gradient_mode="auto"`` to forward mode, so that two runs take the same
        arithmetic path and give bit-identical results on any PyTensor version and backend.
        Set by the step methods and DPADVI when ``reproducible_noise=True``: the two modes
        agree only to rounding, and the cost model's choice may differ between backends.
    chunk_bytes : int, optional
        Memory limit of one chunk of a full-data gradient pass (default :data:`CHUNK_BYTES`).

    Attributes
    ----------
    n_rows : int
        N, the length of the shared row axis.
    n_params : int
        Length of θ.
    row_dim : str or None
        Name of the row dimension when the observed variables have dims.
    subset_mode : {"index", "slice"}
        "index": a subset of B rows gathers those rows of every row-indexed array and
        computes B terms, O(B), whether the rows are ``pm.Data`` containers or numpy arrays
        baked into the graph (``observed=np.array``, ``X @ beta``, ``alpha[group_idx]``: they
        are wrapped as indexable inputs, without a copy). "slice" only when the graph fixes
        the number of rows in a shape or (numpy rows) reads it other than as a shape (see
        :meth:`_build_index_mode`): a subset is then computed on all rows and sliced.

    Raises
    ------
    ModelStructureError
        For models that cannot be split into rows; the message names the variable (and the
        operation, for graphs that mix rows). Construction builds the per-row graph with
        :func:`row_loglik` (parameter checks row by row, allow-list walk, one-row
        perturbation probe) and runs :func:`check_prior_reads_no_data`; in index mode a
        subset that differs from the same rows of the full vector, or a graph that cannot be
        evaluated on a subset for any other reason than a fixed row count, is also an error.

    Notes
    -----
    The per-row gradient matrix is computed in forward mode (one Jacobian-vector product
    vectorised over the P unit tangents) or in reverse mode (one row's log-likelihood with a
    per-row copy of θ, vectorised over the rows: what ``vmap(grad(row_loglik))`` does),
    whichever a cost model of the two compiled graphs estimates cheaper (:attr:`gradient_mode`); in
    index mode one compiled function of θ and a batch of rows serves subsets, chunks and all
    rows. Full-data passes go in row chunks of at most :attr:`chunk_rows` rows (a memory
    limit, ``chunk_bytes`` or :data:`CHUNK_BYTES`), so no more than one chunk's per-row matrix
    exists at a time. ``pytensor.gradient.jacobian`` (quadratic in N) is never used. Figures:
    docs/data.md and ``benchmarks/bench_data_layer.py``.
    """

    @withholds_chains
    def __init__(
        self,
        model=None,
        vars: Sequence | None = None,
        shared_inputs: dict | None = None,
        *,
        initial_point: dict[str, np.ndarray] | None = None,
        compile_kwargs: dict[str, Any] | None = None,
        neighbouring: str = "substitute",
        gradient_mode: str = "auto",
        chunk_bytes: int | None = None,
        reproducible: bool = False,
    ) -> None:
        _check_row_settings(gradient_mode, chunk_bytes)
        # pm.compile keeps or removes parameter checks by the model context open when it runs (not by
        # `model`): recorded, so that another backend compiles these graphs as they are compiled here.
        try:
            self.check_bounds = bool(modelcontext(None).check_bounds)
        except TypeError:  # no model context: pm.compile keeps the checks
            self.check_bounds = True
        model = modelcontext(model)
        self.model = model
        self.value_vars = sorted_value_vars(model, vars)
        if not self.value_vars:
            raise ValueError("`vars` must name at least one free variable of the model. Found none.")
        initial_point = model.initial_point() if initial_point is None else initial_point
        if shared_inputs is None:
            shared_inputs = make_shared_replacements(initial_point, self.value_vars, model)
        self._compile_kwargs = dict(compile_kwargs or {})

        # Row-wise checks, walk and perturbation probe (row_loglik); then the prior and potentials.
        # The construction probes run at a public point (PyMC's default, initvals ignored), never at
        # `initial_point`, which may hold an initval= computed from the data.
        lik, self.n_rows, self.row_dim, row_data = row_loglik(model, neighbouring=neighbouring)
        self.neighbouring = neighbouring
        check_prior_reads_no_data(model, self.n_rows)
        prior = prior_graph(model)  # data-free: checked

        [lik_flat, prior_flat], theta = join_nonshared_inputs(
            point=initial_point, outputs=[lik, prior], inputs=self.value_vars, shared_inputs=shared_inputs
        )
        self._theta = theta
        self.n_params = int(sum(np.asarray(initial_point[v.name]).size for v in self.value_vars))
        self._continuous = all(v.dtype in continuous_types for v in self.value_vars)

        # Full-data functions.
        self._f_lik = self._compile([theta], lik_flat)
        self._f_prior = self._compile([theta], prior_flat)
        self._prior_flat = prior_flat
        self._lik_flat = lik_flat
        self._f_grad_full = None

        # Index-subset functions, when every row-indexed array is a shared variable; built on
        # first use so that full-data samplers never compile them.
        self._rows_input = pt.lvector("rows")
        self._subset_mode: str | None = None
        self._f_lik_idx = None
        self._f_grad_batch = None
        # The two modes agree only to rounding, and the cost model's choice may differ between PyTensor
        # versions and backends: reproducible noise keeps the one arithmetic path it always had.
        self._gradient_mode_setting = "forward" if reproducible and gradient_mode == "auto" else gradient_mode
        self._gradient_mode: str | None = None
        self._gradient_mode_costs: dict[str, float] = {}  # per row, by mode (_choose_gradient_function)
        self._chunk_bytes = None if chunk_bytes is None else int(chunk_bytes)
        self._f_ratio_batch = None
        self._f_clipped_sum = None
        self._f_clipped_sum_safe = None
        self._clipped_sum_mode: str | None = None
        self._row_data_vars = row_data
        # The row data as indexable inputs and the per-row graph on them (_build_index_mode
        # wraps numpy constants: observed values, covariates, group indices baked into the graph).
        self._row_index_vars = list(row_data)
        self._lik_index = lik_flat
        self._row_dim_length = None
        if self.row_dim is not None and isinstance(model.dim_lengths.get(self.row_dim), SharedVariable):
            self._row_dim_length = model.dim_lengths[self.row_dim]
        self._theta_initial = self._flat_initial(initial_point)
        self.prior = PriorDensity(
            value_vars=self.value_vars,
            n_rows=self.n_rows,
            row_dim=self.row_dim,
            initial_theta=self._theta_initial,
            theta=theta,
            graph=prior_flat,
            f_prior=self._f_prior,
            continuous=self._continuous,
            compile_kwargs=self._compile_kwargs,
        )

    @property
    def subset_mode(self) -> str:
        """ "index" when a subset of B rows costs O(B), else "slice" (computed on all rows, then sliced)."""
        if self._subset_mode is None:
            self._subset_mode = "slice"
            if self._row_data_vars:
                self._build_index_mode()
        return self._subset_mode

    @property
    def _all_pm_data(self) -> bool:
        return all(isinstance(d, SharedVariable) for d in self._row_data_vars)

    def _index_numpy_rows(self) -> bool:
        """Turn numpy row constants into indexable inputs (``_lik_index``); False if it cannot be done.

        The graph is first simplified (PyTensor's ``canonicalize``: with constant rows, PyMC's
        logp broadcasts to a shape folded to the constant N, which the simplification drops
        where it is provably the row data's own shape), then every array with a row axis of
        length N — the constants the user passed and any constant folded from them — is
        wrapped, without a copy, in a shared variable whose row axis has no fixed length. It
        cannot be done when the graph then reads N other than to set a shape (the walk of
        add/remove neighbours, :func:`_row_axes`): indexed by a batch, it would read B.
        """
        from pytensor.graph.fg import FunctionGraph
        from pytensor.graph.rewriting.utils import rewrite_graph

        try:
            fgraph = FunctionGraph(outputs=[self._lik_flat], clone=True, copy_inputs=False, copy_orphans=False)
            [graph] = rewrite_graph(fgraph, include=("canonicalize",)).outputs
            data = _row_inputs([graph], self.n_rows, [])
            index_vars = [_indexable(d, k) for k, d in enumerate(data)]
            lik_index = _retyped(graph, dict(zip(data, index_vars, strict=True)))
            n_roots = [self._row_dim_length] if self._row_dim_length is not None else []
            [axis] = _row_axes([lik_index], index_vars, "", True, n_roots)
        except Exception:  # any failure: subsets are computed on all rows, as before
            return False
        if _is_n_mark(axis) or axis != 0 or not index_vars:
            return False
        self._row_index_vars, self._lik_index = index_vars, lik_index
        return True

    def _build_index_mode(self) -> None:
        """Compile the O(B) subset function and check it against the full vector; else slice mode.

        The subset-vs-slice probe evaluates rows ``[0, N - 1]`` through the index path at two
        parameter points and compares them with the same rows of the full vector, all on
        synthetic rows of the data's shapes and types (:func:`_synthetic_rows`), never on the
        data: whether the index path is used, or the model refused, depends on the graph alone.
        With numpy row arrays the full vector is the index path on all rows (the full graph
        holds the data as constants).

        When every row-indexed array is a ``pm.Data`` container, a difference is a
        :class:`ModelStructureError`, and exactly one case falls back to slice mode: the graph
        fixes the number of rows in a shape (``pt.specify_shape(x, (N,))``, a reshape to a
        constant shape), so that a strict subset cannot be evaluated, while the index path on
        *all* rows evaluates and equals the full vector (checked). Slice mode then computes
        every subset on all rows, which that check covers. Any other failure (the graph cannot
        be re-indexed or compiled, or fails on all rows too) is a :class:`ModelStructureError`
        naming only the error's type: its text may hold values.

        When some row data are numpy constants (``observed=np.array``, a covariate array), N is
        a constant of the graph the user wrote, and the model was accepted with it. The index
        path is used when it provably computes what the full vector does: the graph reads N
        only to set shapes (the walk of add/remove neighbours, :func:`_row_axes`) and the
        probe agrees. Otherwise, or if it cannot be built or evaluated, every subset is
        computed on all rows and sliced (slice mode), as before.
        """
        from pymc_dp.starts import public_initial_point

        lenient = not self._all_pm_data
        if lenient and not self._index_numpy_rows():
            return
        replace = {v: v[self._rows_input] for v in self._row_index_vars}
        if self._row_dim_length is not None:
            dim_length = self._row_dim_length
            replace[dim_length] = pt.cast(self._rows_input.shape[0], dim_length.dtype)
        try:
            lik_idx = graph_replace(self._lik_index, replace, strict=False)
            f_idx = self._compile([self._theta, self._rows_input], lik_idx)
        except Exception as error:  # any failure to build: refused, its text withheld
            failure = error
        else:
            failure = None
        if failure is not None:  # raised outside the handler: nothing chains to the withheld error
            if lenient:
                return
            raise self._not_indexable(failure)
        points = _probe_points([self._flat_initial(public_initial_point(self.model))])
        n_probe = probe_row_count(self._row_index_vars, self.n_rows, f_idx if lenient else self._f_lik, points, lenient)
        probe, everything = np.array([0, n_probe - 1], dtype=np.int64), np.arange(n_probe, dtype=np.int64)
        fixed_length = False
        # On synthetic rows (probe_row_count): the index path's use or refusal depends on the graph, never the data.
        with _synthetic_values(self._row_index_vars, n_probe), np.errstate(all="ignore"):
            for [theta] in points:
                theta = np.asarray(theta, dtype=np.float64)
                try:
                    # With numpy rows the full graph holds the data as constants: the index path on all
                    # rows stands in for it (the walk proved it reads N only to set shapes).
                    full = np.asarray(self._f_lik(theta) if not lenient else f_idx(theta, everything))
                except Exception:  # not evaluable on the synthetic rows here (data-free): nothing to compare
                    continue
                try:
                    subset = np.asarray(f_idx(theta, probe))
                except (AssertionError, ValueError):  # the documented case, if all rows evaluate (below)
                    fixed_length, subset = True, full[probe]
                except Exception as error:  # not the documented case: refused, text withheld
                    failure = error
                else:
                    failure = None
                if failure is not None:
                    if lenient:
                        return
                    raise self._not_indexable(failure)
                try:
                    all_rows = np.asarray(f_idx(theta, everything))
                except Exception as error:  # not the documented case: refused, text withheld
                    failure = error
                if failure is not None:
                    if lenient:
                        return
                    raise self._not_indexable(failure)
                if not (
                    np.allclose(subset, full[probe], equal_nan=True) and np.allclose(all_rows, full, equal_nan=True)
                ):
                    if lenient:
                        return
                    raise ModelStructureError(
                        "The log-likelihood of a subset of rows differs from the same rows computed on all rows: the "
                        "likelihood is not computed row by row, or it reads the number of rows from a shape or a "
                        "dim length (a subset has fewer rows). See docs/data.md; with the row arrays passed as numpy "
                        "arrays such a subset is computed on all rows."
                    )
        if fixed_length:  # the graph fixes the row count: every subset is computed on all rows and sliced
            return
        self._f_lik_idx, self._subset_mode = f_idx, "index"

    @staticmethod
    def _not_indexable(error: BaseException) -> ModelStructureError:
        return ModelStructureError(
            f"The log-likelihood cannot be evaluated on a subset of rows ({type(error).__name__} while indexing the "
            "row data; its message is withheld, it may hold data values). Only a graph that fixes the number of rows "
            "in a shape falls back to computing every subset on all rows (see docs/data.md); with the row arrays "
            "passed as numpy arrays a subset that cannot be indexed is computed on all rows."
        )

    # -- construction helpers -------------------------------------------------------------
    def _compile(self, inputs, outputs):
        fn = pm_compile(inputs, outputs, **self._compile_kwargs)
        fn.trust_input = True
        return fn

    def _flat_initial(self, initial_point) -> np.ndarray:
        return np.concatenate([np.asarray(initial_point[v.name], dtype=float).ravel() for v in self.value_vars])

    def _check_theta(self, theta: np.ndarray) -> np.ndarray:
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (self.n_params,):
            raise ValueError(f"`theta` must be a flat vector of length {self.n_params}. Found shape {theta.shape}.")
        return theta

    def _check_rows(self, rows) -> np.ndarray:
        rows = np.asarray(rows)
        if rows.ndim != 1 or not np.issubdtype(rows.dtype, np.integer):
            raise ValueError(f"`rows` must be a 1-d integer index array. Found dtype {rows.dtype}, shape {rows.shape}.")
        if rows.size and (rows.min() < 0 or rows.max() >= self.n_rows):  # N is not shown: private under add/remove
            raise ValueError("`rows` must index rows of the data (0 <= index < N). Found an index out of that range.")
        return rows.astype(np.int64, copy=False)

    def _require_continuous(self) -> None:
        if not self._continuous:
            names = [v.name for v in self.value_vars if v.dtype not in continuous_types]
            raise ValueError(f"Gradients need continuous parameters. Found discrete: {names}.")

    # -- public evaluation ----------------------------------------------------------------
    def loglik_rows(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Per-row log-likelihood, shape (N,) or (len(rows),). Raw data: pass it to a mechanism."""
        theta = self._check_theta(theta)
        if rows is None:
            return self._full_loglik(theta)
        rows = self._check_rows(rows)
        if self.subset_mode == "index":
            return evaluate_rowwise(self._f_lik_idx, [theta], [rows], tail=(), summed=False)
        return self._full_loglik(theta)[rows]

    def _full_loglik(self, theta: np.ndarray) -> np.ndarray:
        """All rows' log-likelihoods; in index mode a row that cannot be evaluated is NaN (:func:`evaluate_rowwise`).

        In slice mode (the graph fixes N in a shape) no row can be evaluated on its own, and
        an error raised by the data ends the run (docs/privacy.md, "What the guarantee does
        not cover").
        """
        try:
            return np.asarray(self._f_lik(theta))
        except Exception:
            if self.subset_mode != "index":
                raise
        everything = np.arange(self.n_rows, dtype=np.int64)
        return evaluate_rowwise(self._f_lik_idx, [theta], [everything], tail=(), summed=False)

    def grad_rows(self, theta: np.ndarray, rows: np.ndarray | slice | None = None) -> np.ndarray:
        """Per-row gradient matrix (B, P) of the log-likelihood w.r.t. θ. Raw data: pass it to a mechanism.

        ``rows`` is an index array, a slice of rows (one of :meth:`row_chunks`: in index mode
        a view of the row data, not a copy) or None for all rows. Computed in the
        :attr:`gradient_mode` chosen for the model.
        """
        self._require_continuous()
        theta = self._check_theta(theta)
        if isinstance(rows, slice):
            rows = self._check_slice(rows)
        elif rows is not None:
            rows = self._check_rows(rows)
        if self.subset_mode == "index":
            self.warm_gradient()
            if rows is None:
                data = [v.get_value(borrow=True) for v in self._row_index_vars]
            elif isinstance(rows, slice):
                data = [v.get_value(borrow=True)[rows] for v in self._row_index_vars]
            else:
                data = self._gather(rows)
            return evaluate_rowwise(self._f_grad_batch, [theta], data, tail=(self.n_params,), summed=False)
        self.warm_gradient()
        jac = np.asarray(self._f_grad_full(theta))
        return jac if rows is None else jac[rows]

    def row_chunks(self, rows: np.ndarray | None = None) -> list[slice] | list[np.ndarray]:
        """Row selections whose per-row gradient matrices each fit the memory limit.

        For all rows (``rows=None``) contiguous slices; for an index array, consecutive
        pieces of it. Each chunk holds at most :attr:`chunk_rows` rows. A chunk is a row
        selection only (no data); pass it to :meth:`grad_rows`. In slice mode (the graph
        fixes N) all rows are one chunk: a subset cannot be evaluated on its own.
        """
        size = self.chunk_rows
        if rows is None:
            if self.subset_mode != "index":
                return [slice(0, self.n_rows)]
            return [slice(start, min(start + size, self.n_rows)) for start in range(0, self.n_rows, size)]
        rows = self._check_rows(rows)
        return [rows[start : start + size] for start in range(0, rows.size, size)] or [rows]

    @property
    def chunk_rows(self) -> int:
        """Rows per chunk of a full-data pass: the memory limit ÷ the bytes of one row's gradient work.

        One row costs 8 bytes × P × 4 (the per-row gradient matrix and the intermediates of
        its graph that have its size) plus the row's data; the limit is ``chunk_bytes``
        (default :data:`CHUNK_BYTES`, 256 MiB). At least 64 rows.
        """
        limit = CHUNK_BYTES if self._chunk_bytes is None else self._chunk_bytes
        _ = self.subset_mode  # the row data as indexed
        data_bytes = sum(_value_of(v)[:1].nbytes for v in self._row_index_vars)
        per_row = 8 * self.n_params * 4 + data_bytes
        return max(64, int(limit // per_row))

    def _check_slice(self, rows: slice) -> slice:
        start, stop, step = rows.indices(self.n_rows)
        if step != 1 or rows.start is None or rows.stop is None or not 0 <= start <= stop <= self.n_rows:
            raise ValueError("`rows` as a slice must be `slice(start, stop)` within the rows. Found another slice.")
        return slice(start, stop)

    def loglik_grad_rows(self, theta: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per-row log-likelihood (B,) and gradient matrix (B, P) w.r.t. θ. Raw data.

        Two compiled functions, not one: returning the log-likelihood from the Jacobian's
        graph stops PyTensor from fusing it and costs more than computing it separately.
        """
        return self.loglik_rows(theta, rows), self.grad_rows(theta, rows)

    def loglik_ratio_rows(self, theta: np.ndarray, theta_new: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Per-row log-likelihood ratios log p(xᵢ | θ′) − log p(xᵢ | θ) on ``rows``. Raw data.

        In "index" mode the rows are gathered once and both points evaluated on them in one
        compiled call (the gather from a large data set dominates the cost of a small batch).
        """
        theta, theta_new = self._check_theta(theta), self._check_theta(theta_new)
        rows = self._check_rows(rows)
        if self.subset_mode != "index":
            return self._full_loglik(theta_new)[rows] - self._full_loglik(theta)[rows]
        if self._f_ratio_batch is None:
            self._f_ratio_batch = self._compile_batch_ratio()
        return evaluate_rowwise(self._f_ratio_batch, [theta, theta_new], self._gather(rows), tail=(), summed=False)

    def _gather(self, rows: np.ndarray) -> list[np.ndarray]:
        """The row-indexed arrays at ``rows`` (``np.take``: about 4x faster than fancy indexing)."""
        return [np.take(v.get_value(borrow=True), rows, axis=0) for v in self._row_index_vars]

    def _batch_graph(self) -> tuple[list[Variable], Variable]:
        """Placeholders for gathered batches of the row data, and the per-row graph on them."""
        batch = [_batch_placeholder(v) for v in self._row_index_vars]
        replace = dict(zip(self._row_index_vars, batch, strict=True))
        if self._row_dim_length is not None:
            replace[self._row_dim_length] = pt.cast(batch[0].shape[0], self._row_dim_length.dtype)
        return batch, graph_replace(self._lik_index, replace, strict=False)

    def _compile_batch_ratio(self):
        """Ratio of the log-likelihood at two points on a gathered batch of rows."""
        batch, lik_batch = self._batch_graph()
        theta_new = self._theta.type("theta_new")
        ratio = graph_replace(lik_batch, {self._theta: theta_new}, strict=False) - lik_batch
        return self._compile([self._theta, theta_new, *batch], ratio)

    def warm_gradient(self) -> None:
        """Build the per-row gradient function now (raises if the likelihood is not differentiable).

        In index mode this chooses :attr:`gradient_mode` (``"auto"``: a cost model, see there)
        and compiles one function of θ and a batch of rows, used for subsets, chunks and all
        rows alike; in slice mode the all-rows forward-mode Jacobian.
        """
        self._require_continuous()
        if self.subset_mode == "index":
            if self._f_grad_batch is None:
                self._gradient_mode, self._f_grad_batch = self._choose_gradient_function()
        elif self._f_grad_full is None:
            self._gradient_mode = "forward"
            self._f_grad_full = self._compile_forward_grad()

    @property
    def gradient_mode(self) -> str:
        """How the per-row gradient matrix is computed: ``"forward"`` or ``"reverse"`` (chosen on first use).

        - ``"forward"``: one Jacobian-vector product vectorised over the P unit tangents; its
          cost is about P passes through the tangent graph, cheap where θ enters through a dot
          product (GLMs).
        - ``"reverse"``: about one reverse pass (triangular solves, special functions): on Numba, where θ
          meets the rows only elementwise, PyMC's own gradient of Σᵢ ℓᵢ before its sum, taken at per-row
          copies of those broadcasts; otherwise ``vmap(grad(row_loglik))`` (:func:`~.row_graph.reverse_jacobian`).

        ``gradient_mode="auto"`` (the default) rewrites both as a compile would (no code built)
        and compiles the one a cost model estimates cheaper per row (forward on a tie): the
        elementary operations of every node of each rewritten graph, from its op and the
        backend (elementwise scalar ops weighted by kind, and in C by the inputs read; matrix
        products and solves by their multiply-adds; a ``BatchedDot`` or ``Blockwise`` loop per
        iteration; views free) and its shapes, which PyTensor's shape
        inference gives for a batch of :data:`COST_PROBE_ROWS` rows of zeros (data-free inputs
        of the data's shapes and types). Nothing is timed and no data value is read, so the
        same model gets the same mode on any machine and under any load. The reverse form is
        dropped if it cannot be built, compiled or run on that batch, or warns (an op without a
        vectorised form); if the cost of either cannot be estimated, forward mode. Slice mode
        is always forward. Both give the same matrix (tested to 1e-10), but only to rounding:
        with ``reproducible=True`` (reproducible noise) ``"auto"`` is forward mode, so that
        reruns are bit-identical. Figures: ``benchmarks/gradient_modes.py``.
        """
        self.warm_gradient()
        return self._gradient_mode

    def _choose_gradient_function(self):
        """(mode, compiled function of θ and a batch of rows) for the per-row gradient matrix.

        ``"auto"``: the mode whose graph, rewritten as a compile would rewrite it but not compiled
        (:func:`~pymc_dp.gradient_cost.rewritten_graph`), :func:`_graph_cost` estimates cheaper per
        row (:attr:`_gradient_mode_costs`), forward on a tie; never timed, so the same model gives
        the same mode on any machine and under any load; only the chosen mode is compiled. Reverse
        falls back to forward when it cannot be built, compiled or run on zeros, or warns.
        """
        setting = self._gradient_mode_setting
        if setting == "forward" or (setting == "auto" and self._estimated_cheaper_mode() == "forward"):
            return "forward", self._compile_batch_grad("forward")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # e.g. Numba's object mode for an op without a vectorised form
                reverse = self._compile_batch_grad("reverse")
                with np.errstate(all="ignore"):
                    reverse(self._public_theta(), *self._probe_batch(COST_PROBE_ROWS))
        except Exception:  # no reverse form for this graph: forward mode
            self._gradient_mode_costs = {}
            return "forward", self._compile_batch_grad("forward")
        return "reverse", reverse

    def _estimated_cheaper_mode(self) -> str:
        """The mode the cost model estimates cheaper per row (forward on a tie, or if reverse cannot be built)."""
        batch, lik_batch = self._batch_graph()
        inputs = [self._theta, *batch]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                graphs = {
                    "forward": rewritten_graph(inputs, self._forward_jacobian(lik_batch), self._compile_kwargs),
                    "reverse": rewritten_graph(inputs, self._reverse_jacobian(batch, lik_batch), self._compile_kwargs),
                }
        except Exception:  # no reverse form for this graph: forward mode
            return "forward"
        self._gradient_mode_costs = self._estimate_costs(graphs, self._public_theta())
        return "reverse" if self._gradient_mode_costs["reverse"] < self._gradient_mode_costs["forward"] else "forward"

    def _estimate_costs(self, graphs: Mapping[str, tuple[Any, str]], theta: np.ndarray) -> dict[str, float]:
        """Estimated elementary operations per row of each rewritten gradient graph (:func:`_graph_cost`).

        ``graphs``: mode → (rewritten graph, backend). The marginal cost of a row: the estimate
        on 2B rows of zeros less that on B rows (B = :data:`COST_PROBE_ROWS`), divided by B.
        Nodes whose work does not grow with the rows (shape checks, scalar pieces of θ) cancel:
        the graph can hold a few more or fewer of them depending on which constants PyTensor
        merged, and they must not tip the choice. An estimate that cannot be made (an op without
        shape inference or a Python implementation) is infinite for both modes, so that the
        choice falls to forward mode.
        """
        sizes = (COST_PROBE_ROWS, 2 * COST_PROBE_ROWS)
        probes = [[theta, *self._probe_batch(size)] for size in sizes]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                costs = {mode: _graph_cost(graph, probes, backend) for mode, (graph, backend) in graphs.items()}
        except Exception:
            return dict.fromkeys(graphs, np.inf)
        return {mode: (large - small) / COST_PROBE_ROWS for mode, (small, large) in costs.items()}

    def _public_theta(self) -> np.ndarray:
        """θ at PyMC's default initial point, every ``initval=`` ignored (never the data's)."""
        from pymc_dp.starts import public_initial_point

        return self._flat_initial(public_initial_point(self.model))

    def _probe_batch(self, size: int = COST_PROBE_ROWS) -> list[np.ndarray]:
        """Data-free inputs of the row data's shapes and types (zeros), for the cost model and compile checks."""
        return [np.zeros((size, *np.shape(v.get_value(borrow=True))[1:]), dtype=v.dtype) for v in self._row_index_vars]

    def _compile_batch_grad(self, mode: str):
        """Per-row gradient matrix of θ and a batch of rows, in forward or reverse mode."""
        batch, lik = self._batch_graph()
        jacobian = self._forward_jacobian(lik) if mode == "forward" else self._reverse_jacobian(batch, lik)
        return self._compile([self._theta, *batch], jacobian)

    def _reverse_jacobian(self, batch: Sequence[Variable], lik_batch: Variable) -> Variable:
        """(rows × P) reverse-mode Jacobian (:func:`pymc_dp.row_graph.reverse_jacobian`; on Numba its summed seed)."""
        numba = is_numba(self._compile_kwargs)
        return reverse_jacobian(batch, lik_batch, self._theta, self.n_params, summed_seed=numba)

    def _forward_jacobian(self, lik: Variable) -> Variable:
        """(rows × P) Jacobian of ``lik`` w.r.t. θ in forward mode (:func:`pymc_dp.row_graph.forward_jacobian`)."""
        return forward_jacobian(lik, self._theta, self.n_params)

    # -- clipped gradient sums ------------------------------------------------------------
    def clipped_grad_sum(self, theta: np.ndarray, bound: float, rows: np.ndarray | slice | None = None) -> np.ndarray:
        """Σᵢ clip_L2(∇θ log p(xᵢ | θ), bound) over ``rows``, shape (P,). Raw data: pass it to a mechanism.

        Equal to ``clipped_sum_l2(self.grad_rows(theta, rows), bound)``
        (:func:`pymc_dp.mechanisms.clipping.clipped_sum_l2`: each row's gradient scaled to L2
        norm at most ``bound``, rows with a non-finite gradient left out); for a model with a
        linear predictor in one compiled pass that never forms the per-row matrix
        (:attr:`clipped_sum_mode`). ``rows`` as for :meth:`grad_rows`; pass one of
        :meth:`row_chunks` at a time to bound memory.
        """
        from pymc_dp.clip_math import _check_bound, clipped_sum_l2

        self._require_continuous()
        theta = self._check_theta(theta)
        bound = _check_bound("bound", bound)
        if self.subset_mode != "index":
            return clipped_sum_l2(self.grad_rows(theta, rows), bound)
        if isinstance(rows, slice):
            data = [v.get_value(borrow=True)[self._check_slice(rows)] for v in self._row_index_vars]
        elif rows is None:
            data = [v.get_value(borrow=True) for v in self._row_index_vars]
        else:
            data = self._gather(self._check_rows(rows))
        if self._clipped_sum_mode is None:
            self._clipped_sum_mode, self._f_clipped_sum = self._choose_clipped_sum_function()
        tail = (self.n_params,)
        if self._f_clipped_sum is None:
            return clipped_sum_l2(evaluate_rowwise(self._f_grad_batch, [theta], data, tail=tail, summed=False), bound)
        bound_arg = np.asarray(bound, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):  # inf × 0 from a left-out row: checked below
            total = evaluate_rowwise(self._f_clipped_sum, [theta, bound_arg], data, tail=tail, summed=True)
        if not np.all(np.isfinite(total)):  # a left-out row with a non-finite covariate: rows zeroed first
            if self._f_clipped_sum_safe is None:
                self._f_clipped_sum_safe = self._compile_linear_clipped_sum(safe=True)
            total = evaluate_rowwise(self._f_clipped_sum_safe, [theta, bound_arg], data, tail=tail, summed=True)
        return total

    @property
    def clipped_sum_mode(self) -> str:
        """How :meth:`clipped_grad_sum` computes the clipped sum (chosen from the graph on first use).

        - ``"linear"``: the model reads some parameter blocks only through products
          ``A @ w`` of row data ``A`` (B × K) with a block ``w`` of θ (``X @ beta``: GLMs,
          linear predictors). Row i's gradient with respect to such a block is
          gᵢ ⊗ Aᵢ, with gᵢ the row's gradient with respect to its own ``(A @ w)ᵢ``, so its
          squared norm is ‖gᵢ‖²‖Aᵢ‖² (the "ghost norm" of DP-SGD for linear layers); the
          other blocks get per-row copies (reverse mode, vectorised over rows). No (B × P)
          matrix is formed: one pass gives every row's gradient norm, hence its clip factor
          cᵢ, and the clipped sum, the vector–Jacobian product Σᵢ cᵢ ∇θ log p(xᵢ | θ), is
          assembled from the same per-row pieces in the same compiled function. Used when
          the blocks so read and the others are disjoint parts of θ (checked on the graph).
        - ``"forward"`` or ``"reverse"``: otherwise, the per-row gradient matrix of one chunk
          in :attr:`gradient_mode` (:meth:`grad_rows`), clipped and summed by
          :func:`~pymc_dp.mechanisms.clipping.clipped_sum_l2`.

        Both give :func:`pymc_dp.mechanisms.clipping.clipped_sum_l2` of :meth:`grad_rows`
        (tested to 1e-10). The choice depends on the graph only, never on data values.
        """
        if self.subset_mode != "index":
            self.warm_gradient()
            return self._gradient_mode
        if self._clipped_sum_mode is None:
            self._clipped_sum_mode, self._f_clipped_sum = self._choose_clipped_sum_function()
        return self._clipped_sum_mode

    def _choose_clipped_sum_function(self):
        """(mode, compiled function of θ, the bound and a batch of rows) for :meth:`clipped_grad_sum`."""
        self._require_continuous()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                fn = self._compile_linear_clipped_sum(safe=False)
                fn(self._theta_initial, np.asarray(1.0), *self._probe_batch(64))
            return "linear", fn
        except Exception:  # _NotLinear, or the linear form cannot be built or compiled here: the per-row matrix
            pass
        # The per-row matrix of the chunk, clipped and summed in NumPy: measured faster than the same
        # steps compiled into the matrix's graph (one more B × P temporary there).
        return self.gradient_mode, None

    def _compile_linear_clipped_sum(self, safe: bool):
        """The linear form of the clipped sum, a function of θ, the bound and a batch (:func:`_linear_clipped_sum`)."""
        bound = pt.dscalar("bound")
        batch, lik_batch = self._batch_graph()
        total = _linear_clipped_sum(self._theta, self.n_params, batch, lik_batch, bound, safe=safe)
        return self._compile([self._theta, bound, *batch], total)

    def _compile_forward_grad(self):
        """Full-data Jacobian in forward mode: one JVP vectorised over the P unit tangents."""
        return self._compile([self._theta], self._forward_jacobian(self._lik_flat))

    def prior_logp(self, theta: np.ndarray) -> float:
        """log prior + log|Jacobian| of the transforms (+ data-free potentials). Data-free."""
        return self.prior.prior_logp(theta)

    def prior_logp_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """:meth:`prior_logp` and its gradient w.r.t. θ. Data-free."""
        return self.prior.prior_logp_and_grad(theta)
