"""Foulds et al. (2016), Fig. 2: L1 error of private beta-Bernoulli posteriors against N, at ε = 0.1.

For each N and repeat: draw N Bernoulli(θ₀ = 0.3) rows, then one sample from
- the Laplace path: Beta(1 + ŝ, 1 + N − ŝ) with ŝ released by ``pmdp.release_statistics``
  (Δ₁ = 1, N public),
- OPS: the prior Uniform(a₀, 1 − a₀) times the likelihood tempered by T = ``ops_temperature``
  (ℓ ∈ [log a₀, 0], so Δu = −log a₀), sampled exactly (a truncated beta, by inverse CDF),
- the non-private posterior Beta(1 + s, 1 + N − s),
- the noise-aware posterior of the same release (``likelihood(..., noise_aware=True)``: the
  exact Binomial ⊛ Laplace likelihood of the unprojected release), sampled exactly by inverse
  CDF on a grid, with the coverage of its 90 % central interval beside the naive one's,
and report the mean |θ − θ₀| over repeats. Writes a markdown table (and a log-log plot when
matplotlib is installed).

    python examples/exponential_family_beta_bernoulli.py --repeats 1000 --output docs/images
"""

import argparse
import math
from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
from scipy import stats

from pymc_dp.exponential_family import get_family, ops_temperature, release_statistics
from pymc_dp.exponential_family.noise_aware import univariate_release_loglik


def noise_aware_posterior(loglik, noisy, n, scale):
    """Grid (CDF, grid) of the noise-aware posterior under the uniform prior, around the release."""
    centre = min(max(noisy / n, 0.0), 1.0)
    half = 12.0 * math.sqrt(0.25 / n + 2.0 * scale**2 / n**2)
    grid = np.linspace(max(centre - half, 1e-9), min(centre + half, 1 - 1e-9), 3000)
    log_post = loglik(noisy, grid)
    density = np.exp(log_post - log_post.max())
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(grid))])
    return cdf / cdf[-1], grid


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
    value, grid_var = pt.dscalar(), pt.dvector()
    for n in args.sizes:
        scale = 1.0 / args.epsilon
        loglik = pytensor.function(
            [value, grid_var], univariate_release_loglik(get_family("bernoulli"), value, n, scale, grid_var)
        )
        errors = {"laplace": [], "noise-aware": [], "ops": [], "non-private": []}
        covered = {"laplace": 0, "noise-aware": 0}
        for _ in range(args.repeats):
            y = rng.binomial(1, theta0, n)
            s = y.sum()
            release = release_statistics("bernoulli", y, epsilon=args.epsilon, random_seed=rng)
            released = release.statistics[0]
            errors["laplace"].append(abs(rng.beta(1 + released, 1 + n - released) - theta0))
            low, high = stats.beta.ppf([0.05, 0.95], 1 + released, 1 + n - released)
            covered["laplace"] += low <= theta0 <= high
            cdf, grid = noise_aware_posterior(loglik, float(release.noisy_statistics[0]), n, scale)
            errors["noise-aware"].append(abs(float(np.interp(rng.uniform(), cdf, grid)) - theta0))
            low, high = np.interp([0.05, 0.95], cdf, grid)
            covered["noise-aware"] += low <= theta0 <= high
            ops = truncated_beta(rng, 1 + temperature * s, 1 + temperature * (n - s), args.a0, 1 - args.a0)
            errors["ops"].append(abs(ops - theta0))
            errors["non-private"].append(abs(rng.beta(1 + s, 1 + n - s) - theta0))
        means = {k: float(np.mean(v)) for k, v in errors.items()}
        ses = {k: float(np.std(v, ddof=1) / math.sqrt(len(v))) for k, v in errors.items()}
        coverage = {k: v / args.repeats for k, v in covered.items()}
        rows.append((n, means, ses, coverage))
        print(
            f"N = {n:>6}: "
            + "  ".join(f"{k} {means[k]:.4f} ± {ses[k]:.4f}" for k in means)
            + f"  coverage of 90 % intervals (θ₀ = {theta0}): naive {coverage['laplace']:.3f}, "
            f"noise-aware {coverage['noise-aware']:.3f}",
            flush=True,
        )
    if args.output is not None:
        args.output.mkdir(parents=True, exist_ok=True)
        keys = ("laplace", "noise-aware", "ops", "non-private")
        lines = [
            "| N | Laplace (naive) | Laplace (noise-aware) | OPS | non-private | 90 % coverage naive / noise-aware |",
            "|---|---|---|---|---|---|",
        ]
        for n, means, ses, coverage in rows:
            lines.append(
                f"| {n} | "
                + " | ".join(f"{means[k]:.4f} ± {ses[k]:.4f}" for k in keys)
                + f" | {coverage['laplace']:.3f} / {coverage['noise-aware']:.3f} |"
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
            for key in ("laplace", "noise-aware", "ops", "non-private"):
                ax.loglog([r[0] for r in rows], [r[1][key] for r in rows], marker="o", label=key)
            ax.set_xlabel("number of observations N")
            ax.set_ylabel("mean |θ − θ₀|")
            ax.set_title(f"beta-Bernoulli, ε = {args.epsilon}")
            ax.legend()
            fig.tight_layout()
            fig.savefig(args.output / "beta_bernoulli_l1.png", dpi=120)


if __name__ == "__main__":
    main()
