"""DPADVI on a real data set: Bayesian logistic regression on statsmodels' ``fair`` survey.

The 1978 Redbook survey of 6,366 married women (Fair 1978, bundled with statsmodels; no
download): predict whether a respondent reported any extramarital affair from eight answers.
Test accuracy of the posterior predictive (mean of σ(xβ) over 1,000 draws ≥ ½) against ε
for DPADVI, beside non-private ADVI and NUTS on the same training rows.

Run: ``python examples/dpadvi_logistic_fair.py`` (about 5 minutes; ``--quick`` for a smoke run).
Writes the table to ``docs/images/dpadvi_fair.md`` and, with matplotlib, the plot
``docs/images/dpadvi_fair.png`` (``--out`` to change the folder).

Privacy notes: the features are scaled to [−1, 1] with the ranges of the survey's published
codebook, never with statistics of the data (a data-dependent scaling would need its own
privacy budget); values outside those ranges are clipped. The train/test split and the
settings below (q, C, iterations, optimiser) were fixed before looking at test accuracy.
Neighbouring relation: substitute (one respondent's answers replaced; N is public). δ = 1e-5
< 1/N.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_dp as pmdp
from pymc_dp.accounting.events import format_epsilon

#: Published codebook ranges of the answers (Fair 1978, statsmodels' fair.py description).
CODEBOOK = {
    "rate_marriage": (1.0, 5.0),
    "age": (17.5, 42.0),
    "yrs_married": (0.5, 23.0),
    "children": (0.0, 5.5),
    "religious": (1.0, 4.0),
    "educ": (9.0, 20.0),
    "occupation": (1.0, 6.0),
    "occupation_husb": (1.0, 6.0),
}


def load(seed: int = 0, test_share: float = 0.2):
    """Features scaled by the codebook, binary target, and a seeded train/test split."""
    import statsmodels.api as sm

    frame = sm.datasets.fair.load_pandas().data
    columns = []
    for name, (low, high) in CODEBOOK.items():
        columns.append(np.clip(2.0 * (frame[name].to_numpy(float) - low) / (high - low) - 1.0, -1.0, 1.0))
    x = np.column_stack(columns)
    y = (frame["affairs"].to_numpy() > 0).astype("int64")
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = round(test_share * len(y))
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def build_model(x: np.ndarray, y: np.ndarray) -> pm.Model:
    with pm.Model(coords={"feature": list(CODEBOOK)}) as model:
        xd = pm.Data("x", x)
        yd = pm.Data("y_obs", y)
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 2.0, dims="feature")
        pm.Bernoulli("y", logit_p=intercept + xd @ beta, observed=yd)
    return model


def accuracy(posterior, x_test: np.ndarray, y_test: np.ndarray) -> float:
    """Accuracy of the posterior predictive mean probability, thresholded at ½."""
    intercept = np.asarray(posterior["intercept"]).reshape(-1)
    beta = np.asarray(posterior["beta"]).reshape(-1, x_test.shape[1])
    probability = (1.0 / (1.0 + np.exp(-(intercept[:, None] + beta @ x_test.T)))).mean(axis=0)
    return float(np.mean((probability >= 0.5) == y_test))


def dp_initialised_chain(model: pm.Model, args, delta: float, x_test: np.ndarray, y_test: np.ndarray) -> None:
    """DPADVI at ε = 1, then DPPenaltyMH started from q's draws on what is left of one (ε = 2) budget."""
    budget = pmdp.PrivacyBudget(epsilon=2.0, delta=delta, n_rows=len(model["y_obs"].get_value()))
    iterations = 60 if args.quick else args.iterations
    dpadvi = pmdp.DPADVI(
        epsilon=1.0, budget=budget, sampling_rate=args.sampling_rate, grad_clip=args.clip,
        optimizer="adam", learning_rate=0.05, random_seed=7,
    )  # fmt: skip
    approx = dpadvi.fit(iterations, model=model, progressbar=False)
    fit_epsilon, budget_epsilon = format_epsilon(dpadvi.privacy_spent().epsilon), format_epsilon(budget.spent().epsilon)
    print(f"DPADVI: ε = {fit_epsilon}; budget spent {budget_epsilon} of 2")
    chains, tune, draws = 2, (50 if args.quick else 300), (50 if args.quick else 500)
    with model:
        step = pmdp.DPPenaltyMH(llr_clip=3.0, proposal_scale=approx.std.eval() / 4)
        idata = pmdp.sample(
            step=step, budget=budget, draws=draws, tune=tune, chains=chains,
            initvals=approx.initial_values(chains, random_seed=8), random_seed=9, progressbar=False,
        )  # fmt: skip
    spent = budget.spent()
    attrs = idata["posterior"].attrs
    own = json.loads(attrs["dp_accountant"])["run_epsilon"]
    print(f"DPPenaltyMH: {chains} chains × ({tune} + {draws}), its own ε = {format_epsilon(own)}; "
          f"the chain's result (composed with its DPADVI start) ε = {format_epsilon(attrs['dp_epsilon'])}")  # fmt: skip
    print(f"budget: ε = {format_epsilon(spent.epsilon)} of 2 at δ = {delta:g} ({spent.method}), "
          f"runs {list(budget.labels)}")  # fmt: skip
    print(f"test accuracy: DPADVI {accuracy(approx.sample(1000, random_seed=1)['posterior'], x_test, y_test):.4f}, "
          f"DP chain {accuracy(idata['posterior'], x_test, y_test):.4f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 0.3, 1.0, 3.0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=2000, help="DPADVI iterations")
    parser.add_argument("--sampling-rate", type=float, default=0.02)
    parser.add_argument("--clip", type=float, default=2.0)
    parser.add_argument("--advi-iterations", type=int, default=20000)
    parser.add_argument("--no-nuts", action="store_true")
    parser.add_argument("--quick", action="store_true", help="smoke run: one ε, one repeat, few iterations")
    parser.add_argument(
        "--dp-chain", action="store_true", help="only the DP-initialised DP chain under one budget (paper 000)"
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "images")
    args = parser.parse_args()
    if args.quick:
        args.epsilons, args.repeats, args.iterations, args.advi_iterations, args.no_nuts = [1.0], 1, 60, 300, True

    x_train, y_train, x_test, y_test = load()
    model = build_model(x_train, y_train)
    delta = 1e-5
    if args.dp_chain:
        dp_initialised_chain(model, args, delta, x_test, y_test)
        return
    print(f"fair: {len(y_train)} training rows, {len(y_test)} test rows, {x_train.shape[1]} features")
    print(f"majority-class accuracy on the test rows: {max(y_test.mean(), 1 - y_test.mean()):.4f}")
    rows = []  # (method, epsilon, accuracies, seconds, noise multiplier)
    for epsilon in args.epsilons:
        scores, start, sigma = [], time.perf_counter(), None
        for repeat in range(args.repeats):
            dpadvi = pmdp.DPADVI(
                epsilon=epsilon, delta=delta, sampling_rate=args.sampling_rate, grad_clip=args.clip,
                optimizer="adam", learning_rate=0.05, random_seed=100 + repeat,
            )  # fmt: skip
            approx = dpadvi.fit(args.iterations, model=model, progressbar=False)
            idata = approx.sample(1000, random_seed=repeat)
            assert idata["posterior"].attrs["dp_epsilon"] <= epsilon
            scores.append(accuracy(idata["posterior"], x_test, y_test))
            sigma = dpadvi.noise_multiplier
        rows.append(("DPADVI", epsilon, scores, (time.perf_counter() - start) / args.repeats, sigma))
        print(f"DPADVI ε = {epsilon:g}: σ = {sigma:.3f}, accuracy {np.mean(scores):.4f} ± {np.std(scores):.4f}")

    scores, start = [], time.perf_counter()
    for repeat in range(args.repeats):
        with model:
            approx = pm.ADVI(random_seed=100 + repeat).fit(
                args.advi_iterations, obj_optimizer=pm.adam(learning_rate=0.01), progressbar=False
            )
        scores.append(accuracy(approx.sample(1000, random_seed=repeat)["posterior"], x_test, y_test))
    rows.append(("ADVI (non-private)", float("inf"), scores, (time.perf_counter() - start) / args.repeats, None))
    print(f"ADVI (non-private): accuracy {np.mean(scores):.4f} ± {np.std(scores):.4f}")
    if not args.no_nuts:
        start = time.perf_counter()
        with model:
            idata = pm.sample(1000, tune=1000, chains=2, random_seed=1, progressbar=False)
        score = accuracy(idata["posterior"], x_test, y_test)
        rows.append(("NUTS (non-private)", float("inf"), [score], time.perf_counter() - start, None))
        print(f"NUTS (non-private): accuracy {score:.4f}")

    lines = [
        f"Test accuracy on statsmodels' `fair` ({len(y_train)} train / {len(y_test)} test rows), mean ± sd over "
        f"{args.repeats} repeats; DPADVI with q = {args.sampling_rate}, C = {args.clip}, {args.iterations} iterations, "
        f"Adam 0.05, δ = {delta:g}, substitute neighbours. Majority class: "
        f"{max(y_test.mean(), 1 - y_test.mean()):.4f}.",
        "",
        "| method | ε | noise multiplier σ | test accuracy | seconds per fit |",
        "|---|---|---|---|---|",
    ]
    for method, epsilon, scores, seconds, sigma in rows:
        spread = f" ± {np.std(scores):.4f}" if len(scores) > 1 else ""
        sigma_text = f"{sigma:.3f}" if sigma is not None else "—"
        lines.append(f"| {method} | {epsilon:g} | {sigma_text} | {np.mean(scores):.4f}{spread} | {seconds:.1f} |")
    table = "\n".join(lines)
    print(table)
    if args.quick:
        return
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dpadvi_fair.md").write_text(table + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    dp = [r for r in rows if r[0] == "DPADVI"]
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    ax.errorbar([r[1] for r in dp], [np.mean(r[2]) for r in dp], [np.std(r[2]) for r in dp], marker="o", label="DPADVI")
    for method, _, scores, _, _ in rows[len(dp) :]:
        ax.axhline(np.mean(scores), linestyle="--" if "ADVI" in method else ":", color="grey", label=method)
    ax.axhline(max(y_test.mean(), 1 - y_test.mean()), color="black", linewidth=0.8, label="majority class")
    ax.set_xscale("log")
    ax.set_xlabel("ε (δ = 1e-5)")
    ax.set_ylabel("test accuracy")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out / "dpadvi_fair.png", dpi=120)
    print(f"wrote {args.out / 'dpadvi_fair.md'} and {args.out / 'dpadvi_fair.png'}")


if __name__ == "__main__":
    main()
