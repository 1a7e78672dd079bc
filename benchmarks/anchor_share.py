"""The logistic release's width and calibration against the anchors' share of the budget, no sampler (issue 34).

Run: ``python benchmarks/anchor_share.py --data randhie_logistic --epsilon 1 --shares 0.4 0.55 0.7 --releases 60``.
For each share a of :data:`pymc_dp.exponential_family.anchors.ANCHOR_SHARE` (set for this process only), the
releases the one call makes (``utility.py``'s data and public bounds, the Gaussian mechanism at δ = 0.1/N, two
covariate anchors; noise from OS entropy) are read through the Gaussian the anchored likelihood is close to
(:func:`pymc_dp.exponential_family.regression_likelihoods.logistic_anchored_gaussian`, as
``logistic_calibration.py``) and compared with the raw-data MLE: the widest sd / MLE se per release (median and
90 % quantile), the Mahalanobis calibration statistic (χ²_P if the noise is carried rightly: its mean and the share
with p < 0.05), and the share of releases missing an MLE in their 94 % intervals. About 0.3 CPU s a release.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import statsmodels.api as sm
from logistic_calibration import one_call_release_gaussian
from scipy import stats
from utility import LOGISTIC_DATA

import pymc_dp.exponential_family.release as release_module


def measure(design: np.ndarray, y: np.ndarray, epsilon: float, share: float, releases: int) -> dict:
    """The width and calibration of ``releases`` logistic releases with the anchors' share ``share``."""
    d = design.shape[1]
    fit = sm.Logit(y, design).fit(disp=0)
    mle, mle_cov = np.asarray(fit.params), np.asarray(fit.cov_params())
    se = np.sqrt(np.diag(mle_cov))
    release_module.ANCHOR_SHARE = share  # read by release_statistics at each call (this process only)
    widest, distances, missed, singular = [], [], [], 0
    for _ in range(releases):
        try:
            centre, cov = one_call_release_gaussian(design, y, epsilon)
            error = centre - mle
            distances.append(float(error @ np.linalg.solve(cov - mle_cov, error)))
        except np.linalg.LinAlgError:  # Ĥ singular: infinitely wide along its null space
            singular += 1
            continue
        sd = np.sqrt(np.diag(cov))
        widest.append(float(np.max(sd / se)))
        missed.append(bool(np.any(np.abs(error / sd) > 1.88)))
    distances = np.asarray(distances)
    return {
        "epsilon": epsilon,
        "share": share,
        "releases": len(widest),
        "singular": singular,
        "widest_sd_ratio_median": round(float(np.median(widest)), 3),
        "widest_sd_ratio_q90": round(float(np.quantile(widest, 0.9)), 3),
        "mahalanobis_mean": round(float(distances.mean()), 3),
        "mahalanobis_mean_se": round(float(distances.std() / np.sqrt(distances.size)), 3),
        "chi2_dof": d,
        "share_p_below_0.05": round(float(np.mean(stats.chi2.sf(distances, d) < 0.05)), 3),
        "missing_an_mle": round(float(np.mean(missed)), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=sorted(LOGISTIC_DATA), default="randhie_logistic")
    parser.add_argument("--epsilon", type=float, nargs="+", default=[1.0])
    parser.add_argument("--shares", type=float, nargs="+", default=[0.4, 0.55, 0.7])
    parser.add_argument("--releases", type=int, default=60)
    args = parser.parse_args()
    x, y = LOGISTIC_DATA[args.data](None)
    design = np.column_stack([np.ones(len(y)), x])
    for epsilon in args.epsilon:
        for share in args.shares:
            print(json.dumps({"data": args.data, **measure(design, y, epsilon, share, args.releases)}), flush=True)


if __name__ == "__main__":
    main()
