"""Calibration by simulation of posteriors on Laplace-released statistics (noise-aware and naive).

For the one-statistic families the posterior is one-dimensional, so it is computed by
quadrature on a grid (no MCMC error): draw θ from the prior, N rows given θ, release their
sufficient statistic with :func:`pymc_dp.release_statistics`, and check whether θ lies in the
central interval of the noise-aware posterior (the likelihood of the release,
:func:`pymc_dp.exponential_family.noise_aware.univariate_release_loglik`, evaluated by the same
PyTensor graph that :meth:`ReleasedStatistics.likelihood` adds to a model) and of the naive
posterior (the conjugate posterior that treats the projected release as the exact statistic).
If the model is right, a central interval of level 1 − α contains the drawn θ with probability
exactly 1 − α (Cook, Gelman and Rubin 2006): coverage is the test.

Synthetic data only; nothing here reads user data.

References
----------
.. [1] Cook, S. R., Gelman, A. and Rubin, D. B. (2006). Validation of software for Bayesian
   models using posterior quantiles. JCGS 15(3), 675–692.
.. [2] Bernstein, G. and Sheldon, D. (2018). Differentially private Bayesian inference for
   exponential families. NeurIPS, §5 (calibration of noise-aware posteriors).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from scipy import stats

from pymc_dp.exponential_family.families import get_family
from pymc_dp.exponential_family.noise_aware import univariate_release_loglik
from pymc_dp.exponential_family.release import release_statistics

__all__ = ["CALIBRATION_SETUPS", "CalibrationResult", "calibrate_univariate"]


@dataclass(frozen=True)
class _Setup:
    settings: dict
    prior: Any  # a frozen scipy distribution over the parameter
    sampler: Any  # (rng, theta, n) -> rows

    def naive(self, family, statistic: float, n_rows: int):
        """Conjugate posterior (frozen scipy) that treats the projected release as the exact S."""
        name = family.name
        if name in ("bernoulli", "binomial"):
            a, b = self.prior.args
            return stats.beta(a + statistic, b + n_rows * family.n_trials - statistic)
        if name == "poisson":
            shape, rate = self.prior.args[0], 1.0 / self.prior.kwds["scale"]
            return stats.gamma(shape + statistic, scale=1.0 / (rate + n_rows))
        mean0, sd0 = self.prior.args
        precision = 1.0 / sd0**2 + n_rows / family.sigma**2
        return stats.norm((mean0 / sd0**2 + statistic / family.sigma**2) / precision, 1.0 / math.sqrt(precision))


#: The simulation set-ups: public settings, prior of the parameter, and the row sampler.
CALIBRATION_SETUPS: dict[str, _Setup] = {
    "bernoulli": _Setup({}, stats.beta(1.0, 1.0), lambda rng, p, n: rng.binomial(1, p, n)),
    "binomial": _Setup({"n_trials": 5}, stats.beta(1.0, 1.0), lambda rng, p, n: rng.binomial(5, p, n)),
    # upper = 10 with mu ~ Gamma(4, 1): rows are clamped now and then, which the model accounts for.
    "poisson": _Setup({"upper": 10}, stats.gamma(4.0, scale=1.0), lambda rng, mu, n: rng.poisson(mu, n)),
    # bounds (−3, 3) with mu ~ N(0, 1), sigma = 1: rows are clamped now and then.
    "normal": _Setup(
        {"sigma": 1.0, "bounds": (-3.0, 3.0)}, stats.norm(0.0, 1.0), lambda rng, mu, n: rng.normal(mu, 1.0, n)
    ),
}


@dataclass(frozen=True)
class CalibrationResult:
    """Coverage of central intervals over ``repeats`` simulated releases, and mean interval widths."""

    family: str
    n_rows: int
    epsilon: float
    level: float
    repeats: int
    noise_aware_coverage: float
    naive_coverage: float
    noise_aware_width: float
    naive_width: float

    def coverage_se(self, coverage: float) -> float:
        """Binomial standard error of a coverage estimate at the nominal level."""
        return math.sqrt(self.level * (1.0 - self.level) / self.repeats)


def _interval(grid: np.ndarray, log_density: np.ndarray, level: float) -> tuple[float, float, np.ndarray]:
    density = np.exp(log_density - np.max(log_density))
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(grid))])
    cdf /= cdf[-1]
    tail = (1.0 - level) / 2.0
    low, high = np.interp([tail, 1.0 - tail], cdf, grid)
    return float(low), float(high), cdf


def _support(family) -> tuple[float, float]:
    return (1e-9, 1.0 - 1e-9) if family.name in ("bernoulli", "binomial") else (-np.inf, np.inf)


def calibrate_univariate(
    family: str,
    n_rows: int,
    epsilon: float,
    repeats: int,
    rng: np.random.Generator,
    level: float = 0.9,
    grid_size: int = 1500,
) -> CalibrationResult:
    """Coverage of ``level`` central intervals, noise-aware vs naive, for a one-statistic family.

    Each repeat draws θ from the set-up's prior (:data:`CALIBRATION_SETUPS`), ``n_rows`` rows
    given θ, and one release at ``epsilon`` (noise from ``rng``: ``reproducible_noise=True``,
    a simulation). The noise-aware posterior is computed by quadrature on a two-stage grid
    (a wide grid locates the posterior mass, a fine one of ``grid_size`` points covers it).
    """
    setup = CALIBRATION_SETUPS[family]
    fam = get_family(family, **setup.settings)
    scale = fam.l1_sensitivity() / epsilon
    value, grid_var = pt.dscalar("value"), pt.dvector("grid")
    loglik = pytensor.function([value, grid_var], univariate_release_loglik(fam, value, n_rows, scale, grid_var))
    lo_support, hi_support = _support(fam)
    hits = {"aware": 0, "naive": 0}
    widths = {"aware": [], "naive": []}
    for _ in range(repeats):
        theta = float(setup.prior.rvs(random_state=rng))
        rows = setup.sampler(rng, theta, n_rows)
        release = release_statistics(
            family, rows, epsilon=epsilon, reproducible_noise=True, random_seed=rng, **setup.settings
        )
        noisy = float(release.noisy_statistics[0])
        # Stage 1: a wide grid over the prior's bulk and the naive posterior's.
        naive = setup.naive(fam, float(release.statistics[0]), n_rows)
        wide_lo = max(lo_support, min(setup.prior.ppf(1e-7), naive.ppf(1e-7)))
        wide_hi = min(hi_support, max(setup.prior.ppf(1 - 1e-7), naive.ppf(1 - 1e-7)))
        grid = np.linspace(wide_lo, wide_hi, grid_size)
        log_post = loglik(noisy, grid) + setup.prior.logpdf(grid)
        _, _, cdf = _interval(grid, log_post, level)
        i_lo = max(int(np.searchsorted(cdf, 1e-9)) - 2, 0)
        i_hi = min(int(np.searchsorted(cdf, 1.0 - 1e-9)) + 2, grid.size - 1)
        # Stage 2: a fine grid over the mass found.
        grid = np.linspace(grid[i_lo], grid[i_hi], grid_size)
        log_post = loglik(noisy, grid) + setup.prior.logpdf(grid)
        low, high, _ = _interval(grid, log_post, level)
        hits["aware"] += low <= theta <= high
        widths["aware"].append(high - low)
        tail = (1.0 - level) / 2.0
        n_low, n_high = naive.ppf([tail, 1.0 - tail])
        hits["naive"] += n_low <= theta <= n_high
        widths["naive"].append(n_high - n_low)
    return CalibrationResult(
        family,
        n_rows,
        float(epsilon),
        level,
        repeats,
        hits["aware"] / repeats,
        hits["naive"] / repeats,
        float(np.mean(widths["aware"])),
        float(np.mean(widths["naive"])),
    )
