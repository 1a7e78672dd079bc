"""Reading a regression off a model's graph: where its data matrix, coefficients, intercept and groups sit.

:func:`regression_parts` tells whether a model's likelihood is a regression whose statistics
:func:`pymc_dp.release_statistics` describes — linear, logistic, Poisson or negative binomial
(log link, public dispersion α), optionally with varying intercepts by a group index — from
the graph alone (the ops, the shapes, the names Bambi gives its terms and which inputs are data
containers; never a data value). The planner uses it to recommend the released-statistics route
(:func:`pymc_dp.plan`) and ``pmdp.sample`` without a step to run it (:mod:`pymc_dp.routes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymc.model import modelcontext

from pymc_dp._validation import BAMBI_CHECKED
from pymc_dp.data import _is_matrix_product, observed_rows

__all__ = [
    "ROUTABLE_FAMILIES",
    "RegressionParts",
    "regression_parts",
    "released_statistics_route",
    "unroutable_note",
]

#: The families whose released statistics the one-call route runs (:mod:`pymc_dp.routes`).
ROUTABLE_FAMILIES = (
    "linear_regression",
    "logistic_regression",
    "poisson_regression",
    "negative_binomial_regression",
    "grouped_linear_regression",
    "grouped_logistic_regression",
)


@dataclass(frozen=True)
class RegressionParts:
    """Where a regression's pieces sit in a model's graph (no data values).

    The linear predictor is η = ``intercept`` + ``group_effects[groups]`` + ``matrix`` @
    ``coefficients`` exactly (each term optional but one of the last two).

    Attributes
    ----------
    family : str
        ``"logistic_regression"``, ``"poisson_regression"``, ``"negative_binomial_regression"``,
        ``"linear_regression"``, or one of them prefixed ``"grouped_"`` with a group index. Only
        :data:`ROUTABLE_FAMILIES` have a released-statistics route (:attr:`routable`).
    outcome : Variable
        The observed random variable.
    matrix : Variable or None
        The data matrix: a ``pm.Data`` container or a constant with one row per observation.
    coefficients : Variable or None
        The vector multiplied by ``matrix``: a graph of the free variables only.
    intercept : Variable or None
        The scalar added to the product (a graph of the free variables only), if any.
    sigma : Variable or None
        The Normal's standard deviation (linear regression): a scalar graph of the free
        variables and constants only.
    groups : Variable or None
        The group index: an integer data container or constant with one entry per row.
    group_effects : Variable or None
        The vector of G varying intercepts that ``groups`` indexes (free variables only).
    n_groups : int or None
        G, the length of ``group_effects`` (its static shape: public).
    dispersion : float or None
        The negative binomial's α when it is a constant of the graph (public); ``None`` when
        it is a free variable (no released-statistics route: the statistics carry next to no
        information about α).
    """

    family: str
    outcome: Any
    matrix: Any
    coefficients: Any
    intercept: Any = None
    sigma: Any = None
    groups: Any = None
    group_effects: Any = None
    n_groups: int | None = None
    dispersion: float | None = None

    @property
    def routable(self) -> bool:
        """Whether the one-call route can release this regression's statistics."""
        if self.family == "negative_binomial_regression":
            return self.dispersion is not None
        return self.family in ROUTABLE_FAMILIES

    @property
    def base(self) -> str:
        """The family without its ``grouped_`` prefix."""
        return self.family.removeprefix("grouped_")


def _strip(v: Any) -> Any:
    """``v`` through named views (pm.Deterministic, Bambi) and broadcasting dimshuffles of a scalar."""
    from pytensor.compile.ops import ViewOp
    from pytensor.tensor.elemwise import DimShuffle

    while v.owner is not None and (
        isinstance(v.owner.op, ViewOp)
        or (isinstance(v.owner.op, DimShuffle) and v.owner.inputs[0].ndim == 0 and v.ndim <= 1)
    ):
        v = v.owner.inputs[0]
    return v


def _same(a: Any, b: Any) -> bool:
    """The same variable, or two scalar constants of equal value (PyMC repeats a constant α as new nodes)."""
    from pytensor.tensor.variable import TensorConstant

    if a is b:
        return True
    constants = isinstance(a, TensorConstant) and isinstance(b, TensorConstant) and a.ndim == b.ndim == 0
    return bool(constants and float(a.data) == float(b.data))


def _scalar_op(v: Any) -> str:
    """The name of ``v``'s elementwise scalar op ('' for anything else)."""
    return type(getattr(getattr(v.owner, "op", None), "scalar_op", None)).__name__ if v.owner is not None else ""


def _add_terms(eta: Any) -> list[Any]:
    """The terms of η, with nested additions (Bambi's) and named views flattened."""
    from pytensor.compile.ops import ViewOp

    while eta.owner is not None and isinstance(eta.owner.op, ViewOp):
        eta = eta.owner.inputs[0]
    if _scalar_op(eta) == "Add":
        return [t for v in eta.owner.inputs for t in _add_terms(v)]
    return [eta]


class _Graph:
    """The public structure of one model: which variables are free, data, or read the rows."""

    def __init__(self, model: Any) -> None:
        self.n_rows = observed_rows(model)
        self.free = set(model.free_RVs)
        self.data_vars = set(model.data_vars)
        #: Bambi's term names are read only on a model pmdp.from_bambi built and checked (its mark).
        self.bambi = bool(getattr(model, BAMBI_CHECKED, False))

    def is_row_data(self, v: Any, ndim: int) -> bool:
        """A data container or a constant of ``ndim`` dimensions with one entry per row."""
        from pytensor.tensor.variable import TensorConstant

        return v in self.data_vars or (
            isinstance(v, TensorConstant) and v.ndim == ndim and v.type.shape[0] == self.n_rows
        )

    def reads_data(self, v: Any) -> bool:
        """A data container, or any constant with one entry per row, among ``v``'s ancestors."""
        from pytensor.graph.traversal import ancestors
        from pytensor.tensor.variable import TensorConstant

        return any(
            a in self.data_vars or (isinstance(a, TensorConstant) and a.ndim >= 1 and a.type.shape[0] == self.n_rows)
            for a in ancestors([v])
        )

    def of_free(self, v: Any) -> bool:
        """A graph of free variables (at least one) that reads no data."""
        from pytensor.graph.traversal import ancestors

        return any(a in self.free for a in ancestors([v])) and not self.reads_data(v)

    def group_term(self, v: Any) -> tuple[Any, Any] | None:
        """(effects, index) when ``v`` is effects[index]: a vector of free variables indexed by an integer data
        vector of one entry per row; Bambi's ``1|g`` term (effects[index] times its column of ones) included, on a
        model :func:`pymc_dp.from_bambi` marked only (elsewhere a vector named ``1|g`` times a data column is not an
        intercept: the column need not be ones)."""
        if self.bambi and _scalar_op(v) == "Mul" and len(v.owner.inputs) == 2:  # Bambi: Mul(`1|g`[index], Z)
            indexed, column = v.owner.inputs
            if not self.is_row_data(column, 1):
                return None
            found = self.group_term(indexed)
            named = found is not None and str(found[0].name or "").startswith("1|")
            return found if named else None  # an intercept term by its formula name: Z is its column of ones
        if v.owner is None or type(v.owner.op).__name__ not in ("AdvancedSubtensor", "AdvancedSubtensor1"):
            return None
        if len(v.owner.inputs) != 2:
            return None
        effects, index = v.owner.inputs
        if effects.ndim != 1 or v.ndim != 1 or not str(index.dtype).startswith(("int", "uint")):
            return None
        if not self.is_row_data(index, 1) or not self.of_free(effects):
            return None
        return effects, index

    def linear_predictor(self, eta: Any) -> dict[str, Any] | None:
        """η's pieces: one product of a data matrix and a vector of free variables and/or one group term, plus
        scalars that read no data; anything else that reads the rows or varies per row is refused."""
        import pytensor.tensor as pt

        product = group = None
        scalars: list[Any] = []
        for term in _add_terms(eta):
            found, grouped = _product_of(term), self.group_term(term)
            if found is not None and product is None:
                matrix, coefficients = found
                if not self.is_row_data(matrix, 2) or not self.of_free(coefficients):
                    return None
                product = found
            elif grouped is not None and group is None:
                group = grouped
            elif all(term.type.broadcastable) and not self.reads_data(term):
                scalars.append(term.sum() if term.ndim else term)
            else:
                return None
        if product is None and group is None:
            return None
        intercept = None
        if scalars:
            intercept = scalars[0]
            for v in scalars[1:]:
                intercept = intercept + v
            intercept = pt.as_tensor_variable(intercept)
        matrix, coefficients = product if product is not None else (None, None)
        parts = {"matrix": matrix, "coefficients": coefficients, "intercept": intercept}
        if group is not None:
            effects, index = group
            size = effects.type.shape[0]
            if size is None:  # e.g. dims from coords (Bambi): the shape graph of free variables, public
                size = effects.shape[0].eval()
            parts.update(groups=index, group_effects=effects, n_groups=int(size))
        return parts


def _negative_binomial_mean(n: Any, p: Any) -> tuple[Any, float | None] | None:
    """(η, α) when NegativeBinomial(n, p) is PyMC's ``NegativeBinomial(mu=exp(η), alpha=α)`` (α None if free).

    PyMC builds p = α / (exp(η) + α) (PyMC 5) or sigmoid(log α − log exp(η)) (PyMC 6), n = α.
    """
    from pytensor.tensor.variable import TensorConstant

    alpha = _strip(n)
    if _scalar_op(p) == "Sigmoid" and _scalar_op(p.owner.inputs[0]) == "Sub":
        log_alpha, log_mu = p.owner.inputs[0].owner.inputs
        if _scalar_op(_strip(log_alpha)) != "Log" or not _same(_strip(_strip(log_alpha).owner.inputs[0]), alpha):
            return None
        if _scalar_op(log_mu) != "Log":
            return None
        mu = _strip(log_mu.owner.inputs[0])
    elif _scalar_op(p) == "TrueDiv":
        top, bottom = p.owner.inputs
        if not _same(_strip(top), alpha) or _scalar_op(bottom) != "Add" or len(bottom.owner.inputs) != 2:
            return None
        first, second = bottom.owner.inputs
        if _same(_strip(second), alpha):
            mu = _strip(first)
        elif _same(_strip(first), alpha):
            mu = _strip(second)
        else:
            return None
    else:
        return None
    if _scalar_op(mu) != "Exp":
        return None
    value = None
    if isinstance(alpha, TensorConstant) and alpha.ndim == 0 and float(alpha.data) > 0:
        value = float(alpha.data)
    return mu.owner.inputs[0], value


def regression_parts(model: Any = None) -> RegressionParts | None:
    """The pieces of ``model``'s likelihood when it is a regression the releases describe, or ``None``.

    Reads the graph only (no data values): one observed variable, Bernoulli with p = σ(η)
    (``logit_p=η``) → ``"logistic_regression"``, Poisson with mu = exp(η) →
    ``"poisson_regression"``, NegativeBinomial with mu = exp(η) and ``alpha`` →
    ``"negative_binomial_regression"`` (:attr:`RegressionParts.dispersion` α when it is a
    constant, else ``None``), or Normal with mean η and a scalar standard deviation that reads
    no data → ``"linear_regression"``. η is a sum of: at most one product of a data matrix (a
    ``pm.Data`` container or an array with one row per observation) and a vector of free
    variables; at most one vector of free variables indexed by an integer data vector of one
    entry per row (varying intercepts: the family gets the prefix ``"grouped_"``; Bambi's
    ``(1|g)`` term too); and scalars that read no data (the intercept) — the product or the
    group term at least. Anything else in η that reads the rows, a non-scalar term that reads
    none (one effect per row), a second group index (crossed effects), a function of η other
    than these links (a non-log link for counts) is not a regression whose statistics the
    release describes.
    """
    from pytensor.tensor.random.basic import BernoulliRV, NegBinomialRV, NormalRV, PoissonRV

    model = modelcontext(model)
    if len(model.observed_RVs) != 1:
        return None
    rv = model.observed_RVs[0]
    op = rv.owner.op if rv.owner is not None else None
    graph = _Graph(model)
    family, eta, extra = None, None, {}
    if isinstance(op, BernoulliRV):
        (p,) = op.dist_params(rv.owner)
        if _scalar_op(p) == "Sigmoid":
            family, eta = "logistic_regression", p.owner.inputs[0]
    elif isinstance(op, PoissonRV):  # mu = exp(η): a Poisson regression with log link
        (mu,) = op.dist_params(rv.owner)
        mu = _strip(mu)
        if _scalar_op(mu) == "Exp":
            family, eta = "poisson_regression", mu.owner.inputs[0]
    elif isinstance(op, NegBinomialRV):  # mu = exp(η), alpha public or free
        found = _negative_binomial_mean(*op.dist_params(rv.owner))
        if found is not None:
            family, (eta, extra["dispersion"]) = "negative_binomial_regression", found
    elif isinstance(op, NormalRV):
        eta, sigma = op.dist_params(rv.owner)
        if not graph.reads_data(sigma) and all(sigma.type.broadcastable):
            family, extra["sigma"] = "linear_regression", sigma.sum() if sigma.ndim else sigma
    if family is None:
        return None
    parts = graph.linear_predictor(eta)
    if parts is None:
        return None
    if parts.get("groups") is not None:
        family = f"grouped_{family}"
    return RegressionParts(family, rv, **parts, **extra)


def released_statistics_route(model: Any = None) -> str | None:
    """The :func:`pymc_dp.release_statistics` family the one-call route runs for ``model``, or ``None``.

    Reads the graph only (no data values): ``regression_parts(model).family`` when the parts are
    :attr:`~RegressionParts.routable` (one of :data:`ROUTABLE_FAMILIES`, a negative binomial
    with a constant α), else ``None``.
    """
    parts = regression_parts(model)
    return parts.family if parts is not None and parts.routable else None


def unroutable_note(parts: RegressionParts | None) -> str | None:
    """Why a regression recognised from the graph has no released-statistics route here, or ``None``."""
    if parts is None or parts.routable:
        return None
    if parts.family == "negative_binomial_regression":
        return (
            "the graph is a negative-binomial regression with a log link but a free dispersion alpha: its released "
            "statistics carry next to no information about alpha, so their route needs alpha as a public constant "
            "(pm.NegativeBinomial(mu=pm.math.exp(...), alpha=<number>)); the general routes apply as they are"
        )
    if parts.family == "grouped_poisson_regression":
        return (
            "the graph is a Poisson regression with varying intercepts by a group index, which no grouped release "
            "covers yet on the one-call route; pmdp.release_statistics('poisson_regression', (X, y, groups), "
            "n_groups=..., n_features=..., x_bounds=..., y_max=...) releases it and its noise-aware likelihood by "
            "hand (docs/exponential_family.md); the general routes apply as they are"
        )
    return (
        f"the graph is a {parts.base.replace('_', ' ')} with varying intercepts by a group index, which no grouped "
        "release covers yet (grouped releases: linear, logistic and Poisson regression); the general routes apply"
    )


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
