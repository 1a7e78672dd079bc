"""``pmdp.sample``: validate → plan → run → record, and ``pmdp.privacy_spent``.

With DP steps, :func:`sample` validates and plans the run (:func:`pymc_dp.sample_plan.plan_sample`:
every public setting checked, the noise calibrated and every release priced before any data
access), runs it (charge, then ``pm.sample`` with the calibrated steps) and records it (the
accountant record and diagnostics on the stripped result). Without a step it runs the route the
planner recommends (:mod:`pymc_dp.routes`).
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np
import pymc as pm
from pymc.model import modelcontext

from pymc_dp._errors import withholds_chains
from pymc_dp._validation import check_unit_interval_open, model_from_context
from pymc_dp.accounting.budget import PrivacyBudget
from pymc_dp.accounting.composition import compose_epsilon
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent, PrivacySpent, event_from_dict
from pymc_dp.accounting.gaussian import gaussian_epsilon
from pymc_dp.backends.jax import attach_backend, backend_record
from pymc_dp.diagnostics import PoorMixingWarning, attach_diagnostics, pymc_convergence_check_replaced
from pymc_dp.mechanisms.centred import widen_for_anchor_noise
from pymc_dp.mechanisms.noise import mechanism_rng
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
from pymc_dp.routes import sample_one_call
from pymc_dp.sample_plan import (
    SamplePlan,
    _flatten_steps,  # noqa: F401 (imported from here by pymc_dp.publish)
    _seeded_noise,
    _start_seed,
    plan_sample,
)
from pymc_dp.starts import public_initial_point
from pymc_dp.step_methods.barker import recorded_barker_releases
from pymc_dp.step_methods.base import DPStep, ProgressAccounting

__all__ = ["PrivateStart", "privacy_spent", "sample", "strip_private_groups", "write_privacy_attrs"]


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
    centre: bool | str = "auto",
    centre_lipschitz: float | None = None,
    rows: dict[str, Any] | None = None,
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
        noise is calibrated by this call. The plan is recorded in ``dp_accountant``. A run
        that centres (``centre`` below) with ``draws`` and ``tune`` both left unset takes
        ``"auto"``'s iterations (issue 36: its per-sampler cap, public settings only); an
        explicit ``draws`` or ``tune`` is kept as given.
    tune : int, optional
        Tuning iterations per chain (default 1000, or the plan's with ``draws="auto"`` and on
        a centred run with ``draws`` unset); accounted like draws.
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
        public N and the steps' clip bound (:func:`pymc_dp.sample_plan.dpadvi_start_settings`)
        and starts each chain at its own draw from the fit with doubled standard deviations
        (over-dispersed);
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
        What happens when the released draws are not a usable posterior (for DP chains R-hat
        above 1.05 or bulk/tail ESS below 100 in all for some variable; on released statistics
        PyMC's own thresholds, R-hat 1.01 and ESS 100 per chain; :mod:`pymc_dp.diagnostics`): a
        :class:`pymc_dp.diagnostics.PoorMixingWarning` that says what to change, a
        :class:`pymc_dp.diagnostics.PoorMixingError` (the priced result is on its
        ``result``), or nothing. The diagnostics are written in every case, and a usable
        result's verdict is logged in one line. With DP steps this verdict replaces PyMC's
        R-hat and ESS messages, whose thresholds would flag nearly every run a DP budget can
        buy for R-hat's own noise (:func:`pymc_dp.diagnostics.pymc_convergence_check_replaced`),
        so that one verdict is shown, not two that contradict each other.
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
        must not be computed from the data. With ``step``, ``x_bounds`` gives the centring's
        κ and anchor clips for a logistic regression (``centre``; rows outside are clipped,
        not clamped); ``y_bounds`` must be None.
    grad_clip : float, optional
        Without ``step``, for the DPADVI route only: its per-row gradient bound (default
        1.0, the planner's assumption); its clipping check flags the result when too many
        rows exceed it. Give it from public knowledge of the per-row score's scale.
    centre : {"auto", True, False, "recentre"}, default "auto"
        With a DPHMC or DPPenaltyMH ``step`` (issue 36, ``docs/centred.md``): centre every
        release on a second-order anchor released at the DP start. ``"auto"`` does so where it
        applies — one such step whose noise this call calibrates, covering every variable, the
        default backend, a DPADVI start (``init="auto"``/``"dpadvi"``) and a logistic
        regression the graph shows (η = intercept + X @ coefficients, free variables on their
        own scale) with ``x_bounds`` or ``centre_lipschitz`` giving κ — and records why not
        elsewhere (``dp_accountant["centring"]``). ``True`` refuses a run where it does not
        apply; ``False`` runs the plain step; ``"recentre"`` is ``True`` plus one more release
        that moves the expansion to the anchor's own Newton point, where the chains sit, paid
        from the anchor's share (the run's ε unchanged; ``docs/centred.md``). The anchor gets
        :data:`pymc_dp.step_methods.centred_plan.CENTRE_ANCHOR_SHARE` of the chains' share of
        ``epsilon``, priced with the run before any row is read
        (:func:`pymc_dp.step_methods.centred_plan.plan_centring`). For a plain ``pm.sample``,
        make the anchor with :func:`pymc_dp.release_anchor`.
    centre_lipschitz : float, optional
        The centred step's κ (a per-row bound on the Lipschitz constant of the Hessian), in
        place of the worst case over ``x_bounds``, B³/(6√3): rows beyond it are clipped (a
        bias, never a privacy loss).
    rows : dict of dask.array.Array, optional
        Without ``step``, for the released-statistics route only: the model's data matrix
        (``"X"``, without the intercept's column) and outcome (``"y"``) as Dask arrays that stay
        on the cluster, for a model built on :func:`pymc_dp.row_placeholder` stand-ins of their
        shape (``docs/dask.md``). N is read from their chunk sizes (public), each partition's
        sums are computed on its worker, and every route that would read the rows in this
        process is refused before anything is charged. With ``step`` it must be None, and a
        model built on placeholders is refused (its zeros would be fitted).
    **kwargs
        Passed to ``pm.sample`` (``random_seed``, ``cores``, ``progressbar``, ...). Without
        ``step``, on the released-statistics route, also ``target_accept`` for its NUTS
        (post-processing; default 0.95 for a grouped release, PyMC's 0.8 otherwise). Start
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
    settings = {
        "epsilon": epsilon,
        "delta": delta,
        "draws": draws,
        "tune": tune,
        "chains": chains,
        "budget": budget,
        "var_names": var_names,
        "init": init,
        "init_epsilon_share": init_epsilon_share,
        "clip_quantile": clip_quantile,
        "clip_margin": clip_margin,
        "clip_epsilon_share": clip_epsilon_share,
        "on_poor_mixing": on_poor_mixing,
        "backend": backend,
        "x_bounds": x_bounds,
        "y_bounds": y_bounds,
        "grad_clip": grad_clip,
    }
    if step is None:
        if centre != "auto" or centre_lipschitz is not None:
            raise ValueError(
                "`centre` and `centre_lipschitz` must be left unset without `step` (they set a DPHMC or DPPenaltyMH "
                f"step's centring). Found centre={centre!r}, centre_lipschitz={centre_lipschitz!r}."
            )
        return sample_one_call(model, sample, {**kwargs, **({} if rows is None else {"rows": rows})}, **settings)
    _refuse_rows_with_step(model, rows, backend)
    settings.update(centre=centre, centre_lipschitz=centre_lipschitz)
    # Validate and plan: nothing read or charged. Each plan gets its own copy of kwargs, so that nothing a first plan
    # writes there carries into the second (review 9); the run takes the copy of the plan it runs.
    planned_kwargs = dict(kwargs)
    the_plan = plan_sample(step, model, planned_kwargs, **settings)
    if the_plan.centring is not None and draws is None and tune is None and epsilon is not None:
        # A centred run at the default iterations takes draws="auto"'s (public settings only: they set the spend).
        planned_kwargs = dict(kwargs)
        the_plan = plan_sample(step, model, planned_kwargs, **{**settings, "draws": "auto"})
    kwargs = planned_kwargs
    idata, clip_record, backend_details = _run(the_plan, step, model, kwargs)  # charge and run
    return _record(the_plan, idata, model, on_poor_mixing, clip_record, backend_details)


def _refuse_rows_with_step(model: Any, rows: Any, backend: Any) -> None:
    """Refuse Dask ``rows``, a model built on row placeholders, and a model of stand-ins of Dask rows
    (``sampler_model``'s copy) without the backend that holds them, with a step (the graph, the backend: nothing read).
    """
    from pymc_dp.backends.dask_rows import holds_row_placeholders
    from pymc_dp.mechanisms.access import reads_partitioned_rows

    if rows is not None:
        raise ValueError(
            "`rows` must be None with `step`: Dask rows are released on the one-call released-statistics route only "
            "(pmdp.sample without a step); the DP samplers read the rows in this process. "
            f"Found rows for {sorted(map(str, rows)) if isinstance(rows, dict) else type(rows).__name__}."
        )
    if holds_row_placeholders(model):
        raise ValueError(
            "`model` must hold its own rows with `step`: it is built on pmdp.row_placeholder stand-ins (zeros), which "
            "the sampler would fit. Found a likelihood that reads a row placeholder; use pmdp.sample without a step "
            'and rows={"X": ..., "y": ...} for rows that stay on a Dask cluster.'
        )
    if reads_partitioned_rows(model) and getattr(backend, "rows", None) is None:
        raise ValueError(
            "`backend` must be a pmdp.DaskBackend holding the rows (rows={...}) for a model built by sampler_model: "
            "its likelihood reads stand-ins of rows held in Dask partitions (zeros), which a run in this process would "
            "fit. "
            f"Found backend={backend!r}."
        )


def _run(the_plan: SamplePlan, step: Any, model: Any, kwargs: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """Charge the planned run and sample it; returns the result, the clip-bound record and the backend's.

    The calibration is committed for this run only and undone when it ends, however it ends;
    a run that PyMC aborts after the charge stays charged.
    """
    p = the_plan
    steps, dp_init, clip_plan, dask_backend = p.steps, p.dp_init, p.clip_plan, p.dask_backend
    detach = attach_backend(p.device, steps)  # compiled before the charge: a failure here charges nothing
    backend_details = {"backend": backend_record(p.device, steps)} if p.device is not None else {}
    if dask_backend is not None:
        backend_details = {"backend": _dask_record(dask_backend)}
    restore = _commit_calibration(steps, p.planned, p.tune, p.draws)
    # the progress bar shows the run's ε so far at the run's δ
    progress = _progress_accounting(p.planned, p.earlier + p.start_events, p.run.delta, p.chains)
    for s, shown in zip(steps, progress):
        s.progress_run = shown
    clip_record = None
    detach_dask = None
    uncentre = None
    try:
        if dask_backend is not None:  # scatter the rows, compile on the workers: nothing released or charged yet
            detach_dask = dask_backend.attach(steps)
        with p.run.releasing(label=p.label):
            # PyMC's default point, whatever `initval`s the model sets (they may come from the data)
            reference = public_initial_point(model) if clip_plan is not None else None
            fit_clip = clip_plan.release(reference, "the model's initial point") if clip_plan and dp_init else None
            if dp_init is not None:
                kwargs["initvals"], reference = dp_init.starts(
                    p.chains, _start_seed(kwargs.get("random_seed")), grad_clip=fit_clip
                )
            if clip_plan is not None and p.centring is None:
                where = "the DPADVI fit's mean" if dp_init is not None else "the model's initial point"
                clip_record = clip_plan.commit(clip_plan.release(reference, where))
            if p.centring is not None:  # the Newton pilots from the DP start, then the anchor; priced in the plan
                # the anchor's clips from the norm histograms at its own point; the chains clip at the centring bounds
                uncentre = p.centring.release(steps[0], reference, clip_plan)
                clip_record = clip_plan.fit_record() if clip_plan is not None else None
                fit = dp_init.settings  # released: q's sds and the fit's expected mean error set the prediction
                offset = fit["fit_diagnostics"].get("expected_mean_error_sd") or 1.0
                p.centring.predict(p.planned[0], p.draws, fit["fit_sd_geometric_mean"], offset)
                names = [v.name for v in steps[0].vars]  # the chains start near the anchor (post-processing)
                seed = _start_seed(kwargs.get("random_seed"))
                kwargs["initvals"] = p.centring.starts(reference, names, p.chains, seed)
                p.start["centring"] = "starts drawn from N(m̂, Σ̂), Σ̂ = (−Ĥ)⁻¹, m̂ = θ̂ + Σ̂Ĝ of the released anchor"
            if getattr(dask_backend, "rows", None) is not None:  # Dask rows: no O(N) data groups built, then deleted
                from pymc_dp.backends.dask_sampler_rows import result_idata_kwargs

                kwargs["idata_kwargs"] = result_idata_kwargs(model, kwargs.get("idata_kwargs"))
            with pymc_convergence_check_replaced():  # the result's own verdict instead (pymc_dp.diagnostics)
                idata = pm.sample(
                    draws=p.draws,
                    tune=p.tune,
                    chains=p.chains,
                    step=step,
                    model=model,
                    var_names=p.var_names,
                    **kwargs,
                )
    finally:
        for s in steps:
            s.forget_private_state()
            s.progress_run = None
        if uncentre is not None:
            uncentre()
        if detach_dask is not None:
            detach_dask()
        restore()
        detach()
        if clip_plan is not None:
            clip_plan.restore()
    return idata, clip_record, backend_details


def _record(
    the_plan: SamplePlan,
    idata: Any,
    model: Any,
    on_poor_mixing: str,
    clip_record: dict[str, Any] | None,
    backend_details: dict[str, Any],
) -> Any:
    """Write the run's record and diagnostics on its result (stripped of what reads data)."""
    p = the_plan
    record = p.run.record(
        start=p.start,
        reproducible_noise=_seeded_noise(p.steps),
        run_epsilon=p.run_epsilon,
        chains=p.chains,
        tune=p.tune,
        draws=p.draws,
        iterations_per_chain=p.tune + p.draws,
        # the run's noise and clip bounds (cleared from `steps`), and the centring anchor it used
        steps=[
            {
                **s.accountant_settings(),
                **(p.clip_plan.bounds if p.clip_plan else {}),
                **({"centring": p.centring.settings()} if p.centring is not None else {}),
            }
            for s in p.planned
        ],
        centring={**p.centring.record(), "widened": True} if p.centring is not None else p.centring_record,
        **({"plan": p.iterations_plan} if p.iterations_plan is not None else {}),
        **({"clip_bound": clip_record} if clip_record is not None else {}),
        **({"dp_init": p.dp_init.settings} if p.dp_init is not None else {}),
        **backend_details,
    )
    chain_draws = None  # a centred run's own chains, before the widening: what its mixing diagnostics read
    if p.centring is not None:
        chain_draws = widen_centred_draws(idata, model, p.centring.anchor, p.steps[0], _seeded_noise(p.steps))
    p.run.publish(idata, model, record)
    clipping = clip_record  # a centred run's: the anchor's clips, read off its released histograms
    if p.centring is not None:
        clipping = p.centring.clipping(p.clip_plan) if p.clip_plan is not None else None
    prediction = p.centring.prediction if p.centring is not None else None
    if prediction is not None and on_poor_mixing != "ignore" and prediction["ess_per_chain"] * p.chains < 100:
        warnings.warn(
            f"pmdp.sample: the centred chains' predicted ESS is {prediction['ess_per_chain'] * p.chains:.3g} in all "
            f"(the anchor {prediction['offset_sd']:.3g} sds from the mode its release estimates): the draws may "
            "cover a target far wider than the posterior even where R-hat and ESS look fine (docs/centred.md). Give "
            "more epsilon, or run with centre=False.",
            PoorMixingWarning,
            stacklevel=3,
        )
    return attach_diagnostics(idata, on_poor_mixing, clipping=clipping, chain_draws=chain_draws)


def widen_centred_draws(idata: Any, model: Any, anchor: Any, step: Any, reproducible: bool) -> dict[str, np.ndarray]:
    """Widen a centred run's draws in place by its anchor's known noise (:func:`widen_for_anchor_noise`).

    A centred chain targets the posterior tilted by the anchor's noise, the same tilt in every
    chain (R-hat cannot see it): its mean is off by about TΣ(η + Ev). Adding independent
    N(0, T²Σ̂SΣ̂) to every draw carries that known uncertainty into the result, so that its
    intervals cover (``docs/centred.md``). Post-processing of released draws with public σ_G,
    σ_H and θ̂: no privacy cost. The added noise comes from OS entropy unless the run's noise is
    reproducible. Returns the chains' own draws of the widened variables (copies, before the
    widening): the result's mixing diagnostics are computed from them, as the added noise would
    hide chains that have not mixed.
    """
    value_to_rv = {value.name: rv for rv, value in model.rvs_to_values.items()}
    rvs = [value_to_rv[name] for name in anchor.var_names]
    transformed = [rv.name for rv in rvs if model.rvs_to_transforms.get(rv) is not None]
    if transformed:  # centring by default applies to untransformed coefficients only (step_methods/centred_plan.py)
        raise RuntimeError(f"cannot widen centred draws of transformed variables {transformed}")
    posterior = idata["posterior"]
    arrays = [posterior[rv.name].values for rv in rvs]
    chains, draws = arrays[0].shape[:2]
    flat = np.concatenate([a.reshape(chains, draws, -1) for a in arrays], axis=-1)
    rng = mechanism_rng(getattr(step, "rng", None), reproducible)
    widened = widen_for_anchor_noise(flat, anchor, temperature=getattr(step, "temperature", 1.0), rng=rng)
    chain_draws = {rv.name: array.copy() for rv, array in zip(rvs, arrays, strict=True)}
    start = 0
    for array in arrays:  # in place: the posterior's own arrays, on both ArviZ lines
        size = int(np.prod(array.shape[2:], dtype=int))
        array[...] = widened[:, :, start : start + size].reshape(array.shape)
        start += size
    return chain_draws


def _progress_accounting(
    planned: list[Any], before: tuple[PrivacyEvent, ...], delta: float, chains: int
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
    return [ProgressAccounting(delta, chains, mu_before, total / mu) for mu in per_iteration]


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
