"""Calibration of the logistic route's noise-aware likelihood over many releases of one real data set, no sampler.

Run: ``python benchmarks/logistic_calibration.py --data randhie_logistic --epsilon 1 --releases 100``.
Each release is what the one call makes (``utility.py``'s data and public bounds, the Gaussian
mechanism at δ = 0.1/N, two covariate anchors; noise from OS entropy); for each, the Gaussian the
anchored likelihood is close to (:func:`pymc_dp.exponential_family.regression_likelihoods.logistic_anchored_gaussian`,
which NUTS reproduces: ``logistic_one_call.py --save``) is compared with the raw-data MLE
(statsmodels' Logit, NUTS's means to within a small share of its sds). If the likelihood carries
its noise rightly, the centre − MLE has covariance C − C_MLE (C the Gaussian's, C_MLE the MLE's),
so the Mahalanobis distance in it is χ²_P and each coordinate's standardised error is N(0, 1).
Prints their means and tails, the release noise's widening (sd / MLE se), each coordinate's
error in the Gaussian's sds (z, what a 94 % interval covers within ±1.88) and how often a release
misses at least one MLE in its 94 % intervals. About 0.3 CPU s a release on randhie (N = 20,190, P = 7).
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import statsmodels.api as sm
from scipy import stats
from utility import LOGISTIC_DATA

import pymc_dp as pmdp
from pymc_dp.exponential_family.regression_likelihoods import logistic_anchored_gaussian


def one_call_release_gaussian(design: np.ndarray, y: np.ndarray, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """One release as the one call makes it, read as the Gaussian its anchored likelihood is close to: (centre, cov).

    The Gaussian mechanism at δ = 0.1/N, two covariate anchors, covariates in [−1, 1] after the intercept column
    (``utility.py``'s public bounds); noise from OS entropy. Raises ``np.linalg.LinAlgError`` where the released
    Ĥ is singular.
    """
    n, d = design.shape
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the release's advice (e.g. clipped rows) is not measured here
        release = pmdp.release_statistics(
            "logistic_regression",
            (design, y),
            epsilon=epsilon,
            delta=0.1 / n,
            mechanism="gaussian",
            n_features=d,
            x_bounds=([1.0] + [-1.0] * (d - 1), [1.0] * d),
            covariate_anchors=2,
        )
    return logistic_anchored_gaussian(
        release.family,
        release.noisy_statistics,
        n,
        release.noise_variance,
        release.covariate_anchors[-1].likelihood_anchor(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=sorted(LOGISTIC_DATA), default="randhie_logistic")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--releases", type=int, default=100)
    args = parser.parse_args()
    x, y = LOGISTIC_DATA[args.data](None)
    design = np.column_stack([np.ones(len(y)), x])
    d = design.shape[1]
    fit = sm.Logit(y, design).fit(disp=0)
    mle, mle_cov = np.asarray(fit.params), np.asarray(fit.cov_params())
    se = np.sqrt(np.diag(mle_cov))
    distances, standardised, z, widening, singular = [], [], [], [], 0
    for _ in range(args.releases):
        try:
            centre, cov = one_call_release_gaussian(design, y, args.epsilon)
            error = centre - mle
            distance = float(error @ np.linalg.solve(cov - mle_cov, error))
        except np.linalg.LinAlgError:  # Ĥ singular: infinitely wide along its null space (the prior decides)
            singular += 1
            continue
        sd = np.sqrt(np.diag(cov))
        distances.append(distance)
        standardised.append(error / np.sqrt(np.maximum(sd**2 - se**2, 1e-300)))
        z.append(error / sd)
        widening.append(sd / se)
    distances, standardised, z, widening = map(np.asarray, (distances, standardised, z, widening))
    print(f"{args.data}, ε = {args.epsilon:g}: {len(distances)} releases ({singular} with a singular Ĥ left out)")
    spread = distances.std() / np.sqrt(distances.size)
    print(f"  Mahalanobis (χ²_{d} if calibrated): mean {distances.mean():.2f} ± {spread:.2f}")
    for level in (0.05, 0.01):
        print(f"    share with p < {level}: {np.mean(stats.chi2.sf(distances, d) < level):.3f} (calibrated: {level})")
    print(f"  standardised error², mean per coordinate: {np.round((standardised**2).mean(axis=0), 2)}")
    print(f"  sd / MLE se, median per coordinate: {np.round(np.median(widening, axis=0), 2)}")
    print(f"  |z| > 1.88 (outside the 94 % interval), per coordinate: {np.round((np.abs(z) > 1.88).mean(axis=0), 3)}")
    print(f"  releases missing at least one MLE: {(np.abs(z) > 1.88).any(axis=1).mean():.3f}")
    levels = [0.5, 0.9, 1.0]
    print(f"  worst |z| per release, quantiles 50/90/100 %: {np.round(np.quantile(np.abs(z).max(axis=1), levels), 2)}")
    worst_se = np.abs(z * widening).max(axis=1)
    print(f"  worst error in MLE ses per release, quantiles 50/90/100 %: {np.round(np.quantile(worst_se, levels), 1)}")
    largest = np.round(np.quantile(widening.max(axis=1), levels), 2)
    print(f"  largest sd / MLE se per release, quantiles 50/90/100 %: {largest}")
    print(f"  releases whose largest sd / MLE se exceeds 5: {np.mean(widening.max(axis=1) > 5):.3f}")


if __name__ == "__main__":
    main()
