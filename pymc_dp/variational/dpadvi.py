"""DPADVI: ADVI with per-row clipped, Poisson-subsampled, Gaussian-noised ELBO gradients."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import warnings
from typing import Any

import numpy as np
import pymc as pm
import pytensor
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
from pymc_dp.accounting.events import (
    PrivacyEvent,
    PrivacySpent,
    event_from_dict,
)
from pymc_dp.accounting.gaussian import gaussian_mu_for_target
from pymc_dp.data import observed_rows
from pymc_dp.mechanisms import NoisyPoissonGradientSum, NoisyScoreNormHistogram, mechanism_rng, model_access
from pymc_dp.mechanisms.clip_bound import clipping_summary, histogram_sensitivity
from pymc_dp.results import PrivateStart, finalize_result, posterior_attrs
from pymc_dp.run import PrivateRun
from pymc_dp.starts import user_initval_record, user_initvals, warn_user_initvals
from pymc_dp.step_methods import kernels
from pymc_dp.step_methods.host_releases import HostReleases
from pymc_dp.usability import DPADVI_MAX_MEAN_ERROR, PoorMixingWarning, clipping_problem, dpadvi_mean_error
from pymc_dp.variational.families import family_for
from pymc_dp.variational.optimizers import OPTIMIZERS, make_optimizer
from pymc_dp.variational.trace_laplace import TraceLaplace, trace_laplace

__all__ = ["DPADVI", "LAPLACE_MAX_MODE_ERROR", "DPFullRank", "DPMeanField"]

#: The Laplace posterior (``posterior="laplace"``) is flagged as unusable when the DP noise
#: leaves its mode uncertain by more than this many Laplace posterior sds in any coordinate:
#: the reported spread is then mostly noise, not posterior.
LAPLACE_MAX_MODE_ERROR = 2.0
#: The posteriors ``approx.sample`` draws from.
_POSTERIORS = ("laplace", "variational")

#: ``Inference.fit`` keywords with no private meaning here, and why.
_REFUSED_FIT_KWARGS = {
    "score": "the ELBO is an exact function of the data; DPADVI reports no loss",
    "obj_optimizer": "DPADVI takes `optimizer=` and `learning_rate=` (it clips per row before any optimiser)",
    "total_grad_norm_constraint": "DPADVI clips every row's gradient to `grad_clip`",
    "more_replacements": "replacements would bypass the per-row clipping",
    "more_updates": "extra updates would read the data outside the mechanism",
    "obj_n_mc": "DPADVI takes `n_mc=` at construction",
}


class _IterateTail:
    """Running mean and variance (Welford) of the optimiser's iterates from iteration ``start`` on."""

    def __init__(self, start: int) -> None:
        self.start, self.seen, self.count = start, 0, 0
        self.mean: np.ndarray | None = None
        self._m2: np.ndarray | None = None

    def add(self, packed: np.ndarray) -> None:
        self.seen += 1
        if self.seen <= self.start:
            return
        self.count += 1
        if self.mean is None:
            self.mean, self._m2 = np.array(packed, dtype=float), np.zeros_like(packed, dtype=float)
            return
        delta = packed - self.mean
        self.mean = self.mean + delta / self.count
        self._m2 = self._m2 + delta * (packed - self.mean)

    @property
    def variance(self) -> np.ndarray:
        return self._m2 / max(self.count - 1, 1)


class _GradientTrace:
    """The released data gradients (μ block) and the points they were taken at, from iteration ``start`` on."""

    def __init__(self, start: int) -> None:
        self.start, self.seen = start, 0
        self.points: list[np.ndarray] = []
        self.gradients: list[np.ndarray] = []

    def add(self, point: np.ndarray, gradient: np.ndarray) -> None:
        self.seen += 1
        if self.seen > self.start:
            self.points.append(np.array(point, dtype=float))
            self.gradients.append(np.array(gradient, dtype=float))


def _laplace_of_trace(trace: _GradientTrace, prior: Any, to_rows: np.ndarray) -> tuple[TraceLaplace | None, Any]:
    """The Laplace posterior from the released gradients (post-processing), in q's order; or why not.

    Takes only what it needs (the released trace, the data-free prior and the parameter order),
    so that the approximation that computes it on demand holds no reference to the rows.
    """
    if len(trace.points) <= 2 * (prior.n_params + 1):
        return None, f"{len(trace.points)} released gradients in the last fit's second half: too few to fit"

    def prior_gradient(theta: np.ndarray) -> np.ndarray:
        return prior.prior_logp_and_grad(theta)[1]

    try:
        laplace, field = trace_laplace(np.asarray(trace.points), np.asarray(trace.gradients), prior_gradient)
    except ValueError as err:  # our own messages and NumPy's LinAlgError: shapes and counts, no data
        return None, str(err)
    order = np.argsort(to_rows)  # q's index i holds data-layer index order[i]
    in_q_order = dataclasses.replace(
        laplace,
        mode=laplace.mode[order],
        covariance=laplace.covariance[np.ix_(order, order)],
        mode_covariance=laplace.mode_covariance[np.ix_(order, order)],
    )
    return in_q_order, round(field.effective_count, 1)


class _DPApproximationMixin:
    """What a DPADVI approximation adds to PyMC's: private ``sample`` and its guarantee."""

    _dp_record: dict[str, Any] | None = None

    def sample(
        self,
        draws: int = 500,
        *,
        random_seed: Any = None,
        return_inferencedata: bool = True,
        posterior: str = "variational",
        inflate: bool = True,
        **kwargs,
    ):
        """Draw from the fitted approximation; the result carries ``dp_*`` attributes and no raw data.

        As ``Approximation.sample``, except that ``observed_data`` and ``constant_data`` are
        removed, deterministics that read data are left out, and ``posterior.attrs`` holds
        ``dp_epsilon``, ``dp_delta``, ``dp_neighbouring``, ``dp_n_rows`` (substitute only)
        and ``dp_accountant``. The draws are post-processing of the DP releases: they cost no
        further privacy, however many are drawn.

        Parameters
        ----------
        draws : int
            Number of draws.
        random_seed : int or Generator, optional
            Seeds the draws (data-free).
        return_inferencedata : bool
            Must be True.
        posterior : {"variational", "laplace"}, default "variational"
            ``"variational"``: q itself, widened by the optimisation noise when ``inflate``.
            ``"laplace"`` (experimental): the Laplace approximation read off the released
            gradients of the last fit's second half (:mod:`pymc_dp.variational.trace_laplace`),
            centred at the mode of the prior times the likelihood whose gradient those
            gradients fit by least squares, with that fit's curvature (lowered by one standard
            error per eigen-direction), widened by the standard error the DP noise leaves in
            the mode. Its marginals are drawn through q's family (a mean-field q keeps the
            variances, not the correlations). Where it cannot be formed (too few iterations, a
            curvature that is not positive definite) the draws come from q as with
            ``"variational"``, and ``dp_diagnostics`` says why. Measured on ``randhie``
            logistic regression at ε = 1 (12 fits): sds 2.05× NUTS's (median) against 5.0×
            for ``"variational"``, NUTS's means inside the 94 % intervals in 97.6 % of fit ×
            coefficient cases; the misses, in unflagged fits too, fall on the two most
            correlated coefficients, whose sds it can under-state (0.6–0.8× NUTS's): see
            docs/dpadvi.md.
        inflate : bool, default True
            With ``posterior="variational"``: widen q by the optimisation noise (see
            :meth:`optimisation_diagnostics`); ``False`` draws from q unchanged and flags a q
            narrower than the noise (:class:`pymc_dp.diagnostics.PoorMixingWarning`).
        **kwargs
            Passed to ``Approximation.sample``.
        """
        if return_inferencedata is not True:
            raise ValueError(
                "`return_inferencedata` must be True: pymc_dp attaches its guarantee to the returned object."
            )
        if self._dp_record is None:
            raise RuntimeError("This approximation has not been fitted by DPADVI yet: call DPADVI.fit first.")
        check_bool("inflate", inflate)
        if posterior not in _POSTERIORS:
            raise ValueError(f"`posterior` must be one of {_POSTERIORS}. Found {posterior!r}.")
        diagnostics = self.optimisation_diagnostics(inflate, posterior=posterior)
        if diagnostics["posterior"] == "laplace":
            context = self._laplace_q()
        else:
            context = self._inflated(diagnostics if inflate else None)
        with context:
            idata = super().sample(draws, random_seed=random_seed, return_inferencedata=True, **kwargs)
        finalize_result(idata, self._dp_record, self.model)
        posterior_attrs(idata)["dp_diagnostics"] = json.dumps(diagnostics)
        if diagnostics["usable"] is False:
            warnings.warn(diagnostics["reasons"][0], PoorMixingWarning, stacklevel=2)
        return idata

    _dp_optimisation_sd: np.ndarray | None = None
    _dp_averaged_iterates: int = 0
    _dp_clipping: dict[str, Any] | None = None
    _dp_group_indexed: list[str] = []  # noqa: RUF012 (set per instance by DPADVI; read-only here)

    def optimisation_diagnostics(self, inflate: bool = True, posterior: str = "variational") -> dict[str, Any]:
        """How the optimiser's noise compares with q's spread (post-processing of the released gradients).

        Two measures of how far the fitted mean may be from the noise-free optimum, both
        post-processing of public values: the spread of the last fit's second half of
        iterates per coordinate of μ (unconstrained scale), and, under substitute
        neighbours, the expected error of the averaged mean from σ, q, N and the iterations
        (:func:`pymc_dp.usability.dpadvi_mean_error`, in posterior sds). A fit whose expected
        error exceeds :data:`pymc_dp.usability.DPADVI_MAX_MEAN_ERROR` is flagged as unusable.
        ``approx.sample`` draws from q with each variance widened by the iterate spread² and
        (error × q's sd)² (``inflate=True``, the default; ``"inflated"`` in the result), or
        from q unchanged, flagged when q is narrower than the iterate spread
        (``inflate=False``).
        """
        sd, jitter = self._spread()
        ratio = jitter / sd
        worst = float(np.max(ratio)) if ratio.size else 0.0
        record = self._dp_record
        settings = record["settings"]
        averaged = self._dp_averaged_iterates
        mean_error = None
        reasons = []
        if averaged < 2:
            reasons.append(
                f"DPADVI's last fit ended with {averaged} iterate(s) in its second half (a callback stopped it "
                "early, or it was too short): its noise was not averaged. Fit for more iterations."
            )
        elif record["neighbouring"] == "substitute":  # N is public only there
            mean_error = dpadvi_mean_error(  # the error of the average over the iterates actually averaged
                settings["noise_multiplier"], settings["sampling_rate"], record["n_rows"], 2 * averaged
            )
        laplace, why = self._dp_laplace if posterior == "laplace" else (None, None)
        if laplace is None:  # q is what is drawn (asked for, or the Laplace posterior could not be formed)
            posterior = "variational"
        if mean_error is not None and mean_error > DPADVI_MAX_MEAN_ERROR and posterior == "variational":
            # (The Laplace posterior carries its own error estimate: the theory's optimistic one is not used.)
            reasons.append(
                f"DPADVI's gradient noise moves its fitted mean by about {mean_error:.2g} posterior sds (expected, "
                "from σ, q, N and the iterations): not a usable posterior. Use more ε or more rows (N·ε), a larger "
                "sampling rate or more iterations, or a method that spends the budget once (pmdp.release_statistics)."
            )
        if self._dp_group_indexed and "rho" in self.groups[0].params_dict:
            reasons.append(
                f"DPADVI's mean-field q on a model with group-level parameters ({', '.join(self._dp_group_indexed)}, "
                "indexed by a per-row group index) ignores their posterior correlations: its sds typically understate "
                "the posterior's and its mean can be biased (on the utility benchmark's hierarchical model it was "
                "5-14 posterior sds off at ε ≤ 1). Fit approximation='fullrank', or use a sampler where one can mix."
            )
        problem = clipping_problem({"releases": [self._dp_clipping]} if self._dp_clipping else None, "DPADVI")
        if problem is not None:
            reasons.append(f"DPADVI's {problem}.")
        laplace_summary = None
        if why is not None and laplace is None:
            laplace_summary = {"formed": False, "why_not": why}
        elif laplace is not None:
            ratio_laplace = laplace.mode_error_ratio
            laplace_summary = {
                "formed": True,
                "mode_error_ratio_max": float(np.max(ratio_laplace)),
                "sd_ratio_to_q": [float(v) for v in np.sqrt(np.diag(laplace.covariance)) / sd],
                "clamped_directions": laplace.clamped_directions,
                "unresolved_directions": laplace.unresolved_directions,
                "curvature_relative_error_max": laplace.curvature_relative_error,
                "gradients_fitted": why,
            }
            if laplace.unresolved_directions:
                reasons.append(
                    f"The released gradients do not determine the likelihood's curvature in "
                    f"{laplace.unresolved_directions} direction(s) (within one standard error of zero): DPADVI's "
                    "Laplace posterior is the prior's there, far wider than the posterior. Use more ε or more "
                    "rows, or posterior='variational'."
                )
            if float(np.max(ratio_laplace)) > LAPLACE_MAX_MODE_ERROR:
                reasons.append(
                    f"The DP noise leaves DPADVI's Laplace mode uncertain by up to {np.max(ratio_laplace):.2g} "
                    "posterior sds (its intervals are widened for it, so they are mostly noise): not a usable "
                    "posterior. Use more ε or more rows (N·ε), more iterations, or a larger sampling rate."
                )
        if worst > 1.0 and not inflate and posterior == "variational":
            reasons.append(
                f"DPADVI's fitted q is narrower than its optimisation noise (iterate jitter up to {worst:.2g}× q's "
                "sd): its intervals understate the uncertainty. Sample with inflate=True, or fit with more ε, a larger "
                "sampling rate or a smaller learning rate."
            )
        return {
            "method": "DPADVI",
            "posterior": posterior,
            **({"laplace": laplace_summary} if laplace_summary is not None else {}),
            # 12 significant digits: the iterate spread's last bits vary with the summation order of
            # the BLAS in use, and records of runs that are otherwise identical must compare equal.
            "optimisation_sd_ratio_max": float(f"{worst:.12g}"),
            "expected_mean_error_sd": mean_error,
            "inflated": bool(inflate) if posterior == "variational" else None,
            **({"clipping": self._dp_clipping} if self._dp_clipping else {}),
            # None: under add/remove neighbours N is private, so the expected error is not computed.
            "usable": False if reasons else (True if mean_error is not None else None),
            "reasons": reasons,
            # The key pmdp.sample's diagnostics list their problems under: whoever reads `problems` finds them here too
            "problems": list(reasons),
        }

    def _spread(self) -> tuple[np.ndarray, np.ndarray]:
        """(q's standard deviations, the last fit's iterate jitter) per coordinate, unconstrained, q's order."""
        sd = np.sqrt(np.atleast_1d(np.diag(np.atleast_2d(np.asarray(self.cov.eval(), dtype=float)))))
        jitter = self._dp_optimisation_sd if self._dp_optimisation_sd is not None else np.zeros_like(sd)
        return sd, jitter

    #: Computes the Laplace posterior of the last fit (post-processing of its released gradients);
    #: called on the first ``sample(posterior="laplace")``, so a fit costs nothing more.
    _dp_laplace_source: Any = None
    _dp_laplace_cache: tuple[TraceLaplace | None, Any] | None = None

    @property
    def _dp_laplace(self) -> tuple[TraceLaplace | None, Any]:
        """(TraceLaplace in q's order, gradients fitted) or (None, why it was not formed)."""
        if self._dp_laplace_cache is None:
            source = self._dp_laplace_source
            self._dp_laplace_cache = (None, "not fitted") if source is None else source()
        return self._dp_laplace_cache

    def _scale_values(self, covariance: np.ndarray) -> tuple[Any, np.ndarray]:
        """q's scale parameter and the values that give q ``covariance`` (its diagonal when mean-field)."""
        group = self.groups[0]
        if "rho" in group.params_dict:
            sd = np.sqrt(np.diag(covariance))
            return group.params_dict["rho"], sd + np.log(-np.expm1(-sd))  # softplus⁻¹
        chol = np.linalg.cholesky(covariance)
        rows, cols = np.tril_indices(covariance.shape[0])
        values = chol[rows, cols]
        diagonal = rows == cols
        values[diagonal] = values[diagonal] + np.log(-np.expm1(-values[diagonal]))  # the diagonal through softplus
        return group.params_dict["L_tril"], values

    @staticmethod
    @contextlib.contextmanager
    def _temporarily(assignments: list[tuple[Any, np.ndarray]]):
        """Shared variables set to the given values while sampling, restored after."""
        saved = [(shared, np.asarray(shared.get_value(), dtype=float)) for shared, _ in assignments]
        for shared, value in assignments:
            shared.set_value(np.asarray(value).astype(shared.dtype))
        try:
            yield
        finally:
            for shared, value in saved:
                shared.set_value(value.astype(shared.dtype))

    def _laplace_q(self):
        """q set to the Laplace posterior's mean and covariance (marginals only when mean-field) while sampling."""
        laplace = self._dp_laplace[0]
        mu = self.groups[0].params_dict["mu"]
        return self._temporarily([(mu, laplace.mode), self._scale_values(laplace.total_covariance)])

    def _inflated(self, diagnostics: dict[str, Any] | None):
        """q with variances σ² + jitter² + (error × σ)² while sampling (restored after); None: q unchanged."""
        if diagnostics is None:
            return contextlib.nullcontext()
        sd, jitter = self._spread()
        extra = np.square(jitter) + np.square((diagnostics["expected_mean_error_sd"] or 0.0) * sd)
        group = self.groups[0]
        if "rho" in group.params_dict:
            fitted = np.asarray(group.params_dict["rho"].get_value(), dtype=float)
            covariance = np.diag(np.logaddexp(0.0, fitted) ** 2 + extra)
        else:
            covariance = np.asarray(self.cov.eval(), dtype=float) + np.diag(extra)
        return self._temporarily([self._scale_values(covariance)])

    def initial_values(self, chains: int = 1, random_seed: Any = None, inflate: float = 1.0) -> PrivateStart:
        """One draw per chain from q with its scale multiplied by ``inflate``, as ``initvals``.

        Starting a DP chain here costs no privacy beyond the DPADVI run that fitted q. The
        points come as a :class:`pymc_dp.results.PrivateStart` carrying that run's events
        (and those of the ``PrivateStart`` the fit itself started from, if any):
        ``pymc_dp.sample`` then reports, as the chain's ``dp_epsilon``, the composition of
        the fit and the chain (the draws depend on both), without charging a budget twice.

        Parameters
        ----------
        chains : int
            Number of start points.
        random_seed : int or Generator, optional
            Seeds the draws (data-free randomness).
        inflate : float, default 1.0
            Multiplies q's standard deviations on the unconstrained scale. Values above 1
            over-disperse the starts relative to q (which a DP fit may place too narrowly or
            off-centre), so that R-hat can see chains that did not forget their starts.
        """
        chains = check_positive_int("chains", chains)
        inflate = check_finite_positive("inflate", inflate)
        if self._dp_record is None:
            raise RuntimeError("This approximation has not been fitted by DPADVI yet: call DPADVI.fit first.")
        rng = np.random.default_rng(random_seed)
        mean = np.asarray(self.mean.eval(), dtype=float)
        chol = np.linalg.cholesky(np.atleast_2d(np.asarray(self.cov.eval(), dtype=float)))
        flats = mean + inflate * rng.standard_normal((chains, mean.size)) @ chol.T
        points = [self._constrained_point(flat) for flat in flats]
        events = [event_from_dict(e) for e in self._dp_record["events"]]
        return PrivateStart(points, events, source=f"DPADVI ({self._dp_record['iterations']} iterations)")

    def unconstrained_mean_point(self) -> dict[str, np.ndarray]:
        """q's mean as a point: value-variable name → value on the unconstrained scale (a released value)."""
        if self._dp_record is None:
            raise RuntimeError("This approximation has not been fitted by DPADVI yet: call DPADVI.fit first.")
        mean = np.asarray(self.mean.eval(), dtype=float)
        return {
            name: np.asarray(mean[where], dtype=dtype).reshape(shape)
            for name, (_, where, shape, dtype) in self.groups[0].ordering.items()
        }

    def _constrained_point(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Free-variable values (constrained scale) of a flat unconstrained vector in q's ordering.

        Every transform is inverted with the point's own values of the variables it depends
        on (e.g. ``Uniform("b", lower=a, upper=a + 1)``), through the model's value → RV map.
        """
        ordering = self.groups[0].ordering
        if getattr(self, "_to_constrained", None) is None:
            values = list(self.model.value_vars)
            outputs = self.model.replace_rvs_by_values(list(self.model.free_RVs))
            self._to_constrained = pytensor.function(values, outputs, on_unused_input="ignore")
        inputs = []
        for value_var in self.model.value_vars:
            _, where, shape, dtype = ordering[value_var.name]
            inputs.append(np.asarray(flat[where], dtype=dtype).reshape(shape))
        outputs = self._to_constrained(*inputs)
        return {rv.name: np.asarray(out) for rv, out in zip(self.model.free_RVs, outputs, strict=True)}

    def __getstate__(self):
        raise TypeError(
            "A DPADVI approximation holds its model, and with it the raw data: it cannot be pickled. Publish "
            "approx.sample(...) or the fitted parameters (approx.mean, approx.std, approx.params) instead."
        )


class DPMeanField(_DPApproximationMixin, pm.MeanField):
    """``pm.MeanField`` fitted by :class:`DPADVI`: ``sample`` returns a private result."""


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


class DPFullRank(_DPApproximationMixin, pm.FullRank):
    """``pm.FullRank`` fitted by :class:`DPADVI`: ``sample`` returns a private result."""


_APPROXIMATIONS = {"meanfield": DPMeanField, "fullrank": DPFullRank}


def _check_dpadvi_backend(backend: Any):
    """None for the default backend, else the JaxBackend (JAX imported now: refused here if missing)."""
    if isinstance(backend, str) and backend == "default":
        return None
    from pymc_dp.backends.jax import JaxBackend
    from pymc_dp.backends.jax_rows import import_jax

    if isinstance(backend, str) and backend == "jax":
        backend = JaxBackend()
    if not isinstance(backend, JaxBackend):
        raise ValueError(f"`backend` must be 'default', 'jax' or a pymc_dp.JaxBackend. Found {backend!r}.")
    import_jax()
    return backend


class DPADVI(Inference):
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
        on one release of the histogram of per-row score norms at the fitted mean
        (:class:`pymc_dp.mechanisms.NoisyScoreNormHistogram`), from which the noisy share of
        rows whose score norm exceeds ``grad_clip`` is read: above 1/√N (clipping bias of
        the order of a posterior sd or more) the fit is flagged by
        :meth:`DPMeanField.optimisation_diagnostics`. The score norm bounds the clipped
        gradient's norm from below, so the share is a lower bound on the share clipped. 0
        turns it off; with ``noise_multiplier`` set it is off.
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
        cannot run is refused at the first fit, before the charge.
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
        self._backend = _check_dpadvi_backend(backend)
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
        self.delta = check_unit_interval_open("delta", delta)
        if self.noise_multiplier is None and self.epsilon is None and budget is None:
            raise ValueError(
                "Give either a target `epsilon` (with `delta`) or a `noise_multiplier` (or a `budget` to calibrate "
                "to). Found neither."
            )
        self.budget = budget
        # The clipping check needs a target to take its share of: on when σ is calibrated from `epsilon`.
        calibrated = self.noise_multiplier is None and self.epsilon is not None
        self.clip_check_share = clip_check_share if calibrated else 0.0
        self._clip_check_noise = None
        if self.clip_check_share > 0:
            check_epsilon = self.clip_check_share * self.epsilon * (1 - CALIBRATION_MARGIN)
            check_mu = gaussian_mu_for_target(check_epsilon, self.delta)
            self._clip_check_noise = math.sqrt(0.5 / check_mu)
        self._clip_checks = 0  # released so far
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
        prior, mechanisms = model_access(
            model, None, None, None, self._compile_kwargs, self.neighbouring, reproducible=self.reproducible_noise
        )
        mechanisms.check_subsets()  # Poisson batches: the subset path is checked before anything is charged
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
        self._approx = approx

    def _compile_blocks(self, mechanisms: Any, prior: Any) -> None:
        """Compile the JAX backend's ``lax.scan`` block for the expected batch, before the charge.

        Where it cannot be built (a prior JAX cannot run; float32) the fit runs one device call
        per iteration, recorded as ``scan_iterations`` 1 in the backend record.
        """
        if mechanisms.scan_iterations <= 1 or mechanisms.dtype != "float64":
            mechanisms.scan_iterations = 1
            return
        size = self._family.size
        try:
            mechanisms.compile_kernel(
                kernels.advi_kernel,
                prior,
                (np.zeros(size), self._optimizer_state.state(np.zeros(size))),
                np.zeros((self.n_mc, prior.n_params)),
                self._advi_settings(),
                releases=(mechanisms.batch_gradient_release(self.sampling_rate, size),),
                iterations=mechanisms.scan_iterations,
            )
        except Exception as error:  # a piece the block adds (the prior) has no JAX form: one call per iteration
            warnings.warn(
                f"DPADVI's lax.scan block could not be compiled ({type(error).__name__}; its message is withheld, it "
                "may hold data values): the fit runs one device call per iteration (recorded as scan_iterations 1).",
                UserWarning,
                stacklevel=4,
            )
            mechanisms.scan_iterations = 1

    def _packed(self) -> np.ndarray:
        return np.concatenate([np.asarray(p.get_value(), dtype=float) for p in self._params])

    def _unpack(self, packed: np.ndarray) -> None:
        parts = self._family.split(packed)
        for shared, value in zip(self._params, parts.values(), strict=True):
            # Fresh arrays every step (the optimiser never updates in place): no copy needed.
            shared.set_value(np.asarray(value, dtype=shared.dtype), borrow=True)

    def _advi_settings(self) -> kernels.ADVISettings:
        return kernels.ADVISettings(
            self._family, self._optimizer_state, tuple(int(i) for i in self._to_rows), self._prior.n_params
        )

    def _make_step(self, mechanism: NoisyPoissonGradientSum, tail: _IterateTail, trace: _GradientTrace, n: int):
        """One iteration of :func:`pymc_dp.step_methods.kernels.advi_kernel`: here, or from the backend's blocks."""
        settings = self._advi_settings()

        def step() -> None:
            packed = self._packed()
            eps = self._mc_rng.standard_normal((self.n_mc, self._prior.n_params))
            releases = HostReleases(self._prior, self._noise_rng, batch_gradient=mechanism)
            state = (packed, self._optimizer_state.state(packed))
            (updated, optimizer_state), info = kernels.advi_kernel(kernels.NUMPY_OPS, releases, state, eps, settings)
            self._optimizer_state.set_state(optimizer_state)
            trace.add(info.mean, info.released)
            tail.add(updated)
            self._unpack(updated)

        block = self._block(mechanism)
        if block is None:
            return step
        size = self._row_mechanisms.scan_iterations
        pending: list[tuple] = []
        remaining, left_at = [n], [b""]

        def block_step() -> None:
            # Iterations come from blocks of `size`, run on the device from where the last one left the
            # parameters; anything else moved them (a callback): the rest of the block is dropped, never used.
            packed = self._packed()
            if pending and packed.tobytes() != left_at[0]:
                pending.clear()
            if not pending:
                count = min(size, remaining[0])
                eps = self._mc_rng.standard_normal((count, self.n_mc, self._prior.n_params))
                state = (packed, self._optimizer_state.state(packed))
                (updated, states), info = block(state, eps, settings, self._noise_rng)
                pending.extend(
                    (updated[k], tuple(a[k] for a in states), info.mean[k], info.released[k]) for k in range(count)
                )
            updated, state, mean, released = pending.pop(0)
            remaining[0] -= 1
            trace.add(mean, released)
            self._optimizer_state.set_state(state)
            tail.add(updated)
            self._unpack(updated)
            left_at[0] = self._packed().tobytes()  # as the parameters hold it (their dtype), for the check above

        block_step.drop = pending.clear  # after the fit: iterations computed and never used are not kept
        return block_step

    def _block(self, mechanism: NoisyPoissonGradientSum):
        """The JAX backend's iterations in ``lax.scan`` blocks for this fit (None: one call per iteration)."""
        build = getattr(self._row_mechanisms, "kernel_block", None)
        if build is None:
            return None
        return build(kernels.advi_kernel, self._prior, batch_gradient=mechanism, batch_gradient_size=self._family.size)

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
        if self._approx is None:
            if model is not None:
                model = modelcontext(model)
            elif self._model is not None:
                model = self._model
            else:
                try:
                    model = modelcontext(None)
                except TypeError:
                    raise ValueError(
                        "`model` must be given to DPADVI(...) or DPADVI.fit, or fit inside a `with model:` block "
                        "(pm.fit passes neither model= nor random_seed= to an Inference instance). Found none."
                    ) from None
        else:
            if model is not None and modelcontext(model) is not self._approx.model:
                raise ValueError("`model` must be the model of the first fit. Found another model.")
            model = self._approx.model
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
                warn_user_initvals(from_model, "DPADVI.fit")
                self._start_source = user_initval_record(from_model)
            seed = self.random_seed if random_seed is None else random_seed
            self._setup(model, seed)  # may still refuse the model; nothing is charged yet
            self.random_seed = seed
        label = f"DPADVI fit {len(self.budget.labels) + 1 if self.budget else 1}: {n} iterations"
        with run.releasing(label):
            # Every check passed: commit σ, then touch data.
            self.noise_multiplier = sigma
            self._iterations = total
            self._clip_checks = checks
            self._approx._dp_record = self._record(run, run_epsilon)
            mechanism = self._row_mechanisms.poisson_gradient_sum(
                self.grad_clip, sigma, self.sampling_rate, self.neighbouring
            )
            if progressbar_theme is None:
                from pymc.progress_bar import default_progress_theme as progressbar_theme
            tail = _IterateTail(start=n - max(1, n // 2))  # the second half of this fit's iterates
            trace = _GradientTrace(start=n - max(1, n // 2))  # and the gradients released there
            step = self._make_step(mechanism, tail, trace, n)
            try:
                self.state = self._iterate_without_loss(
                    0, n, step, progressbar, progressbar_theme, list(callbacks or [])
                )
            finally:
                getattr(step, "drop", lambda: None)()
            # Post-processing of the released gradients: iterate averaging.
            if tail.count >= 2 and self.average_iterates:
                self._unpack(tail.mean)
            if self._clip_check_noise is not None:
                self._approx._dp_clipping = self._clipping_check()
                self._approx._dp_record["clipping_check"] = self._approx._dp_clipping
        # Post-processing of the released gradients: the optimisation noise and the Laplace posterior.
        self._approx._dp_laplace_source = functools.partial(_laplace_of_trace, trace, self._prior, self._to_rows.copy())
        self._approx._dp_laplace_cache = None
        self._approx._dp_averaged_iterates = tail.count
        if tail.count >= 2:
            self._approx._dp_optimisation_sd = np.sqrt(tail.variance[: self._prior.n_params])  # μ, q's order
        else:  # stopped before its second half (a callback): nothing to average; flagged by the diagnostics
            self._approx._dp_optimisation_sd = None
        self.approx.hist = self.hist  # empty: no loss is computed
        if include_transformed is not None:
            for group in self.approx.groups:
                group.include_transformed = bool(include_transformed)
        return self.approx

    def _clipping_check(self) -> dict[str, Any]:
        """One release: the noisy share of rows whose score norm at the fitted mean exceeds ``grad_clip``."""
        mean = self._family.mean_std(self._packed())[0][self._to_rows]  # the data layer's order
        # On the JAX backend from OS entropy, as its other releases (noise_source); else DPADVI's generator.
        noise = getattr(self._row_mechanisms, "noise_source", lambda rng: rng)(self._noise_rng)
        noisy = self._row_mechanisms.score_norm_histogram(self._clip_check_noise, self.neighbouring).release_counts(
            mean, noise
        )
        n_rows = self._prior.n_rows if self.neighbouring == "substitute" else None  # N public only then
        noise_std = self._clip_check_noise * histogram_sensitivity(self.neighbouring)
        summary = clipping_summary(noisy, self.grad_clip, noise_std, n_rows, "the fitted mean")
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
