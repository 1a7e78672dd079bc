"""The centred DPHMC's ESS law against a simulation of its kernel on the tilted Gaussian target (issue 36, H36h).

NumPy only, no data and no PyMC: the chains target N(m, C) (C the posterior covariance, e.g. NUTS's on
``randhie``; the anchor θ̂ = 0 and ‖m‖² = e²·tr C, the law's R² = tr C (1 + e²)), with the centred releases'
noise exactly as the mechanisms add it: each of the L + 1 gradients gets N(0, (f τ_g ½κ‖θ − θ̂‖²)² I), the
ratio N(0, (f τ_l c)²) with c = ½κ‖Δθ‖((‖a‖² + ‖a′‖²)/2 − ‖Δθ‖²/6), the penalty test's −σ²/2, the dense mass
M⁻¹ = C/r² (r² = tr C / P), η jittered by U(0.5, 1.5), dual averaging to 0.65 from r·π/(2L) (PyMC's
constants), starts from N(θ̂, 4C). On a Gaussian the residuals are zero, so this is the chains' whole noise.
Printed per cell: the whitened step η̄/r the dual averaging settled on (median over chains) against the law's
(:func:`pymc_dp.centred_predictions.centred_ess`), and the ESS per chain: the law's, and the simulation's as
the benchmarks measure it (the minimum over coordinates of ArviZ's bulk ESS of 2 chains, halved; median over
pairs).

Run: ``nice -n 10 python benchmarks/centred_law_sim.py --covariance /tmp/nuts_refs/nuts_randhie_logistic.npz
--offsets 0.5 1.6 3`` (about 1 CPU s per cell with 20 chains).
"""

from __future__ import annotations

import argparse
import math

import arviz as az
import numpy as np

from pymc_dp.centred_predictions import centred_ess


def simulate(
    cov,
    offset,
    kappa,
    tau_l,
    tau_g,
    n_leapfrog=10,
    tune=500,
    draws=1500,
    chains=20,
    seed=0,
    metric=None,
    restarts=(),
    start_sd=2.0,
    fixed_step=None,
    start_at_mean=False,
) -> dict:
    """Run ``chains`` independent centred DPHMC chains (vectorised); returns the settled whitened steps and ESS.

    ``metric``: the mass's covariance M⁻¹ ∝ ``metric`` (default ``cov``: the shape exact), e.g. a metric whose
    widest eigenvalue was raised to the Hessian noise's edge (H36j)."""
    rng = np.random.default_rng(seed)
    size = cov.shape[0]
    direction = rng.standard_normal(size)
    mean = offset * math.sqrt(np.trace(cov)) * direction / np.linalg.norm(direction)
    metric = cov if metric is None else metric
    precision, r = np.linalg.inv(cov), math.sqrt(np.trace(metric) / size)
    inv_mass = metric / r**2
    momentum_factor = np.linalg.inv(np.linalg.cholesky(inv_mass)).T
    theta = start_sd * rng.standard_normal((chains, size)) @ np.linalg.cholesky(cov).T + (
        mean if start_at_mean else 0.0
    )
    mu = math.log(10 * r * 0.5 * math.pi / n_leapfrog)
    log_step = np.full(chains, mu - math.log(10))
    mu = np.full(chains, mu)
    log_bar, hbar, out = log_step.copy(), np.zeros(chains), np.empty((chains, draws, size))
    start_count = 0  # the dual averaging's t restarts at each of ``restarts`` (H36j), from the current η
    final = np.exp(log_step)  # η̄: the dual averaging's average, fixed when tuning ends

    def logp(x):
        d = x - mean
        return -0.5 * np.einsum("ci,ij,cj->c", d, precision, d)

    def gradient(x):
        noise = 2.0 * tau_g * 0.5 * kappa * np.sum(x**2, axis=1)
        return -(x - mean) @ precision + noise[:, None] * rng.standard_normal(x.shape)

    for it in range(tune + draws):
        eta = (np.exp(log_step) if it < tune else final) * (1 + 0.5 * (2 * rng.uniform(size=chains) - 1))
        if fixed_step is not None:  # a whitened step fixed in advance (no dual averaging)
            eta = fixed_step * r * (1 + 0.5 * (2 * rng.uniform(size=chains) - 1))
            final = np.full(chains, fixed_step * r)
        p0 = rng.standard_normal((chains, size)) @ momentum_factor.T
        x, p = theta.copy(), p0 + 0.5 * eta[:, None] * gradient(theta)
        for i in range(n_leapfrog):
            x = x + eta[:, None] * (p @ inv_mass.T)
            p = p + (eta if i < n_leapfrog - 1 else 0.5 * eta)[:, None] * gradient(x)
        with np.errstate(invalid="ignore", over="ignore"):  # a diverged trajectory: rejected (NaN → −∞)
            na, nb, nd = (np.sum(v**2, axis=1) for v in (theta, x, x - theta))
            kinetic = [0.5 * np.einsum("ci,ij,cj->c", q, inv_mass, q) for q in (p0, p)]
            sigma = 2.0 * tau_l * 0.5 * kappa * np.sqrt(nd) * ((na + nb) / 2 - nd / 6)
            log_alpha = logp(x) - logp(theta) + sigma * rng.standard_normal(chains) - 0.5 * sigma**2
            log_alpha = np.nan_to_num(log_alpha + kinetic[0] - kinetic[1], nan=-np.inf)
        theta = np.where((np.log(rng.uniform(size=chains)) < log_alpha)[:, None], x, theta)
        if it in restarts:  # restart from the current iterate: μ = log(10 η), H̄ = 0 (Stan's windows)
            mu, log_bar, hbar, start_count = log_step + math.log(10), log_step.copy(), np.zeros(chains), it
        if it < tune:  # dual averaging (Hoffman & Gelman 2014; PyMC's constants)
            count = it + 1 - start_count
            hbar += (0.65 - np.exp(np.minimum(0, log_alpha)) - hbar) / (count + 10)
            log_step = mu - hbar * math.sqrt(count) / 0.05
            log_bar = count**-0.75 * log_step + (1 - count**-0.75) * log_bar
            final = np.exp(log_bar)
        else:
            out[:, it - tune] = theta
    pairs = [out[k : k + 2] for k in range(0, chains - 1, 2)]
    ess = [
        min(float(az.ess(np.ascontiguousarray(pair[..., j]), method="bulk")) for j in range(size)) / 2 for pair in pairs
    ]
    steps = np.sort(final / r)
    return {
        "whitened_step": float(np.median(final / r)),
        "ess_per_chain": float(np.median(ess)),
        "whitened_step_min_max": [float(steps[0]), float(steps[-1])],
        "ess_per_chain_min": float(np.min(ess)),
        "ess_per_chain_pairs": sorted(round(v, 1) for v in ess),
    }


def simulate_penalty(
    precision, mean, metric, kappa, tau, iterations=20000, tune=5000, chains=20, start_cov=None, seed=0
) -> dict:
    """``chains`` centred DPPenaltyMH chains (vectorised) on N(``mean``, ``precision``⁻¹), θ̂ = 0 (H36j).

    The walk θ′ = θ + s·(L/r)z with LLᵀ = ``metric`` and r² = tr(metric)/P, s from 2.38 r/√P tuned by PyMC's
    Metropolis rule every 100 iterations (as :class:`pymc_dp.DPPenaltyMH`'s dense walk); the ratio's noise
    σ = 2τ·½κ‖Δθ‖((‖a‖² + ‖a′‖²)/2 − ‖Δθ‖²/6) and the penalty test's −σ²/2; starts from N(0, 4·``start_cov``).
    Returns the ESS per chain (minimum over coordinates of ArviZ's bulk ESS of 2 chains, halved; median over
    pairs), the acceptance, and the chains' variance along the target's widest direction over the target's.
    """
    from pymc.step_methods.metropolis import tune as tune_scaling

    rng = np.random.default_rng(seed)
    size = precision.shape[0]
    unit = np.linalg.cholesky(metric)
    r = math.sqrt(np.trace(metric) / size)
    unit = unit / r
    start = precision if start_cov is None else np.linalg.inv(start_cov)
    theta = 2.0 * rng.standard_normal((chains, size)) @ np.linalg.cholesky(np.linalg.inv(start)).T
    scale = np.full(chains, 2.38 * r / math.sqrt(size))
    accepted = np.zeros(chains)
    out = np.empty((chains, iterations - tune, size))

    def logp(x):
        d = x - mean
        return -0.5 * np.einsum("ci,ij,cj->c", d, precision, d)

    total_accept = 0.0
    for it in range(iterations):
        if it < tune and it > 0 and it % 100 == 0:
            scale = tune_scaling(scale, accepted / 100.0)
            accepted[:] = 0
        proposal = theta + scale[:, None] * (rng.standard_normal((chains, size)) @ unit.T)
        na, nb, nd = (np.sum(v**2, axis=1) for v in (theta, proposal, proposal - theta))
        sigma = 2.0 * tau * 0.5 * kappa * np.sqrt(nd) * np.maximum((na + nb) / 2 - nd / 6, 0.0)
        log_alpha = logp(proposal) - logp(theta) + sigma * rng.standard_normal(chains) - 0.5 * sigma**2
        take = np.log(rng.uniform(size=chains)) < log_alpha
        theta = np.where(take[:, None], proposal, theta)
        accepted += take
        if it >= tune:
            out[:, it - tune] = theta
            total_accept += float(np.mean(take))
    pairs = [out[k : k + 2] for k in range(0, chains - 1, 2)]
    ess = [
        min(float(az.ess(np.ascontiguousarray(pair[..., j]), method="bulk")) for j in range(size)) / 2 for pair in pairs
    ]
    values, vectors = np.linalg.eigh(np.linalg.inv(precision))
    wide = (out - mean) @ vectors[:, -1]
    return {
        "ess_per_chain": float(np.median(ess)),
        "acceptance": total_accept / (iterations - tune),
        "wide_variance_ratio": float(np.var(wide) / values[-1]),
    }


@np.errstate(all="ignore")  # a diverged trajectory overflows: rejected (NaN → −∞)
def _quiet_simulate(*args, **kwargs) -> dict:
    return simulate(*args, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--covariance", required=True, help="an .npz of posterior draws (utility.py's NUTS cache)")
    parser.add_argument("--offsets", type=float, nargs="+", default=[0.5, 1.6, 3.0])
    parser.add_argument("--kappa", type=float, default=1.7821)  # randhie: B = √7, κ = B³/(6√3)
    parser.add_argument("--tau-l", type=float, default=124.83)  # randhie ε = 4, 2 × 2,000 iterations, L = 10
    parser.add_argument("--tau-g", type=float, default=414.0)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--draws", type=int, default=1500)
    args = parser.parse_args()
    saved = np.load(args.covariance)
    names = ["alpha", *sorted((k for k in saved.files if k.startswith("beta")), key=lambda k: int(k[5:-1]))]
    cov = np.cov(np.column_stack([saved[k] for k in names]).T)
    sds = np.sqrt(np.diag(cov))
    for offset in args.offsets:
        sim = _quiet_simulate(cov, offset, args.kappa, args.tau_l, args.tau_g, tune=args.tune, draws=args.draws)
        law = centred_ess(
            draws=args.draws,
            n_params=cov.shape[0],
            posterior_sd=float(np.exp(np.mean(np.log(sds)))),
            offset_sd=offset,
            lipschitz=args.kappa,
            llr_noise_multiplier=args.tau_l,
            grad_noise_multiplier=args.tau_g,
            n_leapfrog=10,
            posterior_shape=cov,
            dense_mass=True,
            step_size_jitter=0.5,
        )
        print(
            f"e = {offset:g}: whitened step simulated {sim['whitened_step']:.4f}, law {law['step_size']:.4f}; "
            f"ESS per chain simulated {sim['ess_per_chain']:.1f}, law {law['ess_per_chain']:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
