"""A Dask backend for the full-data mechanisms: rows on ``dask.distributed`` workers, noise on the client.

A model's rows are split into contiguous partitions and scattered once to the workers of a
:class:`distributed.Client`. Every worker compiles the in-process data layer's per-row functions
(shipped as a pickled PyTensor graph that holds no row) and returns for its partition only a
clipped sum: of log-likelihood ratios, of L2-clipped gradients, or the score norms' fixed-size
histogram (the workers' tasks and the client's handle on the rows: :mod:`pymc_dp.backends.dask_cluster`).
The client adds the partition sums and the noise once, as the in-process mechanisms here do: the
sensitivity, the events and the accounting are unchanged. Users reach it through
:func:`pymc_dp.sample` (``backend=pmdp.DaskBackend(client)``; docs/dask.md). Released statistics
of Dask arrays: :mod:`pymc_dp.backends.dask_rows`; DPADVI's Poisson batches drawn on the workers:
:mod:`pymc_dp.backends.dask_dpadvi`; on Dask arrays' own blocks (:mod:`pymc_dp.backends.dask_blocks`)
DPADVI (:mod:`pymc_dp.backends.dask_partitions`) and the samplers (:mod:`pymc_dp.backends.dask_sampler_rows`).
``dask[distributed]`` is an optional dependency (the ``dask`` extra), imported only when used.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pymc_dp._validation import check_one_core
from pymc_dp.backends.dask_cluster import (  # noqa: F401  (re-exported: the cluster side's names, as before)
    _OS_ENTROPY,
    _TASKS,
    ClusterRows,
    DaskBackendError,
    WorkerError,
    _import_distributed,
    _run_task,
    _worker_function,
)
from pymc_dp.mechanisms.access import RowMechanisms
from pymc_dp.mechanisms.clip_bound import NoisyScoreNormHistogram
from pymc_dp.mechanisms.gradient import NoisyClippedGradient
from pymc_dp.mechanisms.log_likelihood_ratio import NoisyLogLikelihoodRatio
from pymc_dp.mechanisms.noise import clipped_sum_noise_std
from pymc_dp.mechanisms.owners import OwnerLogLikelihoodRatio

__all__ = ["DaskBackend", "DaskBackendError", "DaskRowMechanisms"]

#: The step methods whose releases the backend computes on the cluster (by class name).
SUPPORTED_STEPS = ("DPPenaltyMH", "DPHMC", "DPMultiOwnerPenaltyMH")


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
        if self.reads_partitioned_rows and not getattr(cluster, "holds_partitioned_rows", False):
            self._rows_here()  # rows scattered from this process: the stand-ins' zeros; refused, naming `backend`
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
        For :class:`~pymc_dp.DPADVI`, DPPenaltyMH and DPHMC: the Dask arrays, by role (``{"X": X, "y": y}``),
        of the model's :func:`~pymc_dp.row_placeholder` stand-ins (steps built in
        :func:`~pymc_dp.backends.dask_sampler_rows.sampler_model`); each block is computed and kept where
        Dask places it (``partitions`` must be None: the partitions are the row chunks). Metadata only.

    Notes
    -----
    Supported steps: :class:`~pymc_dp.DPPenaltyMH` (full-data log-likelihood ratios),
    :class:`~pymc_dp.DPHMC` (clipped gradients and the ratio of its accept test),
    :class:`~pymc_dp.DPMultiOwnerPenaltyMH` (each owner's rows pinned to one worker, which adds
    the owner's noise from a generator drawn there from its OS entropy) and the private clip
    bound (``"auto"`` bounds). Others (DPBarkerMH, DPSuffStatsPenaltyMH, DPADVI starts, and with
    ``rows`` all but DPPenaltyMH and DPHMC) are refused before anything is planned, naming ``backend``. DPADVI runs
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
        if self.rows is not None:  # DPPenaltyMH, DPHMC built in dask_sampler_rows.sampler_model's copy
            from pymc_dp.backends.dask_sampler_rows import check_sampler_steps

            check_sampler_steps(self.rows, steps)
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
        for step in steps:
            if step._row_mechanisms._rows.subset_mode != "index":
                from pymc_dp.data import ModelStructureError

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
        from pymc_dp.backends.dask_sampler_rows import partitioned_cluster

        clusters, swapped = [], []
        try:
            for step in steps:
                mechanisms = step._row_mechanisms
                args = (self.client, mechanisms._rows, self.partitions or 0, self.timeout)  # rows: the arrays' blocks
                cluster = ClusterRows(*args) if self.rows is None else partitioned_cluster(self, mechanisms._rows)
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
