"""DP step methods for ``pm.sample(step=...)``."""

from pymc_dp.step_methods.base import DPStep
from pymc_dp.step_methods.penalty import DPPenaltyMH, penalty_log_acceptance

__all__ = ["DPPenaltyMH", "DPStep", "penalty_log_acceptance"]
