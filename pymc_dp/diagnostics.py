"""Mixing diagnostics of a DP result, computed from its released draws (post-processing, free).

A DP posterior that is confidently wrong is the worst result we can ship: a chain that never
left its start reports a tight posterior around the start. Every MCMC result of
:func:`pymc_dp.sample` (and of models on released statistics) therefore carries
``dp_diagnostics`` (JSON on the posterior's attributes), computed here from the draws and the
``dp_accepted`` statistic only — both already published, so the diagnostics cost no ε:

- per variable (worst scalar component): rank-normalised split R-hat (max), bulk and tail
  effective sample sizes (min) and the Monte Carlo standard error of the mean relative to
  the posterior SD (max) (Vehtari et al. 2021);
- the acceptance rate of every chain;
- ``usable``: false when any variable has an R-hat or a bulk or tail ESS beyond the thresholds of
  its kind of result (:func:`thresholds`), with the reasons in plain words.

One rule per kind of result, and one verdict shown for each:

- **NUTS (or any sampler) on released statistics** (:data:`RELEASED_STATISTICS_METHOD`): the
  draws are post-processing of a release already paid for, so more of them cost no privacy and
  the usual standard applies, the one PyMC's own convergence check and ArviZ's documentation
  apply: R-hat at most 1.01 and bulk and tail ESS at least 100 per chain (Vehtari et al. 2021,
  §4). PyMC's check and ``dp_diagnostics`` then agree: whenever PyMC says "The rhat statistic
  is larger than 1.01" or "The effective sample size per chain is smaller than 100" (its
  thresholds are the same, on the same rank-normalised split R-hat and bulk ESS), the result is
  flagged too, with the advice that applies (rerun the sampler: it is free).
- **DP chains** (DPPenaltyMH, DPHMC, DPBarkerMH, ...): every iteration spends ε, and the noise
  that ε needs caps the effective sample size near what the planner aims for (100 in all
  chains together, a Monte Carlo error of 0.1 posterior sd) whatever the number of iterations.
  At that ESS, chains that have mixed still show a split R-hat of about √(1 + 2m/ESS) (m
  chains, 2m halves; Vats and Knudson 2021), 1.02–1.04 for 2–4 chains, so PyMC's 1.01 (which
  Vehtari et al. pair with an ESS above 400) would flag nearly every run a DP budget can buy
  for R-hat's own noise. Measured on stationary AR(1) chains at a total ESS of 100 (200 runs
  each): mean R-hat 1.020 with 2 chains and 1.038 with 4 (the formula: 1.020, 1.039); 73 %
  and 96 % of the runs above 1.01, 4.5 % and 23 % above 1.05 (at a total ESS of 200: 42 %
  and 83 % above 1.01, 0 % and 1.5 % above 1.05; ``tests/test_diagnostics.py``). These are
  flagged above R-hat :data:`R_HAT_MAX` = 1.05 or below an ESS of :data:`ESS_MIN` = 100 in
  total, and :func:`pymc_dp.sample` replaces PyMC's convergence
  messages on them by this verdict (:func:`pymc_convergence_check_replaced`; one log line says
  the verdict and the thresholds, or a :class:`PoorMixingWarning` says what to change), so that
  the two rules never print contradicting verdicts on one result.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from pymc_dp.accounting.events import format_epsilon
from pymc_dp.results import group, group_names, posterior_attrs
from pymc_dp.usability import (  # re-exported: their home
    PoorMixingError,
    PoorMixingWarning,
    bounds_clipping_note,
    bounds_clipping_problem,
    clipping_problem,
)

__all__ = [
    "ESS_MIN",
    "ON_POOR_MIXING",
    "RELEASED_ESS_MIN_PER_CHAIN",
    "RELEASED_R_HAT_MAX",
    "RELEASED_STATISTICS_METHOD",
    "R_HAT_MAX",
    "PoorMixingError",
    "PoorMixingWarning",
    "attach_diagnostics",
    "clipping_problem",
    "mixing_diagnostics",
    "poor_mixing_message",
    "pymc_convergence_check_replaced",
    "thresholds",
    "verdict",
]

#: DP chains: a variable whose R-hat exceeds this is flagged (chains disagree: not a posterior yet).
R_HAT_MAX = 1.05
#: DP chains: a variable whose bulk or tail ESS (all chains together) is below this is flagged.
ESS_MIN = 100.0
#: Released statistics: R-hat above this is flagged (Vehtari et al. 2021; PyMC's and ArviZ's threshold).
RELEASED_R_HAT_MAX = 1.01
#: Released statistics: a bulk or tail ESS below this many per chain is flagged (Vehtari et al. 2021; PyMC's).
RELEASED_ESS_MIN_PER_CHAIN = 100.0
#: The ``method`` recorded by :func:`pymc_dp.exponential_family.sample_releases`.
RELEASED_STATISTICS_METHOD = "pm.sample on released statistics"
#: What :func:`pymc_dp.sample` may do with a result whose draws are not a usable posterior.
ON_POOR_MIXING = ("warn", "raise", "ignore")


def thresholds(method: str, chains: int) -> dict[str, Any]:
    """The R-hat and ESS thresholds of a result made by ``method`` with ``chains`` chains (see the module notes).

    Returns ``{"r_hat_max", "ess_min", "rule"}``: ``ess_min`` is for bulk and tail ESS, all
    chains together. Released statistics (``method`` starting with
    :data:`RELEASED_STATISTICS_METHOD`): R-hat ≤ :data:`RELEASED_R_HAT_MAX`, ESS ≥
    :data:`RELEASED_ESS_MIN_PER_CHAIN` per chain, the thresholds of PyMC's own check. Anything
    else (DP chains): R-hat ≤ :data:`R_HAT_MAX`, ESS ≥ :data:`ESS_MIN` in total. Public
    quantities only.
    """
    if str(method).startswith(RELEASED_STATISTICS_METHOD):
        return {
            "r_hat_max": RELEASED_R_HAT_MAX,
            "ess_min": RELEASED_ESS_MIN_PER_CHAIN * max(int(chains), 1),
            "rule": "released statistics: Vehtari et al. (2021), as PyMC's convergence check (R-hat ≤ 1.01, "
            "ESS ≥ 100 per chain); more draws cost no privacy",
        }
    return {
        "r_hat_max": R_HAT_MAX,
        "ess_min": ESS_MIN,
        "rule": "DP chains: ε caps the ESS near 100 whatever the iterations, where chains that mixed show "
        "R-hat ≈ √(1 + 2·chains/ESS) (1.02–1.04 at 2–4 chains); flagged above R-hat 1.05 or below ESS 100 in all",
    }


@functools.cache
def _arviz_stats() -> Any:
    """ArviZ's R-hat, ESS and MCSE: ``arviz_stats`` on the ArviZ 1.x line, ``arviz`` on 0.x.

    On 1.x ``arviz.ess`` (``rhat``, ``mcse``) is ``arviz_stats.ess``; importing ``arviz`` itself
    also imports its plotting and matplotlib (about 28 MiB), which the diagnostics do not use. On
    0.x the statistics are ``arviz``'s own (and PyMC 5 imports ``arviz`` anyway).
    """
    from importlib.metadata import version

    if int(version("arviz").split(".")[0]) >= 1:
        import arviz_stats

        return arviz_stats
    import arviz

    return arviz


def _ess(x: np.ndarray, method: str) -> float:
    az = _arviz_stats()
    if method == "tail":
        try:  # ArviZ 1.x asks for the tail probabilities; 0.x fixes them at 5 % and 95 %
            return float(az.ess(x, method="tail", prob=(0.05, 0.95)))
        except TypeError:
            return float(az.ess(x, method="tail"))
    return float(az.ess(x, method=method))


def _component_diagnostics(x: np.ndarray) -> dict[str, float]:
    """R-hat, bulk/tail ESS and MCSE/SD of one scalar's draws, shape (chains, draws)."""
    az = _arviz_stats()

    chains, draws = x.shape
    sd = float(np.std(x, ddof=1)) if x.size > 1 else 0.0
    if draws < 4 or sd == 0.0 or not np.all(np.isfinite(x)):
        # A constant trace (a chain that never moved) or too few draws: nothing mixed.
        return {"r_hat": math.inf, "ess_bulk": 0.0, "ess_tail": 0.0, "mcse_mean_over_sd": math.inf}
    halves = x if chains > 1 else x[:, : 2 * (draws // 2)].reshape(2, draws // 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ArviZ warns about short chains; the thresholds say it
        r_hat = float(az.rhat(halves))
        ess_bulk, ess_tail = _ess(x, "bulk"), _ess(x, "tail")
        mcse = float(np.ravel(az.mcse(x))[0])
    return {
        "r_hat": r_hat if math.isfinite(r_hat) else math.inf,
        "ess_bulk": ess_bulk if math.isfinite(ess_bulk) else 0.0,
        "ess_tail": ess_tail if math.isfinite(ess_tail) else 0.0,
        "mcse_mean_over_sd": mcse / sd if math.isfinite(mcse) else math.inf,
    }


def mixing_diagnostics(
    draws: dict[str, np.ndarray], accepted: np.ndarray | None = None, method: str = "mcmc"
) -> dict[str, Any]:
    """Diagnostics of released draws; no data are read.

    Parameters
    ----------
    draws : dict of str to ndarray
        Variable name → draws of shape (chains, draws, *shape).
    accepted : ndarray, optional
        The ``dp_accepted`` statistic, shape (chains, draws): per-chain acceptance rates.
    method : str
        What produced the draws (recorded).

    Returns
    -------
    dict
        JSON-able: ``variables`` (name → worst-component ``r_hat``, ``ess_bulk``,
        ``ess_tail``, ``mcse_mean_over_sd``), ``acceptance_rate`` (per chain),
        ``thresholds``, ``usable`` and ``problems`` (plain-words reasons).

    Notes
    -----
    Post-processing of released values: covered by the ε of the run that released them.
    """
    variables: dict[str, dict[str, float]] = {}
    problems: list[str] = []
    chains = next((int(np.shape(v)[0]) for v in draws.values() if np.ndim(v) >= 2), 1)
    limits = thresholds(method, chains)
    r_hat_max, ess_min = limits["r_hat_max"], limits["ess_min"]
    released = str(method).startswith(RELEASED_STATISTICS_METHOD)
    per_chain = f" ({RELEASED_ESS_MIN_PER_CHAIN:.0f} per chain)" if released else ""
    for name, values in draws.items():
        values = np.asarray(values, dtype=float)
        if values.ndim < 2:
            raise ValueError(f"`draws[{name!r}]` must have shape (chains, draws, ...). Found shape {values.shape}.")
        flat = values.reshape(values.shape[0], values.shape[1], -1)
        parts = [_component_diagnostics(flat[:, :, j]) for j in range(flat.shape[2])]
        if not parts:
            continue
        worst = {
            "r_hat": max(p["r_hat"] for p in parts),
            "ess_bulk": min(p["ess_bulk"] for p in parts),
            "ess_tail": min(p["ess_tail"] for p in parts),
            "mcse_mean_over_sd": max(p["mcse_mean_over_sd"] for p in parts),
        }
        variables[name] = worst
        reasons = []
        if worst["r_hat"] > r_hat_max:
            reasons.append(f"R-hat {_fmt(worst['r_hat'], r_hat_max)} > {r_hat_max}")
        if worst["ess_bulk"] < ess_min:
            reasons.append(f"bulk ESS {worst['ess_bulk']:.0f} < {ess_min:.0f}{per_chain}")
        if worst["ess_tail"] < ess_min:
            reasons.append(f"tail ESS {worst['ess_tail']:.0f} < {ess_min:.0f}{per_chain}")
        if reasons:
            problems.append(f"`{name}`: " + ", ".join(reasons))
    acceptance = None
    if accepted is not None:
        accepted = np.asarray(accepted, dtype=float)
        acceptance = [float(a) for a in accepted.reshape(accepted.shape[0], -1).mean(axis=1)]
        if acceptance and max(acceptance) == 0.0:
            problems.append("no proposal was accepted in any chain")
    return {
        "method": method,
        "variables": {k: {m: _json_float(v) for m, v in d.items()} for k, d in variables.items()},
        "acceptance_rate": acceptance,
        "thresholds": limits,
        "usable": not problems,
        "problems": problems,
    }


def _fmt(value: float, limit: float | None = None) -> str:
    """An R-hat as text: 3 decimals, more when 3 would not show that it exceeds ``limit`` (1.0101 > 1.01)."""
    if math.isinf(value):
        return "inf (a constant trace)"
    digits = 3
    while limit is not None and value > limit and round(value, digits) <= limit and digits < 8:
        digits += 1
    return f"{value:.{digits}f}"


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")


def poor_mixing_message(
    diagnostics: dict[str, Any], epsilon: float | None = None, started_from_dp_fit: bool = False
) -> str:
    """What went wrong, in plain words, and what to change (not a DP start the chains already had)."""
    spent = f" at ε = {format_epsilon(epsilon)}" if epsilon is not None else ""  # rounded up, as everywhere
    if str(diagnostics.get("method", "")).startswith(RELEASED_STATISTICS_METHOD):
        if any(bounds_clipping_problem(check) for check in diagnostics.get("bounds_clipping", [])):
            return (
                "The released statistics are not a usable posterior: "
                + "; ".join(diagnostics["problems"])
                + ". Do not report these draws as a posterior: the bias is in the release, so rerunning the sampler "
                "does not remove it. Diagnostics are in posterior.attrs['dp_diagnostics']; the noisy count is in "
                "dp_accountant['clipping_check']."
            )
        return (
            "Sampling the released statistics' likelihood did not produce a usable posterior: "
            + "; ".join(diagnostics["problems"])
            + ". Do not report these draws as a posterior. The release is already paid for: rerunning the sampler on "
            "it (release.sample) costs no privacy, so rerun with more tuning and draws, more chains or a higher "
            "target_accept (pmdp.sample without a step keeps no release object: calling it again releases and pays "
            "again, so to resample for free release by hand with pmdp.release_statistics). Divergent "
            "transitions mean the sampler could not explore part of the posterior; if they persist, the release may "
            "be at odds with the model (bounds the data did not respect, or a covariate model far from the data: "
            "docs/exponential_family.md). Diagnostics are in posterior.attrs['dp_diagnostics']."
        )
    start = "" if started_from_dp_fit else ", or start the chains from a DP initial approximation (init='dpadvi')"
    return (
        f"The DP chains{spent} did not produce a usable posterior: "
        + "; ".join(diagnostics["problems"])
        + ". Do not report these draws as a posterior: their spread can be far narrower than the true "
        "posterior's (a chain that barely moves looks certain). The noise needed for this ε limits how far each "
        "step may move; for the penalty test the effective sample size is about ρ/(b²s²) whatever the number of "
        "iterations (ρ the zCDP budget, b the clip bound, s the posterior SD). What to change: more ε or more "
        "rows (the product N·ε is what matters), fewer parameters, a method that spends the budget once "
        "(pmdp.release_statistics for conjugate families, DPADVI)" + start + ". pmdp.plan(model, epsilon=..., "
        "delta=...) predicts, before any data access, what each method can deliver. Diagnostics are in "
        "posterior.attrs['dp_diagnostics']."
    )


def verdict(diagnostics: dict[str, Any]) -> str:
    """One line: whether the draws are usable, the worst R-hat and ESS against the thresholds, and the rule.

    What :func:`attach_diagnostics` logs for a usable result and :func:`pymc_dp.publish` for
    any result (a flagged :func:`pymc_dp.sample` result gets a :class:`PoorMixingWarning`
    instead). Numbers from released draws only.
    """
    limits = diagnostics.get("thresholds") or {}
    variables = diagnostics.get("variables") or {}
    values = list(variables.values())
    parts = []
    if values:
        r_hat = max(float(v["r_hat"]) for v in values)
        bulk = min(float(v["ess_bulk"]) for v in values)
        tail = min(float(v["ess_tail"]) for v in values)
        parts.append(
            f"largest R-hat {_fmt(r_hat, limits.get('r_hat_max'))} (flagged above {limits.get('r_hat_max')}), "
            f"smallest bulk ESS {bulk:,.0f} "
            f"and tail ESS {tail:,.0f} (flagged below {float(limits.get('ess_min', math.nan)):,.0f})"
        )
    head = "usable" if diagnostics.get("usable") else "NOT a usable posterior: " + "; ".join(diagnostics["problems"])
    rule = f" Rule: {limits['rule']}." if limits.get("rule") else ""
    notes = "".join(f" Note: {note}." for note in diagnostics.get("notes") or [])
    return (
        f"DP result diagnostics (from the released draws, no privacy cost): {head}"
        + (f"; {', '.join(parts)}" if parts else "")
        + "."
        + rule
        + notes
        + " Details: posterior.attrs['dp_diagnostics']."
    )


#: PyMC's convergence messages that :func:`pymc_convergence_check_replaced` holds back on DP chains.
_PYMC_CONVERGENCE_MESSAGES = (
    "The rhat statistic is larger than",
    "The effective sample size per chain is smaller than",
)


class _HoldBackConvergence(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_PYMC_CONVERGENCE_MESSAGES)


@contextlib.contextmanager
def pymc_convergence_check_replaced() -> Iterator[None]:
    """While open, PyMC's R-hat and ESS messages (logger ``pymc.stats.convergence``) are not shown.

    Used by :func:`pymc_dp.sample` around ``pm.sample`` with DP steps, whose result gets the
    verdict of :func:`attach_diagnostics` instead (logged when usable, a
    :class:`PoorMixingWarning` when not): PyMC's thresholds (R-hat 1.01, ESS 100 per chain)
    would flag nearly every run a DP budget can buy for R-hat's own noise, and two verdicts
    on one result would contradict each other (module notes). Divergence, tree-depth and
    chain-count messages are left as they are.
    """
    logger = logging.getLogger("pymc.stats.convergence")
    hold_back = _HoldBackConvergence()
    logger.addFilter(hold_back)
    try:
        yield
    finally:
        logger.removeFilter(hold_back)


def attach_diagnostics(
    idata: Any,
    on_poor_mixing: str = "warn",
    method: str = "mcmc",
    clipping: dict[str, Any] | None = None,
    divergences: int | None = None,
    say: bool = False,
    bounds_clipping: list[dict[str, Any]] | None = None,
    chain_draws: dict[str, np.ndarray] | None = None,
    release_problems: list[str] | None = None,
) -> Any:
    """Compute :func:`mixing_diagnostics` from ``idata``'s posterior, write ``dp_diagnostics``; warn or raise.

    Parameters
    ----------
    idata : InferenceData or DataTree
        A finalised (publishable) result.
    on_poor_mixing : {"warn", "raise", "ignore"}
        What to do when the draws are not a usable posterior: a :class:`PoorMixingWarning`,
        a :class:`PoorMixingError` carrying the result, or nothing (the attribute still says).
    method : str
        Recorded in the diagnostics.
    clipping : dict, optional
        The run's private clip-bound record (``dp_accountant["clip_bound"]``): when it shows
        too many rows above the bound (:func:`clipping_problem`) the result is flagged too.
    divergences : int, optional
        Divergent transitions after tuning of a gradient-based sampler that read only released
        values (NUTS on released statistics, whose own statistics the result does not keep):
        recorded, and any divergence flags the result.
    bounds_clipping : list of dict, optional
        The clipping checks of the releases the draws read (``ReleasedStatistics.clipping_check``):
        recorded, and a release whose public bounds clipped a material share of the rows
        (:func:`pymc_dp.usability.bounds_clipping_problem`) flags the result.
    say : bool, default False
        Log the :func:`verdict` (PyMC's logger, INFO) whatever it is. Otherwise it is logged
        for a usable result unless ``on_poor_mixing="ignore"`` (a flagged one warns or raises).
    chain_draws : dict of array, optional
        The chains' own draws (chains × draws × ...) by variable, where the published posterior
        adds independent noise to them afterwards (a centred run's widening by its anchor's
        noise): the mixing diagnostics are computed from these, since added noise hides chains
        that have not mixed (a higher ESS, an R-hat near 1). Variables not given are read from
        the posterior. Released draws, so free; recorded as ``"computed_on"``.
    release_problems : list of str, optional
        Problems a release's own checks found in its released values (a grouped release's
        covariate shift, :mod:`pymc_dp.exponential_family.group_covariates`): each flags the result.

    Returns
    -------
    The same object.
    """
    check_on_poor_mixing(on_poor_mixing)
    posterior = group(idata, "posterior")
    draws = {str(name): np.asarray(posterior[name].values) for name in posterior.data_vars}
    draws.update(chain_draws or {})
    accepted = None
    if "sample_stats" in group_names(idata):
        stats = group(idata, "sample_stats")
        if "dp_accepted" in stats:
            accepted = np.asarray(stats["dp_accepted"].values)
    diagnostics = mixing_diagnostics(draws, accepted, method)
    if chain_draws:
        diagnostics["computed_on"] = "the chains' draws before the published draws' added noise (the widening)"
    problem = clipping_problem(clipping)
    if clipping:
        last = clipping["releases"][-1]
        keys = (
            "bound",
            "resolvable",
            "share_above_bound_at_reference",
            "share_above_bound_sd",
            "bias_threshold_share",
            "reference",
        )
        diagnostics["clipping"] = {key: last[key] for key in keys if key in last}
    if problem is not None:
        diagnostics["problems"].append(problem)
        diagnostics["usable"] = False
    for check in bounds_clipping or []:
        diagnostics.setdefault("bounds_clipping", []).append(check)
        bounds_problem = bounds_clipping_problem(check)
        if bounds_problem is not None:
            diagnostics["problems"].append(bounds_problem)
            diagnostics["usable"] = False
        note = bounds_clipping_note(check)  # a check too noisy to flag anything says so (public settings only)
        if note is not None:
            diagnostics.setdefault("notes", []).append(note)
    if release_problems:
        diagnostics["problems"].extend(release_problems)
        diagnostics["usable"] = False
    if divergences is not None:
        diagnostics["divergences"] = int(divergences)
        if divergences > 0:
            diagnostics["problems"].append(f"{int(divergences)} divergent transitions after tuning")
            diagnostics["usable"] = False
    attrs = posterior_attrs(idata)
    attrs["dp_diagnostics"] = json.dumps(diagnostics)
    if say or (diagnostics["usable"] and on_poor_mixing != "ignore"):
        logging.getLogger("pymc").info(verdict(diagnostics))
    if not diagnostics["usable"] and on_poor_mixing != "ignore":
        epsilon = attrs.get("dp_epsilon")
        from_fit = attrs.get("dp_start") == "dp_release"  # a DP fit (init="dpadvi") or a PrivateStart
        message = poor_mixing_message(diagnostics, None if epsilon is None else float(epsilon), from_fit)
        if on_poor_mixing == "raise":
            raise PoorMixingError(message, idata)
        warnings.warn(message, PoorMixingWarning, stacklevel=3)
    return idata


def check_on_poor_mixing(value: Any) -> str:
    """``on_poor_mixing`` must be one of :data:`ON_POOR_MIXING`."""
    if not isinstance(value, str) or value not in ON_POOR_MIXING:
        raise ValueError(f"`on_poor_mixing` must be one of {list(ON_POOR_MIXING)}. Found {value!r}.")
    return value
