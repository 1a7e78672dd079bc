"""The mechanism layer: where data-dependent numbers become releasable.

Everything a sampler may release about the data passes through here: per-row values are
clipped (bounding each row's influence, i.e. the sensitivity), summed, and perturbed with
calibrated noise. Step methods and DPADVI reach their model's rows only through
:func:`model_access`, which hands them a data-free prior and a :class:`RowMechanisms`;
they keep only the noisy results. This is the code to audit.

Every privacy parameter is validated before use: a negative or NaN clip bound, a
non-positive noise scale or a δ outside (0, 1) is an error, never silently accepted.

Modules
-------
- :mod:`~pymc_dp.mechanisms.clipping`: per-row clipping and the sensitivity of a clipped sum.
- :mod:`~pymc_dp.mechanisms.clip_bound`: a private clip bound (a DP quantile of per-row score norms).
- :mod:`~pymc_dp.mechanisms.noise`: Gaussian and Laplace noise, the Gaussian mechanism on a
  clipped sum, :class:`SecureNoise` and the per-mechanism generators (:func:`mechanism_rng`).
- :mod:`~pymc_dp.mechanisms.subsampling`: secret batches (Poisson, fixed size without replacement).
- :mod:`~pymc_dp.mechanisms.access`: :func:`model_access` and :class:`RowMechanisms`.
- one module per release: :mod:`~pymc_dp.mechanisms.log_likelihood_ratio` (DPPenaltyMH, DPHMC),
  :mod:`~pymc_dp.mechanisms.gradient` (DPHMC), :mod:`~pymc_dp.mechanisms.barker` (DPBarkerMH),
  :mod:`~pymc_dp.mechanisms.poisson_gradient` (DPADVI), :mod:`~pymc_dp.mechanisms.owners`
  (DPMultiOwnerPenaltyMH) and :mod:`~pymc_dp.mechanisms.sufficient_statistics`
  (``release_statistics``, DPSuffStatsPenaltyMH).
"""

from pymc_dp.mechanisms.access import RowMechanisms, model_access
from pymc_dp.mechanisms.barker import NoisyBarkerStatistic
from pymc_dp.mechanisms.clip_bound import ClipBoundRelease, NoisyScoreNormHistogram
from pymc_dp.mechanisms.clipping import (
    clip_l2,
    clip_values,
    clipped_sum_l2,
    clipped_sum_l2_linear,
    sensitivity_of_clipped_sum,
)
from pymc_dp.mechanisms.gradient import NoisyClippedGradient
from pymc_dp.mechanisms.log_likelihood_ratio import NoisyLogLikelihoodRatio
from pymc_dp.mechanisms.noise import (
    SecureNoise,
    gaussian_noise,
    laplace_noise,
    mechanism_rng,
    noisy_clipped_sum,
    spawn_noise_rng,
)
from pymc_dp.mechanisms.owners import OwnerLogLikelihoodRatio
from pymc_dp.mechanisms.poisson_gradient import NoisyPoissonGradientSum
from pymc_dp.mechanisms.subsampling import poisson_sample, sample_without_replacement
from pymc_dp.mechanisms.sufficient_statistics import (
    NoisySufficientStatistics,
    PrivateSufficientStatistics,
    laplace_sufficient_statistics,
)

__all__ = [
    "ClipBoundRelease",
    "NoisyBarkerStatistic",
    "NoisyClippedGradient",
    "NoisyLogLikelihoodRatio",
    "NoisyPoissonGradientSum",
    "NoisyScoreNormHistogram",
    "NoisySufficientStatistics",
    "OwnerLogLikelihoodRatio",
    "PrivateSufficientStatistics",
    "RowMechanisms",
    "SecureNoise",
    "clip_l2",
    "clip_values",
    "clipped_sum_l2",
    "clipped_sum_l2_linear",
    "gaussian_noise",
    "laplace_noise",
    "laplace_sufficient_statistics",
    "mechanism_rng",
    "model_access",
    "noisy_clipped_sum",
    "poisson_sample",
    "sample_without_replacement",
    "sensitivity_of_clipped_sum",
    "spawn_noise_rng",
]
