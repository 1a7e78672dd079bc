"""Declaring an array public, so that a prior or a ``pm.Potential`` may read it.

Only the likelihood may read private data: it is evaluated row by row, clipped and noised.
A prior or a ``pm.Potential`` enters the computation exactly, so pymc-dp refuses one that
reads any non-scalar constant or shared variable it cannot tell apart from a private table
(:func:`pymc_dp.data.check_prior_reads_no_data`): a potential may read none, a prior only
per-element parameters no longer than its own largest axis. An array the caller knows to be
public (a published table, released statistics, design constants) is declared with
:func:`public` where the model reads it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["declare_constants_public", "graph_variables", "is_public", "public"]

#: Tag attribute set on a PyTensor variable declared public.
PUBLIC_TAG = "pymc_dp_public"


def public(value: Any, name: str | None = None) -> Any:
    """Declare ``value`` public: a prior or a ``pm.Potential`` may then read it.

    Parameters
    ----------
    value : array_like, TensorConstant or SharedVariable
        An array (converted to a PyTensor constant), or a PyTensor constant or shared variable
        (``pm.Data`` included), which is marked and returned itself.
    name : str, optional
        Name of the new constant (arrays only).

    Returns
    -------
    TensorConstant or SharedVariable
        A variable to use in the model in place of ``value``.

    Raises
    ------
    TypeError
        When ``value`` is another kind of PyTensor variable (a graph computed from other
        variables: declare its inputs instead).

    Notes
    -----
    Neighbouring relation: any. A declaration is a promise by the caller, not something
    pymc-dp can check: the array must not depend on the private rows (for example published
    or released statistics, or constants fixed before seeing the data). ε does not cover it:
    a prior or potential reading a declared array enters the posterior exactly.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_dp as pmdp
    >>> table = np.array([0.1, 0.4, 0.2, 0.3])  # published shares, not the private rows
    >>> with pm.Model():
    ...     w = pm.Dirichlet("w", np.ones(2))
    ...     pen = pm.Potential("match", -((w.sum() - pmdp.public(table).sum()) ** 2))
    """
    import pytensor.tensor as pt
    from pytensor.compile.sharedvalue import SharedVariable
    from pytensor.graph.basic import Constant, Variable

    if isinstance(value, Constant | SharedVariable):
        variable = value
    elif isinstance(value, Variable):
        raise TypeError(
            "`value` must be an array, a constant or a shared variable (pm.Data). Found a computed PyTensor "
            f"variable of type {type(value).__name__}; declare the arrays it is computed from instead."
        )
    else:
        variable = pt.constant(np.asarray(value), name=name)
    setattr(variable.tag, PUBLIC_TAG, True)
    return variable


def is_public(variable: Any) -> bool:
    """Whether ``variable`` was declared with :func:`public`."""
    tag = getattr(variable, "tag", None)
    return bool(getattr(tag, PUBLIC_TAG, False))


def declare_constants_public(graph: Any, exclude: Any = ()) -> Any:
    """Mark the constants of a graph built by pymc-dp from public inputs as public, and return it.

    Every constant of ``graph`` (inner graphs included) is marked, except those read by the
    variables in ``exclude`` (the caller's own parameter expressions, which are checked like
    any prior) and those equal to an array in ``exclude``.

    Notes
    -----
    For graphs pymc-dp builds itself from released statistics and public settings (the
    likelihood of a release): their constants are functions of the release and of public
    bounds, post-processing that ε already covers.
    """
    from pytensor.graph.basic import Constant, Variable
    from pytensor.graph.traversal import ancestors

    exclude = list(exclude)
    theirs = set(ancestors([v for v in exclude if isinstance(v, Variable)]))
    arrays = [np.asarray(v) for v in exclude if not isinstance(v, Variable)]
    for v in graph_variables([graph]):
        if not isinstance(v, Constant) or v in theirs:
            continue
        data = np.asarray(v.data)
        if any(data.shape == a.shape and np.array_equal(data, a) for a in arrays):
            continue
        setattr(v.tag, PUBLIC_TAG, True)
    return graph


def graph_variables(outputs: Any) -> list[Any]:
    """Every variable of the graphs, the inner graphs of ops that hold one (OpFromGraph, Scan) included."""
    from pytensor.graph.op import HasInnerGraph
    from pytensor.graph.traversal import ancestors

    seen: list[Any] = []
    pending = list(outputs)
    visited_ops: set[int] = set()
    while pending:
        found = list(ancestors(pending))
        pending = []
        seen.extend(found)
        for v in found:
            op = v.owner.op if v.owner is not None else None
            if isinstance(op, HasInnerGraph) and id(op) not in visited_ops:
                visited_ops.add(id(op))
                pending.extend(op.inner_outputs)
    return seen
