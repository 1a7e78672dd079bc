"""DPADVI's clipping check: a noisy histogram of the norms of the quantity DPADVI clips.

DPADVI clips, for every row of a batch, its log-likelihood gradient mapped to the variational
parameters, mean_s gᵢ(θ_s) M_s (θ_s = μ + L ε_s, M_s the reparameterisation's Jacobian:
:mod:`pymc_dp.variational.families`). For mean-field q its norm is at least ‖gᵢ‖ (the μ block
is gᵢ; the ρ block adds gᵢ ⊙ ε ⊙ sigmoid(ρ)), so the score norm ‖gᵢ‖ at the fitted mean
understates the share of rows clipped, most when q is wide. This module releases the
histogram of the clipped quantity itself, at public draws ε of the fitted q: the share of
rows above ``grad_clip`` read off it is the share the fit's releases clip at those draws.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from pymc_dp._validation import check_finite_positive, check_neighbouring
from pymc_dp.mechanisms.clip_bound import histogram_sensitivity, norm_histogram
from pymc_dp.mechanisms.clipping import row_chunks
from pymc_dp.mechanisms.noise import SecureNoise
from pymc_dp.mechanisms.poisson_gradient import mapped_gradient_norms

__all__ = ["DrawSet", "NoisyMappedGradientNormHistogram", "mapped_norm_counts"]

#: One set of Monte Carlo draws as a release uses them: (θ draws (S × P), their Jacobians M_s (P × D) each).
DrawSet = tuple[np.ndarray, list[np.ndarray]]


def mapped_norm_counts(row_gradients: Callable[[np.ndarray], np.ndarray], draw_sets: Sequence[DrawSet]) -> np.ndarray:
    """Histogram weights of ‖mean_s gᵢ(θ_s) M_s‖ over one chunk of rows, averaged over the K draw sets.

    Each row puts weight 1/K in the bin of its norm at each draw set: its weights are
    non-negative and sum to 1 whatever its data (the sensitivity of
    :class:`NoisyMappedGradientNormHistogram`). Raw data, for a mechanism only; shared by the
    in-process mechanism and the Dask workers' partial counts.
    """
    counts = None
    for thetas, jacobians in draw_sets:
        part = norm_histogram(mapped_gradient_norms(row_gradients, thetas, jacobians))
        counts = part if counts is None else counts + part
    return counts / len(draw_sets)


class NoisyMappedGradientNormHistogram:
    """The Gaussian mechanism on the histogram of the norms DPADVI clips, at public draws of a fitted q.

    Releases h + ξ with h_b = (1/K) Σ_k #{i : ‖mean_s gᵢ(θ_ks) M_ks‖ in bin b} over K public draw
    sets (θ_ks, M_ks) and the fixed grid :data:`pymc_dp.mechanisms.clip_bound.NORM_GRID_EDGES`,
    ξ ~ N(0, σ² I), σ = τ Δ. The per-row norms never leave this object.

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        The data access for the model's parameters θ.
    noise_multiplier : float
        τ > 0, noise standard deviation per unit of sensitivity.
    neighbouring : {"substitute", "add_remove"}
        Relation under which Δ = √2 or 1.

    Notes
    -----
    **Neighbouring relation and sensitivity.** Each row contributes a weight vector wᵢ ≥ 0 with
    Σ_b wᵢ_b = 1 (1/K at each of its K norms), whatever its data: the row's own term only.
    Add/remove (one row added or removed): the histogram moves by wᵢ, ‖wᵢ‖₂ ≤ ‖wᵢ‖₁ = 1, Δ = 1.
    Substitute (one row replaced, N public): it moves by wᵢ − w′ᵢ and, both being non-negative,
    ‖wᵢ − w′ᵢ‖₂² = ‖wᵢ‖² + ‖w′ᵢ‖² − 2⟨wᵢ, w′ᵢ⟩ ≤ 2, Δ = √2. These are the sensitivities of the
    one-count-per-row score-norm histogram (:class:`pymc_dp.mechanisms.clip_bound.
    NoisyScoreNormHistogram`), so one release is the same Gaussian mechanism, μ = 1/(2τ²), at
    the same price (:meth:`NoisyScoreNormHistogram.events`).

    **What ε covers.** The noisy counts; the share above a bound is post-processing. The draw
    sets must be public: the fitted q is a DP release (the fit's accounted gradients) and the
    ε's come from a generator that reads no data.

    References
    ----------
    .. [1] Dwork, C. and Roth, A. (2014). The Algorithmic Foundations of Differential
       Privacy, §3.3 (histogram queries) and Appendix A (Gaussian mechanism).
    .. [2] Jälkö, J., Dikmen, O. and Honkela, A. (2017). Differentially private variational
       inference for non-conjugate models. UAI, Algorithm 1 (the clipped quantity).
    """

    def __init__(self, rows, noise_multiplier: float, neighbouring: str = "substitute") -> None:
        self._rows = rows
        self.noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        self.neighbouring = check_neighbouring("neighbouring", neighbouring)
        self.std = self.noise_multiplier * histogram_sensitivity(self.neighbouring)

    def _counts(self, draw_sets: Sequence[DrawSet]) -> np.ndarray:
        """The exact weights over all rows, chunk by chunk (raw data: never returned outside a release)."""
        total = None
        for chunk in row_chunks(self._rows):
            part = mapped_norm_counts(partial(self._rows.grad_rows, rows=chunk), draw_sets)
            total = part if total is None else total + part
        return total

    def release_counts(self, draw_sets: Sequence[DrawSet], rng: np.random.Generator | SecureNoise) -> np.ndarray:
        """The noisy histogram of the clipped quantity's norms at ``draw_sets`` (one release)."""
        if not draw_sets:
            raise ValueError("`draw_sets` must hold at least one set of draws. Found none.")
        counts = self._counts(draw_sets)
        return counts + rng.normal(0.0, self.std, size=counts.shape)
