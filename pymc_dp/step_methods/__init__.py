"""DP step methods for ``pm.sample(step=...)``."""

from pymc_dp.step_methods.barker import DPBarkerMH, barker_accepts
from pymc_dp.step_methods.base import DPStep
from pymc_dp.step_methods.hmc import DPHMC, kinetic_energy, leapfrog
from pymc_dp.step_methods.penalty import DPPenaltyMH, penalty_log_acceptance

__all__ = [
    "DPHMC",
    "DPBarkerMH",
    "DPPenaltyMH",
    "DPStep",
    "barker_accepts",
    "kinetic_energy",
    "leapfrog",
    "penalty_log_acceptance",
]
