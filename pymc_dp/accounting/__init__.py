"""Privacy accounting: pure functions of public settings, no PyMC, no data.

Modules
-------
- :mod:`~pymc_dp.accounting.events`: the event vocabulary, one class per kind of mechanism,
  each documenting what its mechanism releases and under which assumptions.
- :mod:`~pymc_dp.accounting.composition`: :func:`compose_epsilon`, ε at δ of a list of events.
- :mod:`~pymc_dp.accounting.spent`: :class:`PrivacySpent`, the public result type.
- :mod:`~pymc_dp.accounting.gaussian`, :mod:`~pymc_dp.accounting.rdp`, :mod:`~pymc_dp.accounting.pld`,
  :mod:`~pymc_dp.accounting.barker`: the privacy curves (closed form, RDP, PLD, the DP Barker test).
- :mod:`~pymc_dp.accounting.calibrate`: the noise that meets a target (ε, δ).
- :mod:`~pymc_dp.accounting.budget` and :mod:`~pymc_dp.accounting.ledger`: budgets across runs,
  in memory and in a shared file.
"""

from pymc_dp.accounting.barker import (
    barker_subsampled_rdp,
    subsampled_barker_epsilon,
    subsampled_barker_max_iterations,
)
from pymc_dp.accounting.budget import PrivacyBudget, PrivacyBudgetExceededError
from pymc_dp.accounting.calibrate import (
    noise_multiplier_for_target,
    poisson_gaussian_noise_multiplier,
    round_towards_privacy,
)
from pymc_dp.accounting.composition import compose_epsilon
from pymc_dp.accounting.events import (
    GaussianReleases,
    PoissonGaussianReleases,
    PureDPReleases,
    RdpReleases,
    event_from_dict,
)
from pymc_dp.accounting.gaussian import (
    gaussian_delta,
    gaussian_epsilon,
    gaussian_mu_for_target,
)
from pymc_dp.accounting.ledger import LedgerEntry, LedgerHistory, LedgerIntegrityError, PrivacyLedger
from pymc_dp.accounting.rdp import DEFAULT_ORDERS, gaussian_rdp, rdp_to_epsilon
from pymc_dp.accounting.spent import PrivacySpent

__all__ = [
    "DEFAULT_ORDERS",
    "GaussianReleases",
    "LedgerEntry",
    "LedgerHistory",
    "LedgerIntegrityError",
    "PoissonGaussianReleases",
    "PrivacyBudget",
    "PrivacyBudgetExceededError",
    "PrivacyLedger",
    "PrivacySpent",
    "PureDPReleases",
    "RdpReleases",
    "barker_subsampled_rdp",
    "compose_epsilon",
    "event_from_dict",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu_for_target",
    "gaussian_rdp",
    "noise_multiplier_for_target",
    "poisson_gaussian_noise_multiplier",
    "rdp_to_epsilon",
    "round_towards_privacy",
    "subsampled_barker_epsilon",
    "subsampled_barker_max_iterations",
]
