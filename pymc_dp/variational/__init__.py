"""Differentially private variational inference."""

from pymc_dp.variational.dpadvi import DPADVI, DPFullRank, DPMeanField
from pymc_dp.variational.families import FullRankFamily, MeanFieldFamily
from pymc_dp.variational.optimizers import AdaGrad, Adam

__all__ = ["DPADVI", "AdaGrad", "Adam", "DPFullRank", "DPMeanField", "FullRankFamily", "MeanFieldFamily"]
