"""The contract every DP step method and DPADVI keeps, checked on each the same way.

- the statistics a step declares are the ones it emits and the ones its docstring documents;
- draws are identical for ``cores=1`` and ``cores=2`` (every chain starts from clean state);
- ``privacy_spent`` recomputes exactly the ``dp_epsilon`` written on the result;
- no raw data value appears anywhere in the result (arrays, coordinates, attributes);
- bad settings give an error naming the parameter, and change nothing (no charge, no noise set).
"""

import json
import re

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.results import group, group_names

N_ROWS = 120
QUIET = dict(progressbar=False, compute_convergence_checks=False)
#: Mechanism noise from a seed, so that cores=1 and cores=2 can be compared (tests only: never publish).
REPRODUCIBLE: dict = {"reproducible_noise": True}


@pytest.fixture(scope="module")
def data():
    # Distinctive values: any of them found in a result is a leak, not a coincidence.
    return np.random.default_rng(2024).normal(0.3, 1.0, size=N_ROWS) + 1e-7 * np.pi


@pytest.fixture(scope="module")
def row_model(data):
    with pm.Model() as model:
        m = pm.Normal("m", 0, 10)
        s = pm.HalfNormal("s", 2)
        pm.Normal("y", m, s, observed=data)
        pm.Deterministic("m_plus_one", m + 1)
    return model


@pytest.fixture(scope="module")
def prior_model():
    with pm.Model() as model:
        pm.Normal("m", 0, 10)
    return model


STEPS = {
    "DPPenaltyMH": lambda model, data, **kw: pmdp.DPPenaltyMH(llr_clip=2.0, **kw),
    "DPHMC": lambda model, data, **kw: pmdp.DPHMC(n_leapfrog=3, grad_clip=3.0, llr_clip=3.0, **kw),
    "DPBarkerMH": lambda model, data, **kw: pmdp.DPBarkerMH(batch_size=60, tempered_size=20.0, **kw),
    "DPBarkerMH-full": lambda model, data, **kw: pmdp.DPBarkerMH(full_data=True, **kw),
    "DPMultiOwnerPenaltyMH": lambda model, data, **kw: pmdp.DPMultiOwnerPenaltyMH(
        owners=np.arange(N_ROWS) % 3, llr_clip=2.0, **kw
    ),
    "DPSuffStatsPenaltyMH": lambda model, data, **kw: pmdp.DPSuffStatsPenaltyMH(
        "normal", np.clip(data, -4, 4), {"mu": model["m"]}, family_settings={"sigma": 1.0, "bounds": (-4, 4)}, **kw
    ),
}


def _model_for(name, row_model, prior_model):
    return prior_model if name == "DPSuffStatsPenaltyMH" else row_model


def _documented_stats(cls) -> set[str]:
    """The ``- ``dp_x``: ...`` bullets of the nearest class in the MRO that documents statistics."""
    for klass in cls.__mro__:
        documented = set(re.findall(r"^\s*- ``(dp_[a-z_]+)``", klass.__doc__ or "", flags=re.MULTILINE))
        if documented:
            return documented
    return set()


def _numbers_in(idata):
    """Every number a result holds: arrays, coordinates and the numbers inside its attributes."""
    for name in group_names(idata):
        dataset = group(idata, name)
        for var in list(dataset.data_vars) + list(dataset.coords):
            values = np.asarray(dataset[var].values)
            if np.issubdtype(values.dtype, np.number):
                yield from values.ravel().tolist()
        for value in idata[name].attrs.values():
            yield from (float(x) for x in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", str(value)))


def _run(name, row_model, prior_model, data, cores=1, seed=3):
    model = _model_for(name, row_model, prior_model)
    # Subsampled Barker's ε is set by N, b and T alone (no noise to calibrate): no target for it.
    target = {} if name == "DPBarkerMH" else {"epsilon": 2.0}
    with model:
        step = STEPS[name](model, data, **REPRODUCIBLE)
        idata = pmdp.sample(
            step=step, delta=1e-5, draws=40, tune=20, chains=2, cores=cores, random_seed=seed, **target, **QUIET
        )
    return step, idata


@pytest.mark.parametrize("name", sorted(STEPS))
def test_step_contract(name, row_model, prior_model, data):
    step, idata = _run(name, row_model, prior_model, data)
    declared = set(type(step).stats_dtypes_shapes)
    assert declared == _documented_stats(type(step)), "declared statistics must each be documented"
    assert set(map(str, group(idata, "sample_stats").data_vars)) == declared, "emitted = declared"
    attrs = idata["posterior"].attrs
    assert pmdp.privacy_spent(idata).epsilon == attrs["dp_epsilon"]
    assert name == "DPBarkerMH" or attrs["dp_epsilon"] <= 2.0
    assert attrs["dp_reproducible_noise"]
    leaked = np.isin(np.fromiter(_numbers_in(idata), dtype=float), data)
    assert not leaked.any(), "a raw data value appears in the result"
    _, twin = _run(name, row_model, prior_model, data, cores=2)
    np.testing.assert_array_equal(group(idata, "posterior")["m"].values, group(twin, "posterior")["m"].values)


@pytest.mark.parametrize("name", sorted(STEPS))
def test_refused_runs_change_nothing(name, row_model, prior_model, data):
    model = _model_for(name, row_model, prior_model)
    budget = pmdp.PrivacyBudget(epsilon=1.0, delta=1e-5, n_rows=N_ROWS)
    with model:
        step = STEPS[name](model, data)
        before = {key: getattr(step, key) for key in step.noise_attributes}
        with pytest.raises(ValueError, match="`epsilon` must be"):
            pmdp.sample(step=step, epsilon=-1.0, budget=budget, draws=10, tune=0, chains=1, **QUIET)
        with pytest.raises(ValueError, match="`chains` must be"):
            pmdp.sample(step=step, epsilon=1.0, budget=budget, draws=10, tune=0, chains=0, **QUIET)
        with pytest.raises(pmdp.PrivacyBudgetExceededError, match="Nothing was run"):  # ε 5 > the budget's 1
            pmdp.sample(step=step, budget=budget, epsilon=5.0, draws=200, tune=0, chains=4, **QUIET)
    assert {key: getattr(step, key) for key in step.noise_attributes} == before
    assert budget.events == ()


def test_dpadvi_contract(row_model, data):
    def fit(seed):
        dpadvi = pmdp.DPADVI(epsilon=2.0, delta=1e-5, sampling_rate=0.25, clip=2.0, random_seed=seed, **REPRODUCIBLE)
        return dpadvi.fit(50, model=row_model, progressbar=False).sample(40, random_seed=seed)

    idata = fit(4)
    attrs = idata["posterior"].attrs
    assert pmdp.privacy_spent(idata).epsilon == attrs["dp_epsilon"] and attrs["dp_epsilon"] <= 2.0
    assert json.loads(attrs["dp_accountant"])["settings"]["reproducible_noise"]
    assert not np.isin(np.fromiter(_numbers_in(idata), dtype=float), data).any()
    np.testing.assert_array_equal(group(idata, "posterior")["m"].values, group(fit(4), "posterior")["m"].values)
    budget = pmdp.PrivacyBudget(epsilon=0.1, delta=1e-5, n_rows=N_ROWS)
    refused = pmdp.DPADVI(noise_multiplier=0.5, budget=budget, sampling_rate=1.0, clip=1.0)
    with pytest.raises(pmdp.PrivacyBudgetExceededError, match="Nothing was run"):
        refused.fit(100, model=row_model, progressbar=False)
    assert budget.events == () and refused.approx is None
