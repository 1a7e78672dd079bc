"""One posterior sample (OPS): a draw from a tempered posterior, private by the exponential mechanism."""

from __future__ import annotations

import inspect
import logging
import math
import warnings
from typing import Any

import pymc as pm
import pytensor.tensor as pt
from pymc.model import modelcontext
from pymc.model.fgraph import ModelObservedRV, fgraph_from_model, model_from_fgraph
from pytensor.graph.replace import graph_replace

from pymc_dp._errors import withholds_chains
from pymc_dp._validation import check_bool, check_finite_positive, check_neighbouring, check_positive_int
from pymc_dp.accounting.budget import PrivacyBudget
from pymc_dp.accounting.events import PureDPReleases
from pymc_dp.data import check_prior_reads_no_data, data_dependent_deterministics, observed_rows, row_loglik
from pymc_dp.mechanisms import mechanism_rng
from pymc_dp.mechanisms.access import refuse_partitioned_rows
from pymc_dp.results import PrivateStart, group_names, note_dropped_deterministics, posterior_attrs
from pymc_dp.run import PrivateRun

__all__ = ["one_posterior_sample", "ops_temperature", "tempered_model"]

#: ``pm.sample`` keywords that would let more than the one draw leave, or change what is drawn.
_OPS_REFUSED_KWARGS = (
    "draws",
    "chains",
    "step",
    "model",
    "nuts_sampler",
    "nuts_sampler_kwargs",
    "trace",
    "idata_kwargs",
    "callback",
    "discard_tuned_samples",
    "return_inferencedata",
    "var_names",
    "compute_convergence_checks",
)


def ops_temperature(epsilon: float, loglik_bounds: tuple[float, float], neighbouring: str = "substitute") -> float:
    """Likelihood temperature T of an ε-DP one posterior sample, and nothing more.

    Derivation (the formulas lost from Foulds et al. 2016 §2.2 rebuilt from its definitions).
    The exponential mechanism (McSherry and Talwar 2007; Foulds et al. eq. 4–5) with a
    data-free base measure π (the prior) and utility u(X, θ) draws θ with density
    ∝ π(θ) exp(ε u(X, θ) / (2Δu)), Δu = sup_θ sup_{X≃X′} |u(X, θ) − u(X′, θ)|, and is ε-DP.
    Take u(X, θ) = Σᵢ ℓ̃(xᵢ, θ) with ℓ̃ = log p(x | θ) clipped to [a, b] (``loglik_bounds``);
    rows are independent given θ (eq. 8), so replacing one row changes u by at most
    Δu = b − a (substitute), adding/removing one by max(|a|, |b|). Sampling the tempered
    posterior π(θ) exp(T Σᵢ ℓ̃(xᵢ, θ)) is therefore ε-DP for ε = 2TΔu, i.e.

        T = ε / (2Δu),  capped at 1 (T = 1 is the posterior itself, costing 2Δu ≤ ε).

    At T = 1 this is Foulds et al. Thm 2.2 (one sample of the posterior is 2Δ-DP, Δ the
    sensitivity of eq. 9); with |ℓ| ≤ B, Δu = 2B and T = 1 costs ε = 4B (Thm 2.3, the OPS
    result of Wang et al. 2015); with ℓ ∈ [−B, 0] (discrete likelihoods, e.g. the truncated
    beta-Bernoulli of §3.1), Δu = B and T = 1 costs 2B. Foulds et al. temper the whole joint
    (eq. 6) with a flat base measure; here the prior is the base measure and only the
    likelihood is tempered (eq. 14), which the same argument covers because π does not
    depend on the data.

    Parameters
    ----------
    epsilon : float
        Target ε > 0.
    loglik_bounds : (lower, upper)
        Public, finite bounds [a, b] that each row's log-likelihood is clipped into.
    neighbouring : {"substitute", "add_remove"}
        Relation Δu is computed under.

    Returns
    -------
    float
        T = min(1, ε/(2Δu)); the draw then costs 2TΔu ≤ ε.

    Notes
    -----
    Neighbouring relation: substitute by default (Δu = b − a), add/remove Δu = max(|a|, |b|).
    ε covers one exact draw from the tempered posterior.

    References
    ----------
    .. [1] Foulds, J., Geumlek, J., Welling, M. and Chaudhuri, K. (2016). On the theory and
       practice of privacy-preserving Bayesian data analysis. UAI, eq. (4)–(9), (14),
       Theorems 2.2–2.3.
    .. [2] McSherry, F. and Talwar, K. (2007). Mechanism design via differential privacy. FOCS.
    """
    epsilon = check_finite_positive("epsilon", epsilon)
    low, high = _check_loglik_bounds(loglik_bounds)
    sensitivity = _utility_sensitivity(low, high, check_neighbouring("neighbouring", neighbouring))
    return min(1.0, epsilon / (2.0 * sensitivity))


def _check_loglik_bounds(loglik_bounds: Any) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in loglik_bounds)
    except (TypeError, ValueError):
        raise ValueError(
            f"`loglik_bounds` must be a pair (lower, upper) of numbers. Found {loglik_bounds!r}."
        ) from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"`loglik_bounds` must be finite with lower < upper. Found {loglik_bounds!r}.")
    return low, high


def _utility_sensitivity(low: float, high: float, neighbouring: str) -> float:
    return high - low if neighbouring == "substitute" else max(abs(low), abs(high))


def tempered_model(model: Any, temperature: float, loglik_bounds: tuple[float, float]) -> Any:
    """A copy of ``model`` whose log density is log prior + T Σᵢ clip(log p(xᵢ | θ), lower, upper).

    The copy keeps the free variables, their priors and transforms and the deterministics
    that do not read data; its observed variables are removed and replaced by one
    ``pm.Potential`` holding the tempered clipped sum. A row whose log-likelihood is −∞ (or
    NaN) at θ, e.g. θ outside a data-dependent support, contributes T·lower like any row
    below the bound: the utility stays in [lower, upper] for every θ and every data set,
    which the exponential mechanism's sensitivity requires. The copy holds the raw data:
    it is for sampling inside :func:`one_posterior_sample` only.
    """
    low, high = _check_loglik_bounds(loglik_bounds)
    temperature = check_finite_positive("temperature", temperature)
    refuse_partitioned_rows(model)  # sampler_model's copy holds zeros, not rows
    # Row-wise parameter checks, the allow-list walk and the perturbation probe: one row can
    # move only its own term.
    rows, n_rows, _, _ = row_loglik(model)
    check_prior_reads_no_data(model, n_rows)
    return _tempered_copy(model, rows, temperature, low, high)


def _tempered_copy(model: Any, rows: Any, temperature: float, low: float, high: float) -> Any:
    """:func:`tempered_model` on the per-row graph ``rows`` already built (and checked) by ``row_loglik``."""
    hidden = set(data_dependent_deterministics(model)) if model.observed_RVs else set()
    fgraph, _ = fgraph_from_model(model)
    drop = [
        i
        for i, out in enumerate(fgraph.outputs)
        if out.owner is not None and (isinstance(out.owner.op, ModelObservedRV) or out.name in hidden)
    ]
    for i in sorted(drop, reverse=True):
        fgraph.remove_output(i)
    copy = model_from_fgraph(fgraph, mutate_fgraph=True)
    replacements = {model.rvs_to_values[rv]: copy.rvs_to_values[copy[rv.name]] for rv in model.free_RVs}
    rows = graph_replace(rows, replacements, strict=False)
    clipped = pt.switch(pt.isnan(rows), low, pt.clip(rows, low, high))
    with copy:
        pm.Potential("dp_ops_tempering", temperature * pt.sum(clipped))
    return copy


def _check_ops_kwargs(kwargs: dict[str, Any]) -> dict[str, str]:
    """Refuse ``pm.sample`` keywords that would let more than the one draw leave; the start's record entry.

    Pops ``progressbar`` (refused when True) from ``kwargs``; reads nothing but the keywords.
    """
    for key in _OPS_REFUSED_KWARGS:
        if key in kwargs:
            raise ValueError(
                f"`{key}` is not accepted by one_posterior_sample: one NUTS chain, one draw, and nothing else of "
                "the chain may leave."
            )
    if kwargs.pop("progressbar", False):
        raise ValueError(
            "`progressbar` must be False for one_posterior_sample: NUTS's bar shows data-dependent step sizes and "
            "divergences of the chain. Found True."
        )
    unknown = sorted(set(kwargs) - (set(inspect.signature(pm.sample).parameters) - {"kwargs"}))
    if unknown:
        raise TypeError(f"Keyword arguments must be ones `pm.sample` accepts. Found unknown: {unknown}.")
    if isinstance(kwargs.get("initvals"), PrivateStart):
        raise ValueError(
            "`initvals` must not be a PrivateStart for one_posterior_sample: its draw is pure ε-DP (δ = 0) and "
            "cannot compose the (ε, δ) release that computed the start. Found a PrivateStart; start from the model's "
            "initial point or from public values."
        )
    if kwargs.get("initvals") is None:
        start = {"source": "model", "note": "the model's initial point with PyMC's jitter (data-free)"}
    else:
        note = "initvals given by the caller: not covered by ε, must not come from the data"
        start = {"source": "user", "note": note}
    return start


def _keep_only_the_draw(idata: Any) -> None:
    """Drop every group but the posterior, and every attribute but ``dp_*`` and provenance (in place)."""
    for group in group_names(idata):
        if group != "posterior":
            del idata[group]
    attrs = posterior_attrs(idata)
    for key in list(attrs):
        if not str(key).startswith("dp_") and key not in ("created_at", "arviz_version"):
            del attrs[key]


@withholds_chains
def one_posterior_sample(
    model: Any = None,
    *,
    epsilon: float,
    loglik_bounds: tuple[float, float],
    tune: int = 2000,
    neighbouring: str = "substitute",
    budget: PrivacyBudget | None = None,
    random_seed: int | None = None,
    reproducible_noise: bool = False,
    **kwargs: Any,
) -> Any:
    """One draw from the posterior tempered for ε-DP by the exponential mechanism (OPS).

    Builds a copy of ``model`` whose likelihood is T Σᵢ clip(log p(xᵢ | θ), lower, upper) with
    T = :func:`ops_temperature` (ε, ``loglik_bounds``), runs one NUTS chain of ``tune``
    tuning iterations and returns its single following draw. Nothing else of the chain
    leaves: the result holds one chain with one draw and no sample statistics.

    Parameters
    ----------
    model : pm.Model, optional
        A model with observed variables sharing one row axis (from the context if omitted).
    epsilon : float
        ε of the draw.
    loglik_bounds : (lower, upper)
        Public bounds on each row's log-likelihood; rows are clipped into them.
    tune : int, default 2000
        NUTS warm-up before the draw.
    neighbouring : {"substitute", "add_remove"}
        Relation the utility's sensitivity is computed under.
    budget : PrivacyBudget, optional
        Charged with (ε_spent, δ = 0) before the data are read.
    random_seed : int, optional
        Seeds the chain only with ``reproducible_noise=True``; ignored otherwise.
    reproducible_noise : bool, default False
        For testing; do not publish: seed the chain with ``random_seed``, so that the draw is
        a deterministic function of the data and the seed — whoever knows the seed can
        replay the sampler on candidate data sets and see which one gives the published
        draw. By default the chain is seeded from the operating system's CSPRNG
        (:func:`pymc_dp.mechanisms.mechanism_rng`).
    **kwargs
        Passed to ``pm.sample`` (not ``draws``/``chains``). ``initvals`` are recorded in the
        result (``dp_start`` = ``"user"``: not covered by ε, they must be public); a
        :class:`pymc_dp.results.PrivateStart` is refused (its (ε, δ) release cannot be
        composed into this pure ε-DP draw).

    Returns
    -------
    InferenceData or DataTree
        ``posterior`` with one chain and one draw; attrs ``dp_epsilon`` = 2TΔu (≤ ε),
        ``dp_delta`` = 0, ``dp_temperature``, ``dp_notes`` and ``dp_accountant``.

    Raises
    ------
    ModelStructureError
        Before anything is charged, when a row's log-likelihood could read another row's data
        (the allow-list walk or the one-row perturbation probe of
        :func:`pymc_dp.data.row_loglik`), or a prior or potential reads data
        (:func:`pymc_dp.data.check_prior_reads_no_data`).

    Notes
    -----
    **Neighbouring relation.** Substitute by default (Δu = upper − lower); add/remove gives
    Δu = ``max(|lower|, |upper|)``.

    **Sensitivity and temperature.** See :func:`ops_temperature`: the exponential mechanism
    with the prior as base measure and utility the clipped log-likelihood, T = ε/(2Δu).

    **What ε covers.** The one returned draw, *conditional on exact sampling*: the guarantee
    holds for a draw from the tempered posterior itself; an MCMC draw is only approximately
    that (Foulds et al. 2016, §4, Prop. 3; Wang et al. 2015). The likelihood must be positive
    wherever the prior is for the posterior to be the one tempered; a row with log p = −∞ or
    NaN at θ counts as the lower bound in the copy, so one row can never remove θ from its
    support.

    **Randomness.** The exponential mechanism's randomness is the sampler itself: the
    chain's start jitter, momenta and accept uniforms. If a public seed fixed them, the draw
    would be a deterministic function of the data. The chain is therefore seeded from OS
    entropy unless ``reproducible_noise=True``; the OS seed is never returned or stored.

    The run shows no progress bar and PyMC's log is silenced (both report
    data-dependent quantities of the chain).

    References
    ----------
    .. [1] Foulds, J., Geumlek, J., Welling, M. and Chaudhuri, K. (2016). On the theory and
       practice of privacy-preserving Bayesian data analysis. UAI, §2.2, eq. (6)–(9),
       Theorems 2.2–2.3, §3.1 eq. (14).
    .. [2] Wang, Y.-X., Fienberg, S. and Smola, A. (2015). Privacy for free: posterior
       sampling and stochastic gradient Monte Carlo. ICML, Theorem 1.
    .. [3] McSherry, F. and Talwar, K. (2007). Mechanism design via differential privacy. FOCS.
    """
    model = modelcontext(model)
    epsilon = check_finite_positive("epsilon", epsilon)
    low, high = _check_loglik_bounds(loglik_bounds)
    neighbouring = check_neighbouring("neighbouring", neighbouring)
    tune = check_positive_int("tune", tune)
    reproducible_noise = check_bool("reproducible_noise", reproducible_noise)
    start = _check_ops_kwargs(kwargs)  # before anything is read or charged
    refuse_partitioned_rows(model)  # sampler_model's copy holds zeros, not rows: refused before the charge
    n_rows = observed_rows(model, neighbouring)
    # Refuses likelihoods that mix rows (walk and one-row perturbation probe), before anything is charged.
    rows = row_loglik(model, neighbouring=neighbouring)[0]
    check_prior_reads_no_data(model, n_rows)
    sensitivity = _utility_sensitivity(low, high, neighbouring)
    temperature = min(1.0, epsilon / (2.0 * sensitivity))
    spent = 2.0 * temperature * sensitivity
    events = (PureDPReleases(spent, 1, label="one posterior sample (exponential mechanism)"),)
    run = PrivateRun(
        "one_posterior_sample",
        delta=0.0,
        neighbouring=neighbouring,
        n_rows=n_rows,
        budget=budget,
        description="exponential mechanism: one sample of prior × exp(T Σ clip(loglik)) (Foulds et al. 2016, eq. 14)",
    )
    run.plan(events, advice="use a smaller ε.")

    hidden = set(data_dependent_deterministics(model))
    note_dropped_deterministics(hidden)  # names only, from the model's code
    var_names = [rv.name for rv in model.free_RVs] + [d.name for d in model.deterministics if d.name not in hidden]
    tempered = _tempered_copy(model, rows, temperature, low, high)
    pymc_logger = logging.getLogger("pymc")
    level = pymc_logger.level
    with tempered:
        with warnings.catch_warnings():  # one draw is the point: PyMC's diagnostics warning does not apply
            warnings.filterwarnings("ignore", message="Only 1 samples per chain", category=UserWarning)
            # PyMC's log reports the run's duration and divergences: data-dependent, so kept quiet.
            pymc_logger.setLevel(logging.ERROR)
            try:
                with run.releasing(label="one posterior sample"):
                    idata = pm.sample(
                        draws=1,
                        tune=tune,
                        chains=1,
                        random_seed=random_seed if reproducible_noise else mechanism_rng(None, reproducible=False),
                        var_names=var_names,
                        compute_convergence_checks=False,
                        progressbar=False,
                        **kwargs,
                    )
            finally:
                pymc_logger.setLevel(level)
    _keep_only_the_draw(idata)
    notes = (
        "One posterior sample: the guarantee is conditional on exact sampling from the tempered posterior; "
        f"this draw ends a NUTS chain of {tune} warm-up iterations, which approximates it."
    )
    record = run.record(
        reproducible_noise=reproducible_noise,
        start=start,
        loglik_bounds=[low, high],
        utility_sensitivity=sensitivity,
        temperature=temperature,
        conditional_on_exact_sampling=True,
    )
    run.publish(idata, model, record)
    attrs = posterior_attrs(idata)
    attrs["dp_temperature"] = temperature
    attrs["dp_notes"] = notes
    return idata
