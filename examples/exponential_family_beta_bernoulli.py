"""Foulds et al. (2016), Fig. 2: L1 error of private beta-Bernoulli posteriors against N, at ε = 0.1.

For each N and repeat: draw N Bernoulli(θ₀ = 0.3) rows, then one sample from
- the Laplace path: Beta(1 + ŝ, 1 + N − ŝ) with ŝ released by ``pmdp.release_statistics``
  (Δ₁ = 1, N public),
- OPS: the prior Uniform(a₀, 1 − a₀) times the likelihood tempered by T = ``ops_temperature``
  (ℓ ∈ [log a₀, 0], so Δu = −log a₀), sampled exactly (a truncated beta, by inverse CDF),
- the non-private posterior Beta(1 + s, 1 + N − s),
and report the mean |θ − θ₀| over repeats. Writes a markdown table (and a log-log plot when
matplotlib is installed).

    python examples/exponential_family_beta_bernoulli.py --repeats 1000 --output docs/images
"""

import argparse
import math
from pathlib import Path

import numpy as np
from scipy import stats

from pymc_dp.exponential_family import ops_temperature, release_statistics


def truncated_beta(rng, a, b, low, high):
    lo, hi = stats.beta.cdf([low, high], a, b)
    return float(stats.beta.ppf(rng.uniform(lo, hi), a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=1000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 30, 100, 300, 1000, 3000, 10000, 30000, 100000])
    parser.add_argument("--a0", type=float, default=0.05, help="OPS truncation point")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(2016)
    theta0 = 0.3
    temperature = ops_temperature(args.epsilon, (math.log(args.a0), 0.0))
    print(f"ε = {args.epsilon}; OPS temperature T = {temperature:.5f}; Laplace scale = {1 / args.epsilon:g}")
    rows = []
    for n in args.sizes:
        errors = {"laplace": [], "ops": [], "non-private": []}
        for _ in range(args.repeats):
            y = rng.binomial(1, theta0, n)
            s = y.sum()
            released = release_statistics("bernoulli", y, epsilon=args.epsilon, random_seed=rng).statistics[0]
            errors["laplace"].append(abs(rng.beta(1 + released, 1 + n - released) - theta0))
            ops = truncated_beta(rng, 1 + temperature * s, 1 + temperature * (n - s), args.a0, 1 - args.a0)
            errors["ops"].append(abs(ops - theta0))
            errors["non-private"].append(abs(rng.beta(1 + s, 1 + n - s) - theta0))
        means = {k: float(np.mean(v)) for k, v in errors.items()}
        ses = {k: float(np.std(v, ddof=1) / math.sqrt(len(v))) for k, v in errors.items()}
        rows.append((n, means, ses))
        print(f"N = {n:>6}: " + "  ".join(f"{k} {means[k]:.4f} ± {ses[k]:.4f}" for k in means))
    if args.output is not None:
        args.output.mkdir(parents=True, exist_ok=True)
        lines = ["| N | Laplace | OPS | non-private |", "|---|---|---|---|"]
        for n, means, ses in rows:
            lines.append(
                f"| {n} | "
                + " | ".join(f"{means[k]:.4f} ± {ses[k]:.4f}" for k in ("laplace", "ops", "non-private"))
                + " |"
            )
        (args.output / "beta_bernoulli_l1.md").write_text("\n".join(lines) + "\n")
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib not installed: table only")
        else:
            fig, ax = plt.subplots(figsize=(5, 3.5))
            for key in ("laplace", "ops", "non-private"):
                ax.loglog([r[0] for r in rows], [r[1][key] for r in rows], marker="o", label=key)
            ax.set_xlabel("number of observations N")
            ax.set_ylabel("mean |θ − θ₀|")
            ax.set_title(f"beta-Bernoulli, ε = {args.epsilon}")
            ax.legend()
            fig.tight_layout()
            fig.savefig(args.output / "beta_bernoulli_l1.png", dpi=120)


if __name__ == "__main__":
    main()
