"""Release once for a Gaussian linear likelihood: the curvature from one release of Σ zzᵀ, the priors sampled.

For a model whose likelihood is Normal with a mean linear in (group intercepts or an intercept,
coefficients) and a scalar σ that reads no data (recognised from the graph by
:func:`pymc_dp.regression_graph.regression_parts`), :func:`release_once_linear` releases once
over the parameters the rows touch, ψ = (the group means or the intercept, β, log σ):

1. one release of the covariates' Gram matrix Σ zzᵀ (z = the group's indicator and x, clamped to
   the public box ``x_bounds``; :class:`pymc_dp.mechanisms.covariate_gram.GaussianLinearRows`),
   which is the curvature −Σ zzᵀ/σ² of the likelihood in the mean's parameters at every anchor;
   log σ's curvature at the mode is 2N (public); with it a noisy count of the rows the box clamps
   (the released statistics' clipping check: a material share flags the result, since clamped
   covariates bias the slopes by an amount the posterior's width does not show);
2. noisy Newton steps from clipped score sums in ψ (``"auto"`` bounds from noisy score-norm
   histograms at every anchor, as :func:`pymc_dp.release_once`), the last step's noise carried
   into the Gaussian N(m, C) that approximates the likelihood in ψ;
3. the model's own priors (a hierarchical prior included: ``mu_group``, ``sd_group``, …) sampled by
   NUTS against that Gaussian as the likelihood of ψ: post-processing, no further ε.

A row's score touches only its own group's mean, and the curvature costs one release instead of
one per anchor, so the slopes carry one copy of the noise: on ``diamonds`` (docs/release_once.md)
this is what brings the global slopes from the grouped release's 50 NUTS sds to about one.

This module reads no data: the rows are reached only through the mechanism layer
(:func:`pymc_dp.mechanisms.covariate_gram.linear_rows`).
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive, check_neighbouring, check_positive_int, check_unit_interval_open
from pymc_dp.accounting.budget import PrivacyBudget
from pymc_dp.accounting.events import PrivacyEvent
from pymc_dp.data import check_prior_reads_no_data
from pymc_dp.diagnostics import (
    RELEASED_STATISTICS_METHOD,
    PoorMixingError,
    PoorMixingWarning,
    attach_diagnostics,
    check_on_poor_mixing,
)
from pymc_dp.exponential_family.clipping_check import clipped_share_record
from pymc_dp.mechanisms import mechanism_rng
from pymc_dp.mechanisms.clip_bound import clipping_summary, quantile_from_histogram, quantile_is_resolvable
from pymc_dp.mechanisms.clipped_rows import CLIPPED_ROW_FULL_WEIGHT
from pymc_dp.mechanisms.covariate_gram import GaussianLinearRows, checked_box, linear_rows, linear_rows_count
from pymc_dp.prior import prior_model
from pymc_dp.regression_graph import RegressionParts, regression_parts
from pymc_dp.results import finalize_result, group, group_names, posterior_attrs
from pymc_dp.route_predictions import (  # the route's settings live beside the plan's prediction of it
    CLAMPED_COUNT_FRACTION,
    GRAM_RESOLVED_SDS,
    GRAM_SHARE,
    LINEAR_CLIP_MARGIN,
    LINEAR_NEWTON_STEPS,
    RELEASE_ONCE_CLIP_QUANTILE,
    RELEASE_ONCE_CLIP_SHARE,
    linear_noise_multipliers,
)
from pymc_dp.run import PrivateRun
from pymc_dp.usability import bounds_clipping_note, bounds_clipping_problem, share_is_material

__all__ = [
    "CLAMPED_COUNT_FRACTION",
    "GRAM_RESOLVED_SDS",
    "GRAM_SHARE",
    "LINEAR_CLIP_MARGIN",
    "LINEAR_NEWTON_STEPS",
    "linear_noise_multipliers",
    "release_once_linear",
    "release_once_linear_events",
]

#: The diagnostics' method: NUTS on a release, judged as NUTS on released statistics (more draws cost no privacy).
LINEAR_METHOD = f"{RELEASED_STATISTICS_METHOD} (release_once_linear: a Gaussian of the likelihood's parameters)"
#: A last Newton step longer than this many posterior sds in some coordinate is flagged (release_once's rule).
_MAX_LAST_STEP = 10.0
#: A release whose noise widens some sd more than this over the Laplace sd is flagged (release_once's rule).
_MAX_NOISE_RATIO = 5.0


def release_once_linear_events(
    tau_gram: float, taus: list[float], tau_clip: float, tau_count: float
) -> list[PrivacyEvent]:
    """The run's events: the clamped count, K histograms, one Σ zzᵀ, the early score releases and the last."""
    events = GaussianLinearRows.events(tau_count, 1, "release_once_linear rows clamped by x_bounds (count)")
    events += GaussianLinearRows.events(tau_clip, len(taus), "release_once_linear clip bounds (norm histograms)")
    events += GaussianLinearRows.events(tau_gram, 1, "release_once_linear covariates' Σ zzᵀ")
    if len(taus) > 1:
        events += GaussianLinearRows.events(taus[0], len(taus) - 1, "release_once_linear score (early steps)")
    return events + GaussianLinearRows.events(taus[-1], 1, "release_once_linear score (last step)")


def _linear_parts(model: Any) -> RegressionParts:
    """The model's (grouped) linear regression, or a clear error (the graph only, no data)."""
    from pytensor.graph.traversal import ancestors

    parts = regression_parts(model)
    if parts is None or parts.base != "linear_regression":
        found = "no regression" if parts is None else f"a {parts.family.replace('_', ' ')}"
        raise ValueError(
            "`model` must have a Normal likelihood whose mean is linear in (group intercepts or an intercept, "
            f"coefficients) for release_once's covariate curvature (x_bounds). Found {found}."
        )
    if not any(a in set(model.free_RVs) for a in ancestors([parts.sigma])):
        raise ValueError(
            "`model`'s Normal sigma must be a free variable (a graph of free variables) for release_once's covariate "
            "curvature. Found a constant sigma."
        )
    return parts


def _psi_graph(parts: RegressionParts) -> Any:
    """ψ(θ) = (group means or the intercept, β, log σ) as a graph of the model's free variables."""
    import pytensor.tensor as pt

    pieces = []
    if parts.group_effects is not None:
        pieces.append(parts.group_effects + (0.0 if parts.intercept is None else parts.intercept))
    elif parts.intercept is not None:
        pieces.append(pt.reshape(parts.intercept, (1,)))
    if parts.coefficients is not None:
        pieces.append(parts.coefficients)
    pieces.append(pt.reshape(pt.log(parts.sigma), (1,)))
    return pt.concatenate(pieces)


def _score_bound(rows: GaussianLinearRows, psi, log_sigma, tau_clip, rng, k: int) -> tuple[float, dict[str, Any]]:
    """Step k's clip bound: :data:`LINEAR_CLIP_MARGIN` × the noisy median of the rows' score norms (priced)."""
    noisy = rows.release_score_norm_histogram(psi, log_sigma, tau_clip, rng)
    # Post-processing of the released counts from here on.
    std = rows.histogram_std(tau_clip)
    n_public = rows.n_rows if rows.neighbouring == "substitute" else None
    total = float(n_public) if n_public is not None else max(float(noisy.sum()), 1.0)
    median = quantile_from_histogram(noisy, RELEASE_ONCE_CLIP_QUANTILE)
    bound = LINEAR_CLIP_MARGIN * median
    record = {
        "anchor": k,
        "noisy_median": median,
        "resolvable": quantile_is_resolvable(std, total, RELEASE_ONCE_CLIP_QUANTILE),
        **clipping_summary(noisy, bound, std, n_public, f"anchor {k}"),
    }
    return bound, record


def _clamping_check(noisy: float, sd: float, n_rows: int, box: list[list[float]], tau_count: float) -> dict[str, Any]:
    """The clamped count's record, as a released-statistics clipping check reads it (post-processing of the count)."""
    return {
        "bounds": {"x_bounds": box},
        "full_weight_movement": CLIPPED_ROW_FULL_WEIGHT,
        "mechanism": "discrete gaussian",
        "noise_multiplier": tau_count,
        **clipped_share_record(noisy, sd, n_rows),
    }


def _resolved_gram(gram: np.ndarray, gram_std: float) -> tuple[np.ndarray, int, float]:
    """The released Σ zzᵀ with eigenvalues below :data:`GRAM_RESOLVED_SDS` σ_Z raised there; how many; the smallest."""
    values, vectors = np.linalg.eigh(0.5 * (gram + gram.T))
    floor = GRAM_RESOLVED_SDS * gram_std
    raised = int(np.sum(values < floor))
    return (vectors * np.maximum(values, floor)) @ vectors.T, raised, float(values[0])


def _newton_linear(rows: GaussianLinearRows, s: dict[str, Any], taus, tau_gram, tau_clip, rng) -> dict[str, Any]:
    """One Σ zzᵀ release, then K noisy Newton steps in (ψ, log σ); the Gaussian N(m, C) and the steps' record."""
    n_rows, k_coef = rows.n_rows, rows.n_coefficients
    gram_std = rows.gram_std(tau_gram)
    gram, raised, smallest = _resolved_gram(rows.release_gram(tau_gram, rng), gram_std)
    # Post-processing of the releases from here on (the anchors are public or functions of releases).
    psi, log_sigma = np.zeros(k_coef), math.log(s["start_sigma"])  # the public start
    steps, bounds = [], []
    for k, tau in enumerate(taus):
        bound, record = _score_bound(rows, psi, log_sigma, tau_clip, rng, k)
        bounds.append(record)
        score = rows.release_score(psi, log_sigma, bound, tau, rng)
        score_std = tau * (2.0 if rows.neighbouring == "substitute" else 1.0) * bound
        variance = math.exp(2.0 * log_sigma)
        step_psi = np.linalg.solve(gram, score[:k_coef] * variance)  # (Σzzᵀ/σ²)⁻¹ ĝ_ψ
        # log σ: its maximiser at the new ψ, ½ log(RSS(ψ + v)/(Nσ²)), with RSS(ψ + v)/σ² = ĝ_s + N − σ²ĝ_ψᵀĜ⁻¹ĝ_ψ
        # (Σrᵢ²/σ² = ĝ_s + N and Σrᵢzᵢ/σ² = ĝ_ψ read from the released score, v = σ²Ĝ⁻¹ĝ_ψ), the score noise's mean
        # share σ²σ_g² tr Ĝ⁻¹ added back; near the mode the Newton step at the public curvature 2N. Ratio ≥ 10⁻⁴.
        explained = variance * (
            float(score[:k_coef] @ step_psi) / variance - score_std**2 * np.trace(np.linalg.inv(gram))
        )
        step_sigma = 0.5 * math.log(max(1.0 + (float(score[k_coef]) - explained) / n_rows, 1e-4))
        steps.append({"step_norm": float(np.hypot(np.linalg.norm(step_psi), step_sigma)), "grad_clip": float(bound)})
        if k == len(taus) - 1:
            precision = np.zeros((k_coef + 1, k_coef + 1))
            precision[:k_coef, :k_coef] = gram / variance
            precision[k_coef, k_coef] = 2.0 * n_rows
            laplace = np.linalg.inv(precision)
            # The last step's noise: Â⁻¹ξ_g, and −Â⁻¹(E/σ²)v for the Gram noise E acting on the step v;
            # Cov(E u) = (σ_Z²/2)(‖u‖² I + u uᵀ) for the isometric symmetric noise, u = v/σ².
            carried = score_std**2 * np.eye(k_coef + 1)
            u = step_psi / variance
            carried[:k_coef, :k_coef] += (gram_std**2 / 2.0) * (float(u @ u) * np.eye(k_coef) + np.outer(u, u))
            # log σ's step also reads σ²ĝ_ψᵀĜ⁻¹ĝ_ψ, ĝ_ψ = g + ξ: its noise 2σ²gᵀĜ⁻¹ξ + σ²ξᵀĜ⁻¹ξ has variance
            # 4σ_g²‖v‖² + 2σ⁴σ_g⁴ tr Ĝ⁻² (v = σ²Ĝ⁻¹g, the step), in the score's units.
            inverse_gram = np.linalg.inv(gram)
            carried[k_coef, k_coef] += 4.0 * score_std**2 * float(step_psi @ step_psi) + 2.0 * (
                variance * score_std
            ) ** 4 / variance**2 * float(np.sum(inverse_gram * inverse_gram))
            covariance = laplace + laplace @ carried @ laplace
            last_step = np.concatenate([step_psi, [step_sigma]])
        psi, log_sigma = psi + step_psi, log_sigma + step_sigma
    return {
        "mean": np.concatenate([psi, [log_sigma]]),
        "covariance": 0.5 * (covariance + covariance.T),
        "laplace": laplace,
        "last_step": last_step,
        "steps": steps,
        "clip_bounds": bounds,
        "gram": {"noise_std": gram_std, "eigenvalues_raised": raised, "smallest_eigenvalue": smallest},
    }


def _release_problems(fit: dict[str, Any]) -> list[str]:
    """Plain-words problems of the released Gaussian (post-processing of the releases only)."""
    problems = []
    gram = fit["gram"]
    if gram["eigenvalues_raised"]:
        problems.append(
            f"release_once (covariate curvature): {gram['eigenvalues_raised']} eigenvalue(s) of the released Σ zzᵀ "
            f"lie below {GRAM_RESOLVED_SDS:g} noise sds ({GRAM_RESOLVED_SDS * gram['noise_std']:.3g}): the curvature "
            "along them is not resolved; use more epsilon, more rows or tighter x_bounds"
        )
    sd = np.sqrt(np.diag(fit["covariance"]))
    ratio = float(np.max(sd / np.sqrt(np.diag(fit["laplace"]))))
    if ratio > _MAX_NOISE_RATIO:
        problems.append(
            f"release_once (covariate curvature): the release noise widens an sd {ratio:.3g}× over the Laplace sd "
            f"(more than {_MAX_NOISE_RATIO:g}×): N or ε are too small for this route to say much"
        )
    moved = float(np.max(np.abs(fit["last_step"]) / sd))
    if moved > _MAX_LAST_STEP:
        problems.append(
            f"release_once (covariate curvature): the last Newton step moved a coordinate {moved:.3g} posterior sds "
            f"(more than {_MAX_LAST_STEP:g}): the anchors had not converged; use a start_sigma nearer the residuals'"
        )
    clamped = bounds_clipping_problem(fit["clamping"])  # the released statistics' rule (2 noise sds above 1/√N)
    if clamped:  # the count holds rows with an out-of-range group index too (a model with groups): said so
        problems.append(
            f"release_once (covariate curvature): {clamped} (rows whose group index lies outside the model's groups, "
            "if it has any, count here too: check the group data as well as the bounds)"
        )
    last = fit["clip_bounds"][-1]
    if not last["resolvable"]:
        problems.append("release_once (covariate curvature): the histogram's noise hides the score norms' median")
    elif share_is_material(
        last["share_above_bound_at_reference"], last["share_above_bound_sd"], last["bias_threshold_share"]
    ):
        problems.append(
            f"release_once (covariate curvature): {last['share_above_bound_at_reference']:.2%} of the rows' score "
            "norms lie above the last anchor's bound (more than 1/√N): the clipping bias may be a posterior sd"
        )
    return problems


def _sample_priors(model: Any, parts: RegressionParts, fit: dict[str, Any], s: dict[str, Any]) -> tuple[Any, Any]:
    """NUTS on the model's priors with the released N(m, C) as the likelihood of ψ(θ); (idata, the prior model)."""
    import pymc as pm
    import pytensor.tensor as pt
    from pytensor.graph.replace import graph_replace
    from pytensor.graph.traversal import ancestors
    from pytensor.tensor.random.op import RandomVariable

    prior = prior_model(model, parts.outcome)
    chol = np.linalg.cholesky(np.linalg.inv(fit["covariance"]))
    graph = _psi_graph(parts)
    reached = set(ancestors([graph], blockers=list(model.free_RVs)))  # the free variables ψ reads directly
    with prior:
        psi = graph_replace(graph, {rv: prior[rv.name] for rv in model.free_RVs if rv in reached}, strict=True)
        stale = sorted(
            str(v.name) for v in ancestors([psi])
            if isinstance(getattr(v.owner, "op", None), RandomVariable) and v not in set(prior.free_RVs)
        )  # fmt: skip
        if stale:  # every parameter must be the prior copy's (the graph only)
            raise ValueError(f"The likelihood's parameters must be free variables of the model. Found {stale}.")
        residual = pt.dot(chol.T, fit["mean"] - psi)
        pm.Potential("release_once_likelihood", -0.5 * pt.sum(residual**2))
        idata = pm.sample(
            draws=s["draws"], tune=s["tune"], chains=s["chains"], cores=1, random_seed=s["random_seed"],
            progressbar=False, target_accept=s["target_accept"], compute_convergence_checks=False,
        )  # fmt: skip
    return idata, prior


def _check_settings(s: dict[str, Any]) -> dict[str, Any]:
    """Every setting checked (public values only); nothing read or charged."""
    for name in ("epsilon", "delta"):
        if s[name] is None:
            raise ValueError(f"`{name}` must be given. Found None.")
    s["epsilon"] = check_finite_positive("epsilon", s["epsilon"])
    s["delta"] = check_unit_interval_open("delta", s["delta"])
    s["newton_steps"] = check_positive_int("newton_steps", s["newton_steps"])
    for name in ("gram_share", "final_share", "clip_epsilon_share"):
        value = s[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < value < 1.0:
            raise ValueError(f"`{name}` must be a number strictly between 0 and 1. Found {value!r}.")
    if s["gram_share"] + s["clip_epsilon_share"] >= 1.0:
        raise ValueError(
            "`gram_share` + `clip_epsilon_share` must be below 1 (the score releases need the rest). Found "
            f"{s['gram_share'] + s['clip_epsilon_share']:g}."
        )
    s["start_sigma"] = check_finite_positive("start_sigma", s["start_sigma"])
    for name in ("draws", "tune", "chains"):
        s[name] = check_positive_int(name, s[name])
    s["target_accept"] = check_unit_interval_open("target_accept", s["target_accept"])
    s["neighbouring"] = check_neighbouring("neighbouring", s["neighbouring"])
    if s["neighbouring"] != "substitute":
        raise ValueError(
            "`neighbouring` must be 'substitute' for release_once's covariate curvature: its steps and its Gaussian "
            "use N (log σ's curvature 2N), which is public only under substitution. Found 'add_remove'."
        )
    check_on_poor_mixing(s["on_poor_mixing"])
    if s["budget"] is not None and not isinstance(s["budget"], PrivacyBudget):
        raise TypeError(f"`budget` must be a pymc_dp.PrivacyBudget. Found {type(s['budget']).__name__}.")
    seed = s["random_seed"]
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
        raise TypeError(f"`random_seed` must be an int or None. Found {type(seed).__name__}.")
    if not isinstance(s["reproducible_noise"], bool):
        raise TypeError(f"`reproducible_noise` must be True or False. Found {type(s['reproducible_noise']).__name__}.")
    return s


def _release_record(fit: dict[str, Any]) -> dict[str, Any]:
    """The released Gaussian and its checks (functions of the releases only), as recorded in ``dp_diagnostics``."""
    sd = np.sqrt(np.diag(fit["covariance"]))
    return {
        "route": "release_once (covariate curvature)",
        "problems": _release_problems(fit),
        "gram": fit["gram"],
        "clamping": fit["clamping"],
        "notes": [note] if (note := bounds_clipping_note(fit["clamping"])) else [],
        "newton_steps": fit["steps"],
        "clip_bounds": fit["clip_bounds"],
        "noise_sd_ratio": [float(r) for r in sd / np.sqrt(np.diag(fit["laplace"]))],
        "mean_psi": [float(v) for v in fit["mean"]],
        "covariance_psi": [[float(v) for v in row] for row in fit["covariance"]],
    }


def _say_if_unusable(idata: Any, diagnostics: dict[str, Any], on_poor_mixing: str) -> None:
    """A :class:`PoorMixingWarning` (or :class:`PoorMixingError` carrying the result) when the result is not usable."""
    if diagnostics["usable"] or on_poor_mixing == "ignore":
        return
    message = (
        "release_once (covariate curvature) did not produce a usable posterior: "
        + "; ".join(diagnostics["problems"])
        + ". Do not report these draws as a posterior. A problem of the release (Σ zzᵀ unresolved, noise, clipping, "
        "an unconverged step) needs more ε or more rows, and rows outside x_bounds need wider public bounds; "
        "NUTS's own (R-hat, ESS, divergences) need more draws or "
        "tuning, but calling again releases and pays again (the released Gaussian is in "
        "dp_diagnostics['release']). Diagnostics are in posterior.attrs['dp_diagnostics']."
    )
    if on_poor_mixing == "raise":
        raise PoorMixingError(message, idata)
    warnings.warn(message, PoorMixingWarning, stacklevel=4)


def release_once_linear(
    model: Any = None,
    *,
    epsilon: float,
    delta: float,
    x_bounds: Any,
    newton_steps: int = LINEAR_NEWTON_STEPS,
    gram_share: float = GRAM_SHARE,
    final_share: float = 0.5,
    clip_epsilon_share: float = RELEASE_ONCE_CLIP_SHARE,
    start_sigma: float = 1.0,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 2,
    target_accept: float = 0.9,
    budget: PrivacyBudget | None = None,
    neighbouring: str = "substitute",
    on_poor_mixing: str = "warn",
    random_seed: int | None = None,
    reproducible_noise: bool = False,
) -> Any:
    """Release once over a Gaussian linear likelihood's parameters, with its curvature from one noisy Σ zzᵀ; then
    NUTS on the model's own priors (hierarchical ones included) against the released Gaussian.

    The likelihood yᵢ ~ N(zᵢᵀψ + …, σ²) is recognised from the graph
    (:func:`pymc_dp.regression_graph.regression_parts`: a ``"linear_regression"`` or
    ``"grouped_linear_regression"`` with a free σ); ψ = (group means — the group effects plus any
    scalar intercept — or the intercept, β) and log σ. Releases (all priced before a row is read):
    the weighted number of rows whose covariates the box clamps (:data:`CLAMPED_COUNT_FRACTION` of
    ``gram_share``; flagged as the released statistics' clipping check flags, by
    :func:`pymc_dp.usability.bounds_clipping_problem`), Σ zzᵀ once (the rest of ``gram_share``), and
    at each of K anchors a noisy histogram of the rows' score norms (the clip bound:
    :data:`LINEAR_CLIP_MARGIN` (6) × its noisy median) and the clipped score sum.
    Newton steps use Σ̂zzᵀ/σ² as the curvature in ψ (exact for this likelihood, up to the release's
    noise); log σ moves to its maximiser at the new ψ, ½ log(RSS/(Nσ²)), with RSS/σ² = ĝ_logσ + N −
    σ²ĝ_ψᵀĜ⁻¹ĝ_ψ read from the released score (near the mode the Newton step at the public
    curvature 2N). The
    Gaussian N(m, C), C = Â⁻¹ + Â⁻¹SÂ⁻¹ with Â = blockdiag(Σ̂zzᵀ/σ², 2N) at the last anchor and S
    the covariance of the last step's noise (score noise, and the Gram noise acting on the step),
    approximates the likelihood of ψ; NUTS then samples the model's priors with log N(m | ψ(θ), C)
    added (post-processing).

    Parameters
    ----------
    model : pm.Model, optional
        From the context if omitted.
    epsilon, delta : float
        The run's (ε, δ): every release together.
    x_bounds : (lower, upper)
        The public box of the covariates (numbers, or arrays of one entry per column; checked, and
        named in the error, before anything is charged, on a model without covariates too). Rows
        outside it are clamped into it by the mechanism (never refused); their noisy weighted count
        is released, and a material share (above 1/√N by 2 noise sds) flags the result: clamped
        covariates bias the slopes (x ~ N(0, 1) in (−1, 1), N = 20,000, ε = 4: slope 0.66 against
        OLS 0.50, sd 0.010, flagged with 29 % ± 0.06 % of the rows clamped).
    newton_steps : int, default 4
        K, the anchors (one histogram and one score release each).
    gram_share : float, default 0.3
        Share of the run's μ spent on Σ zzᵀ (:data:`GRAM_SHARE`) and the clamped count (1/30 of it).
    final_share : float, default 0.5
        Share of the score releases' μ that goes to the last step (the posterior's noise).
    clip_epsilon_share : float, default 0.05
        Share of the run's μ spent on the score-norm histograms, in equal parts.
    start_sigma : float, default 1.0
        The first anchor's σ (public; ψ starts at 0). Near the residuals' scale saves anchors.
    draws, tune, chains, target_accept
        NUTS's settings on the priors (free of ε).
    budget : PrivacyBudget, optional
        Charged with every release before the first row is read.
    neighbouring : {"substitute"}, default "substitute"
        The relation of every release (see Notes); add/remove is refused (N, private there, enters
        the steps and the Gaussian).
    on_poor_mixing : {"warn", "raise", "ignore"}, default "warn"
        What a flagged result does (a release problem or NUTS's own diagnostics).
    random_seed : int, optional
        Seeds NUTS (and, with ``reproducible_noise``, the release noise).
    reproducible_noise : bool, default False
        Derive the release noise from ``random_seed`` (testing only; do not publish).

    Returns
    -------
    InferenceData (ArviZ 0.x) or DataTree (ArviZ 1.x)
        NUTS's draws of the model's free variables, with ``dp_epsilon``, ``dp_delta``,
        ``dp_accountant`` (``pymc_dp.release_once_linear``) and ``dp_diagnostics`` (the draws'
        mixing diagnostics, and under ``"release"`` the released Gaussian in ψ, its problems, the
        Gram release's smallest eigenvalue against its noise sd and the clamped count's check,
        ``"clamping"``).

    Raises
    ------
    ValueError, TypeError
        For a bad setting (named), a model that is not a Gaussian linear regression with a free
        σ, or a run over ``epsilon`` or the budget: nothing is read or charged.

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public), the only one accepted: N enters
    the steps and the Gaussian (log σ's curvature 2N). One row moves only its own terms: Σ zzᵀ by
    aaᵀ − bbᵀ, of Frobenius norm at most √2 r² with r² = ``1 + Σⱼ max(lowerⱼ², upperⱼ²)`` on the
    box (the mechanism also prices add/remove, r²); its clipped score by 2b;
    one histogram count between two bins (√2); the weighted clamped count by at most 1 (each row
    adds a weight in [0, 1]; discrete Gaussian noise). Each is a Gaussian mechanism with Δ/σ = 1/τ
    (:mod:`pymc_dp.mechanisms.covariate_gram`), and the 2K + 2 releases compose to the μ that
    (ε, δ) allows (:func:`linear_noise_multipliers`). The anchors, the Gaussian and NUTS's draws
    are post-processing. ε covers every release of this call. Where it is poor: a direction of
    Σ zzᵀ with little spread (a covariate that varies little within groups) lies under the Gram
    noise at small N·ε (flagged: :data:`GRAM_RESOLVED_SDS`); variance components are sampled
    exactly from the prior, not approximated, but the likelihood in ψ is a Gaussian.

    References
    ----------
    .. [1] Avella-Medina, M., Bradshaw, C. and Loh, P.-L. (2023). Differentially private
       inference via noisy optimization. The Annals of Statistics 51(5), 2067–2092.
    .. [2] Sheffet, O. (2017). Differentially private ordinary least squares. ICML.
    """
    import pymc as pm

    s = _check_settings(dict(locals()))
    model = pm.modelcontext(model)
    parts = _linear_parts(model)
    n_features = 0 if parts.matrix is None else int(parts.matrix.type.shape[1] or parts.matrix.shape[1].eval())
    box = [side.tolist() for side in checked_box(x_bounds, n_features)]  # public, checked before any charge
    tau_gram, taus, tau_clip, tau_count = linear_noise_multipliers(
        s["epsilon"], s["delta"], s["newton_steps"], s["gram_share"], s["final_share"], s["clip_epsilon_share"]
    )
    n_rows = linear_rows_count(model, s["neighbouring"])
    check_prior_reads_no_data(model, n_rows)  # the priors and potentials enter NUTS exactly: none may read data
    run = PrivateRun(
        "pymc_dp.release_once_linear", delta=s["delta"], neighbouring=s["neighbouring"], n_rows=n_rows,
        epsilon=s["epsilon"], budget=budget,
    )  # fmt: skip
    events = release_once_linear_events(tau_gram, taus, tau_clip, tau_count)
    run_epsilon = run.plan(events, advice="use a larger epsilon.")
    with run.releasing(f"release_once_linear: Σ zzᵀ and {s['newton_steps']} Newton steps"):
        rng = mechanism_rng(np.random.default_rng(s["random_seed"]), reproducible_noise)
        rows = linear_rows(model, parts, x_bounds, s["neighbouring"])
        clamped = rows.release_clamped_count(tau_count, rng)
        fit = _newton_linear(rows, s, taus, tau_gram, tau_clip, rng)
        del rows
    fit["clamping"] = _clamping_check(*clamped, n_rows, box, tau_count)
    release = _release_record(fit)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="(overflow|invalid value) encountered", category=RuntimeWarning)
        idata, prior = _sample_priors(model, parts, fit, s)
    stats = group(idata, "sample_stats") if "sample_stats" in group_names(idata) else {}
    divergences = int(np.asarray(stats["diverging"].values).sum()) if "diverging" in stats else 0
    settings = {k: s[k] for k in ("newton_steps", "gram_share", "final_share", "clip_epsilon_share", "start_sigma")}
    record = run.record(
        start={"source": "public", "note": "ψ = 0 and σ = start_sigma"},
        reproducible_noise=reproducible_noise, run_epsilon=run_epsilon, chains=s["chains"], draws=s["draws"],
        settings={**settings, "x_bounds": box,
                  "noise_multipliers": {"gram": tau_gram, "scores": taus, "histograms": tau_clip,
                                      "clamped_count": tau_count}},
    )  # fmt: skip
    finalize_result(idata, record.to_dict(), prior, foreign_statistics_ok=True)  # NUTS read only the release
    attach_diagnostics(
        idata, "ignore", LINEAR_METHOD, divergences=divergences, release_problems=release["problems"]
    )  # said below, in this route's words
    diagnostics = {**json.loads(posterior_attrs(idata)["dp_diagnostics"]), "release": release}
    posterior_attrs(idata)["dp_diagnostics"] = json.dumps(diagnostics)
    _say_if_unusable(idata, diagnostics, s["on_poor_mixing"])
    return idata
