"""pymc-dp: differentially private Bayesian inference for PyMC models.

Public names only; see the README for a quick start and ``docs/`` for the guarantees.

Importing the package adds two narrow global warning filters, PyTensor's own filters of two Numba
messages about compile time (:data:`pymc_dp.workflow.NUMBA_FILTERS`, added again because one added
inside a ``warnings.catch_warnings()`` block is lost when it exits), and a filter on the
``pymc.sampling.forward`` logger that raises :class:`TrainingRowsWarning` when a plain
``pm.sample_posterior_predictive`` would read a DP result's training rows; nothing else
(``docs/api.md``).
"""

from importlib import metadata

from pymc_dp._errors import PrivateRunError
from pymc_dp.accounting import (
    LedgerIntegrityError,
    PrivacyBudget,
    PrivacyBudgetExceededError,
    PrivacyLedger,
    PrivacySpent,
)
from pymc_dp.backends.dask import DaskBackend, DaskBackendError
from pymc_dp.backends.dask_rows import row_placeholder
from pymc_dp.backends.jax import JaxBackend
from pymc_dp.bambi import from_bambi
from pymc_dp.data import ModelStructureError
from pymc_dp.exponential_family import (
    CovariateModelWarning,
    ReleasedStatistics,
    one_posterior_sample,
    release_statistics,
)
from pymc_dp.mechanisms.centred import CentringAnchor
from pymc_dp.planning import Plan, plan
from pymc_dp.public_data import public
from pymc_dp.publish import publish
from pymc_dp.release_once import release_once
from pymc_dp.results import (
    AlteredResultError,
    PrivateStart,
    UnpublishableResultError,
    check_publishable,
    strip_private_groups,
)
from pymc_dp.sampling import privacy_spent, sample
from pymc_dp.starts import UserInitvalWarning
from pymc_dp.statement import PrivacyStatement, privacy_statement
from pymc_dp.step_methods import DPHMC, DPBarkerMH, DPMultiOwnerPenaltyMH, DPPenaltyMH, DPSuffStatsPenaltyMH
from pymc_dp.step_methods.centred import release_anchor
from pymc_dp.variational import DPADVI
from pymc_dp.workflow import TrainingRowsWarning, sample_posterior_predictive

try:
    __version__ = metadata.version("pymc-dp")
except metadata.PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0"

__all__ = [
    "DPADVI",
    "DPHMC",
    "AlteredResultError",
    "CentringAnchor",
    "CovariateModelWarning",
    "DPBarkerMH",
    "DPMultiOwnerPenaltyMH",
    "DPPenaltyMH",
    "DPSuffStatsPenaltyMH",
    "DaskBackend",
    "DaskBackendError",
    "JaxBackend",
    "LedgerIntegrityError",
    "ModelStructureError",
    "Plan",
    "PrivacyBudget",
    "PrivacyBudgetExceededError",
    "PrivacyLedger",
    "PrivacySpent",
    "PrivacyStatement",
    "PrivateRunError",
    "PrivateStart",
    "ReleasedStatistics",
    "TrainingRowsWarning",
    "UnpublishableResultError",
    "UserInitvalWarning",
    "__version__",
    "check_publishable",
    "from_bambi",
    "one_posterior_sample",
    "plan",
    "privacy_spent",
    "privacy_statement",
    "public",
    "publish",
    "release_anchor",
    "release_once",
    "release_statistics",
    "row_placeholder",
    "sample",
    "sample_posterior_predictive",
    "strip_private_groups",
]
