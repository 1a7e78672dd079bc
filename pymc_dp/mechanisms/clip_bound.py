"""A private clip bound: a DP quantile of the per-row score norms, from one noisy histogram.

Clipping each row's score (the gradient of its log-likelihood) at a bound b bounds the
sensitivity of every release, but the right b depends on the model's scale and on the data:
a b far below the typical score biases the chain (most rows clipped), a b far above it wastes
the budget on noise (the noise scales with b). This module chooses b privately: it releases a
histogram of the per-row score norms ‖∇θ log p(xᵢ | θ_ref)‖ on a fixed, public, logarithmic
grid with Gaussian noise, and reads the q-quantile off the noisy cumulative counts. The
histogram is one Gaussian release; the quantile, and the share of rows above any bound, are
post-processing of it.

The reference point θ_ref is public (the model's initial point, or a released DP fit); the
score norms there stand in for the norms along the chain, which is why the released
histogram is also reported (:func:`share_above`) so that a user can see how much of the data
a bound clips at θ_ref.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive, check_neighbouring
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent
from pymc_dp.mechanisms.noise import SecureNoise

__all__ = [
    "NORM_GRID_EDGES",
    "ClipBoundRelease",
    "NoisyScoreNormHistogram",
    "clipping_summary",
    "consistent_cumulative",
    "cumulative_noise_rows",
    "histogram_sensitivity",
    "norm_histogram",
    "quantile_from_histogram",
    "quantile_is_resolvable",
    "share_above",
    "share_above_sd",
]

#: The public grid of the histogram: 4 bins per decade from 1e-3 to 1e5 (33 edges); with the two
#: open-ended bins below and above, 34 bins. Few bins keep the noise of the cumulative counts
#: small (its standard deviation grows as √bins); the bound is interpolated within a bin.
NORM_GRID_EDGES: np.ndarray = np.logspace(-3.0, 5.0, 33)


def histogram_sensitivity(neighbouring: str) -> float:
    """L2 sensitivity of a histogram with one count per row.

    Replacing one row moves one unit from one bin to another (L2 √2); adding or removing one
    changes one count by one (L2 1).
    """
    return math.sqrt(2.0) if check_neighbouring("neighbouring", neighbouring) == "substitute" else 1.0


def norm_histogram(norms: np.ndarray, edges: np.ndarray = NORM_GRID_EDGES) -> np.ndarray:
    """Counts of ``norms`` in the bins (−∞, e₀), [e₀, e₁), …, [e_last, ∞): ``len(edges) + 1`` counts.

    A NaN or infinite norm (a row whose score is not finite at θ_ref) counts in the top bin:
    whatever its value, every row counts exactly once, which is what the sensitivity assumes.
    """
    norms = np.asarray(norms, dtype=float).ravel()
    norms = np.where(np.isfinite(norms), norms, np.inf)
    index = np.searchsorted(np.asarray(edges, dtype=float), norms, side="right")
    return np.bincount(index, minlength=len(edges) + 1).astype(float)


def consistent_cumulative(counts: np.ndarray) -> np.ndarray:
    """The non-decreasing, non-negative cumulative counts closest (least squares) to the noisy ones.

    Cumulative counts of a histogram never decrease; the noisy ones do, by a random walk of
    noise through the empty bins. Their isotonic regression (pool-adjacent-violators) is the
    least-squares projection onto non-decreasing sequences and removes most of that noise
    (Hay, Rastogi, Miklau and Suciu 2010, "Boosting the accuracy of differentially private
    histograms through consistency", §4). Post-processing of the released counts: free.
    """
    from scipy.optimize import isotonic_regression

    cumulative = np.cumsum(np.asarray(counts, dtype=float))
    return np.clip(isotonic_regression(cumulative, increasing=True).x, 0.0, None)


def quantile_from_histogram(
    counts: np.ndarray, quantile: float, total: float | None = None, edges: np.ndarray = NORM_GRID_EDGES
) -> float:
    """The ``quantile`` of the norms behind a (noisy) histogram on ``edges``.

    The cumulative counts are made consistent (:func:`consistent_cumulative`: non-decreasing,
    non-negative) and compared with ``quantile · total`` (``total``: by default the last
    consistent cumulative count, so the target is always reached; with N instead, noise that
    sums negative can leave a high quantile unreached). Within the first bin where the
    cumulative count reaches the target the bound is interpolated on the log scale; below the
    grid it is the bottom edge, above it the top edge. Post-processing of the released
    counts: free.
    """
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"`quantile` must be in (0, 1]. Found {quantile!r}.")
    edges = np.asarray(edges, dtype=float)
    cumulative = consistent_cumulative(counts)
    total = float(cumulative[-1]) if total is None else float(total)
    if not total > 0:  # nothing but noise: no information about the norms
        return float(edges[-1])
    target = quantile * total
    reached = np.nonzero(cumulative >= target)[0]
    if not reached.size or reached[0] >= len(edges):  # only the open top bin (or nothing) reaches it
        return float(edges[-1])
    k = int(reached[0])
    if k == 0:  # the open bottom bin
        return float(edges[0])
    before = cumulative[k - 1]
    step = cumulative[k] - before
    fraction = float(np.clip((target - before) / step, 0.0, 1.0)) if step > 0 else 1.0
    return float(edges[k - 1] * (edges[k] / edges[k - 1]) ** fraction)


def share_above(counts: np.ndarray, bound: float, total: float | None = None, edges: np.ndarray = NORM_GRID_EDGES):
    """The (noisy) share of rows whose norm is above ``bound``: post-processing.

    Bins wholly above ``bound`` count fully; the bin holding it counts in proportion to the
    log-distance from ``bound`` to its upper edge (the interpolation of
    :func:`quantile_from_histogram`).
    """
    counts = np.asarray(counts, dtype=float)
    edges = np.asarray(edges, dtype=float)
    total = float(counts.sum()) if total is None else float(total)
    if not total > 0:
        return float("nan")
    k = int(np.searchsorted(edges, bound, side="right"))  # the bin holding bound
    above = counts[k + 1 :].sum()
    if 0 < k < len(edges):
        above += counts[k] * math.log(edges[k] / bound) / math.log(edges[k] / edges[k - 1])
    elif k == 0:
        above += counts[0]
    return float(min(1.0, max(0.0, above / total)))


def share_above_sd(noise_std: float, bound: float, total: float, edges: np.ndarray = NORM_GRID_EDGES) -> float:
    """Standard deviation of :func:`share_above`'s noise: σ√k / total, k the bins summed above ``bound``."""
    k = len(edges) + 1 - int(np.searchsorted(np.asarray(edges, dtype=float), bound, side="right"))
    return float(noise_std * math.sqrt(k) / total) if total > 0 else float("nan")


def cumulative_noise_rows(noise_std: float, edges: np.ndarray = NORM_GRID_EDGES) -> float:
    """Standard deviation (in rows) of the noise of a cumulative count over the whole grid: σ√(bins)."""
    return float(noise_std * math.sqrt(len(edges) + 1))


def quantile_is_resolvable(noise_std: float, n_rows: float, quantile: float, edges: np.ndarray = NORM_GRID_EDGES):
    """Whether the noise lets the ``quantile`` be read off the histogram: σ√(bins) ≤ (1 − q) N / 2.

    A public, data-free criterion (σ, the grid, q and N where it is public): beyond it the
    noise of the cumulative counts is larger than half the rows above the quantile, and the
    bound can land anywhere on the grid (measured: at N = 2,000 and σ = 51 the 0.95 quantile
    of |N(0.5, 1)| norms, 2.2, was estimated between 1.7 and 4·10⁴ in 90 % of releases).
    """
    return cumulative_noise_rows(noise_std, edges) <= (1.0 - quantile) * n_rows / 2.0


def clipping_summary(
    noisy_counts: np.ndarray, bound: float, noise_std: float, n_rows: int | None, reference: str
) -> dict[str, Any]:
    """What a released histogram says about ``bound``: post-processing, as recorded on a result.

    The noisy share of rows above ``bound`` at ``reference`` (:func:`share_above`), its noise
    sd (:func:`share_above_sd`) and the share 1/√N above which the clipping bias is of the order
    of a posterior sd (:func:`pymc_dp.diagnostics.clipping_problem`). ``n_rows``: N where it is
    public (substitute neighbours), else None and the noisy total stands in.
    """
    total = float(n_rows) if n_rows is not None else max(float(np.sum(noisy_counts)), 1.0)
    return {
        "bound": bound,
        "share_above_bound_at_reference": round(share_above(noisy_counts, bound, total), 5),
        "share_above_bound_sd": round(share_above_sd(noise_std, bound, total), 5),
        "bias_threshold_share": round(1.0 / math.sqrt(total), 5),
        "reference": reference,
    }


@dataclass(frozen=True)
class ClipBoundRelease:
    """What :meth:`NoisyScoreNormHistogram.release` returns: released values only.

    Attributes
    ----------
    bound : float
        The chosen clip bound: the ``quantile`` of the noisy histogram.
    quantile : float
        The quantile asked for.
    noisy_counts : numpy.ndarray
        The released histogram (Gaussian noise added), on :data:`NORM_GRID_EDGES`.
    share_above_bound : float
        The noisy share of rows whose score norm at θ_ref is at or above ``bound``.
    """

    bound: float
    quantile: float
    noisy_counts: np.ndarray
    share_above_bound: float


class NoisyScoreNormHistogram:
    """The Gaussian mechanism on the histogram of per-row score norms at a public point.

    Releases h + ξ with hₖ the number of rows whose score norm ‖∇θ log p(xᵢ | θ_ref)‖ falls in
    bin k of :data:`NORM_GRID_EDGES` (every row in exactly one bin), ξ ~ N(0, σ² I) with
    σ = τ Δ. The per-row norms never leave this object; the clip bound is the ``quantile`` of
    the noisy cumulative counts.

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        The data access for the step's parameters.
    noise_multiplier : float
        τ > 0, noise standard deviation per unit of sensitivity.
    neighbouring : {"substitute", "add_remove"}
        Relation under which Δ = √2 (one unit moves between two bins) or 1 (add/remove).

    Notes
    -----
    **Neighbouring relation and sensitivity.** Substitute (one row replaced, N public): one
    unit moves between two bins, Δ = √2; add/remove: one count changes by one, Δ = 1. Either
    way one release is a Gaussian mechanism with Δ/σ = 1/τ, μ = 1/(2τ²) (Sommer et al. 2019,
    Lemma 12), whatever θ_ref and the data. The quantile is read against the noisy total
    under either relation (N is not used).

    **What ε covers.** The noisy counts; the bound and the share of rows above it are
    post-processing. θ_ref must be public (data-free, or itself a DP release that is
    accounted).

    References
    ----------
    .. [1] Dwork, C. and Roth, A. (2014). The Algorithmic Foundations of Differential
       Privacy, §3.3 (histogram queries) and Appendix A (Gaussian mechanism).
    .. [2] Andrew, G., Thakkar, O., McMahan, H. B. and Ramaswamy, S. (2021). Differentially
       private learning with adaptive clipping. NeurIPS (private quantiles of update norms).
    """

    def __init__(self, rows, noise_multiplier: float, neighbouring: str = "substitute") -> None:
        self._rows = rows
        self.noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        self.neighbouring = check_neighbouring("neighbouring", neighbouring)
        self.std = self.noise_multiplier * histogram_sensitivity(self.neighbouring)

    @staticmethod
    def events(noise_multiplier: float, count: int, label: str) -> list[PrivacyEvent]:
        """The accounting of ``count`` histogram releases: Gaussian, Δ/σ = 1/τ each."""
        return [GaussianReleases(noise_multiplier, int(count), label=label)]

    def release_counts(self, reference: np.ndarray | Sequence[float], rng: np.random.Generator | SecureNoise):
        """The noisy histogram of score norms at θ_ref = ``reference`` (one release)."""
        reference = np.asarray(reference, dtype=float)
        counts = norm_histogram(np.linalg.norm(self._rows.grad_rows(reference), axis=1))
        return counts + rng.normal(0.0, self.std, size=counts.shape)

    def release(
        self, reference: np.ndarray | Sequence[float], quantile: float, rng: np.random.Generator | SecureNoise
    ) -> ClipBoundRelease:
        """Release the noisy histogram of score norms at θ_ref = ``reference`` and read the bound off it."""
        if not 0.0 < float(quantile) <= 1.0:
            raise ValueError(f"`quantile` must be in (0, 1]. Found {quantile!r}.")
        noisy = self.release_counts(reference, rng)
        bound = quantile_from_histogram(noisy, float(quantile))  # against the noisy total
        return ClipBoundRelease(bound, float(quantile), noisy, share_above(noisy, bound))
