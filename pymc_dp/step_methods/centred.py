"""Centred releases for the DP steps (issue 36): the settings and accounting that a centred step adds.

A step that takes ``anchor=`` (a :class:`pymc_dp.mechanisms.centred.CentringAnchor`, released by
:func:`pymc_dp.release_anchor`) and ``centre_lipschitz=`` κ releases through the centred
mechanisms of :mod:`pymc_dp.mechanisms.centred` instead of the plain ones; its kernel is
unchanged (:mod:`pymc_dp.step_methods.kernels`). This mixin holds what is common: argument
checks, the anchor's one release in the step's accounting, and the record.

Notes
-----
The anchor's release (two at second order: scores and Hessians) is charged once per run, in the
step's ``privacy_events`` (which :func:`pymc_dp.sample` and :func:`pymc_dp.publish` compose
over the run's total iterations), and in each chain's ``dp_mu_cumulative`` at its first
iteration (so a plain result priced from the statistics counts it once per chain: never less
than spent). An anchor that :func:`pymc_dp.sample` releases itself is priced once in the run's
plan, with its DP start and clip bound, and like them left out of ``dp_mu_cumulative``
(``_anchor_priced_by_run``, set by the run's plan only): the chains' statistics then sum to the
iterations the run's record counts. Because calibration splits a target over iterations alone, a centred step needs
its noise multipliers given: the anchor's share of ε is the caller's choice
(:func:`centred_noise_multipliers`, :func:`second_order_noise_multipliers`).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive, check_neighbouring, check_positive_int
from pymc_dp.accounting.events import PrivacyEvent
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.centred_predictions import score_and_hessian_noise_multipliers
from pymc_dp.mechanisms.centred import (
    CentringAnchor,
    anchor_release,
    check_anchor,
    check_centre_lipschitz,
    recentring_release,
)
from pymc_dp.mechanisms.gradient import NoisyClippedGradient
from pymc_dp.mechanisms.hessian import NoisyClippedHessian, clipped_hessian, hessian_norm_histogram

__all__ = ["Centring", "centred_noise_multipliers", "prior_hessian", "release_anchor", "second_order_noise_multipliers"]


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


def second_order_noise_multipliers(
    epsilon: float,
    delta: float,
    iterations: int,
    anchor_share: float = 0.3,
    hessian_share: float = 0.25,
    releases_per_iteration: int = 1,
) -> tuple[float, float, float]:
    """(τ_G, τ_H, τ): a second-order anchor's score and Hessian noise multipliers and each iteration's.

    The run's μ (:func:`pymc_dp.accounting.gaussian_mu_for_target`) is split: ``anchor_share``
    to the anchor, of which ``hessian_share`` to its Hessian release and the rest to its score
    release, and the rest evenly over ``iterations`` × ``releases_per_iteration`` releases.
    The Hessian's noise moves the target's mean by about ΣE(m − θ̂), small next to the score
    noise's Ση while the anchor is near the mode, hence the smaller default share. Public
    settings only.

    Returns
    -------
    (float, float, float)
        τ_G, τ_H and τ, each rounded up by 1e-9 relative (towards privacy).
    """
    share = check_finite_positive("hessian_share", hessian_share)
    if share >= 1:
        raise ValueError(f"`hessian_share` must be in (0, 1). Found {hessian_share!r}.")
    anchor_tau, tau = centred_noise_multipliers(epsilon, delta, iterations, anchor_share, releases_per_iteration)
    mu_anchor = 0.5 / anchor_tau**2  # = anchor_share·μ (rounded towards privacy)
    score_tau, hessian_tau = score_and_hessian_noise_multipliers(mu_anchor, share)
    return score_tau, hessian_tau, tau


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
                "`centre_lipschitz` must be given with `anchor`: a public per-row bound κ on the Lipschitz constant "
                "of the score for a first-order anchor (logistic regression with ‖x‖ ≤ B: B²/4), of the Hessian for a "
                "second-order one (logistic: B³/(6√3)). Found None."
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

    #: True while a run that priced the anchor itself (:func:`pymc_dp.sample`) has attached it.
    _anchor_priced_by_run: bool = False

    def _iteration_mu(self) -> float:
        mu = super()._iteration_mu()
        if self.anchor is not None and self._iterations_chain == 1 and not self._anchor_priced_by_run:
            mu += self.anchor.mu  # a caller's anchor, once per chain (never less than spent)
        return mu

    def _centring_settings(self) -> dict[str, Any]:
        if self.anchor is None:
            return {}
        return {"centring": {**self.anchor.record(), "lipschitz": self.centre_lipschitz}}

    def _drop_mechanisms(self) -> None:
        """Forget the built mechanisms (plain or centred) and their raw per-row caches: rebuilt at the next release."""
        self._drop_block()
        for name in ("_mechanism", "_llr_mechanism", "_grad_mechanism"):
            mechanism = getattr(self, name, None)
            if mechanism is not None and hasattr(mechanism, "forget"):
                mechanism.forget()
            if hasattr(self, name):
                setattr(self, name, None)

    def release_run_anchor(
        self,
        point: dict[str, Any],
        grad_clip: float,
        noise_multiplier: float,
        hessian_clip: float,
        hessian_noise_multiplier: float,
    ) -> CentringAnchor:
        """Release a second-order anchor at the public ``point`` through this step's rows (priced by the caller).

        The releases of :func:`release_anchor` (the clipped score sum and the clipped Hessian
        sum at θ̂, Gaussian noise at τ_G and τ_H) from the step's own row mechanisms and noise
        generator; :func:`pymc_dp.sample` prices both in the run's plan and charges them with the
        run before calling this. ``point``: value-variable name → unconstrained value (a released
        DP start). Returns the anchor; :meth:`use_anchor` makes the step centre on it.
        """
        theta = np.concatenate([np.asarray(point[v.name], dtype=float).ravel() for v in self.vars])
        return anchor_release(
            self._row_mechanisms.clipped_gradient,
            theta,
            check_finite_positive("grad_clip", grad_clip),
            check_finite_positive("noise_multiplier", noise_multiplier),
            self.neighbouring,
            self.noise_rng,
            tuple(v.name for v in self.vars),
            functools.partial(clipped_hessian, self._row_mechanisms),
            check_finite_positive("hessian_clip", hessian_clip),
            check_finite_positive("hessian_noise_multiplier", hessian_noise_multiplier),
            reproducible_noise=self.reproducible_noise,
        )

    def release_run_recentring(
        self,
        anchor: CentringAnchor,
        target: np.ndarray,
        lipschitz: float,
        noise_multiplier: float,
        hessian_noise_multiplier: float,
    ) -> CentringAnchor:
        """Move ``anchor``'s expansion to the public flat ``target`` through this step's rows (priced by the caller).

        :func:`pymc_dp.mechanisms.centred.recentring_release`: each row's change of expansion, clipped at ½κd²
        and κd, summed, Gaussian noise at τ_r and τ_rH; :func:`pymc_dp.sample` prices both releases in the run's
        plan (``centre="recentre"``) and charges them with the run before calling this.
        """
        return recentring_release(
            self._row_mechanisms,
            anchor,
            np.asarray(target, dtype=float),
            lipschitz,
            noise_multiplier,
            hessian_noise_multiplier,
            self.noise_rng,
        )

    def release_hessian_norm_counts(self, point: dict[str, Any], noise_multiplier: float) -> np.ndarray:
        """One priced release of the noisy histogram of per-row Hessian norms at the public ``point``.

        :class:`pymc_dp.mechanisms.hessian.NoisyHessianNormHistogram` on the step's rows (Gaussian,
        Δ = √2 substitute, 1 add/remove; μ = 1/(2τ²)); :func:`pymc_dp.sample` prices it before
        calling this. The centred run's anchor clips its Hessians at a bound read off it.
        """
        theta = np.concatenate([np.asarray(point[v.name], dtype=float).ravel() for v in self.vars])
        histogram = hessian_norm_histogram(self._row_mechanisms, noise_multiplier, self.neighbouring)
        return histogram.release_counts(theta, self.noise_rng)

    def use_anchor(self, anchor: CentringAnchor, lipschitz: float) -> Any:
        """Centre the step's releases on ``anchor`` with κ = ``lipschitz`` for one run; returns the undo function.

        The step must sample every free variable (checked by :func:`pymc_dp.sample`'s plan).
        The mechanisms are rebuilt at the next release; the undo function drops the centred ones
        and their per-row anchor scores and Hessians, and puts the step back uncentred.
        Each chain's ``dp_mu_cumulative`` counts the anchor at its first iteration (never less than
        spent). Only :func:`pymc_dp.sample`, whose own accountant counts the anchor once (like its DP
        start and clip bound), sets the private ``_anchor_priced_by_run`` after this call, so that the
        chains' statistics sum to the run's iterations as its record counts them; no argument lets a
        caller drop the anchor from the statistics.
        """
        self._set_anchor(anchor, lipschitz, self._prior.n_params, [v.name for v in self.vars], False)
        self._anchor_priced_by_run = False
        self._drop_mechanisms()

        def restore() -> None:
            self._drop_mechanisms()
            self.anchor, self.centre_lipschitz = None, None
            self._anchor_priced_by_run = False

        return restore


def prior_hessian(prior: Any, theta: np.ndarray) -> np.ndarray:
    """∇² log p(θ) of the data-free prior, by central differences of its exact gradient (no row read)."""
    size = theta.size
    hessian = np.empty((size, size))
    for j in range(size):
        h = 1e-5 * (1.0 + abs(theta[j]))
        up, down = theta.copy(), theta.copy()
        up[j] += h
        down[j] -= h
        hessian[:, j] = (prior.prior_logp_and_grad(up)[1] - prior.prior_logp_and_grad(down)[1]) / (2.0 * h)
    return 0.5 * (hessian + hessian.T)


_ANCHOR_ADVICE = "use larger noise multipliers or a larger budget."


def _check_hessian_settings(hessian_clip: Any, hessian_noise_multiplier: Any) -> tuple[Any, Any]:
    """Both None (a first-order anchor), or both positive and finite (second order)."""
    if (hessian_clip is None) != (hessian_noise_multiplier is None):
        raise ValueError(
            "`hessian_clip` and `hessian_noise_multiplier` must be given together (a second-order anchor) or not at "
            f"all. Found hessian_clip={hessian_clip!r} and hessian_noise_multiplier={hessian_noise_multiplier!r}."
        )
    if hessian_clip is None:
        return None, None
    return (
        check_finite_positive("hessian_clip", hessian_clip),
        check_finite_positive("hessian_noise_multiplier", hessian_noise_multiplier),
    )


def _anchor_release_events(noise_multiplier: float, hessian_noise_multiplier: float | None) -> list[PrivacyEvent]:
    """The anchor's releases: its score sum, and its Hessian sum at second order."""
    events = NoisyClippedGradient.events(noise_multiplier, 1, "centring anchor")
    if hessian_noise_multiplier is not None:
        events = events + NoisyClippedHessian.events(hessian_noise_multiplier, 1, "centring anchor (Hessian)")
    return events


def release_anchor(
    point: Any,
    *,
    grad_clip: float,
    noise_multiplier: float,
    hessian_clip: float | None = None,
    hessian_noise_multiplier: float | None = None,
    model: Any = None,
    vars: Any = None,
    neighbouring: str = "substitute",
    budget: Any = None,
    delta: float | None = None,
    rng: Any = None,
) -> CentringAnchor:
    """Release the centring anchor at a public θ̂: Ĝ = Σᵢ clip_L2(gᵢ(θ̂), b_g) + η, and Ĥ = Σᵢ clip_F(Hᵢ(θ̂), b_H) + E.

    Ĥ (second order) only with ``hessian_clip`` and ``hessian_noise_multiplier``: the steps
    then centre each row on its second-order expansion at θ̂, and their ``centre_lipschitz``
    is a bound on the Lipschitz constant of each row's Hessian (``docs/centred.md``).

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
    hessian_clip : float, optional
        b_H > 0, the Frobenius clip of each row's Hessian at θ̂ (second order; with
        ``hessian_noise_multiplier``).
    hessian_noise_multiplier : float, optional
        τ_H > 0: the Hessian noise's σ_H = τ_H·2b_H (substitute) or τ_H·b_H (add/remove) on the
        diagonal, σ_H/√2 off it (:class:`pymc_dp.mechanisms.hessian.NoisyClippedHessian`).
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
        Noise source, for testing only (default: the operating system's CSPRNG). An anchor released
        from a given generator is marked ``reproducible_noise`` and a run that uses it records
        ``reproducible_noise=True``: anyone who knows the seed can subtract the noise.

    Returns
    -------
    CentringAnchor

    Notes
    -----
    One Gaussian mechanism on a clipped sum (:class:`pymc_dp.mechanisms.NoisyClippedGradient`):
    sensitivity 2b_g (substitute: N public, one row replaced) or b_g (add/remove), μ = 1/(2τ_G²).
    At second order a second one on the clipped Hessian sum
    (:class:`pymc_dp.mechanisms.hessian.NoisyClippedHessian`): Frobenius sensitivity 2b_H
    (b_H), μ = 1/(2τ_H²); the two compose. Both are priced (:class:`pymc_dp.run.PrivateRun`)
    and ``budget`` charged before any row is read. The other free variables are never fixed
    at a data-dependent initial value: the anchor is released for every free variable, at
    ``point``.
    """
    from pymc_dp._validation import model_from_context
    from pymc_dp.data import sorted_value_vars
    from pymc_dp.mechanisms import model_access
    from pymc_dp.mechanisms.noise import mechanism_rng
    from pymc_dp.run import PrivateRun
    from pymc_dp.starts import public_initial_point

    grad_clip = check_finite_positive("grad_clip", grad_clip)
    noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
    hessian_clip, hessian_noise_multiplier = _check_hessian_settings(hessian_clip, hessian_noise_multiplier)
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
    run.plan(_anchor_release_events(noise_multiplier, hessian_noise_multiplier), advice=_ANCHOR_ADVICE)
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
            None if hessian_clip is None else functools.partial(clipped_hessian, mechanisms),
            hessian_clip,
            hessian_noise_multiplier,
            reproducible_noise=rng is not None,  # a caller's generator: the result must say its noise was seeded
        )
