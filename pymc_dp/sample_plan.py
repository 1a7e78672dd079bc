"""The plan of one ``pmdp.sample`` run with DP steps: validate and plan before any data access.

:func:`plan_sample` checks the arguments, the steps and the backend, resolves where the chains
start, plans (prices, does not run) a DPADVI start and a private clip bound, chooses the
iterations for ``draws="auto"`` (:func:`pymc_dp.planning.plan`), calibrates the steps' unset
noise on copies and prices every iteration of every chain, and returns it all as one
:class:`SamplePlan`; :func:`pymc_dp.sample` then runs and records it. Nothing here reads a
row or charges a budget: every value is a function of public settings (N under substitute
neighbours, the steps' settings, ε, δ, the chains).
"""

from __future__ import annotations

import copy
import inspect
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pymc as pm
from pymc.step_methods.compound import CompoundStep

from pymc_dp._validation import (
    check_finite_positive,
    check_nonnegative_int,
    check_positive_int,
    check_unit_interval_open,
)
from pymc_dp.accounting.barker import subsampled_barker_max_iterations
from pymc_dp.accounting.budget import PrivacyBudget
from pymc_dp.accounting.calibrate import CALIBRATION_MARGIN, calibrate_releasers, poisson_gaussian_noise_multiplier
from pymc_dp.accounting.composition import compose_epsilon
from pymc_dp.accounting.events import PrivacyEvent
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.backends.jax import check_backend
from pymc_dp.centred_predictions import DP_START_ITERATIONS, default_dpadvi_sampling_rate
from pymc_dp.data import data_dependent_deterministics, observed_rows
from pymc_dp.diagnostics import PoorMixingWarning, check_on_poor_mixing
from pymc_dp.mechanisms.clip_bound import (
    NoisyScoreNormHistogram,
    clipping_summary,
    cumulative_noise_rows,
    histogram_sensitivity,
    quantile_from_histogram,
    quantile_is_resolvable,
)
from pymc_dp.planning import plan as plan_run
from pymc_dp.results import PrivateStart, note_dropped_deterministics
from pymc_dp.run import PrivateRun
from pymc_dp.starts import (
    check_init,
    prior_starts,
    user_initval_record,
    user_initvals,
    warn_user_initvals,
)
from pymc_dp.step_methods.barker import DPBarkerMH
from pymc_dp.step_methods.base import DPStep
from pymc_dp.step_methods.centred_plan import CentringPlan, plan_centring
from pymc_dp.step_methods.hmc import DPHMC
from pymc_dp.step_methods.penalty import DPPenaltyMH
from pymc_dp.variational.dpadvi import DPADVI

__all__ = ["ClipBoundPlan", "DPADVIStart", "SamplePlan", "dpadvi_start_settings", "plan_sample"]

#: ``pm.sample`` keywords that would release non-private values or bypass the DP steps.
_REFUSED_KWARGS = {
    "nuts_sampler": "pymc_dp runs PyMC's own sampler loop; external NUTS samplers do not use the DP steps",
    "nuts_sampler_kwargs": "pymc_dp runs PyMC's own sampler loop; external NUTS samplers do not use the DP steps",
    "trace": "trace backends (ZarrTrace, McBackend) store the raw data groups in their own store",
}


def _seeded_noise(steps: Any) -> bool:
    """Whether any step's mechanism noise came from a seed: its own (``reproducible_noise``) or its centring
    anchor's, released from the caller's generator (public settings only)."""
    return any(
        getattr(s, "reproducible_noise", False) or getattr(getattr(s, "anchor", None), "reproducible_noise", False)
        for s in steps
    )


def _flatten_steps(step: Any) -> list[Any]:
    if isinstance(step, CompoundStep):
        return [s for sub in step.methods for s in _flatten_steps(sub)]
    if isinstance(step, list | tuple):
        return [s for sub in step for s in _flatten_steps(sub)]
    return [step]


def _check_sample_kwargs(kwargs: dict[str, Any], nuts_settings: bool = False) -> None:
    """Refuse ``pm.sample`` keywords that would release non-private values (``nuts_settings``: NUTS's too)."""
    for key, why in _REFUSED_KWARGS.items():
        if key in kwargs:
            raise ValueError(f"`{key}` is not supported by pymc_dp.sample: {why}.")
    known = set(inspect.signature(pm.sample).parameters) - {"kwargs"} | ({"target_accept"} if nuts_settings else set())
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
        n_rows = observed_rows(model)
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
        note_dropped_deterministics(hidden)  # names come from the model's code, never from the rows
        return [rv.name for rv in model.free_RVs] + [d.name for d in model.deterministics if d.name not in hidden]
    storable = {rv.name for rv in model.free_RVs} | {d.name for d in model.deterministics}
    leaking = [name for name in var_names if name in hidden]
    if leaking:
        raise ValueError(f"`var_names` must not include deterministics that read data. Found {leaking}.")
    unknown_names = [name for name in var_names if name not in storable]
    if unknown_names:
        raise ValueError(f"`var_names` must name free variables or deterministics of the model. Found {unknown_names}.")
    return list(var_names)


def _dask_backend(backend: Any, steps: list[Any], init: str, kwargs: dict[str, Any]) -> Any:
    """The run's :class:`pymc_dp.DaskBackend` after checking it can run ``steps`` (None for any other backend).

    Changes nothing but ``kwargs["cores"]`` (1 by default with a Dask backend).
    """
    if backend is None or isinstance(backend, str):
        return None
    from pymc_dp.backends.dask import DaskBackend

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


def _start_seed(random_seed: Any) -> Any:
    """A generator for the prior starts, derived from ``pm.sample``'s seed (data-free randomness)."""
    if isinstance(random_seed, np.random.Generator):
        return np.random.default_rng(random_seed.spawn(1)[0]) if hasattr(random_seed, "spawn") else random_seed
    if isinstance(random_seed, int | np.integer):
        return np.random.default_rng([int(random_seed), 0x5747])  # distinct from PyMC's own stream
    if isinstance(random_seed, list | tuple):
        return np.random.default_rng([int(v) for v in random_seed] + [0x5747])
    return np.random.default_rng()


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
        # q's sds, a released value: the centred chains' predicted ESS takes their geometric mean
        self.settings["fit_sd_geometric_mean"] = float(np.exp(np.mean(np.log(np.asarray(approx.std.eval())))))
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
        "iterations": DP_START_ITERATIONS,
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
        self.counts: list[np.ndarray] = []  # the released histograms (public), read again for the anchor's clips

    def release(self, point: dict[str, Any], where: str) -> float:
        """One priced release at the public ``point``; returns the bound (margin × the noisy quantile)."""
        released = self.step.release_clip_bound(point, self.quantile, self.noise_multiplier)
        bound = self.margin * released.bound
        # Post-processing of the released histogram: N where it is public, else the noisy total.
        n_rows = self.step.n_rows if self.step.neighbouring == "substitute" else None
        summary = clipping_summary(released.noisy_counts, bound, self.noise_std, n_rows, where)
        self.counts.append(np.asarray(released.noisy_counts, dtype=float))
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

    def release_hessian(self, point: dict[str, Any], where: str) -> float:
        """One priced release of the per-row Hessian norms' histogram at ``point``; returns margin × its quantile.

        For a centred run's anchor (the step's ``release_hessian_norm_counts``), at the same noise
        multiplier as the score-norm releases and counted among them.
        """
        noisy = self.step.release_hessian_norm_counts(point, self.noise_multiplier)
        # Post-processing of the released counts from here on.
        bound = self.margin * quantile_from_histogram(noisy, self.quantile)
        n_rows = self.step.n_rows if self.step.neighbouring == "substitute" else None
        total = n_rows if n_rows is not None else max(float(noisy.sum()), 1.0)
        self.counts.append(np.asarray(noisy, dtype=float))
        self.releases.append(
            {
                "norms": "Hessian (Frobenius)",
                "resolvable": quantile_is_resolvable(self.noise_std, total, self.quantile),
                "count_noise_rows": round(cumulative_noise_rows(self.noise_std), 2),
                **clipping_summary(noisy, bound, self.noise_std, n_rows, where),
            }
        )
        return bound

    def fit_record(self) -> dict[str, Any]:
        """The record when only the DPADVI fit's bound was released (a centred run's chains clip at public bounds)."""
        return {
            "quantile": self.quantile,
            "margin": self.margin,
            "epsilon_share": self.share,
            "noise_multiplier": self.noise_multiplier,
            "bounds": {},
            "releases": list(self.releases),
            "note": "the DPADVI fit's bound, then the anchor's score and Hessian clips at the last Newton point",
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


def _check_auto_iterations(steps: list[DPStep], epsilon: float | None) -> None:
    """Refuse ``draws="auto"`` where it does not apply, before anything else is planned."""
    if epsilon is None or len(steps) != 1 or not isinstance(steps[0], DPPenaltyMH | DPHMC):
        raise ValueError(
            "`draws`='auto' needs `epsilon` and one DPPenaltyMH or DPHMC step covering every variable. Found "
            f"epsilon={epsilon!r} and steps {[type(s).__name__ for s in steps]}."
        )
    if steps[0].neighbouring != "substitute":
        raise ValueError(
            "`draws`='auto' plans the iterations from N, which is private under add/remove neighbours (the number "
            "of draws would reveal it). Found neighbouring='add_remove'; give `draws` and `tune` yourself."
        )
    if not steps[0].needs_calibration:
        raise ValueError(
            "`draws`='auto' chooses the iterations and calibrates the noise to them: leave the step's noise unset."
        )


def _auto_iterations(
    steps: list[DPStep],
    model: Any,
    epsilon: float,
    delta: float,
    chains: int,
    tune: int | None,
    earlier: tuple[PrivacyEvent, ...],
    budget: Any = None,
    centring: CentringPlan | None = None,
) -> tuple[int, int, dict[str, Any], float | None]:
    """(tune, draws, plan summary, the chains' μ) for ``draws="auto"`` from :func:`pymc_dp.planning.plan`, on the
    chains' ε: that of their events as the run's own calibration (:func:`_calibrate`) sets them after ``earlier``;
    a centred run's from its centred row (:meth:`pymc_dp.step_methods.centred_plan.CentringPlan.auto_row`)."""
    step = steps[0]
    is_hmc = isinstance(step, DPHMC)
    # The chains' total μ does not depend on their iteration count (Gaussian μ add), so one iteration stands in.
    chain_events = [e for p in _calibrate(steps, 1, epsilon, delta, budget, earlier) for e in p.privacy_events(1)]
    chain_epsilon = compose_epsilon(chain_events, delta)[0]
    chains_mu = sum(e.mu for e in chain_events) if step.anchor is None else None  # a caller's anchor: not per iteration
    if centring is not None:  # the centred row on this run's own μ, pilot noise, B and κ
        chosen = centring.auto_row(step, chains, sum(e.mu for e in chain_events), epsilon, delta)
        recommendation, s, source = chosen.note, centring.prediction_sd, "logistic unit information (2/√N)"
    else:
        the_plan = plan_run(
            model,
            epsilon=chain_epsilon,
            delta=delta,
            chains=chains,
            # Without a posterior sd the plan's b·s is 2√P/√N whatever b: an "auto" bound plans like any other
            # (None: the plan's unit-information guess of the posterior sd, 1/√N, with b = 2√P).
            llr_clip=None if step.llr_clip == "auto" else step.llr_clip,
            grad_clip=(1.0 if step.grad_clip == "auto" else step.grad_clip) if is_hmc else None,
            neighbouring=step.neighbouring,
            n_leapfrog=step.n_leapfrog if is_hmc else 10,
            grad_budget_share=step.grad_budget_share if is_hmc else 0.5,
        )
        chosen = the_plan.method("DPHMC" if is_hmc else "DPPenaltyMH")
        recommendation, s, source = the_plan.recommendation, the_plan.posterior_sd, the_plan.posterior_sd_source
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
        "chain_epsilon": chain_epsilon,
        "iterations": chosen.iterations,
        "expected_ess_per_chain": chosen.expected_ess,
        "usable": chosen.usable,
        "posterior_sd": s,
        "posterior_sd_source": source,
    }
    if not chosen.usable:
        warnings.warn(f"pymc_dp.sample(draws='auto'): {recommendation}.", PoorMixingWarning, stacklevel=3)
    return tune, draws, summary, chains_mu


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


@dataclass
class SamplePlan:
    """One ``pmdp.sample`` run with DP steps, settled before any data access (:func:`plan_sample`).

    Everything here is a function of public settings: the checked arguments, the steps'
    calibrated copies (``planned``), where the chains start, the releases made before the
    chains (a private clip bound, a DPADVI start) and the run's ε, already checked against
    the target and the budget (nothing is charged yet). :func:`pymc_dp.sample` runs it and
    records it.
    """

    run: PrivateRun
    steps: list[DPStep]
    planned: list[DPStep]
    chains: int
    tune: int
    draws: int
    var_names: list[str]
    budget: PrivacyBudget | None
    start: dict[str, Any]
    start_events: tuple[PrivacyEvent, ...]
    earlier: tuple[PrivacyEvent, ...]
    run_epsilon: float
    dp_init: DPADVIStart | None = None
    clip_plan: ClipBoundPlan | None = None
    iterations_plan: dict[str, Any] | None = None
    device: Any = None
    dask_backend: Any = None
    centring: CentringPlan | None = None
    centring_record: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        """The run's name in the budget's ledger."""
        number = len(self.budget.labels) + 1 if self.budget else 1
        return f"run {number}: {self.chains}×({self.tune}+{self.draws})"


def _check_run_settings(
    delta: Any, budget: Any, draws: Any, tune: Any, chains: Any, unused: dict[str, Any], kwargs: dict[str, Any]
) -> tuple[float, int | str, int | None, int]:
    """(delta, draws, tune, chains) checked, after refusing the one-call settings and ``pm.sample`` keywords."""
    for name, value in unused.items():
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
    return delta, draws, tune, chains


def _calibrate(
    steps: list[DPStep], iterations: int, epsilon: float | None, delta: float, budget: Any, earlier: tuple, mu=None
) -> list[DPStep]:
    """Calibrated copies of the steps: unset noise spends the target (or what is left of the budget).

    ``mu``: a lone step's whole μ as this calibration found it for ``draws="auto"`` (it does not depend on the
    iteration count), spread over ``iterations`` without a second search; the run's plan checks it again."""
    if mu is not None:
        planned = [copy.copy(steps[0])]
        planned[0].set_noise_for_mu(mu / iterations)  # rounds towards privacy: never more than `mu` in all
        return planned
    if budget is not None and epsilon is None and any(s.needs_calibration for s in steps):
        # No target for this run: calibrate it to what is left of the budget.
        return calibrate_releasers(steps, iterations, budget.epsilon, budget.delta, budget.events + earlier)
    # a DP start and clip bounds planned in this call are covered by the same target
    return calibrate_releasers(steps, iterations, epsilon, delta, earlier)


def _plan_centring_and_clip_bound(
    steps: list[DPStep],
    model: Any,
    s: dict[str, Any],
    epsilon: float | None,
    delta: float,
    dp_init: Any,
    backends: tuple[Any, Any],
) -> tuple[CentringPlan | None, dict[str, Any], ClipBoundPlan | None]:
    """Whether the run centres (:func:`pymc_dp.step_methods.centred_plan.plan_centring`) and its private clip bound:
    the DPADVI fit's histogram (with a DP start), then the chains' or the anchor's score and Hessian norms'."""
    centring, centring_record = plan_centring(s, steps, model, epsilon, delta, dp_init, backends)
    clip_plan = _plan_clip_bound(
        steps,
        model,
        epsilon,
        delta,
        s["clip_quantile"],
        s["clip_margin"],
        s["clip_epsilon_share"],
        releases=(2 if dp_init is not None else 1) + (1 if centring is not None else 0),  # + the anchor's Hessian
    )
    return centring, centring_record, clip_plan


def plan_sample(step: Any, model: Any, kwargs: dict[str, Any], **settings: Any) -> SamplePlan:
    """Validate and plan one ``pmdp.sample`` run with ``step``, before any data access.

    ``settings`` are :func:`pymc_dp.sample`'s arguments (besides ``step``, ``model`` and the
    ``pm.sample`` keywords ``kwargs``, which gain the chains' starts). Checks every argument,
    the steps and the backend; resolves ``init``; plans (prices, does not run) a DPADVI start
    and a private clip bound; chooses the iterations for ``draws="auto"``; calibrates the
    steps' unset noise on copies and prices every iteration of every chain; refuses a run
    over its target ε or the budget. Nothing is charged and no row is read.
    """
    s = settings
    one_call = {name: s[name] for name in ("y_bounds", "grad_clip")}  # x_bounds: the centring's covariate bounds
    delta, draws, tune, chains = _check_run_settings(
        s["delta"], s["budget"], s["draws"], s["tune"], s["chains"], one_call, kwargs
    )
    steps = _flatten_steps(step)
    neighbouring, n_rows = _check_steps(steps, model)
    init = s["init"]
    dask_backend = _dask_backend(s["backend"], steps, init, kwargs)  # None unless a DaskBackend
    device = None if dask_backend is not None else check_backend(s["backend"], steps, kwargs)  # None: the default
    budget = s["budget"]
    run = PrivateRun(
        "pymc_dp.sample", delta=delta, neighbouring=neighbouring, n_rows=n_rows, epsilon=s["epsilon"], budget=budget
    )
    epsilon = run.epsilon
    var_names = _stored_variables(model, s["var_names"])
    init = check_init(init)
    check_on_poor_mixing(s["on_poor_mixing"])
    initvals = kwargs.get("initvals")
    init, init_reason = _resolve_init(init, steps, model, epsilon, neighbouring, initvals, dask_backend is not None)
    dp_init, iterations_plan, chains_mu = None, None, None
    with_dpadvi = initvals is None and init == "dpadvi"
    if with_dpadvi:
        dp_init = _dpadvi_start(steps, model, n_rows, neighbouring, epsilon, delta, s["init_epsilon_share"], kwargs)
    draws_auto = draws == "auto"
    if draws_auto:
        _check_auto_iterations(steps, epsilon)
    centring, centring_record, clip_plan = _plan_centring_and_clip_bound(
        steps,
        model,
        s,
        epsilon if epsilon is not None else getattr(budget, "epsilon", None),
        delta,
        dp_init,
        (device, dask_backend),
    )
    earlier = (
        (clip_plan.events if clip_plan is not None else ())
        + (dp_init.events if dp_init else ())
        + (centring.events if centring is not None else ())
    )
    if draws_auto:  # planned once, on what the DP start, the clip bound and the anchor leave the chains
        tune, draws, iterations_plan, chains_mu = _auto_iterations(
            steps, model, epsilon, delta, chains, tune, earlier, budget, centring
        )
    start, start_events = _start_provenance(initvals, init, dp_init, model)
    if init_reason is not None:
        start["init"] = init_reason
    if initvals is None and init == "prior":
        kwargs["initvals"] = prior_starts(model, chains, _start_seed(kwargs.get("random_seed")))
    # Calibrate unset noise and price every iteration of every chain, before any data access.
    iterations = chains * (tune + draws)
    planned = _calibrate(steps, iterations, epsilon, delta, budget, earlier, chains_mu)
    run_epsilon = run.plan(
        list(earlier) + [e for p in planned for e in p.privacy_events(iterations)],
        depends_on=start_events,
        advice=lambda: (
            "use more noise, fewer chains or fewer iterations." + _iteration_hint(planned, epsilon, delta, chains)
        ),
    )
    fields = (run, steps, planned, chains, tune, draws, var_names, budget, start, tuple(start_events), earlier)
    later = (run_epsilon, dp_init, clip_plan, iterations_plan, device, dask_backend, centring, centring_record)
    return SamplePlan(*fields, *later)
