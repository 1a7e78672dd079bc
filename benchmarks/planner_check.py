"""Predicted vs measured ESS of DPPenaltyMH (pymc_dp.planning), on a Gaussian linear model.

For a linear model with unit noise and standardised covariates the posterior is Gaussian
with standard deviation ≈ 1/√N per coefficient, so the planner's model (random walk with
the penalty test, ESS per draw ≈ 0.331 / (P (1 + c²)), c = κ τ b s) can be checked at
known s for a range of noise levels. Chains start at the data-generating coefficients (a
check of the stationary ESS, not of the transient), the clip bound b is large enough that
clipping is rare, and ESS is ArviZ's bulk ESS averaged over the coefficients and summed over
chains. Run: ``python benchmarks/planner_check.py [--small]``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings

import arviz as az
import numpy as np
import pymc as pm

import pymc_dp as pmdp
from pymc_dp.planning import penalty_ess_from_noise


def measure(n_rows: int, n_params: int, c2: float, draws: int, tune: int, chains: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, n_params))
    beta = rng.normal(size=n_params) * 0.5
    y = x @ beta + rng.normal(size=n_rows)
    llr_clip = 4.0 * math.sqrt(n_params)
    posterior_sd = 1.0 / math.sqrt(n_rows)
    tau = math.sqrt(c2) / (2.0 * llr_clip * posterior_sd)  # c = κ τ b s with κ = 2 (substitute)
    with pm.Model():
        b = pm.Normal("beta", 0, 5, shape=n_params)
        pm.Normal("y", pm.math.dot(x, b), 1.0, observed=y)
        step = pmdp.DPPenaltyMH(llr_clip=llr_clip, noise_multiplier=tau)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pmdp.sample(
                step=step,
                delta=1e-6,
                draws=draws,
                tune=tune,
                chains=chains,
                random_seed=seed,
                initvals=[{"beta": beta}] * chains,
                progressbar=False,
                on_poor_mixing="ignore",
            )
        seconds = time.perf_counter() - start
    ess = float(np.mean(az.ess(idata, var_names=["beta"], method="bulk")["beta"].values))
    predicted = chains * penalty_ess_from_noise(
        draws, noise_multiplier=tau, llr_clip=llr_clip, posterior_sd=posterior_sd, n_params=n_params
    )
    acceptance = float(idata.sample_stats["dp_accepted"].mean())
    return {
        "N": n_rows,
        "P": n_params,
        "c2": c2,
        "tau": tau,
        "draws": draws,
        "chains": chains,
        "predicted_ess": predicted,
        "measured_ess": ess,
        "ratio": ess / predicted,
        "acceptance": acceptance,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true", help="fewer settings and draws (for the tests)")
    args = parser.parse_args()
    if args.small:
        settings = [(500, 2, 1.0)]
        draws, tune, chains = 300, 200, 2
    else:
        settings = [(2000, p, c2) for p in (1, 3) for c2 in (0.1, 1.0, 4.0, 16.0)]
        draws, tune, chains = 3000, 1000, 4
    rows = [measure(n, p, c2, draws, tune, chains, seed=11 + i) for i, (n, p, c2) in enumerate(settings)]
    print(f"{'P':>2} {'c²':>5} {'τ':>8} {'accept':>7} {'ESS predicted':>14} {'ESS measured':>13} {'ratio':>6}")
    for r in rows:
        print(
            f"{r['P']:>2} {r['c2']:>5g} {r['tau']:>8.3g} {r['acceptance']:>7.3f} {r['predicted_ess']:>14.1f} "
            f"{r['measured_ess']:>13.1f} {r['ratio']:>6.2f}"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
