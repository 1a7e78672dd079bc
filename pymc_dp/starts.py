"""Data-free, over-dispersed chain starts.

A DP chain moves in small steps (the noise limits how far a step may go), so a chain started
at the model's initial point — the same point for every chain — can stay near it and report
a tight, confident, wrong posterior that R-hat cannot see. :func:`pymc_dp.sample` therefore
starts every chain at its own point. With ``init="auto"`` (the default) that is a draw, with
doubled standard deviations, from a DPADVI fit on a share of ε where one applies, and
otherwise (``init="prior"``) a draw from the prior: distinct, over-dispersed relative to the
posterior, and data-free (the prior reads no data: checked when the steps are built), so
those starts cost no ε.

A model's own ``initval=`` settings are the caller's: nothing tells a value typed in from one
computed from the data (``initval=y.mean()``). Where a run starts from them
(``init="model"``, a DPADVI fit started at the model's initial point,
:func:`pymc_dp.one_posterior_sample`) the start is recorded as given by the caller and a
:class:`UserInitvalWarning` says so; no public reference point (the private clip bound's
histogram) is ever taken from them: :func:`public_initial_point` ignores them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "INIT_METHODS",
    "UserInitvalWarning",
    "check_init",
    "prior_starts",
    "public_initial_point",
    "user_initval_record",
    "user_initvals",
    "warn_user_initvals",
]

#: Start rules :func:`pymc_dp.sample` accepts (``initvals`` given by the caller override them).
INIT_METHODS = ("auto", "prior", "model", "dpadvi")


class UserInitvalWarning(UserWarning):
    """A start comes from the model's own ``initval=`` settings, which ε does not cover.

    pymc-dp cannot tell an ``initval`` typed in from one computed from the data
    (``initval=y.mean()``): a chain started there publishes it through its warm-up draws.
    Remove the ``initval``, or make sure it is public, or use ``init="prior"``.
    """


def public_initial_point(model: Any) -> dict[str, np.ndarray]:
    """PyMC's default initial point of ``model``, ignoring every ``initval=`` the model sets.

    Parameters
    ----------
    model : pm.Model
        The model; its ``initval`` settings (``model.rvs_to_initial_values``) are not read.

    Returns
    -------
    dict
        Value-variable name → value on the transformed (sampling) scale, as
        ``model.initial_point()`` returns, with every free variable at PyMC's default
        strategy (its support point).

    Notes
    -----
    Data-free: the support points are functions of the priors' parameters, which read no
    row data (checked when the DP steps are built), so the point is public under either
    neighbouring relation and may serve as a reference point (the private clip bound's
    histogram). ``model.initial_point()`` is not public in that sense: it returns the
    caller's ``initval`` values, which may have been computed from the data.
    """
    from pymc.initial_point import make_initial_point_fn

    overrides = {rv: None for rv in model.free_RVs}  # None: PyMC's default strategy for every variable
    point = make_initial_point_fn(model=model, overrides=overrides)(None)
    return {name: np.asarray(value) for name, value in point.items()}


def user_initvals(model: Any) -> list[str]:
    """Names of the free variables whose ``initval`` moves them off PyMC's default initial point.

    An ``initval`` equal to the default (``"support_point"``, or the same value) changes
    nothing and is not listed; any other (a value, ``"prior"``) is. Public settings only: the
    comparison is between the model's two initial points, not the data.
    """
    given = [rv for rv, value in model.rvs_to_initial_values.items() if value is not None]
    if not given:
        return []
    default, actual = public_initial_point(model), model.initial_point()
    names = []
    for rv in model.free_RVs:
        value_name = model.rvs_to_values[rv].name
        if rv in given and not np.array_equal(np.asarray(default[value_name]), np.asarray(actual[value_name])):
            names.append(rv.name)
    return names


def user_initval_record(names: list[str]) -> dict[str, str]:
    """The start record of a run whose chains start from the model's ``initval`` settings for ``names``."""
    return {
        "source": "user",
        "note": f"initval given by the model for {names}: not covered by ε, must not be computed from the data",
    }


def warn_user_initvals(names: list[str], where: str) -> None:
    """Warn (:class:`UserInitvalWarning`) that ``where`` starts from the model's ``initval`` for ``names``."""
    import warnings

    warnings.warn(
        f"{where} starts from the model's `initval` for {names}. ε does not cover a start: if an `initval` was "
        "computed from the data (e.g. initval=y.mean()), the draws publish it exactly. Remove it, keep it public, "
        "or use init='prior'. The start is recorded as given by the caller (dp_start source 'user').",
        UserInitvalWarning,
        stacklevel=3,
    )


def check_init(value: Any) -> str:
    """``init`` must be one of :data:`INIT_METHODS`."""
    if not isinstance(value, str) or value not in INIT_METHODS:
        raise ValueError(f"`init` must be one of {list(INIT_METHODS)}. Found {value!r}.")
    return value


def prior_starts(model: Any, chains: int, random_seed: Any = None, max_tries: int = 20) -> list[dict[str, np.ndarray]]:
    """One prior draw of every free variable per chain, as ``pm.sample``'s ``initvals``.

    Parameters
    ----------
    model : pm.Model
        The model; only its free variables' priors are drawn (no data are read).
    chains : int
        Number of chains.
    random_seed : int, sequence of int, Generator or None
        Seeds the draws (data-free randomness: reproducible from ``pm.sample``'s seed).
    max_tries : int
        Draws with a non-finite value (a heavy-tailed prior overflowing) are redrawn up to
        this many times.

    Returns
    -------
    list of dict
        Variable name → value on the variables' own (constrained) scale, one dict per chain.

    Raises
    ------
    ValueError
        When a prior keeps producing non-finite draws, when a free variable has a ``pm.Flat`` or
        ``pm.HalfFlat`` prior (nothing to draw from), or when a prior has no random method (a
        ``pm.CustomDist`` without ``random``); the message names the variables and says to pass
        ``init="model"`` or ``initvals``.

    Notes
    -----
    Data-free: the priors of the free variables read no row data (refused when the DP steps
    are built), so the starts are post-processing of nothing private and cost no ε under
    either neighbouring relation.
    """
    import pymc as pm

    if isinstance(random_seed, np.random.Generator):
        rng = random_seed
    else:
        rng = np.random.default_rng(random_seed)
    free = list(model.free_RVs)
    if not free:
        return [{} for _ in range(chains)]
    flat = [rv.name for rv in free if isinstance(rv.owner.op, _flat_ops())]
    if flat:
        raise ValueError(
            f"`init`='prior' draws each chain's start from the prior, but {flat} have flat priors (pm.Flat / "
            "pm.HalfFlat), which cannot be drawn from. Pass init='model' (PyMC's start for every chain) or "
            "`initvals` (one data-free dict per chain), or give them proper priors."
        )
    starts: list[dict[str, np.ndarray]] = []
    for _ in range(chains):
        for attempt in range(max_tries):
            try:
                values = pm.draw(free, random_seed=rng)
            except NotImplementedError as error:  # a prior without a random method (CustomDist without `random`)
                names = [rv.name for rv in free]
                raise ValueError(
                    f"`init`='prior' draws each chain's start from the prior, but one of the priors of {names} has "
                    "no random method (e.g. a pm.CustomDist without `random`). Pass init='model' (PyMC's start for "
                    "every chain) or `initvals` (one data-free dict per chain)."
                ) from error  # prior draws only: the original message holds no data
            bad = [rv.name for rv, v in zip(free, values, strict=True) if not np.all(np.isfinite(v))]
            if not bad:
                starts.append({rv.name: np.asarray(v) for rv, v in zip(free, values, strict=True)})
                break
            if attempt == max_tries - 1:
                raise ValueError(
                    f"`init`='prior' needs finite prior draws. Found non-finite draws of {bad} in {max_tries} tries; "
                    "give the variable a proper prior, or pass `initvals` (data-free) or init='model'."
                )
    return starts


def _flat_ops() -> tuple[type, ...]:
    from pymc.distributions.continuous import FlatRV, HalfFlatRV

    return (FlatRV, HalfFlatRV)
