"""DPADVI on a Dask cluster: each partition's Poisson batch drawn and its clipped gradients summed on its worker.

DPADVI's release (:class:`pymc_dp.mechanisms.NoisyPoissonGradientSum`) is

    ĝ = (Σ_{i∈S} clip_C(gᵢ M) + ξ) / q,  ξ ~ N(0, σ²Δ² I),

over a Poisson batch S that holds every row independently with the public rate q. With
``DPADVI(..., backend=pmdp.DaskBackend(client))`` the rows are scattered to the workers once,
as for the steps (:class:`pymc_dp.backends.dask.ClusterRows`); at every iteration each worker
draws its partition's part of S (every one of its rows independently with probability q) from
a generator it seeds there from the operating system's entropy, computes the per-row gradients
of the sampled rows only, maps them to the variational parameters, clips and sums them, and
returns the partial sum (a vector of length D). The client adds the partials and the Gaussian
noise once, with the fit's generator, and divides by q: the release of the in-process
mechanism. Independent Bernoulli(q) draws per row, split over partitions, are Poisson sampling
of the whole data set: the sampling the accountant prices.

With ``reproducible_noise=True`` (testing only; do not publish) each partition's batch comes
from a seed the client draws, per partition and per iteration, from the fit's seeded
generator, so that a fit is reproducible; with q = 1 no seed is drawn and the release equals
the in-process one (to summation order) with the same noise.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from pymc_dp.backends.dask import ClusterRows, DaskRowMechanisms, _worker_function
from pymc_dp.data import evaluate_rowwise
from pymc_dp.mechanisms.histogram_mapped_gradient import NoisyMappedGradientNormHistogram, mapped_norm_counts
from pymc_dp.mechanisms.noise import mechanism_rng
from pymc_dp.mechanisms.poisson_gradient import NoisyPoissonGradientSum, clipped_mapped_gradient_sum
from pymc_dp.mechanisms.subsampling import poisson_sample

__all__ = ["DaskDPADVIMechanisms", "DaskMappedGradientNormHistogram", "DaskPoissonGradientSum", "dask_dpadvi_record"]

#: The modules of DPADVI's worker tasks: every worker imports them in its warm-up, before the charge.
DPADVI_WORKER_MODULES = ("pymc_dp.backends.dask_dpadvi", "pymc_dp.mechanisms.histogram_mapped_gradient")

#: Sent instead of a seed: the worker seeds its partition's batch generator from its own OS entropy.
OS_ENTROPY = None


# -- worker side ---------------------------------------------------------------------------------
def poisson_gradient_partial(
    spec, partition, thetas, jacobians, params, bound: float, rate: float, seed: int | None, chunk_rows: int
) -> np.ndarray:
    """Σ_{i∈S_k} clip_L2(mean_s gᵢ(θ_s) M_s, bound) over one partition's Poisson batch S_k: a vector of length D.

    Runs on the worker that holds ``partition``. S_k holds each of the partition's rows
    independently with probability ``rate``; it is drawn here, from a generator seeded with
    the OS's entropy (``seed`` None) or with the client's ``seed`` (reproducible noise), and
    never leaves the worker: only the clipped sum does. ``rate`` 1 takes every row (nothing
    drawn). The per-row gradients are those of the step backend's gradient graph (``spec``),
    computed on the batch's rows only, in chunks of at most ``chunk_rows`` rows.
    """
    n_rows = partition[0].shape[0]
    size = jacobians[0].shape[1]
    total = np.zeros(size)
    if rate == 1.0:
        pieces = [slice(start, start + chunk_rows) for start in range(0, n_rows, chunk_rows)]
    else:
        rng = mechanism_rng(None, reproducible=False) if seed is OS_ENTROPY else np.random.default_rng(seed)
        batch = poisson_sample(rng, n_rows, rate)
        pieces = [batch[start : start + chunk_rows] for start in range(0, batch.size, chunk_rows)]
    fn = _worker_function(*spec)
    tail = (thetas.shape[1],)
    for piece in pieces:
        gradients = partial(_rows_gradients, fn, params, [a[piece] for a in partition], tail)
        total += clipped_mapped_gradient_sum(gradients, thetas, jacobians, bound)  # as the in-process release
    return total


def mapped_norm_partial(spec, partition, draw_sets, params, chunk_rows: int) -> np.ndarray:
    """The clipping check's histogram weights over one partition (:func:`mapped_norm_counts`, in chunks).

    Runs on the worker that holds ``partition``; only the fixed-size vector of weights
    (each row's sum to 1) comes back.
    """
    fn = _worker_function(*spec)
    tail = (draw_sets[0][0].shape[1],)
    n_rows = partition[0].shape[0]
    total = None
    for start in range(0, n_rows, chunk_rows):
        piece = slice(start, start + chunk_rows)
        gradients = partial(_rows_gradients, fn, params, [a[piece] for a in partition], tail)
        part = mapped_norm_counts(gradients, draw_sets)
        total = part if total is None else total + part
    return total


def _rows_gradients(fn, params, data, tail, theta) -> np.ndarray:
    """The per-row gradients (rows × P) of ``data`` at ``theta`` (worker side)."""
    return evaluate_rowwise(fn, [theta, *params], data, tail=tail, summed=False)


# -- client side ---------------------------------------------------------------------------------
def poisson_gradient_sum(
    cluster: ClusterRows, thetas: np.ndarray, jacobians: list[np.ndarray], bound: float, rate: float, seeds: list
) -> np.ndarray:
    """The partitions' clipped Poisson-batch sums, added here in partition order (nothing else comes back)."""
    spec = cluster._gradient_spec()
    params, chunk_rows = cluster._params(cluster._grad_shared), cluster._chunk_rows
    partials = cluster._map(
        poisson_gradient_partial,
        lambda k, part: (spec, part, thetas, jacobians, params, float(bound), float(rate), seeds[k], chunk_rows),
        "Poisson-subsampled clipped gradients",
    )
    return np.sum(partials, axis=0)


def mapped_norm_counts_on_cluster(cluster: ClusterRows, draw_sets) -> np.ndarray:
    """The partitions' clipping-check weights, added here in partition order (nothing else comes back)."""
    spec = cluster._gradient_spec()
    params, chunk_rows = cluster._params(cluster._grad_shared), cluster._chunk_rows
    sets = [(np.asarray(t, dtype=float), [np.asarray(m, dtype=float) for m in ms]) for t, ms in draw_sets]
    partials = cluster._map(
        mapped_norm_partial, lambda k, part: (spec, part, sets, params, chunk_rows), "the clipping check's counts"
    )
    return np.sum(partials, axis=0)


class DaskMappedGradientNormHistogram(NoisyMappedGradientNormHistogram):
    """:class:`NoisyMappedGradientNormHistogram` with each partition's weights computed by its worker.

    Notes
    -----
    Neighbouring relation: that of ``neighbouring``; Δ = √2 (substitute) or 1 (add/remove), as
    in process: each row's weights (non-negative, summing to 1) sit in one partition's
    partial, and the noise is added once, on the client.
    """

    def __init__(self, cluster: ClusterRows, noise_multiplier: float, neighbouring: str) -> None:
        super().__init__(cluster._rows, noise_multiplier, neighbouring)
        self._cluster = cluster

    def _counts(self, draw_sets) -> np.ndarray:
        return mapped_norm_counts_on_cluster(self._cluster, draw_sets)


class DaskPoissonGradientSum(NoisyPoissonGradientSum):
    """:class:`NoisyPoissonGradientSum` with each partition's batch drawn and summed by the worker that holds it.

    Releases ĝ = (Σ_{i∈S} clip_C(gᵢ) + ξ) / q, ξ ~ N(0, σ²Δ² I), as in process; S is the
    union of the partitions' Poisson batches, each drawn on its worker.

    Parameters
    ----------
    cluster : pymc_dp.backends.dask.ClusterRows
        The model's rows on the cluster.
    grad_clip, noise_multiplier, sampling_rate, neighbouring
        As for :class:`NoisyPoissonGradientSum`.
    reproducible : bool
        False: each worker seeds its batch generator from its own OS entropy at every
        release. True (testing only): the seeds come from the release's generator.

    Notes
    -----
    Neighbouring relation: that of ``neighbouring`` (substitute: one row replaced, N public;
    add/remove: one row added or removed), as in process. Every row joins S independently with
    probability q whichever partition holds it, so S is a Poisson sample of all N rows, the
    sampling :class:`pymc_dp.accounting.events.PoissonGaussianReleases` prices; the events
    (:meth:`NoisyPoissonGradientSum.events`) and σ are inherited unchanged. L2 sensitivity of the
    clipped sum 2C (substitute) or C (add/remove): one row changes at most its own clipped term,
    in one partition. ε covers ĝ alone: the partial sums and the batches never leave this
    object or the workers, and the batch size is not released (the expected batch qN divides).

    References
    ----------
    .. [1] Jälkö, J., Dikmen, O. and Honkela, A. (2017). Differentially private variational
       inference for non-conjugate models. UAI, Algorithm 1.
    .. [2] Abadi, M. et al. (2016). Deep learning with differential privacy. CCS, Algorithm 1.
    """

    def __init__(
        self,
        cluster: ClusterRows,
        grad_clip: float,
        noise_multiplier: float,
        sampling_rate: float,
        neighbouring: str,
        reproducible: bool,
    ) -> None:
        super().__init__(cluster._rows, grad_clip, noise_multiplier, sampling_rate, neighbouring)
        self._cluster = cluster
        self._reproducible = bool(reproducible)

    def _partition_seeds(self, rng: Any) -> list:
        """One seed per partition for this release: OS entropy on the workers, or (reproducible) from ``rng``."""
        n_parts = self._cluster.n_partitions  # public (settings, or the arrays' chunk sizes): known before a read
        if self.sampling_rate == 1.0 or not self._reproducible:  # q = 1 draws nothing, as in process
            return [OS_ENTROPY] * n_parts
        return [int(s) for s in rng.integers(0, 2**63 - 1, size=n_parts)]

    def release(self, theta_draws: np.ndarray, parameter_jacobians: list[np.ndarray], rng: Any) -> np.ndarray:
        """One noisy gradient estimate, shape (D,); arguments as :meth:`NoisyPoissonGradientSum.release`."""
        thetas = np.atleast_2d(np.asarray(theta_draws, dtype=float))
        jacobians = [np.asarray(m, dtype=float) for m in parameter_jacobians]
        seeds = self._partition_seeds(rng)
        clipped = poisson_gradient_sum(self._cluster, thetas, jacobians, self.grad_clip, self.sampling_rate, seeds)
        return (clipped + rng.normal(0.0, self.std, size=clipped.shape)) / self.sampling_rate


class DaskDPADVIMechanisms(DaskRowMechanisms):
    """:class:`DaskRowMechanisms` that also run DPADVI's Poisson-subsampled gradient on the workers.

    What :class:`pymc_dp.DPADVI` uses with ``backend=pmdp.DaskBackend(client)``: its gradient
    releases (:class:`DaskPoissonGradientSum`) and its clipping check (the histogram of the
    clipped quantity's norms, :class:`DaskMappedGradientNormHistogram`) are computed on the
    workers, the noise added here.
    """

    def poisson_gradient_sum(
        self, grad_clip: float, noise_multiplier: float, sampling_rate: float, neighbouring: str
    ) -> DaskPoissonGradientSum:
        """A :class:`DaskPoissonGradientSum` on the cluster's rows."""
        return DaskPoissonGradientSum(
            self._cluster, grad_clip, noise_multiplier, sampling_rate, neighbouring, self._reproducible
        )

    def mapped_gradient_histogram(self, noise_multiplier: float, neighbouring: str) -> DaskMappedGradientNormHistogram:
        """The clipping check's histogram (:class:`DaskMappedGradientNormHistogram`) on the cluster's rows."""
        return DaskMappedGradientNormHistogram(self._cluster, noise_multiplier, neighbouring)

    def close(self) -> None:
        """Release the partitions on the workers (the rows scattered for the fit)."""
        self._cluster.close()


def attach_dpadvi_rows(backend: Any, mechanisms: Any, reproducible: bool) -> DaskDPADVIMechanisms:
    """Scatter the rows of ``mechanisms`` (a :class:`RowMechanisms`) to ``backend``'s workers: releases nothing.

    For a model of row placeholders (:class:`pymc_dp.backends.dask_partitions.PlaceholderRowMechanisms`)
    nothing is scattered: the Dask arrays' blocks are computed where Dask places them at the
    first release, after the charge (:class:`~pymc_dp.backends.dask_blocks.PartitionedClusterRows`).

    Called by DPADVI before it charges a fit, so a cluster that cannot take the rows, or a
    worker that cannot import this module or compile and evaluate the gradient graph on a dummy
    row (:meth:`pymc_dp.backends.dask.ClusterRows.warm_up`), leaves the budget as it was.
    Refuses rows that cannot be partitioned (``ModelStructureError`` naming ``backend``).
    """
    if getattr(mechanisms, "arrays", None) is not None:  # a model of placeholders: the Dask arrays' own blocks
        from pymc_dp.backends.dask_blocks import PartitionedClusterRows

        cluster = PartitionedClusterRows(backend.client, mechanisms._rows, mechanisms.arrays, backend.timeout)
    else:
        cluster = ClusterRows(backend.client, mechanisms._rows, backend.partitions or 0, backend.timeout)
    try:  # the gradient graph shipped, this module imported and compiled on every worker: before the charge
        cluster.warm_up(gradient=True, modules=DPADVI_WORKER_MODULES)
    except BaseException:
        cluster.close()
        raise
    return DaskDPADVIMechanisms(mechanisms._rows, cluster, reproducible)


def check_dpadvi_rows(mechanisms: Any) -> None:
    """Refuse, before anything is scattered or charged, rows a Dask backend cannot partition (slice mode)."""
    from pymc_dp.data import ModelStructureError

    if mechanisms._rows.subset_mode != "index":
        raise ModelStructureError(
            "`backend` needs rows that can be partitioned (subset mode 'index'). Found a log-likelihood that fixes "
            "the number of rows in a shape (subset mode 'slice', see docs/data.md); fit it without a backend."
        )


def dask_dpadvi_record(backend: Any, reproducible: bool) -> dict[str, Any]:
    """The public description of a DPADVI fit's Dask backend (no data): where the batches are drawn."""
    import distributed

    rows = getattr(backend, "rows", None)
    return {
        "name": "dask",
        "partitions": backend.partitions,  # None: one per worker when the fit starts (or the rows' chunks)
        "rows": (
            "the client's model, scattered to the workers"
            if rows is None
            else f"Dask arrays {sorted(rows)}, each row chunk computed and kept where Dask places it"
        ),
        "workers": len(backend.client.scheduler_info()["workers"]),
        "timeout": backend.timeout,
        "distributed_version": distributed.__version__,
        "batches": (
            "Poisson, drawn per partition on the workers from seeds of the fit's seeded generator (reproducible)"
            if reproducible
            else "Poisson, drawn per partition on the workers from their OS entropy"
        ),
    }
