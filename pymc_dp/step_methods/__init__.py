"""DP step methods for ``pm.sample(step=...)``."""

from pymc_dp.step_methods.barker import DPBarkerMH, barker_accepts
from pymc_dp.step_methods.base import DPStep, TransitionInfo, accept_reject
from pymc_dp.step_methods.hmc import DPHMC, kinetic_energy, leapfrog
from pymc_dp.step_methods.owners import DPMultiOwnerPenaltyMH
from pymc_dp.step_methods.penalty import DPPenaltyMH, penalty_log_acceptance
from pymc_dp.step_methods.suffstats_penalty import DPSuffStatsPenaltyMH

__all__ = [
    "DPHMC",
    "DPBarkerMH",
    "DPMultiOwnerPenaltyMH",
    "DPPenaltyMH",
    "DPStep",
    "DPSuffStatsPenaltyMH",
    "TransitionInfo",
    "accept_reject",
    "barker_accepts",
    "kinetic_energy",
    "leapfrog",
    "penalty_log_acceptance",
]
