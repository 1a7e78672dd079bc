"""Laplace (or, for the regressions, Gaussian) release of sufficient statistics, and PyMC models that read only it."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymc as pm
from pymc.model import modelcontext

from pymc_dp._errors import withholds_chains
from pymc_dp._validation import check_bool, check_finite_positive, check_neighbouring
from pymc_dp.accounting.budget import PrivacyBudget
from pymc_dp.backends.dask_rows import check_partitioned_release, is_partitioned, private_statistics
from pymc_dp.data import check_prior_reads_no_data
from pymc_dp.diagnostics import RELEASED_STATISTICS_METHOD, attach_diagnostics, check_on_poor_mixing
from pymc_dp.exponential_family.anchors import (
    ANCHOR_SHARE,
    LAST_ANCHOR_PART,
    CovariateAnchor,
    anchor_record,
    anchor_shares,
    check_covariate_anchors,
    release_anchors,
)
from pymc_dp.exponential_family.clipping_check import CLIPPING_CHECK_LABEL, plan_clipping_check, release_clipping_check
from pymc_dp.exponential_family.compile_mode import noise_aware_sample_kwargs
from pymc_dp.exponential_family.densities import ReleaseReading
from pymc_dp.exponential_family.families import (
    ExponentialFamily,
    LinearRegression,
    LogisticRegression,
    check_out_of_bounds,
    get_family,
)
from pymc_dp.exponential_family.grouped import grouped_family
from pymc_dp.exponential_family.noise_aware import release_loglik
from pymc_dp.exponential_family.partitioned_check import release_partitioned_clipping_check
from pymc_dp.exponential_family.release_checks import release_problems
from pymc_dp.exponential_family.release_noise import (
    check_mechanism,
    check_noise,
    noise_grid_scale,
    noisy_release,
    price_release,
)
from pymc_dp.mechanisms import mechanism_rng
from pymc_dp.public_data import declare_constants_public
from pymc_dp.results import finalize_result, posterior_attrs
from pymc_dp.run import AccountantRecord, PrivateRun

__all__ = [
    "ANCHOR_SHARE",
    "LAST_ANCHOR_PART",
    "CovariateAnchor",
    "CovariateModelWarning",
    "ReleasedStatistics",
    "anchor_shares",
    "annotate_releases",
    "release_statistics",
    "sample_releases",
]


class CovariateModelWarning(UserWarning):
    """The noise-aware logistic-regression likelihood's Gaussian covariate model was not declared to fit.

    Its posterior is then trustworthy only for continuous, near-Gaussian covariates: on the
    ``fair`` and ``randhie`` data (binary and skewed covariates) NUTS's means lay outside its
    94 % intervals in 6 of 10 (data set, ε) cells for ε from 0.5 to 8, unflagged
    (``docs/exponential_family.md``).
    Release with ``covariate_anchors=2`` (:func:`release_statistics`), which corrects the
    covariate model at the estimate and silences this warning, or declare the assumption with
    ``likelihood(..., covariates="gaussian")`` where it holds.
    """


COVARIATE_MODELS = ("gaussian",)

#: Attribute of a release likelihood's potential's ``tag``: the names of the latent variables it added.
NUISANCE_TAG = "pmdp_nuisance"


@dataclass(frozen=True)
class ReleasedStatistics:
    """Aggregate sufficient statistics released once by the Laplace (or Gaussian) mechanism (public).

    Attributes
    ----------
    family : ExponentialFamily
        The likelihood family and its public settings.
    statistics : ndarray
        The released statistics Proj(S + Laplace(Δ₁/ε)) — public, use them freely.
    n_rows : int
        N (public under substitute neighbours).
    epsilon : float
        ε of the release.
    scale : float
        The noise's scale: the Laplace scale b = Δ₁/ε, or the Gaussian standard deviation
        σ = τΔ₂ (``mechanism="gaussian"``).
    l1_sensitivity : float
        Δ₁.
    reproducible_noise : bool
        Whether the noise was derived from ``random_seed`` (testing only) rather than OS entropy.
    out_of_bounds : {"clamp", "raise"}
        How rows outside the public bounds were treated.
    noisy_statistics : ndarray or None
        The mechanism's output S + Laplace(Δ₁/ε)^d before the projection (public: the
        projected ``statistics`` are a function of it). The noise-aware likelihood models
        this vector; ``None`` only for a release built by hand without it.
    mechanism : {"laplace", "gaussian"}
        The noise: Laplace (ε, 0)-DP, or Gaussian (ε, δ)-DP (linear and logistic regression).
    delta : float
        δ of the release (0 for Laplace).
    l2_sensitivity : float or None
        Δ₂ (Gaussian releases).
    covariate_anchors : tuple of CovariateAnchor
        Logistic regression released with ``covariate_anchors=k``: the k anchors, in the
        order they were released (``epsilon``, ``delta`` and ``events`` include them).
    noise : {"discrete", "continuous"}
        The noise sampler: exact discrete Laplace or Gaussian noise on a grid (the default of
        :func:`release_statistics`), or NumPy's float64 samplers (a release built by hand).
    grid : float or None
        γ, the grid spacing of a discrete-noise release: ``noisy_statistics`` lie on γℤ.
    clipping_check : dict or None
        The noisy number of rows the public bounds clipped, released with the statistics
        (``release_statistics(..., clipping_check=True)``; :mod:`~pymc_dp.exponential_family.clipping_check`).

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public). Everything computed from
    the release — any posterior, any number of sampler runs, NUTS included — is
    post-processing and costs nothing more (Foulds et al. 2016, §3.2 and §4.2).
    """

    family: ExponentialFamily
    statistics: np.ndarray
    n_rows: int
    epsilon: float
    scale: float
    l1_sensitivity: float
    label: str = "laplace sufficient statistics"
    events: tuple = field(default=(), repr=False)
    reproducible_noise: bool = False
    out_of_bounds: str = "clamp"
    noisy_statistics: np.ndarray | None = field(default=None, repr=False)
    mechanism: str = "laplace"
    delta: float = 0.0
    l2_sensitivity: float | None = None
    covariate_anchors: tuple[CovariateAnchor, ...] = field(default=(), repr=False)
    noise: str = "continuous"
    grid: float | None = None
    clipping_check: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def noise_variance(self) -> float:
        """The variance of each coordinate's noise: 2b² (Laplace) or σ² (Gaussian).

        For discrete noise these are the continuous distributions' variances at the same scale:
        the discrete Laplace's is 2b² − γ²/6 + O(γ⁴/b²), the discrete Gaussian's σ² up to a
        relative e^{−2π²(σ/γ)²}; with b, σ ≥ 2²⁰γ (≥ 2¹⁰γ always) the difference is below 10⁻¹³
        (10⁻⁷) of the variance.
        """
        return 2.0 * self.scale**2 if self.mechanism == "laplace" else self.scale**2

    def likelihood(self, name: str, *, noise_aware: bool = True, covariates: str | None = None, **params: Any):
        """Add the likelihood of the release to the model in context, as ``pm.Potential(name, …)``.

        ``params`` are the family's parameters as model variables or expressions, e.g.
        ``p=p`` for Bernoulli, ``beta=beta, sigma=sigma`` for linear regression. The model
        then reads the data only through the release.

        Parameters
        ----------
        name : str
            Name of the potential (and prefix of any latent variables added).
        noise_aware : bool, default True
            ``True``: the likelihood of the release, log p(Ŝ | θ) = log ∫ p(Ŝ | S) p(S | θ) dS,
            with p(Ŝ | S) the mechanism (Laplace, or Gaussian) on the unprojected output
            (``noisy_statistics``) — the posterior is widened by the release noise as it
            should be. Per family (:data:`pymc_dp.exponential_family.noise_aware.NOISE_AWARE_METHODS`):
            Bernoulli and Binomial sum S ~ Binomial exactly; Poisson and Normal use the
            central-limit normal of the clamped rows' sum convolved with the Laplace noise in
            closed form (nothing latent); Categorical keeps the Laplace noise's variances as
            latent variables ``{name}_noise_variance`` sampled by NUTS with θ; linear
            regression replaces the Laplace noise by the normal of the same variance, so that
            the release is Gaussian given θ and the covariates' mean and covariance, which are
            latent (``{name}_x_…``, priors from the public ``x_bounds``); logistic regression the
            same, with the statistic's moments under the logistic model. For a Gaussian release
            the regressions' likelihood is exact in the noise. These latent variables are
            nuisance parameters: the potential records their names (:func:`nuisance_variables`)
            and :meth:`sample` samples them but leaves them out of the result unless asked
            (``keep_nuisance=True``).
            ``False``: the naive log-likelihood n log g(θ) + φ(θ)ᵀŜ that treats the
            projected Ŝ as the exact S (over-confident when N·ε is small; kept for comparison).
        covariates : {"gaussian"}, optional
            Logistic regression with ``noise_aware=True`` only: the caller's statement that the
            covariates (but the intercept) are continuous and close to jointly Gaussian, the
            model the likelihood assumes. Without it, and without covariate anchors
            (``release_statistics(..., covariate_anchors=2)``), a :class:`CovariateModelWarning`
            says that the posterior can be biased beyond its intervals for other covariates
            (measured on ``fair`` and ``randhie``: docs/exponential_family.md). With anchors the
            likelihood reads the last one and the Gaussian model enters only through the
            change of the mean function around it. Refused for other families.
        **params
            The family's parameters (model variables or expressions).

        Raises
        ------
        ValueError
            ``noise_aware=True`` for a release without ``noisy_statistics``, for a
            user-defined family, or with parameters of the wrong shape (see
            :func:`pymc_dp.exponential_family.noise_aware.release_loglik`).

        Notes
        -----
        Neighbouring relation: substitute (the release's). Either likelihood is
        post-processing of the release and costs no further ε.

        References
        ----------
        .. [1] Bernstein, G. and Sheldon, D. (2018). Differentially private Bayesian
           inference for exponential families. NeurIPS, §3–4.
        .. [2] Bernstein, G. and Sheldon, D. (2019). Differentially private Bayesian linear
           regression. NeurIPS, §3.
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"`name` must be a non-empty string. Found {name!r}.")
        noise_aware = check_bool("noise_aware", noise_aware)
        self._check_covariates(covariates, noise_aware)
        if not noise_aware:
            loglik = self.family.loglik(self.statistics, self.n_rows, **params)
            return pm.Potential(name, declare_constants_public(loglik, params.values()))  # built from the release
        if self.noisy_statistics is None:
            raise ValueError(
                "`noise_aware` must be False for a release without `noisy_statistics` (the unprojected mechanism "
                "output the noise-aware likelihood models). Found noisy_statistics=None; release with "
                "`release_statistics`, which keeps it."
            )
        model = modelcontext(None)
        taken = [n for n in model.named_vars if n == name or n.startswith(f"{name}_")]
        if taken:
            raise ValueError(f"`name` must not clash with the model's variables. Found {name!r} (taken: {taken}).")
        noise_variance = None if self.mechanism == "laplace" else self.noise_variance
        anchor = None
        if self.covariate_anchors:
            anchor = self.covariate_anchors[-1].likelihood_anchor()
        if isinstance(self.family, LogisticRegression) and covariates is None and anchor is None:
            warnings.warn(
                "The noise-aware logistic-regression likelihood models the covariates as jointly Gaussian. With "
                "binary or skewed covariates its posterior can be biased beyond its own intervals (measured on the "
                "fair and randhie data: NUTS's means outside the 94 % intervals in 6 of 10 cells for ε from 0.5 to "
                "8, unflagged; docs/exponential_family.md). Release with covariate_anchors=2, which corrects the "
                "covariate model at the estimate, or pass covariates='gaussian' to state that yours are continuous "
                "and close to Gaussian.",
                CovariateModelWarning,
                stacklevel=2,
            )
        before = set(model.named_vars)
        reading = ReleaseReading(self.noisy_statistics, self.n_rows, self.scale, noise_variance, anchor)
        family_loglik = getattr(self.family, "release_loglik", None)  # a family with its own (counts.py)
        loglik = (
            family_loglik(reading, name, **params)
            if family_loglik is not None
            else release_loglik(self.family, reading, name, **params)
        )
        potential = pm.Potential(
            name,
            # built from the release and public bounds; the params are checked as priors
            declare_constants_public(loglik, params.values()),
        )
        # The latent variables the likelihood added (covariate moments, noise variances): nuisance parameters.
        setattr(potential.tag, NUISANCE_TAG, tuple(n for n in model.named_vars if n not in before and n != name))
        return potential

    def _check_covariates(self, covariates: Any, noise_aware: bool) -> None:
        if covariates is None:
            return
        if not (isinstance(self.family, LogisticRegression) and noise_aware):
            raise ValueError(
                "`covariates` applies to the noise-aware logistic-regression likelihood only. Found "
                f"covariates={covariates!r} for the {self.family.name} family with noise_aware={noise_aware}."
            )
        if covariates not in COVARIATE_MODELS:
            raise ValueError(f"`covariates` must be one of {list(COVARIATE_MODELS)} or None. Found {covariates!r}.")

    def accountant_record(self) -> dict[str, Any]:
        """JSON-able record of the release: public settings, released values, events."""
        return self._record().to_dict()

    def _record(self) -> AccountantRecord:
        if self.mechanism == "laplace":
            method = "laplace: aggregate sufficient statistics, projected (Foulds et al. 2016, eq. 16)"
            noise = {"l1_sensitivity": self.l1_sensitivity, "laplace_scale": self.scale}
        else:
            method = "gaussian: aggregate sufficient statistics, projected (Gaussian mechanism, L2 sensitivity)"
            noise = {"noise": "gaussian", "l2_sensitivity": self.l2_sensitivity, "gaussian_std": self.scale}
        if self.covariate_anchors:
            method += f", and {len(self.covariate_anchors)} covariate anchors"
        if self.noise == "discrete":
            sampler = {
                "noise_sampler": "discrete",
                "noise_sampler_note": (
                    "rows rounded to the grid, summed exactly, exact integer "
                    + ("discrete Laplace" if self.mechanism == "laplace" else "discrete Gaussian")
                    + " noise from "
                    + ("the seeded generator (testing only)" if self.reproducible_noise else "OS entropy (secrets)")
                    + " (Canonne, Kamath and Steinke 2020)"
                ),
                "grid_spacing": self.grid,
            }
        else:
            sampler = {"noise_sampler": "continuous", "noise_sampler_note": "NumPy float64 samplers (Mironov 2012)"}
        return AccountantRecord.priced(
            method,
            self.events,
            delta=self.delta,
            neighbouring="substitute",
            n_rows=self.n_rows,
            reproducible_noise=self.reproducible_noise,
            details={
                "family": self.family.settings(),
                **noise,
                **sampler,
                "released_statistics": [float(v) for v in self.statistics],
                **(
                    {}
                    if self.noisy_statistics is None
                    else {"unprojected_statistics": [float(v) for v in self.noisy_statistics]}
                ),
                "out_of_bounds": self.out_of_bounds,
                **({} if self.clipping_check is None else {"clipping_check": self.clipping_check}),
                **(
                    {"covariate_anchors": [anchor_record(a, self.mechanism) for a in self.covariate_anchors]}
                    if self.covariate_anchors
                    else {}
                ),
            },
        )

    def annotate(self, idata: Any, model: Any = None) -> Any:
        """Strip raw-data groups from a sampling result and attach this release's guarantee (in place).

        Writes ``dp_epsilon`` (ε of the release), ``dp_delta`` (0 for Laplace), ``dp_neighbouring``,
        ``dp_n_rows``, ``dp_released_statistics`` and ``dp_accountant`` (JSON) on the
        posterior; :func:`pymc_dp.privacy_spent` recomputes ε from it. A model that reads
        several releases of the same rows needs :func:`annotate_releases` instead. ``model``
        (from the context if omitted) is the model ``idata`` was sampled from.
        """
        return annotate_releases(idata, [self], model=model)

    @withholds_chains
    def sample(
        self, model: Any = None, on_poor_mixing: str = "warn", keep_nuisance: bool = False, **kwargs: Any
    ) -> Any:
        """``pm.sample(**kwargs)`` on a model that reads the data only through this release; annotated result.

        Any PyMC sampler may be used (NUTS by default). The model must hold no observed
        variables and no data containers: those would read raw data outside the release.
        The latent variables of noise-aware likelihoods (covariate moments, noise variances)
        are sampled but not stored unless ``keep_nuisance=True``, so that the posterior, its
        ``dp_diagnostics`` and PyMC's convergence checks hold your variables only. A model
        that reads several releases needs :func:`sample_releases`, which documents every
        argument.
        """
        return sample_releases(
            [self], model=model, on_poor_mixing=on_poor_mixing, keep_nuisance=keep_nuisance, **kwargs
        )


def _check_releases(releases: Any) -> list[ReleasedStatistics]:
    releases = list(releases) if isinstance(releases, list | tuple) else None
    if not releases or not all(isinstance(r, ReleasedStatistics) for r in releases):
        raise TypeError("`releases` must be a non-empty list of ReleasedStatistics. Found another object.")
    sizes = sorted({r.n_rows for r in releases})
    if len(sizes) > 1:
        raise ValueError(f"`releases` must all come from one data set (the same number of rows). Found n_rows {sizes}.")
    return releases


def _without_provenance(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in ("format", "versions")}


def annotate_releases(idata: Any, releases: list[ReleasedStatistics], model: Any = None) -> Any:
    """Strip raw-data groups from ``idata`` and attach the composed guarantee of ``releases`` (in place).

    Parameters
    ----------
    idata : InferenceData or DataTree
        A sampling result of a model that reads the data only through ``releases``.
    releases : list of ReleasedStatistics
        Every release of the same rows the model reads.
    model : pm.Model, optional
        The model ``idata`` was sampled from (from the context if omitted); its variables
        are checked for ones that read data (:func:`pymc_dp.results.check_publishable`).

    Returns
    -------
    The same object, with ``dp_epsilon`` (Σ εⱼ for Laplace releases; composed by the accountant
    at δ = Σ δⱼ when a release is Gaussian), ``dp_delta`` = Σ δⱼ, ``dp_neighbouring``,
    ``dp_n_rows``, ``dp_released_statistics`` (JSON: the released vector, or a list of them)
    and ``dp_accountant`` (JSON, every release's event) on the posterior.

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public). Releases of the same rows
    compose by adding their ε (Dwork and Roth 2014, Thm 3.16): replacing one row moves each
    released vector by at most its Δ₁, so the concatenation has L1 sensitivity Σ Δ₁ⱼ and
    Laplace scales Δ₁ⱼ/εⱼ, which is (Σ εⱼ, 0)-DP. The sampling result is post-processing.

    References
    ----------
    .. [1] Dwork, C. and Roth, A. (2014). The algorithmic foundations of differential
       privacy. Foundations and Trends in TCS 9, Theorem 3.16.
    """
    releases = _check_releases(releases)
    model = modelcontext(model)
    statistics = [[float(v) for v in r.statistics] for r in releases]
    if len(releases) == 1:
        record = releases[0]._record()
    else:
        record = AccountantRecord.priced(
            "several aggregate sufficient statistics of the same rows, projected",
            [e for r in releases for e in r.events],
            delta=float(sum(r.delta for r in releases)),
            neighbouring="substitute",
            n_rows=releases[0].n_rows,
            reproducible_noise=any(r.reproducible_noise for r in releases),
            details={
                "releases": [{k: v for k, v in r.accountant_record().items() if k != "versions"} for r in releases]
            },
        )
    finalize_result(idata, record.to_dict(), model, foreign_statistics_ok=True)  # NUTS read only the releases
    posterior_attrs(idata)["dp_released_statistics"] = json.dumps(statistics[0] if len(releases) == 1 else statistics)
    return idata


def sample_releases(
    releases: list[ReleasedStatistics],
    model: Any = None,
    on_poor_mixing: str = "warn",
    keep_nuisance: bool = False,
    **kwargs: Any,
) -> Any:
    """``pm.sample(**kwargs)`` on a model that reads the data only through ``releases``; annotated result.

    Any PyMC sampler may be used (NUTS by default), as often as you like: the result is
    post-processing of the releases and carries their composed ε (:func:`annotate_releases`).

    Parameters
    ----------
    releases : list of ReleasedStatistics
        Every release of the same rows that the model's likelihood terms read.
    model : pm.Model, optional
        From the context if omitted. It must hold no observed variables and no data
        containers: those would read raw data outside the releases.
    on_poor_mixing : {"warn", "raise", "ignore"}, default "warn"
        As for :func:`pymc_dp.sample`: the result carries ``dp_diagnostics`` computed from
        its draws, and a result that is not a usable posterior is flagged.
    keep_nuisance : bool, default False
        Whether the result keeps the latent variables that noise-aware likelihoods add to the
        model (:func:`nuisance_variables`: the regressions' covariate moments
        ``{name}_x_mean_std``, ``{name}_x_mean``, ``{name}_x_sd`` or ``{name}_x_chol`` and its
        ``_corr``/``_stds``, Categorical's ``{name}_noise_variance``). By default NUTS samples
        them with your variables but ``pm.sample`` is given ``var_names`` without them, so
        they are not stored: the posterior holds your variables only, and both PyMC's
        convergence checks (R-hat and ESS warnings) and ``dp_diagnostics`` (its ``usable``
        verdict) are computed on exactly those. ``True`` stores them in the posterior too,
        where both diagnose them as well (the deterministics among them read public arrays
        that the prior does not use, and are left out like every such deterministic). Not
        with ``var_names``, which chooses the variables itself (name them there to keep some).
    **kwargs
        Passed to ``pm.sample`` (``return_inferencedata`` must stay True). For a model with
        a noise-aware regression likelihood ``init`` defaults to ``"adapt_diag"``: every
        chain starts at the model's initial point, whose covariate moments are read from the
        release, without PyMC's ±1 jitter (it would start those sharply determined
        moments many posterior sds out, where the first trajectories diverge and overflow);
        with JAX installed its log density is compiled by PyTensor's JAX backend (the same
        function, one XLA program instead of ~850 small C calls per gradient; see
        :mod:`pymc_dp.exponential_family.compile_mode`) unless ``compile_kwargs`` is given.

    Notes
    -----
    Neighbouring relation: substitute; ε and δ composed over the releases (see :func:`annotate_releases`).
    """
    releases = _check_releases(releases)
    check_on_poor_mixing(on_poor_mixing)
    keep_nuisance = check_bool("keep_nuisance", keep_nuisance)
    if keep_nuisance and kwargs.get("var_names") is not None:
        raise ValueError(
            "`keep_nuisance` must be False when `var_names` is given: `var_names` chooses the stored variables "
            f"itself (name the latent variables there to keep them). Found keep_nuisance=True and var_names="
            f"{list(kwargs['var_names'])!r}."
        )
    model = modelcontext(model)
    observed = [rv.name for rv in model.observed_RVs]
    data = [v.name for v in model.data_vars]
    if observed or data:
        raise ValueError(
            "`model` must read the data only through the released statistics. Found observed variables "
            f"{observed} and data containers {data}; build the likelihood with `release.likelihood(...)`."
        )
    if kwargs.get("return_inferencedata", True) is not True:
        raise ValueError("`return_inferencedata` must be True: the guarantee is attached to the returned object.")
    # No prior or potential may read an array of the row length (raw data baked in as a constant).
    public = [r.statistics for r in releases] + [r.noisy_statistics for r in releases if r.noisy_statistics is not None]
    public += [a.noisy_statistics for r in releases for a in r.covariate_anchors]
    check_prior_reads_no_data(model, releases[0].n_rows, public=public)
    covariate_moments = _has_covariate_moments(model, releases)
    if covariate_moments:  # init="adapt_diag" (they start at the release), and JAX-compiled where installed
        kwargs = noise_aware_sample_kwargs(kwargs)
    nuisance = set(nuisance_variables(model))
    if nuisance and not keep_nuisance and kwargs.get("var_names") is None:
        # Sampled with the user's variables, not stored: PyMC's convergence checks and dp_diagnostics then
        # both read the user's variables only (PyMC checks the free variables the posterior holds).
        kwargs["var_names"] = [v.name for v in model.unobserved_RVs if v.name not in nuisance]
    with warnings.catch_warnings():
        # NUTS's first tuning steps (its step-size search) try points far out, where the regressions' moment
        # graphs and PyMC's LKJ transform overflow: PyTensor's NumPy ops then warn, and NUTS rejects the step
        # as divergent. Those warnings say nothing the result's diagnostics do not: divergences after tuning
        # are counted below and flag the result.
        if covariate_moments:
            warnings.filterwarnings("ignore", message="(overflow|invalid value) encountered", category=RuntimeWarning)
        idata = pm.sample(model=model, **kwargs)
    divergences = _divergences(idata)  # counted before the sampler's own statistics are dropped
    annotate_releases(idata, releases, model=model)
    checks = [r.clipping_check for r in releases if r.clipping_check is not None]
    shifts = release_problems(releases)  # the releases' own checks: covariate shifts, a count anchor's reach
    return attach_diagnostics(
        idata, on_poor_mixing, RELEASED_STATISTICS_METHOD, divergences=divergences, bounds_clipping=checks,
        release_problems=shifts,
    )  # fmt: skip


def _divergences(idata: Any) -> int | None:
    """Divergent transitions after tuning in a ``pm.sample`` result (None when its sampler records none)."""
    from pymc_dp.results import group, group_names

    if "sample_stats" not in group_names(idata):
        return None
    stats = group(idata, "sample_stats")
    return int(np.asarray(stats["diverging"].values).sum()) if "diverging" in stats else None


def nuisance_variables(model: Any = None) -> list[str]:
    """Names of the latent variables that release likelihoods added to ``model`` (nuisance parameters).

    :meth:`ReleasedStatistics.likelihood` records on its potential the variables it adds: the
    noise-aware regressions' covariate moments (``{name}_x_mean_std``, ``{name}_x_mean``,
    ``{name}_x_sd`` or ``{name}_x_chol`` with ``{name}_x_chol_corr`` and ``{name}_x_chol_stds``)
    and Categorical's noise variances (``{name}_noise_variance``). :func:`sample_releases`
    samples them but does not store them unless asked (``keep_nuisance=True``). Read from the
    model's graph only (names, in model order); ``model`` from the context if omitted.
    """
    model = modelcontext(model)
    recorded = {n for potential in model.potentials for n in getattr(potential.tag, NUISANCE_TAG, ())}
    return [n for n in model.named_vars if n in recorded]


def _has_covariate_moments(model: Any, releases: list[ReleasedStatistics]) -> bool:
    """Whether ``model`` holds the latent covariate moments of a noise-aware regression likelihood."""
    if not any(isinstance(r.family, LinearRegression | LogisticRegression) for r in releases):
        return False
    return any(rv.name.endswith("_x_mean_std") for rv in model.free_RVs)


@withholds_chains
def release_statistics(
    family: str | ExponentialFamily,
    data: Any,
    *,
    epsilon: float,
    random_seed: int | np.random.Generator | None = None,
    reproducible_noise: bool = False,
    budget: PrivacyBudget | None = None,
    neighbouring: str = "substitute",
    out_of_bounds: str = "clamp",
    mechanism: str = "laplace",
    delta: float | None = None,
    covariate_anchors: int = 0,
    noise: str = "discrete",
    clipping_check: bool = False,
    **family_settings: Any,
) -> ReleasedStatistics:
    """Release the aggregate sufficient statistics of ``data`` once with the Laplace (or Gaussian) mechanism.

    Parameters
    ----------
    family : str or ExponentialFamily
        One of ``"bernoulli"``, ``"binomial"`` (``n_trials``), ``"categorical"``
        (``n_categories``), ``"poisson"`` (public count bound ``upper``), ``"normal"`` (known
        ``sigma``, public ``bounds``), ``"linear_regression"`` (``n_features``, public
        ``x_bounds`` and ``y_bounds``; ``data=(X, y)``), ``"logistic_regression"``
        (``n_features``, public ``x_bounds``; ``data=(X, y)`` with y in {0, 1}; see
        ``covariate_anchors``), ``"poisson_regression"`` (``n_features``, public ``x_bounds``
        and count bound ``y_max``; ``data=(X, y)`` with counts y clipped to [0, y_max];
        ``covariate_anchors`` ≥ 1 required: :mod:`pymc_dp.exponential_family.counts`),
        ``"negative_binomial_regression"`` (as Poisson, with the public, known dispersion ``alpha``;
        ``covariate_anchors`` ≥ 1 required, 2 recommended:
        :mod:`pymc_dp.exponential_family.negative_binomial`), or a family instance.
    data : array or (X, y)
        The raw rows, in memory or as Dask arrays (``docs/dask.md``: each partition's sums are computed on
        the workers). Rows outside the public bounds are mapped into them (``out_of_bounds``).
    epsilon : float
        ε of the release.
    random_seed : int or Generator, optional
        Seeds the noise only with ``reproducible_noise=True``; ignored otherwise.
    reproducible_noise : bool, default False
        For testing; do not publish: draw the noise from ``random_seed``, so that the release
        is reproducible — and whoever knows the seed can regenerate the noise and subtract
        it, recovering the exact statistics. By default the noise comes from the operating
        system's CSPRNG (:func:`pymc_dp.mechanisms.mechanism_rng`): two releases with the
        same ``random_seed`` have independent noise.
    budget : PrivacyBudget, optional
        Charged (ε, δ = 0) before the data are read; a release over budget is refused and
        nothing is charged.
    neighbouring : {"substitute"}
        Only substitute neighbours (N public) are supported.
    mechanism : {"laplace", "gaussian"}, default "laplace"
        ``"laplace"``: Ŝ = S + Laplace(Δ₁/ε)^d, (ε, 0)-DP. ``"gaussian"`` (linear and logistic
        regression only): Ŝ = S + N(0, σ² I) with σ = τΔ₂ and τ the smallest noise multiplier
        that is (ε, ``delta``)-DP (:func:`pymc_dp.accounting.calibrate.noise_multiplier_for_target`).
        The regressions release d = O(P²) statistics, where Δ₂ is about Δ₁/√d: at δ = 10⁻⁶ the
        Gaussian noise is several times smaller (see ``docs/exponential_family.md``).
    delta : float, optional
        δ of a Gaussian release, in (0, 1); required with ``mechanism="gaussian"``, not allowed
        with Laplace.
    covariate_anchors : int, default 0
        Logistic and Poisson regression only (Poisson: at least 1; its anchors release
        F̂ = Σᵢ m(λᵢ)·xᵢ and Σᵢ h(λᵢ)xᵢxᵢᵀ at λᵢ = exp(xᵢᵀβ̂), see
        :class:`pymc_dp.exponential_family.counts.PoissonCovariateAnchor`). Logistic
        regression: after the release of (Σ s·x, Σ xxᵀ), release k anchors
        F̂ = Σᵢ tanh(xᵢᵀβ̂/2)·xᵢ + noise, each at the estimate β̂ computed from the releases
        before it (:func:`pymc_dp.exponential_family.noise_aware.logistic_anchor_point`).
        Each anchor also releases the slope Σᵢ (1 − gᵢ²)xᵢxᵢᵀ, so each is a Newton step on the
        exact score. The noise-aware likelihood reads the last one: the Gaussian covariate
        model then supplies only the mean function's second-order change around β̂, not its
        level or slope (``docs/exponential_family.md``). They take
        :data:`ANCHOR_SHARE` = 40 % of the budget (of ε, or of ρ for Gaussian noise), inside
        the same ``epsilon`` and ``delta``, three quarters of it for the last anchor
        (:func:`anchor_shares`). Recommended: 2.
    noise : {"discrete", "continuous"}, default "discrete"
        ``"discrete"``: each row's statistic is rounded to a grid γℤ (γ = 2^e, at most 2⁻²⁰ of
        the noise scale over N: :func:`pymc_dp.mechanisms.sufficient_statistics.grid_exponent`),
        the integers are summed exactly and exact discrete Laplace (or discrete Gaussian) noise
        is added in grid units (Canonne, Kamath and Steinke 2020), with uniform integers from
        the OS (:mod:`secrets`) unless ``reproducible_noise``. The guarantee then does not rest
        on floating-point noise: every output is reachable from every neighbouring data set.
        ``"continuous"``: the earlier release, S + NumPy float64 Laplace (or Gaussian) noise,
        open to precision attacks (Mironov 2012). See ``docs/privacy.md``, "Noise generation".
    out_of_bounds : {"clamp", "raise"}, default "clamp"
        ``"clamp"`` maps every row, on its own, to the nearest admissible row (numbers clipped
        to the bounds, counts and labels rounded into range, NaN to the lower bound) and
        reports nothing about which or how many rows moved. ``"raise"`` refuses data with any
        row outside, with a message that carries no count and no value; that refusal is a
        data-dependent answer given before anything is charged, so use it only while you
        hold the data yourself (it costs nothing and is not covered by ε).
    clipping_check : bool, default False
        Also release how many rows the bounds clip: a noisy count (sensitivity 1) inside the same ε
        and δ (:mod:`pymc_dp.exponential_family.clipping_check`), recorded; a result sampled from the
        release is flagged when the share is material. The one-call route sets it.
    **family_settings
        Public settings of a family given by name.

    Returns
    -------
    ReleasedStatistics
        Build models with :meth:`ReleasedStatistics.likelihood` and sample them with
        :meth:`ReleasedStatistics.sample` (or ``pm.sample`` plus
        :meth:`ReleasedStatistics.annotate`) as often as you like.

    Notes
    -----
    **Neighbouring relation.** Substitute: data sets of the same public size N differing in
    one row.

    **Sensitivity.** Δ₁ = sup ‖S(x) − S(x′)‖₁ over admissible rows, from public settings
    only (Foulds et al. 2016, eq. 17): 1 for Bernoulli, ``n_trials`` for Binomial, 2 for
    Categorical, ``upper`` for Poisson, upper − lower for Normal, Σ of the widths of the
    interval of every entry of zzᵀ (z = (x, y)) for linear regression. Δ₂ (Gaussian) = the L2
    norm of those widths: each coordinate moves by at most its interval's width.

    **Discrete noise (the default).** The mechanism's output is γ·(K + Z) with K the exact
    integer sum of the rows' statistics clipped to the family's intervals and rounded to γℤ
    (each row on its own), and Z integer noise: discrete Laplace of scale Δ₁ᵍ/ε, or discrete
    Gaussian of variance τ²Δ₂ᵍ², where Δ₁ᵍ and Δ₂ᵍ are the sensitivities of K in grid units
    (:meth:`~pymc_dp.exponential_family.ExponentialFamily.grid_sensitivities`, exact integers
    that include the rounding: at most one unit per coordinate above Δ/γ, none for bounds on
    the grid). The Laplace release is then exactly (ε, 0)-DP; the Gaussian one is exactly
    1/(2τ²)-zCDP, the same ρ as the continuous Gaussian (Canonne, Kamath and Steinke 2020),
    and its (ε, δ) is computed by the accountant as for the continuous Gaussian, whose curve
    the discrete one matches up to terms of order e^{−2π²(σ/γ)²} (σ/γ ≥ 2¹⁰ always, and ≥ 2²⁰N unless
    the bounds reach about 2⁴¹/N times beyond the noise scale, which coarsens the grid). The
    rounding moves each coordinate of S by at most N·γ/2 ≤ 2⁻²¹ of the noise scale, and the
    noise's variance differs from 2b² (σ²) by O(γ²): the noise-aware likelihoods, which model
    the continuous noise at ``scale``, are off by less than 10⁻⁶ of a noise sd.

    **What ε covers.** The single release Ŝ = Proj(S + Laplace(Δ₁/ε)^d) of the clamped rows
    is (ε, 0)-DP (clamping is row-wise, so Δ₁ holds for any raw row); the
    projection onto the feasible set (non-negative counts, counts summing to N, a
    positive semi-definite ZᵀZ) and every posterior computed from Ŝ are post-processing. With
    ``mechanism="gaussian"`` the release is (ε, δ)-DP, priced by the accountant from its
    Gaussian event (the same conversion as every Gaussian release in this package).
    Covariate anchors are further releases of the same rows, each at a point computed from
    the releases before it (adaptive composition), with shares aⱼ summing to
    a = :data:`ANCHOR_SHARE` (:func:`anchor_shares`): Laplace ones split ε, (1 − a)ε for the
    statistics and aⱼε for anchor j (the first share rounded down so that the sum never
    exceeds ε); Gaussian ones split 1/τ² (τ calibrated to (ε, δ) for one release):
    τ/√(1 − a) for the statistics and τ/√aⱼ for anchor j, whose composition is exactly the
    Gaussian mechanism at τ (Dong, Roth and Su 2022, Corollary 3.3). All are priced before the
    data are read.

    References
    ----------
    .. [1] Foulds, J., Geumlek, J., Welling, M. and Chaudhuri, K. (2016). On the theory and
       practice of privacy-preserving Bayesian data analysis. UAI, §3.2, eq. (16)–(17), §4.2.
    .. [2] Dwork, C., McSherry, F., Nissim, K. and Smith, A. (2006). Calibrating noise to
       sensitivity in private data analysis. TCC.
    .. [3] Canonne, C. L., Kamath, G. and Steinke, T. (2020). The discrete Gaussian for
       differential privacy. NeurIPS.
    .. [4] Mironov, I. (2012). On significance of the least significant bits for differential
       privacy. CCS.
    """
    fam = _family(family, family_settings)
    epsilon = check_finite_positive("epsilon", epsilon)
    out_of_bounds = check_out_of_bounds(out_of_bounds)
    delta = check_mechanism(fam, mechanism, delta)
    noise = check_noise(noise)
    reproducible_noise = check_bool("reproducible_noise", reproducible_noise)
    if check_neighbouring("neighbouring", neighbouring) != "substitute":
        raise ValueError(
            "`neighbouring` must be 'substitute' for a sufficient-statistics release (N is public and the "
            f"statistics are calibrated to one row replaced). Found {neighbouring!r}."
        )
    if budget is not None and not isinstance(budget, PrivacyBudget):
        raise TypeError(f"`budget` must be a pymc_dp.PrivacyBudget. Found {type(budget).__name__}.")
    if random_seed is not None and not isinstance(random_seed, int | np.random.Generator):
        raise TypeError(f"`random_seed` must be an int, a numpy Generator or None. Found {type(random_seed).__name__}.")
    anchors = check_covariate_anchors(fam, covariate_anchors)
    label = f"{mechanism} sufficient statistics [{fam.name}]"
    anchor_label = f"{mechanism} covariate anchor [{fam.name}]"
    shares = anchor_shares(anchors, getattr(fam, "anchor_share", ANCHOR_SHARE))  # a family may set its own
    check_partitioned_release(data, out_of_bounds=out_of_bounds)  # Dask arrays: metadata only
    check_share = plan_clipping_check(clipping_check, out_of_bounds, mechanism, epsilon, delta, data)  # public
    noise_setting, anchor_settings, check_setting, events = price_release(
        mechanism, epsilon, delta, shares, label, anchor_label, check_share, CLIPPING_CHECK_LABEL
    )
    # The mechanism reads the rows once (shapes, public bounds, N), before anything is charged; for Dask arrays N
    # comes from the chunk sizes and the partitions are read on the workers at the release, after the charge.
    private = private_statistics(
        fam,
        data,
        out_of_bounds,
        grid_scale=noise_grid_scale(fam, mechanism, noise_setting) if noise == "discrete" else None,
    )
    run = PrivateRun("release_statistics", delta=delta, neighbouring="substitute", n_rows=private.n_rows, budget=budget)
    run.plan(events, advice="use a smaller ε for this release.")
    with run.releasing(label=label):
        rng = mechanism_rng(np.random.default_rng(random_seed) if reproducible_noise else None, reproducible_noise)
        # Discrete noise reads its uniform integers from the OS (secrets) unless the noise is reproducible.
        source = rng if reproducible_noise or noise == "continuous" else None
        noisy, scale = noisy_release(private, mechanism, noise, noise_setting, source)
        released_anchors = release_anchors(
            fam, data, out_of_bounds, noisy, private.n_rows, anchor_settings, mechanism, source, noise
        )
        check = release_partitioned_clipping_check if is_partitioned(data) else release_clipping_check
        clipped = check(fam, data, mechanism, check_setting, check_share, source)  # None: no check
    statistics = fam.project(noisy, private.n_rows)  # post-processing of the release
    n_rows = private.n_rows
    return ReleasedStatistics(
        fam,
        statistics,
        n_rows,
        epsilon,
        scale,
        fam.l1_sensitivity(),
        events=events,
        reproducible_noise=reproducible_noise,
        out_of_bounds=out_of_bounds,
        noisy_statistics=noisy,
        label=f"{mechanism} sufficient statistics",
        mechanism=mechanism,
        delta=delta,
        l2_sensitivity=fam.l2_sensitivity() if mechanism == "gaussian" else None,
        covariate_anchors=released_anchors,
        noise=noise,
        grid=private.grid,
        clipping_check=clipped,
    )


def _family(family: str | ExponentialFamily, settings: dict[str, Any]) -> ExponentialFamily:
    """The family of a release: a grouped regression (one cell per group) when ``n_groups`` is among the settings."""
    if "n_groups" in settings:
        return grouped_family(family, **settings)
    return get_family(family, **settings)
