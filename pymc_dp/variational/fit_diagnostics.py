"""DPADVI's diagnostics: what a fit keeps of its released gradients, and what is read off them.

All of it is post-processing of the released gradients: the running mean and variance of
the optimiser's iterates over the second half of a fit (:class:`_IterateTail`: the iterate
average and the optimisation noise), the released data gradients and the points they were
taken at (:class:`_GradientTrace`), the Laplace posterior fitted to them
(:func:`_laplace_of_trace`) and its summary in ``optimisation_diagnostics``
(:func:`_laplace_summary`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pymc_dp.variational.trace_laplace import TraceLaplace, trace_laplace

__all__ = ["LAPLACE_MAX_MODE_ERROR"]

#: The Laplace posterior (``posterior="laplace"``) is flagged as unusable when the DP noise
#: leaves its mode uncertain by more than this many Laplace posterior sds in any coordinate:
#: the reported spread is then mostly noise, not posterior.
LAPLACE_MAX_MODE_ERROR = 2.0


class _IterateTail:
    """Running mean and variance (Welford) of the optimiser's iterates from iteration ``start`` on."""

    def __init__(self, start: int) -> None:
        self.start, self.seen, self.count = start, 0, 0
        self.mean: np.ndarray | None = None
        self._m2: np.ndarray | None = None

    def add(self, packed: np.ndarray) -> None:
        self.seen += 1
        if self.seen <= self.start:
            return
        self.count += 1
        if self.mean is None:
            self.mean, self._m2 = np.array(packed, dtype=float), np.zeros_like(packed, dtype=float)
            return
        delta = packed - self.mean
        self.mean = self.mean + delta / self.count
        self._m2 = self._m2 + delta * (packed - self.mean)

    @property
    def variance(self) -> np.ndarray:
        return self._m2 / max(self.count - 1, 1)


class _GradientTrace:
    """The released data gradients (μ block) and the points they were taken at, from iteration ``start`` on."""

    def __init__(self, start: int) -> None:
        self.start, self.seen = start, 0
        self.points: list[np.ndarray] = []
        self.gradients: list[np.ndarray] = []

    def add(self, point: np.ndarray, gradient: np.ndarray) -> None:
        self.seen += 1
        if self.seen > self.start:
            self.points.append(np.array(point, dtype=float))
            self.gradients.append(np.array(gradient, dtype=float))


def _laplace_of_trace(trace: _GradientTrace, prior: Any, to_rows: np.ndarray) -> tuple[TraceLaplace | None, Any]:
    """The Laplace posterior from the released gradients (post-processing), in q's order; or why not.

    Takes only what it needs (the released trace, the data-free prior and the parameter order),
    so that the approximation that computes it on demand holds no reference to the rows.
    """
    if len(trace.points) <= 2 * (prior.n_params + 1):
        return None, f"{len(trace.points)} released gradients in the last fit's second half: too few to fit"

    def prior_gradient(theta: np.ndarray) -> np.ndarray:
        return prior.prior_logp_and_grad(theta)[1]

    try:
        laplace, field = trace_laplace(np.asarray(trace.points), np.asarray(trace.gradients), prior_gradient)
    except ValueError as err:  # our own messages and NumPy's LinAlgError: shapes and counts, no data
        return None, str(err)
    order = np.argsort(to_rows)  # q's index i holds data-layer index order[i]
    in_q_order = dataclasses.replace(
        laplace,
        mode=laplace.mode[order],
        covariance=laplace.covariance[np.ix_(order, order)],
        mode_covariance=laplace.mode_covariance[np.ix_(order, order)],
    )
    return in_q_order, round(field.effective_count, 1)


def _laplace_summary(laplace: TraceLaplace | None, why: Any, sd: np.ndarray) -> tuple[dict[str, Any] | None, list[str]]:
    """The Laplace posterior's entry of ``optimisation_diagnostics`` and the reasons it is unusable.

    ``(None, [])`` when it was not asked for; ``formed: False`` with why not when it could not
    be formed; else its error ratios, spread relative to q's sds ``sd`` and curvature checks.
    """
    if why is not None and laplace is None:
        return {"formed": False, "why_not": why}, []
    if laplace is None:
        return None, []
    reasons = []
    ratio_laplace = laplace.mode_error_ratio
    summary = {
        "formed": True,
        "mode_error_ratio_max": float(np.max(ratio_laplace)),
        "sd_ratio_to_q": [float(v) for v in np.sqrt(np.diag(laplace.covariance)) / sd],
        "clamped_directions": laplace.clamped_directions,
        "unresolved_directions": laplace.unresolved_directions,
        "curvature_relative_error_max": laplace.curvature_relative_error,
        "gradients_fitted": why,
    }
    if laplace.unresolved_directions:
        reasons.append(
            f"The released gradients do not determine the likelihood's curvature in "
            f"{laplace.unresolved_directions} direction(s) (within one standard error of zero): DPADVI's "
            "Laplace posterior is the prior's there, far wider than the posterior. Use more ε or more "
            "rows, or posterior='variational'."
        )
    if float(np.max(ratio_laplace)) > LAPLACE_MAX_MODE_ERROR:
        reasons.append(
            f"The DP noise leaves DPADVI's Laplace mode uncertain by up to {np.max(ratio_laplace):.2g} "
            "posterior sds (its intervals are widened for it, so they are mostly noise): not a usable "
            "posterior. Use more ε or more rows (N·ε), more iterations, or a larger sampling rate."
        )
    return summary, reasons
