"""Centred releases for the DP steps (issue 36): the settings and accounting that a centred step adds.

A step that takes ``anchor=`` (a :class:`pymc_dp.mechanisms.centred.CentringAnchor`, released by
:func:`pymc_dp.release_anchor`) and ``centre_lipschitz=`` κ releases through the centred
mechanisms of :mod:`pymc_dp.mechanisms.centred` instead of the plain ones; its kernel is
unchanged (:mod:`pymc_dp.step_methods.kernels`). This mixin holds what is common: argument
checks, the anchor's one release in the step's accounting, and the record.

Notes
-----
The anchor's release is charged once per run, in the step's ``privacy_events`` (which
:func:`pymc_dp.sample` and :func:`pymc_dp.publish` compose over the run's total iterations),
and in each chain's ``dp_mu_cumulative`` at its first iteration (so a plain result priced from
the statistics counts it once per chain: never less than spent). Because calibration splits a
target over iterations alone, a centred step needs its noise multipliers given: the anchor's
share of ε is the caller's choice (:func:`centred_noise_multipliers`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive, check_neighbouring, check_positive_int
from pymc_dp.accounting.events import PrivacyEvent
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.mechanisms.centred import CentringAnchor, anchor_release, check_anchor, check_centre_lipschitz
from pymc_dp.mechanisms.gradient import NoisyClippedGradient

__all__ = ["Centring", "centred_noise_multipliers", "release_anchor"]


def centred_noise_multipliers(
    epsilon: float, delta: float, iterations: int, anchor_share: float = 0.3, releases_per_iteration: int = 1
) -> tuple[float, float]:
    """(τ_G, τ): the anchor's and each iteration's noise multipliers for a target (ε, δ), Gaussian composition.

    The run's μ (:func:`pymc_dp.accounting.gaussian_mu_for_target`) is split: ``anchor_share``
    to the anchor's one release, the rest evenly over ``iterations`` × ``releases_per_iteration``
    releases (``iterations``: chains × (tune + draws)). Public settings only.

    Returns
    -------
    (float, float)
        τ_G = (2 μ_G)^(-1/2) and τ = (2 μ_it)^(-1/2), each rounded up by 1e-9 relative (towards privacy).
    """
    share = check_finite_positive("anchor_share", anchor_share)
    if share >= 1:
        raise ValueError(f"`anchor_share` must be in (0, 1). Found {anchor_share!r}.")
    mu = gaussian_mu_for_target(epsilon, delta)
    count = check_positive_int("iterations", iterations) * check_positive_int(
        "releases_per_iteration", releases_per_iteration
    )
    anchor_tau = math.sqrt(0.5 / (share * mu)) * (1 + 1e-9)
    tau = math.sqrt(0.5 * count / ((1 - share) * mu)) * (1 + 1e-9)
    return anchor_tau, tau


class Centring:
    """Mixin of a DP step that may centre its releases on a released anchor (``anchor``, ``centre_lipschitz``)."""

    anchor: CentringAnchor | None = None
    centre_lipschitz: float | None = None

    def _check_centring_arguments(self, anchor: Any, lipschitz: Any, noises: dict[str, Any]) -> None:
        """Validate ``anchor`` with κ and the given noise multipliers, before anything is built."""
        if anchor is None:
            if lipschitz is not None:
                raise ValueError(
                    f"`centre_lipschitz` needs an `anchor` (pymc_dp.release_anchor(...)). Found centre_lipschitz="
                    f"{lipschitz!r} and anchor=None."
                )
            return
        if not isinstance(anchor, CentringAnchor):
            raise TypeError(
                f"`anchor` must be a CentringAnchor from pymc_dp.release_anchor(...). Found {type(anchor).__name__}."
            )
        if lipschitz is None:
            raise ValueError(
                "`centre_lipschitz` must be given with `anchor`: a public per-row bound κ on the score's Lipschitz "
                "constant (logistic regression with ‖x‖ ≤ B: B²/4). Found None."
            )
        check_centre_lipschitz(lipschitz)
        unset = [name for name, value in noises.items() if value is None]
        if unset:
            raise ValueError(
                f"{', '.join(f'`{n}`' for n in unset)} must be given with `anchor` (calibration does not split ε with "
                "the anchor): take them from pymc_dp.step_methods.centred.centred_noise_multipliers(epsilon, delta, "
                "iterations). Found None."
            )

    def _set_anchor(self, anchor: Any, lipschitz: Any, size: int, names: list[str], shared: Any) -> None:
        if anchor is None:
            self.anchor, self.centre_lipschitz = None, None
            return
        if shared:
            raise ValueError(
                "`anchor` needs the step to sample every free variable: the anchor's scores were released at fixed "
                f"values of the others. Found other free variables besides {names}; sample them all with this step."
            )
        self.anchor = check_anchor(anchor, size, self.neighbouring)
        if anchor.var_names and list(anchor.var_names) != list(names):
            raise ValueError(
                f"`anchor` must be released for the step's variables {names}. Found {list(anchor.var_names)}."
            )
        self.centre_lipschitz = check_centre_lipschitz(lipschitz)

    @property
    def auto_clip_attributes(self) -> tuple[str, ...]:
        """None when centred: the centred bound replaces the plain clip bounds."""
        if self.anchor is not None:
            return ()
        return super().auto_clip_attributes

    def _anchor_events(self) -> list[PrivacyEvent]:
        """The anchor's one release (none when not centred)."""
        if self.anchor is None:
            return []
        return self.anchor.events(f"{type(self).__name__}[{','.join(self.var_names)}] centring anchor")

    def _iteration_mu(self) -> float:
        mu = super()._iteration_mu()
        if self.anchor is not None and self._iterations_chain == 1:  # the anchor, once per chain (never less)
            mu += self.anchor.mu
        return mu

    def _centring_settings(self) -> dict[str, Any]:
        if self.anchor is None:
            return {}
        return {"centring": {**self.anchor.record(), "lipschitz": self.centre_lipschitz}}


def release_anchor(
    point: Any,
    *,
    grad_clip: float,
    noise_multiplier: float,
    model: Any = None,
    vars: Any = None,
    neighbouring: str = "substitute",
    budget: Any = None,
    delta: float | None = None,
    rng: Any = None,
) -> CentringAnchor:
    """Release the centring anchor: Ĝ = Σᵢ clip_L2(∇θ log p(xᵢ | θ̂), b_g) + N(0, σ_G² I) at a public θ̂.

    The one-call way to make the anchor that :class:`pymc_dp.DPPenaltyMH` and
    :class:`pymc_dp.DPHMC` take (``anchor=``), for a plain ``pm.sample``: a priced release
    (its accounting rides with the step that uses it, :meth:`CentringAnchor.events`).

    Parameters
    ----------
    point : dict or array
        θ̂: value-variable name → value on the unconstrained (sampling) scale, or a flat
        array in the steps' order. Must be public (a DP start, or data-free): ε does not
        cover it.
    grad_clip : float
        b_g > 0, the L2 clip of each row's score at θ̂.
    noise_multiplier : float
        τ_G > 0: σ_G = τ_G·2b_g (substitute) or τ_G·b_g (add/remove).
    model : pm.Model, optional
        From the context if omitted.
    vars : list, optional
        The continuous variables the steps sample: every free variable of the model (the
        default), since the scores are released at the others' values otherwise.
    neighbouring : {"substitute", "add_remove"}, default "substitute"
        The relation the sensitivity is computed for (the steps that take the anchor must use it).
    budget : pymc_dp.PrivacyBudget, optional
        Charged the anchor's release before any row is read (refused with nothing read when it
        does not fit). The step that takes the anchor composes it into its result's ε again (a
        result's ε covers everything it depends on), so one budget passed to both counts it
        twice: never less than spent.
    delta : float, optional
        δ at which the anchor's ε is stated in its budget entry (default: the budget's δ, else 1e-6).
    rng : numpy.random.Generator, optional
        Noise source, for testing only (default: the operating system's CSPRNG).

    Returns
    -------
    CentringAnchor

    Notes
    -----
    One Gaussian mechanism on a clipped sum (:class:`pymc_dp.mechanisms.NoisyClippedGradient`):
    sensitivity 2b_g (substitute: N public, one row replaced) or b_g (add/remove), μ = 1/(2τ_G²).
    It is priced (:class:`pymc_dp.run.PrivateRun`) and ``budget`` charged before any row is
    read. The other free variables are never fixed at a data-dependent initial value: the
    anchor is released for every free variable, at ``point``.
    """
    from pymc_dp._validation import model_from_context
    from pymc_dp.data import sorted_value_vars
    from pymc_dp.mechanisms import model_access
    from pymc_dp.mechanisms.noise import mechanism_rng
    from pymc_dp.run import PrivateRun
    from pymc_dp.starts import public_initial_point

    grad_clip = check_finite_positive("grad_clip", grad_clip)
    noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
    neighbouring = check_neighbouring("neighbouring", neighbouring)
    model = model_from_context(model, "release_anchor")
    value_vars = sorted_value_vars(model, vars)
    every = sorted_value_vars(model, None)
    if [v.name for v in value_vars] != [v.name for v in every]:
        raise ValueError(
            "`vars` must be every free variable of the model (the anchor's scores would be released at fixed values "
            f"of the others). Found {[v.name for v in value_vars]} of {[v.name for v in every]}."
        )
    if delta is not None:
        delta = check_finite_positive("delta", delta)
    initial = public_initial_point(model)  # data-free: any initval= that reads data is ignored
    if isinstance(point, dict):
        missing = [v.name for v in value_vars if v.name not in point]
        if missing:
            raise ValueError(f"`point` must give every sampled value variable. Found no value for {missing}.")
        theta = np.concatenate([np.asarray(point[v.name], dtype=float).ravel() for v in value_vars])
    else:
        theta = np.asarray(point, dtype=float).ravel()
    size = sum(np.asarray(initial[v.name]).size for v in value_vars)
    if theta.shape != (size,) or not np.all(np.isfinite(theta)):
        raise ValueError(
            f"`point` must be {size} finite values (the flat unconstrained parameters). Found shape {theta.shape}"
            f"{'' if theta.shape != (size,) else ' with non-finite values'}."
        )
    from pymc.pytensorf import make_shared_replacements

    shared = make_shared_replacements(initial, value_vars, model)
    prior, mechanisms = model_access(model, value_vars, shared, initial, None, neighbouring=neighbouring)
    run = PrivateRun(
        "pymc_dp.release_anchor",
        delta=delta if delta is not None else (budget.delta if budget is not None else 1e-6),
        neighbouring=neighbouring,
        n_rows=prior.n_rows,
        budget=budget,
    )
    run.plan(
        NoisyClippedGradient.events(noise_multiplier, 1, "centring anchor"),
        advice="use a larger noise_multiplier or a larger budget.",
    )
    with run.releasing("centring anchor"):
        source = mechanism_rng(None, False) if rng is None else rng
        return anchor_release(
            mechanisms.clipped_gradient,
            theta,
            grad_clip,
            noise_multiplier,
            neighbouring,
            source,
            tuple(v.name for v in value_vars),
        )
