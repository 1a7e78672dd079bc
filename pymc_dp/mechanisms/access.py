"""The route from a step method or DPADVI to its model's rows: the data-free prior and the row mechanisms."""

from __future__ import annotations

from typing import Any

import numpy as np

from pymc_dp.mechanisms.barker import NoisyBarkerStatistic
from pymc_dp.mechanisms.centred import CentredClippedGradient, CentredLogLikelihoodRatio
from pymc_dp.mechanisms.clip_bound import NoisyScoreNormHistogram
from pymc_dp.mechanisms.gradient import NoisyClippedGradient
from pymc_dp.mechanisms.histogram_mapped_gradient import NoisyMappedGradientNormHistogram
from pymc_dp.mechanisms.log_likelihood_ratio import NoisyLogLikelihoodRatio
from pymc_dp.mechanisms.owners import OwnerLogLikelihoodRatio
from pymc_dp.mechanisms.poisson_gradient import NoisyPoissonGradientSum

__all__ = [
    "PARTITIONED_ROWS_NAME",
    "RowMechanisms",
    "model_access",
    "observed_array",
    "reads_partitioned_rows",
    "refuse_partitioned_rows",
]

#: The prefix of the inputs that stand in for rows held in Dask partitions in a copy of a model
#: (:func:`pymc_dp.backends.dask_sampler_rows.sampler_model`): they hold zeros, never data.
PARTITIONED_ROWS_NAME = "pymc_dp.partitioned_rows"


def reads_partitioned_rows(model: Any) -> bool:
    """Whether ``model``'s likelihood reads stand-ins of rows held in Dask partitions (graph names only: nothing read).

    Such a model (:func:`pymc_dp.backends.dask_sampler_rows.sampler_model`'s copy) holds zeros in
    place of its rows: its mechanisms may release only on the workers of a ``DaskBackend``
    holding the rows, never on the zeros in this process.
    """
    from pytensor.graph.traversal import ancestors

    if model is None:
        return False
    observed = [model.rvs_to_values[rv] for rv in model.observed_RVs]
    return any(str(getattr(v, "name", None) or "").startswith(PARTITIONED_ROWS_NAME) for v in ancestors(observed))


def refuse_partitioned_rows(model: Any) -> None:
    """Refuse, naming ``model``, a model whose likelihood reads stand-ins of rows held in Dask partitions.

    Such a model (:func:`pymc_dp.backends.dask_sampler_rows.sampler_model`'s copy) holds zeros in
    place of its rows; a route that reads rows in this process would fit them. Decided from the
    graph's names only, before anything is read or charged.
    """
    if reads_partitioned_rows(model):
        raise ValueError(
            "`model` must hold its rows here: it is sampler_model's copy, whose likelihood reads stand-ins of rows "
            "held in Dask partitions (zeros), and only DPPenaltyMH or DPHMC steps built in it and sampled by "
            "pmdp.sample on a DaskBackend holding the rows release from them. Found a model of such stand-ins."
        )


class RowMechanisms:
    """The mechanisms of one model's rows: the only route from a step method or DPADVI to its data.

    Steps and DPADVI receive this object and a data-free :class:`pymc_dp.data.PriorDensity`
    (:func:`model_access`), never the per-row functions: everything they get back from here is
    a mechanism whose ``release`` clips and noises before it returns. ``n_rows`` and
    ``n_params`` are public settings (N is public under substitute neighbours).
    """

    def __init__(self, rows) -> None:
        self._rows = rows
        self.n_rows = rows.n_rows
        self.n_params = rows.n_params
        #: Whether the rows are stand-ins of rows held in Dask partitions (zeros: never released from here).
        self.reads_partitioned_rows = reads_partitioned_rows(getattr(rows, "model", None))

    def _rows_here(self) -> Any:
        """The rows, for a mechanism that reads them in this process; refused for stand-ins of Dask rows (names only).

        A step built in :func:`pymc_dp.backends.dask_sampler_rows.sampler_model`'s copy holds N
        rows of zeros: released here (``pm.sample``, the default or JAX backend, Dask rows
        scattered from this process) it would fit the zeros, a confidently wrong posterior.
        """
        if self.reads_partitioned_rows:
            raise ValueError(
                "`backend` must be a pmdp.DaskBackend holding the rows (rows={...}) for a step built in "
                "sampler_model's copy: its likelihood reads stand-ins of rows held in Dask partitions (zeros), which "
                "a release in this process would fit. Found a release asked of the rows in this process."
            )
        return self._rows

    def log_likelihood_ratio(
        self, llr_clip: float, noise_multiplier: float, neighbouring: str
    ) -> NoisyLogLikelihoodRatio:
        """A :class:`NoisyLogLikelihoodRatio` on every row."""
        return NoisyLogLikelihoodRatio(self._rows_here(), llr_clip, noise_multiplier, neighbouring)

    def clipped_gradient(self, grad_clip: float, noise_multiplier: float, neighbouring: str) -> NoisyClippedGradient:
        """A :class:`NoisyClippedGradient` on every row."""
        return NoisyClippedGradient(self._rows_here(), grad_clip, noise_multiplier, neighbouring)

    def score_norm_histogram(self, noise_multiplier: float, neighbouring: str) -> NoisyScoreNormHistogram:
        """A :class:`NoisyScoreNormHistogram` on every row (the private clip bound)."""
        return NoisyScoreNormHistogram(self._rows_here(), noise_multiplier, neighbouring)

    def mapped_gradient_histogram(self, noise_multiplier: float, neighbouring: str) -> NoisyMappedGradientNormHistogram:
        """A :class:`NoisyMappedGradientNormHistogram` on every row (DPADVI's clipping check)."""
        return NoisyMappedGradientNormHistogram(self._rows_here(), noise_multiplier, neighbouring)

    def barker_statistic(self, **settings: Any) -> NoisyBarkerStatistic:
        """A :class:`NoisyBarkerStatistic` (settings by name, as its constructor takes them)."""
        return NoisyBarkerStatistic(self._rows_here(), **settings)

    def poisson_gradient_sum(
        self, grad_clip: float, noise_multiplier: float, sampling_rate: float, neighbouring: str
    ) -> NoisyPoissonGradientSum:
        """A :class:`NoisyPoissonGradientSum` on Poisson batches of the rows."""
        return NoisyPoissonGradientSum(self._rows_here(), grad_clip, noise_multiplier, sampling_rate, neighbouring)

    def centred_log_likelihood_ratio(
        self, anchor: Any, lipschitz: float, noise_multiplier: float, neighbouring: str
    ) -> CentredLogLikelihoodRatio:
        """A :class:`CentredLogLikelihoodRatio` on every row, centred on a released anchor (issue 36)."""
        return CentredLogLikelihoodRatio(self._rows_here(), anchor, lipschitz, noise_multiplier, neighbouring)

    def centred_gradient(
        self, anchor: Any, lipschitz: float, noise_multiplier: float, neighbouring: str
    ) -> CentredClippedGradient:
        """A :class:`CentredClippedGradient` on every row, centred on a released anchor (issue 36)."""
        return CentredClippedGradient(self._rows_here(), anchor, lipschitz, noise_multiplier, neighbouring)

    def owner_ratio(
        self, owner_rows: np.ndarray, llr_clip: float, noise_multiplier: float, rng: Any, neighbouring: str
    ) -> OwnerLogLikelihoodRatio:
        """One owner's :class:`OwnerLogLikelihoodRatio`, on that owner's rows alone."""
        rows, index = self._rows_here(), np.asarray(owner_rows, dtype=np.int64)
        return OwnerLogLikelihoodRatio(
            lambda theta: rows.loglik_rows(theta, index), llr_clip, noise_multiplier, rng, neighbouring
        )

    def check_subsets(self) -> None:
        """Build the subset path now (raises ``ModelStructureError`` if it disagrees with all rows); releases nothing.

        Mechanisms on row subsets (DPBarkerMH's batches, DPADVI's Poisson batches) call it
        before anything is charged, so that the subset-vs-slice probe refuses a model then,
        not at the first batch.
        """
        _ = self._rows.subset_mode

    def check_differentiable(self) -> None:
        """Build the per-row gradient now (raises if the likelihood is not differentiable); releases nothing."""
        self._rows.warm_gradient()


def model_access(
    model,
    value_vars,
    shared,
    initial_point,
    compile_kwargs,
    neighbouring: str = "substitute",
    reproducible: bool = False,
    partitioned_rows: bool = False,
):
    """The data-free prior and the row mechanisms of ``model`` for the parameters ``value_vars``.

    The one place a step method or DPADVI reaches its model's data: it gets back a
    :class:`pymc_dp.data.PriorDensity` (no row data) and a :class:`RowMechanisms`.
    ``neighbouring`` is the relation of the mechanisms: under add/remove N is private and a
    per-row log-likelihood that depends on it is refused (:func:`pymc_dp.data.row_loglik`).
    A model of stand-ins of rows held in Dask partitions (:func:`reads_partitioned_rows`: zeros)
    is refused, naming ``model``, unless ``partitioned_rows`` (the step constructors, whose
    releases a ``DaskBackend`` holding the rows takes over, and DPADVI's own copy on them): every
    other caller builds its mechanisms before its charge, so it refuses before anything is spent.
    """
    from pymc_dp.data import RowLikelihood

    if not partitioned_rows:
        refuse_partitioned_rows(model)

    rows = RowLikelihood(
        model,
        value_vars,
        shared,
        initial_point=initial_point,
        compile_kwargs=compile_kwargs,
        neighbouring=neighbouring,
        reproducible=reproducible,
    )
    return rows.prior, RowMechanisms(rows)


def observed_array(variable: Any, what: str = "observed variable (and the design matrix)") -> np.ndarray:
    """The raw values held by a data container or constant: handed to the mechanism only (never inspected).

    An observed ``pm.Data`` container may reach the model through a cast (PyMC wraps integer
    containers observed by a discrete variable as ``Cast{int64}(y)``): a chain of elementwise
    casts over exactly one container or constant is read through, and it is evaluated row for row.
    Any other graph is refused from its structure alone: an expression that mixes rows (a
    comparison with the data's mean, an index that repeats a row) would let one person move many
    released rows, so the release's sensitivity would not hold. ``what`` names the array in the errors.
    Used by the routes that hand a model's arrays to a release (the one call's released statistics,
    :func:`pymc_dp.release_once_linear`).
    """
    from pytensor.compile.sharedvalue import SharedVariable
    from pytensor.graph.basic import Constant
    from pytensor.scalar.basic import Cast, Identity
    from pytensor.tensor.elemwise import Elemwise
    from pytensor.tensor.random.type import RandomType

    node = variable
    while node.owner is not None:
        op = node.owner.op
        if not (isinstance(op, Elemwise) and isinstance(op.scalar_op, Cast | Identity) and len(node.owner.inputs) == 1):
            raise ValueError(
                f"The {what} must hold data: a pm.Data container, an array, or one of them cast elementwise. "
                f"Found a graph computed by {type(op).__name__}."
            )
        [node] = node.owner.inputs
    if isinstance(node.type, RandomType) or not isinstance(node, SharedVariable | Constant):
        raise ValueError(
            f"The {what} must hold data: a pm.Data container, an array, or one of them cast elementwise. "
            f"Found {type(node).__name__}."
        )
    if variable is node:
        return np.asarray(node.get_value(borrow=True) if isinstance(node, SharedVariable) else node.data)
    return np.asarray(variable.eval())
