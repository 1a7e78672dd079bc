"""Bias of the logistic release's covariate model without noise, and what covariate anchors leave of it.

Run: ``python benchmarks/logistic_anchor_bias.py``. For ``randhie_logistic`` and
``fair_logistic`` (``utility.py``'s data: covariates scaled to [−1, 1] by public ranges) it
computes the exact released statistics (Σ s·x, Σ xxᵀ) — no noise — and solves the estimating
equation of the noise-aware likelihood's Gaussian covariate model
(:func:`pymc_dp.exponential_family.noise_aware.logistic_anchor_point`), then once, twice and
three times more with an exact anchor at the previous solution — F(β̂) = Σ tanh(xᵀβ̂/2)·x and
H(β̂) = Σ (1 − tanh²(xᵀβ̂/2))·xxᵀ, a Newton step on the exact score — as
``release_statistics(..., covariate_anchors=k)`` does with noise. Prints each solution's
distance to the raw-data MLE in units of the MLE's standard errors (statsmodels' Logit). Seconds.
"""

from __future__ import annotations

import numpy as np
import statsmodels.api as sm
from utility import LOGISTIC_DATA

from pymc_dp.exponential_family.families import LogisticCovariateAnchor, LogisticRegression
from pymc_dp.exponential_family.noise_aware import logistic_anchor_point


def main() -> None:
    for name, load in sorted(LOGISTIC_DATA.items()):
        x, y = load(None)
        design = np.column_stack([np.ones(len(y)), x])
        n, d = design.shape
        fit = sm.Logit(y, design).fit(disp=0)
        settings = {"n_features": d, "x_bounds": ([1.0] + [-1.0] * (d - 1), [1.0] * d)}
        family = LogisticRegression(**settings)
        rows = family.check_data((design, y))
        exact = family.row_statistics(rows).sum(axis=0)
        point = logistic_anchor_point(family, exact, n)
        print(f"{name} (N = {n}, K = {d}): (estimate − MLE) / standard error")
        print(f"  Gaussian covariate model: {np.round((point - fit.params) / fit.bse, 2)}")
        for k in (1, 2, 3):
            anchor = LogisticCovariateAnchor(anchor=tuple(point), **settings)
            value, hessian = anchor.split(anchor.row_statistics(rows).sum(axis=0))
            point = logistic_anchor_point(family, exact, n, (point, value, hessian))
            label = f"{k} anchor{'s' if k > 1 else ''}:"
            print(f"  {label:26s}{np.round((point - fit.params) / fit.bse, 2)}")


if __name__ == "__main__":
    main()
