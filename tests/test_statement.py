"""pmdp.privacy_statement on every result type the package returns."""

import json
import re
import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.accounting.events import format_epsilon
from pymc_dp.diagnostics import PoorMixingWarning
from pymc_dp.statement import BIBTEX

QUIET = dict(progressbar=False, compute_convergence_checks=False)
SMALL = dict(draws=20, tune=10, chains=2, **QUIET)


def _normal_model(n, seed=1):
    y = np.random.default_rng(seed).normal(0.5, 1.0, size=n)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        pm.Normal("y", mu, 1.0, observed=y)
    return model, y


_MODELS: dict = {}


def _model(n: int, seed: int):
    if (n, seed) not in _MODELS:
        _MODELS[n, seed] = _normal_model(n, seed)
    return _MODELS[n, seed]


def _penalty(epsilon=1.0, **kw):
    model, _ = _model(300, 1)
    with model:
        return pmdp.sample(step=pmdp.DPPenaltyMH(llr_clip=2.5), epsilon=epsilon, delta=1e-6, **kw, **SMALL)


def _dpadvi():
    model, _ = _model(300, 1)
    return pmdp.DPADVI(epsilon=1.0, delta=1e-6, sampling_rate=0.1, grad_clip=2.0).fit(
        30, model=model, progressbar=False
    )


def _publish(with_step: bool):
    model, _ = _model(300, 1)
    tau = pmdp.accounting.noise_multiplier_for_target(1.0, 1e-6, count=2 * 30)
    with model:  # a step is built inside its model
        step = pmdp.DPPenaltyMH(llr_clip=2.5, noise_multiplier=tau)
        return pmdp.publish(pm.sample(step=step, **SMALL), delta=1e-6, **({"step": step} if with_step else {}))


def _one_posterior_sample():
    model, _ = _model(300, 1)
    with model:
        return pmdp.one_posterior_sample(epsilon=1.0, loglik_bounds=(-6.0, 0.0), tune=30, progressbar=False)


def _big(make_step):
    model, _ = _model(5000, 2)
    with model:
        return pmdp.sample(step=make_step(), epsilon=3.0, delta=1e-6, **SMALL)


def _hmc():
    model, _ = _model(300, 1)
    with model:
        step = pmdp.DPHMC(llr_clip=2.0, grad_clip=2.0, n_leapfrog=2)
        return pmdp.sample(step=step, epsilon=1.0, delta=1e-6, **SMALL)


def _suffstats():
    _, y = _model(300, 1)
    with pm.Model():
        m = pm.Normal("m", 0, 10)
        step = pmdp.DPSuffStatsPenaltyMH(
            "normal", np.clip(y, -4, 4), {"mu": m}, family_settings={"sigma": 1.0, "bounds": (-4, 4)}
        )
        return pmdp.sample(step=step, epsilon=1.0, delta=1e-6, **SMALL)


def _released(_results):
    _, y = _model(300, 1)
    return pmdp.release_statistics("bernoulli", (y > 0.5).astype("int64"), epsilon=0.5)


def _released_idata(results):
    release = results["ReleasedStatistics"]
    with pm.Model():
        release.likelihood("y", p=pm.Beta("p", 1, 1))
        return release.sample(draws=20, tune=20, chains=1, **QUIET)


def _gaussian_released(_results):
    rng = np.random.default_rng(3)
    x = np.column_stack([np.ones(300), rng.uniform(-1, 1, (300, 3))])
    settings = {"n_features": 4, "x_bounds": ([1, -1, -1, -1], [1, 1, 1, 1])}
    y = rng.integers(0, 2, 300)
    return pmdp.release_statistics(
        "logistic_regression", (x, y), epsilon=1.0, mechanism="gaussian", delta=1e-6, **settings
    )


def _two_releases_idata(results):
    # A Laplace and a Gaussian release of the same rows, read by one model: composed by the accountant.
    release = results["Gaussian ReleasedStatistics"]
    rng = np.random.default_rng(3)
    x = np.column_stack([np.ones(300), rng.uniform(-1, 1, (300, 3))])
    settings = {"n_features": 4, "x_bounds": ([1, -1, -1, -1], [1, 1, 1, 1])}
    laplace = pmdp.release_statistics("logistic_regression", (x, rng.integers(0, 2, 300)), epsilon=0.5, **settings)
    with pm.Model():
        beta = pm.Normal("beta", 0, 1, shape=4)
        release.likelihood("a", beta=beta, noise_aware=False)
        laplace.likelihood("b", beta=beta, noise_aware=False)
        return pmdp.exponential_family.sample_releases([release, laplace], draws=20, tune=20, chains=1, **QUIET)


# One maker per kind of result pymc_dp returns, at a tiny size (the statements do not depend on mixing).
MAKERS = {
    "DPPenaltyMH": lambda r: _penalty(),
    "DPHMC": lambda r: _hmc(),
    "DPBarkerMH": lambda r: _big(lambda: pmdp.DPBarkerMH(batch_size=100, tempered_size=20.0)),
    "DPMultiOwnerPenaltyMH": lambda r: _big(
        lambda: pmdp.DPMultiOwnerPenaltyMH(owners=np.arange(5000) % 3, llr_clip=2.0)
    ),
    "DPSuffStatsPenaltyMH": lambda r: _suffstats(),
    "init=prior": lambda r: _penalty(epsilon=2.0, init="prior"),
    "DPADVI approximation": lambda r: _dpadvi(),
    "DPADVI idata": lambda r: r["DPADVI approximation"].sample(20),
    "publish": lambda r: _publish(False),
    "publish with step": lambda r: _publish(True),
    "one_posterior_sample": lambda r: _one_posterior_sample(),
    "ReleasedStatistics": _released,
    "released statistics idata": _released_idata,
    "Gaussian ReleasedStatistics": _gaussian_released,
    "two releases idata": _two_releases_idata,
}


class _Results(dict):
    """Results made on first use and kept for the module (only the kinds a run selects are made)."""

    def __missing__(self, kind):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PoorMixingWarning)  # tiny runs do not mix; the statement says so
            self[kind] = MAKERS[kind](self)
        return self[kind]


@pytest.fixture(scope="module")
def results():
    return _Results()


def _record(result):
    if isinstance(result, pmdp.ReleasedStatistics):
        return result.accountant_record()
    if hasattr(result, "_dp_record"):
        return result._dp_record
    return json.loads(result.posterior.attrs["dp_accountant"])


# The default run covers one result of each front-end family; the other kinds run with -m slow.
FAST = {"DPPenaltyMH", "DPADVI idata", "publish", "released statistics idata", "Gaussian ReleasedStatistics"}
KINDS = [k if k in FAST else pytest.param(k, marks=pytest.mark.slow) for k in MAKERS]
# What each statement must name: its mechanism's paper (as cited in the text) and its BibTeX key.
PAPERS = {
    "DPPenaltyMH": ("Yıldırım and Ermiş, 2019", "yildirim2019exact"),
    "DPHMC": ("Räisä et al., 2021", "raisa2021dphmc"),
    "DPBarkerMH": ("Heikkilä et al., 2019", "heikkila2019dpmcmc"),
    "DPMultiOwnerPenaltyMH": ("Algorithm 2", "yildirim2019exact"),
    "DPSuffStatsPenaltyMH": ("Algorithm 3", "yildirim2019exact"),
    "init=prior": ("Yıldırım and Ermiş, 2019", "yildirim2019exact"),
    "DPADVI approximation": ("Jälkö et al., 2017", "jalko2017dpvi"),
    "DPADVI idata": ("Jälkö et al., 2017", "jalko2017dpvi"),
    "publish": ("plain pm.sample", "sommer2019privacy"),
    "publish with step": ("Yıldırım and Ermiş, 2019", "yildirim2019exact"),
    "one_posterior_sample": ("McSherry and Talwar, 2007", "mcsherry2007mechanism"),
    "ReleasedStatistics": ("Laplace mechanism (Dwork et al., 2006", "dwork2006calibrating"),
    "released statistics idata": ("Laplace mechanism (Dwork et al., 2006", "dwork2006calibrating"),
    "Gaussian ReleasedStatistics": ("Gaussian mechanism (Dwork and Roth, 2014", "dwork2014algorithmic"),
    "two releases idata": ("Gaussian mechanism (Dwork and Roth, 2014", "dwork2006calibrating"),
}


@pytest.mark.parametrize("kind", KINDS)
def test_the_statement_states_the_guarantee_mechanism_relation_and_software(results, kind):
    result = results[kind]
    record = _record(result)
    statement = pmdp.privacy_statement(result)
    text = statement.text
    # ε recomposed from the events, as privacy_spent does, rounded up; δ as recorded
    assert f"ε = {format_epsilon(statement.epsilon)}" in text
    assert statement.epsilon == pytest.approx(record["epsilon"], rel=1e-12)
    assert statement.delta == record["delta"]
    assert ("(δ = 0)" in text) if record["delta"] == 0 else (f"δ = {record['delta']:.3g}" in text)
    paper, key = PAPERS[kind]
    assert paper in text and key in statement.keys
    # neighbouring relation and the unit of privacy
    if record["neighbouring"] == "substitute":
        assert f"N = {record['n_rows']}" in text and "one row is replaced" in text
    else:
        assert record["neighbouring"] == "unknown" and "does not record the neighbouring relation" in text
    # every step's settings: clip bounds and noise multipliers
    for step in record.get("steps", []):
        assert step["step"] in text
        for setting in ("llr_clip", "grad_clip", "noise_multiplier", "batch_size", "l2_sensitivity"):
            if setting in step:
                assert f"{float(step[setting]):.4g}" in text
    if "chains" in record and "tune" in record:
        total = record["chains"] * (record["tune"] + record["draws"])
        assert f"{total} iterations in all" in text and "tuning included" in text
    # what is not covered, and the software
    assert "prior (its public origin must be stated)" in text
    assert f"pymc-dp {record['versions']['pymc-dp']}" in text and f"pymc {pm.__version__}" in text
    # BibTeX: one entry per cited key, in citation order, with balanced braces
    entries = re.findall(r"^@\w+\{([^,]+),", statement.bibtex, flags=re.MULTILINE)
    assert entries == list(statement.keys) and all(BIBTEX[k] in statement.bibtex for k in statement.keys)
    assert statement.bibtex.count("{") == statement.bibtex.count("}")
    assert str(statement) == f"{text}\n\n{statement.bibtex}"


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        # The default start (init="auto") is a DPADVI fit on a share of ε where it applies.
        ("DPPenaltyMH", "The chains started from a DP release (DPADVI"),
        pytest.param(
            "init=prior", "Each chain started from its own draw from the prior (data-free).", marks=pytest.mark.slow
        ),
        ("publish", "start values are not covered by ε"),
        pytest.param(
            "one_posterior_sample", "the error of the finite MCMC run is not covered by ε", marks=pytest.mark.slow
        ),
        ("DPADVI idata", "draws reported are from the fitted approximation (post-processing"),
        ("released statistics idata", "given the released statistics only, which is post-processing"),
    ],
)
def test_the_statement_says_what_is_and_is_not_covered(results, kind, expected):
    assert expected in pmdp.privacy_statement(results[kind]).text


def test_init_dpadvi_statement_gives_the_initialisation_share(results):
    # The default start (init="auto") of a DPPenaltyMH run with a target ε is a DPADVI fit.
    init = _record(results["DPPenaltyMH"])["dp_init"]
    text = pmdp.privacy_statement(results["DPPenaltyMH"]).text
    assert f"a share {init['epsilon_share']:.4g} of ε" in text
    assert f"{init['iterations']} iterations of {init['optimizer']}" in text


def test_a_flagged_result_is_flagged_in_the_statement(results):
    idata = results["DPPenaltyMH"]
    diagnostics = json.loads(idata.posterior.attrs["dp_diagnostics"])
    text = pmdp.privacy_statement(idata).text
    assert ("flagged by its own diagnostics" in text) == (diagnostics["usable"] is False)
    for problem in diagnostics["problems"]:
        assert problem in text
    fit = results["DPADVI idata"]
    reasons = json.loads(fit.posterior.attrs["dp_diagnostics"]).get("reasons", [])
    assert all(reason in pmdp.privacy_statement(fit).text for reason in reasons)


def test_the_statement_refuses_what_it_cannot_vouch_for(results):
    model, _ = _normal_model(300)
    with model:
        step = pmdp.DPPenaltyMH(llr_clip=2.5, noise_multiplier=50.0)
        plain = pm.sample(step=step, draws=5, tune=0, chains=1, **QUIET)
    with pytest.raises(ValueError, match=r"`result` must carry a dp_accountant record: publish"):
        pmdp.privacy_statement(plain)
    with pytest.raises(ValueError, match=r"`result` must be a pymc_dp result .* Found int"):
        pmdp.privacy_statement(3)
    with pytest.raises(ValueError, match=r"`result` given as text must be the JSON"):
        pmdp.privacy_statement("not json")
    # A record pasted onto a result that still holds the raw data: its ε would not cover them.
    plain.posterior.attrs["dp_accountant"] = results["DPPenaltyMH"].posterior.attrs["dp_accountant"]
    with pytest.raises(pmdp.UnpublishableResultError, match=r"observed_data"):
        pmdp.privacy_statement(plain)


def test_the_statement_recomposes_epsilon_rather_than_trusting_the_attribute(results):
    record = dict(_record(results["DPPenaltyMH"]))
    honest = pmdp.privacy_statement(record)
    record["epsilon"] = 0.01  # an edited attribute
    assert pmdp.privacy_statement(json.dumps(record)).epsilon == honest.epsilon
    assert "ε = 0.01" not in pmdp.privacy_statement(record).text


def test_a_count_release_states_its_own_anchors_and_its_clipping_check():
    # Found by a tutorial walk: a Poisson release's statement described the logistic anchors (tanh) and left out the
    # clipping check's count, which the one-call route always releases.
    rng = np.random.default_rng(4)
    x = np.column_stack([np.ones(300), rng.uniform(-1, 1, 300)])
    counts = rng.poisson(np.exp(0.3 + 0.5 * x[:, 1]))
    release = pmdp.release_statistics(
        "poisson_regression", (x, counts), epsilon=2.0, n_features=2, x_bounds=([1, -1], [1, 1]), y_max=6,
        covariate_anchors=1, clipping_check=True,
    )  # fmt: skip
    text = pmdp.privacy_statement(release).text
    assert "λ = exp(xᵀβ̂)" in text and "tanh" not in text
    assert "The number of rows the public bounds clipped, each weighted by how far the bounds moved it" in text
    assert "sensitivity 1" in text and "inside the same ε and δ" in text
