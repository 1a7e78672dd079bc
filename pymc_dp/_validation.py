"""Validation of user-supplied privacy and sampler parameters.

Every check raises ``ValueError`` (or ``TypeError`` for a wrong kind of object) with a
message of the form "`name` must be .... Found value." and never mutates anything, so a
caller can validate all arguments before it changes any state.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = [
    "check_bool",
    "check_finite_positive",
    "check_neighbouring",
    "check_nonnegative_int",
    "check_positive",
    "check_positive_int",
    "check_sampling_rate",
    "check_unit_interval_open",
    "model_from_context",
]

NEIGHBOURING_RELATIONS = ("substitute", "add_remove")


def _as_real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real | np.floating | np.integer):
        raise TypeError(f"`{name}` must be a real number. Found {value!r} of type {type(value).__name__}.")
    return float(value)


def check_positive(name: str, value: object, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float after checking it is > 0 (and finite unless ``allow_inf``)."""
    x = _as_real(name, value)
    if math.isnan(x) or x <= 0 or (math.isinf(x) and not allow_inf):
        what = "a positive number (infinity allowed)" if allow_inf else "a positive finite number"
        raise ValueError(f"`{name}` must be {what}. Found {value!r}.")
    return x


def check_finite_positive(name: str, value: object) -> float:
    """Return ``value`` as a float after checking it is finite and > 0."""
    return check_positive(name, value, allow_inf=False)


#: A clip bound chosen privately by :func:`pymc_dp.sample` (a DP quantile of the per-row score norms).
AUTO_CLIP = "auto"


def check_clip_bound(name: str, value: object) -> float | str:
    """Return ``"auto"`` or ``value`` as a float after checking it is finite and > 0."""
    if isinstance(value, str):
        if value != AUTO_CLIP:
            raise ValueError(f"`{name}` must be a positive finite number or 'auto'. Found {value!r}.")
        return AUTO_CLIP
    return check_positive(name, value, allow_inf=False)


def check_unit_interval_open(name: str, value: object) -> float:
    """Return ``value`` as a float after checking 0 < value < 1."""
    x = _as_real(name, value)
    if not 0.0 < x < 1.0:
        raise ValueError(f"`{name}` must be in the open interval (0, 1). Found {value!r}.")
    return x


def check_sampling_rate(name: str, value: object) -> float:
    """Return ``value`` as a float after checking 0 < value ≤ 1 (a sampling probability)."""
    x = _as_real(name, value)
    if not 0.0 < x <= 1.0:
        raise ValueError(f"`{name}` must be in (0, 1]. Found {value!r}.")
    return x


def _check_int_at_least(name: str, value: object, minimum: int, what: str) -> int:
    """Return ``value`` as an int after checking it is an integer >= ``minimum`` (``what`` names the set)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral | np.integer):
        raise TypeError(f"`{name}` must be {what}. Found {value!r} of type {type(value).__name__}.")
    if int(value) < minimum:
        raise ValueError(f"`{name}` must be {what}. Found {value!r}.")
    return int(value)


def check_positive_int(name: str, value: object) -> int:
    """Return ``value`` as an int after checking it is an integer >= 1."""
    return _check_int_at_least(name, value, 1, "a positive integer")


def check_nonnegative_int(name: str, value: object) -> int:
    """Return ``value`` as an int after checking it is an integer >= 0."""
    return _check_int_at_least(name, value, 0, "a non-negative integer")


def check_one_core(cores: object, why: str) -> None:
    """Refuse a ``cores`` of pm.sample other than 1 or None: the backend runs the chains one after another.

    ``why`` completes "`cores` must be 1 ..." (which backend, and why one process).
    """
    if cores is not None and cores != 1:
        raise ValueError(f"`cores` must be 1 {why}. Found {cores!r}.")


def check_neighbouring(name: str, value: object) -> str:
    """Return the neighbouring relation after checking it is one we support."""
    if not isinstance(value, str) or value not in NEIGHBOURING_RELATIONS:
        raise ValueError(f"`{name}` must be one of {NEIGHBOURING_RELATIONS}. Found {value!r}.")
    return str(value)


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` after checking it is a bool."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"`{name}` must be a bool. Found {value!r}.")
    return bool(value)


def model_from_context(model: object, caller: str) -> object:
    """``model``, or the model of the ``with`` block open now.

    Parameters
    ----------
    model : pymc.Model or None
        The model passed by the caller.
    caller : str
        What needs it, named in the error (``"pmdp.sample"``, ``"DPPenaltyMH"``).

    Raises
    ------
    TypeError
        When ``model`` is None and no model context is open (PyMC's own error says only "No model
        on context stack."): the message says the two ways to pass one.
    """
    from pymc.model import modelcontext

    if model is not None:
        return modelcontext(model)
    try:
        return modelcontext(None)
    except TypeError:
        raise TypeError(
            f"{caller} needs a PyMC model: call it inside `with model:` or pass `model=model`. Found no model "
            "on PyMC's context stack and `model=None`."
        ) from None


def check_bounds_pair(name: str, bounds: object, width: int) -> tuple[np.ndarray, np.ndarray]:
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


#: Set on the PyMC model of a Bambi model by ``pymc_dp.from_bambi`` after its checks; the model checker
#: (``pymc_dp.model_structure.refuse_unchecked_bambi``) refuses a Bambi model without it.
BAMBI_CHECKED = "_pymc_dp_from_bambi"
