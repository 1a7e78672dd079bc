"""Released statistics for logistic regression on ``randhie`` against NUTS on the raw rows.

Run: ``python benchmarks/logistic_release.py [--epsilons 1 4] [--draws 500] [--mechanism gaussian
--delta 1e-6]``. The ``randhie_logistic`` data of ``utility.py`` (any outpatient visit ~ six
covariates scaled to [−1, 1] by public ranges, three of them binary, N = 20,190, P = 7,
N(0, 2²) priors): NUTS on the raw rows, then for each ε the release of (Σ s·x, Σ xxᵀ)
(``pmdp.release_statistics("logistic_regression")``, pure ε-DP, Kulkarni et al. 2021; the
Gaussian mechanism at (ε, δ) with ``--mechanism gaussian``) and NUTS on the noise-aware and on
the naive likelihood (2 chains, ``--draws`` tuning steps and draws each). Prints per coefficient
(DP mean − NUTS mean) / NUTS sd, DP sd / NUTS sd, whether NUTS's mean lies in the DP 94 %
equal-tailed interval, and the smallest bulk ESS and largest R-hat. The noise is drawn from OS
entropy: every run is a new release. ``utility.py --methods release`` runs the same route in the
utility table's format.
"""

from __future__ import annotations

import argparse
import time

import arviz as az
import numpy as np
import pymc as pm
from utility import LOGISTIC_DATA

import pymc_dp as pmdp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--mechanism", choices=("laplace", "gaussian"), default="laplace")
    parser.add_argument("--delta", type=float, default=1e-6, help="δ of a Gaussian release")
    parser.add_argument("--covariate-anchors", type=int, default=0, help="anchors released with the statistics")
    parser.add_argument("--data", choices=sorted(LOGISTIC_DATA), default="randhie_logistic")
    parser.add_argument("--naive", action="store_true", help="also sample the naive likelihood")
    args = parser.parse_args()
    noise = {} if args.mechanism == "laplace" else {"mechanism": "gaussian", "delta": args.delta}
    x, y = LOGISTIC_DATA[args.data](None)
    design = np.column_stack([np.ones(len(y)), x])
    d = design.shape[1]
    kwargs = {"draws": args.draws, "tune": args.draws, "chains": 2, "progressbar": False, "random_seed": 1}
    start = time.perf_counter()
    with pm.Model():
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 2, shape=d - 1)
        pm.Bernoulli("y", logit_p=alpha + pm.math.dot(x, beta), observed=y)
        raw = pm.sample(**kwargs)
    print(f"NUTS on the raw rows: {time.perf_counter() - start:.0f} s")

    def draws_of(idata):
        post = idata.posterior
        return np.column_stack(
            [post["alpha"].values.ravel()] + [post["beta"].values[..., j].ravel() for j in range(d - 1)]
        )

    reference = draws_of(raw)
    ref_mean, ref_sd = reference.mean(axis=0), reference.std(axis=0)
    for epsilon in args.epsilons:
        release = pmdp.release_statistics(
            "logistic_regression",
            (design, y),
            epsilon=epsilon,
            n_features=d,
            x_bounds=([1.0] + [-1.0] * (d - 1), [1.0] * d),
            covariate_anchors=args.covariate_anchors,
            **noise,
        )
        print(
            f"ε = {epsilon:g}, {args.mechanism}: Δ₁ = {release.family.l1_sensitivity():g}, "
            f"Δ₂ = {release.family.l2_sensitivity():g}, noise sd {np.sqrt(release.noise_variance):g}"
        )
        for aware in (True, False) if args.naive else (True,):
            start = time.perf_counter()
            with pm.Model():
                alpha = pm.Normal("alpha", 0, 2)
                beta = pm.Normal("beta", 0, 2, shape=d - 1)
                release.likelihood("y", beta=pm.math.concatenate([alpha[None], beta]), noise_aware=aware)
                idata = release.sample(on_poor_mixing="ignore", **kwargs)
            draws = draws_of(idata)
            low, high = np.quantile(draws, [0.03, 0.97], axis=0)
            ess = az.ess(idata, var_names=["alpha", "beta"])
            rhat = az.rhat(idata, var_names=["alpha", "beta"])
            label = "noise-aware" if aware else "naive"
            print(f"  {label} ({time.perf_counter() - start:.0f} s)")
            print("    (mean − NUTS mean)/NUTS sd", np.round((draws.mean(axis=0) - ref_mean) / ref_sd, 2))
            print("    sd / NUTS sd              ", np.round(draws.std(axis=0) / ref_sd, 2))
            print("    NUTS mean in 94 %         ", ((low <= ref_mean) & (ref_mean <= high)).astype(int))
            print(
                f"    min bulk ESS {min(float(ess[v].min()) for v in ('alpha', 'beta')):.0f}, "
                f"max R-hat {max(float(rhat[v].max()) for v in ('alpha', 'beta')):.3f}"
            )


if __name__ == "__main__":
    main()
