"""DP Barker MCMC on the Gaussian mixture of Heikkilä et al. (2019, §4, eq. 24–25).

θ₁ ~ N(0, 10), θ₂ ~ N(0, 1), xᵢ ~ ½N(θ₁, 2) + ½N(θ₁ + θ₂, 2), N = 10⁶ rows drawn with
θ = (0, 1). The likelihood is tempered to count as N₀ = 100 rows (eq. 23), which makes the
posterior bimodal (modes near (0, 1) and (1, −1)), as in Welling and Teh (2011).

The script runs DPBarkerMH (b = 1000 rows per iteration, drawn without replacement) through
``pymc_dp.sample`` and non-private references: the tempered posterior on a grid (moments) and
a NUTS chain on the tempered model (for the scatter plot, like the paper's Fig. 2), both on
the data binned into 4000 bins of width ≈ 4e-3 (which moves the tempered log-likelihood by
O(N₀·width²) ≈ 1e-3). It prints ε, the acceptance rate, the share of clipped ratios (a
non-private diagnostic the data holder computes; it is not part of the release) and the
moments of both, and saves the scatter plot when matplotlib is installed.

    python examples/dp_barker_gmm.py                     # N = 10⁶, about a minute
    python examples/dp_barker_gmm.py --rows 20000 --draws 2000 --no-nuts   # seconds
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pymc as pm
from scipy import special

import pymc_dp as pmdp
from pymc_dp.accounting.events import format_epsilon

TRUE_THETA = (0.0, 1.0)
PRIOR_SD = (np.sqrt(10.0), 1.0)
DATA_SD = np.sqrt(2.0)


def make_data(n_rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    second = rng.random(n_rows) < 0.5
    return rng.normal(TRUE_THETA[0] + second * TRUE_THETA[1], DATA_SD)


def build_model(x: np.ndarray) -> pm.Model:
    with pm.Model() as model:
        data = pm.Data("x", x)
        theta1 = pm.Normal("theta1", 0.0, PRIOR_SD[0])
        theta2 = pm.Normal("theta2", 0.0, PRIOR_SD[1])
        pm.NormalMixture("obs", w=[0.5, 0.5], mu=pm.math.stack([theta1, theta1 + theta2]), sigma=DATA_SD, observed=data)
    return model


def binned(x: np.ndarray, bins: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    """Bin centres and counts (width ≈ 4e-3 for N(·, 2) data): the non-private references use them."""
    counts, edges = np.histogram(x, bins=bins)
    centres = 0.5 * (edges[1:] + edges[:-1])
    return centres[counts > 0], counts[counts > 0]


def build_tempered_model(x: np.ndarray, tempered_size: float) -> pm.Model:
    """The same posterior with the likelihood raised to N₀/N, on binned data, for the non-private NUTS chain."""
    centres, counts = binned(x)
    with pm.Model() as model:
        theta1 = pm.Normal("theta1", 0.0, PRIOR_SD[0])
        theta2 = pm.Normal("theta2", 0.0, PRIOR_SD[1])
        mixture = pm.NormalMixture.dist(w=[0.5, 0.5], mu=pm.math.stack([theta1, theta1 + theta2]), sigma=DATA_SD)
        pm.Potential("tempered_likelihood", tempered_size / x.size * (counts * pm.logp(mixture, centres)).sum())
    return model


def log_likelihood_rows(x: np.ndarray, theta1, theta2) -> np.ndarray:
    """Per-row mixture log-density (broadcasts over θ)."""
    norm = -0.5 * np.log(2 * np.pi * DATA_SD**2)
    a = norm - 0.5 * ((x - theta1) / DATA_SD) ** 2
    b = norm - 0.5 * ((x - theta1 - theta2) / DATA_SD) ** 2
    return np.logaddexp(a, b) + np.log(0.5)


def exact_tempered_moments(x: np.ndarray, tempered_size: float, size: int = 301) -> dict[str, float]:
    """Moments of the tempered posterior on a grid (data binned into 4000 bins of width ≈ 4e-3)."""
    centres, counts = binned(x)
    t1 = np.linspace(-2.5, 3.5, size)
    t2 = np.linspace(-4.0, 4.0, size)
    g1, g2 = np.meshgrid(t1, t2, indexing="ij")
    loglik = np.zeros(g1.size)
    for chunk in np.array_split(np.arange(centres.size), 40):
        loglik += counts[chunk] @ log_likelihood_rows(centres[chunk, None], g1.ravel(), g2.ravel())
    loglik = loglik.reshape(g1.shape)
    logpost = tempered_size / x.size * loglik - 0.5 * (g1 / PRIOR_SD[0]) ** 2 - 0.5 * (g2 / PRIOR_SD[1]) ** 2
    weights = np.exp(logpost - special.logsumexp(logpost))
    m1, m2 = float(np.sum(weights * g1)), float(np.sum(weights * g2))
    return {
        "theta1_mean": m1,
        "theta2_mean": m2,
        "theta1_var": float(np.sum(weights * (g1 - m1) ** 2)),
        "theta2_var": float(np.sum(weights * (g2 - m2) ** 2)),
    }


def clipped_share(x, draws, proposal_scale, batch_size, clip, seed) -> float:
    """Share of clipped per-row ratios at moves like the chain's (non-private: data holder's diagnostic)."""
    rng = np.random.default_rng(seed)
    shares = []
    for theta in draws[rng.choice(len(draws), size=min(200, len(draws)), replace=False)]:
        proposal = theta + proposal_scale * rng.normal(size=2)
        batch = x[rng.choice(x.size, size=batch_size, replace=False)]
        ratios = log_likelihood_rows(batch, *proposal) - log_likelihood_rows(batch, *theta)
        shares.append(np.mean(np.abs(ratios) > clip))
    return float(np.mean(shares))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--tempered-size", type=float, default=100.0)
    parser.add_argument("--draws", type=int, default=10_000)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=123)
    parser.add_argument("--no-nuts", action="store_true", help="skip the non-private NUTS chain")
    parser.add_argument("--plot", default="dp_barker_gmm.png")
    args = parser.parse_args()

    x = make_data(args.rows, args.seed)
    model = build_model(x)
    with model:
        step = pmdp.DPBarkerMH(batch_size=args.batch_size, tempered_size=args.tempered_size)
    start = time.perf_counter()
    with model:
        idata = pmdp.sample(
            step=step,
            delta=args.delta,
            draws=args.draws,
            tune=args.tune,
            chains=args.chains,
            initvals={"theta1": 0.0, "theta2": 0.0},  # the prior means: data-free
            random_seed=args.seed,
            progressbar=False,
            compute_convergence_checks=False,
        )
    dp_seconds = time.perf_counter() - start
    post = idata.posterior
    draws = np.column_stack([post["theta1"].values.ravel(), post["theta2"].values.ravel()])
    stats = idata.sample_stats
    final_scale = float(stats["dp_proposal_scale"].values[:, -1].mean())
    spent = pmdp.privacy_spent(idata)

    print(f"N = {args.rows}, b = {args.batch_size}, N0 = {args.tempered_size:g}, clip = √b/N0 = {step.llr_clip:.4f}")
    run = f"{args.chains} chains × ({args.tune} tune + {args.draws} draws)"
    print(f"{run}: ε = {format_epsilon(spent.epsilon)} at δ = {args.delta:g} (every iteration counted; {spent.method})")
    print(
        f"acceptance {float(stats['dp_accepted'].mean()):.3f}, final proposal scale {final_scale:.4f}, "
        f"V_cor error {step.correction_error:.1e}, {dp_seconds:.1f} s"
    )
    share = clipped_share(x, draws, final_scale, args.batch_size, step.llr_clip, args.seed)
    print(f"share of clipped ratios (non-private diagnostic, not released): {share:.4f}")

    exact = exact_tempered_moments(x, args.tempered_size)
    rows = [("DP Barker", draws)]
    nuts_draws = None
    if not args.no_nuts:
        start = time.perf_counter()
        with build_tempered_model(x, args.tempered_size):
            reference = pm.sample(
                draws=2000, tune=1000, chains=args.chains, random_seed=args.seed, progressbar=False, cores=1
            )
        nuts_draws = np.column_stack(
            [reference.posterior["theta1"].values.ravel(), reference.posterior["theta2"].values.ravel()]
        )
        rows.append((f"NUTS (tempered, non-private, {time.perf_counter() - start:.0f} s)", nuts_draws))

    print(f"\n{'':42} {'mean θ1':>8} {'mean θ2':>8} {'var θ1':>8} {'var θ2':>8} {'P(θ2>0)':>8}")
    print(
        f"{'exact tempered posterior (grid)':42} {exact['theta1_mean']:8.3f} {exact['theta2_mean']:8.3f} "
        f"{exact['theta1_var']:8.3f} {exact['theta2_var']:8.3f}"
    )
    for name, d in rows:
        print(
            f"{name:42} {d[:, 0].mean():8.3f} {d[:, 1].mean():8.3f} {d[:, 0].var():8.3f} {d[:, 1].var():8.3f} "
            f"{np.mean(d[:, 1] > 0):8.3f}"
        )

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    panels = [(f"DP Barker, ε = {spent.epsilon:.2f}, δ = {args.delta:g}", draws)]
    if nuts_draws is not None:
        panels.append(("non-private tempered chain (NUTS)", nuts_draws))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.5), sharex=True, sharey=True, squeeze=False)
    for ax, (title, d) in zip(axes[0], panels, strict=True):
        ax.scatter(d[:, 0], d[:, 1], s=2, alpha=0.2)
        ax.set_title(title)
        ax.set_xlabel("θ1")
    axes[0, 0].set_ylabel("θ2")
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    print(f"plot saved to {args.plot}")


if __name__ == "__main__":
    main()
