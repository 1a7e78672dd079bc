"""Clip math: bound each row's contribution, and the sensitivity of a clipped sum.

Pure functions of the values they are given: they hold no data, draw no noise and release
nothing, so they sit below the data layer. The data layer's compiled clipped sums
(:meth:`pymc_dp.data.RowLikelihood.clipped_grad_sum`, whose clip factors come from
:func:`clip_weights_graph`) and the mechanisms (:mod:`pymc_dp.mechanisms`, which clip, sum and
then add calibrated noise) use the same rules from here. :mod:`pymc_dp.mechanisms.clipping`
re-exports every name, so imports from there keep working.

Notes
-----
Neighbouring relation: substitute (one row replaced, N public) or add/remove (one row added or
removed). Clipping each row to L2 norm C bounds the L2 sensitivity of the clipped sum by 2C
under substitute neighbours and by C under add/remove (:func:`sensitivity_of_clipped_sum`);
this holds only if row i's clipped term depends on row i alone, which the data layer checks
(``pymc_dp.data``'s model-structure checker). Clipping alone gives no privacy: ε is spent by the
noise a mechanism adds to the clipped sum.
"""

from __future__ import annotations

import math

import numpy as np

from pymc_dp._validation import check_neighbouring

__all__ = [
    "clip_l2",
    "clip_values",
    "clip_weights_graph",
    "clipped_sum_l2",
    "clipped_sum_l2_linear",
    "partitioned_cell_sensitivities",
    "row_chunks",
    "sensitivity_of_clipped_sum",
]


def _check_bound(name: str, bound: float) -> float:
    bound = float(bound)
    if math.isnan(bound) or bound < 0:
        raise ValueError(f"`{name}` must be a non-negative number (inf disables clipping). Found {bound!r}.")
    return bound


def clip_values(values: np.ndarray, bound: float) -> np.ndarray:
    """Clip every entry of ``values`` to [−bound, bound].

    NaN entries are mapped to −bound so that a row whose value cannot be computed still has
    bounded influence (treated as the least favourable value for an acceptance ratio).

    Parameters
    ----------
    values : ndarray
        Per-row values.
    bound : float
        Clip bound ≥ 0; ``inf`` disables clipping (and then sensitivity is unbounded).

    Returns
    -------
    ndarray
        A new clipped array.
    """
    bound = _check_bound("bound", bound)
    values = np.asarray(values, dtype=float)
    out = np.clip(values, -bound, bound)
    out[np.isnan(out)] = -bound
    return out


def clip_l2(rows: np.ndarray, bound: float) -> np.ndarray:
    """Scale each row of ``rows`` (shape rows × dims) to L2 norm at most ``bound``.

    Rows with a non-finite entry are replaced by zeros (their influence is then bounded).
    """
    bound = _check_bound("bound", bound)
    rows = np.asarray(rows, dtype=float)
    if rows.ndim != 2:
        raise ValueError(f"`rows` must be a 2-d array (rows × dims). Found shape {rows.shape}.")
    finite = np.all(np.isfinite(rows), axis=1)
    safe = np.where(finite[:, None], rows, 0.0)
    if math.isinf(bound):
        return safe
    norms = np.sqrt(np.einsum("ij,ij->i", safe, safe))
    scale = _clip_factors(norms, bound)
    return safe * scale[:, None]


def _clip_factors(norms: np.ndarray, bound: float) -> np.ndarray:
    """min(1, bound/‖row‖) for every row norm (1 for zero rows, without dividing by zero)."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        return np.where(norms > bound, bound / norms, 1.0)


def clip_weights_graph(norms_sq, bound):
    """Symbolic (PyTensor) clip factors of rows with squared L2 norms ``norms_sq``; ``bound`` a scalar.

    Returns ``(weights, finite)``: ``finite`` marks rows whose squared norm is finite, and
    ``weights`` is min(1, bound/‖row‖) on those rows and 0 on the others, so that
    Σᵢ weightsᵢ rowᵢ (non-finite rows left out) is :func:`clipped_sum_l2` of the rows. The
    same rule as :func:`clipped_sum_l2`, for the data layer's compiled clipped sums
    (:meth:`pymc_dp.data.RowLikelihood.clipped_grad_sum`), where the rows' norms come from
    the graph without the rows themselves being formed.
    """
    import pytensor.tensor as pt

    norms_sq = pt.as_tensor_variable(norms_sq)
    finite = pt.invert(pt.or_(pt.isnan(norms_sq), pt.isinf(norms_sq)))
    norms = pt.sqrt(pt.switch(finite, norms_sq, 0.0))
    factors = pt.switch(pt.gt(norms, bound), bound / norms, 1.0)
    return pt.switch(finite, factors, 0.0), finite


def clipped_sum_l2(rows: np.ndarray, bound: float) -> np.ndarray:
    """Σᵢ clip_L2(rowᵢ, bound): the same as ``clip_l2(rows, bound).sum(axis=0)``, in two passes.

    Computes the row norms, then one matrix-vector product with the clip factors, instead of
    materialising the clipped matrix. Rows with a non-finite entry contribute zero.
    """
    bound = _check_bound("bound", bound)
    rows = np.asarray(rows, dtype=float)
    if rows.ndim != 2:
        raise ValueError(f"`rows` must be a 2-d array (rows × dims). Found shape {rows.shape}.")
    with np.errstate(invalid="ignore", over="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    finite = np.isfinite(norms)
    if not finite.all():
        rows = np.where(finite[:, None], rows, 0.0)
        norms = np.where(finite, norms, 0.0)
    scale = _clip_factors(norms, bound)
    return scale @ rows


def clipped_sum_l2_linear(rows: np.ndarray, linear_map: np.ndarray, bound: float) -> np.ndarray:
    """Σᵢ clip_L2(rowᵢ M, bound) without forming the (rows × D) matrix of rowᵢ M.

    ‖rowᵢ M‖² = rowᵢ (M Mᵀ) rowᵢᵀ, so the norms cost O(B P²) and the sum (Σᵢ sᵢ rowᵢ) M, where
    M is (P × D). Equal to ``clipped_sum_l2(rows @ linear_map, bound)``; rows with a
    non-finite entry contribute zero.
    """
    bound = _check_bound("bound", bound)
    rows = np.asarray(rows, dtype=float)
    linear_map = np.asarray(linear_map, dtype=float)
    if rows.ndim != 2 or linear_map.ndim != 2 or rows.shape[1] != linear_map.shape[0]:
        raise ValueError(
            f"`rows` (B × P) and `linear_map` (P × D) must be 2-d and conformable. Found shapes {rows.shape} and "
            f"{linear_map.shape}."
        )
    with np.errstate(invalid="ignore", over="ignore"):
        norms = np.sqrt(np.maximum(np.einsum("ij,ij->i", rows @ (linear_map @ linear_map.T), rows), 0.0))
    finite = np.isfinite(norms)
    if not finite.all():
        rows = np.where(finite[:, None], rows, 0.0)
        norms = np.where(finite, norms, 0.0)
    scale = _clip_factors(norms, bound)
    return (scale @ rows) @ linear_map


def sensitivity_of_clipped_sum(bound: float, neighbouring: str = "substitute") -> float:
    """L2 sensitivity of a sum of rows each clipped to norm ``bound``.

    Substitute neighbours (one row replaced): 2·bound. Add/remove neighbours: bound.
    """
    bound = _check_bound("bound", bound)
    neighbouring = check_neighbouring("neighbouring", neighbouring)
    return (2.0 if neighbouring == "substitute" else 1.0) * bound


def partitioned_cell_sensitivities(
    lower: np.ndarray, upper: np.ndarray, neighbouring: str = "substitute"
) -> tuple[float, float]:
    """(Δ₁, Δ₂) of a release of G cells where each row adds its statistic to one cell only.

    One row's statistic lies in the box [``lower``, ``upper``] (public bounds, one entry per
    coordinate of a cell); rⱼ = max(|lowerⱼ|, |upperⱼ|) is coordinate j's reach. Whatever G is,
    the cells are priced as one (:mod:`pymc_dp.exponential_family.grouped` derives it):

    * add/remove one row: one cell moves by that row's statistic, Δ₁ = Σⱼ rⱼ, Δ₂ = (Σⱼ rⱼ²)^½;
    * substitute: within one cell at most Σⱼ (upperⱼ − lowerⱼ) in L1 and (Σⱼ (upperⱼ − lowerⱼ)²)^½
      in L2; a row that changes cell moves two cells, at most 2Σⱼ rⱼ and (2Σⱼ rⱼ²)^½. Δ is the
      larger of the two.

    Notes
    -----
    Neighbouring relation: ``"substitute"`` (one row replaced, N public) or ``"add_remove"``.
    A pure function of the public bounds: no data, no noise, no ε.
    """
    neighbouring = check_neighbouring("neighbouring", neighbouring)
    lower, upper = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    reach = np.maximum(np.abs(lower), np.abs(upper))
    if neighbouring == "add_remove":
        return float(np.sum(reach)), float(math.sqrt(np.sum(reach**2)))
    widths = upper - lower
    l1 = max(float(np.sum(widths)), 2.0 * float(np.sum(reach)))
    l2 = math.sqrt(max(float(np.sum(widths**2)), 2.0 * float(np.sum(reach**2))))
    return l1, l2


def row_chunks(rows, batch: np.ndarray | None = None) -> list:
    """The row selections of a chunked pass over ``rows`` (all rows, or the index array ``batch``).

    A data layer with :meth:`pymc_dp.data.RowLikelihood.row_chunks` bounds each chunk's
    per-row matrix by its memory limit; any other (a stand-in table) is one chunk. Clipping
    is row by row, so a clipped sum over chunks equals the clipped sum over all rows.
    """
    chunks = getattr(rows, "row_chunks", None)
    if chunks is None:
        return [batch]
    return chunks(batch)
