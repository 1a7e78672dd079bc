"""Where the centring anchor lands (issue 36, H36g): the last noisy Newton point's distance from the mode, by split.

Simulates in numpy, on the target cells' real designs (``utility.fair_logistic``: 6,366 rows,
P = 5; ``utility.randhie_logistic``: 20,190 rows, P = 7; covariates in [−1, 1], priors N(0, 2²)),
the releases ``pmdp.sample``'s centring path makes before its chains: the pilots' clipped score
and Hessian sums at the public clips B = √P and B²/4 (``x_bounds=(-1, 1)``), Gaussian noise of
their planned multipliers (substitute: sensitivity 2b), and the saddle-free Newton step of
:func:`pymc_dp.step_methods.centred_plan.newton_point` (the prior's score and curvature exact).
The μ is the run's: :func:`pymc_dp.centred_predictions.centring_noise_multipliers`'s arithmetic
at the chains' share 0.75 of ε, δ = 0.1/N, with the anchor share, the pilots' share of it, their
number, how the pilots' share is spread over them (``weights``) and the Hessian's share varied.
The DP start is ``off`` posterior sds per coordinate from the exact mode (a random direction).

Printed per cell: the last point's distance from the exact mode in posterior sds, the RMS over
coordinates and the worst coordinate, median and 90th percentile over ``--draws`` draws of the
noise and the start's direction; and the anchor's own Newton offset ΣĜ (what
:func:`pymc_dp.step_methods.centred_plan.anchor_posterior_scale` reads as e), released at the last
point at the anchor's multipliers with clips at 2× the 95 % quantile of the norms there. A few
CPU seconds per split.

Run: ``nice -n 10 python benchmarks/centred_anchor_landing.py [--draws 40]``.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from utility import _fair_logistic_data, _randhie

from pymc_dp.accounting.calibrate import CALIBRATION_MARGIN
from pymc_dp.accounting.gaussian import gaussian_mu_for_target

PRIOR_PRECISION = 0.25  # N(0, 2²) on alpha and every beta
CHAIN_SHARE = 0.75  # 1 − init_epsilon_share (0.2) − clip_epsilon_share (0.05)


def design(name: str) -> tuple[np.ndarray, np.ndarray]:
    if name == "fair":
        x, y = _fair_logistic_data(None)
    else:
        x, visits = _randhie(None)
        y = (visits > 0).astype("int64")
    return np.column_stack([np.ones(len(y)), x]), y.astype(float)


def mode(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact posterior mode and the Laplace sds there."""
    theta = np.zeros(x.shape[1])
    for _ in range(40):
        p = 1 / (1 + np.exp(-x @ theta))
        precision = (x * (p * (1 - p))[:, None]).T @ x + PRIOR_PRECISION * np.eye(x.shape[1])
        theta = theta + np.linalg.solve(precision, x.T @ (y - p) - PRIOR_PRECISION * theta)
    return theta, np.linalg.inv(precision)


def release(x, y, theta, tau_g, tau_h, clips, rng) -> tuple[np.ndarray, np.ndarray, float]:
    """(Ĝ, −Ĥ + prior precision, σ_H) at ``theta``: clipped sums plus Gaussian noise (substitute: 2b)."""
    size = x.shape[1]
    p = 1 / (1 + np.exp(-np.clip(x @ theta, -500, 500)))
    w = p * (1 - p)
    scores = (y - p)[:, None] * x
    score_norms, hessian_norms = np.linalg.norm(scores, axis=1), w * np.sum(x**2, axis=1)
    if clips is None:
        b_g, b_h = 2 * np.quantile(score_norms, 0.95), 2 * np.quantile(hessian_norms, 0.95)
    else:
        b_g, b_h = clips
    sigma_g, sigma_h = 2 * tau_g * b_g, 2 * tau_h * b_h
    clipped = scores * np.minimum(1, b_g / np.maximum(score_norms, 1e-300))[:, None]
    w_clipped = w * np.minimum(1, b_h / np.maximum(hessian_norms, 1e-300))
    gradient = clipped.sum(axis=0) + rng.normal(0, sigma_g, size)
    noise = rng.normal(0, sigma_h / math.sqrt(2), (size, size))
    noise = np.triu(noise, 1) + np.triu(noise, 1).T + np.diag(rng.normal(0, sigma_h, size))
    precision = (x * w_clipped[:, None]).T @ x - noise + PRIOR_PRECISION * np.eye(size)
    return gradient - PRIOR_PRECISION * theta, 0.5 * (precision + precision.T), sigma_h


def newton(theta, score, precision, sigma_h) -> np.ndarray:
    eigenvalues, vectors = np.linalg.eigh(precision)
    eigenvalues = np.maximum(np.abs(eigenvalues), sigma_h * math.sqrt(2 * theta.size))
    return theta + vectors @ ((vectors.T @ score) / eigenvalues)


def taus(mu: float, hessian_share: float) -> tuple[float, float]:
    return math.sqrt(0.5 / ((1 - hessian_share) * mu)), math.sqrt(0.5 / (hessian_share * mu))


def simulate(x, y, best, cov, epsilon, split, off, draws, seed=1) -> dict[str, float]:
    anchor_share, newton_share, weights, hessian_share, last_hessian_share = split
    delta = 0.1 / len(y)
    mu_anchor = anchor_share * gaussian_mu_for_target(CHAIN_SHARE * epsilon * (1 - CALIBRATION_MARGIN), delta)
    weights = np.asarray(weights, float) / np.sum(weights)
    size = x.shape[1]
    public = (math.sqrt(size), size / 4.0)
    sd = np.sqrt(np.diag(cov))
    rng = np.random.default_rng(seed)
    rms, worst, anchor_e = [], [], []
    for _ in range(draws):
        direction = rng.normal(size=size)
        theta = best + off * sd * math.sqrt(size) * direction / np.linalg.norm(direction)
        for k, weight in enumerate(weights):
            share = last_hessian_share if k == len(weights) - 1 else hessian_share
            tau_g, tau_h = taus(newton_share * mu_anchor * weight, share)
            theta = newton(theta, *release(x, y, theta, tau_g, tau_h, public, rng))
        z = (theta - best) / sd
        rms.append(float(np.sqrt(np.mean(z**2))))
        worst.append(float(np.max(np.abs(z))))
        tau_g, tau_h = taus((1 - newton_share) * mu_anchor, 0.25)
        score, precision, _ = release(x, y, theta, tau_g, tau_h, None, rng)
        eigenvalues = np.linalg.eigvalsh(precision)
        if np.all(eigenvalues > 0):
            sigma = np.linalg.inv(precision)
            step = sigma @ score
            anchor_e.append(float(np.sqrt(np.mean(step**2 / np.diag(sigma)))))
    q = lambda v, p: float(np.quantile(v, p)) if v else float("nan")  # noqa: E731
    return {
        "rms_median": q(rms, 0.5),
        "rms_90": q(rms, 0.9),
        "worst_median": q(worst, 0.5),
        "worst_90": q(worst, 0.9),
        "anchor_e_median": q(anchor_e, 0.5),
    }


SPLITS = {  # anchor share, pilots' share of it, pilot weights, pilot Hessian share, last pilot's Hessian share
    "now: 5 even, 0.6": (0.5, 0.6, [1, 1, 1, 1, 1], 0.25, 0.25),
    "5 doubling, 0.6": (0.5, 0.6, [1, 2, 4, 8, 16], 0.25, 0.25),
    "5 doubling, 0.6, last H 0.1": (0.5, 0.6, [1, 2, 4, 8, 16], 0.25, 0.1),
    "4 doubling, 0.6": (0.5, 0.6, [1, 2, 4, 8], 0.25, 0.25),
    "5 tripling, 0.6": (0.5, 0.6, [1, 3, 9, 27, 81], 0.25, 0.25),
    "5 doubling, 0.75": (0.5, 0.75, [1, 2, 4, 8, 16], 0.25, 0.25),
    "5 doubling, 0.6, anchor 0.6": (0.6, 0.6, [1, 2, 4, 8, 16], 0.25, 0.25),
    "5 tripling, 0.6, last H 0.1": (0.5, 0.6, [1, 3, 9, 27, 81], 0.25, 0.1),
    "5 tripling, 0.5, last H 0.1": (0.5, 0.5, [1, 3, 9, 27, 81], 0.25, 0.1),
    "4 tripling, 0.6, last H 0.1": (0.5, 0.6, [1, 3, 9, 27], 0.25, 0.1),
    "6 tripling, 0.6, last H 0.1": (0.5, 0.6, [1, 3, 9, 27, 81, 243], 0.25, 0.1),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=40)
    parser.add_argument("--splits", nargs="*", default=list(SPLITS))
    parser.add_argument("--offsets", nargs="*", type=float, default=[3.0, 10.0, 30.0])
    args = parser.parse_args()
    for name, epsilons in (("fair", (4.0,)), ("randhie", (4.0, 1.0))):
        x, y = design(name)
        best, cov = mode(x, y)
        for epsilon in epsilons:
            for label in args.splits:
                cells = [simulate(x, y, best, cov, epsilon, SPLITS[label], off, args.draws) for off in args.offsets]
                text = "; ".join(
                    f"start {off:g}: rms {c['rms_median']:.2f} ({c['rms_90']:.2f}) worst {c['worst_median']:.2f} "
                    f"({c['worst_90']:.2f}) e {c['anchor_e_median']:.2f}"
                    for off, c in zip(args.offsets, cells, strict=True)
                )
                print(f"{name} eps {epsilon:g} | {label:<30} | {text}", flush=True)


if __name__ == "__main__":
    main()
