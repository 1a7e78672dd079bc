"""``pmdp.sample`` without a step: the one-call route the planner recommends, run and recorded.

:func:`sample_one_call` checks the arguments, asks :func:`pymc_dp.plan` for the route
(``Plan.one_call_route``, from public quantities only: the graph, N, P, ε, δ and the chains),
refuses settings the route would ignore, and runs it: the released statistics of a linear,
logistic, Poisson or negative-binomial regression (log link, α a constant of the graph), or of a
linear or logistic regression with varying intercepts by a group index (one cell per group), with
a priced count of the rows the public bounds clip (``clipping_check=True``: the result is flagged
when the share is material), and NUTS on their noise-aware likelihood in a copy of the model's
priors, DPPenaltyMH through :func:`pymc_dp.sample` itself, release-once
(:func:`pymc_dp.release_once` with its ``"auto"`` clip bounds: a priced share of ε releases the
rows' median score and Hessian norms before the Newton releases, all priced before the first row
is read; it flags a result whose bounds clip too many rows), or DPADVI. For a linear regression with
varying intercepts given ``x_bounds``, :func:`pymc_dp.planning.with_linear_route` weighs the grouped release
against :func:`pymc_dp.release_once_linear.release_once_linear` (one release of Σ zzᵀ, noisy Newton steps, NUTS on
the priors) from public quantities (N, G, P, ε, δ, the bounds, σ's prior), and the one call runs the one predicted
narrower (:func:`pymc_dp.route_predictions.linear_route_row`). The result records the
route (``dp_route``, ``dp_accountant["route"]``).

Rows that live on a Dask cluster (``rows={"X": ..., "y": ...}``, Dask arrays; ``docs/dask.md``)
take the released-statistics route or the DPADVI route with the model built on placeholders of
their shape (:func:`pymc_dp.backends.dask_rows.row_placeholder`): each partition's sums (or DPADVI's
clipped batch sums) are computed on the worker that holds it, and every other route, which would
read the rows on the client, is refused before anything is charged.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from pymc_dp._errors import withholds_chains
from pymc_dp._validation import (
    check_bounds_pair,
    check_finite_positive,
    check_nonnegative_int,
    check_positive_int,
    check_unit_interval_open,
)
from pymc_dp.accounting.budget import PrivacyBudget
from pymc_dp.data import data_dependent_deterministics
from pymc_dp.diagnostics import PoorMixingError, PoorMixingWarning, check_on_poor_mixing
from pymc_dp.mechanisms.access import observed_array
from pymc_dp.planning import Plan, with_linear_route
from pymc_dp.planning import plan as plan_run
from pymc_dp.prior import prior_model
from pymc_dp.regression_graph import RegressionParts, regression_parts
from pymc_dp.release_once import release_once
from pymc_dp.results import note_dropped_deterministics, posterior_attrs, write_privacy_attrs
from pymc_dp.route_predictions import RELEASE_ONCE_NEWTON_STEPS, release_anchors
from pymc_dp.sample_plan import _check_sample_kwargs, _stored_variables
from pymc_dp.starts import check_init
from pymc_dp.step_methods.penalty import DPPenaltyMH
from pymc_dp.variational.dpadvi import DPADVI

__all__ = ["ONE_CALL_DPADVI", "ONE_CALL_GRAD_CLIP", "sample_one_call"]

#: pmdp.sample's settings that only the DP sampler route uses, with their defaults.
_SAMPLER_SETTINGS = {
    "init": "auto",
    "init_epsilon_share": 0.2,
    "clip_quantile": 0.95,
    "clip_margin": 2.0,
    "clip_epsilon_share": 0.05,
}
#: pm.sample keywords the DPADVI and release-once routes use (the others configure a sampler they do not run).
_DPADVI_KWARGS = ("random_seed", "progressbar")
#: DPADVI's settings on the one-call route: those the utility benchmark measured (docs/choosing_a_method.md).
ONE_CALL_DPADVI = {"approximation": "meanfield", "optimizer": "adam", "learning_rate": 0.05}
#: DPADVI's per-row gradient bound on the one-call route when none is given: the planner's assumption.
ONE_CALL_GRAD_CLIP = 1.0
#: NUTS's target acceptance on a grouped release unless the caller gives ``target_accept`` (PyMC's 0.8 otherwise):
#: fair_hierarchical (6 groups, non-centred) at ε = 4 had 1–126 divergences in 6 of 6 runs at 0.8, 1 in 3 at 0.95.
GROUPED_TARGET_ACCEPT = 0.95
#: The roles of the Dask arrays ``rows=`` gives: the model's data matrix (without the intercept's column) and outcome.
ROW_ROLES = ("X", "y")


def _check_rows(model: Any, rows: Any) -> dict[str, Any] | None:
    """``rows`` checked from metadata only (kinds, chunk sizes, dtypes): None, or a dict of Dask arrays by role.

    A model built on :func:`~pymc_dp.backends.dask_rows.row_placeholder` arrays needs them: without
    ``rows`` it would be fitted to the placeholders' zeros.
    """
    from pymc_dp.backends.dask_rows import holds_row_placeholders, is_partitioned, partitioned_n_rows
    from pymc_dp.mechanisms.access import reads_partitioned_rows

    if reads_partitioned_rows(model):  # sampler_model's copy: zeros; the one call builds its own from the placeholders
        raise ValueError(
            "`model` must be the model of row placeholders, not sampler_model's copy (its stand-ins hold zeros): "
            'pmdp.sample(epsilon=..., rows={"X": X, "y": y}) on the original model. Found sampler_model\'s copy.'
        )
    if rows is None:
        if holds_row_placeholders(model):
            raise ValueError(
                "`rows` must give the Dask arrays for a model built on pmdp's row placeholders (row_placeholder): "
                'pmdp.sample(epsilon=..., rows={"X": X, "y": y}); without them the zeros would be fitted. Found None.'
            )
        return None
    if not isinstance(rows, dict) or not rows or not set(rows) <= set(ROW_ROLES):
        found = sorted(map(str, rows)) if isinstance(rows, dict) else type(rows).__name__
        raise ValueError(
            '`rows` must be a dict of Dask arrays by role, {"X": covariates, "y": outcome} ("X" only for a model '
            f"with a data matrix), that replace the model's placeholders at the release. Found {found}."
        )
    for role, array in rows.items():
        if not is_partitioned(array):
            raise TypeError(
                f'`rows["{role}"]` must be a Dask array (rows that stay on the cluster); in-memory rows belong in the '
                f"model itself. Found {type(array).__module__}.{type(array).__name__}."
            )
    partitioned_n_rows(tuple(rows.values()))  # dask.array kinds, known chunk sizes, numbers, equal lengths
    return dict(rows)


def _refuse_rows_off_route(rows: dict[str, Any] | None, route: str, reason: str) -> None:
    """Refuse Dask ``rows`` on a route that would read them on the client (all but released statistics and DPADVI)."""
    if rows is not None and route not in ("release_statistics", "DPADVI", "DPPenaltyMH"):
        raise ValueError(
            "`rows` (Dask arrays) can be used only on the released-statistics, DPADVI and DPPenaltyMH routes, whose "
            "sums are computed on the workers: a linear, logistic, Poisson or negative-binomial regression the graph "
            "shows, with x_bounds (and y_bounds), or a model the plan fits with DPADVI or DPPenaltyMH. pmdp.sample "
            f"without a step takes the {route} route here ({reason}), which reads every row in this process "
            f"(release-once does not run on partitions yet); hold the rows in the model to run it. Found rows for "
            f"{sorted(rows)}."
        )


def _check_one_call(model: Any, s: dict[str, Any], kwargs: dict[str, Any]) -> tuple[float, float, Any, Any, int, Any]:
    """(epsilon, delta, draws, tune, chains, grad_clip) checked, with every other argument, before planning."""
    delta, budget, tune, draws, grad_clip = s["delta"], s["budget"], s["tune"], s["draws"], s["grad_clip"]
    if delta is None and isinstance(budget, PrivacyBudget):
        delta = budget.delta
    if delta is None:
        raise ValueError("`delta` must be given (a number in (0, 1), typically below 1/N). Found None.")
    delta = check_unit_interval_open("delta", delta)
    if s["epsilon"] is None:
        raise ValueError(
            "`epsilon` must be given when `step` is not: pmdp.sample chooses the route from it (pmdp.plan). Found None."
        )
    epsilon = check_finite_positive("epsilon", s["epsilon"])
    chains = check_positive_int("chains", s["chains"])
    if tune is not None:
        tune = check_nonnegative_int("tune", tune)
    if draws is not None and not (isinstance(draws, str) and draws == "auto"):
        draws = check_positive_int("draws", draws)
    if budget is not None and not isinstance(budget, PrivacyBudget):
        raise TypeError(f"`budget` must be a pymc_dp.PrivacyBudget. Found {type(budget).__name__}.")
    _check_sample_kwargs(kwargs, nuts_settings=True)  # target_accept: the released-statistics route's NUTS
    if "target_accept" in kwargs:
        kwargs["target_accept"] = check_unit_interval_open("target_accept", kwargs["target_accept"])
    check_on_poor_mixing(s["on_poor_mixing"])
    check_init(s["init"])
    if grad_clip is not None:
        grad_clip = check_finite_positive("grad_clip", grad_clip)
    if s["var_names"] is not None:
        _stored_variables(model, s["var_names"])  # refuses unknown names and deterministics that read data
    return epsilon, delta, draws, tune, chains, grad_clip


def _refuse_unused(route: str, reason: str, s: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """Refuse a setting the chosen route does not use (it would be silently ignored)."""
    unused: dict[str, Any] = {}
    if route != "DPPenaltyMH":
        unused.update({k: s[k] for k, default in _SAMPLER_SETTINGS.items() if s[k] != default})
        if isinstance(s["draws"], str):
            unused["draws"] = s["draws"]
    if route not in ("release_statistics", "release_once_linear"):  # y_bounds: the choice weighed the release by them
        unused.update({k: s[k] for k in ("x_bounds", "y_bounds") if s[k] is not None})
    if route != "DPADVI" and s["grad_clip"] is not None:
        unused["grad_clip"] = s["grad_clip"]
    if route == "release_once":  # independent draws from one Gaussian: no tuning, no sampler, no backend
        unused.update({k: s[k] for k in ("tune", "var_names") if s[k] is not None})
        unused.update({k: v for k, v in kwargs.items() if k not in _DPADVI_KWARGS})
        if s["backend"] not in ("default", None):
            unused["backend"] = s["backend"]
    if route == "release_once_linear":  # NUTS on the priors: its draws, tuning and target_accept; no backend
        unused.update({k: s[k] for k in ("var_names",) if s[k] is not None})
        unused.update({k: v for k, v in kwargs.items() if k not in (*_DPADVI_KWARGS, "target_accept")})
        if s["backend"] not in ("default", None):
            unused["backend"] = s["backend"]
    if route == "DPADVI":
        unused.update({k: s[k] for k in ("tune", "var_names") if s[k] is not None})
        unused.update({k: v for k, v in kwargs.items() if k not in _DPADVI_KWARGS})
    if route == "release_statistics" and s["backend"] not in ("default", None):
        unused["backend"] = s["backend"]
    if (
        route not in ("release_statistics", "release_once_linear", "DPADVI", "release_once")
        and "target_accept" in kwargs
    ):
        unused["target_accept"] = kwargs["target_accept"]  # DPPenaltyMH takes no NUTS setting
    if unused:
        name, value = next(iter(unused.items()))
        raise ValueError(
            f"`{name}` must be left unset: it does not apply to the route pmdp.sample takes without a step here "
            f"({reason}). Found {name}={value!r}; pass step= to run another route."
        )


@withholds_chains
def sample_one_call(model: Any, sample_with_step: Callable[..., Any], kwargs: dict[str, Any], **settings: Any) -> Any:
    """``pmdp.sample`` without a step: run the route :func:`pymc_dp.plan` recommends (public quantities only).

    ``settings`` are :func:`pymc_dp.sample`'s arguments besides ``step``, ``model`` and the
    ``pm.sample`` keywords ``kwargs``; ``sample_with_step`` is :func:`pymc_dp.sample` itself,
    which runs the DPPenaltyMH route. Every argument is checked, and the route's own checks
    run, before its one charge.
    """
    s = dict(settings)
    s["rows"] = _check_rows(model, kwargs.pop("rows", None))  # Dask arrays that replace the model's placeholders
    s["epsilon"], s["delta"], s["draws"], s["tune"], s["chains"], s["grad_clip"] = _check_one_call(model, s, kwargs)
    the_plan = plan_run(model, epsilon=s["epsilon"], delta=s["delta"], chains=s["chains"], grad_clip=s["grad_clip"])
    # A (grouped) linear regression with x_bounds: the release or release_once_linear, as predicted (bounds checked).
    the_plan = with_linear_route(the_plan, regression_parts(model), s["x_bounds"], s["y_bounds"])
    route = the_plan.one_call_route
    if route is None:
        raise ValueError(
            "`epsilon` must buy a usable posterior of this model by some route. pmdp.plan: "
            f"{the_plan.one_call_reason}. Found epsilon={s['epsilon']!r} at N = {the_plan.n_rows}."
        )
    _refuse_rows_off_route(s["rows"], route, the_plan.one_call_reason)  # the rows would be read in this process
    _refuse_unused(route, the_plan.one_call_reason, s, kwargs)
    record = {
        "name": route,
        "reason": the_plan.one_call_reason,
        "chosen_from": "pmdp.plan's recommendation: the graph, N, P, epsilon, delta, chains and bounds (public)",
    }
    try:
        if route == "release_statistics":
            idata = _release_route(model, the_plan, s, record, kwargs)
        elif route == "DPADVI":
            idata = _dpadvi_route(model, the_plan, s, kwargs)
        elif route == "release_once":
            idata = _release_once_route(model, s, kwargs)
        elif route == "release_once_linear":
            idata = _release_once_linear_route(model, s, kwargs)
        else:
            idata = _penalty_route(model, sample_with_step, s, kwargs)
    except PoorMixingError as error:  # the priced result rides on the error: it says its route too
        _record_route(error.result, record)
        raise
    return _record_route(idata, record)


def _release_settings(parts: RegressionParts, x_bounds: Any, y_bounds: Any) -> tuple[dict[str, Any], Any]:
    """The release's settings from the public bounds (checked), and the family they describe (reads nothing).

    Ungrouped regressions take the intercept as a column of ones with bounds (1, 1) (linear and logistic
    regressions without an intercept too, its coefficient fixed at 0: :func:`_releases_ones_column`); a grouped
    one folds it into the group intercepts, and its settings carry ``n_groups`` (G, the static
    length of the group effects: public) and the covariates' bounds alone.
    """
    from pymc_dp.exponential_family.families import get_family
    from pymc_dp.exponential_family.grouped import grouped_family

    family, base, grouped = parts.family, parts.base, parts.groups is not None
    linear, counts = base == "linear_regression", base in ("poisson_regression", "negative_binomial_regression")
    width = 0 if parts.matrix is None else parts.matrix.type.shape[1]
    if width is None:  # a pm.Data container's static shape may be unknown: its column count is public
        width = int(parts.matrix.shape[1].eval())
    if x_bounds is None and width:
        raise ValueError(
            f"`x_bounds` must be given for the released-statistics route ({family}): public (lower, upper) bounds of "
            f"each of the data matrix's {width} columns. Found None."
        )
    if x_bounds is not None and not width:
        raise ValueError(f"`x_bounds` must be None for a {family} without covariates. Found {x_bounds!r}.")
    if (linear or counts) and y_bounds is None:
        what = "(0, y_max), the public bound the counts are clipped to" if counts else "bounds of the outcome"
        raise ValueError(
            f"`y_bounds` must be given for the released-statistics route ({family}): public (lower, upper) {what}. "
            "Found None."
        )
    if not (linear or counts) and y_bounds is not None:
        raise ValueError(
            f"`y_bounds` must be None for a logistic regression (its outcome is 0 or 1). Found {y_bounds!r}."
        )
    settings: dict[str, Any] = {}
    if width:
        lower, upper = check_bounds_pair("x_bounds", x_bounds, width)
        if _releases_ones_column(parts):  # the intercept's column (or one whose coefficient is fixed at 0)
            lower, upper = np.concatenate([[1.0], lower]), np.concatenate([[1.0], upper])
        settings.update(n_features=lower.size, x_bounds=(lower.tolist(), upper.tolist()))
    elif not grouped:  # only an intercept: one column of ones
        settings.update(n_features=1, x_bounds=([1.0], [1.0]))
    if linear:
        y_lower, y_upper = check_bounds_pair("y_bounds", y_bounds, 1)
        settings["y_bounds"] = (float(y_lower[0]), float(y_upper[0]))
    if counts:
        y_lower, y_upper = check_bounds_pair("y_bounds", y_bounds, 1)
        if y_lower[0] != 0.0 or y_upper[0] < 1.0 or y_upper[0] != round(y_upper[0]):
            raise ValueError(
                f"`y_bounds` must be (0, y_max) with y_max a positive integer for a {base.replace('_', ' ')} (counts "
                f"are clipped to 0..y_max). Found {y_bounds!r}."
            )
        settings["y_max"] = int(y_upper[0])
    if base == "negative_binomial_regression":
        settings["alpha"] = parts.dispersion  # a constant of the graph: public
    if grouped:
        settings = {"n_groups": parts.n_groups, "n_features": width, **settings}
        return settings, grouped_family(base, **settings)  # checks the settings
    return settings, get_family(family, **settings)  # checks the settings


def _releases_ones_column(parts: RegressionParts) -> bool:
    """Whether an ungrouped release carries a column of ones (bounds (1, 1); from the graph: reads nothing).

    The intercept's column, and for a linear or logistic regression without an intercept a column
    whose coefficient the likelihood fixes at 0: its released sums Σxⱼ are what identify the
    covariates' means in the noise-aware likelihood's Gaussian covariate model. Without them the
    means are read through Σ xxᵀ = N(Σₓ + μₓμₓᵀ) alone, a ridge along which NUTS crawled (logistic,
    N = 5,000, P = 3, ε = 4: step size 0.015, tree depth 7.5, 10–16 divergences per chain, chains
    apart; with the column: step size 0.5–1.3, depth 2.9, none, 8× faster). The column costs
    a little noise (its sums widen the sensitivity), not ε.
    """
    if parts.groups is not None:  # a grouped cell always holds its group's Σx
        return False
    return parts.intercept is not None or parts.base in ("linear_regression", "logistic_regression")


def _likelihood_parameters(model: Any, prior: Any, parts: RegressionParts) -> dict[str, Any]:
    """The noise-aware likelihood's parameters on ``prior``'s variables: the model's coefficients (``beta``),
    intercept, group effects (``alpha``, with the intercept added, for a grouped release) and σ graphs with its free
    variables replaced."""
    import pytensor.tensor as pt
    from pytensor.graph.replace import graph_replace

    to_prior = {rv: prior[rv.name] for rv in model.free_RVs}
    names = ("coefficients", "intercept", "sigma", "group_effects")
    pieces = {k: getattr(parts, k) for k in names if getattr(parts, k) is not None}
    replaced = dict(zip(pieces, graph_replace(list(pieces.values()), to_prior, strict=False), strict=True))
    params: dict[str, Any] = {}
    if "coefficients" in replaced:
        params["beta"] = replaced["coefficients"]
    if parts.groups is not None:
        params["alpha"] = replaced["group_effects"] + replaced.get("intercept", 0.0)
    elif "intercept" in replaced:
        params["beta"] = pt.concatenate([pt.atleast_1d(replaced["intercept"]), params.get("beta", pt.zeros(0))])
    elif _releases_ones_column(parts):  # the ones column's coefficient is fixed at 0: the model has no intercept
        params["beta"] = pt.concatenate([pt.zeros(1), params["beta"]])
    if parts.base == "linear_regression":
        params["sigma"] = replaced["sigma"]
    return params


def _release_route(
    model: Any, the_plan: Plan, s: dict[str, Any], record: dict[str, Any], kwargs: dict[str, Any]
) -> Any:
    """Release the regression's statistics once (:func:`pymc_dp.release_statistics`), then NUTS on their
    noise-aware likelihood in a copy of the model's priors. Everything is checked before the release."""
    from pymc_dp.accounting.calibrate import noise_multiplier_for_target
    from pymc_dp.data import check_prior_reads_no_data
    from pymc_dp.exponential_family import release_statistics

    parts = regression_parts(model)
    family, epsilon, delta = parts.family, s["epsilon"], s["delta"]
    n_rows = the_plan.n_rows  # N, read from the data's shape by the plan
    settings, fam = _release_settings(parts, s["x_bounds"], s["y_bounds"])
    # The mechanism whose noise variance is the smaller at these public bounds (the planner's rule).
    tau = noise_multiplier_for_target(epsilon, delta, 1)
    gaussian = (tau * fam.l2_sensitivity()) ** 2 < 2.0 * (fam.l1_sensitivity() / epsilon) ** 2
    noise = {"mechanism": "gaussian", "delta": delta} if gaussian else {"mechanism": "laplace"}
    # Public N and ε only (the planner's row says the same); a grouped release takes no anchors.
    anchors = 0 if parts.groups is not None else release_anchors(family, n_rows, epsilon)

    # The priors, and the likelihood's parameters on them, before anything is released.
    prior = prior_model(model, parts.outcome)
    check_prior_reads_no_data(prior, n_rows)
    if s["var_names"] is None:  # the copy holds no deterministic that reads data: say which are left out
        note_dropped_deterministics(data_dependent_deterministics(model))
    params = _likelihood_parameters(model, prior, parts)
    name = parts.outcome.name
    while any(n == name or n.startswith(f"{name}_") for n in prior.named_vars):
        name = f"{name}_release"
    data = _release_data(model, parts, n_rows, s["rows"])
    release = release_statistics(  # the one access to the rows, charged once
        parts.base if parts.groups is not None else family,
        data,
        epsilon=epsilon,
        budget=s["budget"],
        covariate_anchors=anchors,
        clipping_check=True,  # a priced count of the rows the bounds clip; flags the result when material
        **noise,
        **settings,
    )
    record.update(family=family, mechanism=noise["mechanism"], covariate_anchors=anchors, likelihood=name)
    if s["rows"] is not None:
        record["rows"] = "Dask arrays: each partition's sums computed on the worker that holds it"
    with prior:
        release.likelihood(name, **params)
    run = {"draws": s["draws"] or 1000, "tune": 1000 if s["tune"] is None else s["tune"], "chains": s["chains"]}
    if parts.groups is not None:  # group effects: PyMC's usual advice against divergences, unless the caller chose
        run["target_accept"] = kwargs.pop("target_accept", GROUPED_TARGET_ACCEPT)
        record["target_accept"] = run["target_accept"]
    if s["var_names"] is not None:
        run["var_names"] = list(s["var_names"])
    return release.sample(model=prior, on_poor_mixing=s["on_poor_mixing"], **run, **kwargs)


def _release_data(model: Any, parts: RegressionParts, n_rows: int, rows: dict[str, Any] | None) -> tuple:
    """The release's rows: the model's data (in memory), or the Dask ``rows`` in place of its placeholders.

    Dask rows are checked against the model's placeholders from metadata only (roles, shapes, N
    from the chunk sizes), before anything is charged; the intercept's column of ones is then
    made partition by partition on the workers.
    """
    if rows is not None:
        return _partitioned_data(parts, n_rows, rows)
    design = None if parts.matrix is None else observed_array(parts.matrix)
    outcome = observed_array(model.rvs_to_values[parts.outcome])
    if parts.groups is not None:  # (X, y, groups); the intercept is in the group intercepts
        return (design, outcome, observed_array(parts.groups))
    if _releases_ones_column(parts):
        return (np.ones((n_rows, 1)) if design is None else np.column_stack([np.ones(n_rows), design]), outcome)
    return (design, outcome)


def _partitioned_data(parts: RegressionParts, n_rows: int, rows: dict[str, Any]) -> tuple:
    """(X, y) from Dask ``rows`` that match the model's placeholders (metadata only; nothing read, nothing charged)."""
    from pymc_dp.backends.dask_rows import partitioned_n_rows, with_ones_column

    if parts.groups is not None:
        raise ValueError(
            "`rows` (Dask arrays) must be left unset for a regression with varying intercepts: the grouped release "
            f"does not run on partitions yet. Found rows for {sorted(rows)}."
        )
    needed = {"y"} | ({"X"} if parts.matrix is not None else set())
    if set(rows) != needed:
        raise ValueError(
            f"`rows` must give the model's {' and '.join(sorted(needed))} (the data matrix as 'X', without the "
            f"intercept's column, and the outcome as 'y'). Found {sorted(rows)}."
        )
    found = partitioned_n_rows(tuple(rows.values()))
    if found != n_rows:  # N is public under substitute neighbours: both numbers may be shown
        raise ValueError(
            f"`rows` must hold as many rows as the model's placeholders (N = {n_rows}, public). Found {found} rows in "
            "the Dask arrays' chunk sizes."
        )
    y = rows["y"]
    if y.ndim != 1:
        raise ValueError(f'`rows["y"]` must be one-dimensional (one outcome per row). Found shape {y.shape}.')
    x = rows.get("X")
    if x is not None:
        width = parts.matrix.type.shape[1]
        width = int(parts.matrix.shape[1].eval()) if width is None else width  # a pm.Data container's: public
        if x.ndim != 2 or x.shape[1] != width:
            raise ValueError(
                f'`rows["X"]` must be (N, {width}), the shape of the model\'s data matrix. Found shape {x.shape}.'
            )
    if _releases_ones_column(parts):
        return (with_ones_column(x, n_rows, y), y)
    return (x, y)


def _release_once_route(model: Any, s: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    """:func:`pymc_dp.release_once` with ``"auto"`` clip bounds and the planner's 6 anchors, priced before any row is
    read; flagged as its diagnostics say (``on_poor_mixing``)."""
    seed = kwargs.get("random_seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
        raise TypeError(f"`random_seed` must be an int or None on the release-once route. Found {type(seed).__name__}.")
    on_poor_mixing = s["on_poor_mixing"]
    with warnings.catch_warnings():
        if on_poor_mixing != "warn":  # said once below ("raise") or not at all ("ignore")
            warnings.simplefilter("ignore", PoorMixingWarning)
        idata = release_once(
            model,
            newton_steps=RELEASE_ONCE_NEWTON_STEPS,
            epsilon=s["epsilon"],
            delta=s["delta"],
            draws=s["draws"] or 1000,
            chains=s["chains"],
            budget=s["budget"],
            random_seed=None if seed is None else int(seed),
        )
    diagnostics = json.loads(posterior_attrs(idata)["dp_diagnostics"])
    if on_poor_mixing == "raise" and diagnostics.get("usable") is False:
        raise PoorMixingError(str(diagnostics["reasons"][0]), idata)
    return idata


def _release_once_linear_route(model: Any, s: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    """:func:`pymc_dp.release_once_linear.release_once_linear` at its defaults with the call's ``x_bounds``, draws,
    tuning, chains, ``target_accept``, budget and seed; every release priced before any row is read. Flagged (a
    warning, or with ``on_poor_mixing="raise"`` a PoorMixingError carrying the result) as its checks say."""
    from pymc_dp.release_once_linear import release_once_linear

    seed = kwargs.get("random_seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
        raise TypeError(f"`random_seed` must be an int or None on the release-once route. Found {type(seed).__name__}.")
    nuts = {"target_accept": kwargs["target_accept"]} if "target_accept" in kwargs else {}
    return release_once_linear(
        model, epsilon=s["epsilon"], delta=s["delta"], x_bounds=s["x_bounds"], draws=s["draws"] or 1000,
        tune=1000 if s["tune"] is None else s["tune"], chains=s["chains"], budget=s["budget"],
        on_poor_mixing=s["on_poor_mixing"], random_seed=None if seed is None else int(seed), **nuts,
    )  # fmt: skip


def _penalty_route(model: Any, sample_with_step: Callable[..., Any], s: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    """DPPenaltyMH through :func:`pymc_dp.sample`; on Dask ``rows``, its step built in ``sampler_model``'s copy and run
    on a DaskBackend holding them (every release on the workers' blocks, after the charge)."""
    passed = (*_SAMPLER_SETTINGS, "epsilon", "delta", "tune", "chains", "budget", "var_names", "on_poor_mixing")
    backend = s["backend"]
    if s["rows"] is not None:
        from pymc_dp.backends.dask_sampler_rows import sampler_model

        backend = _rows_backend(s)  # a DaskBackend holding the rows, on the call's client or the open one
        model = sampler_model(model, backend.rows)  # metadata only: nothing read or charged
    return sample_with_step(
        step=DPPenaltyMH(model=model),
        draws="auto" if s["draws"] is None else s["draws"],
        model=model,
        backend=backend,
        **{k: s[k] for k in passed},
        **kwargs,
    )


def _rows_backend(s: dict[str, Any]) -> Any:
    """The DPADVI and DPPenaltyMH routes' backend: the call's, or for Dask ``rows`` a DaskBackend holding them."""
    if s["rows"] is None:
        return "default" if s["backend"] is None else s["backend"]
    from pymc_dp.backends.dask_partitions import dpadvi_route_backend

    return dpadvi_route_backend(s["backend"], s["rows"])


def _dpadvi_route(model: Any, the_plan: Plan, s: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    """DPADVI at the plan's iterations and sampling rate; draws from its widened fit, flagged as it says."""
    planned = the_plan.method("DPADVI")
    seed = kwargs.get("random_seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
        raise TypeError(f"`random_seed` must be an int or None on the DPADVI route. Found {type(seed).__name__}.")
    fit = DPADVI(
        epsilon=s["epsilon"],
        delta=s["delta"],
        sampling_rate=planned.noise["sampling_rate"],
        grad_clip=ONE_CALL_GRAD_CLIP if s["grad_clip"] is None else s["grad_clip"],
        budget=s["budget"],
        model=model,
        random_seed=None if seed is None else int(seed),
        backend=_rows_backend(s),
        **ONE_CALL_DPADVI,
    )
    fit.prepare(model)  # DPADVI's model checks: before the charge
    approx = fit.fit(planned.iterations, progressbar=bool(kwargs.get("progressbar", True)))
    on_poor_mixing = s["on_poor_mixing"]
    with warnings.catch_warnings():
        if on_poor_mixing != "warn":  # said once below ("raise") or not at all ("ignore")
            warnings.simplefilter("ignore", PoorMixingWarning)
        idata = approx.sample(s["draws"] or 1000, random_seed=seed)
    diagnostics = json.loads(posterior_attrs(idata)["dp_diagnostics"])
    if on_poor_mixing == "raise" and diagnostics.get("usable") is False:
        raise PoorMixingError(str(diagnostics["reasons"][0]), idata)
    return idata


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
