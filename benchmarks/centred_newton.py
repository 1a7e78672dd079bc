"""Noisy Newton steps before the centring anchor (issue 36): where the last step lands, simulated in numpy.

The releases of ``pmdp.sample``'s centring path, simulated on the data of
``benchmarks/centred_defaults.py`` (``_common.logistic_regression``: N = 20,000, five N(0, 1)
covariates, priors N(0, 2²)), ε = 1, δ = 1e-6: the anchor's μ is ``CENTRE_ANCHOR_SHARE`` of the
chains' share of ε (0.75, less the calibration margin); each pilot release clips scores and
Hessians at 2× the 95 % quantile of their norms at its point (the "auto" clips) and adds the
Gaussian noise of its share; the step is :func:`pymc_dp.step_methods.centred_plan.newton_point`'s
(saddle-free, eigenvalues floored at σ_H√(2P)). A DP start ``off`` posterior sds per
coordinate from the mode (a random direction) is moved by ``steps`` pilots on ``share`` of the
anchor's μ. Printed: the worst coordinate's distance of the last point from the exact mode in
posterior sds, median and 90th percentile over 30 draws of the noise. Seconds to run.

Run: ``nice -n 10 python benchmarks/centred_newton.py``.
"""

from __future__ import annotations

import math

import numpy as np

from pymc_dp.accounting.calibrate import CALIBRATION_MARGIN
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.step_methods.centred_plan import CENTRE_ANCHOR_SHARE, CENTRE_HESSIAN_SHARE

N, FEATURES, PRIOR_PRECISION = 20_000, 5, 0.25


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``_common.logistic_regression(N, FEATURES, seed)`` (same generator calls)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, FEATURES))
    beta = rng.normal(size=FEATURES)
    y = (rng.random(N) < 1 / (1 + np.exp(-(0.3 + x @ beta)))).astype(float)
    return np.column_stack([np.ones(N), x]), y


def mode(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    theta = np.zeros(x.shape[1])
    for _ in range(30):
        p = 1 / (1 + np.exp(-x @ theta))
        precision = (x * (p * (1 - p))[:, None]).T @ x + PRIOR_PRECISION * np.eye(x.shape[1])
        theta = theta + np.linalg.solve(precision, x.T @ (y - p) - PRIOR_PRECISION * theta)
    return theta, np.sqrt(np.diag(np.linalg.inv(precision)))


def pilot_step(x, y, theta, mu, rng) -> np.ndarray:
    """One pilot release at ``theta`` (μ, a quarter to the Hessian) and the saddle-free Newton step from it."""
    size = x.shape[1]
    p = 1 / (1 + np.exp(-np.clip(x @ theta, -500, 500)))
    w = p * (1 - p)
    scores = (y - p)[:, None] * x
    score_norms, hessian_norms = np.linalg.norm(scores, axis=1), w * np.sum(x**2, axis=1)
    b_g, b_h = 2 * np.quantile(score_norms, 0.95), 2 * np.quantile(hessian_norms, 0.95)
    tau_g = math.sqrt(0.5 / ((1 - CENTRE_HESSIAN_SHARE) * mu))
    tau_h = math.sqrt(0.5 / (CENTRE_HESSIAN_SHARE * mu))
    sigma_g, sigma_h = 2 * tau_g * b_g, 2 * tau_h * b_h
    clipped = scores * np.minimum(1, b_g / np.maximum(score_norms, 1e-300))[:, None]
    w_clipped = w * np.minimum(1, b_h / np.maximum(hessian_norms, 1e-300))
    gradient = clipped.sum(axis=0) + rng.normal(0, sigma_g, size)
    noise = rng.normal(0, sigma_h / math.sqrt(2), (size, size))
    noise = np.triu(noise, 1) + np.triu(noise, 1).T + np.diag(rng.normal(0, sigma_h, size))
    precision = (x * w_clipped[:, None]).T @ x - noise + PRIOR_PRECISION * np.eye(size)
    eigenvalues, vectors = np.linalg.eigh(0.5 * (precision + precision.T))
    eigenvalues = np.maximum(np.abs(eigenvalues), sigma_h * math.sqrt(2 * size))
    score = gradient - PRIOR_PRECISION * theta
    return theta + vectors @ ((vectors.T @ score) / eigenvalues)


def main() -> None:
    x, y = data()
    best, sd = mode(x, y)
    mu_anchor = CENTRE_ANCHOR_SHARE * gaussian_mu_for_target(0.75 * (1 - CALIBRATION_MARGIN), 1e-6)
    print(f"posterior sds {sd.min():.4f}-{sd.max():.4f}; anchor mu {mu_anchor:.4g}")
    for off in (3, 5, 10, 30, 60, 100):
        for steps, share in ((1, 0.3), (2, 0.4), (3, 0.5), (4, 0.6), (5, 0.6)):
            rng = np.random.default_rng(1)
            worst = []
            for _ in range(30):
                direction = rng.normal(size=best.size)
                theta = best + off * sd * math.sqrt(best.size) * direction / np.linalg.norm(direction)
                for _ in range(steps):
                    theta = pilot_step(x, y, theta, share * mu_anchor / steps, rng)
                worst.append(float(np.max(np.abs(theta - best) / sd)))
            print(
                f"start {off:>3} sds off, {steps} steps on {share} of the anchor's mu: last point off by "
                f"{np.median(worst):.1f} (90 %: {np.quantile(worst, 0.9):.1f}) sds",
                flush=True,
            )


if __name__ == "__main__":
    main()
