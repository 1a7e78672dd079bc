"""DPADVI: ADVI with per-row clipped, Poisson-subsampled, Gaussian-noised ELBO gradients.

:class:`DPADVI` plans, prices and runs the fit; its iterations are in
:mod:`pymc_dp.variational.fit_loop`, the approximations it fits (:class:`DPMeanField`,
:class:`DPFullRank`) in :mod:`pymc_dp.variational.approximation`, and what is read off the
released gradients (the iterate average, the Laplace posterior) in
:mod:`pymc_dp.variational.fit_diagnostics`; their public names are importable from here too.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import pymc as pm
from pymc.model import modelcontext
from pymc.variational.inference import Inference
from pytensor.compile.sharedvalue import SharedVariable

from pymc_dp._errors import withholds_chains
from pymc_dp._validation import (
    _as_real,
    check_bool,
    check_finite_positive,
    check_neighbouring,
    check_positive_int,
    check_sampling_rate,
    check_unit_interval_open,
)
from pymc_dp.accounting.budget import PrivacyBudget, PrivacyBudgetExceededError
from pymc_dp.accounting.calibrate import CALIBRATION_MARGIN, poisson_gaussian_noise_multiplier
from pymc_dp.accounting.composition import compose_epsilon
from pymc_dp.accounting.events import PrivacyEvent, PrivacySpent
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.data import observed_rows
from pymc_dp.mechanisms import NoisyPoissonGradientSum, NoisyScoreNormHistogram, mechanism_rng, model_access
from pymc_dp.mechanisms.clip_bound import clipping_summary, histogram_sensitivity
from pymc_dp.results import PrivateStart
from pymc_dp.run import PrivateRun
from pymc_dp.starts import user_initval_record, user_initvals, warn_user_initvals
from pymc_dp.variational.approximation import _APPROXIMATIONS, DPFullRank, DPMeanField
from pymc_dp.variational.clip_check import CLIP_CHECK_DRAW_SETS, clip_check_draw_sets
from pymc_dp.variational.families import family_for
from pymc_dp.variational.fit_diagnostics import LAPLACE_MAX_MODE_ERROR, _laplace_of_trace
from pymc_dp.variational.fit_loop import _FitLoop
from pymc_dp.variational.optimizers import OPTIMIZERS, make_optimizer

__all__ = ["DPADVI", "LAPLACE_MAX_MODE_ERROR", "DPFullRank", "DPMeanField"]

#: ``Inference.fit`` keywords with no private meaning here, and why.
_REFUSED_FIT_KWARGS = {
    "score": "the ELBO is an exact function of the data; DPADVI reports no loss",
    "obj_optimizer": "DPADVI takes `optimizer=` and `learning_rate=` (it clips per row before any optimiser)",
    "total_grad_norm_constraint": "DPADVI clips every row's gradient to `grad_clip`",
    "more_replacements": "replacements would bypass the per-row clipping",
    "more_updates": "extra updates would read the data outside the mechanism",
    "obj_n_mc": "DPADVI takes `n_mc=` at construction",
}


def group_indexed_parameters(model: Any) -> list[str]:
    """Free variables the likelihood indexes by a row-length integer array: group-level parameters.

    A structural, data-free walk of the observed variables' graphs for advanced indexing
    ``param[index]`` where ``param`` depends on a free variable and ``index`` is an integer
    array with one entry per row (e.g. ``intercept[group]`` in a hierarchical model). Only
    types and static shapes are read.
    """
    from pytensor.graph.traversal import ancestors
    from pytensor.tensor.subtensor import AdvancedSubtensor

    try:  # PyTensor 2 (PyMC 5); PyTensor 3 has only AdvancedSubtensor
        from pytensor.tensor.subtensor import AdvancedSubtensor1
    except ImportError:
        AdvancedSubtensor1 = AdvancedSubtensor

    n_rows = observed_rows(model)
    free = set(model.free_RVs)
    names: set[str] = set()
    seen = set()
    for variable in ancestors(model.observed_RVs):
        node = variable.owner
        if node is None or node in seen or not isinstance(node.op, AdvancedSubtensor | AdvancedSubtensor1):
            continue
        seen.add(node)
        indexed, *indices = node.inputs
        row_index = any(
            getattr(i.type, "dtype", "").startswith(("int", "uint")) and _first_axis_length(i) == n_rows
            for i in indices
        )
        if row_index:
            names.update(rv.name for rv in ancestors([indexed]) if rv in free)
    return sorted(names)


def _first_axis_length(variable: Any) -> int | None:
    """The length of a variable's first axis from its static type, or a shared variable's value shape."""
    shape = getattr(variable.type, "shape", ())
    if shape and shape[0] is not None:
        return int(shape[0])
    if isinstance(variable, SharedVariable):
        return int(np.shape(variable.get_value(borrow=True))[0]) if np.ndim(variable.get_value(borrow=True)) else None
    return None


def _check_dpadvi_backend(backend: Any) -> tuple[Any, Any]:
    """(JaxBackend or None, DaskBackend or None): JAX is imported now, so refused here if missing."""
    if isinstance(backend, str) and backend == "default":
        return None, None
    from pymc_dp.backends.dask import DaskBackend
    from pymc_dp.backends.jax import JaxBackend
    from pymc_dp.backends.jax_rows import import_jax

    if isinstance(backend, DaskBackend):  # its client was checked when it was made (distributed imported)
        return None, backend
    if isinstance(backend, str) and backend == "jax":
        backend = JaxBackend()
    if not isinstance(backend, JaxBackend):
        raise ValueError(
            "`backend` must be 'default', 'jax' or a pymc_dp.JaxBackend, or a pymc_dp.DaskBackend (DPADVI's batches "
            f"on a Dask cluster). Found {backend!r}."
        )
    import_jax()
    return backend, None


def _check_fit_options(kwargs: dict[str, Any], backend: Any) -> None:
    """Refuse ``Inference.fit`` options with no private meaning (saying why) and a ``backend`` other than None."""
    for key, why in _REFUSED_FIT_KWARGS.items():
        if key in kwargs:
            raise ValueError(f"`{key}` is not supported by DPADVI.fit: {why}.")
    if kwargs:
        raise TypeError(f"Keyword arguments must be ones DPADVI.fit accepts. Found unknown: {sorted(kwargs)}.")
    if backend is not None:
        raise ValueError(
            "`backend` must be None: DPADVI compiles the per-row functions with PyMC's default backend. "
            f"Found {backend!r}."
        )


class DPADVI(_FitLoop, Inference):
    r"""Differentially private ADVI (Jälkö, Dikmen and Honkela 2017).

    Each iteration draws θ_s = μ + Lε_s (s = 1..``n_mc``), takes every row's gradient of the
    expected log-likelihood with respect to the variational parameters, and releases

        ĝ = (Σ_{i∈S} clip_C(∇ E_q log p(xᵢ | θ)) + N(0, σ²Δ² I)) / q

    over a Poisson batch S (each row independently with probability q), with Δ = 2C
    (substitute) or C (add/remove). The gradients of the prior, the transforms' Jacobian and
    the entropy need no data and are added exactly; the optimiser (AdaGrad or Adam) then
    takes an ascent step. The approximation is PyMC's own ``MeanField`` / ``FullRank``, so
    ``approx.mean``, ``approx.std`` and ``approx.sample`` behave as after ``pm.fit``.

    Parameters
    ----------
    epsilon, delta : float, optional
        Target (ε, δ) of the fit. With ``noise_multiplier`` unset, σ is calibrated so that
        all ``n`` iterations meet ε; with it set, a fit that would exceed ε is refused.
        ``delta`` is required (a budget supplies it when omitted).
    noise_multiplier : float, optional
        σ > 0, the noise standard deviation per unit of sensitivity Δ.
    sampling_rate : float
        q in (0, 1]: the Poisson sampling probability of each row (expected batch qN).
    grad_clip : float
        C > 0, finite: the L2 bound on each row's gradient with respect to the variational
        parameters (μ and ρ, or μ and the Cholesky entries).
    approximation : {"meanfield", "fullrank"}
    optimizer : {"adagrad", "adam"}
        AdaGrad as in the paper (default learning rate 0.1) or Adam (0.01).
    learning_rate : float, optional
    n_mc : int, default 1
        Monte Carlo draws per gradient (the paper uses 1).
    neighbouring : {"substitute", "add_remove"}, default "substitute"
    budget : PrivacyBudget, optional
        Charged before the first data access of every ``fit``; a fit that would overspend is
        refused with nothing charged. Without ``epsilon`` and ``noise_multiplier``, σ is
        calibrated to what is left of it.
    reproducible_noise : bool, default False
        For testing; do not publish: derive the Poisson batches and the noise from
        ``random_seed``, so that a fit is reproducible — and whoever knows the seed can
        regenerate the noise and subtract it from the released gradients. By default they
        come from the operating system's CSPRNG (:func:`pymc_dp.mechanisms.mechanism_rng`).
    model : pm.Model, optional
        Taken from the context at construction or at ``fit``.
    random_seed : int, optional
        Seeds the approximation's start and the Monte Carlo draws (data-free), and the
        batches and noise only with ``reproducible_noise=True``.
    start : dict or PrivateStart, optional
        Start point, as for ``pm.MeanField``. A dict is not covered by ε: it must be public
        (not computed from the data); it is recorded as ``dp_start = "user"``. A
        :class:`pymc_dp.results.PrivateStart` of one point (``approx.initial_values(1)`` of an
        earlier DPADVI fit) is recorded as ``"dp_release"`` and its events are composed into
        the fit's reported ``dp_epsilon`` (the fit depends on both; a budget is not charged
        for them again).
    compile_kwargs : dict, optional
        Passed to ``pymc.pytensorf.compile`` for the per-row functions, e.g.
        ``{"mode": "NUMBA"}``, which halves the per-row Jacobian's cost on PyMC 5.
    clip_check_share : float, default 0.05
        With a target ``epsilon`` (σ calibrated), the share of ε spent at the end of every fit
        on one release of the histogram of the norms of what every iteration clips, each
        row's gradient mapped to the variational parameters, mean_s gᵢ(θ_s) M_s, at public
        draws of the fitted q (:class:`pymc_dp.mechanisms.histogram_mapped_gradient.
        NoisyMappedGradientNormHistogram`; sensitivity √2 substitute, 1 add/remove, as a
        one-count-per-row histogram), from which the noisy share of rows clipped at
        ``grad_clip`` is read: above 1/√N (clipping bias of the order of a posterior sd or
        more) the fit is flagged by :meth:`DPMeanField.optimisation_diagnostics`. 0 turns it
        off; with ``noise_multiplier`` set it is off.
    backend : {"default", "jax"} or pymc_dp.JaxBackend, default "default"
        Where the release runs. ``"jax"``: the rows are put on a JAX device once; each
        iteration's Poisson batch (drawn on the host, secret) is gathered, differentiated
        (``vmap(grad(row_loglik))`` or the batch's forward Jacobian), mapped to the variational
        parameters, clipped, summed and noised there (:class:`pymc_dp.backends.jax_rows.
        JaxPoissonGradientSum`): the same release, noise draws and accounting as the default
        backend (tested to 1e-10 in float64), the batches and noise drawn from the operating
        system's CSPRNG (``os.urandom``) unless ``reproducible_noise``. In float64 the
        iterations run in ``lax.scan`` blocks of ``JaxBackend(scan_iterations=...)`` (default
        64), the optimiser's step on the device: the same fit as one call per iteration
        (tested). ``JaxBackend(dtype="float32")`` computes the per-row values in 32 bits.
        Refused with an ImportError naming ``backend`` when JAX is not installed; a model JAX
        cannot run is refused at the first fit, before the charge. A
        :class:`pymc_dp.DaskBackend`: before every fit's charge the rows are scattered to the
        client's workers (as for the steps, docs/dask.md); at every iteration each worker draws
        its partition's Poisson batch (every row with probability q, from a generator seeded
        there from its OS entropy, or with ``reproducible_noise`` from a per-partition seed drawn
        from the fit's seeded generator), sums the clipped gradients of the sampled rows and
        returns that sum alone; the noise is added once here
        (:class:`pymc_dp.backends.dask_dpadvi.DaskPoissonGradientSum`): the same release,
        σ, events and ε as the default backend. The clipping check's histogram runs on the
        workers too. The partitions are released when the fit ends. With
        ``DaskBackend(client, rows={"X": X, "y": y})`` the model is built on
        :func:`pymc_dp.row_placeholder` stand-ins and nothing is scattered: each row chunk of the
        Dask arrays is computed where Dask places it, after the charge, and the batches run
        there (:mod:`pymc_dp.backends.dask_partitions`).
    average_iterates : bool, default True
        End each fit at the average of its second half of iterates (Polyak–Ruppert), which
        damps the gradient noise the last iterate carries. The iterates' spread is kept as
        the optimisation noise (:meth:`DPMeanField.optimisation_diagnostics`). Both are
        post-processing of the released gradients.

    Notes
    -----
    Neighbouring relation: substitute by default (data sets of the same public size N that
    differ in one row; sensitivity 2C), or add/remove (one row added or removed; sensitivity
    C; N is not released). Each iteration is one Poisson-subsampled Gaussian mechanism with
    the same (σ, q) as the sampling, accounted with ``dp_accounting``'s privacy-loss
    distributions (REPLACE_ONE with multiplier 2σ under substitute, ADD_OR_REMOVE_ONE with σ)
    or RDP where that is smaller. ε covers every iteration of every ``fit`` call on this
    object; the fitted parameters, ``approx.sample`` draws and progress reports are
    post-processing. No loss is computed or reported: the ELBO reads the data exactly.

    Examples
    --------
    >>> dpadvi = pmdp.DPADVI(epsilon=1.0, delta=1e-6, sampling_rate=0.01, grad_clip=5.0)  # doctest: +SKIP
    >>> approx = dpadvi.fit(n=5000, model=model)  # doctest: +SKIP
    >>> idata = approx.sample(2000)  # doctest: +SKIP
    >>> idata.posterior.attrs["dp_epsilon"]  # doctest: +SKIP

    References
    ----------
    .. [1] Jälkö, J., Dikmen, O. and Honkela, A. (2017). Differentially private variational
       inference for non-conjugate models. UAI, Algorithm 1 and §3–4.
    .. [2] Kucukelbir, A. et al. (2017). Automatic differentiation variational inference.
       JMLR 18(14).
    .. [3] Koskela, A., Jälkö, J. and Honkela, A. (2020). Computing tight differential privacy
       guarantees using FFT. AISTATS (PLD accounting).
    """

    def __init__(
        self,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        noise_multiplier: float | None = None,
        sampling_rate: float,
        grad_clip: float,
        approximation: str = "meanfield",
        optimizer: str = "adagrad",
        learning_rate: float | None = None,
        n_mc: int = 1,
        neighbouring: str = "substitute",
        budget: PrivacyBudget | None = None,
        reproducible_noise: bool = False,
        model: Any = None,
        random_seed: int | None = None,
        start: dict | None = None,
        compile_kwargs: dict | None = None,
        average_iterates: bool = True,
        clip_check_share: float = 0.05,
        backend: Any = "default",
    ) -> None:
        self._backend, self._dask_backend = _check_dpadvi_backend(backend)
        self.average_iterates = check_bool("average_iterates", average_iterates)
        clip_check_share = _as_real("clip_check_share", clip_check_share)
        if not 0.0 <= clip_check_share < 1.0:
            raise ValueError(f"`clip_check_share` must be in [0, 1). Found {clip_check_share!r}.")
        self.epsilon = None if epsilon is None else check_finite_positive("epsilon", epsilon)
        self.sampling_rate = check_sampling_rate("sampling_rate", sampling_rate)
        self.grad_clip = check_finite_positive("grad_clip", grad_clip)
        self.noise_multiplier = (
            None if noise_multiplier is None else check_finite_positive("noise_multiplier", noise_multiplier)
        )
        if approximation not in _APPROXIMATIONS:
            raise ValueError(f"`approximation` must be one of {sorted(_APPROXIMATIONS)}. Found {approximation!r}.")
        self.approximation = approximation
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"`optimizer` must be one of {sorted(OPTIMIZERS)}. Found {optimizer!r}.")
        make_optimizer(optimizer, learning_rate)  # validates the learning rate now
        self.optimizer, self.learning_rate = optimizer, learning_rate
        self.n_mc = check_positive_int("n_mc", n_mc)
        self.neighbouring = check_neighbouring("neighbouring", neighbouring)
        self.delta = self._check_budget_and_delta(budget, delta)
        if self.noise_multiplier is None and self.epsilon is None and budget is None:
            raise ValueError(
                "Give either a target `epsilon` (with `delta`) or a `noise_multiplier` (or a `budget` to calibrate "
                "to). Found neither."
            )
        self.budget = budget
        self._set_clip_check(clip_check_share)
        self.reproducible_noise = check_bool("reproducible_noise", reproducible_noise)
        self.random_seed = random_seed
        self._start, self._start_events, self._start_source = self._check_start(start)
        if compile_kwargs is not None and not isinstance(compile_kwargs, dict):
            raise TypeError(f"`compile_kwargs` must be a dict. Found {type(compile_kwargs).__name__}.")
        self._compile_kwargs = dict(compile_kwargs or {})
        try:
            self._model = modelcontext(model)
        except TypeError:  # no model given and no context: take it at fit
            self._model = None
        self.hist = np.asarray(())
        self.state = None
        self._approx = None
        self._iterations = 0  # accounted so far

    def _check_budget_and_delta(self, budget: PrivacyBudget | None, delta: float | None) -> float:
        """δ, checked against the budget (which supplies it when omitted); the budget's type and neighbours checked."""
        if budget is not None and not isinstance(budget, PrivacyBudget):
            raise TypeError(f"`budget` must be a pymc_dp.PrivacyBudget. Found {type(budget).__name__}.")
        if budget is not None and budget.neighbouring != self.neighbouring:
            raise ValueError(
                f"`budget` must use the same neighbouring relation as DPADVI ({self.neighbouring!r}). "
                f"Found {budget.neighbouring!r}."
            )
        if delta is None and budget is not None:
            delta = budget.delta
        if budget is not None and delta != budget.delta:
            raise ValueError(
                f"`delta` must equal the budget's δ ({budget.delta:g}) when a budget is given. Found {delta!r}."
            )
        if delta is None:
            raise ValueError("`delta` must be given (a number in (0, 1), typically below 1/N). Found None.")
        return check_unit_interval_open("delta", delta)

    def _set_clip_check(self, clip_check_share: float) -> None:
        """The clipping check's share of ε and its histogram's noise multiplier (None: off), from public settings."""
        # The clipping check needs a target to take its share of: on when σ is calibrated from `epsilon`.
        calibrated = self.noise_multiplier is None and self.epsilon is not None
        self.clip_check_share = clip_check_share if calibrated else 0.0
        self._clip_check_noise = None
        if self.clip_check_share > 0:
            check_epsilon = self.clip_check_share * self.epsilon * (1 - CALIBRATION_MARGIN)
            check_mu = gaussian_mu_for_target(check_epsilon, self.delta)
            self._clip_check_noise = math.sqrt(0.5 / check_mu)
        self._clip_checks = 0  # released so far

    @staticmethod
    def _check_start(start: Any) -> tuple[dict | None, tuple[PrivacyEvent, ...], dict[str, Any]]:
        """(the start point, the events it depends on, its provenance record) of ``start``."""
        if start is None:
            return None, (), {"source": "model"}
        if isinstance(start, PrivateStart):
            if len(start) != 1 or not isinstance(start[0], dict):
                raise ValueError(
                    "`start` must hold exactly one point when it is a PrivateStart (e.g. approx.initial_values(1)). "
                    f"Found {len(start)} points."
                )
            return dict(start[0]), tuple(start.events), {"source": "dp_release", "description": start.source}
        if not isinstance(start, dict):
            raise TypeError(f"`start` must be a dict of start values or a PrivateStart. Found {type(start).__name__}.")
        note = "start given by the caller: not covered by ε, must not come from the data"
        return start, (), {"source": "user", "note": note}

    def prepare(self, model: Any = None) -> None:
        """Build the approximation and run DPADVI's model checks now; releases and charges nothing.

        ``fit`` does this at its first call; call it earlier when a larger run must be refused
        before it charges anything (``pmdp.sample(init="dpadvi")`` does). The checks read
        the model's structure and probe its rows; their errors carry no data.
        """
        if self._approx is None:
            model = modelcontext(model) if model is not None else (self._model or modelcontext(None))
            self._setup(model, self.random_seed)

    # -- PyMC's Inference interface --------------------------------------------------------
    @property
    def approx(self):
        """The fitted :class:`DPMeanField` / :class:`DPFullRank` (None before the first fit)."""
        return self._approx

    def run_profiling(self, *args, **kwargs):
        raise NotImplementedError("DPADVI has no profiling run: every iteration would be a privacy release.")

    def refine(self, n: int, progressbar: bool = True, progressbar_theme: Any = None):
        """Run ``n`` more iterations (accounted on top of the earlier ones)."""
        return self.fit(n, progressbar=progressbar, progressbar_theme=progressbar_theme)

    def __getstate__(self):
        raise TypeError(
            "A DPADVI object holds the model and its per-row data access, i.e. the raw data: it cannot be pickled. "
            "Publish approx.sample(...) or the fitted parameters instead."
        )

    # -- accounting ------------------------------------------------------------------------
    def privacy_events(self, iterations: int) -> list[PrivacyEvent]:
        """The events of ``iterations`` iterations at the current noise multiplier."""
        if self.noise_multiplier is None:
            raise RuntimeError("The noise multiplier is not set yet: it is calibrated at the first fit.")
        return NoisyPoissonGradientSum.events(
            self.noise_multiplier, self.sampling_rate, iterations, self.neighbouring
        ) + self._clip_check_events(self._clip_checks)

    def _clip_check_events(self, count: int) -> list[PrivacyEvent]:
        """The clipping checks' events (one histogram per fit; none when the check is off)."""
        if self._clip_check_noise is None or count == 0:
            return []
        return NoisyScoreNormHistogram.events(self._clip_check_noise, count, "DPADVI clipping check")

    def privacy_spent(self) -> PrivacySpent:
        """ε at ``delta`` of every iteration run so far by this object."""
        if self._iterations == 0:
            return PrivacySpent(0.0, self.delta, self.neighbouring, "pld", None, None, ())
        events = self.privacy_events(self._iterations)
        eps, method, mu = compose_epsilon(events, self.delta)
        return PrivacySpent(eps, self.delta, self.neighbouring, method, mu, None, tuple(events))

    def _calibrated_noise(self, n: int) -> float:
        """σ for a fit of ``n`` more iterations: the set one, or calibrated from the target; changes nothing."""
        if self.noise_multiplier is not None:
            return self.noise_multiplier
        if self.epsilon is not None:
            target, earlier = self.epsilon, tuple(self._clip_check_events(self._clip_checks + 1))
        else:  # calibrate to what is left of the budget
            target, earlier = self.budget.epsilon, self.budget.events
        try:
            return poisson_gaussian_noise_multiplier(
                target * (1.0 - CALIBRATION_MARGIN),
                self.delta,
                self.sampling_rate,
                self._iterations + n,
                self.neighbouring,
                earlier,
            )
        except ValueError as error:
            raise PrivacyBudgetExceededError(f"{error} Nothing was run or charged.") from None

    # -- fitting ---------------------------------------------------------------------------
    def _setup(self, model, random_seed: int | None) -> None:
        discrete = [v.name for v in model.value_vars if v.dtype not in pm.pytensorf.continuous_types]
        if discrete:
            raise ValueError(
                f"DPADVI needs continuous free variables (a Gaussian approximation). Found discrete: {discrete}."
            )
        # Raises ModelStructureError for models without a row axis.
        settings = (self._compile_kwargs, self.neighbouring, self.reproducible_noise)
        if self._dask_backend is not None and self._dask_backend.rows is not None:  # a model of row placeholders
            from pymc_dp.backends.dask_partitions import placeholder_access

            prior, mechanisms = placeholder_access(model, self._dask_backend.rows, *settings)
        else:
            prior, mechanisms = model_access(model, None, None, None, *settings[:2], reproducible=settings[2])
        mechanisms.check_subsets()  # Poisson batches: the subset path is checked before anything is charged
        if self._dask_backend is not None:  # the rows are scattered when a fit starts (_attach_backend)
            from pymc_dp.backends.dask_dpadvi import check_dpadvi_rows

            check_dpadvi_rows(mechanisms)
        if self._backend is not None:  # the rows go to the device; the batch release is compiled, not run
            from pymc_dp.backends.jax_rows import JaxRowMechanisms

            mechanisms = JaxRowMechanisms(
                mechanisms,
                reproducible_noise=self.reproducible_noise,
                dtype=self._backend.dtype,
                chunk_rows=self._backend.chunk_rows,
                whole_transition=True,  # DPADVI's update (advi_kernel) runs on the device in blocks
                scan_iterations=self._backend.scan_iterations,
            )
            mechanisms.check_batch_gradient()
        approx_class = _APPROXIMATIONS[self.approximation]
        kwargs = {"model": model, "random_seed": random_seed}
        if self._start is not None:
            kwargs["start"] = self._start
        approx = approx_class(**kwargs)
        group = approx.groups[0]
        # θ in the data layer's order from θ in the approximation's order (both by value-variable name).
        offsets, position = {}, 0
        for var in prior.value_vars:
            size = int(np.prod(group.ordering[var.name][2], dtype=int))
            offsets[var.name] = (position, size)
            position += size
        to_rows = np.empty(prior.n_params, dtype=np.int64)
        for name, (_, slc, _, _) in group.ordering.items():
            start, size = offsets[name]
            to_rows[start : start + size] = np.arange(slc.start, slc.stop)
        self._to_rows = to_rows
        self._prior, self._row_mechanisms = prior, mechanisms
        approx._dp_group_indexed = group_indexed_parameters(model)  # structure only: types and shapes
        self._family = family_for(self.approximation, prior.n_params)
        self._params = [group.params_dict[k] for k in ("mu", "rho" if self.approximation == "meanfield" else "L_tril")]
        self._optimizer_state = make_optimizer(self.optimizer, self.learning_rate)
        if self._backend is not None:
            self._compile_blocks(mechanisms, prior)
        seed_sequence = np.random.SeedSequence(random_seed)
        mc_seed, noise_seed = seed_sequence.spawn(2)
        self._mc_rng = np.random.default_rng(mc_seed)
        self._noise_rng = mechanism_rng(np.random.default_rng(noise_seed), self.reproducible_noise)
        self._check_rng = np.random.default_rng(seed_sequence.spawn(1)[0])  # the clipping check's draws: no data
        self._approx = approx

    @withholds_chains
    def fit(
        self,
        n: int = 10000,
        model: Any = None,
        *,
        random_seed: int | None = None,
        progressbar: bool = True,
        callbacks: list | None = None,
        progressbar_theme: Any = None,
        backend: str | None = None,
        include_transformed: bool | None = None,
        **kwargs: Any,
    ):
        """Run ``n`` DP iterations and return the approximation.

        Plans and prices the iterations before touching data: calibrates σ at the first fit
        when it is unset, refuses a fit over ``epsilon`` or over the budget (nothing is run
        or charged), charges the budget, then iterates.

        Parameters
        ----------
        n : int
            Number of iterations.
        model : pm.Model, optional
            The model, if not given at construction or by context.
        random_seed : int, optional
            Overrides the constructor's seed (first fit only).
        progressbar : bool
            Show a progress bar (iterations only: no loss is computed).
        callbacks : list of callables, optional
            Called as ``callback(approx, None, i)`` after every iteration (e.g.
            ``pm.callbacks.CheckParametersConvergence``); they see only private values.
        progressbar_theme : rich Theme, optional
            As for ``pm.fit``.
        backend : None
            PyMC 6's ``pm.fit`` passes it; the per-row functions are compiled with PyMC's
            default backend, so only None is accepted.
        include_transformed : bool, optional
            As for ``pm.fit`` on PyMC 6: whether ``approx.sample`` also returns the
            unconstrained (transformed) variables.
        **kwargs
            Refused: ``Inference.fit`` options that would compute the loss or bypass
            clipping (``score``, ``obj_optimizer``, ...) get an error saying why.

        Returns
        -------
        DPMeanField or DPFullRank
        """
        n = check_positive_int("n", n)
        _check_fit_options(kwargs, backend)
        model = self._fit_model(model)
        n_rows = observed_rows(model)
        run = PrivateRun(
            "DPADVI.fit",
            description="DPADVI",
            delta=self.delta,
            neighbouring=self.neighbouring,
            n_rows=n_rows,
            epsilon=self.epsilon,
            budget=self.budget,
        )
        sigma = self._calibrated_noise(n)
        total = self._iterations + n
        checks = self._clip_checks + (1 if self._clip_check_noise is not None else 0)
        run_epsilon = run.plan(
            NoisyPoissonGradientSum.events(sigma, self.sampling_rate, total, self.neighbouring)
            + self._clip_check_events(checks),
            charge=NoisyPoissonGradientSum.events(sigma, self.sampling_rate, n, self.neighbouring)
            + self._clip_check_events(checks - self._clip_checks),
            depends_on=self._start_events,  # a DP start: composed into the result, charged when it was made
            advice=f"use more noise, a smaller sampling rate or fewer iterations ({total} iterations in all at "
            f"noise_multiplier={sigma:.6g}, sampling_rate={self.sampling_rate:g}).",
        )
        if self._approx is None:
            from_model = user_initvals(model) if self._start is None else []
            if from_model:  # the fit starts at the model's initial point: its initval= may come from the data
                warn_user_initvals(from_model, "DPADVI.fit")  # (the warning names fit's caller: called from here)
                self._start_source = user_initval_record(from_model)
            seed = self.random_seed if random_seed is None else random_seed
            self._setup(model, seed)  # may still refuse the model; nothing is charged yet
            self.random_seed = seed
        label = f"DPADVI fit {len(self.budget.labels) + 1 if self.budget else 1}: {n} iterations"
        detach = self._attach_backend()  # Dask: rows scattered to the workers before the charge (nothing released)
        try:
            with run.releasing(label):
                # Every check passed: commit σ, then touch data.
                self.noise_multiplier = sigma
                self._iterations = total
                self._clip_checks = checks
                self._approx._dp_record = self._record(run, run_epsilon)
                mechanism = self._row_mechanisms.poisson_gradient_sum(
                    self.grad_clip, sigma, self.sampling_rate, self.neighbouring
                )
                tail, trace = self._run_iterations(mechanism, n, progressbar, progressbar_theme, callbacks)
                if self._clip_check_noise is not None:
                    self._approx._dp_clipping = self._clipping_check()
                    self._approx._dp_record["clipping_check"] = self._approx._dp_clipping
        finally:
            detach()  # the workers release the rows (the fit stays charged if it failed)
        self._keep_post_processing(tail, trace)
        self.approx.hist = self.hist  # empty: no loss is computed
        if include_transformed is not None:
            for group in self.approx.groups:
                group.include_transformed = bool(include_transformed)
        return self.approx

    def _attach_backend(self) -> Any:
        """With a Dask backend, scatter the rows and route the releases to the workers; returns the undo (no release).

        Called before every fit's charge: a cluster that cannot take the rows leaves the budget
        as it was. The undo releases the partitions and restores the in-process mechanisms, so
        the workers hold the rows only while a fit runs (a ``refine`` scatters them again).
        """
        if self._dask_backend is None:
            return lambda: None
        from pymc_dp.backends.dask_dpadvi import attach_dpadvi_rows

        local = self._row_mechanisms
        self._row_mechanisms = attach_dpadvi_rows(self._dask_backend, local, self.reproducible_noise)

        def detach() -> None:
            remote, self._row_mechanisms = self._row_mechanisms, local
            remote.close()

        return detach

    def _fit_model(self, model: Any):
        """The model a fit runs on: the first fit's (given, the constructor's or the context's), then that one."""
        if self._approx is not None:
            if model is not None and modelcontext(model) is not self._approx.model:
                raise ValueError("`model` must be the model of the first fit. Found another model.")
            return self._approx.model
        if model is not None:
            return modelcontext(model)
        if self._model is not None:
            return self._model
        try:
            return modelcontext(None)
        except TypeError:
            raise ValueError(
                "`model` must be given to DPADVI(...) or DPADVI.fit, or fit inside a `with model:` block "
                "(pm.fit passes neither model= nor random_seed= to an Inference instance). Found none."
            ) from None

    def _keep_post_processing(self, tail: Any, trace: Any) -> None:
        """What q keeps of the fit's released gradients: the optimisation noise and the Laplace posterior's source."""
        self._approx._dp_laplace_source = functools.partial(_laplace_of_trace, trace, self._prior, self._to_rows.copy())
        self._approx._dp_laplace_cache = None
        self._approx._dp_averaged_iterates = tail.count
        if tail.count >= 2:
            self._approx._dp_optimisation_sd = np.sqrt(tail.variance[: self._prior.n_params])  # μ, q's order
        else:  # stopped before its second half (a callback): nothing to average; flagged by the diagnostics
            self._approx._dp_optimisation_sd = None

    def _clipping_check(self) -> dict[str, Any]:
        """One release: the noisy share of rows whose clipped quantity at the fitted q exceeds ``grad_clip``.

        The quantity is what every iteration clips, mean_s gᵢ(θ_s) M_s, at
        :data:`~pymc_dp.variational.clip_check.CLIP_CHECK_DRAW_SETS` sets of Monte Carlo draws
        of the fitted q from the check's own generator (data-free), mapped as the release maps
        them; its histogram (:class:`pymc_dp.mechanisms.histogram_mapped_gradient.
        NoisyMappedGradientNormHistogram`) has the score-norm histogram's sensitivity (√2
        substitute, 1 add/remove) and price.
        """
        draw_sets = clip_check_draw_sets(
            self._family, self._packed(), self._to_rows, self.n_mc, self._check_rng, CLIP_CHECK_DRAW_SETS
        )
        # On the JAX backend from OS entropy, as its other releases (noise_source); else DPADVI's generator.
        noise = getattr(self._row_mechanisms, "noise_source", lambda rng: rng)(self._noise_rng)
        histogram = self._row_mechanisms.mapped_gradient_histogram(self._clip_check_noise, self.neighbouring)
        noisy = histogram.release_counts(draw_sets, noise)
        n_rows = self._prior.n_rows if self.neighbouring == "substitute" else None  # N public only then
        noise_std = self._clip_check_noise * histogram_sensitivity(self.neighbouring)
        reference = f"the fitted q ({CLIP_CHECK_DRAW_SETS} sets of its draws; the norm of what each iteration clips)"
        summary = clipping_summary(noisy, self.grad_clip, noise_std, n_rows, reference)
        return {**summary, "noise_multiplier": self._clip_check_noise}

    def _record(self, run: PrivateRun, run_epsilon: float) -> dict[str, Any]:
        """The accountant record of every fit of this object and of the start's release (``run``: the latest fit)."""
        return run.record(
            start=dict(self._start_source),
            reproducible_noise=self.reproducible_noise,
            run_epsilon=run_epsilon,
            iterations=self._iterations,
            settings={
                "noise_multiplier": self.noise_multiplier,
                "sampling_rate": self.sampling_rate,
                "grad_clip": self.grad_clip,
                "approximation": self.approximation,
                "optimizer": self.optimizer,
                "learning_rate": self.learning_rate,
                "n_mc": self.n_mc,
                "average_iterates": self.average_iterates,
                "reproducible_noise": self.reproducible_noise,
                "clip_check_share": self.clip_check_share,
                "backend": self._backend_record(),
            },
        ).to_dict()

    def _backend_record(self) -> dict[str, Any]:
        """The public description of the backend (no data)."""
        if self._dask_backend is not None:
            from pymc_dp.backends.dask_dpadvi import dask_dpadvi_record

            return dask_dpadvi_record(self._dask_backend, self.reproducible_noise)
        if self._backend is None:
            return {"name": "default"}
        from pymc_dp.backends.jax_rows import import_jax

        jax = import_jax()
        return {
            "name": "jax",
            "dtype": self._backend.dtype,
            "device": jax.devices()[0].platform,
            "jax_version": jax.__version__,
            "noise": "reproducible (seeded)" if self.reproducible_noise else "os.urandom (BufferedSecureNoise)",
            "scan_iterations": int(self._row_mechanisms.scan_iterations),  # as the fit runs (set up before a record)
        }
