"""Exponential-family paths: Laplace sufficient-statistics release and one posterior sample.

See ``docs/exponential_family.md``.
"""

from pymc_dp.exponential_family.counts import PoissonRegression  # registers "poisson_regression"
from pymc_dp.exponential_family.families import (
    SUPPORTED_FAMILIES,
    Bernoulli,
    Binomial,
    Categorical,
    ExponentialFamily,
    LinearRegression,
    LogisticRegression,
    Normal,
    Poisson,
    get_family,
    project_onto_scaled_simplex,
)
from pymc_dp.exponential_family.negative_binomial import (  # registers "negative_binomial_regression"
    NegativeBinomialRegression,
)
from pymc_dp.exponential_family.ops import one_posterior_sample, ops_temperature, tempered_model
from pymc_dp.exponential_family.release import (
    CovariateModelWarning,
    ReleasedStatistics,
    annotate_releases,
    nuisance_variables,
    release_statistics,
    sample_releases,
)

__all__ = [
    "SUPPORTED_FAMILIES",
    "Bernoulli",
    "Binomial",
    "Categorical",
    "CovariateModelWarning",
    "ExponentialFamily",
    "LinearRegression",
    "LogisticRegression",
    "NegativeBinomialRegression",
    "Normal",
    "Poisson",
    "PoissonRegression",
    "ReleasedStatistics",
    "annotate_releases",
    "get_family",
    "nuisance_variables",
    "one_posterior_sample",
    "ops_temperature",
    "project_onto_scaled_simplex",
    "release_statistics",
    "sample_releases",
    "tempered_model",
]
