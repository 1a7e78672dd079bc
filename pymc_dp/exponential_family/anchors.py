"""Covariate anchors of a regression release: their shares of the budget, their checks and their release.

Split out of :mod:`pymc_dp.exponential_family.release` (which re-exports the public names). A
covariate anchor is a further release of the same rows at a public point β̂ computed from the
releases before it (adaptive composition): the model's mean function and its slope there
(:class:`~pymc_dp.exponential_family.families.LogisticCovariateAnchor`, or the family's own
``anchor_family``). Its share of the budget is fixed by public settings before any row is read.

Neighbouring relation: substitute (one row replaced, N public). The rows may be in memory or Dask arrays
(:mod:`pymc_dp.backends.dask_rows`): the same per-row sums, computed per partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pymc_dp._validation import check_nonnegative_int
from pymc_dp.backends.dask_rows import private_statistics
from pymc_dp.exponential_family.families import (
    ANCHOR_HESSIAN_WEIGHT,
    ExponentialFamily,
    LogisticCovariateAnchor,
    LogisticRegression,
    psd_projection,
    split_anchor_statistics,
)
from pymc_dp.exponential_family.noise_aware import logistic_anchor_point
from pymc_dp.exponential_family.release_noise import noise_grid_scale, noisy_release

__all__ = [
    "ANCHOR_SHARE",
    "LAST_ANCHOR_PART",
    "MAX_COVARIATE_ANCHORS",
    "CovariateAnchor",
    "anchor_record",
    "anchor_shares",
    "check_covariate_anchors",
    "release_anchors",
]

#: Share of the release's privacy spent on its covariate anchors (``covariate_anchors`` > 0): of ε for
#: Laplace, of ρ = 1/(2τ²) for Gaussian noise (whose compositions add 1/τ² exactly). The variance the
#: likelihood sees on Σ s·x is the main release's plus the last anchor's, about τ²(Δ₂²/(1 − a) + Δₐ²/(a·p));
#: for the regressions of the utility benchmark it is smallest near a = 0.4 (main noise sd × 1/√0.6).
#: Derivation of why it is a constant: with ρ split as (1 − a)ρ and aρ both terms scale as 1/ρ, so the
#: minimising a = √B/(√A + √B) (A = Δ₂², B = Δₐ²/p) depends on the public bounds and P only, never on ε
#: or N. Measured (issue 34, ``benchmarks/anchor_share.py``, 60 releases per cell, no sampler; the widest
#: sd / MLE se per release, median and 90 % quantile; the Mahalanobis statistic's mean against χ²_P):
#: ``randhie`` logistic (P = 7) at ε = 1: a = 0.4 3.87 / 7.15, calibrated (6.9); 0.55 3.76 / 6.30 (7.8);
#: 0.7 4.38 / 6.49 (6.9); at ε = 4: 0.4 1.41 / 1.51; 0.55 1.44 / 1.54. ``fair`` logistic (P = 5) at ε = 1:
#: 0.4 5.25 / 17.4, calibrated (4.8, 5 % below p = 0.05); 0.55 5.46 / 26.2 and miscalibrated (6.4, 13 %);
#: 0.7 5.37 / 46.4 (5.8, 13 %); at ε = 4: 0.4 1.58 / 1.97; 0.55 1.53 / 1.81; 0.7 1.67 / 1.91 (``randhie``
#: at ε = 4, 0.7: 1.56 / 1.65).
#: So 0.55 narrows ``randhie``'s ε = 1 tail a little (7.15 → 6.30, within the noise of 60 releases; an
#: earlier 60 gave 7.9 → 5.6) and widens and miscalibrates ``fair``'s (17.4 → 26.2, 13 % of releases
#: below p = 0.05): 0.4 stays, for the count families too (their widths not re-measured).
ANCHOR_SHARE = 0.4

#: The last anchor's part of :data:`ANCHOR_SHARE` (its noise enters the likelihood; the earlier ones only
#: place the next anchor).
LAST_ANCHOR_PART = 0.75


@dataclass(frozen=True)
class CovariateAnchor:
    """One released covariate anchor of a logistic-regression release (public).

    The mechanism's output for (F(β̂), w·H(β̂)) with F(β̂) = Σᵢ tanh(xᵢᵀβ̂/2)·xᵢ and
    H(β̂) = Σᵢ (1 − gᵢ²)xᵢxᵢᵀ (:class:`pymc_dp.exponential_family.families.LogisticCovariateAnchor`).

    Attributes
    ----------
    anchor : ndarray
        β̂, computed from the earlier releases only (post-processing).
    noisy_statistics : ndarray
        The mechanism's output (F̂, then the upper triangle of w·Ĥ).
    scale : float
        Its noise's Laplace scale b or Gaussian standard deviation σ.
    noise_variance : float
        2b² or σ² per coordinate.
    grid : float or None
        γ of a discrete-noise anchor (its ``noisy_statistics`` lie on γℤ); None for continuous noise.
    """

    anchor: np.ndarray
    noisy_statistics: np.ndarray
    scale: float
    noise_variance: float
    grid: float | None = None

    @property
    def value(self) -> np.ndarray:
        """F̂, the released mean function at β̂."""
        return split_anchor_statistics(self.noisy_statistics, self.anchor.size)[0]

    @property
    def hessian(self) -> np.ndarray:
        """Ĥ, the released Σ (1 − g²)xxᵀ at β̂, projected onto the positive semi-definite cone (post-processing)."""
        return psd_projection(split_anchor_statistics(self.noisy_statistics, self.anchor.size)[1])

    @property
    def hessian_noise_variance(self) -> float:
        """The noise variance of each entry of Ĥ: that of the released entry over w²."""
        return self.noise_variance / ANCHOR_HESSIAN_WEIGHT**2

    def likelihood_anchor(self) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, float]:
        """(β̂, F̂, σₐ², Ĥ, σ_H²) for the noise-aware logistic likelihood."""
        return self.anchor, self.value, self.noise_variance, self.hessian, self.hessian_noise_variance


def anchor_record(anchor: CovariateAnchor, mechanism: str) -> dict[str, Any]:
    noise = "laplace_scale" if mechanism == "laplace" else "gaussian_std"
    return {
        "anchor": [float(v) for v in anchor.anchor],
        "unprojected_statistics": [float(v) for v in anchor.noisy_statistics],
        noise: anchor.scale,
        **({} if anchor.grid is None else {"grid_spacing": anchor.grid}),
    }


def anchor_shares(count: int, share: float = ANCHOR_SHARE) -> list[float]:
    """Each covariate anchor's share of the release's privacy (of ε, or of 1/τ² for Gaussian noise).

    ``share`` in all (:data:`ANCHOR_SHARE`, or a family's own ``anchor_share``, public); the last
    anchor, whose noise enters the likelihood, takes :data:`LAST_ANCHOR_PART` of it and the
    earlier ones, which only place the next anchor, split the rest equally. Empty for no anchors;
    one anchor takes the whole share.
    """
    if count == 0:
        return []
    if count == 1:
        return [share]
    earlier = share * (1.0 - LAST_ANCHOR_PART) / (count - 1)
    return [earlier] * (count - 1) + [share * LAST_ANCHOR_PART]


#: Most covariate anchors one release takes (each is a Newton step: two or three suffice).
MAX_COVARIATE_ANCHORS = 10


def check_covariate_anchors(family: ExponentialFamily, covariate_anchors: Any) -> int:
    covariate_anchors = check_nonnegative_int("covariate_anchors", covariate_anchors)
    if covariate_anchors > MAX_COVARIATE_ANCHORS:
        raise ValueError(
            f"`covariate_anchors` must be at most {MAX_COVARIATE_ANCHORS} (each anchor is a Newton step of the "
            f"estimate: two or three suffice). Found {covariate_anchors}."
        )
    anchored = type(family) is LogisticRegression or hasattr(family, "anchor_family")
    if covariate_anchors and not anchored:
        raise ValueError(
            "`covariate_anchors` applies to logistic_regression only, or to poisson_regression and "
            "negative_binomial_regression. Found "
            f"{covariate_anchors} for the {family.name} family."
        )
    least = getattr(family, "min_covariate_anchors", 0)
    if covariate_anchors < least:
        raise ValueError(
            f"`covariate_anchors` must be at least {least} for {family.name} (its noise-aware likelihood reads the "
            f"last anchor; 1 is recommended). Found {covariate_anchors}."
        )
    return covariate_anchors


def release_anchors(
    family: LogisticRegression,
    data: Any,
    out_of_bounds: str,
    noisy: np.ndarray,
    n_rows: int,
    settings: list[float],
    mechanism: str,
    rng: Any,
    noise: str = "continuous",
) -> tuple[CovariateAnchor, ...]:
    """Release one covariate anchor per entry of ``settings`` (its ε or τ), each at the estimate from the releases
    before it (inside the run).

    ``data`` in memory, or as Dask arrays: then each anchor's clipped sums are computed per partition on the
    workers at the public point β̂ (:func:`pymc_dp.backends.dask_rows.private_statistics`), one pass over the
    partitions per anchor, and the noise is added here, as in memory.
    """
    released: list[CovariateAnchor] = []
    for setting in settings:
        previous = None if not released else (released[-1].anchor, released[-1].value, released[-1].hessian)
        if hasattr(family, "anchor_family"):  # a family that places its own anchors (counts.py)
            point = family.anchor_point(noisy, n_rows, previous)  # post-processing of earlier releases
            anchor_family = family.anchor_family(point)
        else:
            point = logistic_anchor_point(family, noisy, n_rows, previous)  # post-processing of earlier releases
            anchor_family = LogisticCovariateAnchor(family.n_features, family.x_bounds, tuple(point))
        grid_scale = noise_grid_scale(anchor_family, mechanism, setting) if noise == "discrete" else None
        private = private_statistics(anchor_family, data, out_of_bounds, grid_scale=grid_scale)
        values, scale = noisy_release(private, mechanism, noise, setting, rng)
        variance = 2.0 * scale**2 if mechanism == "laplace" else scale**2
        released.append(
            CovariateAnchor(np.asarray(point, dtype=float), values, float(scale), float(variance), private.grid)
        )
    return tuple(released)
