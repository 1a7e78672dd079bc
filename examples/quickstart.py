"""Quick start: a differentially private logistic regression, end to end.

A health survey of N respondents records whether each has hypertension and two standardised
covariates (age and body-mass index). We want the posterior of the regression coefficients,
published with an (ε, δ) differential-privacy guarantee that protects every respondent.

The script generates the survey (so it runs anywhere), asks the planner what each method can
deliver at this budget (from public quantities only: it spends nothing), fits the model once
privately, and prints the privacy spent, the convergence diagnostics computed from the released
draws, and the private posterior beside the non-private NUTS posterior.

Two private routes, each spending the whole ε once (run one; publishing both would spend 2ε):

- ``--method release`` (the default, and the planner's recommendation for a logistic
  regression): release the regression's statistics (Σ s·x, Σ xxᵀ) and two covariate anchors
  once with the Gaussian mechanism, then sample the noise-aware likelihood of that release with
  NUTS at no further privacy cost. The anchors correct the likelihood's Gaussian covariate model
  where the covariates are binary or skewed (docs/exponential_family.md).
- ``--method penalty``: DPPenaltyMH on the model itself, chains started from a DP variational fit
  (20 % of ε) and run for the planner's number of iterations (``draws="auto"``). At this budget
  its chains are usable but not converged to R-hat ≤ 1.01: the result says so (a warning, and
  ``dp_diagnostics``).

Run it with ``python examples/quickstart.py`` (``--rows 20000`` for a faster run).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import arviz as az
import numpy as np
import pymc as pm

import pymc_dp as pmdp
from pymc_dp.accounting.events import format_epsilon

#: Public bounds of the standardised covariates: values beyond ±4 sds are clamped to them.
COVARIATE_BOUND = 4.0


def make_survey(n_rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Simulated survey: standardised age and BMI, hypertension indicator."""
    rng = np.random.default_rng(seed)
    covariates = rng.normal(size=(n_rows, 2))
    logit = -1.0 + 0.8 * covariates[:, 0] + 0.5 * covariates[:, 1]
    hypertension = (rng.random(n_rows) < 1 / (1 + np.exp(-logit))).astype("int64")
    return covariates, hypertension


def build_model(covariates: np.ndarray, hypertension: np.ndarray) -> pm.Model:
    coords = {"respondent": np.arange(len(hypertension)), "covariate": ["age", "bmi"]}
    with pm.Model(coords=coords) as model:
        x = pm.Data("x", covariates, dims=("respondent", "covariate"))
        y = pm.Data("y", hypertension, dims="respondent")
        intercept = pm.Normal("intercept", 0, 2)
        slopes = pm.Normal("slopes", 0, 2, dims="covariate")
        pm.Bernoulli("hypertension", logit_p=intercept + x @ slopes, observed=y, dims="respondent")
    return model


def released_statistics_fit(covariates, hypertension, epsilon, delta, draws, tune, chains, seed):
    """The released-statistics route: one Gaussian release (statistics and anchors), then NUTS on its likelihood."""
    n_rows = len(hypertension)
    design = np.column_stack([np.ones(n_rows), covariates])  # the intercept is a column of ones
    release = pmdp.release_statistics(  # the only access to the rows
        "logistic_regression",
        (design, hypertension),
        epsilon=epsilon,
        mechanism="gaussian",
        delta=delta,
        covariate_anchors=2,  # 40 % of the budget: the covariate model corrected at the estimate
        n_features=3,
        x_bounds=([1.0, -COVARIATE_BOUND, -COVARIATE_BOUND], [1.0, COVARIATE_BOUND, COVARIATE_BOUND]),
    )
    with pm.Model(coords={"covariate": ["age", "bmi"]}):  # the same priors, the likelihood of the release
        intercept = pm.Normal("intercept", 0, 2)
        slopes = pm.Normal("slopes", 0, 2, dims="covariate")
        beta = pm.math.concatenate([intercept[None], slopes])
        release.likelihood("hypertension", beta=beta)
        return release.sample(draws=draws, tune=tune, chains=chains, random_seed=seed, progressbar=False)


def penalty_fit(model, epsilon, delta, chains, seed):
    """The sampler route: DPPenaltyMH for the planner's iterations, started from a DP variational fit."""
    # Public choice of the clip bound: |∂ log p(y | x, θ) / ∂θ| = |y − p| ‖(1, x)‖, and
    # ‖(1, x)‖ ≤ 2.5 for all but about 4 % of standardised covariate pairs.
    step = pmdp.DPPenaltyMH(model=model, llr_clip=2.5)
    with warnings.catch_warnings():
        warnings.simplefilter("always", pmdp.diagnostics.PoorMixingWarning)  # shown, never silenced
        return pmdp.sample(
            step=step,
            epsilon=epsilon,
            delta=delta,
            draws="auto",
            chains=chains,
            random_seed=seed,
            model=model,
            progressbar=False,
            compute_convergence_checks=False,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--method", choices=("release", "penalty"), default="release")
    parser.add_argument("--draws", type=int, default=300, help="NUTS draws per chain (both NUTS runs)")
    parser.add_argument("--tune", type=int, default=300, help="NUTS tuning steps per chain (both NUTS runs)")
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()

    covariates, hypertension = make_survey(args.rows, args.seed)
    model = build_model(covariates, hypertension)
    delta = 0.1 / args.rows  # below 1/N, as is customary

    print(pmdp.plan(model, epsilon=args.epsilon, delta=delta, chains=args.chains, llr_clip=2.5), "\n")
    start = time.perf_counter()
    if args.method == "release":
        private = released_statistics_fit(
            covariates, hypertension, args.epsilon, delta, args.draws, args.tune, args.chains, args.seed
        )
    else:
        private = penalty_fit(model, args.epsilon, delta, args.chains, args.seed)
    private_seconds = time.perf_counter() - start

    start = time.perf_counter()
    with model:
        exact = pm.sample(
            draws=args.draws, tune=args.tune, chains=args.chains, random_seed=args.seed, progressbar=False
        )
    exact_seconds = time.perf_counter() - start

    spent = pmdp.privacy_spent(private)
    record = json.loads(private.posterior.attrs["dp_accountant"])
    print(f"\nRows: {args.rows}, chains: {args.chains}, route: {args.method} ({record['mechanism']})")
    print(
        f"Privacy spent: epsilon = {format_epsilon(spent.epsilon)} at delta = {spent.delta:.3g} "
        f"({spent.neighbouring} neighbours, {spent.method})"
    )
    print(f"Recorded on the result: dp_epsilon = {format_epsilon(private.posterior.attrs['dp_epsilon'])}")
    groups = ("posterior", "sample_stats", "observed_data", "constant_data")
    print(f"Groups in the DP result: {[g for g in groups if g in private]}")
    diagnostics = json.loads(private.posterior.attrs["dp_diagnostics"])
    r_hat = {
        name: round(v["r_hat"], 3) for name, v in diagnostics["variables"].items() if name in ("intercept", "slopes")
    }
    limit = diagnostics["thresholds"]["r_hat_max"]  # the flag's own threshold (az.summary rounds R-hat to 2 decimals)
    print(
        f"Usable posterior: {diagnostics['usable']}; largest R-hat per variable: {r_hat} "
        f"(to 3 decimals; flagged above {limit})"
    )

    rows = []
    for name in ("intercept", "slopes"):
        dp_draws = private.posterior[name].values.reshape(-1, *private.posterior[name].shape[2:])
        ex_draws = exact.posterior[name].values.reshape(-1, *exact.posterior[name].shape[2:])
        for index in np.ndindex(dp_draws.shape[1:]):
            label = name if not index else f"{name}[{['age', 'bmi'][index[0]]}]"
            rows.append((label, ex_draws[(slice(None), *index)], dp_draws[(slice(None), *index)]))
    print(f"\n{'parameter':<16}{'non-private mean':>18}{'sd':>9}{'DP mean':>12}{'sd':>9}")
    for label, ex, dp in rows:
        print(f"{label:<16}{ex.mean():>18.3f}{ex.std():>9.3f}{dp.mean():>12.3f}{dp.std():>9.3f}")
    print(f"\nTime: DP {private_seconds:.1f} s, non-private NUTS {exact_seconds:.1f} s")
    print(az.summary(private, var_names=["intercept", "slopes"]))


if __name__ == "__main__":
    main()
