"""Reading a regression off a model's graph: where its data matrix, coefficients and intercept sit.

:func:`regression_parts` tells whether a model's likelihood is a linear or logistic regression
whose statistics :func:`pymc_dp.release_statistics` describes, from the graph alone (the ops,
the shapes and which inputs are data containers; never a data value). The planner uses it to
recommend the released-statistics route (:func:`pymc_dp.plan`) and ``pmdp.sample`` without a
step to run it (:mod:`pymc_dp.routes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymc.model import modelcontext

from pymc_dp.data import _is_matrix_product, observed_rows

__all__ = ["RegressionParts", "regression_parts", "released_statistics_route"]


@dataclass(frozen=True)
class RegressionParts:
    """Where a linear or logistic regression's pieces sit in a model's graph (no data values).

    The linear predictor is η = ``intercept`` + ``matrix`` @ ``coefficients`` exactly.

    Attributes
    ----------
    family : {"logistic_regression", "poisson_regression", "linear_regression"}
        The :func:`pymc_dp.release_statistics` family that describes the likelihood.
    outcome : Variable
        The observed random variable.
    matrix : Variable
        The data matrix: a ``pm.Data`` container or a constant with one row per observation.
    coefficients : Variable
        The vector multiplied by ``matrix``: a graph of the free variables only.
    intercept : Variable or None
        The scalar added to the product (a graph of the free variables only), if any.
    sigma : Variable or None
        The Normal's standard deviation (linear regression): a scalar graph of the free
        variables and constants only.
    """

    family: str
    outcome: Any
    matrix: Any
    coefficients: Any
    intercept: Any = None
    sigma: Any = None


def regression_parts(model: Any = None) -> RegressionParts | None:
    """The pieces of ``model``'s likelihood when it is a linear or logistic regression, or ``None``.

    Reads the graph only (no data values): one observed variable, Bernoulli with p = σ(η)
    (``logit_p=η``) → ``"logistic_regression"``, Poisson with mu = exp(η) →
    ``"poisson_regression"``, or Normal with mean η and a scalar standard
    deviation that reads no data → ``"linear_regression"``, where η is exactly a product of
    a data matrix (a ``pm.Data`` container or an array with one row per observation) and a
    vector of free variables, plus optionally a scalar that reads no data (the intercept).
    Anything else in η that reads the rows (a group effect indexed by a data column), a
    non-scalar term that reads none (one effect per row) or a function of the product other
    than this sum is not a regression whose statistics the release describes.
    """
    import pytensor.tensor as pt
    from pytensor.compile.ops import ViewOp
    from pytensor.graph.traversal import ancestors
    from pytensor.tensor.elemwise import Elemwise
    from pytensor.tensor.random.basic import BernoulliRV, NormalRV, PoissonRV
    from pytensor.tensor.variable import TensorConstant

    model = modelcontext(model)
    if len(model.observed_RVs) != 1:
        return None
    rv = model.observed_RVs[0]
    n_rows = observed_rows(model)
    op = rv.owner.op if rv.owner is not None else None
    free = set(model.free_RVs)
    data_vars = set(model.data_vars)

    def is_data(v) -> bool:
        return v in data_vars or (isinstance(v, TensorConstant) and v.ndim == 2 and v.type.shape[0] == n_rows)

    def reads_data(v) -> bool:  # a data container, or any constant with one entry per row
        return any(
            a in data_vars or (isinstance(a, TensorConstant) and a.ndim >= 1 and a.type.shape[0] == n_rows)
            for a in ancestors([v])
        )

    def scalar(v) -> bool:
        return all(v.type.broadcastable)

    def affine(eta) -> tuple[Any, Any, Any] | None:
        # η = X @ w, or η = X @ w + (scalars that read no data): one product of a data matrix and a vector of free
        # variables, added to nothing else that reads the rows or varies per row.
        others: list[Any] = []
        while eta.owner is not None and isinstance(eta.owner.op, ViewOp):  # a named view (pm.Deterministic, Bambi)
            eta = eta.owner.inputs[0]
        found = _product_of(eta)
        if found is None:
            if not (
                eta.owner is not None
                and isinstance(eta.owner.op, Elemwise)
                and type(eta.owner.op.scalar_op).__name__ == "Add"
            ):
                return None
            terms = [(v, _product_of(v)) for v in eta.owner.inputs]
            products = [(v, f) for v, f in terms if f is not None]
            if len(products) != 1:
                return None
            product, found = products[0]
            others = [v for v in eta.owner.inputs if v is not product]
        matrix, coefficients = found
        if not is_data(matrix):
            return None
        if not any(v in free for v in ancestors([coefficients])) or reads_data(coefficients):
            return None
        if any(reads_data(v) or not scalar(v) for v in others):
            return None
        intercept = None
        if others:
            intercept = others[0].sum() if others[0].ndim else others[0]
            for v in others[1:]:
                intercept = intercept + (v.sum() if v.ndim else v)
            intercept = pt.as_tensor_variable(intercept)
        return matrix, coefficients, intercept

    if isinstance(op, BernoulliRV):
        (p,) = op.dist_params(rv.owner)
        scalar_op = getattr(getattr(p.owner, "op", None), "scalar_op", None)
        if p.owner is not None and type(scalar_op).__name__ == "Sigmoid":
            found = affine(p.owner.inputs[0])
            if found is not None:
                return RegressionParts("logistic_regression", rv, *found)
    if isinstance(op, PoissonRV):  # mu = exp(η): a Poisson regression with log link
        (mu,) = op.dist_params(rv.owner)
        scalar_op = getattr(getattr(mu.owner, "op", None), "scalar_op", None)
        if mu.owner is not None and type(scalar_op).__name__ == "Exp":
            found = affine(mu.owner.inputs[0])
            if found is not None:
                return RegressionParts("poisson_regression", rv, *found)
    if isinstance(op, NormalRV):
        mu, sigma = op.dist_params(rv.owner)
        found = affine(mu)
        if found is not None and not reads_data(sigma) and scalar(sigma):
            return RegressionParts("linear_regression", rv, *found, sigma=sigma.sum() if sigma.ndim else sigma)
    return None


def released_statistics_route(model: Any = None) -> str | None:
    """The :func:`pymc_dp.release_statistics` family that describes ``model``'s likelihood, or ``None``.

    Reads the graph only (no data values): ``regression_parts(model).family`` — one observed
    variable, Bernoulli with p = σ(η) (``logit_p=η``) → ``"logistic_regression"``, Poisson
    with mu = exp(η) → ``"poisson_regression"``, or Normal
    with mean η and a scalar standard deviation that reads no data → ``"linear_regression"``,
    where η is an optional intercept plus exactly one product of a data matrix (a ``pm.Data``
    container or an array with one row per observation) and a vector of free variables.
    """
    parts = regression_parts(model)
    return None if parts is None else parts.family


def _product_of(v: Any) -> tuple[Any, Any] | None:
    """(matrix, vector) when ``v`` is a matrix-vector product (the graph only), else None."""
    from pytensor.tensor.elemwise import DimShuffle

    # X @ w with w a vector; or X @ w[:, None] squeezed back to a vector (what `x @ w` builds for a NumPy x)
    if v.owner is not None and _is_matrix_product(v.owner):
        matrix, coefficients = v.owner.inputs
        return (matrix, coefficients) if coefficients.ndim == 1 and v.ndim == 1 else None
    if v.owner is None or not isinstance(v.owner.op, DimShuffle) or v.ndim != 1:
        return None
    inner = v.owner.inputs[0]
    if inner.owner is None or not _is_matrix_product(inner.owner) or inner.ndim != 2:
        return None
    matrix, column = inner.owner.inputs
    if column.ndim != 2 or not column.type.broadcastable[1] or not inner.type.broadcastable[1]:
        return None
    if column.owner is not None and isinstance(column.owner.op, DimShuffle) and column.owner.inputs[0].ndim == 1:
        return matrix, column.owner.inputs[0]
    return matrix, column[:, 0]
