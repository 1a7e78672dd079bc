"""Predicted vs measured ESS of the centred samplers (issue 36): ``pmdp.plan``'s centred rows against runs.

For each cell (N, ε, method) of a simulated logistic regression (``_common.logistic_regression``:
intercept + ``--features`` N(0, 1) covariates, priors N(0, 2²)) this prints, as one JSON line,

- ``plan``: what ``pmdp.plan(model, epsilon=ε, delta=δ, chains=C, n_leapfrog=L, x_bounds=...,
  centre_lipschitz=κ)`` predicts for a run of the benchmark's own ``tune`` and ``draws``
  (:func:`pymc_dp.centred_predictions.centred_prediction_at` with the plan's chains' μ, its posterior
  sd guess s and anchor offset e: public quantities only), ESS per chain, and its note;
- ``measured``: ``pmdp.sample(step=DPHMC(n_leapfrog=L) or DPPenaltyMH(), ...)`` at its defaults
  otherwise (DPADVI start, ``"auto"`` clip bounds, five noisy Newton steps, the anchor), the
  minimum over coordinates of ArviZ's bulk ESS of the chains' own draws (before ``pmdp.sample``
  widens them by the anchor's noise: the widening adds independent noise to every draw, which
  raises the published draws' ESS, kept as ``published_ess_per_chain``) divided by the chains,
  R-hat, the mean
  privatized acceptance and step size of the draws, and the run's own prediction (s and e read
  off the released anchor);
- ``truth`` (non-private, for the diagnosis only): the exact Laplace approximation's geometric
  mean sd and the released anchor's RMS distance from its mode, in its sds.

Run (niced, one cell at a time): ``nice -n 10 python benchmarks/centred_planner_check.py
[--rows 400 2000 10000] [--epsilons 1 4] [--methods DPHMC DPPenaltyMH] [--features 2]
[--chains 2] [--tune 150] [--draws 150] [--n-leapfrog 3] [--kappa 0.5] [--bound 4] [--seed 0]``.
One run per cell: the measured ESS of a 300-draw run is itself noisy (about ±30 % at ESS ≈ 50),
so a ratio within 2× is what one run can check.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import arviz as az
import numpy as np
from _common import logistic_regression
from release_once_utility import exact_laplace

import pymc_dp as pmdp
import pymc_dp.sampling as pmdp_sampling
from pymc_dp.centred_predictions import centred_prediction_at


def stacked(idata, features: int) -> np.ndarray:
    post = idata.posterior
    return np.concatenate(
        [post["alpha"].values[..., None], post["beta"].values.reshape(*post["alpha"].shape, features)], axis=-1
    )


def plan_prediction(model, args, epsilon: float, method: str) -> dict:
    """The plan's centred row, and its prediction at the benchmark's tune and draws (public quantities only)."""
    the_plan = pmdp.plan(
        model,
        epsilon=epsilon,
        delta=args.delta,
        chains=args.chains,
        n_leapfrog=args.n_leapfrog,
        x_bounds=(-args.bound, args.bound),
        centre_lipschitz=args.kappa,
    )
    centring = the_plan.details["centring"]
    s = centring.get("posterior_sd", the_plan.posterior_sd)
    _, prediction = centred_prediction_at(
        method,
        args.tune + args.draws,
        args.tune,
        centring["chains_mu"] / args.chains,
        n_params=args.features + 1,
        posterior_sd=s,
        offset_sd=centring["offset_sd"],
        lipschitz=centring["lipschitz"],
        n_leapfrog=args.n_leapfrog,
    )
    row = the_plan.method(f"{method} (centred)")
    return {
        "ess_per_chain": prediction["ess_per_chain"],
        "acceptance": prediction.get("acceptance"),
        "s": s,
        "offset_sd": centring["offset_sd"],
        "row_iterations": row.iterations,
        "row_ess_per_chain": row.expected_ess,
        "row_usable": row.usable,
        "note": row.note,
        "prediction": prediction,
    }


class RawDraws:
    """Keeps the chains' own draws before ``pmdp.sample`` widens them by the anchor's noise.

    The widening adds independent noise to every draw (post-processing), which raises the bulk
    ESS and lowers R-hat of the published draws; the chains' mixing, which the plan predicts, is
    read off the draws before it.
    """

    def __init__(self) -> None:
        self.draws = None
        self._original = pmdp_sampling.widen_centred_draws

    def __enter__(self) -> RawDraws:
        def keep(idata, *args, **kwargs):
            self.draws = {name: np.array(v.values) for name, v in idata["posterior"].data_vars.items()}
            return self._original(idata, *args, **kwargs)

        pmdp_sampling.widen_centred_draws = keep
        return self

    def __exit__(self, *exc) -> None:
        pmdp_sampling.widen_centred_draws = self._original


def ess_and_rhat(draws: np.ndarray) -> tuple[float, float]:
    ess = min(float(az.ess(draws[..., j], method="bulk")) for j in range(draws.shape[-1]))
    return ess, max(float(az.rhat(draws[..., j])) for j in range(draws.shape[-1]))


def measure(model, args, epsilon: float, method: str, ref_mean, ref_sd) -> dict:
    start = time.process_time()
    with model, warnings.catch_warnings(), RawDraws() as raw:
        warnings.simplefilter("ignore")  # a flagged run is a measurement here, not an error
        step = pmdp.DPHMC(n_leapfrog=args.n_leapfrog) if method == "DPHMC" else pmdp.DPPenaltyMH()
        idata = pmdp.sample(
            step=step,
            epsilon=epsilon,
            delta=args.delta,
            chains=args.chains,
            cores=1,
            tune=args.tune,
            draws=args.draws,
            x_bounds=(-args.bound, args.bound),
            centre_lipschitz=args.kappa,
            random_seed=args.seed,
            progressbar=False,
            on_poor_mixing="ignore",
        )
    cpu = time.process_time() - start
    draws = stacked(idata, args.features)
    published_ess, published_rhat = ess_and_rhat(draws)
    chain_draws = np.concatenate(
        [raw.draws["alpha"][..., None], raw.draws["beta"].reshape(*raw.draws["alpha"].shape, args.features)], axis=-1
    )
    ess, rhat = ess_and_rhat(chain_draws)
    stats = idata.sample_stats
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    anchor = record["steps"][0].get("centring") or {}
    own = (record.get("centring") or {}).get("prediction") or {}
    out = {
        "ess_per_chain": ess / args.chains,
        "rhat_max": rhat,
        "published_ess_per_chain": published_ess / args.chains,
        "published_rhat_max": published_rhat,
        "chain_sd_ratio": float(np.median(chain_draws.reshape(-1, draws.shape[-1]).std(0) / ref_sd)),
        "acceptance": float(stats["dp_accept"].mean()),
        "err_max_sd": float(np.max(np.abs(draws.reshape(-1, draws.shape[-1]).mean(0) - ref_mean) / ref_sd)),
        "sd_ratio": float(np.median(draws.reshape(-1, draws.shape[-1]).std(0) / ref_sd)),
        "usable": json.loads(idata.posterior.attrs["dp_diagnostics"])["usable"],
        "own_prediction_per_chain": own.get("ess_per_chain"),
        "own_s": own.get("posterior_sd"),
        "own_offset_sd": own.get("offset_sd"),
        "cpu_s": round(cpu, 1),
    }
    if "dp_step_size" in stats:
        out["step_size"] = float(stats["dp_step_size"].mean())
    if "point" in anchor:
        out["anchor_off_rms_sd"] = float(np.sqrt(np.mean(((np.asarray(anchor["point"]) - ref_mean) / ref_sd) ** 2)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[400, 2000, 10_000])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--methods", nargs="+", default=["DPHMC", "DPPenaltyMH"])
    parser.add_argument("--features", type=int, default=2)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--tune", type=int, default=150)
    parser.add_argument("--draws", type=int, default=150)
    parser.add_argument("--n-leapfrog", type=int, default=3)
    parser.add_argument("--bound", type=float, default=4.0)
    parser.add_argument("--kappa", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plan-only", action="store_true", help="the plan's predictions alone (no run)")
    args = parser.parse_args()
    for n_rows in args.rows:
        model = logistic_regression(n_rows, args.features, seed=args.seed)
        ref_mean, ref_sd = exact_laplace(model)
        for epsilon in args.epsilons:
            for method in args.methods:
                cell = {"N": n_rows, "P": args.features + 1, "eps": epsilon, "method": method, "kappa": args.kappa}
                cell["truth_s"] = float(np.exp(np.mean(np.log(ref_sd))))
                cell["plan"] = plan_prediction(model, args, epsilon, method)
                if not args.plan_only:
                    cell["measured"] = measure(model, args, epsilon, method, ref_mean, ref_sd)
                    cell["ratio_measured_to_plan"] = cell["measured"]["ess_per_chain"] / max(
                        cell["plan"]["ess_per_chain"], 1e-300
                    )
                print(json.dumps(cell, default=float), flush=True)


if __name__ == "__main__":
    main()
