"""The PyMC/ArviZ workflow on a private result: predictions on public data only.

``pm.sample_posterior_predictive(idata)`` on a DP result simulates from the model's *current*
data. With the training covariates (or the observed rows' ``pm.Data``) still in the model,
those draws are computed from the raw rows: they are not covered by ε. With new, public
covariates, the same call is post-processing of the DP draws and costs nothing.
:func:`sample_posterior_predictive` is the safe path: it takes the public data explicitly,
applies them to a clone of the model (the caller's model is not changed), refuses a
predictive graph that would still read anything but those data, the posterior draws and
the prior's own constants, and returns only the predictive group.

A plain ``pm.sample_posterior_predictive`` call on a DP result is not refused (PyMC's
function is not changed), but it is named at the moment it runs: importing ``pymc_dp``
adds :data:`TRAINING_ROWS_GUARD`, a :class:`logging.Filter`, to the logger of
``pymc.sampling.forward``. When PyMC logs its ``Sampling: [...]`` line, the filter looks at
that call's arguments (the trace and the model) and, when the trace is a private result
(its posterior carries ``dp_accountant``) and the variables it simulates read the model's
data arrays beyond their shapes, raises a :class:`TrainingRowsWarning` naming those arrays
(names only, never values). It always lets PyMC's record through and changes nothing for
results without a privacy record. It speaks only where PyMC's INFO messages are on (the
default, unless logging was configured before PyMC was imported);
``logging.getLogger("pymc.sampling.forward").removeFilter(pymc_dp.workflow.TRAINING_ROWS_GUARD)``
removes it.

This module reads no data: it inspects model graphs and replaces data containers by values
the caller declares public.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import warnings
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

import numpy as np
import pymc as pm
from pymc.model import modelcontext
from pymc.model.fgraph import clone_model
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.graph.replace import graph_replace
from pytensor.graph.traversal import ancestors
from pytensor.tensor.basic import Alloc
from pytensor.tensor.random.op import RandomVariable
from pytensor.tensor.shape import Reshape, Shape, Shape_i, SpecifyShape

from pymc_dp.results import check_publishable, group_names, posterior_attrs

__all__ = [
    "PREDICTIVE_GROUPS",
    "TRAINING_ROWS_GUARD",
    "TrainingRowsWarning",
    "data_read_by",
    "sample_posterior_predictive",
]

#: The groups :func:`sample_posterior_predictive` returns (everything else is dropped).
PREDICTIVE_GROUPS = ("posterior_predictive", "predictions")


def _roots(outputs: Sequence[Variable]) -> list[Variable]:
    return [v for v in ancestors(list(outputs)) if v.owner is None]


def _is_rng(var: Variable) -> bool:
    return "RandomGenerator" in type(var.type).__name__ or "RandomState" in type(var.type).__name__


def sample_posterior_predictive(
    result: Any,
    model: Any = None,
    *,
    data: Mapping[str, Any],
    coords: Mapping[str, Any] | None = None,
    var_names: Sequence[str] | None = None,
    predictions: bool = True,
    **kwargs: Any,
) -> Any:
    """Posterior predictive draws of a private result on new, public data (post-processing only).

    Parameters
    ----------
    result : InferenceData or DataTree
        A published private result (it carries ``dp_accountant``): from
        :func:`pymc_dp.sample`, a DPADVI approximation's ``sample``, released statistics, or
        :func:`pymc_dp.publish`.
    model : pm.Model, optional
        The model the result was sampled from (from the context if omitted). It is not
        changed: the data are set on a clone.
    data : dict of str to array
        New values for **every** ``pm.Data`` container of the model, by name: public
        covariates (rows that are not the training rows, e.g. a prediction grid) and, for an
        observed variable's container, an array of the new number of rows (its values are
        not used by the forward simulation). You declare these values public.
    coords : dict, optional
        New coordinates for dimensions whose length changes (as ``pm.set_data``'s).
    var_names : list of str, optional
        Variables to simulate (default: the observed variables).
    predictions : bool, default True
        Name the group ``predictions`` (out-of-sample, as ``pm.sample_posterior_predictive``
        with ``predictions=True``); ``False`` names it ``posterior_predictive``.
    **kwargs
        Passed to ``pm.sample_posterior_predictive`` (``random_seed``, ``progressbar``, ...).

    Returns
    -------
    InferenceData or DataTree
        The predictive group only: no ``observed_data`` or ``constant_data`` group.

    Raises
    ------
    ValueError
        When ``result`` carries no privacy record; when ``data`` misses a container of the
        model, names something that is not one, or is empty; when an observed variable's data
        is not a ``pm.Data`` container (its rows would be the training rows); when the
        predictive graph of a requested variable reads an array constant that the prior does
        not use (training covariates given to the model as a NumPy array). Nothing is run.
    pymc_dp.UnpublishableResultError
        When ``result`` holds what reads the data.

    Notes
    -----
    Neighbouring relation: that of ``result``; the draws are post-processing of ``result``
    and of the public ``data``, so they cost no privacy (Dwork and Roth 2014, Prop. 2.1) —
    provided the values in ``data`` are public, which this function cannot check: do not
    pass the training rows, or values computed from them. ``pm.sample_posterior_predictive``
    called directly on a DP result with the training data still in the model reads the raw
    rows and is not covered by ε.

    References
    ----------
    .. [1] Dwork, C. and Roth, A. (2014). The algorithmic foundations of differential privacy.
       Foundations and Trends in TCS 9(3–4), Proposition 2.1 (post-processing).
    """
    if "posterior" not in group_names(result) or "dp_accountant" not in posterior_attrs(result):
        raise ValueError(
            "`result` must be a published private result (it carries dp_accountant): sample with pymc_dp.sample "
            "or publish a plain pm.sample result with pymc_dp.publish. Found none."
        )
    model = modelcontext(model)
    check_publishable(result, model)
    if not isinstance(data, Mapping) or not data:
        raise ValueError(
            "`data` must be a non-empty dict giving new, public values for the model's pm.Data containers "
            f"(predictions on the training rows read the raw data). Found {data!r}."
        )
    containers = {v.name for v in model.data_vars}
    unknown = sorted(set(data) - containers)
    if unknown:
        raise ValueError(f"`data` must name pm.Data containers of the model ({sorted(containers)}). Found {unknown}.")
    missing = sorted(containers - set(data))
    if missing:
        raise ValueError(
            f"`data` must give new values for every pm.Data container of the model: {missing} would keep their "
            "training rows. Found values for "
            f"{sorted(data)}."
        )
    for rv in model.observed_RVs:
        observed = model.rvs_to_values[rv]
        if not isinstance(observed, SharedVariable):
            raise ValueError(
                f"`model` must hold the observed data of `{rv.name}` in a pm.Data container: its rows are fixed "
                "to the training rows, and predictions of its shape or values would read them. Found a constant "
                "array."
            )
    names = list(var_names) if var_names is not None else [rv.name for rv in model.observed_RVs]
    if not names:
        raise ValueError(
            "`var_names` must be given when the model has no observed variables (nothing to predict by default). "
            "Found None."
        )
    bad = [n for n in names if n not in model.named_vars]
    if bad:
        raise ValueError(f"`var_names` must name variables of the model. Found {bad}.")

    clone = clone_model(model)
    pm.set_data({k: np.asarray(v) for k, v in data.items()}, model=clone, coords=coords)
    _check_reads_only_public(clone, names)
    kwargs.pop("extend_inferencedata", None)
    declared = _DECLARED_PUBLIC.set(True)  # the clone's data are the caller's public values, checked above
    try:
        predictive = pm.sample_posterior_predictive(
            result, model=clone, var_names=names, predictions=predictions, extend_inferencedata=False, **kwargs
        )
    finally:
        _DECLARED_PUBLIC.reset(declared)
    keep = "predictions" if predictions else "posterior_predictive"
    for name in group_names(predictive):
        if name != keep:
            del predictive[name]
    return predictive


def _check_reads_only_public(model: Any, names: Sequence[str]) -> None:
    """Refuse a predictive graph that reads an array other than the public data, the prior's constants or sizes."""
    free_values = {rv: model.rvs_to_values[rv] for rv in model.free_RVs}
    allowed = set(model.data_vars) | set(model.dim_lengths.values()) | set(free_values.values())
    prior = model.logp(vars=model.free_RVs, jacobian=True)
    prior_constants = {id(v) for v in _roots([prior]) if isinstance(v, Constant | SharedVariable)}
    for name in names:
        var = model[name]
        [graph] = graph_replace([var], free_values, strict=False)
        for root in _roots([graph]):
            if root in allowed or _is_rng(root) or id(root) in prior_constants:
                continue
            if isinstance(root, Constant) and root.ndim == 0:
                continue
            raise ValueError(
                f"`{name}` must be simulated from public data only: its graph reads an array that is not a pm.Data "
                "container (training covariates given as a NumPy array, or an explicit size) nor a constant of the "
                "prior. Put covariates in pm.Data and pass new values in `data`. Found "
                f"{'a ' + type(root).__name__}."
            )


# -- a plain pm.sample_posterior_predictive on a DP result: named when it runs ----------------------
class TrainingRowsWarning(UserWarning):
    """A plain PyMC call on a private result reads the model's data: its output is not covered by ε.

    Raised (by :data:`TRAINING_ROWS_GUARD`) when ``pm.sample_posterior_predictive`` simulates
    from a result that carries ``dp_accountant`` with a model whose data arrays its draws read:
    with the training rows still in the model, every draw is a function of the raw rows. Use
    :func:`sample_posterior_predictive` with new, public data instead; its draws are
    post-processing of the result.
    """


#: True inside :func:`sample_posterior_predictive`, whose data the caller declared public.
_DECLARED_PUBLIC: contextvars.ContextVar[bool] = contextvars.ContextVar("pymc_dp_declared_public", default=False)
_FORWARD = "pymc.sampling.forward"
#: What PyMC's forward sampler compiles, by PyMC line: PyMC 5 ``vars_to_sample``, PyMC 6 ``vars_to_evaluate``.
_OUTPUT_LOCALS = ("vars_to_sample", "vars_to_evaluate")
_SHAPE_OPS = (Shape, Shape_i)


def _size_inputs(node: Any) -> list[Variable]:
    """The inputs of ``node`` that are sizes, not values (a draw's ``size``, a reshape's or alloc's shape)."""
    if isinstance(node.op, RandomVariable):
        return [node.op.size_param(node)]
    if isinstance(node.op, Reshape | SpecifyShape | Alloc):
        return list(node.inputs[1:])
    return []


def _forward_call() -> tuple[FrameType, int] | None:
    """PyMC's ``sample_posterior_predictive`` frame above the caller, and its stack level from the caller."""
    frame, level = sys._getframe(2), 2
    while frame is not None:
        if frame.f_code.co_name == "sample_posterior_predictive" and frame.f_globals.get("__name__") == _FORWARD:
            return frame, level
        frame, level = frame.f_back, level + 1
    return None


def _is_private(result: Any, trace: Any) -> bool:
    """Whether the trace PyMC was given is a private result (by its record, as pmdp.privacy_spent reads it)."""
    posterior = getattr(result, "posterior", None)  # None: no result, or its posterior group given alone
    return "dp_accountant" in (getattr(trace if posterior is None else posterior, "attrs", None) or {})


def data_read_by(model: Any, outputs: Sequence[Variable]) -> list[str]:
    """What the forward graph of ``outputs`` reads of ``model``'s data beyond shapes (names, never values).

    The model's ``pm.Data`` containers by name, and arrays given to the model as NumPy arrays
    (constants that the prior does not use); the free variables are taken from the trace, so
    their priors' constants are not data. An array read only through its shape (N, public) is
    not counted, nor a constant that is a size (a draw's ``size``, a reshape's shape).
    """
    free_values = {rv: model.rvs_to_values[rv] for rv in model.free_RVs}
    graphs = graph_replace(list(outputs), free_values, strict=False)
    prior = model.logp(vars=model.free_RVs, jacobian=True)
    prior_constants = {id(v) for v in _roots([prior]) if isinstance(v, Constant | SharedVariable)}
    containers = set(model.data_vars)
    found: set[str] = set()
    for var in ancestors(graphs):
        node = var.owner
        if node is None or isinstance(node.op, _SHAPE_OPS):
            continue
        sizes = _size_inputs(node)
        for arg in node.inputs:
            if arg.owner is not None or _is_rng(arg) or id(arg) in prior_constants or any(arg is v for v in sizes):
                continue
            if arg in containers:
                found.add(f"pm.Data `{arg.name}`")
            elif isinstance(arg, Constant | SharedVariable) and getattr(arg.type, "ndim", 0) > 0:
                found.add("an array given to the model as a NumPy array")
    return sorted(found)


def _training_rows_read(frame: FrameType) -> list[str]:
    local = frame.f_locals
    if not _is_private(local.get("idata"), local.get("trace")):
        return []
    model = local.get("model")
    outputs = next((local[name] for name in _OUTPUT_LOCALS if local.get(name)), None)
    if not isinstance(model, pm.Model) or not outputs:
        return []
    return data_read_by(model, outputs)


class _TrainingRowsGuard(logging.Filter):
    """Warns when PyMC's forward sampler is about to simulate from a private result on the model's data."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.funcName != "sample_posterior_predictive" or _DECLARED_PUBLIC.get():
            return True
        try:
            call = _forward_call()
            reads = _training_rows_read(call[0]) if call is not None else []
        except Exception:  # an unforeseen PyMC line: say nothing rather than break PyMC's call
            return True
        if reads:
            warnings.warn(
                "pm.sample_posterior_predictive is simulating from a private result (it carries dp_accountant) with "
                f"the model's data: the draws read {', '.join(reads)}. Unless these now hold new, public values (set "
                "with pm.set_data), the draws are computed from the raw training rows and no ε covers them: do not "
                "publish them. For predictions that ε covers, call pymc_dp.sample_posterior_predictive(idata, model, "
                "data={...}) with public data (docs/workflow.md).",
                TrainingRowsWarning,
                stacklevel=call[1] + 1,  # the line that called pm.sample_posterior_predictive
            )
        return True


#: The filter on ``pymc.sampling.forward``'s logger that raises :class:`TrainingRowsWarning` (see the module's text).
TRAINING_ROWS_GUARD = _TrainingRowsGuard()
logging.getLogger(_FORWARD).addFilter(TRAINING_ROWS_GUARD)

#: The message patterns of PyTensor's own filters of two Numba warnings about its compiled functions
#: (its ``pytensor/link/numba/dispatch/basic.py``, PyTensor 2.38 and 3.3): "Cannot cache compiled
#: function "numba_funcified_fgraph..." as it uses dynamic globals" (a graph holding an array over 1 MB
#: as a constant, such as covariates given as a NumPy array, is compiled again in each process instead
#: of loaded from Numba's disk cache: compile time only) and "np.dot() is faster on contiguous arrays".
NUMBA_FILTERS = (
    '(\x1b\\[1m)*Cannot cache compiled function "numba_funcified_fgraph.*" as it uses dynamic globals',
    "(\x1b\\[1m)*(np\\.dot\\(\\)|np\\.vdot\\(\\)|'@') is faster on contiguous arrays",
)


def keep_pytensors_numba_filters() -> None:
    """Add PyTensor's two Numba filters (:data:`NUMBA_FILTERS`) once more, outside any ``catch_warnings`` block.

    PyTensor adds them when it first loads its Numba backend. pymc_dp compiles inside
    ``warnings.catch_warnings()`` blocks (the data layer's probes, the release route's NUTS), and
    a filter added inside such a block is dropped when it exits; so when PyTensor's first Numba
    compile of a session happened there, the warnings PyTensor hides reached the user (the
    session-37 walk: after the README's ``pmdp.sample``, a plain ``pm.sample_posterior_predictive``
    showed the first). Called once when pymc_dp is imported. No other warning is touched; the
    category is ``Warning`` only so that Numba need not be imported for it.
    """
    for pattern in NUMBA_FILTERS:
        warnings.filterwarnings("ignore", message=pattern, category=Warning)


keep_pytensors_numba_filters()
