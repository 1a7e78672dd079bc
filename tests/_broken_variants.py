"""Deliberately broken variants of the audited mechanisms: evidence that the audit has power.

Each variant runs a real scenario of :mod:`pymc_dp.testing.audit` with one thing broken while
the claimed ε stays that of the correct mechanism; the audit must catch it (lower bound above
the claim). They are test code, kept out of the installed package: ``tests/test_audit.py``
runs them and ``scripts/run_audit.py`` puts them in the table of ``docs/audit.md``.

- **noise_halved**: the mechanism draws its noise for τ/2 (or 2ε) while ε is claimed for τ (ε).
- **no_clipping**: the mechanism layer's clip becomes the identity, noise unchanged; for the
  statistics releases the bounds check is skipped and the row of D′ sits at 100, outside the
  public bounds [0, 1].
- **no_sampling**: Poisson-subsampled DPADVI puts every row in every batch while the
  accountant assumes rate q.
- **all_rows_check**: the cross-row scenario computes its rows with PyMC's
  ``model.logp(sum=False)`` compiled as is, whose parameter check reduces over all rows (the
  data layer before issue 12).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from unittest import mock

import numpy as np

import pymc_dp.mechanisms
from pymc_dp.exponential_family.families import Normal
from pymc_dp.mechanisms import NoisyLogLikelihoodRatio
from pymc_dp.testing.audit import (
    _CROSS_ROW_STEP,
    SCENARIOS,
    AuditScenario,
    _identity_poisson_models,
    _RowTable,
    barker_scenario,
    cross_row_scenario,
    dpadvi_gradient_scenario,
    hmc_gradient_scenario,
    laplace_statistics_scenario,
    owner_ratio_scenario,
    penalty_scenario,
    suffstats_scenario,
)

__all__ = ["ALL_SCENARIOS", "BROKEN_SCENARIOS"]

#: The row of D′ in the statistics releases' no_clipping variant: far outside the bounds [0, 1].
_OUTSIDE = 100.0


def _patch_mechanisms(name: str, replacement: Callable) -> contextlib.ExitStack:
    """Replace ``name`` in every module of :mod:`pymc_dp.mechanisms` that holds it (each imports its helpers)."""
    package = pymc_dp.mechanisms
    modules = [package] + [
        importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__)
    ]
    stack = contextlib.ExitStack()
    patched = [m for m in modules if name in vars(m)]
    if len(patched) < 2:  # the package re-export and at least one user: else the variant would break nothing
        raise AssertionError(f"no mechanism module uses `{name}`; the broken variant would break nothing")
    for module in patched:
        stack.enter_context(mock.patch.object(module, name, replacement))
    return stack


def _without_clipping() -> contextlib.AbstractContextManager:
    """The mechanism layer's clipping becomes the identity (noise unchanged)."""
    stack = contextlib.ExitStack()
    stack.enter_context(_patch_mechanisms("clip_values", lambda values, bound: np.asarray(values, float)))
    stack.enter_context(_patch_mechanisms("clipped_sum_l2", lambda rows, bound: np.asarray(rows, float).sum(axis=0)))
    stack.enter_context(
        _patch_mechanisms(
            "clipped_sum_l2_linear",
            lambda rows, linear_map, bound: np.asarray(rows, float).sum(axis=0) @ np.asarray(linear_map, float),
        )
    )
    return stack


def _without_bounds_check() -> contextlib.AbstractContextManager:
    """The statistics releases: rows are not checked against (or clamped into) the public bounds."""
    return mock.patch.object(
        Normal, "check_data", lambda self, data, out_of_bounds="clamp": np.asarray(data, dtype=float)
    )


def _without_sampling() -> contextlib.AbstractContextManager:
    """Poisson sampling skipped (every row in every batch), ε still claimed for q."""
    return _patch_mechanisms("poisson_sample", lambda rng, n_rows, rate: np.arange(n_rows, dtype=np.int64))


def _label(scenario: AuditScenario, variant: str) -> str:
    return f"{scenario.name} [broken: {variant}]"


def _noise_halved(real: AuditScenario, halved: AuditScenario) -> AuditScenario:
    """``halved`` releases (noise for τ/2 or 2ε) under ``real``'s name and claim."""
    return dataclasses.replace(halved, name=_label(real, "noise_halved"), claimed_epsilon=real.claimed_epsilon)


def _with_context(real: AuditScenario, variant: str, context) -> AuditScenario:
    return dataclasses.replace(real, name=_label(real, variant), context=context)


def _no_clipping_statistics(make: Callable[..., AuditScenario]) -> AuditScenario:
    """The statistics scenario with D′'s row outside the bounds and the bounds check skipped."""
    real = make()
    outside = make(neighbour_row=_OUTSIDE)
    return dataclasses.replace(outside, name=_label(real, "no_clipping"), context=_without_bounds_check)


def _all_rows_check_table(model, step: float) -> np.ndarray:
    """Per-row ratios (log β: 0 → ``step``) from PyMC's ``model.logp(sum=False)`` compiled as is.

    Its ``check_parameters`` reduces over all rows (a failed check gives −∞ on every row):
    the data layer before issue 12.
    """
    from pymc.pytensorf import compile as pm_compile

    [term] = model.logp(vars=model.observed_RVs, sum=False)
    f = pm_compile(model.value_vars, term)
    values = [np.asarray(f(np.array(v))) for v in (0.0, step)]
    with np.errstate(invalid="ignore"):
        return values[1] - values[0]


def _all_rows_check() -> AuditScenario:
    """The cross-row scenario on rows whose parameter check reduces over all rows."""
    real = cross_row_scenario()
    theta, proposal = np.zeros(1), np.full(1, _CROSS_ROW_STEP)
    models = _identity_poisson_models()

    def make(rng: np.random.Generator) -> Callable[[int], float]:
        tables = [_all_rows_check_table(m, _CROSS_ROW_STEP) for m in models]
        mechanisms = [NoisyLogLikelihoodRatio(_RowTable(t), 1.0, 1.0) for t in tables]
        return lambda dataset: mechanisms[dataset].release(theta, proposal, rng)[0]

    return dataclasses.replace(real, name=_label(real, "all_rows_check"), make_release=make)


#: The broken variants, by "<real scenario>/<variant>".
BROKEN_SCENARIOS: dict[str, Callable[[], AuditScenario]] = {
    "penalty/noise_halved": lambda: _noise_halved(penalty_scenario(), penalty_scenario(noise_multiplier=0.5)),
    "penalty/no_clipping": lambda: _with_context(penalty_scenario(), "no_clipping", _without_clipping),
    "hmc_gradient/noise_halved": lambda: _noise_halved(
        hmc_gradient_scenario(), hmc_gradient_scenario(noise_multiplier=0.5)
    ),
    "hmc_gradient/no_clipping": lambda: _with_context(hmc_gradient_scenario(), "no_clipping", _without_clipping),
    "barker/no_clipping": lambda: _with_context(barker_scenario(), "no_clipping", _without_clipping),
    "dpadvi/noise_halved": lambda: _noise_halved(
        dpadvi_gradient_scenario(), dpadvi_gradient_scenario(noise_multiplier=0.5)
    ),
    "dpadvi/no_clipping": lambda: _with_context(dpadvi_gradient_scenario(), "no_clipping", _without_clipping),
    "dpadvi_poisson/no_sampling": lambda: _with_context(
        dpadvi_gradient_scenario(sampling_rate=0.5), "no_sampling", _without_sampling
    ),
    "dpadvi_poisson/no_clipping": lambda: _with_context(
        dpadvi_gradient_scenario(sampling_rate=0.5), "no_clipping", _without_clipping
    ),
    "laplace_statistics/noise_halved": lambda: _noise_halved(
        laplace_statistics_scenario(), laplace_statistics_scenario(epsilon=2.0)
    ),
    "laplace_statistics/no_clipping": lambda: _no_clipping_statistics(laplace_statistics_scenario),
    "suffstats/noise_halved": lambda: _noise_halved(suffstats_scenario(), suffstats_scenario(noise_multiplier=0.5)),
    "suffstats/no_clipping": lambda: _no_clipping_statistics(suffstats_scenario),
    "owner_ratio/noise_halved": lambda: _noise_halved(
        owner_ratio_scenario(), owner_ratio_scenario(noise_multiplier=0.5)
    ),
    "owner_ratio/no_clipping": lambda: _with_context(owner_ratio_scenario(), "no_clipping", _without_clipping),
    "cross_row/all_rows_check": _all_rows_check,
}

#: Every real scenario followed by its broken variants (the order of the table in docs/audit.md).
ALL_SCENARIOS: dict[str, Callable[[], AuditScenario]] = {
    key: make
    for name in SCENARIOS
    for key, make in [(name, SCENARIOS[name])]
    + [(k, v) for k, v in BROKEN_SCENARIOS.items() if k.split("/")[0] == name]
}
