"""Do the centred samplers' intervals cover the truth? Coverage of known β by simulation (issue 36, deliver 2).

Run: ``nice -n 10 python benchmarks/centred_coverage.py --rows 10000 --epsilons 1 4 --methods DPHMC DPPenaltyMH
--replicates 40 --out coverage.jsonl`` and, to read a file back (one JSON line per replicate, appended as
each finishes, so a run can be stopped and resumed with ``--first-seed``): ``python
benchmarks/centred_coverage.py --summarise coverage.jsonl``.

Each replicate simulates fresh data from a known truth, a logistic regression with P = 3
(intercept −0.5, slopes 1.0 and −0.7) and two covariates uniform on [−1, 1] (bounded, so the
public ``x_bounds=(-1, 1)`` hold for every row and no row is clipped by the centred bounds), and
runs ``pmdp.sample(step=pmdp.DPHMC())`` or ``pmdp.DPPenaltyMH()`` as a user would: priors N(0, 2²),
ε as given, δ = 0.1/N, ``x_bounds=(-1, 1)``, at the defaults otherwise (DPADVI start on a share of
ε, ``"auto"`` clip bounds, five noisy Newton steps, a second-order anchor, ``draws="auto"``; the
published draws widened by the anchor's known noise) except ``chains=2, cores=1`` to fit a shared
2-core machine. Fresh release noise each time (OS entropy: the replicate's seed fixes the data and
the samplers' data-free randomness only).

Per cell (N, ε, method) it reports:

- coverage of the true β by the published 50 % and 90 % central (equal-tailed) intervals, pooled
  over the three coefficients and per coefficient, with the binomial standard error at the
  nominal level √(p(1 − p)/n);
- the same among the replicates ``dp_diagnostics`` calls usable (unflagged): an unflagged result
  whose interval misses is the failure that matters (contract 8), and among the flagged ones;
- the share flagged, and why;
- mean |posterior mean − truth| in posterior sds, and the same for the exact posterior (a
  non-private Newton fit with the same priors, Laplace: at N ≥ 10⁴ with P = 3 it differs from
  NUTS by well under 1 % of a sd) so that the data's own sampling noise can be told from the
  release's;
- the median sd ratio against the exact posterior's sd on the same rows;
- coverage of the chains' own draws before the widening (what the widening adds);
- the plan's ESS prediction per chain against the chains' measured bulk ESS per chain;
- CPU seconds per replicate.

Measured: see ``docs/hmc.md`` and ``docs/penalty.md``, "Does it cover?".
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
from centred_planner_check import RawDraws  # the chains' draws before the widening

import pymc_dp as pmdp

TRUTH = np.array([-0.5, 1.0, -0.7])
NAMES = ("alpha", "beta[0]", "beta[1]")
PRIOR_SD = 2.0
LEVELS = (0.5, 0.9)
#: The kinds of problem ``dp_diagnostics`` names, as counted in the summary.
PROBLEM_KINDS = ("R-hat", "bulk ESS", "tail ESS", "clip", "acceptance")


def simulate(n_rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Covariates uniform on [−1, 1] and a 0/1 outcome from the true coefficients."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, size=(n_rows, 2))
    logit = TRUTH[0] + x @ TRUTH[1:]
    y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-logit))).astype("int64")
    return x, y


def exact_posterior(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The non-private posterior's Laplace approximation (mode, sds) with the model's N(0, 2²) priors."""
    design = np.column_stack([np.ones(len(y)), x])
    theta = np.zeros(design.shape[1])
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-design @ theta))
        precision = design.T @ (design * (p * (1 - p))[:, None]) + np.eye(theta.size) / PRIOR_SD**2
        step = np.linalg.solve(precision, design.T @ (y - p) - theta / PRIOR_SD**2)
        theta = theta + step
        if np.max(np.abs(step)) < 1e-12:
            break
    return theta, np.sqrt(np.diag(np.linalg.inv(precision)))


def stacked(draws: dict[str, np.ndarray]) -> np.ndarray:
    """(chains, draws, 3): alpha, then beta."""
    alpha = np.asarray(draws["alpha"])
    return np.concatenate([alpha[..., None], np.asarray(draws["beta"]).reshape(*alpha.shape, -1)], axis=-1)


def one_replicate(n_rows: int, epsilon: float, method: str, seed: int, chains: int) -> dict:
    """Fresh data, one ``pmdp.sample`` run; the figures coverage needs (no row leaves: summaries only)."""
    x, y = simulate(n_rows, seed)
    exact_mean, exact_sd = exact_posterior(x, y)
    with pm.Model() as model:
        xd = pm.Data("x", x)
        alpha = pm.Normal("alpha", 0.0, PRIOR_SD)
        beta = pm.Normal("beta", 0.0, PRIOR_SD, shape=2)
        pm.Bernoulli("y", logit_p=alpha + xd @ beta, observed=y)
    cpu = time.process_time()
    with model, warnings.catch_warnings(), RawDraws() as raw:
        # A flagged result is a measurement here (counted from dp_diagnostics below), not an error.
        warnings.simplefilter("ignore")
        step = pmdp.DPHMC() if method == "DPHMC" else pmdp.DPPenaltyMH()
        idata = pmdp.sample(
            step=step,
            epsilon=epsilon,
            delta=0.1 / n_rows,
            x_bounds=(-1.0, 1.0),
            chains=chains,
            cores=1,
            random_seed=seed,
            progressbar=False,
        )
    cpu = time.process_time() - cpu
    published = stacked({name: idata.posterior[name].values for name in ("alpha", "beta")})
    diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    centring = record.get("centring") or {}
    out = {
        "N": n_rows,
        "eps": epsilon,
        "method": method,
        "seed": seed,
        "centred": bool(centring.get("used")),
        "usable": bool(diagnostics["usable"]),
        "problems": [str(p)[:160] for p in diagnostics.get("problems") or []],
        "exact_mean": exact_mean.tolist(),
        "exact_sd": exact_sd.tolist(),
        "cpu_s": round(cpu, 1),
        "epsilon_spent": float(idata.posterior.attrs["dp_epsilon"]),
        "draws_per_chain": int(published.shape[1]),
        "chains_count": int(published.shape[0]),
    }
    for label, draws in (("published", published), ("chains", None if raw.draws is None else stacked(raw.draws))):
        if draws is None:
            continue
        flat = draws.reshape(-1, draws.shape[-1])
        quantiles = {
            str(level): np.quantile(flat, [(1 - level) / 2, (1 + level) / 2], axis=0).tolist() for level in LEVELS
        }
        out[label] = {
            "mean": flat.mean(0).tolist(),
            "sd": flat.std(0, ddof=1).tolist(),
            "intervals": quantiles,
            "rhat_max": max(float(az.rhat(draws[..., j])) for j in range(draws.shape[-1])),
            "ess_bulk_min": min(float(az.ess(draws[..., j], method="bulk")) for j in range(draws.shape[-1])),
        }
    prediction = centring.get("prediction")
    if prediction is not None:
        out["predicted_ess_per_chain"] = prediction.get("ess_per_chain")
        out["predicted_s"] = prediction.get("posterior_sd")
        out["predicted_offset_sd"] = prediction.get("offset_sd")
    anchor = (record["steps"][0].get("centring") or {}).get("point")
    if anchor is not None:
        out["anchor_off_sd"] = (np.abs(np.asarray(anchor) - exact_mean) / exact_sd).tolist()
    return out


def _covers(result: dict, label: str, level: float) -> np.ndarray:
    """Whether each coefficient's central interval holds the truth; ``label="exact"``: the exact posterior's
    (Laplace) interval on the same rows, the coverage the data's own sampling noise allows."""
    if label == "exact":
        from scipy import stats

        half = stats.norm.ppf(0.5 + level / 2) * np.asarray(result["exact_sd"])
        return np.abs(np.asarray(result["exact_mean"]) - TRUTH) <= half
    low, high = np.asarray(result[label]["intervals"][str(level)])
    return (low <= TRUTH) & (TRUTH <= high)


def _share(hits: np.ndarray, level: float) -> str:
    """'0.875 (n, SE, z; SE by replicate)': the share of hits, pooled over replicates (rows) and coefficients.

    SE is binomial at the nominal level, √(p(1 − p)/n), n = replicates × coefficients, which treats the
    coefficients as independent; "by replicate" is the sd over replicates of each one's share over its
    coefficients, / √replicates, which does not (one release's noise moves all three together).
    """
    hits = np.atleast_2d(hits)
    n = hits.size
    if n == 0:
        return "—"
    se = np.sqrt(level * (1 - level) / n)
    share = float(hits.mean())
    per_replicate = hits.mean(axis=1)
    by_replicate = per_replicate.std(ddof=1) / np.sqrt(per_replicate.size) if per_replicate.size > 1 else np.nan
    return f"{share:.3f} (n {n}, SE {se:.3f}, z {(share - level) / se:+.1f}; SE by replicate {by_replicate:.3f})"


def summarise(results: list[dict]) -> str:
    """One block per cell: coverage (all, unflagged, flagged, before the widening), errors, sd ratio, flags, ESS."""
    lines = []
    cells = sorted({(r["N"], r["eps"], r["method"]) for r in results})
    for n_rows, epsilon, method in cells:
        cell = [r for r in results if (r["N"], r["eps"], r["method"]) == (n_rows, epsilon, method)]
        unflagged = [r for r in cell if r["usable"]]
        flagged = [r for r in cell if not r["usable"]]
        cpu = np.array([r["cpu_s"] for r in cell])
        lines.append(
            f"N {n_rows}, eps {epsilon:g}, {method}: {len(cell)} replicates, flagged {len(flagged)} "
            f"({len(flagged) / len(cell):.2f}); CPU {cpu.mean():.1f} s per replicate (min {cpu.min():.1f}, "
            f"max {cpu.max():.1f}); centred {sum(r['centred'] for r in cell)}"
        )
        for level in LEVELS:
            for label, group in (("all", cell), ("unflagged", unflagged), ("flagged", flagged)):
                hits = np.array([_covers(r, "published", level) for r in group]) if group else np.array([])
                lines.append(f"  {level:.0%} published, {label:9s}: {_share(hits, level)}")
            per = np.array([_covers(r, "published", level) for r in unflagged]) if unflagged else None
            if per is not None:
                shares = {name: round(float(v), 3) for name, v in zip(NAMES, per.mean(0), strict=True)}
                lines.append(f"  {level:.0%} unflagged per coefficient {shares}")
            hits = np.array([_covers(r, "exact", level) for r in unflagged]) if unflagged else np.array([])
            lines.append(f"  {level:.0%} exact posterior on the same rows, unflagged: {_share(hits, level)}")
            raw = [r for r in unflagged if "chains" in r]
            if raw:
                hits = np.array([_covers(r, "chains", level) for r in raw])
                lines.append(f"  {level:.0%} chains' own (before widening), unflagged: {_share(hits, level)}")
        for label, group in (("all", cell), ("unflagged", unflagged)):
            if not group:
                continue
            mean = np.array([r["published"]["mean"] for r in group])
            sd = np.array([r["published"]["sd"] for r in group])
            exact_mean = np.array([r["exact_mean"] for r in group])
            exact_sd = np.array([r["exact_sd"] for r in group])
            z = (mean - TRUTH) / sd
            exact_z = np.abs((exact_mean - TRUTH) / exact_sd).mean()
            ratio = sd / exact_sd
            lines.append(
                f"  {label}: mean |mean − truth|/sd {np.abs(z).mean():.2f} (exact posterior {exact_z:.2f}; 0.80 when "
                f"calibrated); rms z {np.sqrt((z**2).mean()):.2f}; |mean − exact mean|/exact sd "
                f"{np.abs((mean - exact_mean) / exact_sd).mean():.2f}; sd ratio median {np.median(ratio):.2f} "
                f"(quartiles {np.quantile(ratio, 0.25):.2f}–{np.quantile(ratio, 0.75):.2f})"
            )
        with_prediction = [r for r in cell if r.get("predicted_ess_per_chain") and "chains" in r]
        if with_prediction:
            measured = np.array([r["chains"]["ess_bulk_min"] / r.get("chains_count", 2) for r in with_prediction])
            predicted = np.array([r["predicted_ess_per_chain"] for r in with_prediction])
            ratio = measured / predicted
            guess = np.median([r["predicted_s"] for r in with_prediction])
            exact = np.median([np.exp(np.mean(np.log(r["exact_sd"]))) for r in with_prediction])
            lines.append(
                f"  ESS per chain: predicted median {np.median(predicted):.3g}, measured median "
                f"{np.median(measured):.3g}; measured/predicted median {np.median(ratio):.2f} (quartiles "
                f"{np.quantile(ratio, 0.25):.2f}–{np.quantile(ratio, 0.75):.2f}); predicted s median {guess:.4f}, "
                f"exact geometric-mean sd median {exact:.4f}"
            )
        problems = {}
        for r in flagged:  # replicates flagged for each kind of problem (one replicate may have several)
            kinds = {kind for p in r["problems"] for kind in PROBLEM_KINDS if kind in p}
            for kind in kinds or {"other"}:
                problems[kind] = problems.get(kind, 0) + 1
        if problems:
            lines.append(f"  flagged because: {problems}")
    return "\n".join(lines)


def markdown_table(results: list[dict]) -> str:
    """The docs' table: one row per cell (coverage as share ± binomial SE at the nominal level)."""

    def cover(group: list[dict], label: str, level: float) -> str:
        if not group:
            return "—"
        hits = np.array([_covers(r, label, level) for r in group])
        return f"{hits.mean():.2f} ± {np.sqrt(level * (1 - level) / hits.size):.2f}"

    lines = [
        "| N, ε, method | replicates | flagged | 50 %, all | 90 %, all | 50 %, unflagged | 90 %, unflagged | "
        "90 %, unflagged, before widening | 50 %, 90 %, exact posterior, same unflagged rows | "
        "mean abs. error (exact's), posterior sds | sd ratio | ESS per chain, "
        "predicted → measured | CPU s |",
        "|---|---:|---:|---|---|---|---|---|---|---|---:|---|---:|",
    ]
    for n_rows, epsilon, method in sorted({(r["N"], r["eps"], r["method"]) for r in results}):
        cell = [r for r in results if (r["N"], r["eps"], r["method"]) == (n_rows, epsilon, method)]
        unflagged = [r for r in cell if r["usable"]]
        mean = np.array([r["published"]["mean"] for r in cell])
        sd = np.array([r["published"]["sd"] for r in cell])
        exact_mean, exact_sd = np.array([r["exact_mean"] for r in cell]), np.array([r["exact_sd"] for r in cell])
        error = np.abs((mean - TRUTH) / sd).mean()
        exact_error = np.abs((exact_mean - TRUTH) / exact_sd).mean()
        with_prediction = [r for r in cell if r.get("predicted_ess_per_chain") and "chains" in r]
        predicted = np.median([r["predicted_ess_per_chain"] for r in with_prediction]) if with_prediction else np.nan
        measured = (
            np.median([r["chains"]["ess_bulk_min"] / r.get("chains_count", 2) for r in with_prediction])
            if with_prediction
            else np.nan
        )
        lines.append(
            f"| {n_rows:,}, {epsilon:g}, {method} | {len(cell)} | {len(cell) - len(unflagged)} | "
            f"{cover(cell, 'published', 0.5)} | {cover(cell, 'published', 0.9)} | "
            f"{cover(unflagged, 'published', 0.5)} | {cover(unflagged, 'published', 0.9)} | "
            f"{cover(unflagged, 'chains', 0.9)} | {cover(unflagged, 'exact', 0.5).split()[0]}, "
            f"{cover(unflagged, 'exact', 0.9).split()[0]} | {error:.2f} ({exact_error:.2f}) | "
            f"{np.median(sd / exact_sd):.2f} | {predicted:.0f} → {measured:.0f} | "
            f"{np.mean([r['cpu_s'] for r in cell]):.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--methods", nargs="+", default=["DPHMC", "DPPenaltyMH"])
    parser.add_argument("--replicates", type=int, default=40)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="append one JSON line per replicate")
    parser.add_argument("--summarise", type=Path, nargs="+", default=None, help="read JSON lines back; no runs")
    parser.add_argument("--markdown", action="store_true", help="with --summarise: the docs' table as well")
    args = parser.parse_args(argv)
    if args.summarise:
        results = [json.loads(line) for path in args.summarise for line in path.read_text().splitlines() if line]
        print(summarise(results))
        if args.markdown:
            print(markdown_table(results))
        return
    logging.getLogger("pymc").setLevel(logging.ERROR)
    logging.getLogger("pymc_dp").setLevel(logging.ERROR)
    results = []
    for i in range(args.replicates):
        for n_rows in args.rows:
            for epsilon in args.epsilons:
                for method in args.methods:
                    result = one_replicate(n_rows, epsilon, method, args.first_seed + i, args.chains)
                    results.append(result)
                    line = json.dumps(result)
                    if args.out is not None:
                        with args.out.open("a") as handle:
                            handle.write(line + "\n")
                    print(
                        f"{method} N {n_rows} eps {epsilon:g} seed {result['seed']}: usable {result['usable']}, "
                        f"CPU {result['cpu_s']} s",
                        file=sys.stderr,
                        flush=True,
                    )
    print(summarise(results))


if __name__ == "__main__":
    main()
