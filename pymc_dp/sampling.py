"""Running DP samplers: planning, budget checks and the privacy record of a run."""

from __future__ import annotations

import inspect
import json
import logging
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pymc as pm
from pymc.model import modelcontext
from pymc.step_methods.compound import CompoundStep

from pymc_dp._errors import withholds_chains
from pymc_dp._validation import (
    check_finite_positive,
    check_nonnegative_int,
    check_positive_int,
    check_unit_interval_open,
    model_from_context,
)
from pymc_dp.accounting.barker import subsampled_barker_max_iterations
from pymc_dp.accounting.budget import PrivacyBudget
from pymc_dp.accounting.calibrate import CALIBRATION_MARGIN, calibrate_releasers, poisson_gaussian_noise_multiplier
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent, PrivacySpent, compose_epsilon, event_from_dict
from pymc_dp.accounting.gaussian import gaussian_epsilon, gaussian_mu_for_target
from pymc_dp.data import _row_structure, data_dependent_deterministics
from pymc_dp.diagnostics import PoorMixingError, PoorMixingWarning, attach_diagnostics, check_on_poor_mixing
from pymc_dp.jax_backend import attach_backend, backend_record, check_backend
from pymc_dp.mechanisms.clip_bound import (
    NoisyScoreNormHistogram,
    clipping_summary,
    cumulative_noise_rows,
    histogram_sensitivity,
    quantile_is_resolvable,
)
from pymc_dp.planning import default_dpadvi_sampling_rate
from pymc_dp.planning import plan as plan_run
from pymc_dp.results import (
    PrivateStart,
    check_cumulative_statistic,
    check_publishable,
    group,
    group_names,
    posterior_attrs,
    strip_private_groups,
    write_privacy_attrs,
)
from pymc_dp.run import PrivateRun
from pymc_dp.starts import (
    check_init,
    prior_starts,
    public_initial_point,
    user_initval_record,
    user_initvals,
    warn_user_initvals,
)
from pymc_dp.step_methods.barker import DPBarkerMH, recorded_barker_releases
from pymc_dp.step_methods.base import DPStep, ProgressAccounting
from pymc_dp.step_methods.hmc import DPHMC
from pymc_dp.step_methods.penalty import DPPenaltyMH
from pymc_dp.variational.dpadvi import DPADVI

__all__ = ["PrivateStart", "privacy_spent", "sample", "strip_private_groups", "write_privacy_attrs"]

#: ``pm.sample`` keywords that would release non-private values or bypass the DP steps.
_REFUSED_KWARGS = {
    "nuts_sampler": "pymc_dp runs PyMC's own sampler loop; external NUTS samplers do not use the DP steps",
    "nuts_sampler_kwargs": "pymc_dp runs PyMC's own sampler loop; external NUTS samplers do not use the DP steps",
    "trace": "trace backends (ZarrTrace, McBackend) store the raw data groups in their own store",
}


def _flatten_steps(step: Any) -> list[Any]:
    if isinstance(step, CompoundStep):
        return [s for sub in step.methods for s in _flatten_steps(sub)]
    if isinstance(step, list | tuple):
        return [s for sub in step for s in _flatten_steps(sub)]
    return [step]


def _resolve_init(
    init: str,
    steps: list,
    model: Any,
    epsilon: float | None,
    neighbouring: str,
    initvals: Any,
    on_cluster: bool = False,
) -> tuple[str, str | None]:
    """What ``init="auto"`` means for this run (public settings only), and why.

    ``"dpadvi"`` when a DP initial fit can be planned and priced here: a target ``epsilon``,
    substitute neighbours (the fit's sampling rate comes from N), every step a DPPenaltyMH or
    DPHMC whose noise this call calibrates, and only continuous free variables (what DPADVI
    fits), and no Dask backend (whose rows the fit would read in this process). ``"prior"``
    otherwise. Other values pass through with no reason recorded.
    """
    if init != "auto":
        return init, None
    if initvals is not None:
        return "prior", None  # the caller's starts win; nothing to choose
    continuous = all(str(v.dtype).startswith("float") for v in model.value_vars)
    calibrated = all(isinstance(s, DPPenaltyMH | DPHMC) and s.needs_calibration for s in steps)
    if epsilon is not None and neighbouring == "substitute" and calibrated and continuous and not on_cluster:
        return "dpadvi", "auto: a DPADVI fit on a share of ε (target ε, substitute neighbours, DPPenaltyMH/DPHMC)"
    why = (
        "no target epsilon"
        if epsilon is None
        else "add/remove neighbours (the fit's sampling rate would read the private N)"
        if neighbouring != "substitute"
        else "a step other than DPPenaltyMH/DPHMC, or noise set by hand"
        if not calibrated
        else "discrete free variables (DPADVI fits continuous ones)"
        if not continuous
        else "a Dask backend (the fit would read the rows in this process)"
    )
    return "prior", f"auto: prior draws, as init='dpadvi' does not apply ({why})"


def _start_provenance(
    initvals: Any, init: str, dp_init: DPADVIStart | None = None, model: Any = None
) -> tuple[dict[str, Any], tuple[PrivacyEvent, ...]]:
    """Where the chains start, and the events charged earlier that the start depends on.

    A DPADVI start planned in this call (``dp_init``) is charged with the run: its events
    are not among the earlier ones. A start that reads the model's own ``initval=`` settings
    (``init="model"``, or a DPADVI fit, which starts at the model's initial point) is recorded
    as given by the caller and warned about (:class:`pymc_dp.starts.UserInitvalWarning`):
    nothing tells an ``initval`` typed in from one computed from the data.
    """
    from_model = user_initvals(model) if model is not None and not isinstance(initvals, PrivateStart) else []
    if dp_init is not None:
        if from_model:
            warn_user_initvals(from_model, "The DPADVI fit that init='dpadvi' plans")
            note = user_initval_record(from_model)["note"]
            return {
                "source": "user",
                "note": f"a DPADVI fit started at the model's {note}",
                "description": dp_init.description,
            }, ()
        return {"source": "dp_release", "description": dp_init.description}, ()
    if initvals is None and init == "prior":
        return {"source": "prior", "note": "one draw from the prior per chain (data-free, over-dispersed)"}, ()
    if initvals is None:
        if from_model:
            warn_user_initvals(from_model, "init='model'")
            return user_initval_record(from_model), ()
        return {"source": "model", "note": "the model's initial point, the same for every chain (data-free)"}, ()
    if isinstance(initvals, PrivateStart):
        return {"source": "dp_release", "description": initvals.source}, initvals.events
    return {
        "source": "user",
        "note": "initvals given by the caller: not covered by ε, so they must not be computed from the data",
    }, ()


@dataclass(frozen=True)
class DPADVIStart:
    """A DPADVI fit planned by ``pmdp.sample(init="dpadvi")``, run when the sample is charged.

    ``events`` are priced from public settings before any data access; :meth:`starts` fits
    and draws the chains' starts (inside the run's charge).
    """

    fit: DPADVI
    iterations: int
    events: tuple[PrivacyEvent, ...]
    settings: dict[str, Any]
    inflate: float = 2.0

    @property
    def description(self) -> str:
        return (
            f"DPADVI ({self.iterations} iterations, sampling rate {self.settings['sampling_rate']:g}), starts drawn "
            f"with {self.inflate:g}× its standard deviations"
        )

    def starts(
        self, chains: int, rng: Any, grad_clip: float | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
        """Fit (inside the run's charge), record the fit's diagnostics and draw one widened start per chain.

        Returns the starts and the fit's mean (value-variable name → unconstrained value), a
        released point. ``grad_clip`` replaces the planned clip bound (a private bound
        released in the same run); the events do not depend on it.

        The starts are drawn with q's standard deviations multiplied by ``inflate`` and by
        √(1 + e² + j²), e the fit's expected mean error and j its iterate jitter (both in q's
        sds; :meth:`pymc_dp.variational.dpadvi.DPMeanField.optimisation_diagnostics`), so that
        a fit off by several sds does not put every chain on the same wrong side.
        """
        if grad_clip is not None:
            self.fit.grad_clip = float(grad_clip)
            self.settings["grad_clip"] = float(grad_clip)
        approx = self.fit.fit(self.iterations, progressbar=False)
        diagnostics = approx.optimisation_diagnostics()
        self.settings["fit_diagnostics"] = diagnostics
        widen = math.sqrt(
            1.0 + (diagnostics["expected_mean_error_sd"] or 0.0) ** 2 + diagnostics["optimisation_sd_ratio_max"] ** 2
        )
        starts = list(approx.initial_values(chains, random_seed=rng, inflate=self.inflate * widen))
        return starts, approx.unconstrained_mean_point()


def dpadvi_start_settings(n_rows: int, clip: float) -> dict[str, Any]:
    """The DPADVI fit ``init="dpadvi"`` plans from public N and the steps' clip bound.

    A mean-field fit of 1,000 Adam steps (learning rate 0.05) on Poisson batches of about
    1,000 rows (q = min(1, 1000/N)), clipping each row's gradient at the steps' own bound
    (``llr_clip`` bounds the same per-row score norm). Only public quantities enter.
    """
    return {
        "sampling_rate": default_dpadvi_sampling_rate(n_rows),
        "grad_clip": float(clip),
        "approximation": "meanfield",
        "optimizer": "adam",
        "learning_rate": 0.05,
        "iterations": 1000,
    }


def _dpadvi_start(
    steps: list[DPStep],
    model: Any,
    n_rows: int,
    neighbouring: str,
    epsilon: float | None,
    delta: float,
    share: float,
    kwargs: dict[str, Any],
) -> DPADVIStart:
    """Plan (not run) the DPADVI fit of ``init="dpadvi"``: its noise from ``share`` of ``epsilon``."""
    share = check_finite_positive("init_epsilon_share", share)
    if share >= 1:
        raise ValueError(f"`init_epsilon_share` must be in (0, 1). Found {share!r}.")
    if epsilon is None:
        raise ValueError("`epsilon` must be given with init='dpadvi' (it is split between the fit and the chains).")
    clips = [getattr(s, "grad_clip", None) or getattr(s, "llr_clip", None) for s in steps]
    # An "auto" bound is released in the run, before the fit: 1.0 stands in for it until then.
    clips = [1.0 if clip == "auto" else clip for clip in clips]
    if not all(isinstance(s, DPPenaltyMH | DPHMC) for s in steps) or None in clips:
        names = sorted({type(s).__name__ for s in steps})
        raise ValueError(
            f"init='dpadvi' needs steps that clip per-row scores (DPPenaltyMH, DPHMC). Found {names}; use "
            "init='prior' or a PrivateStart from your own DPADVI fit (approx.initial_values)."
        )
    if neighbouring != "substitute":
        raise ValueError(
            "init='dpadvi' plans its sampling rate from N, which is private under add/remove neighbours. Found "
            "neighbouring='add_remove'; use init='prior' or a PrivateStart from a DPADVI fit with public settings."
        )
    settings = dpadvi_start_settings(n_rows, max(clips))
    iterations = settings.pop("iterations")
    sigma = poisson_gaussian_noise_multiplier(
        share * epsilon * (1.0 - CALIBRATION_MARGIN), delta, settings["sampling_rate"], iterations, neighbouring
    )
    seed = _start_seed(kwargs.get("random_seed")).spawn(1)[0].integers(2**32)  # apart from the starts' stream
    reproducible = any(s.reproducible_noise for s in steps)
    fit = DPADVI(
        delta=delta,
        noise_multiplier=sigma,
        neighbouring=neighbouring,
        reproducible_noise=reproducible,
        random_seed=int(seed),
        model=model,
        **settings,
    )
    fit.prepare(model)  # the model checks DPADVI adds (continuous variables, subset path): before any charge
    events = tuple(fit.privacy_events(iterations))
    settings.update(iterations=iterations, noise_multiplier=sigma, epsilon_share=share)
    return DPADVIStart(fit, iterations, events, settings)


class ClipBoundPlan:
    """The private clip bound(s) of one ``pmdp.sample`` run: planned before the charge, released inside it.

    Each release is the Gaussian mechanism on the histogram of per-row score norms at a public
    point (:class:`pymc_dp.mechanisms.NoisyScoreNormHistogram`), all at one noise multiplier
    calibrated from ``share`` of ε. With ``init="dpadvi"`` there are two: at the model's
    initial point (the DPADVI fit's bound) and at the fit's mean (the chains' bound).
    """

    def __init__(
        self, step: DPStep, quantile: float, margin: float, noise_multiplier: float, releases: int, share: float
    ) -> None:
        self.step, self.quantile, self.margin, self.noise_multiplier = step, quantile, margin, noise_multiplier
        self.attributes = step.auto_clip_attributes
        self.share = share
        self.noise_std = noise_multiplier * histogram_sensitivity(step.neighbouring)
        self.events = tuple(
            NoisyScoreNormHistogram.events(
                noise_multiplier, releases, f"{type(step).__name__}[{','.join(step.var_names)}] clip bound"
            )
        )
        self.releases: list[dict[str, Any]] = []
        self.bounds: dict[str, float] = {}

    def release(self, point: dict[str, Any], where: str) -> float:
        """One priced release at the public ``point``; returns the bound (margin × the noisy quantile)."""
        released = self.step.release_clip_bound(point, self.quantile, self.noise_multiplier)
        bound = self.margin * released.bound
        # Post-processing of the released histogram: N where it is public, else the noisy total.
        n_rows = self.step.n_rows if self.step.neighbouring == "substitute" else None
        summary = clipping_summary(released.noisy_counts, bound, self.noise_std, n_rows, where)
        total = n_rows if n_rows is not None else max(float(released.noisy_counts.sum()), 1.0)
        self.releases.append(
            {
                "resolvable": quantile_is_resolvable(self.noise_std, total, self.quantile),
                "count_noise_rows": round(cumulative_noise_rows(self.noise_std), 2),
                "quantile_bound": released.bound,
                **summary,
            }
        )
        return bound

    def commit(self, bound: float) -> dict[str, Any]:
        """Set the released bound on the step for this run; returns the public record."""
        self.bounds = {name: bound for name in self.attributes}
        for name in self.attributes:
            setattr(self.step, name, bound)  # the step rebuilds its mechanisms when a bound changes
        return {
            "quantile": self.quantile,
            "margin": self.margin,
            "epsilon_share": self.share,
            "noise_multiplier": self.noise_multiplier,
            "bounds": dict(self.bounds),
            "releases": list(self.releases),
        }

    def restore(self) -> None:
        """Put ``"auto"`` back: the next run releases its own bound."""
        for name in self.attributes:
            setattr(self.step, name, "auto")


def _plan_clip_bound(
    steps: list[DPStep],
    model: Any,
    epsilon: float | None,
    delta: float,
    quantile: float,
    margin: float,
    share: float,
    releases: int,
) -> ClipBoundPlan | None:
    """Plan (price, not release) the private clip bound of steps whose bound is ``"auto"``; None if none is."""
    quantile = check_finite_positive("clip_quantile", quantile)
    if quantile > 1:
        raise ValueError(f"`clip_quantile` must be in (0, 1]. Found {quantile!r}.")
    margin = check_finite_positive("clip_margin", margin)
    share = check_finite_positive("clip_epsilon_share", share)
    if share >= 1:
        raise ValueError(f"`clip_epsilon_share` must be in (0, 1). Found {share!r}.")
    auto = [s for s in steps if getattr(s, "auto_clip_attributes", ())]
    if not auto:
        return None
    if len(steps) != 1:
        raise ValueError(
            "Clip bounds 'auto' need one DP step covering every variable (the bound is a quantile of the score "
            f"norms of all parameters). Found {len(steps)} steps; give each step its clip bounds as numbers."
        )
    if epsilon is None and not auto[0].needs_calibration:
        raise ValueError(
            f"`epsilon` must be given when a clip bound is 'auto' ({', '.join(auto[0].auto_clip_attributes)} of "
            f"{type(auto[0]).__name__}): `clip_epsilon_share` of it pays for the private bound. Found epsilon=None; "
            "or give the bound as a number."
        )
    step = auto[0]
    if epsilon is None and step.needs_calibration:
        return None  # the calibration refuses the run next, saying that its noise needs `epsilon`
    step.check_score_norms()  # the model must have per-row gradients: refused here, before any charge
    mu = gaussian_mu_for_target(share * epsilon * (1.0 - CALIBRATION_MARGIN), delta)
    return ClipBoundPlan(step, quantile, margin, math.sqrt(releases / (2.0 * mu)), releases, share)


def _auto_iterations(
    steps: list[DPStep],
    model: Any,
    epsilon: float | None,
    delta: float,
    chains: int,
    tune: int | None,
    share: float,
    dp_init: DPADVIStart | None,
) -> tuple[int, int, dict[str, Any]]:
    """(tune, draws, plan summary) for ``draws="auto"``, from :func:`pymc_dp.planning.plan`."""
    if epsilon is None or len(steps) != 1 or not isinstance(steps[0], DPPenaltyMH | DPHMC):
        raise ValueError(
            "`draws`='auto' needs `epsilon` and one DPPenaltyMH or DPHMC step covering every variable. Found "
            f"epsilon={epsilon!r} and steps {[type(s).__name__ for s in steps]}."
        )
    step = steps[0]
    if step.neighbouring != "substitute":
        raise ValueError(
            "`draws`='auto' plans the iterations from N, which is private under add/remove neighbours (the number "
            "of draws would reveal it). Found neighbouring='add_remove'; give `draws` and `tune` yourself."
        )
    if not step.needs_calibration:
        raise ValueError(
            "`draws`='auto' chooses the iterations and calibrates the noise to them: leave the step's noise unset."
        )
    is_hmc = isinstance(step, DPHMC)
    chain_epsilon = epsilon * (1.0 - share) if dp_init is not None else epsilon  # the fit's share is not the chain's
    the_plan = plan_run(
        model,
        epsilon=chain_epsilon,
        delta=delta,
        chains=chains,
        # Without a posterior sd the plan's b·s is 2√P/√N whatever b: an "auto" bound plans like any other.
        llr_clip=1.0 if step.llr_clip == "auto" else step.llr_clip,
        grad_clip=(1.0 if step.grad_clip == "auto" else step.grad_clip) if is_hmc else None,
        neighbouring=step.neighbouring,
        n_leapfrog=step.n_leapfrog if is_hmc else 10,
        grad_budget_share=step.grad_budget_share if is_hmc else 0.5,
    )
    chosen = the_plan.method("DPHMC" if is_hmc else "DPPenaltyMH")
    if tune is None:
        tune, draws = chosen.tune, chosen.draws
    elif tune < chosen.iterations:
        draws = chosen.iterations - tune
    else:
        raise ValueError(
            f"`tune` must be below the {chosen.iterations} iterations the plan chose for draws='auto'. Found {tune}."
        )
    summary = {
        "method": chosen.method,
        "iterations": chosen.iterations,
        "expected_ess_per_chain": chosen.expected_ess,
        "usable": chosen.usable,
        "posterior_sd": the_plan.posterior_sd,
        "posterior_sd_source": the_plan.posterior_sd_source,
    }
    if not chosen.usable:
        warnings.warn(f"pymc_dp.sample(draws='auto'): {the_plan.recommendation}.", PoorMixingWarning, stacklevel=3)
    return tune, draws, summary


def _iteration_hint(steps: list[DPStep], epsilon: float, delta: float, chains: int) -> str:
    """For a lone subsampled DPBarkerMH (whose ε is set by N, b and T alone): the iterations ε allows."""
    if len(steps) != 1 or not isinstance(steps[0], DPBarkerMH) or steps[0].full_data:
        return ""
    step = steps[0]
    total = subsampled_barker_max_iterations(epsilon, delta, step.n_rows, step.batch_size)
    return (
        f" At batch_size={step.batch_size} DPBarkerMH fits at most {total} iterations in all at this (ε, δ): "
        f"{total // chains} per chain (tune + draws) with {chains} chains."
    )


@withholds_chains
def sample(
    *,
    step: Any = None,
    epsilon: float | None = None,
    delta: float | None = None,
    draws: int | str | None = None,
    tune: int | None = None,
    chains: int = 4,
    budget: PrivacyBudget | None = None,
    model: Any = None,
    var_names: list[str] | None = None,
    init: str = "auto",
    init_epsilon_share: float = 0.2,
    clip_quantile: float = 0.95,
    clip_margin: float = 2.0,
    clip_epsilon_share: float = 0.05,
    on_poor_mixing: str = "warn",
    backend: Any = "default",
    x_bounds: Any = None,
    y_bounds: Any = None,
    grad_clip: float | None = None,
    **kwargs: Any,
) -> Any:
    """Sample with DP step methods and return a result carrying its privacy guarantee.

    Without ``step`` (one call, like ``pm.sample()``), it runs the route :func:`pymc_dp.plan`
    recommends for the model, chosen from public quantities only — the graph, N, P,
    ``epsilon``, ``delta`` and ``chains`` — and says which and why in
    ``Plan.one_call_reason``: for a linear or logistic regression written as a PyMC model,
    its statistics released once (:func:`pymc_dp.release_statistics`, the logistic one with
    two covariate anchors, Gaussian or Laplace mechanism, whichever adds less noise at the
    bounds given) and NUTS on their noise-aware likelihood; otherwise DPPenaltyMH for the
    planner's iterations when it can deliver 100 effective draws; otherwise DPADVI when its
    expected mean error is below half a posterior sd; otherwise the call is refused before
    anything is spent. The result is of the same kind (ε, record, ``dp_diagnostics``, flagged
    when poor) and records the route in ``dp_route`` and ``dp_accountant["route"]``.

    Plans the whole run before touching data: counts every iteration of every chain
    (``chains × (tune + draws)``), calibrates noise left unset from (``epsilon``, ``delta``),
    refuses a run that would exceed ``epsilon`` or the ``budget``, refuses variables no DP
    step covers, and leaves data-dependent deterministics out of the trace. After sampling
    it removes the raw-data groups and writes the ``dp_*`` attributes on the posterior.

    Parameters
    ----------
    step : DPStep or list of DPStep, optional
        DP step methods covering every free variable of the model. Omitted: the route the
        planner recommends (above), with ``epsilon`` required.
    epsilon : float, optional
        Target ε of this run. Required when a step leaves its noise unset, and without
        ``step``; otherwise the run is refused if its ε would exceed it.
    delta : float
        δ in (0, 1) at which ε is computed. Typically below 1/N. Defaults to the budget's δ.
    draws : int or "auto", optional
        Default 1000 (without ``step``: 1000 NUTS draws per chain on the released
        statistics, 1000 draws from a DPADVI fit, or ``"auto"`` for DPPenaltyMH). As for
        ``pm.sample``, or ``"auto"``: the iterations :func:`pymc_dp.planning.plan`
        recommends for the step (DPPenaltyMH: the number at which the expected ESS reaches
        90 % of what the noise allows; DPHMC: the number that maximises the expected ESS),
        a quarter of them tuning unless ``tune`` is given. Needs ``epsilon`` and steps whose
        noise is calibrated by this call. The plan is recorded in ``dp_accountant``.
    tune : int, optional
        Tuning iterations per chain (default 1000, or the plan's with ``draws="auto"``);
        accounted like draws.
    chains : int
        As for ``pm.sample``.
    budget : PrivacyBudget, optional
        A budget spanning several runs on the same data; the run is charged before it starts
        and refused (with nothing charged) if it would overspend.
    model : pm.Model, optional
        Taken from the context if omitted.
    var_names : list of str, optional
        Variables to store; data-dependent deterministics are refused.
    init : {"auto", "prior", "model", "dpadvi"}, default "auto"
        Where chains start when no ``initvals`` are given. ``"auto"`` is ``"dpadvi"`` when it
        applies — a target ``epsilon``, substitute neighbours, every step a DPPenaltyMH or
        DPHMC whose noise is calibrated here, and a model DPADVI supports (continuous free
        variables) — and ``"prior"`` otherwise; the result's ``dp_start`` says which ran and
        why. ``"prior"`` draws one start per
        chain from the prior (data-free, distinct and over-dispersed, so that R-hat can see a
        chain that did not mix; seeded by ``random_seed``), ``"model"`` uses the model's
        initial point for every chain (PyMC's behaviour for non-NUTS steps), ``"dpadvi"``
        spends ``init_epsilon_share`` of ``epsilon`` on a mean-field DPADVI fit planned from
        public N and the steps' clip bound (:func:`dpadvi_start_settings`) and starts each
        chain at its own draw from the fit with doubled standard deviations (over-dispersed);
        the chains are calibrated to what is left, and ``dp_epsilon`` is the composition of
        both (at most ``epsilon``). ``"dpadvi"`` needs ``epsilon`` and steps that clip per
        row (DPPenaltyMH, DPHMC).
    init_epsilon_share : float, default 0.2
        The share of ``epsilon`` that ``init="dpadvi"`` gives the DPADVI fit, in (0, 1).
    clip_quantile, clip_margin : float, default 0.95 and 2.0
        For a step whose clip bound is ``"auto"`` (the default of DPPenaltyMH and DPHMC): the
        bound is ``clip_margin`` times the ``clip_quantile`` of the per-row score norms
        ‖∇θ log p(xᵢ | θ)‖ at a public point, read off a histogram released with Gaussian
        noise (:class:`pymc_dp.mechanisms.NoisyScoreNormHistogram`). The point is the model's
        initial point, or with ``init="dpadvi"`` the fit's mean (a second release, after one
        at the initial point that sets the fit's own bound). The margin covers scores that
        grow between the reference point and the posterior (a logistic row's score doubles
        from θ = 0 to where it is misfitted). Why 0.95 and 2, measured on real data:
        ``docs/clipping.md``. When the noisy share of rows above the bound exceeds 1/√N
        (where the clipping bias is of the order of a posterior standard deviation) the result
        is flagged like a chain that did not mix.
    clip_epsilon_share : float, default 0.05
        The share of ``epsilon`` (of the budget's ε when no ``epsilon`` is given) that the
        clip-bound releases get, in (0, 1). The releases, the bounds and the noisy share of
        rows above them are recorded in ``dp_accountant["clip_bound"]``.
    on_poor_mixing : {"warn", "raise", "ignore"}, default "warn"
        What happens when the released draws are not a usable posterior (R-hat above 1.05 or
        bulk/tail ESS below 100 for some variable; :mod:`pymc_dp.diagnostics`): a
        :class:`pymc_dp.diagnostics.PoorMixingWarning` that says what to change, a
        :class:`pymc_dp.diagnostics.PoorMixingError` (the priced result is on its
        ``result``), or nothing. The diagnostics are written in every case.
    backend : {"default", "jax"}, JaxBackend or DaskBackend, default "default"
        Where the releases run. ``"jax"`` (or :class:`pymc_dp.JaxBackend` for float32 or a
        chunk size) computes DPPenaltyMH's, DPHMC's and DPBarkerMH's clipped sums on a JAX device, the rows
        put there once, with the same transitions, calibration and accounting
        (``docs/jax.md``); one such step covering every variable, ``cores=1``. A
        :class:`pymc_dp.DaskBackend` computes the full-data releases on a Dask cluster
        (``docs/dask.md``): the rows are scattered to the workers once, after the run is
        planned and before it is charged, and each release gets back only the partitions'
        clipped sums; the noise, the events and ε are those of the run without a backend.
        DPPenaltyMH, DPHMC and DPMultiOwnerPenaltyMH only, ``cores=1``, not with
        ``init="dpadvi"`` (``init="auto"`` then starts from prior draws). ``None`` is
        ``"default"``. Recorded in ``dp_accountant["backend"]``.
    x_bounds, y_bounds : pair of (float or array), optional
        Without ``step``, for the released-statistics route only: public (lower, upper)
        bounds of each column of the model's data matrix (a number or one per column; the
        intercept's column of ones is added by the route) and, for a linear regression, of
        the outcome. Rows outside are clamped to them (``pmdp.release_statistics``). They
        must not be computed from the data.
    grad_clip : float, optional
        Without ``step``, for the DPADVI route only: its per-row gradient bound (default
        1.0, the planner's assumption); its clipping check flags the result when too many
        rows exceed it. Give it from public knowledge of the per-row score's scale.
    **kwargs
        Passed to ``pm.sample`` (``random_seed``, ``cores``, ``progressbar``, ...). Start
        values in ``initvals`` are recorded in the result (``dp_start``): a
        :class:`PrivateStart` (from ``approx.initial_values`` of a DPADVI fit) adds its
        events to the result's ε; any other ``initvals`` are recorded as user-supplied and
        must not be computed from the data.

    Returns
    -------
    arviz.InferenceData (PyMC 5) or xarray.DataTree (PyMC 6)
        Without any group, variable, coordinate or attribute that reads the data (see
        :mod:`pymc_dp.results`); ``posterior.attrs`` holds ``dp_epsilon``, ``dp_delta``,
        ``dp_neighbouring``, ``dp_n_rows`` (substitute only), ``dp_start``,
        ``dp_diagnostics`` (R-hat, ESS, MCSE and acceptance computed from the released
        draws: free) and ``dp_accountant`` (JSON with every public setting needed to recompute ε). The
        steps' calibrated noise belongs to this run only: it is cleared when the run ends,
        so the steps cannot be re-run uncharged with ``pm.sample``.

    Raises
    ------
    ValueError, TypeError
        For invalid settings; nothing is run or charged.
    PrivacyBudgetExceededError
        When the run would exceed ``epsilon`` or the budget; nothing is run or charged.

    Notes
    -----
    Neighbouring relation: that of the steps (substitute by default: one row replaced, N
    public); all steps and the budget must agree. ε covers every value the steps release in
    every iteration of every chain, tuning included; the draws, sampler statistics and
    tuned settings are post-processing of those releases. Compositions of Gaussian
    mechanisms are accounted exactly (Sommer et al. 2019, Lemma 12). Without ``step`` the
    relation is substitute, the route is a function of public quantities only (so choosing
    it releases nothing), and ε covers the route's releases: the statistics and anchors
    (whose NUTS draws are post-processing), DPADVI's gradients and clipping check, or the
    sampler's clip bound, DP start and chains; a budget is charged once, by that route.
    """
    model = model_from_context(model, "pmdp.sample")
    if step is None:
        return _sample_one_call(
            model,
            epsilon=epsilon,
            delta=delta,
            draws=draws,
            tune=tune,
            chains=chains,
            budget=budget,
            var_names=var_names,
            init=init,
            init_epsilon_share=init_epsilon_share,
            clip_quantile=clip_quantile,
            clip_margin=clip_margin,
            clip_epsilon_share=clip_epsilon_share,
            on_poor_mixing=on_poor_mixing,
            backend=backend,
            x_bounds=x_bounds,
            y_bounds=y_bounds,
            grad_clip=grad_clip,
            kwargs=kwargs,
        )
    for name, value in (("x_bounds", x_bounds), ("y_bounds", y_bounds), ("grad_clip", grad_clip)):
        if value is not None:
            raise ValueError(
                f"`{name}` must be None when `step` is given: it sets the route pmdp.sample chooses without a step "
                f"(give a step's clip bounds to the step). Found {name}={value!r}."
            )
    draws = 1000 if draws is None else draws
    if delta is None and isinstance(budget, PrivacyBudget):
        delta = budget.delta
    if delta is None:
        raise ValueError("`delta` must be given (a number in (0, 1), typically below 1/N). Found None.")
    delta = check_unit_interval_open("delta", delta)
    chains = check_positive_int("chains", chains)
    if tune is not None:
        tune = check_nonnegative_int("tune", tune)
    if not (isinstance(draws, str) and draws == "auto"):
        draws = check_positive_int("draws", draws)
        tune = 1000 if tune is None else tune
    _check_sample_kwargs(kwargs)
    steps = _flatten_steps(step)
    neighbouring, n_rows = _check_steps(steps, model)
    dask_backend = _dask_backend(backend, steps, init, kwargs)  # None unless a DaskBackend
    device = None if dask_backend is not None else check_backend(backend, steps, kwargs)  # None: the default
    run = PrivateRun(
        "pymc_dp.sample", delta=delta, neighbouring=neighbouring, n_rows=n_rows, epsilon=epsilon, budget=budget
    )
    epsilon = run.epsilon
    var_names = _stored_variables(model, var_names)
    init = check_init(init)
    check_on_poor_mixing(on_poor_mixing)
    init, init_reason = _resolve_init(
        init, steps, model, epsilon, neighbouring, kwargs.get("initvals"), on_cluster=dask_backend is not None
    )
    dp_init, run_plan = None, None
    with_dpadvi = kwargs.get("initvals") is None and init == "dpadvi"
    if with_dpadvi:
        dp_init = _dpadvi_start(steps, model, n_rows, neighbouring, epsilon, delta, init_epsilon_share, kwargs)
    if draws == "auto":
        tune, draws, run_plan = _auto_iterations(
            steps, model, epsilon, delta, chains, tune, init_epsilon_share, dp_init
        )
    clip_plan = _plan_clip_bound(
        steps,
        model,
        epsilon if epsilon is not None else getattr(budget, "epsilon", None),
        delta,
        clip_quantile,
        clip_margin,
        clip_epsilon_share,
        releases=2 if with_dpadvi else 1,
    )
    clip_events = clip_plan.events if clip_plan is not None else ()
    start, start_events = _start_provenance(kwargs.get("initvals"), init, dp_init, model)
    if init_reason is not None:
        start["init"] = init_reason
    if kwargs.get("initvals") is None and init == "prior":
        kwargs["initvals"] = prior_starts(model, chains, _start_seed(kwargs.get("random_seed")))

    # Plan: calibrate unset noise and price every iteration of every chain, before any data access.
    iterations = chains * (tune + draws)
    earlier = tuple(clip_events) + (dp_init.events if dp_init else ())  # released in this run, before the chains
    if budget is not None and epsilon is None and any(s.needs_calibration for s in steps):
        # No target for this run: calibrate it to what is left of the budget.
        planned = calibrate_releasers(steps, iterations, budget.epsilon, budget.delta, budget.events + earlier)
    else:  # a DP start and clip bounds planned in this call are covered by the same target
        planned = calibrate_releasers(steps, iterations, epsilon, delta, earlier)
    run_events = [e for s in planned for e in s.privacy_events(iterations)]
    run_epsilon = run.plan(
        list(earlier) + run_events,
        depends_on=start_events,
        advice=lambda: (
            "use more noise, fewer chains or fewer iterations." + _iteration_hint(planned, epsilon, delta, chains)
        ),
    )

    # Charge and run. The calibration is committed for this run only and undone when it ends,
    # however it ends; a run that PyMC aborts after the charge stays charged.
    detach = attach_backend(device, steps)  # compiled before the charge: a failure here charges nothing
    backend_details = {"backend": backend_record(device, steps)} if device is not None else {}
    if dask_backend is not None:
        backend_details = {"backend": _dask_record(dask_backend)}
    restore = _commit_calibration(steps, planned, tune, draws)
    # the progress bar shows the run's ε so far at the run's δ
    for s, progress in zip(
        steps, _progress_accounting(planned, earlier + tuple(start_events), delta, chains, tune + draws)
    ):
        s.progress_run = progress
    clip_record = None
    detach_dask = None
    try:
        if dask_backend is not None:  # scatter the rows, compile on the workers: nothing released or charged yet
            detach_dask = dask_backend.attach(steps)
        with run.releasing(label=f"run {len(budget.labels) + 1 if budget else 1}: {chains}×({tune}+{draws})"):
            # PyMC's default point, whatever `initval`s the model sets (they may come from the data)
            reference = public_initial_point(model) if clip_plan is not None else None
            fit_clip = clip_plan.release(reference, "the model's initial point") if clip_plan and dp_init else None
            if dp_init is not None:
                kwargs["initvals"], reference = dp_init.starts(
                    chains, _start_seed(kwargs.get("random_seed")), grad_clip=fit_clip
                )
            if clip_plan is not None:
                where = "the DPADVI fit's mean" if dp_init is not None else "the model's initial point"
                clip_record = clip_plan.commit(clip_plan.release(reference, where))
            idata = pm.sample(
                draws=draws, tune=tune, chains=chains, step=step, model=model, var_names=var_names, **kwargs
            )
    finally:
        for s in steps:
            s.forget_private_state()
            s.progress_run = None
        if detach_dask is not None:
            detach_dask()
        restore()
        detach()
        if clip_plan is not None:
            clip_plan.restore()

    record = run.record(
        start=start,
        reproducible_noise=any(getattr(s, "reproducible_noise", False) for s in steps),
        run_epsilon=run_epsilon,
        chains=chains,
        tune=tune,
        draws=draws,
        iterations_per_chain=tune + draws,
        # the run's noise and clip bounds (cleared from `steps`)
        steps=[{**s.accountant_settings(), **(clip_plan.bounds if clip_plan else {})} for s in planned],
        **({"plan": run_plan} if run_plan is not None else {}),
        **({"clip_bound": clip_record} if clip_record is not None else {}),
        **({"dp_init": dp_init.settings} if dp_init is not None else {}),
        **backend_details,
    )
    run.publish(idata, model, record)
    return attach_diagnostics(idata, on_poor_mixing, clipping=clip_record)


#: pmdp.sample's settings that only the DP sampler route uses, with their defaults.
_SAMPLER_SETTINGS = {
    "init": "auto",
    "init_epsilon_share": 0.2,
    "clip_quantile": 0.95,
    "clip_margin": 2.0,
    "clip_epsilon_share": 0.05,
}
#: pm.sample keywords the DPADVI route uses (the others configure a sampler it does not run).
_DPADVI_KWARGS = ("random_seed", "progressbar")
#: DPADVI's settings on the one-call route: those the utility benchmark measured (docs/choosing_a_method.md).
ONE_CALL_DPADVI = {"approximation": "meanfield", "optimizer": "adam", "learning_rate": 0.05}
#: DPADVI's per-row gradient bound on the one-call route when none is given: the planner's assumption.
ONE_CALL_GRAD_CLIP = 1.0


@withholds_chains
def _sample_one_call(
    model: Any,
    *,
    epsilon: Any,
    delta: Any,
    draws: Any,
    tune: Any,
    chains: Any,
    budget: Any,
    var_names: Any,
    init: Any,
    init_epsilon_share: Any,
    clip_quantile: Any,
    clip_margin: Any,
    clip_epsilon_share: Any,
    on_poor_mixing: Any,
    backend: Any,
    x_bounds: Any,
    y_bounds: Any,
    grad_clip: Any,
    kwargs: dict[str, Any],
) -> Any:
    """``pmdp.sample`` without a step: run the route :func:`pymc_dp.plan` recommends (public quantities only).

    Every argument is checked, and the route's own checks run, before its one charge.
    """
    if delta is None and isinstance(budget, PrivacyBudget):
        delta = budget.delta
    if delta is None:
        raise ValueError("`delta` must be given (a number in (0, 1), typically below 1/N). Found None.")
    delta = check_unit_interval_open("delta", delta)
    if epsilon is None:
        raise ValueError(
            "`epsilon` must be given when `step` is not: pmdp.sample chooses the route from it (pmdp.plan). Found None."
        )
    epsilon = check_finite_positive("epsilon", epsilon)
    chains = check_positive_int("chains", chains)
    if tune is not None:
        tune = check_nonnegative_int("tune", tune)
    if draws is not None and not (isinstance(draws, str) and draws == "auto"):
        draws = check_positive_int("draws", draws)
    if budget is not None and not isinstance(budget, PrivacyBudget):
        raise TypeError(f"`budget` must be a pymc_dp.PrivacyBudget. Found {type(budget).__name__}.")
    _check_sample_kwargs(kwargs)
    check_on_poor_mixing(on_poor_mixing)
    check_init(init)
    if grad_clip is not None:
        grad_clip = check_finite_positive("grad_clip", grad_clip)
    if var_names is not None:
        _stored_variables(model, var_names)  # refuses unknown names and deterministics that read data
    the_plan = plan_run(model, epsilon=epsilon, delta=delta, chains=chains, grad_clip=grad_clip)
    route = the_plan.one_call_route
    if route is None:
        raise ValueError(
            "`epsilon` must buy a usable posterior of this model by some route. pmdp.plan: "
            f"{the_plan.one_call_reason}. Found epsilon={epsilon!r} at N = {the_plan.n_rows}."
        )
    settings = {
        "init": init,
        "init_epsilon_share": init_epsilon_share,
        "clip_quantile": clip_quantile,
        "clip_margin": clip_margin,
        "clip_epsilon_share": clip_epsilon_share,
    }
    unused: dict[str, Any] = {}
    if route != "DPPenaltyMH":
        unused.update({k: v for k, v in settings.items() if v != _SAMPLER_SETTINGS[k]})
        if isinstance(draws, str):
            unused["draws"] = draws
    if route != "release_statistics":
        unused.update({k: v for k, v in (("x_bounds", x_bounds), ("y_bounds", y_bounds)) if v is not None})
    if route != "DPADVI" and grad_clip is not None:
        unused["grad_clip"] = grad_clip
    if route == "DPADVI":
        unused.update({k: v for k, v in (("tune", tune), ("var_names", var_names)) if v is not None})
        unused.update({k: v for k, v in kwargs.items() if k not in _DPADVI_KWARGS})
    if route == "release_statistics" and backend not in ("default", None):
        unused["backend"] = backend
    if unused:
        name, value = next(iter(unused.items()))
        raise ValueError(
            f"`{name}` must be left unset: it does not apply to the route pmdp.sample takes without a step here "
            f"({the_plan.one_call_reason}). Found {name}={value!r}; pass step= to run another route."
        )
    record = {
        "name": route,
        "reason": the_plan.one_call_reason,
        "chosen_from": "pmdp.plan's recommendation: the graph, N, P, epsilon, delta and chains (public)",
    }
    common = {"draws": draws, "chains": chains, "on_poor_mixing": on_poor_mixing}
    try:
        if route == "release_statistics":
            idata = _release_route(
                model, epsilon, delta, budget, x_bounds, y_bounds, tune, var_names, record, common, kwargs
            )
        elif route == "DPADVI":
            idata = _dpadvi_route(model, the_plan, epsilon, delta, budget, grad_clip, backend, common, kwargs)
        else:
            idata = sample(
                step=DPPenaltyMH(model=model),
                epsilon=epsilon,
                delta=delta,
                draws="auto" if draws is None else draws,
                tune=tune,
                chains=chains,
                budget=budget,
                model=model,
                var_names=var_names,
                on_poor_mixing=on_poor_mixing,
                backend=backend,
                **settings,
                **kwargs,
            )
    except PoorMixingError as error:  # the priced result rides on the error: it says its route too
        _record_route(error.result, record)
        raise
    return _record_route(idata, record)


def _record_route(idata: Any, route: dict[str, Any]) -> Any:
    """Add the one-call route to the result's record (``dp_accountant["route"]``) and as ``dp_route``.

    The record is rewritten with the same events, ε and draws, and its digest (``dp_integrity``)
    recomputed; ``dp_diagnostics`` is left as the route wrote it.
    """
    attrs = posterior_attrs(idata)
    record = json.loads(attrs["dp_accountant"])
    record["route"] = dict(route)
    write_privacy_attrs(idata, record)
    attrs["dp_route"] = str(route["name"])
    return idata


def _bounds_pair(name: str, bounds: Any, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper), each of ``width`` finite numbers with lower ≤ upper, from a pair of numbers or arrays."""
    try:
        lower, upper = bounds
        lower = np.broadcast_to(np.asarray(lower, dtype=float), (width,)).copy()
        upper = np.broadcast_to(np.asarray(upper, dtype=float), (width,)).copy()
    except (TypeError, ValueError):
        raise ValueError(
            f"`{name}` must be a pair (lower, upper) of numbers or of {width} numbers each (public bounds). "
            f"Found {bounds!r}."
        ) from None
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper)) and np.all(lower <= upper)):
        raise ValueError(f"`{name}` must hold finite bounds with lower ≤ upper. Found {bounds!r}.")
    return lower, upper


def _prior_model(model: Any, outcome: Any) -> Any:
    """A copy of ``model`` without its likelihood: no observed variable, data container or deterministic that
    reads data (PyMC's model graph, ``pymc.model.fgraph``); the priors and data-free potentials are kept."""
    from pymc.model.fgraph import fgraph_from_model, model_from_fgraph

    drop = {outcome.name, *data_dependent_deterministics(model), *(v.name for v in model.data_vars)}
    fgraph, _ = fgraph_from_model(model, inlined_views=True)
    for index in reversed(range(len(fgraph.outputs))):
        if fgraph.outputs[index].name in drop:
            fgraph.remove_output(index)
    return model_from_fgraph(fgraph, mutate_fgraph=True)


def _observed_array(variable: Any) -> np.ndarray:
    """The raw values held by a data container or constant: handed to the mechanism only (never inspected)."""
    from pytensor.compile.sharedvalue import SharedVariable

    return np.asarray(variable.get_value(borrow=True) if isinstance(variable, SharedVariable) else variable.data)


def _release_route(
    model: Any,
    epsilon: float,
    delta: float,
    budget: Any,
    x_bounds: Any,
    y_bounds: Any,
    tune: int | None,
    var_names: Any,
    record: dict[str, Any],
    common: dict[str, Any],
    kwargs: dict[str, Any],
) -> Any:
    """Release the regression's statistics once (:func:`pymc_dp.release_statistics`), then NUTS on their
    noise-aware likelihood in a copy of the model's priors. Everything is checked before the release."""
    import pytensor.tensor as pt
    from pytensor.graph.replace import graph_replace

    from pymc_dp.accounting.calibrate import noise_multiplier_for_target
    from pymc_dp.data import check_prior_reads_no_data
    from pymc_dp.exponential_family import release_statistics
    from pymc_dp.exponential_family.families import get_family
    from pymc_dp.planning import regression_parts

    parts = regression_parts(model)
    family = parts.family
    linear = family == "linear_regression"
    n_rows = _row_structure(model)[0]
    width = parts.matrix.type.shape[1]
    if width is None:  # a pm.Data container's static shape may be unknown: its column count is public
        width = int(parts.matrix.shape[1].eval())
    if x_bounds is None:
        raise ValueError(
            f"`x_bounds` must be given for the released-statistics route ({family}): public (lower, upper) bounds of "
            f"each of the data matrix's {width} columns. Found None."
        )
    if linear and y_bounds is None:
        raise ValueError(
            "`y_bounds` must be given for the released-statistics route (linear_regression): public (lower, upper) "
            "bounds of the outcome. Found None."
        )
    if not linear and y_bounds is not None:
        raise ValueError(
            f"`y_bounds` must be None for a logistic regression (its outcome is 0 or 1). Found {y_bounds!r}."
        )
    lower, upper = _bounds_pair("x_bounds", x_bounds, width)
    if parts.intercept is not None:  # the intercept is the coefficient of a column of ones
        lower, upper = np.concatenate([[1.0], lower]), np.concatenate([[1.0], upper])
    extra = {}
    if linear:
        y_lower, y_upper = _bounds_pair("y_bounds", y_bounds, 1)
        extra["y_bounds"] = (float(y_lower[0]), float(y_upper[0]))
    n_features = lower.size
    settings = {"n_features": n_features, "x_bounds": (lower.tolist(), upper.tolist()), **extra}
    fam = get_family(family, **settings)  # checks the settings; reads nothing
    # The mechanism whose noise variance is the smaller at these public bounds (the planner's rule).
    tau = noise_multiplier_for_target(epsilon, delta, 1)
    gaussian = (tau * fam.l2_sensitivity()) ** 2 < 2.0 * (fam.l1_sensitivity() / epsilon) ** 2
    noise = {"mechanism": "gaussian", "delta": delta} if gaussian else {"mechanism": "laplace"}
    anchors = 0 if linear else 2

    # The priors, and the likelihood's parameters on them, before anything is released.
    prior = _prior_model(model, parts.outcome)
    check_prior_reads_no_data(prior, n_rows)
    to_prior = {rv: prior[rv.name] for rv in model.free_RVs}
    pieces = [parts.coefficients, *(p for p in (parts.intercept, parts.sigma) if p is not None)]
    replaced = dict(zip([id(p) for p in pieces], graph_replace(pieces, to_prior, strict=False), strict=True))
    coefficients = replaced[id(parts.coefficients)]
    beta = coefficients
    if parts.intercept is not None:
        beta = pt.concatenate([pt.atleast_1d(replaced[id(parts.intercept)]), coefficients])
    params = {"beta": beta}
    if linear:
        params["sigma"] = replaced[id(parts.sigma)]
    name = parts.outcome.name
    while any(n == name or n.startswith(f"{name}_") for n in prior.named_vars):
        name = f"{name}_release"
    design = _observed_array(parts.matrix)
    if parts.intercept is not None:
        design = np.column_stack([np.ones(n_rows), design])
    outcome = _observed_array(model.rvs_to_values[parts.outcome])
    release = release_statistics(  # the one access to the rows, charged once
        family,
        (design, outcome),
        epsilon=epsilon,
        budget=budget,
        covariate_anchors=anchors,
        **noise,
        **settings,
    )
    record.update(family=family, mechanism=noise["mechanism"], covariate_anchors=anchors, likelihood=name)
    with prior:
        release.likelihood(name, **params)
    run = {"draws": common["draws"] or 1000, "tune": 1000 if tune is None else tune, "chains": common["chains"]}
    if var_names is not None:
        run["var_names"] = list(var_names)
    return release.sample(model=prior, on_poor_mixing=common["on_poor_mixing"], **run, **kwargs)


def _dpadvi_route(
    model: Any,
    the_plan: Any,
    epsilon: float,
    delta: float,
    budget: Any,
    grad_clip: float | None,
    backend: Any,
    common: dict[str, Any],
    kwargs: dict[str, Any],
) -> Any:
    """DPADVI at the plan's iterations and sampling rate; draws from its widened fit, flagged as it says."""
    planned = the_plan.method("DPADVI")
    seed = kwargs.get("random_seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
        raise TypeError(f"`random_seed` must be an int or None on the DPADVI route. Found {type(seed).__name__}.")
    fit = DPADVI(
        epsilon=epsilon,
        delta=delta,
        sampling_rate=planned.noise["sampling_rate"],
        grad_clip=ONE_CALL_GRAD_CLIP if grad_clip is None else grad_clip,
        budget=budget,
        model=model,
        random_seed=None if seed is None else int(seed),
        backend="default" if backend is None else backend,
        **ONE_CALL_DPADVI,
    )
    fit.prepare(model)  # DPADVI's model checks: before the charge
    approx = fit.fit(planned.iterations, progressbar=bool(kwargs.get("progressbar", True)))
    on_poor_mixing = common["on_poor_mixing"]
    with warnings.catch_warnings():
        if on_poor_mixing != "warn":  # said once below ("raise") or not at all ("ignore")
            warnings.simplefilter("ignore", PoorMixingWarning)
        idata = approx.sample(common["draws"] or 1000, random_seed=seed)
    diagnostics = json.loads(posterior_attrs(idata)["dp_diagnostics"])
    if on_poor_mixing == "raise" and diagnostics.get("usable") is False:
        raise PoorMixingError(str(diagnostics["reasons"][0]), idata)
    return idata


def _progress_accounting(
    planned: list[Any], before: tuple[PrivacyEvent, ...], delta: float, chains: int, iterations: int
) -> list[ProgressAccounting]:
    """For each step, what its progress-bar column needs to show the run's ε so far (public settings only).

    ``before``: the run's releases before its chains (a clip bound, a DP start), composed in
    closed form (μ adds) when Gaussian (else the column shows the chains' ε and says so); ``planned``:
    the calibrated steps, whose μ per iteration sum to the chains' μ per iteration.
    """
    # Gaussian releases compose by adding μ; anything else is left to the result (no composition here)
    gaussian = all(isinstance(e, GaussianReleases) for e in before)
    mu_before = sum(e.mu for e in before) if gaussian else math.nan
    try:
        per_iteration = [float(s.gaussian_mu_per_iteration()) for s in planned]
    except (NotImplementedError, ValueError):  # a subsampled DPBarkerMH: priced in RDP, shown "on result"
        return [ProgressAccounting(delta, chains, mu_before, math.nan) for _ in planned]
    total = sum(per_iteration)
    anchor = (mu_before if math.isfinite(mu_before) else 0.0) + chains * iterations * total
    return [ProgressAccounting(delta, chains, mu_before, total / mu, anchor) for mu in per_iteration]


def _dask_backend(backend: Any, steps: list[Any], init: str, kwargs: dict[str, Any]) -> Any:
    """The run's :class:`pymc_dp.DaskBackend` after checking it can run ``steps`` (None for any other backend).

    Changes nothing but ``kwargs["cores"]`` (1 by default with a Dask backend).
    """
    if backend is None or isinstance(backend, str):
        return None
    from pymc_dp.mechanisms.dask_backend import DaskBackend

    if not isinstance(backend, DaskBackend):
        return None  # check_backend names what is accepted
    backend.check(steps, kwargs)
    if kwargs.get("initvals") is None and init == "dpadvi":
        raise ValueError(
            "`init` must be 'auto', 'prior' or 'model' with a Dask backend (the DPADVI start runs in this process). "
            "Found 'dpadvi'."
        )
    kwargs.setdefault("cores", 1)
    return backend


def _dask_record(backend: Any) -> dict[str, Any]:
    """The public description of a :class:`pymc_dp.DaskBackend` written in ``dp_accountant["backend"]`` (no data)."""
    import distributed

    return {
        "name": "dask",
        "partitions": backend.partitions,  # None: one per worker at the start of the run
        "workers": len(backend.client.scheduler_info()["workers"]),
        "timeout": backend.timeout,
        "distributed_version": distributed.__version__,
    }


def _start_seed(random_seed: Any) -> Any:
    """A generator for the prior starts, derived from ``pm.sample``'s seed (data-free randomness)."""
    if isinstance(random_seed, np.random.Generator):
        return np.random.default_rng(random_seed.spawn(1)[0]) if hasattr(random_seed, "spawn") else random_seed
    if isinstance(random_seed, int | np.integer):
        return np.random.default_rng([int(random_seed), 0x5747])  # distinct from PyMC's own stream
    if isinstance(random_seed, list | tuple):
        return np.random.default_rng([int(v) for v in random_seed] + [0x5747])
    return np.random.default_rng()


def _check_sample_kwargs(kwargs: dict[str, Any]) -> None:
    """Refuse ``pm.sample`` keywords that would release non-private values."""
    for key, why in _REFUSED_KWARGS.items():
        if key in kwargs:
            raise ValueError(f"`{key}` is not supported by pymc_dp.sample: {why}.")
    known = set(inspect.signature(pm.sample).parameters) - {"kwargs"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"Keyword arguments must be ones `pm.sample` accepts. Found unknown: {unknown}.")
    if kwargs.get("return_inferencedata", True) is not True:
        raise ValueError("`return_inferencedata` must be True: pymc_dp attaches its guarantee to the returned object.")
    idata_kwargs = dict(kwargs.get("idata_kwargs") or {})
    if idata_kwargs.get("log_likelihood") or idata_kwargs.get("log_prior"):
        raise ValueError(
            "`idata_kwargs` must not request log_likelihood or log_prior: they are exact per-row values of the data."
        )


def _check_steps(steps: list[Any], model: Any) -> tuple[str, int]:
    """The run's neighbouring relation and N, after checking that DP steps cover every free variable."""
    foreign = [type(s).__name__ for s in steps if not isinstance(s, DPStep)]
    if foreign:
        raise ValueError(
            f"`step` must contain only pymc_dp step methods. Found {foreign}, which evaluate the exact "
            "full-data log-density."
        )
    covered = {v for s in steps for v in s.vars}
    uncovered = [v.name for v in model.value_vars if v not in covered]
    if uncovered:
        raise ValueError(
            f"Every free variable must be sampled by a DP step. Found uncovered: {uncovered}. PyMC would assign "
            "them a non-private sampler (NUTS or Gibbs) that reads the raw data; add them to a DP step's `vars`."
        )
    relations = {s.neighbouring for s in steps}
    if len(relations) > 1:
        raise ValueError(f"All steps must use one neighbouring relation. Found {sorted(relations)}.")
    neighbouring = relations.pop()
    if all(not getattr(s, "reads_model_rows", True) for s in steps):
        # Steps that hold their own data (DPSuffStatsPenaltyMH): the model holds priors only.
        if model.observed_RVs:
            raise ValueError(
                "`model` must hold no observed variables when the steps take the data themselves. Found "
                f"{[rv.name for rv in model.observed_RVs]}."
            )
        n_rows = steps[0].n_rows
    else:
        n_rows = _row_structure(model)[0]
    if any(s.n_rows != n_rows for s in steps):
        raise ValueError(
            "`step` must be built on the model's current data: the number of rows changed since it was built "
            "(pm.set_data?). Build the step again."
        )
    return neighbouring, n_rows


def _stored_variables(model: Any, var_names: list[str] | None) -> list[str]:
    """The variables to store: ``var_names`` checked, or every free variable and data-free deterministic."""
    hidden = data_dependent_deterministics(model)
    if var_names is None:
        if hidden:  # names come from the model's code, never from the rows
            logging.getLogger("pymc").info(
                "Not stored in the DP result: deterministics that read the data (%s). Their values would depend on "
                "the private rows without noise; compute them from the draws and public data after sampling.",
                ", ".join(sorted(hidden)),
            )
        return [rv.name for rv in model.free_RVs] + [d.name for d in model.deterministics if d.name not in hidden]
    storable = {rv.name for rv in model.free_RVs} | {d.name for d in model.deterministics}
    leaking = [name for name in var_names if name in hidden]
    if leaking:
        raise ValueError(f"`var_names` must not include deterministics that read data. Found {leaking}.")
    unknown_names = [name for name in var_names if name not in storable]
    if unknown_names:
        raise ValueError(f"`var_names` must name free variables or deterministics of the model. Found {unknown_names}.")
    return list(var_names)


def _set_noise(step: DPStep, values: dict[str, Any]) -> None:
    for name, value in values.items():
        setattr(step, name, value)
    noise_changed = getattr(step, "_noise_changed", None)
    if noise_changed is not None:  # drop what was built for the previous noise
        noise_changed()


def _commit_calibration(steps: list[DPStep], planned: list[DPStep], tune: int, draws: int):
    """Set the planned noise and the run's length on the steps for one run; return the function that undoes it."""
    saved = []
    lengths = [(real, real.planned_tune, real.planned_draws) for real in steps]
    for real, plan in zip(steps, planned, strict=True):
        if real.needs_calibration:
            saved.append((real, {name: getattr(real, name) for name in real.noise_attributes}))
            _set_noise(real, {name: getattr(plan, name) for name in real.noise_attributes})
        real.planned_tune, real.planned_draws = tune, draws

    def restore() -> None:
        for real, values in saved:
            _set_noise(real, values)
        for real, planned_tune, planned_draws in lengths:  # a later plain pm.sample must not plan with this run's
            real.planned_tune, real.planned_draws = planned_tune, planned_draws

    return restore


@withholds_chains
def privacy_spent(idata: Any, delta: float | None = None, *, model: Any = None) -> PrivacySpent:
    """ε of a result, recomputed from the result alone, after checking it holds nothing else.

    First the result is checked (:func:`pymc_dp.results.check_publishable`): a result that
    holds a group, variable, statistic, coordinate or attribute reading the data is refused,
    with a message naming what to remove — its ε would not cover it. Then, for a result
    written by pymc_dp (``pymc_dp.sample``, DPADVI, released statistics, one posterior
    sample, :func:`pymc_dp.publish`), ε is recomputed from ``dp_accountant``. For a plain
    ``pm.sample`` result with DP steps it sums, over chains, the ``dp_mu_cumulative``
    statistic of each chain's last stored draw: the μ that chain spent up to that draw,
    tuning iterations included (so a result cut to fewer draws is priced for what it still
    reveals, and a result whose tuning draws were discarded is still charged for them). A
    subsampled DPBarkerMH result is priced in RDP from the N, batch size and iteration counts
    its statistics record (``dp_n_rows``, ``dp_batch_size``, ``dp_iterations``).

    Parameters
    ----------
    idata : InferenceData or DataTree
        A sampling result.
    delta : float, optional
        δ at which to report ε; defaults to the recorded ``dp_delta`` and is required when
        there is none.
    model : pm.Model, optional
        The model the result came from (from the context if omitted). Required for a plain
        ``pm.sample`` result, whose variables are checked against it; optional otherwise.

    Returns
    -------
    PrivacySpent

    Raises
    ------
    pymc_dp.results.UnpublishableResultError
        When the result holds what reads the data (``observed_data``, a posterior
        predictive group, a deterministic reading data, ...).
    pymc_dp.results.AlteredResultError
        When the result is not the object its record priced (:func:`pymc_dp.results.check_integrity`:
        results joined along chains or draws, draws or the record edited, events deleted,
        ``dp_integrity`` missing), or, for a plain result, when a chain's ``dp_mu_cumulative``
        (``dp_iterations``) does not grow by one amount per stored draw (runs joined along
        ``draw``, which would be priced as the last run alone).

    Notes
    -----
    Neighbouring relation: the one the steps were built for (``"unknown"`` is reported for a
    plain ``pm.sample`` result, whose statistics do not record it). A result with statistics
    of non-DP samplers is refused. The record is checked against the object, not trusted:
    its digest (``dp_integrity``) binds it to the draws it was written for. The digest has no
    secret key; it catches mistakes (two results joined and priced as one), not a forger.
    """
    attrs = posterior_attrs(idata)
    if "dp_accountant" in attrs:
        check_publishable(idata, model)
        if delta is None:
            delta = attrs["dp_delta"]
        record = json.loads(attrs["dp_accountant"])
        events = [event_from_dict(e) for e in record["events"]]
        eps, method, mu = compose_epsilon(events, float(delta))  # δ = 0 allowed for pure ε-DP releases
        return PrivacySpent(eps, delta, record["neighbouring"], method, mu, record["n_rows"], tuple(events))

    if model is None:
        try:
            model = modelcontext(None)
        except (TypeError, ValueError):
            raise ValueError(
                "`model` must be given for a plain pm.sample result (or call privacy_spent inside `with model:`): "
                "its variables are checked against the model for ones that read data. Found no model."
            ) from None
    check_publishable(idata, model)
    delta = attrs.get("dp_delta") if delta is None else delta
    if delta is None:
        raise ValueError("`delta` must be given: this result records no dp_delta. Found None.")
    delta = check_unit_interval_open("delta", float(delta))
    if "sample_stats" not in group_names(idata):
        raise ValueError("`idata` has no sample_stats: it is not the result of sampling with pymc_dp steps.")
    stats = group(idata, "sample_stats")
    for name in ("dp_iterations", "dp_mu_cumulative"):  # draws of several runs joined along `draw` are refused
        if name in stats:
            check_cumulative_statistic(stats[name], name)
    # -- a subsampled DPBarkerMH: priced in RDP from the N, b and iteration counts its statistics record --
    barker = recorded_barker_releases(stats)
    if barker is not None:
        event, n_rows = barker
        eps, method, mu = compose_epsilon([event], delta)
        return PrivacySpent(eps, delta, "substitute", method, mu, n_rows, (event,))  # the test is substitute-only
    # -- Gaussian steps (full-data DPBarkerMH included): μ summed from dp_mu_cumulative --
    if "dp_mu_cumulative" not in stats:
        raise ValueError("`idata` has no dp_mu_cumulative statistic: it was not sampled with pymc_dp steps.")
    cumulative = stats["dp_mu_cumulative"]
    extra = [d for d in cumulative.dims if d not in ("chain", "draw")]
    cumulative = np.asarray(cumulative.sum(dim=extra) if extra else cumulative, dtype=float)
    # μ spent by each chain up to its last stored draw (tuning included), summed over chains.
    mu = float(np.max(cumulative, axis=1).sum())
    if not math.isfinite(mu):
        raise ValueError("`idata` holds a non-finite dp_mu_cumulative statistic.")
    return PrivacySpent(gaussian_epsilon(delta, mu), delta, "unknown", "gaussian_closed_form", mu, None, ())
