"""Issue 33, holes 3-5: model-level holes of the second independent review (reproducers).

3. An ``initval=`` computed from the data was recorded as a data-free start and used as the
   clip bound's public reference point.
4. Missing observed values: PyMC imputes them, publishing their count and imputed values.
5. A ``pm.Potential`` (or a prior) reading a second private table of M ≠ N rows entered the
   posterior exactly.

Each reproducer fails on ``edd15ad`` and passes now.
"""

import json
import re

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pymc.exceptions import ImputationWarning

import pymc_dp as pmdp
from pymc_dp.data import ModelStructureError, RowLikelihood, check_prior_reads_no_data
from pymc_dp.starts import public_initial_point, user_initvals

RUN = {"draws": 10, "tune": 10, "chains": 1, "cores": 1, "random_seed": 3, "progressbar": False}
QUIET = {"on_poor_mixing": "ignore"}
N = 300


def _rows(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(2.0, 1.0, size=N)


# --- hole 3: initval from the data -------------------------------------------------------


def _initval_model(y: np.ndarray) -> pm.Model:
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0, initval=y.mean())  # computed from the private rows
        pm.Normal("y", mu, 1.0, observed=y)
    return model


def test_initval_from_the_data_is_recorded_as_user_supplied_and_warned():
    y = _rows()
    model = _initval_model(y)
    assert user_initvals(model) == ["mu"]
    assert public_initial_point(model) == {"mu": 0.0}  # PyMC's default (support point), not mean(y)
    with model, pytest.warns(pmdp.UserInitvalWarning, match=r"initval.*\['mu'\]"):
        idata = pmdp.sample(step=pmdp.DPPenaltyMH(llr_clip=2.0), epsilon=1.0, delta=1e-6, init="model", **RUN, **QUIET)
    record = json.loads(idata["posterior"].attrs["dp_accountant"])
    assert idata["posterior"].attrs["dp_start"] == "user"  # edd15ad: "model" ("data-free")
    assert "not covered by ε" in record["start"]["note"] and "data-free" not in record["start"]["note"]
    assert "started from values given by the user" in pmdp.privacy_statement(idata).text


def test_initval_equal_to_the_default_or_none_is_not_flagged():
    y = _rows()
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0, initval="support_point")  # PyMC's default strategy
        pm.Normal("y", mu, 1.0, observed=y)
    assert user_initvals(model) == []
    with model:  # no warning (warnings are errors here), recorded as the model's data-free point
        idata = pmdp.sample(step=pmdp.DPPenaltyMH(llr_clip=2.0), epsilon=1.0, delta=1e-6, init="model", **RUN, **QUIET)
    assert idata["posterior"].attrs["dp_start"] == "model"


def test_dpadvi_fit_started_at_the_models_initval_is_recorded_as_user_supplied():
    model = _initval_model(_rows())
    dpadvi = pmdp.DPADVI(epsilon=1.0, delta=1e-6, sampling_rate=0.1, grad_clip=1.0, random_seed=1)
    with pytest.warns(pmdp.UserInitvalWarning, match="DPADVI.fit"):
        approx = dpadvi.fit(5, model=model, progressbar=False)
    assert approx._dp_record["start"]["source"] == "user"  # edd15ad: "model"


def test_clip_bound_reference_ignores_the_models_initval():
    # The private clip bound's histogram is taken at a point that must be public; edd15ad took
    # model.initial_point(), which returns the initval (here mean(y)) itself.
    y = _rows(1)
    model = _initval_model(y)
    step = pmdp.DPPenaltyMH(model=model)
    assert step.llr_clip == "auto"
    seen = []
    release = step.release_clip_bound

    def spy(point, *args, **kwargs):
        seen.append({k: np.asarray(v).copy() for k, v in point.items()})
        return release(point, *args, **kwargs)

    step.release_clip_bound = spy
    with model:  # init="prior": the chains start from prior draws, so nothing is warned
        pmdp.sample(step=step, epsilon=2.0, delta=1e-6, init="prior", **RUN, **QUIET)
    assert len(seen) == 1
    assert float(seen[0]["mu"]) == 0.0  # PyMC's default point; edd15ad: mean(y) ≈ 2


# --- hole 4: missing observed values -----------------------------------------------------


def _missing_model(masked: bool) -> pm.Model:
    y = _rows(2)
    y[:7] = np.nan  # 7 of 300 rows missing
    observed = np.ma.masked_invalid(y) if masked else y
    with pytest.warns(ImputationWarning), pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        pm.Normal("y", mu, 1.0, observed=observed)
    assert [rv.name for rv in model.free_RVs] == ["mu", "y_unobserved"]  # what PyMC builds
    return model


def _refused_without_a_count(call) -> None:
    with pytest.raises(ModelStructureError, match=r"`y` has missing entries.*`y_unobserved`") as info:
        call()
    text = str(info.value)
    assert "Drop or fill" in text and not re.search(r"\b(7|293|300)\b", text)


@pytest.mark.parametrize("masked", [False, True], ids=["nan", "masked"])
def test_imputed_observed_values_are_refused_by_every_entry_point(masked):
    model = _missing_model(masked)
    budget = pmdp.PrivacyBudget(10.0, 1e-6, n_rows=N)
    _refused_without_a_count(lambda: RowLikelihood(model))
    _refused_without_a_count(lambda: pmdp.DPPenaltyMH(model=model, llr_clip=2.0))
    _refused_without_a_count(lambda: pmdp.plan(model=model, epsilon=1.0, delta=1e-6))
    _refused_without_a_count(
        lambda: pmdp.one_posterior_sample(model, epsilon=1.0, loglik_bounds=(-5, 0), budget=budget)
    )
    dpadvi = pmdp.DPADVI(epsilon=1.0, delta=1e-6, sampling_rate=0.1, grad_clip=1.0, budget=budget)
    _refused_without_a_count(lambda: dpadvi.fit(10, model=model))

    def sample():
        with model:
            return pmdp.sample(step=pmdp.DPPenaltyMH(llr_clip=2.0), epsilon=1.0, budget=budget, **RUN)

    _refused_without_a_count(sample)  # edd15ad: y_unobserved of shape (1, 10, 7) and dp_n_rows = 293
    assert budget.events == ()  # nothing charged


def test_publish_refuses_a_result_with_imputed_values():
    model = _missing_model(masked=False)
    with model:
        idata = pm.sample(
            draws=5,
            tune=5,
            chains=1,
            step=pm.Metropolis(),
            progressbar=False,
            random_seed=1,
            compute_convergence_checks=False,
        )
    del idata["sample_stats"]  # reach the model check (Metropolis's statistics are refused on their own)
    _refused_without_a_count(lambda: pmdp.publish(idata, model=model, delta=1e-6))
    assert "y_unobserved" in idata["posterior"]  # refused before anything was changed


# --- hole 5: a second private table read by a potential or a prior ------------------------

SECRET = np.random.default_rng(9).normal(3.0, 1.0, size=80)  # 80 rows, not N = 300


def _potential_model(table) -> pm.Model:
    with pm.Model() as model:
        m = pm.Normal("m", 0.0, 10.0)
        pm.Potential("pen", -((m - table) ** 2).sum())  # reads every entry of the table
        pm.Normal("y", m, 1.0, observed=_rows(3))
    return model


def test_potential_reading_a_second_table_is_refused_everywhere():
    model = _potential_model(SECRET)
    budget = pmdp.PrivacyBudget(10.0, 1e-6, n_rows=N)
    match = r"Potential `pen` reads data or a non-scalar array.*pmdp.public"
    with pytest.raises(ModelStructureError, match=match):
        # edd15ad: a draw near mean(SECRET) (+2.87 / −3.20 for secret means ±3 at ε = 0.01)
        pmdp.one_posterior_sample(model, epsilon=0.01, loglik_bounds=(-5.0, 0.0), budget=budget)
    with pytest.raises(ModelStructureError, match=match):
        pmdp.DPPenaltyMH(model=model, llr_clip=2.0)
    with pytest.raises(ModelStructureError, match=match):
        pmdp.DPADVI(epsilon=1.0, delta=1e-6, sampling_rate=0.1, grad_clip=1.0, budget=budget).fit(10, model=model)
    assert budget.events == ()


@pytest.mark.parametrize("length", [2, 80, 301])
def test_potential_reading_any_non_scalar_constant_or_shared_variable_is_refused(length):
    table = np.linspace(-1.0, 1.0, length)
    with pytest.raises(ModelStructureError, match="Potential `pen`"):
        check_prior_reads_no_data(_potential_model(pt.as_tensor_variable(table)))
    import pytensor

    with pytest.raises(ModelStructureError, match="Potential `pen`"):
        check_prior_reads_no_data(_potential_model(pytensor.shared(table)))


def test_a_declared_public_table_may_be_read():
    check_prior_reads_no_data(_potential_model(pmdp.public(SECRET)))  # the caller's promise
    with pytest.raises(TypeError, match="`value` must be an array, a constant or a shared variable"):
        pmdp.public(pt.as_tensor_variable(SECRET) * 2.0)
    with pm.Model() as model:
        m = pm.Normal("m", pmdp.public(SECRET).mean(), 1.0)
        pm.Normal("y", m, 1.0, observed=_rows(3))
    RowLikelihood(model)


def test_prior_reading_a_table_longer_than_its_variable_is_refused():
    with pm.Model() as model:
        m = pm.Normal("m", pt.as_tensor_variable(SECRET).mean(), 1.0)  # a scalar reading an 80-vector
        pm.Normal("y", m, 1.0, observed=_rows(3))
    with pytest.raises(ModelStructureError, match=r"prior of free variable `m`.*per-element"):
        RowLikelihood(model)


def test_per_element_prior_parameters_stay_accepted():
    with pm.Model() as model:
        b = pm.Normal("b", np.zeros(3), 1.0, shape=3)
        c = pm.MvNormal("c", mu=np.zeros(3), cov=np.eye(3))
        w = pm.Dirichlet("w", np.ones(3))
        s = pm.HalfNormal("s", sigma=np.ones((2, 3)), shape=(2, 3))
        pm.Normal("y", b.sum() + c.sum() + w[0] + s.sum(), 1.0, observed=_rows(3))
    check_prior_reads_no_data(model)
    RowLikelihood(model)


def test_release_likelihood_passes_and_a_user_potential_beside_it_is_refused():
    rel = pmdp.release_statistics("bernoulli", (_rows(4) > 2.0).astype(float), epsilon=1.0)
    with pm.Model() as model:
        p = pm.Beta("p", 1, 1)
        rel.likelihood("y", p=p)  # built from the release: its arrays are public
    public = [rel.statistics, rel.noisy_statistics]
    check_prior_reads_no_data(model, rel.n_rows, public=public)
    with model:
        pm.Potential("pen", -((p - SECRET) ** 2).sum())
    with pytest.raises(ModelStructureError, match="Potential `pen`"):
        check_prior_reads_no_data(model, rel.n_rows, public=public)
