"""Naive Bayes on released count tables: held-out accuracy against ε on statsmodels' ``fair`` data.

Data: the 1974 Redbook survey of 6366 married women bundled with statsmodels
(``statsmodels.datasets.fair``, no download). Target: any time spent in extramarital affairs
(``affairs > 0``, 32% of rows). Features, all categorical with levels fixed by the published
codebook (public, not read from the data): rate_marriage (5), religious (4), occupation (6),
occupation_husb (6), educ (6 levels: 9, 12, 14, 16, 17, 20 years), age (6 bands), yrs_married
(7 bands), children (6: 0–4, 5.5).

Model (naive Bayes): y ~ Categorical(π), x_f | y = k ~ Categorical(θ_fk); priors π ~ Dirichlet(1),
θ_fk ~ Dirichlet(1). The data enter only through F + 1 = 9 count tables of the training rows:
the class counts (2 cells) and, per feature, the joint (class, level) counts (2·L_f cells).

Privacy. Neighbouring relation: substitute (one training row replaced; the number of training
rows N is public). Each row falls in exactly one cell of every table, so replacing it moves
each table by at most 2 in L1 (one cell −1, another +1): Δ₁ = 2 per table. Every table is
released once by ``pmdp.release_statistics("categorical", …)`` at ε/(F + 1) (Laplace scale
2(F + 1)/ε, projected onto counts ≥ 0 summing to N); the tables compose to (ε, 0)-DP
(basic composition — equivalently one Laplace release of the concatenated tables, Δ₁ = 2(F + 1)).
The posterior is post-processing: the conjugate Dirichlet posterior of the released counts,
π | Ĉ ~ Dirichlet(1 + n̂), θ_fk | Ĉ ~ Dirichlet(1 + ĉ_fk·). ``--nuts`` also samples it with
NUTS on a PyMC model built from the releases (``pmdp.exponential_family.sample_releases``) and
compares the posterior means. ``--aware-repeats k`` also samples the noise-aware posterior
(``noise_aware=True``: the release's own likelihood, joint table probabilities π_k θ_fkl) with
NUTS on the first k splits — the noise-aware curve. The held-out accuracy is an evaluation on
raw test rows, not a release.

    python examples/naive_bayes_fair.py --repeats 20 --nuts --output docs/images
"""

import argparse
import math
from pathlib import Path

import numpy as np

from pymc_dp.accounting import compose_epsilon
from pymc_dp.exponential_family import release_statistics

#: Feature → ordered public levels (statsmodels' codebook for the fair data).
LEVELS = {
    "rate_marriage": [1, 2, 3, 4, 5],
    "religious": [1, 2, 3, 4],
    "occupation": [1, 2, 3, 4, 5, 6],
    "occupation_husb": [1, 2, 3, 4, 5, 6],
    "educ": [9, 12, 14, 16, 17, 20],
    "age": [17.5, 22, 27, 32, 37, 42],
    "yrs_married": [0.5, 2.5, 6, 9, 13, 16.5, 23],
    "children": [0, 1, 2, 3, 4, 5.5],
}
N_CLASSES = 2


def load(rows: int | None, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Feature level indices (rows × F) and labels of the fair data, optionally a random subset."""
    from statsmodels.datasets import fair

    frame = fair.load_pandas().data
    codes = []
    for name, levels in LEVELS.items():
        values = frame[name].to_numpy()
        index = np.searchsorted(levels, values)
        if not np.all(np.asarray(levels)[np.minimum(index, len(levels) - 1)] == values):
            raise ValueError(f"`{name}` has values outside the codebook levels {levels}.")
        codes.append(index)
    x = np.column_stack(codes).astype(np.int64)
    y = (frame["affairs"].to_numpy() > 0).astype(np.int64)
    if rows is not None and rows < y.size:
        keep = rng.choice(y.size, rows, replace=False)
        x, y = x[keep], y[keep]
    return x, y


def exact_tables(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    """Non-private counts: class counts, then the joint (class, level) counts of every feature."""
    tables = [np.bincount(y, minlength=N_CLASSES).astype(float)]
    for f, levels in enumerate(LEVELS.values()):
        joint = y * len(levels) + x[:, f]
        tables.append(np.bincount(joint, minlength=N_CLASSES * len(levels)).astype(float))
    return tables


def labels(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    """Per table, the cell each row falls in (the data handed to the Laplace mechanism)."""
    return [y] + [y * len(levels) + x[:, f] for f, levels in enumerate(LEVELS.values())]


def release_tables(x: np.ndarray, y: np.ndarray, epsilon: float, rng: np.random.Generator):
    """F + 1 Laplace releases at ε/(F + 1) each; returns the releases and their composed ε."""
    cells = labels(x, y)
    share = epsilon / len(cells)
    sizes = [N_CLASSES] + [N_CLASSES * len(levels) for levels in LEVELS.values()]
    releases = [
        release_statistics("categorical", c, epsilon=share, n_categories=k, random_seed=rng)
        for c, k in zip(cells, sizes, strict=True)
    ]
    spent = compose_epsilon([e for r in releases for e in r.events], 0.0)[0]
    return releases, spent


def posterior_draws(tables: list[np.ndarray], draws: int, rng: np.random.Generator):
    """Draws of π (draws × 2) and log θ_f (draws × 2 × L_f) from the conjugate Dirichlet posterior."""
    pi = rng.dirichlet(1.0 + tables[0], size=draws)
    log_theta = []
    for table, levels in zip(tables[1:], LEVELS.values(), strict=True):
        counts = table.reshape(N_CLASSES, len(levels))
        theta = np.stack([rng.dirichlet(1.0 + counts[k], size=draws) for k in range(N_CLASSES)], axis=1)
        log_theta.append(np.log(theta))
    return pi, log_theta


def predict(pi: np.ndarray, log_theta: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    """Posterior predictive P(y = 1 | x) averaged over the draws, shape (rows,)."""
    score = np.log(pi)[:, None, :]  # draws × rows × classes
    for f, lt in enumerate(log_theta):
        score = score + np.transpose(lt[:, :, x[:, f]], (0, 2, 1))
    score -= score.max(axis=2, keepdims=True)
    prob = np.exp(score)
    prob /= prob.sum(axis=2, keepdims=True)
    return prob[:, :, 1].mean(axis=0)


def auc(score: np.ndarray, truth: np.ndarray) -> float:
    """Area under the ROC curve (Mann–Whitney: P(score of a positive > score of a negative))."""
    from scipy.stats import rankdata

    ranks = rankdata(score)
    positives = int(truth.sum())
    negatives = truth.size - positives
    return float((ranks[truth == 1].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def nuts_check(releases, draws: int, tune: int, seed: int) -> tuple[float, float, float]:
    """NUTS on the PyMC model built from the releases; max |mean − conjugate mean| over π and θ."""
    import pymc as pm

    from pymc_dp.exponential_family import sample_releases

    with pm.Model() as model:
        pi = pm.Dirichlet("pi", np.ones(N_CLASSES))
        releases[0].likelihood("class_counts", p=pi, noise_aware=False)  # the conjugate check is of the naive model
        for (name, levels), release in zip(LEVELS.items(), releases[1:], strict=True):
            theta = pm.Dirichlet(f"theta_{name}", np.ones((N_CLASSES, len(levels))))
            # Σ_kl ĉ_kl log θ_kl: the conditional part of the joint (class, level) table.
            release.likelihood(f"{name}_counts", p=theta.flatten(), noise_aware=False)
        idata = sample_releases(
            releases, model=model, draws=draws, tune=tune, chains=2, random_seed=seed, progressbar=False
        )
    post = idata["posterior"]
    tables = [r.statistics for r in releases]
    worst = float(np.max(np.abs(post["pi"].values.mean(axis=(0, 1)) - (1 + tables[0]) / (2 + tables[0].sum()))))
    for (name, levels), table in zip(LEVELS.items(), tables[1:], strict=True):
        counts = 1.0 + table.reshape(N_CLASSES, len(levels))
        exact = counts / counts.sum(axis=1, keepdims=True)
        worst = max(worst, float(np.max(np.abs(post[f"theta_{name}"].values.mean(axis=(0, 1)) - exact))))
    return worst, float(post.attrs["dp_epsilon"]), float(post.attrs["dp_delta"])


def noise_aware_draws(releases, draws: int, seed: int):
    """Draws of π and log θ_f from the noise-aware posterior of the releases (NUTS on one PyMC model).

    Each table's likelihood is that of its release (``noise_aware=True``): the CLT normal of the
    counts with the Laplace noise as a Gaussian scale mixture, one latent variance per cell. The
    joint (class, level) table of feature f has cell probabilities π_k θ_fkl, which sum to 1.
    """
    import pymc as pm

    from pymc_dp.exponential_family import sample_releases

    with pm.Model() as model:
        pi = pm.Dirichlet("pi", np.ones(N_CLASSES))
        releases[0].likelihood("class_counts", p=pi)
        for (name, levels), release in zip(LEVELS.items(), releases[1:], strict=True):
            theta = pm.Dirichlet(f"theta_{name}", np.ones((N_CLASSES, len(levels))))
            release.likelihood(f"{name}_counts", p=(pi[:, None] * theta).flatten())
        idata = sample_releases(
            releases,
            model=model,
            draws=draws,
            tune=draws,
            chains=1,
            random_seed=seed,
            progressbar=False,
            on_poor_mixing="ignore",
        )
    post = idata["posterior"]
    pi = post["pi"].values.reshape(-1, N_CLASSES)
    log_theta = [
        np.log(post[f"theta_{name}"].values.reshape(-1, N_CLASSES, len(levels))) for name, levels in LEVELS.items()
    ]
    return pi, log_theta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 0.3, 1.0, 3.0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rows", type=int, default=None, help="use a random subset of this many rows (tiny runs)")
    parser.add_argument("--test-fraction", type=float, default=0.3)
    parser.add_argument("--posterior-draws", type=int, default=200)
    parser.add_argument("--nuts", action="store_true", help="also sample one release set with NUTS (at ε = 1)")
    parser.add_argument("--nuts-draws", type=int, default=500)
    parser.add_argument("--nuts-tune", type=int, default=500)
    parser.add_argument(
        "--aware-repeats",
        type=int,
        default=0,
        help="splits (the first ones) on which the noise-aware posterior is also sampled with NUTS (slow)",
    )
    parser.add_argument("--aware-draws", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1974)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    x, y = load(args.rows, rng)
    n_test = round(args.test_fraction * y.size)
    print(f"{y.size} rows, {x.shape[1]} features, {len(LEVELS) + 1} released tables; test rows {n_test}")

    settings = [*args.epsilons, math.inf]
    accuracy = {e: [] for e in settings}
    areas = {e: [] for e in settings}
    majority = []
    aware_accuracy = {e: [] for e in args.epsilons}
    aware_areas = {e: [] for e in args.epsilons}
    for split in range(args.repeats):
        order = rng.permutation(y.size)
        test, train = order[:n_test], order[n_test:]
        majority.append(float(np.mean(y[test] == np.argmax(np.bincount(y[train], minlength=2)))))
        for epsilon in settings:
            if math.isinf(epsilon):
                tables = exact_tables(x[train], y[train])
            else:
                releases, spent = release_tables(x[train], y[train], epsilon, rng)
                assert spent <= epsilon * (1 + 1e-12), (spent, epsilon)
                tables = [r.statistics for r in releases]
            pi, log_theta = posterior_draws(tables, args.posterior_draws, rng)
            probability = predict(pi, log_theta, x[test])
            accuracy[epsilon].append(float(np.mean((probability > 0.5) == (y[test] == 1))))
            areas[epsilon].append(auc(probability, y[test]))
            if split < args.aware_repeats and not math.isinf(epsilon):
                pi, log_theta = noise_aware_draws(releases, args.aware_draws, int(rng.integers(2**31)))
                probability = predict(pi, log_theta, x[test])
                aware_accuracy[epsilon].append(float(np.mean((probability > 0.5) == (y[test] == 1))))
                aware_areas[epsilon].append(auc(probability, y[test]))

    n_train = y.size - n_test
    print(f"held-out accuracy and AUC over {args.repeats} random splits (N_train = {n_train}; ± standard error):")
    lines = ["| ε | Laplace scale per cell | accuracy | AUC |", "|---|---|---|---|"]
    for epsilon in settings:
        values = np.asarray(accuracy[epsilon])
        se = float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else float("nan")
        label = "∞ (non-private)" if math.isinf(epsilon) else f"{epsilon:g}"
        scale = "—" if math.isinf(epsilon) else f"{2 * (len(LEVELS) + 1) / epsilon:g}"
        area = np.asarray(areas[epsilon])
        area_se = float(area.std(ddof=1) / math.sqrt(area.size)) if area.size > 1 else float("nan")
        lines.append(f"| {label} | {scale} | {values.mean():.4f} ± {se:.4f} | {area.mean():.4f} ± {area_se:.4f} |")
        print(f"  ε = {label:>16}: accuracy {values.mean():.4f} ± {se:.4f}  AUC {area.mean():.4f} ± {area_se:.4f}")
    lines.append(f"| majority class | — | {np.mean(majority):.4f} | 0.5 |")
    print(f"  majority class:      accuracy {np.mean(majority):.4f}")
    if args.aware_repeats:
        lines += [
            "",
            f"Noise-aware posterior (NUTS), the first {min(args.aware_repeats, args.repeats)} splits, "
            "beside the conjugate posterior of the released counts on the same splits:",
            "",
            "| ε | noise-aware accuracy | naive accuracy | noise-aware AUC | naive AUC |",
            "|---|---|---|---|---|",
        ]
        for epsilon in args.epsilons:
            k = len(aware_accuracy[epsilon])
            row = (
                f"| {epsilon:g} | {np.mean(aware_accuracy[epsilon]):.4f} | {np.mean(accuracy[epsilon][:k]):.4f} "
                f"| {np.mean(aware_areas[epsilon]):.4f} | {np.mean(areas[epsilon][:k]):.4f} |"
            )
            lines.append(row)
            print(f"  noise-aware {row}")

    if args.nuts:
        order = rng.permutation(y.size)
        train = order[n_test:]
        releases, _ = release_tables(x[train], y[train], 1.0, rng)
        worst, eps, delta = nuts_check(releases, args.nuts_draws, args.nuts_tune, args.seed)
        print(
            f"NUTS on the releases (ε = 1): max |posterior mean − conjugate mean| = {worst:.4f}; "
            f"dp_epsilon = {eps:g}, dp_delta = {delta:g}"
        )

    if args.output is not None:
        args.output.mkdir(parents=True, exist_ok=True)
        (args.output / "naive_bayes_fair.md").write_text("\n".join(lines) + "\n")
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib not installed: table only")
        else:
            finite = [e for e in settings if not math.isinf(e)]
            means = [np.mean(accuracy[e]) for e in finite]
            ses = [np.std(accuracy[e], ddof=1) / math.sqrt(len(accuracy[e])) for e in finite]
            fig, ax = plt.subplots(figsize=(5, 3.5))
            ax.errorbar(finite, means, yerr=ses, marker="o", label="Laplace-released tables")
            if args.aware_repeats:
                ax.plot(finite, [np.mean(aware_accuracy[e]) for e in finite], marker="s", label="noise-aware (NUTS)")
            ax.axhline(np.mean(accuracy[math.inf]), color="k", linestyle="--", label="non-private")
            ax.axhline(np.mean(majority), color="grey", linestyle=":", label="majority class")
            ax.set_xscale("log")
            ax.set_xlabel("ε (total over the 9 tables)")
            ax.set_ylabel("held-out accuracy")
            ax.set_title("naive Bayes, statsmodels fair data")
            ax.legend()
            fig.tight_layout()
            fig.savefig(args.output / "naive_bayes_fair.png", dpi=120)


if __name__ == "__main__":
    main()
