"""The anchor's share of the chains' μ against the ESS law at a quantile of the anchor's offset (issue 36, H36i).

What decides a centred run is the anchor's offset e from the posterior mode (``docs/centred.md``: 17 runs, every
one with e ≤ 1.07 unflagged, every one with e ≥ 1.14 flagged). e is random: the last pilot's landing error and the
anchor's own score noise, both moved through Σ. This simulates, in numpy on the target cells' real designs
(:mod:`centred_anchor_landing`'s releases: the ×3 pilots at the public clips, the saddle-free Newton steps, the
anchor at the last point with clips 2× the 95 % quantile of the norms there), ``--draws`` runs' releases per anchor
share f (of the μ left to the chains after the DP start and the clip bound), from a DP start ``--start`` posterior
sds off (RMS per coordinate, a random direction). No sampler runs. For each f it prints the offset's quantiles
(e: the RMS of ΣĜ in sds, as ``anchor_posterior_scale`` reads it; d = ‖(−Ĥ)⁻¹Ĝ‖ / √(tr Σ)), and the ESS law's
prediction per chain (:func:`pymc_dp.centred_predictions.centred_prediction_at`, the runs' dense metric, the exact
Laplace Σ as the shape) at the median and at the ``--quantile`` of the offset, the iterations chosen (up to the
sampler's cap) either at the median or at that quantile; the chains get (1 − f) of the μ (Gaussian μ add).

Run: ``nice -n 10 python benchmarks/centred_anchor_split.py [--draws 60] [--quantile 0.8]``. About 1 CPU minute.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from centred_anchor_landing import CHAIN_SHARE, design, mode, newton, release, taus

from pymc_dp.accounting.calibrate import CALIBRATION_MARGIN
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.centred_predictions import (
    CENTRE_HESSIAN_SHARE,
    CENTRE_LAST_PILOT_HESSIAN_SHARE,
    CENTRE_NEWTON_SHARE,
    LOGISTIC_THIRD,
    centred_prediction_at,
    newton_weights,
)
from pymc_dp.step_methods.centred_plan import centred_auto_max_iterations
from pymc_dp.step_methods.hmc import DENSE_MASS_STEP_SIZE_JITTER


def offsets(x, y, best, cov, epsilon, anchor_share, start, draws, seed) -> tuple[np.ndarray, np.ndarray]:
    """(e, d) of ``draws`` simulated anchors: RMS of ΣĜ in sds, and ‖ΣĜ‖ (Σ = the released (−Ĥ)⁻¹)."""
    delta = 0.1 / len(y)
    mu_anchor = anchor_share * gaussian_mu_for_target(CHAIN_SHARE * epsilon * (1 - CALIBRATION_MARGIN), delta)
    size = x.shape[1]
    public = (math.sqrt(size), size / 4.0)
    sd = np.sqrt(np.diag(cov))
    rng = np.random.default_rng(seed)
    weights = newton_weights()
    e, d = [], []
    while len(e) < draws:
        direction = rng.normal(size=size)
        theta = best + start * sd * math.sqrt(size) * direction / np.linalg.norm(direction)
        for k, weight in enumerate(weights):
            share = CENTRE_LAST_PILOT_HESSIAN_SHARE if k == len(weights) - 1 else CENTRE_HESSIAN_SHARE
            tau_g, tau_h = taus(CENTRE_NEWTON_SHARE * mu_anchor * weight, share)
            theta = newton(theta, *release(x, y, theta, tau_g, tau_h, public, rng))
        tau_g, tau_h = taus((1 - CENTRE_NEWTON_SHARE) * mu_anchor, CENTRE_HESSIAN_SHARE)
        score, precision, _ = release(x, y, theta, tau_g, tau_h, None, rng)
        eigenvalues = np.linalg.eigvalsh(precision)
        if np.all(eigenvalues > 0):  # else the run's prediction falls back (rare at these cells)
            sigma = np.linalg.inv(precision)
            step = sigma @ score
            e.append(float(np.sqrt(np.mean(step**2 / np.diag(sigma)))))
            d.append(float(np.linalg.norm(step)))
    return np.asarray(e), np.asarray(d)


def predicted(method, chains_mu, cap, cov, lipschitz, e, d, iterations=None) -> tuple[int, float]:
    """(iterations, ESS per chain) of the law at offset (e, d); the iterations maximise it unless given."""
    size = cov.shape[0]
    setting = dict(
        n_params=size,
        posterior_sd=float(np.exp(np.mean(np.log(np.sqrt(np.diag(cov)))))),
        offset_sd=e,
        lipschitz=lipschitz,
        neighbouring="substitute",
        posterior_shape=cov,
        offset_distance=d,
    )
    if method == "DPHMC":
        setting.update(n_leapfrog=10, dense_mass=True, step_size_jitter=DENSE_MASS_STEP_SIZE_JITTER)
    else:
        setting.update(dense_proposal=True)
    grid = [iterations] if iterations else sorted({max(8, int(v)) for v in np.geomspace(20, cap, 30)})
    best = (0, -1.0)
    for k in grid:
        ess = centred_prediction_at(method, k, max(1, round(0.25 * k)), chains_mu, **dict(setting))[1]
        if ess["ess_per_chain"] > best[1]:
            best = (k, float(ess["ess_per_chain"]))
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=60)
    parser.add_argument("--quantile", type=float, default=0.8)
    parser.add_argument("--start", type=float, default=2.0)
    parser.add_argument("--shares", nargs="*", type=float, default=[0.35, 0.5, 0.6, 0.7, 0.8])
    parser.add_argument("--chains", type=int, default=2)
    args = parser.parse_args()
    for name, epsilons in (("fair", (4.0,)), ("randhie", (4.0, 1.0))):
        x, y = design(name)
        best, cov = mode(x, y)
        size = x.shape[1]
        lipschitz = math.sqrt(size) ** 3 * LOGISTIC_THIRD  # x_bounds=(-1, 1): B = √P, κ = B³/(6√3)
        for epsilon in epsilons:
            mu_left = gaussian_mu_for_target(CHAIN_SHARE * epsilon * (1 - CALIBRATION_MARGIN), 0.1 / len(y))
            for share in args.shares:
                e, d = offsets(x, y, best, cov, epsilon, share, args.start, args.draws, seed=7)
                d = d / math.sqrt(np.trace(cov))
                chains_mu = (1 - share) * mu_left / args.chains
                text = []
                for method in ("DPHMC", "DPPenaltyMH"):
                    cap = centred_auto_max_iterations(method, len(y), size)
                    med = (float(np.median(e)), float(np.median(d)) * math.sqrt(np.trace(cov)))
                    q = (float(np.quantile(e, args.quantile)), float(np.quantile(d, args.quantile)))
                    q = (q[0], q[1] * math.sqrt(np.trace(cov)))
                    k_med, ess_med = predicted(method, chains_mu, cap, cov, lipschitz, *med)
                    _, ess_q_at_med = predicted(method, chains_mu, cap, cov, lipschitz, *q, iterations=k_med)
                    k_q, ess_q = predicted(method, chains_mu, cap, cov, lipschitz, *q)
                    text.append(
                        f"{method}: at median {k_med} it, {ess_med:.3g}; at q{args.quantile:g} with those "
                        f"{ess_q_at_med:.3g}, chosen there {k_q} it, {ess_q:.3g}"
                    )
                e_q, d_q = np.quantile(e, args.quantile), np.quantile(d, args.quantile)
                head = f"{name} eps {epsilon:g} f {share:.2f} | e median {np.median(e):.2f} q {e_q:.2f} "
                head += f"P(e<=1.07) {np.mean(e <= 1.07):.2f} | d median {np.median(d):.2f} q {d_q:.2f} | "
                print(head + " | ".join(text), flush=True)


if __name__ == "__main__":
    main()
