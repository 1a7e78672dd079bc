"""The clipped per-row gradient sum as one graph, without the (B × P) gradient matrix.

For a model that reads parameter blocks only through products ``A @ w`` of row data with a
selection of θ (linear predictors), row i's gradient norm follows from the per-row pieces
("ghost norms" of DP-SGD for linear layers) and the clipped sum is one weighted
vector–Jacobian product (:func:`_linear_clipped_sum`). Symbolic only: the graph is built from
the per-row log-likelihood graph; the data layer (:class:`pymc_dp.data.RowLikelihood`) and the
JAX backend compile and evaluate it on their rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.traversal import ancestors


class _NotLinear(Exception):
    """The graph has no parameter block read only through ``A @ w`` products (see :func:`_linear_clipped_sum`)."""


_REARRANGING_OPS: tuple[type, ...] | None = None


def _rearranging_ops() -> tuple[type, ...]:
    """Ops that only select or rearrange their first input's elements (no arithmetic)."""
    global _REARRANGING_OPS
    if _REARRANGING_OPS is None:
        from pytensor.compile.ops import DeepCopyOp, ViewOp
        from pytensor.tensor.elemwise import DimShuffle
        from pytensor.tensor.shape import Reshape, SpecifyShape
        from pytensor.tensor.subtensor import Subtensor

        _REARRANGING_OPS = (Subtensor, Reshape, SpecifyShape, DimShuffle, ViewOp, DeepCopyOp)
    return _REARRANGING_OPS


def _selection_coordinates(var: Variable, theta: Variable, n_params: int) -> np.ndarray | None:
    """The coordinates of θ that ``var`` holds, if ``var`` only selects and rearranges θ's elements, else None.

    ``var`` qualifies when every op from θ to it is a basic slice, reshape, shape check or
    dimension shuffle whose other inputs do not depend on θ; its coordinates are then read
    by evaluating it at θ = (0, 1, …, P − 1) (data-free). Repeated coordinates: None.
    """
    v = var
    while v is not theta:
        node = v.owner
        if node is None or not isinstance(node.op, _rearranging_ops()) or v is not node.outputs[0]:
            return None
        if any(theta in ancestors([i]) for i in node.inputs[1:]):
            return None
        v = node.inputs[0]
    fn = pytensor.function([theta], var, mode="FAST_COMPILE", on_unused_input="ignore")
    coords = np.asarray(fn(np.arange(n_params, dtype=theta.dtype))).ravel()
    if coords.size != np.unique(coords).size:
        return None
    return coords.astype(np.int64)


def _is_matrix_product(node) -> bool:
    from pytensor.tensor.blockwise import Blockwise
    from pytensor.tensor.math import Dot

    op = node.op
    core = op.core_op if isinstance(op, Blockwise) else op
    return isinstance(core, Dot) and len(node.inputs) == 2 and node.inputs[0].ndim == 2


def _depends(outputs: Sequence[Variable], roots: Sequence[Variable]) -> set[Variable]:
    """The variables among ``outputs``' ancestors that depend on any of ``roots`` (roots included)."""
    from pytensor.graph.traversal import toposort

    found = set(roots)
    for node in toposort(list(outputs)):
        if any(i in found for i in node.inputs):
            found.update(node.outputs)
    return found


def _squares_per_row(x: Variable) -> Variable:
    return (x**2).sum(axis=tuple(range(1, x.ndim))) if x.ndim > 1 else x**2


def _linear_clipped_sum(
    theta: Variable,
    n_params: int,
    batch: Sequence[Variable],
    lik: Variable,
    bound: Variable,
    safe: bool = True,
    precomputed: bool = False,
) -> Variable | tuple[Variable, list[tuple[Variable, Variable, Variable, Variable]]]:
    """Σᵢ clip_L2(∇θ log p(xᵢ | θ), bound) over the rows of ``batch``, without the (B × P) gradient matrix.

    Finds the products ``z = A @ w`` with ``A`` (B × K) computed from the rows alone and ``w``
    (K or K × m) a selection of θ's coordinates; cuts the graph there (``z`` becomes an input
    Z); gives every remaining maximal selection ``s`` of θ a per-row copy (B × |s|) and
    vectorises one row's log-likelihood over the rows (reverse mode). Row i's gradient is
    then gᵢ ⊗ Aᵢ on the coordinates of each ``w`` (gᵢ = ∂ log p(xᵢ)/∂Zᵢ) and the row of the
    per-row copy's gradient on those of each ``s``; when all these coordinate sets are
    disjoint, the squared norm is Σ_w ‖gᵢ‖²‖Aᵢ‖² + Σ_s ‖∂ log p(xᵢ)/∂sᵢ‖². With the clip
    factors cᵢ of those norms (:func:`pymc_dp.mechanisms.clipping.clip_weights_graph`, 0 for
    a non-finite norm) the clipped sum is Aᵀ(c ⊙ g) on each ``w``'s coordinates and
    Σᵢ cᵢ ∂ log p(xᵢ)/∂sᵢ on each ``s``'s: the vector–Jacobian product with weights c, from
    the same per-row pieces (rows left out are set to zero, never multiplied by 0). With
    ``safe=False`` the rows of A are not set to zero first (one pass over A less): the result
    is the same unless a left-out row has a non-finite entry in A, and then it is not finite.

    With ``precomputed=True`` each ``A`` and its per-row squared norms ‖Aᵢ‖² — functions of
    the rows alone — become inputs of the graph, to be computed once per run instead of on
    every release (the JAX backend, :mod:`pymc_dp.backends.jax_rows`): two passes over A
    per release (``A @ w`` and Aᵀ(c ⊙ g)) instead of four. Returns ``(total, pieces)`` with
    ``pieces`` a list of ``(A, ‖A‖², A input, ‖A‖² input)``: the expressions in the rows and
    the inputs to feed them to, A's input with every non-finite row set to zero (such a row's
    norm input stays non-finite, so the row is left out as with ``safe=True``).

    Raises
    ------
    _NotLinear
        No such product, or the coordinate sets overlap, or θ reaches the log-likelihood
        some other way than through selections.
    """
    linear, products = _linear_products(theta, n_params, batch, lik)
    z_inputs = [z.type() for z, _, _ in linear]
    [cut] = graph_replace([lik], {z: zi for (z, _, _), zi in zip(linear, z_inputs, strict=True)}, strict=False)
    selections = _theta_selections(cut, batch, z_inputs, theta, n_params)
    all_coords = np.concatenate([c for _, _, c in linear] + [c for _, c in selections])
    if all_coords.size != np.unique(all_coords).size:
        raise _NotLinear
    per_row = _per_row_pieces(cut, batch, z_inputs, selections, theta)
    if precomputed:  # A and ‖Aᵢ‖² as inputs, computed once per run
        a_inputs = [a.type() for _, a, _ in linear]
        squares = [_squares_per_row(a) for _, a, _ in linear]
        square_inputs = [sq.type() for sq in squares]
    else:
        a_inputs = [a for _, a, _ in linear]
        square_inputs = [_squares_per_row(a) for _, a, _ in linear]
    pieces_s, pieces_z = per_row[: len(selections)], per_row[len(selections) :]
    total = _weighted_total(
        lik,
        theta,
        n_params,
        bound,
        pieces_s,
        pieces_z,
        selections,
        linear,
        a_inputs,
        square_inputs,
        safe and not precomputed,
    )
    if not precomputed:
        return graph_replace(total, {zi: z for (z, _, _), zi in zip(linear, z_inputs, strict=True)}, strict=False)
    # z = A @ w read from A's input (its non-finite rows are zero there, and left out by their norms)
    z_from_inputs = [
        node.op.make_node(a_in, node.inputs[1]).outputs[0] for node, a_in in zip(products, a_inputs, strict=True)
    ]
    total = graph_replace(total, dict(zip(z_inputs, z_from_inputs, strict=True)), strict=False)
    pieces = [
        (a, sq, a_in, sq_in)
        for (_, a, _), sq, a_in, sq_in in zip(linear, squares, a_inputs, square_inputs, strict=True)
    ]
    return total, pieces


def _linear_products(theta: Variable, n_params: int, batch: Sequence[Variable], lik: Variable) -> tuple[list, list]:
    """The products ``z = A @ w`` of ``lik``'s graph with ``A`` from the rows alone and ``w`` a selection of θ.

    Returns ``[(z, A, coordinates of w)]`` and the product nodes; raises :class:`_NotLinear` if there is none.
    """
    rowwise = _depends([lik], list(batch))
    with_theta = _depends([lik], [theta])
    linear, products = [], []  # (z, A, coordinates of w); the product nodes
    for node in _toposort_nodes([lik]):
        if not _is_matrix_product(node):
            continue
        a, w = node.inputs
        if a in with_theta or a not in rowwise or w in rowwise or w not in with_theta or w.ndim not in (1, 2):
            continue
        coords = _selection_coordinates(w, theta, n_params)
        if coords is not None:
            linear.append((node.outputs[0], a, coords))
            products.append(node)
    if not linear:
        raise _NotLinear
    return linear, products


def _theta_selections(
    cut: Variable, batch: Sequence[Variable], z_inputs: Sequence[Variable], theta: Variable, n_params: int
) -> list[tuple[Variable, np.ndarray]]:
    """The remaining ways θ enters ``cut``: its maximal selections (each used by other than a rearrangement)."""
    cut_rowwise, cut_theta = _depends([cut], [*batch, *z_inputs]), _depends([cut], [theta])
    selections, seen = [], set()
    for node in _toposort_nodes([cut]):
        for inp in node.inputs:
            if inp in seen or inp not in cut_theta or inp in cut_rowwise:
                continue
            keeps_selecting = isinstance(node.op, _rearranging_ops()) and inp is node.inputs[0]
            if keeps_selecting and node.outputs[0] not in cut_rowwise:
                continue  # its output (or one further down) is the maximal selection
            coords = _selection_coordinates(inp, theta, n_params)
            if coords is not None:  # else computed from selections met earlier in this walk
                seen.add(inp)
                selections.append((inp, coords))
    return selections


def _per_row_pieces(
    cut: Variable,
    batch: Sequence[Variable],
    z_inputs: Sequence[Variable],
    selections: Sequence[tuple[Variable, np.ndarray]],
    theta: Variable,
) -> list[Variable]:
    """Each row's gradient w.r.t. a per-row copy of each selection (B, |s|), then w.r.t. each ``z`` (B, m).

    One row's log-likelihood, vectorised over the rows with per-row copies of the selections;
    raises :class:`_NotLinear` if θ still enters ``cut`` other than through the selections.
    """
    placeholders = [s.type() for s, _ in selections]
    [cut] = graph_replace([cut], dict(zip([s for s, _ in selections], placeholders, strict=True)), strict=False)
    if theta in ancestors([cut]):
        raise _NotLinear
    one = [pt.tensor(dtype=b.dtype, shape=b.type.shape[1:]) for b in batch]
    z_one = [pt.tensor(dtype=z.dtype, shape=z.type.shape[1:]) for z in z_inputs]
    first = {**{b: r[None] for b, r in zip(batch, one, strict=True)}}
    first.update({z: r[None] for z, r in zip(z_inputs, z_one, strict=True)})
    lik_one = graph_replace(cut, first, strict=False)[0]
    n_rows = batch[0].shape[0]
    copies = [pt.alloc(s, n_rows, *s.shape) for s, _ in selections]
    replace = {**dict(zip(one, batch, strict=True)), **dict(zip(z_one, z_inputs, strict=True))}
    replace.update(dict(zip(placeholders, copies, strict=True)))
    lik_rows = vectorize_graph(lik_one, replace)
    grads = pytensor.grad(lik_rows.sum(), [*copies, *z_inputs], disconnected_inputs="ignore")
    return [g if g.ndim == 2 else g.reshape((g.shape[0], -1)) for g in grads]  # (B, |s|) and (B, m)


def _weighted_total(
    lik, theta, n_params, bound, pieces_s, pieces_z, selections, linear, a_inputs, square_inputs, zero_rows
) -> Variable:
    """Σᵢ cᵢ ∇θ log p(xᵢ | θ) from the per-row pieces, with cᵢ the clip factors of the rows' norms.

    ``zero_rows``: rows left out are set to zero in A too, so a non-finite Aᵢ is never multiplied by 0.
    """
    from pymc_dp.clip_math import clip_weights_graph

    norms_sq = pt.zeros_like(lik, dtype=lik.dtype)
    for g in pieces_s:
        norms_sq = norms_sq + _squares_per_row(g)
    for g, square in zip(pieces_z, square_inputs, strict=True):
        norms_sq = norms_sq + _squares_per_row(g) * square
    weights, finite = clip_weights_graph(norms_sq, bound)
    kept = finite[:, None]
    total = pt.zeros((n_params,), dtype=theta.dtype)
    for g, (_, coords) in zip(pieces_s, selections, strict=True):
        part = pt.switch(kept, g * weights[:, None], 0.0).sum(axis=0)
        total = pt.inc_subtensor(total[pt.constant(coords)], part)
    for g, a, (_, _, coords) in zip(pieces_z, a_inputs, linear, strict=True):
        scaled = pt.switch(kept, g * weights[:, None], 0.0)  # (B, m)
        if zero_rows:
            a = pt.switch(kept, a, 0.0)
        part = pt.dot(a.T, scaled)  # (K, m), w's layout
        total = pt.inc_subtensor(total[pt.constant(coords)], part.ravel())
    return total


def _toposort_nodes(outputs: Sequence[Variable]) -> list:
    from pytensor.graph.traversal import toposort

    return list(toposort(list(outputs)))
