"""Shared pieces of the invariance tests: many independent chains started at exact posterior draws."""

import math

import numpy as np
from pymc.blocking import DictToArrayBijection
from scipy import stats

Z_CRIT = stats.norm.isf(0.5e-4)  # two-sided 1e-4 per test


def run_chains_from(step, starts: np.ndarray, n_steps: int, seed: int, inv_mass=None) -> tuple[np.ndarray, float]:
    """Run one independent chain per start value through ``step.astep``; return end points and acceptance.

    ``inv_mass`` (DPHMC only) replaces the unit mass matrix after each chain's reset. The noise is
    derived from ``seed`` (``reproducible_noise``, testing only) so that the suite is deterministic.
    """
    step.reproducible_noise = True
    name = step.vars[0].name
    ends, accepted = np.empty_like(starts), 0
    for i, start in enumerate(starts):
        step.set_rng(np.random.default_rng([seed, i]))
        if inv_mass is not None:
            step.inv_mass = np.full(1, inv_mass)
        q = DictToArrayBijection.map({name: np.asarray(start)})
        for _ in range(n_steps):
            q, stats_list = step.astep(q)
            accepted += stats_list[0]["dp_accepted"]
        ends[i] = q.data[0]
    return ends, accepted / (len(starts) * n_steps)


def invariance_z_scores(ends: np.ndarray, mean: float, sd: float) -> tuple[float, float]:
    """z-scores of the sample mean and of the sample variance ((n−1)s²/σ² ~ χ²(n−1)) of Gaussian draws."""
    n = ends.size
    z_mean = (ends.mean() - mean) / (sd / math.sqrt(n))
    chi2 = (n - 1) * ends.var(ddof=1) / sd**2
    return z_mean, stats.norm.isf(stats.chi2.sf(chi2, n - 1))


def without_penalty(llr, std, prior, proposal=0.0, temperature=1.0):
    """A broken acceptance with the −(Tσ)²/2 penalty dropped, for the power checks."""
    return temperature * llr + prior + proposal
