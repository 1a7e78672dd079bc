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
- ``usable``: false when any variable has R-hat above :data:`R_HAT_MAX` or a bulk or tail
  ESS below :data:`ESS_MIN`, with the reasons in plain words.

With one chain R-hat is computed on the chain's two halves (split R-hat); it cannot see a
chain stuck at a point, which is why :func:`pymc_dp.sample` starts every chain at its own
point by default (a draw from a DP initial fit with doubled spread, or from the prior).

References
----------
.. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Bürkner, P.-C. (2021).
   Rank-normalization, folding, and localization: an improved R-hat for assessing convergence
   of MCMC. Bayesian Analysis 16(2), §4 (thresholds R-hat < 1.01 and ESS > 100 per chain
   for final results; we flag at the looser 1.05 and 100 in total).
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np

from pymc_dp.accounting.events import format_epsilon
from pymc_dp.results import group, group_names, posterior_attrs
from pymc_dp.usability import PoorMixingError, PoorMixingWarning, clipping_problem  # re-exported: their home

__all__ = [
    "ESS_MIN",
    "ON_POOR_MIXING",
    "R_HAT_MAX",
    "PoorMixingError",
    "PoorMixingWarning",
    "attach_diagnostics",
    "clipping_problem",
    "mixing_diagnostics",
    "poor_mixing_message",
]

#: A variable whose R-hat exceeds this is flagged (chains disagree: not a posterior yet).
R_HAT_MAX = 1.05
#: A variable whose bulk or tail ESS (all chains together) is below this is flagged.
ESS_MIN = 100.0
#: What :func:`pymc_dp.sample` may do with a result whose draws are not a usable posterior.
ON_POOR_MIXING = ("warn", "raise", "ignore")


def _ess(x: np.ndarray, method: str) -> float:
    import arviz as az

    if method == "tail":
        try:  # ArviZ 1.x asks for the tail probabilities; 0.x fixes them at 5 % and 95 %
            return float(az.ess(x, method="tail", prob=(0.05, 0.95)))
        except TypeError:
            return float(az.ess(x, method="tail"))
    return float(az.ess(x, method=method))


def _component_diagnostics(x: np.ndarray) -> dict[str, float]:
    """R-hat, bulk/tail ESS and MCSE/SD of one scalar's draws, shape (chains, draws)."""
    import arviz as az

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
        if worst["r_hat"] > R_HAT_MAX:
            reasons.append(f"R-hat {_fmt(worst['r_hat'])} > {R_HAT_MAX}")
        if worst["ess_bulk"] < ESS_MIN:
            reasons.append(f"bulk ESS {worst['ess_bulk']:.0f} < {ESS_MIN:.0f}")
        if worst["ess_tail"] < ESS_MIN:
            reasons.append(f"tail ESS {worst['ess_tail']:.0f} < {ESS_MIN:.0f}")
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
        "thresholds": {"r_hat_max": R_HAT_MAX, "ess_min": ESS_MIN},
        "usable": not problems,
        "problems": problems,
    }


def _fmt(value: float) -> str:
    return "inf (a constant trace)" if math.isinf(value) else f"{value:.3g}"


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")


#: The ``method`` recorded by :func:`pymc_dp.exponential_family.sample_releases`.
RELEASED_STATISTICS_METHOD = "pm.sample on released statistics"


def poor_mixing_message(
    diagnostics: dict[str, Any], epsilon: float | None = None, started_from_dp_fit: bool = False
) -> str:
    """What went wrong, in plain words, and what to change (not a DP start the chains already had)."""
    spent = f" at ε = {format_epsilon(epsilon)}" if epsilon is not None else ""  # rounded up, as everywhere
    if str(diagnostics.get("method", "")).startswith(RELEASED_STATISTICS_METHOD):
        return (
            "Sampling the released statistics' likelihood did not produce a usable posterior: "
            + "; ".join(diagnostics["problems"])
            + ". Do not report these draws as a posterior. The release is already paid for: rerunning the sampler "
            "costs no privacy, so rerun with more tuning and draws, more chains or a higher target_accept. Divergent "
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


def attach_diagnostics(
    idata: Any,
    on_poor_mixing: str = "warn",
    method: str = "mcmc",
    clipping: dict[str, Any] | None = None,
    divergences: int | None = None,
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

    Returns
    -------
    The same object.
    """
    check_on_poor_mixing(on_poor_mixing)
    posterior = group(idata, "posterior")
    draws = {str(name): np.asarray(posterior[name].values) for name in posterior.data_vars}
    accepted = None
    if "sample_stats" in group_names(idata):
        stats = group(idata, "sample_stats")
        if "dp_accepted" in stats:
            accepted = np.asarray(stats["dp_accepted"].values)
    diagnostics = mixing_diagnostics(draws, accepted, method)
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
    if divergences is not None:
        diagnostics["divergences"] = int(divergences)
        if divergences > 0:
            diagnostics["problems"].append(f"{int(divergences)} divergent transitions after tuning")
            diagnostics["usable"] = False
    attrs = posterior_attrs(idata)
    attrs["dp_diagnostics"] = json.dumps(diagnostics)
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
