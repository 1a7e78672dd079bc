"""Release once, then draw: a private Laplace (Bernstein–von Mises) posterior from noisy Newton steps.

:func:`release_once` takes K Newton steps θ ← θ + Â⁻¹ĝ on the log posterior in the model's
unconstrained parameters, each from one release of the clipped per-row score sum
(:class:`pymc_dp.mechanisms.NoisyClippedGradient`) and one of the clipped per-row Hessian sum
(:class:`pymc_dp.mechanisms.hessian.NoisyClippedHessian`) at the current anchor, with the prior's
exact gradient and Hessian added (the prior reads no data). The result is the Gaussian
N(θ_K, Σ) with Σ = Â⁻¹ + Â⁻¹ S Â⁻¹: the Laplace covariance at the last anchor, widened by the
known covariance S of the release noise carried through the last Newton step. Draws from it are
transformed back to the model's variables. Every release is priced before the first row is read.

The clip bounds are public numbers, or ``"auto"`` (the default): then a small priced share of ε
releases noisy histograms of the rows' score norms and Hessian norms at every anchor, and each
step's bound is a multiple of the noisy median (:data:`RELEASE_ONCE_CLIP_MARGIN`).

This module reads no data: the rows are reached only through the mechanisms of
:func:`pymc_dp.mechanisms.model_access`.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from pymc_dp._validation import (
    check_finite_positive,
    check_neighbouring,
    check_positive_int,
    check_unit_interval_open,
)
from pymc_dp.accounting.budget import PrivacyBudget
from pymc_dp.accounting.events import PrivacyEvent
from pymc_dp.data import data_dependent_deterministics, sorted_value_vars
from pymc_dp.mechanisms import mechanism_rng, model_access
from pymc_dp.mechanisms.clip_bound import (
    NoisyScoreNormHistogram,
    clipping_summary,
    quantile_from_histogram,
    quantile_is_resolvable,
)
from pymc_dp.mechanisms.gradient import NoisyClippedGradient
from pymc_dp.mechanisms.hessian import NoisyClippedHessian, clipped_hessian, hessian_norm_histogram
from pymc_dp.results import PrivateStart, note_dropped_deterministics, posterior_attrs
from pymc_dp.route_predictions import (
    RELEASE_ONCE_CLIP_MARGIN,
    RELEASE_ONCE_CLIP_QUANTILE,
    RELEASE_ONCE_CLIP_SHARE,
    release_once_noise_multipliers,
)
from pymc_dp.run import PrivateRun
from pymc_dp.starts import public_initial_point
from pymc_dp.usability import share_is_material

__all__ = [
    "RELEASE_ONCE_CLIP_MARGIN",
    "RELEASE_ONCE_CLIP_QUANTILE",
    "RELEASE_ONCE_CLIP_SHARE",
    "RELEASE_ONCE_MAX_LAST_STEP",
    "RELEASE_ONCE_MAX_NOISE_RATIO",
    "clip_anchors",
    "release_once",
    "release_once_events",
]

#: A result whose release noise widens some coordinate's sd by more than this factor over the Laplace
#: sd is flagged as unusable (dp_diagnostics["usable"] False): the noise, not the data, sets its width.
RELEASE_ONCE_MAX_NOISE_RATIO = 5.0
#: A result whose last Newton step moved some coordinate by more than this many posterior sds is flagged:
#: near the mode a step is of the size of the noise the earlier anchors carried (a few sds at most).
RELEASE_ONCE_MAX_LAST_STEP = 10.0
#: Relative step of the central differences of the prior's gradient (its Hessian; data-free).
_PRIOR_STEP = 6e-6


def _check_share(name: str, value: Any) -> float:
    value = float(value) if isinstance(value, int | float | np.floating | np.integer) else value
    if isinstance(value, bool) or not isinstance(value, float) or not 0.0 < value < 1.0:
        raise ValueError(f"`{name}` must be a number strictly between 0 and 1. Found {value!r}.")
    return value


def clip_anchors(newton_steps: int, grad_clip: Any, hessian_clip: Any) -> tuple[int, int]:
    """(anchors, histograms per anchor) of the ``"auto"`` clip bounds: every anchor, one histogram per bound left
    ``"auto"``; (0, 0) when both bounds are numbers. Public settings only.

    Every anchor, because the rows' scores and Hessians change scale along the path (a scale parameter
    started at 2 and ending near 1 doubles them): measured on a Student-t regression at N = 10⁵, bounds
    released only at the first and the last anchor clipped the middle steps, which then converged to the
    clipped equation's root, and the last step moved 28 posterior sds (flagged in 5 of 5 runs).
    """
    per_anchor = int(grad_clip == "auto") + int(hessian_clip == "auto")
    return (newton_steps, per_anchor) if per_anchor else (0, 0)


def release_once_events(taus: list[tuple[float, float]], tau_clip: float, clip_releases: int) -> list[PrivacyEvent]:
    """The run's events from each Newton step's (τ_g, τ_H) and the ``clip_releases`` histograms' τ (public).

    ``taus`` and ``tau_clip`` are :func:`pymc_dp.route_predictions.release_once_noise_multipliers`'s:
    the μ that (ε, δ) allows (one Gaussian release at τ₁, μ = 1/(2τ₁²)) split between the
    histograms of ``"auto"`` clip bounds (``clip_share`` in equal parts) and the Newton steps (step
    k gets sₖ, the last ``final_share``, the others equal parts, of which ``hessian_share`` goes to
    the Hessian release and the rest to the score release); a release with share s has
    τ = τ₁/√s, so the μ add up to the total. τ is raised by 10⁻⁹ relative, towards privacy.
    """
    events: list[PrivacyEvent] = []
    if clip_releases:
        events += NoisyScoreNormHistogram.events(tau_clip, clip_releases, "release_once clip bounds (norm histograms)")
    # One event per distinct τ (the early steps share theirs).
    early = taus[:-1]
    if early:  # the mechanisms price themselves (tests/test_run.py::test_mechanisms_price_themselves)
        events += NoisyClippedGradient.events(early[0][0], len(early), "release_once score (early steps)")
        events += NoisyClippedHessian.events(early[0][1], len(early), "release_once Hessian (early steps)")
    events += NoisyClippedGradient.events(taus[-1][0], 1, "release_once score (last step)")
    events += NoisyClippedHessian.events(taus[-1][1], 1, "release_once Hessian (last step)")
    return events


def _priced(s: dict[str, Any]) -> tuple[list[PrivacyEvent], list[tuple[float, float]], float]:
    """The run's events, each step's (τ_g, τ_H) and the histograms' τ (0 without), from the checked settings."""
    anchors, per_anchor = clip_anchors(s["newton_steps"], s["grad_clip"], s["hessian_clip"])
    releases = anchors * per_anchor
    taus, tau_clip = release_once_noise_multipliers(
        s["epsilon"], s["delta"], s["newton_steps"], s["hessian_share"], s["final_share"], releases,
        s["clip_epsilon_share"],
    )  # fmt: skip
    return release_once_events(taus, tau_clip, releases), taus, tau_clip


def _check_settings(s: dict[str, Any]) -> dict[str, Any]:
    """Every setting checked (public values only); nothing read or charged."""
    if s["epsilon"] is None:
        raise ValueError("`epsilon` must be given: a positive number, the run's target ε. Found None.")
    s["epsilon"] = check_finite_positive("epsilon", s["epsilon"])
    if s["delta"] is None:
        raise ValueError("`delta` must be given (a number in (0, 1), typically below 1/N). Found None.")
    s["delta"] = check_unit_interval_open("delta", s["delta"])
    s["newton_steps"] = check_positive_int("newton_steps", s["newton_steps"])
    for name in ("grad_clip", "hessian_clip"):
        if isinstance(s[name], str) and s[name] == "auto":
            continue
        if s[name] is None:
            raise ValueError(
                f"`{name}` must be given: a public bound on each row's "
                f"{'score norm' if name == 'grad_clip' else 'Hessian (Frobenius norm)'} in the model's "
                "unconstrained parameters, or 'auto'. Found None."
            )
        if isinstance(s[name], str):
            raise ValueError(f"`{name}` must be a positive number or 'auto'. Found {s[name]!r}.")
        s[name] = check_finite_positive(name, s[name])
    s["clip_epsilon_share"] = _check_share("clip_epsilon_share", s["clip_epsilon_share"])
    s["hessian_share"] = _check_share("hessian_share", s["hessian_share"])
    s["final_share"] = _check_share("final_share", s["final_share"])
    if s["max_step"] is not None:
        s["max_step"] = check_finite_positive("max_step", s["max_step"])
    s["draws"] = check_positive_int("draws", s["draws"])
    s["chains"] = check_positive_int("chains", s["chains"])
    s["neighbouring"] = check_neighbouring("neighbouring", s["neighbouring"])
    if s["budget"] is not None and not isinstance(s["budget"], PrivacyBudget):
        raise TypeError(f"`budget` must be a pymc_dp.PrivacyBudget. Found {type(s['budget']).__name__}.")
    if not isinstance(s["reproducible_noise"], bool):
        raise TypeError(f"`reproducible_noise` must be True or False. Found {type(s['reproducible_noise']).__name__}.")
    seed = s["random_seed"]
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
        raise TypeError(f"`random_seed` must be an int or None. Found {type(seed).__name__}.")
    return s


def _start_point(model: Any, start: Any) -> tuple[dict[str, np.ndarray], tuple[PrivacyEvent, ...], dict[str, str]]:
    """The first anchor on the unconstrained scale, the events it depends on, and its record.

    None: PyMC's default initial point with every ``initval=`` ignored (public). A dict of
    variable values (constrained scale) is the caller's public start; a
    :class:`pymc_dp.results.PrivateStart` (a DP start, e.g. ``DPADVI``'s) uses its first
    point and composes its events into the result.
    """
    from pymc.initial_point import make_initial_point_fn

    if start is None:
        return public_initial_point(model), (), {"source": "public", "note": "PyMC's default initial point"}
    events: tuple[PrivacyEvent, ...] = ()
    record = {"source": "user", "note": "a start given by the caller: not covered by ε, must be public"}
    if isinstance(start, PrivateStart):
        if len(start) == 0:
            raise ValueError("`start` must hold at least one point. Found an empty PrivateStart.")
        events, record = start.events, {"source": "dp", "note": start.source}
        start = start[0]
    if not isinstance(start, dict):
        raise TypeError(
            f"`start` must be None, a dict of variable values or a PrivateStart. Found {type(start).__name__}."
        )
    by_name = {rv.name: rv for rv in model.free_RVs}
    unknown = sorted(set(start) - set(by_name))
    if unknown:
        raise ValueError(f"`start` must name free variables of the model ({sorted(by_name)}). Found {unknown}.")
    overrides = {rv: (np.asarray(start[name]) if name in start else None) for name, rv in by_name.items()}
    point = make_initial_point_fn(model=model, overrides=overrides)(None)
    point = {name: np.asarray(value) for name, value in point.items()}
    if not all(np.all(np.isfinite(v)) for v in point.values()):
        raise ValueError("`start` must give finite values inside each variable's support. Found a value outside.")
    return point, events, record


def _prior_curvature(prior: Any, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The prior's (with the transforms' log-Jacobian) gradient and Hessian at θ (data-free; central differences)."""
    _, grad = prior.prior_logp_and_grad(theta)
    p = theta.size
    hessian = np.empty((p, p))
    for j in range(p):
        h = _PRIOR_STEP * max(1.0, abs(float(theta[j])))
        up, down = theta.copy(), theta.copy()
        up[j] += h
        down[j] -= h
        hessian[:, j] = (prior.prior_logp_and_grad(up)[1] - prior.prior_logp_and_grad(down)[1]) / (2.0 * h)
    return np.asarray(grad, dtype=float), 0.5 * (hessian + hessian.T)


def _precision(negative_hessian: np.ndarray, floor: float) -> tuple[np.ndarray, int]:
    """The nearest matrix with every eigenvalue ≥ ``floor`` (public post-processing), and how many were raised."""
    values, vectors = np.linalg.eigh(0.5 * (negative_hessian + negative_hessian.T))
    floor = max(floor, 1e-10 * max(float(np.max(np.abs(values))), 1e-300))
    raised = int(np.sum(values < floor))
    values = np.maximum(values, floor)
    return (vectors * values) @ vectors.T, raised


def _newton(
    mechanisms: Any, prior: Any, theta: np.ndarray, s: dict[str, Any], taus, rng, clip_bounds: Any = None
) -> dict[str, Any]:
    """K noisy Newton steps from θ; returns the mean, the widened covariance and the steps' public summary.

    ``clip_bounds(k, θ)`` gives step k's (b_g, b_H) (it may release the ``"auto"`` bounds' histograms at
    θ, priced with the run); None: the numbers in ``s``.
    """
    p = theta.size
    steps = []
    for k, (tau_g, tau_h) in enumerate(taus):
        b_g, b_h = (s["grad_clip"], s["hessian_clip"]) if clip_bounds is None else clip_bounds(k, theta)
        score = mechanisms.clipped_gradient(b_g, tau_g, s["neighbouring"])
        curvature = clipped_hessian(mechanisms, b_h, tau_h, s["neighbouring"])
        g_hat = score.release(theta, rng)
        h_hat = curvature.release(theta, rng)
        # Post-processing of the releases and the (data-free) prior from here on.
        g_prior, h_prior = _prior_curvature(prior, theta)
        gradient = g_hat + g_prior
        floor = 2.0 * math.sqrt(p) * curvature.std  # about the spectral norm of the Hessian noise
        precision, raised = _precision(-(h_hat + h_prior), floor)
        step = np.linalg.solve(precision, gradient)
        norm = float(np.linalg.norm(step))
        shortened = s["max_step"] is not None and norm > s["max_step"]
        if shortened:
            step = step * (s["max_step"] / norm)
        steps.append(
            {
                "step_norm": norm,
                "shortened": bool(shortened),
                "eigenvalues_raised": raised,
                "grad_clip": float(b_g),
                "hessian_clip": float(b_h),
            }
        )
        last = k == len(taus) - 1
        if last:
            covariance_inverse = np.linalg.inv(precision)
            _, var_off = curvature.noise_covariance()
            # Noise of the last step: Â⁻¹ξ_g, and −Â⁻¹E v for the Hessian noise E acting on the step v;
            # Cov(E v) = (σ_H²/2)(‖v‖² I + v vᵀ) for the isometric symmetric noise (var_off = σ_H²/2).
            noise = score.std**2 * np.eye(p) + var_off * (float(step @ step) * np.eye(p) + np.outer(step, step))
            widening = covariance_inverse @ noise @ covariance_inverse
            laplace, last_step = covariance_inverse, step
        theta = theta + step
    covariance = laplace + widening
    covariance = 0.5 * (covariance + covariance.T)
    return {"mean": theta, "covariance": covariance, "laplace": laplace, "steps": steps, "last_step": last_step}


class _AutoClipBounds:
    """The ``"auto"`` clip bounds: noisy norm histograms at every anchor, priced with the run.

    At each anchor (public: the start, or post-processing of earlier releases) one
    histogram per ``"auto"`` bound is released (:class:`pymc_dp.mechanisms.clip_bound.NoisyScoreNormHistogram`,
    :class:`pymc_dp.mechanisms.hessian.NoisyHessianNormHistogram`, each at noise multiplier
    ``tau``) and the bound is :data:`RELEASE_ONCE_CLIP_MARGIN` × its noisy median (post-processing);
    that anchor's step uses it. A bound given as a number is used as it is.
    """

    def __init__(self, mechanisms: Any, s: dict[str, Any], tau: float, rng: Any, n_rows: int) -> None:
        self.fixed = {"grad_clip": s["grad_clip"], "hessian_clip": s["hessian_clip"]}
        neighbouring = s["neighbouring"]
        self.histograms = {}
        if s["grad_clip"] == "auto":
            self.histograms["grad_clip"] = mechanisms.score_norm_histogram(tau, neighbouring)
        if s["hessian_clip"] == "auto":
            self.histograms["hessian_clip"] = hessian_norm_histogram(mechanisms, tau, neighbouring)
        self.anchors = set(range(s["newton_steps"]))  # every anchor (clip_anchors)
        self.rng, self.tau = rng, tau
        self.n_rows = n_rows if neighbouring == "substitute" else None  # N where it is public
        self.current = (s["grad_clip"], s["hessian_clip"])
        self.releases: list[dict[str, Any]] = []

    def __call__(self, k: int, theta: np.ndarray) -> tuple[float, float]:
        if k not in self.anchors or not self.histograms:
            return self.current
        bounds, record = dict(self.fixed), {"anchor": k}
        for name, histogram in self.histograms.items():
            noisy = histogram.release_counts(theta, self.rng)
            # Post-processing of the released counts from here on.
            total = self.n_rows if self.n_rows is not None else max(float(noisy.sum()), 1.0)
            median = quantile_from_histogram(noisy, RELEASE_ONCE_CLIP_QUANTILE)
            bounds[name] = RELEASE_ONCE_CLIP_MARGIN * median
            record[name] = {
                "noisy_median": median,
                "resolvable": quantile_is_resolvable(histogram.std, total, RELEASE_ONCE_CLIP_QUANTILE),
                **clipping_summary(noisy, bounds[name], histogram.std, self.n_rows, f"anchor {k}"),
            }
        self.releases.append(record)
        self.current = (bounds["grad_clip"], bounds["hessian_clip"])
        return self.current

    def record(self, share: float) -> dict[str, Any] | None:
        """The public record of the released bounds (None when both were numbers)."""
        if not self.histograms:
            return None
        return {
            "quantile": RELEASE_ONCE_CLIP_QUANTILE,
            "margin": RELEASE_ONCE_CLIP_MARGIN,
            "epsilon_share": share,
            "noise_multiplier": self.tau,
            "histogram_noise_std": next(iter(self.histograms.values())).std,
            "releases": self.releases,
        }


def _clipping_reasons(clip_record: dict[str, Any] | None) -> list[str]:
    """Plain-words problems of the ``"auto"`` bounds at the last anchor (post-processing of the histograms)."""
    if not clip_record:
        return []
    reasons = []
    last = clip_record["releases"][-1]
    for name in ("grad_clip", "hessian_clip"):
        if name not in last:
            continue
        bound = last[name]
        what = "score norms" if name == "grad_clip" else "Hessian norms"
        if not bound["resolvable"]:
            reasons.append(
                f"release_once: the noise of the histogram of the rows' {what} hides their median, so {name}="
                f"{bound['bound']:.3g} may be far off: use more rows or more epsilon, or give {name} as a number"
            )
        elif share_is_material(
            bound["share_above_bound_at_reference"], bound["share_above_bound_sd"], bound["bias_threshold_share"]
        ):
            reasons.append(
                f"release_once: {bound['share_above_bound_at_reference']:.2%} of the rows' {what} lie above {name}="
                f"{bound['bound']:.3g} at the last anchor (more than 1/√N): the clipping bias may be a posterior sd "
                f"or more; give a larger {name} as a number"
            )
    return reasons


def _diagnostics(fit: dict[str, Any], s: dict[str, Any], clip_record: dict[str, Any] | None = None) -> dict[str, Any]:
    """Public summary of the fit (functions of the releases and public settings only)."""
    laplace_sd = np.sqrt(np.diag(fit["laplace"]))
    sd = np.sqrt(np.diag(fit["covariance"]))
    ratio = sd / laplace_sd
    reasons = []
    last = fit["steps"][-1]
    if last["shortened"]:
        reasons.append(
            f"release_once: the last Newton step was shortened to max_step={s['max_step']:g}: the anchors had not "
            "reached the mode; use more newton_steps, a larger max_step or a start nearer the mode"
        )
    last_in_sds = float(np.max(np.abs(fit["last_step"]) / sd))
    if last_in_sds > RELEASE_ONCE_MAX_LAST_STEP:
        reasons.append(
            f"release_once: the last Newton step moved a coordinate {last_in_sds:.3g} posterior sds (more than "
            f"{RELEASE_ONCE_MAX_LAST_STEP:g}): the anchors had not converged; use more newton_steps or a start "
            "nearer the mode"
        )
    if float(np.max(ratio)) > RELEASE_ONCE_MAX_NOISE_RATIO:
        reasons.append(
            f"release_once: the release noise widens a coordinate's sd {float(np.max(ratio)):.3g}× over the "
            f"Laplace sd (more than {RELEASE_ONCE_MAX_NOISE_RATIO:g}×): N, ε or the clip bounds are too small "
            "for this route to say much"
        )
    if last["eigenvalues_raised"]:
        reasons.append(
            f"release_once: {last['eigenvalues_raised']} eigenvalue(s) of the last anchor's curvature were raised to "
            "the noise floor: the posterior is flat or not log-concave there, and the Gaussian approximation is poor"
        )
    reasons += _clipping_reasons(clip_record)
    return {
        "route": "release_once",
        "posterior": "laplace, widened by the release noise",
        "usable": not reasons,
        "reasons": reasons,
        "newton_steps": fit["steps"],
        "noise_sd_ratio": [float(r) for r in ratio],
        "mean_unconstrained": [float(v) for v in fit["mean"]],
        "covariance_unconstrained": [[float(v) for v in row] for row in fit["covariance"]],
    }


def _draw_dataset(model: Any, value_vars: list, fit: dict[str, Any], s: dict[str, Any], point: dict) -> Any:
    """Draws of N(mean, Σ) on θ, transformed to the model's variables, as an InferenceData / DataTree."""
    import arviz as az
    from pymc.util import get_default_varnames

    rng = np.random.default_rng(s["random_seed"])  # data-free: the draws post-process the releases
    total = s["chains"] * s["draws"]
    theta = rng.multivariate_normal(fit["mean"], fit["covariance"], size=total, method="eigh")
    dropped = set(data_dependent_deterministics(model))
    note_dropped_deterministics(sorted(dropped))
    wanted = [
        v for v in get_default_varnames(model.unobserved_value_vars, include_transformed=False) if v.name not in dropped
    ]
    fn = model.compile_fn(wanted, inputs=value_vars, on_unused_input="ignore", point_fn=False)
    sizes = [int(np.asarray(point[v.name]).size) for v in value_vars]
    shapes = [np.asarray(point[v.name]).shape for v in value_vars]
    offsets = np.cumsum([0, *sizes])
    columns: dict[str, list] = {v.name: [] for v in wanted}
    for row in theta:
        args = [row[offsets[i] : offsets[i + 1]].reshape(shapes[i]) for i in range(len(value_vars))]
        for var, value in zip(wanted, fn(*args), strict=True):
            columns[var.name].append(np.asarray(value))
    posterior = {
        name: np.stack(values).reshape(s["chains"], s["draws"], *np.shape(values[0]))
        for name, values in columns.items()
    }
    dims = {name: list(model.named_vars_to_dims[name]) for name in posterior if name in model.named_vars_to_dims}
    used = {d for names in dims.values() for d in names}
    coords = {d: np.asarray(v) for d, v in model.coords.items() if d in used and v is not None}
    if int(az.__version__.split(".")[0]) >= 1:
        return az.from_dict({"posterior": posterior}, dims=dims, coords=coords)
    return az.from_dict(posterior=posterior, dims=dims, coords=coords)


def _with_covariate_curvature(s: dict[str, Any]) -> Any:
    """:func:`pymc_dp.release_once_linear.release_once_linear` with ``release_once``'s settings that apply; a
    setting it would ignore is refused (nothing read or charged)."""
    from pymc_dp.release_once_linear import LINEAR_NEWTON_STEPS, release_once_linear

    defaults = {"grad_clip": "auto", "hessian_clip": "auto", "hessian_share": 0.25, "max_step": 2.0, "start": None}
    changed = sorted(k for k, v in defaults.items() if not (s[k] is v or (isinstance(v, float) and s[k] == v)))
    if changed:
        raise ValueError(
            f"`{changed[0]}` must be left at its default with `x_bounds` (the covariate curvature releases Σ zzᵀ "
            "instead of Hessians, with 'auto' score bounds, from a public start). "
            f"Found {changed[0]}={s[changed[0]]!r}."
        )
    return release_once_linear(
        s["model"], epsilon=s["epsilon"], delta=s["delta"], x_bounds=s["x_bounds"],
        newton_steps=LINEAR_NEWTON_STEPS if s["newton_steps"] is None else s["newton_steps"],
        final_share=s["final_share"], clip_epsilon_share=s["clip_epsilon_share"], draws=s["draws"], chains=s["chains"],
        budget=s["budget"], neighbouring=s["neighbouring"], random_seed=s["random_seed"],
        reproducible_noise=s["reproducible_noise"],
    )  # fmt: skip


def release_once(
    model: Any = None,
    *,
    epsilon: float,
    delta: float,
    grad_clip: float | str = "auto",
    hessian_clip: float | str = "auto",
    clip_epsilon_share: float = RELEASE_ONCE_CLIP_SHARE,
    newton_steps: int | None = None,
    hessian_share: float = 0.25,
    final_share: float = 0.5,
    max_step: float | None = 2.0,
    start: Any = None,
    draws: int = 1000,
    chains: int = 1,
    budget: PrivacyBudget | None = None,
    neighbouring: str = "substitute",
    random_seed: int | None = None,
    reproducible_noise: bool = False,
    x_bounds: Any = None,
) -> Any:
    """A private Laplace posterior from clipped score and Hessian sums released at a few noisy Newton anchors.

    For any model whose rows are independent (the data layer's row checks) and whose
    log-likelihood is smooth in the unconstrained parameters θ. Starting from a public or DP
    anchor θ₀, step k releases ĝₖ = Σᵢ clip₂(∇ℓᵢ(θₖ), b_g) + ξₖ and
    Ĥₖ = Σᵢ clip_F(∇²ℓᵢ(θₖ), b_H) + Eₖ, adds the prior's exact gradient and Hessian (the prior
    reads no data), raises the eigenvalues of Âₖ = −(Ĥₖ + ∇²log p(θₖ)) to at least the Hessian
    noise's spectral scale 2√P σ_H, and moves θₖ₊₁ = θₖ + Âₖ⁻¹(ĝₖ + ∇log p(θₖ)) (shortened to
    ``max_step`` if longer). The posterior returned is N(θ_K, Σ), Σ = Â⁻¹ + Â⁻¹ S Â⁻¹ with Â the
    last anchor's precision and S = σ_g² I + (σ_H²/2)(‖v‖² I + v vᵀ) the covariance of the noise
    the last step v carries (score noise, and the Hessian noise acting on v): the Laplace
    (Bernstein–von Mises) posterior, widened by the known release noise. Its draws are
    transformed back to the model's variables.

    Parameters
    ----------
    model : pm.Model, optional
        Taken from the context if omitted.
    epsilon, delta : float
        The run's (ε, δ): every release together.
    grad_clip : float or "auto", default "auto"
        b_g > 0, public bound on each row's score norm ‖∇θ log p(xᵢ | θ)‖₂ (unconstrained θ).
        ``"auto"``: :data:`RELEASE_ONCE_CLIP_MARGIN` (4) × the noisy median of the rows' score
        norms, released (a noisy histogram on a public grid) at every anchor, paid for by
        ``clip_epsilon_share`` of the run's budget (see Notes).
    hessian_clip : float or "auto", default "auto"
        b_H > 0, public bound on the Frobenius norm of each row's Hessian; ``"auto"`` as for
        ``grad_clip``, from a histogram of the rows' Hessian norms.
    clip_epsilon_share : float, default 0.05
        Share of the run's μ (zCDP) spent on the histograms of ``"auto"`` bounds, in equal parts
        (unused when both bounds are numbers).
    newton_steps : int, optional
        K, the number of anchors (each one score and one Hessian release); None: 4 (also with ``x_bounds``).
    hessian_share : float, default 0.25
        Share of each step's μ that goes to its Hessian release (the rest to its score).
    final_share : float, default 0.5
        Share of the run's μ that goes to the last step (its noise is the posterior's); the
        earlier steps split the rest evenly.
    max_step : float or None, default 2.0
        Longest Newton step (Euclidean, unconstrained scale); None: no limit.
    start : None, dict or PrivateStart
        The first anchor: None for PyMC's default initial point (``initval=`` ignored; public),
        a dict of public values by variable name, or a DP start (:class:`pymc_dp.results.PrivateStart`,
        e.g. ``DPADVI``'s ``dp_start``), whose events are composed into the result.
    draws, chains : int
        Draws per chain and chains of the returned posterior (independent draws, free of ε).
    budget : PrivacyBudget, optional
        Charged with every release before the first row is read.
    neighbouring : {"substitute", "add_remove"}, default "substitute"
        The neighbouring relation of every release (see Notes).
    random_seed : int, optional
        Seeds the draws from the Gaussian (and, with ``reproducible_noise``, the release noise).
    reproducible_noise : bool, default False
        Derive the release noise from ``random_seed`` (testing only; do not publish).
    x_bounds : (lower, upper), optional
        The public box of the covariates of a model whose likelihood is Normal with a mean linear
        in (group intercepts or an intercept, coefficients) and a free σ (recognised from the
        graph). Given, the curvature comes from one release of the covariates' Σ zzᵀ instead of a
        clipped Hessian per anchor, and the model's own priors (a hierarchical prior included) are
        sampled by NUTS against the released Gaussian of the likelihood's parameters:
        :func:`pymc_dp.release_once_linear.release_once_linear`, with ``epsilon``, ``delta``,
        ``newton_steps``, ``final_share``, ``clip_epsilon_share``, ``draws``, ``chains``, ``budget``,
        ``neighbouring``, ``random_seed`` and ``reproducible_noise``; the Hessian's settings, the
        clip bounds and ``start`` must be left at their defaults.

    Returns
    -------
    InferenceData (ArviZ 0.x) or DataTree (ArviZ 1.x)
        The draws, with ``dp_epsilon``, ``dp_delta``, ``dp_accountant`` (``mechanism``
        ``"pymc_dp.release_once"``, the Newton settings, the start) and ``dp_diagnostics``
        (``usable``, its reasons, each step's norm, the noise's widening of each sd, and the
        Gaussian's mean and covariance on the unconstrained scale in the data layer's order of
        the value variables).

    Raises
    ------
    ValueError, TypeError
        For a bad setting (the message names it), a model the data layer refuses, or a run
        over ``epsilon`` or the budget: nothing is read or charged.

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public; default) or add/remove.
    Each score release is the Gaussian mechanism on a sum of rows clipped to L2 norm b_g
    (Δ = 2b_g, or b_g under add/remove) and each Hessian release the Gaussian mechanism on a
    sum of rows clipped to Frobenius norm b_H (Δ = 2b_H or b_H), so the 2K releases compose
    to the μ that (ε, δ) allows (:func:`release_once_events`); the anchors θₖ are public or
    post-processing of earlier releases, and the draws post-process the releases. ε covers
    every release of this call (and a DP start's, composed); the start's own cost was charged
    when it was made. An ``"auto"`` bound adds one histogram release at every anchor (K per
    ``"auto"`` bound): each row counts in one bin, so a
    substitution moves one unit between two bins (L2 sensitivity √2; 1 under add/remove); they
    share ``clip_epsilon_share`` of μ, the Newton releases the rest. How many histograms, and
    their noise, are fixed by the settings before any row is read; the bounds read off them are
    post-processing, so the run's ε does not depend on the data.

    Why a private median rather than a bound from public settings: a row's score and Hessian
    scale with the data's units and the model's parametrisation (a Student-t scale, a Weibull
    shape), which no public setting of a general model fixes; a bound far too large costs noise
    in proportion, one too small biases the root. The median of a histogram on a public
    logarithmic grid is resolvable at a 5 % share from a few hundred rows on
    (:func:`pymc_dp.mechanisms.clip_bound.quantile_is_resolvable`); a high quantile is not.

    Where it is poor: small N (the posterior is then far from Gaussian and the noise, which
    does not shrink with N, dominates), multimodal or heavy-tailed posteriors, variance
    components near zero (a curvature that is not positive definite, raised to the noise
    floor and flagged), and clip bounds below the rows' scores or Hessians at the mode (the
    fit then targets the clipped estimating equation, a bias the widening does not cover).
    See docs/release_once.md.

    References
    ----------
    .. [1] Avella-Medina, M., Bradshaw, C. and Loh, P.-L. (2023). Differentially private
       inference via noisy optimization. The Annals of Statistics 51(5), 2067–2092.
    """
    import pymc as pm

    if x_bounds is not None:
        return _with_covariate_curvature(dict(locals()))
    s = _check_settings({**locals(), "newton_steps": 4 if newton_steps is None else newton_steps})
    model = pm.modelcontext(model)
    value_vars = sorted_value_vars(model, None)
    point, start_events, start_record = _start_point(model, start)
    events, taus, tau_clip = _priced(s)
    prior, mechanisms = model_access(
        model, value_vars, None, point, None, neighbouring=s["neighbouring"], reproducible=reproducible_noise
    )  # builds the row checks; reads no value yet
    theta = np.concatenate([np.asarray(point[v.name], dtype=float).ravel() for v in prior.value_vars])
    run = PrivateRun(
        "pymc_dp.release_once",
        delta=s["delta"],
        neighbouring=s["neighbouring"],
        n_rows=prior.n_rows,
        epsilon=s["epsilon"],
        budget=budget,
    )
    run_epsilon = run.plan(
        events,
        depends_on=start_events,
        advice="use fewer newton_steps or a larger epsilon (the noise is calibrated to epsilon: this is a rounding "
        "or a DP start's cost).",
    )
    seed_source = np.random.default_rng(s["random_seed"])
    with run.releasing(f"release_once: {s['newton_steps']} Newton steps"):
        rng = mechanism_rng(seed_source, reproducible_noise)
        bounds = _AutoClipBounds(mechanisms, s, tau_clip, rng, prior.n_rows)
        fit = _newton(mechanisms, prior, theta, s, taus, rng, clip_bounds=bounds)
    clip_record = bounds.record(s["clip_epsilon_share"])
    diagnostics = _diagnostics(fit, s, clip_record)
    idata = _draw_dataset(model, list(prior.value_vars), fit, s, point)
    record = run.record(
        start=start_record,
        reproducible_noise=reproducible_noise,
        run_epsilon=run_epsilon,
        chains=s["chains"],
        draws=s["draws"],
        settings={
            **{k: s[k] for k in ("newton_steps", "grad_clip", "hessian_clip")},
            "clip_bounds": clip_record,
            **{k: s[k] for k in ("hessian_share", "final_share", "max_step")},
            "noise_multipliers": [list(t) for t in taus],
        },
    )
    run.publish(idata, model, record)
    posterior_attrs(idata)["dp_diagnostics"] = json.dumps(diagnostics)
    if not diagnostics["usable"]:
        import warnings

        from pymc_dp.diagnostics import PoorMixingWarning

        warnings.warn(diagnostics["reasons"][0], PoorMixingWarning, stacklevel=2)
    return idata
