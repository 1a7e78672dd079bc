"""DP step methods for ``pm.sample(step=...)``."""

from pymc_dp.step_methods.base import DPStep
from pymc_dp.step_methods.hmc import DPHMC, kinetic_energy, leapfrog
from pymc_dp.step_methods.penalty import DPPenaltyMH, penalty_log_acceptance

__all__ = ["DPHMC", "DPPenaltyMH", "DPStep", "kinetic_energy", "leapfrog", "penalty_log_acceptance"]
