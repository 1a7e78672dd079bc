"""How many rows the public bounds clip: one noisy count, the clipping check of a statistics release.

A sufficient-statistics release maps every row into the public bounds (``x_bounds``,
``y_bounds``, a count bound ``y_max``, valid labels) before anything is summed. That keeps the
sensitivity, but a bound narrower than the data biases the statistics, and with them the
posterior, by an amount its width does not show. :class:`PrivateClippedCount` reads the rows
once and keeps only the number of rows that the family's admission moved; that number leaves
only with noise (discrete Laplace or discrete Gaussian, exact integer noise), priced by the
release's accountant with the statistics themselves. The rows, and which of them moved, never
leave.

Neighbouring relation: substitute (one row replaced, N public; the release's own relation),
under which the count has sensitivity 1: the replaced row was clipped or not, and so is its
replacement. Under add/remove it is 1 as well (the added or removed row counts 0 or 1).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent, PureDPReleases
from pymc_dp.mechanisms.noise import SecureNoise, discrete_gaussian_noise, discrete_laplace_noise

__all__ = ["CLIPPED_COUNT_SENSITIVITY", "PrivateClippedCount", "discrete_laplace_sd"]

#: Sensitivity of the clipped-row count, under substitution and under add/remove alike.
CLIPPED_COUNT_SENSITIVITY = 1


def discrete_laplace_sd(epsilon: float) -> float:
    """Standard deviation of the discrete Laplace noise of scale t = 1/ε on ℤ (sensitivity 1; public).

    Var = 2e^{−1/t}/(1 − e^{−1/t})² (Canonne, Kamath and Steinke 2020): slightly below the
    continuous Laplace's 2t².
    """
    q = math.exp(-check_finite_positive("epsilon", epsilon))
    return math.sqrt(2.0 * q) / (1.0 - q)


def _raw_rows(data: Any, n_rows: int) -> np.ndarray:
    """The rows laid out as the families' ``check_data`` lays out the admitted ones, before admission.

    (X, y) → [x, y]; (X, y, groups) → [label, 1, x, y] (the grouped families' layout, X may be
    None); a single array → its values as one column. Called after ``check_data`` has checked
    the shapes.
    """
    if isinstance(data, tuple | list) and len(data) == 3:
        x, y, groups = data
        x = np.empty((n_rows, 0)) if x is None else np.asarray(x, dtype=float).reshape(n_rows, -1)
        labels = np.asarray(groups, dtype=float).reshape(n_rows)
        return np.column_stack([labels, np.ones(n_rows), x, np.asarray(y, dtype=float).reshape(n_rows)])
    if isinstance(data, tuple | list):
        x, y = data
        x = np.asarray(x, dtype=float).reshape(n_rows, -1)
        return np.column_stack([x, np.asarray(y, dtype=float).reshape(n_rows)])
    return np.asarray(data, dtype=float).reshape(n_rows, -1)


class PrivateClippedCount:
    """The number of rows a family's public bounds clip, held exactly; only a noisy count leaves.

    The constructor applies the family's own admission (``check_data(data, "clamp")``: numbers
    clipped to their bounds, counts and labels rounded into range, NaN to a bound, a grouped
    row's invalid label dropped) and counts the rows it changed. Nothing else is kept.

    Parameters
    ----------
    family : pymc_dp.exponential_family.ExponentialFamily
        The release's family (its public bounds).
    data : array or (X, y) or (X, y, groups)
        The raw rows, as given to :func:`pymc_dp.release_statistics`.

    Notes
    -----
    **Neighbouring relation and sensitivity.** Substitute (one row replaced, N public): the
    count moves by at most 1 (Δ₁ = Δ₂ = 1); under add/remove also by at most 1.
    :meth:`laplace_noisy` adds discrete Laplace noise of scale 1/ε (ε-DP);
    :meth:`gaussian_noisy` discrete Gaussian noise of variance τ² (ρ = 1/(2τ²)-zCDP, the ρ of
    :meth:`gaussian_events`). Both are exact integer samplers (Canonne, Kamath and Steinke
    2020), so the guarantee does not rest on floating-point noise.

    **What ε covers.** One noisy count; the share of clipped rows and any flag computed from
    it are post-processing.

    References
    ----------
    .. [1] Canonne, C. L., Kamath, G. and Steinke, T. (2020). The discrete Gaussian for
       differential privacy. NeurIPS, Algorithms 2 and 3.
    """

    def __init__(self, family: Any, data: Any) -> None:
        admitted = np.asarray(family.check_data(data, "clamp"))
        n_rows = int(admitted.shape[0])
        admitted = admitted.reshape(n_rows, -1).astype(float)
        raw = _raw_rows(data, n_rows)
        if raw.shape != admitted.shape:  # public: the layouts, not the values
            raise ValueError(
                f"`data` must be laid out as the {family.name} family's rows. Found {raw.shape[1]} columns "
                f"against the family's {admitted.shape[1]}."
            )
        with np.errstate(invalid="ignore"):
            moved = ~np.all(raw == admitted, axis=1)  # NaN never equals: a NaN entry counts as clipped
        if getattr(family, "n_groups", None) is not None:  # a grouped row whose label is not a group is dropped
            moved |= admitted[:, 0] < 0
        self.n_rows = n_rows
        self._exact_clipped_count = int(np.count_nonzero(moved))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_rows={self.n_rows})"

    @staticmethod
    def laplace_events(epsilon: float, label: str) -> list[PrivacyEvent]:
        """One ε-DP count (discrete Laplace of scale 1/ε, sensitivity 1)."""
        return [PureDPReleases(epsilon, 1, label=label)]

    @staticmethod
    def gaussian_events(noise_multiplier: float, label: str) -> list[PrivacyEvent]:
        """One Gaussian count at multiplier τ (σ = τ, sensitivity 1)."""
        return [GaussianReleases(noise_multiplier, 1, label=label)]

    def laplace_noisy(self, epsilon: float, source: np.random.Generator | SecureNoise | None) -> tuple[int, float]:
        """(count + discrete Laplace noise of scale 1/ε, the noise's sd): one ε-DP release."""
        epsilon = check_finite_positive("epsilon", epsilon)
        [noise] = discrete_laplace_noise(Fraction(CLIPPED_COUNT_SENSITIVITY) / Fraction(epsilon), 1, source)
        return self._exact_clipped_count + int(noise), discrete_laplace_sd(epsilon)

    def gaussian_noisy(
        self, noise_multiplier: float, source: np.random.Generator | SecureNoise | None
    ) -> tuple[int, float]:
        """(count + discrete Gaussian noise of variance τ², τ): one release at ρ = 1/(2τ²)."""
        noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        variance = (Fraction(noise_multiplier) * CLIPPED_COUNT_SENSITIVITY) ** 2
        [noise] = discrete_gaussian_noise(variance, 1, source)
        return self._exact_clipped_count + int(noise), noise_multiplier
