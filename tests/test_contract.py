"""The contract every DP step method and DPADVI keeps, checked on each the same way.

- the statistics a step declares are the ones it emits and the ones its docstring documents;
- a new chain starts from the state of a fresh step: ``set_rng`` (PyMC 5) and ``setup_chain``
  (PyMC 6) reset everything a chain changes (tuned settings, counts, μ spent, caches);
- draws are identical for ``cores=1`` and ``cores=2`` (every chain starts from clean state);
- ``privacy_spent`` recomputes exactly the ``dp_epsilon`` written on the result, for
  ``pmdp.sample`` and for a plain ``pm.sample`` published with ``pmdp.publish`` (with the step,
  or from its statistics alone);
- no raw data value appears anywhere in the result (arrays, coordinates, attributes);
- bad settings give an error naming the parameter, and change nothing (no charge, no noise set,
  no change to the model: the same construction then works).
"""

import copy
import json
import re

import numpy as np
import pymc as pm
import pytest
from pymc.blocking import DictToArrayBijection

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


# Each factory takes overrides, so that a test can replace any default (a bad value, a fixed noise).
STEPS = {
    "DPPenaltyMH": lambda model, data, **kw: pmdp.DPPenaltyMH(**{"llr_clip": 2.0, **kw}),
    "DPHMC": lambda model, data, **kw: pmdp.DPHMC(**{"n_leapfrog": 3, "grad_clip": 3.0, "llr_clip": 3.0, **kw}),
    "DPBarkerMH": lambda model, data, **kw: pmdp.DPBarkerMH(**{"batch_size": 60, "tempered_size": 20.0, **kw}),
    "DPBarkerMH-full": lambda model, data, **kw: pmdp.DPBarkerMH(**{"full_data": True, **kw}),
    "DPMultiOwnerPenaltyMH": lambda model, data, **kw: pmdp.DPMultiOwnerPenaltyMH(
        **{"owners": np.arange(N_ROWS) % 3, "llr_clip": 2.0, **kw}
    ),
    "DPSuffStatsPenaltyMH": lambda model, data, **kw: pmdp.DPSuffStatsPenaltyMH(
        "normal",
        np.clip(data, -4, 4),
        {"mu": model["m"]},
        **{"family_settings": {"sigma": 1.0, "bounds": (-4, 4)}, **kw},
    ),
}

#: Noise fixed by hand, for runs outside pymc_dp.sample (subsampled Barker has none to set).
FIXED_NOISE = {
    "DPPenaltyMH": {"noise_multiplier": 20.0},
    "DPHMC": {"grad_noise_multiplier": 20.0, "llr_noise_multiplier": 20.0},
    "DPBarkerMH": {},
    "DPBarkerMH-full": {"llr_clip": 0.005},
    "DPMultiOwnerPenaltyMH": {"noise_multiplier": 20.0},
    "DPSuffStatsPenaltyMH": {"noise_multiplier": 20.0},
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


def _run(name, row_model, prior_model, data, cores=1, seed=3, step=None):
    """``pmdp.sample`` with a new step of ``name``, or again with ``step`` (each chain starts from clean state)."""
    model = _model_for(name, row_model, prior_model)
    # Subsampled Barker's ε is set by N, b and T alone (no noise to calibrate): no target for it.
    target = {} if name == "DPBarkerMH" else {"epsilon": 2.0}
    # The DPADVI start (init="auto": a 1,000-iteration fit, a third of a run's time here) and its events are
    # checked on DPHMC, the step with the most settings; the other steps start from prior draws, which
    # leaves what the contract checks about the step itself (its statistics, ε, leaks, cores) unchanged.
    init = "auto" if name == "DPHMC" else "prior"
    with model:
        step = STEPS[name](model, data, **REPRODUCIBLE) if step is None else step
        idata = pmdp.sample(
            step=step,
            delta=1e-5,
            draws=40,
            tune=20,
            chains=2,
            cores=cores,
            random_seed=seed,
            init=init,
            **target,
            **QUIET,
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
    assert ("dp_init" in json.loads(attrs["dp_accountant"])) == (name == "DPHMC"), "DPHMC's run starts from DPADVI"
    leaked = np.isin(np.fromiter(_numbers_in(idata), dtype=float), data)
    assert not leaked.any(), "a raw data value appears in the result"
    # The same step again (building another compiles its data layer anew: a quarter of the test's time), now
    # with cores=2: the draws of a run do not depend on an earlier run of the step nor on the process count.
    _, twin = _run(name, row_model, prior_model, data, cores=2, step=step)
    np.testing.assert_array_equal(group(idata, "posterior")["m"].values, group(twin, "posterior")["m"].values)


@pytest.mark.parametrize("name", sorted(STEPS))
def test_refused_runs_change_nothing(name, row_model, prior_model, data):
    model = _model_for(name, row_model, prior_model)
    budget = pmdp.PrivacyBudget(epsilon=1.0, delta=1e-5, n_rows=N_ROWS)
    init = {"init": "auto" if name == "DPHMC" else "prior"}  # as in _run: the DPADVI start's plan on DPHMC
    with model:
        step = STEPS[name](model, data)
        before = {key: getattr(step, key) for key in step.noise_attributes}
        with pytest.raises(ValueError, match="`epsilon` must be"):
            pmdp.sample(step=step, epsilon=-1.0, budget=budget, draws=10, tune=0, chains=1, **init, **QUIET)
        with pytest.raises(ValueError, match="`chains` must be"):
            pmdp.sample(step=step, epsilon=1.0, budget=budget, draws=10, tune=0, chains=0, **init, **QUIET)
        with pytest.raises(pmdp.PrivacyBudgetExceededError, match="Nothing was run"):  # ε 5 > the budget's 1
            pmdp.sample(step=step, budget=budget, epsilon=5.0, draws=200, tune=0, chains=4, **init, **QUIET)
    assert {key: getattr(step, key) for key in step.noise_attributes} == before
    assert budget.events == ()


def test_dpadvi_contract(row_model, data):
    def fit(seed):
        dpadvi = pmdp.DPADVI(
            epsilon=2.0, delta=1e-5, sampling_rate=0.25, grad_clip=2.0, random_seed=seed, **REPRODUCIBLE
        )
        return dpadvi.fit(50, model=row_model, progressbar=False).sample(40, random_seed=seed)

    idata = fit(4)
    attrs = idata["posterior"].attrs
    assert pmdp.privacy_spent(idata).epsilon == attrs["dp_epsilon"] and attrs["dp_epsilon"] <= 2.0
    assert json.loads(attrs["dp_accountant"])["settings"]["reproducible_noise"]
    assert not np.isin(np.fromiter(_numbers_in(idata), dtype=float), data).any()
    np.testing.assert_array_equal(group(idata, "posterior")["m"].values, group(fit(4), "posterior")["m"].values)
    budget = pmdp.PrivacyBudget(epsilon=0.1, delta=1e-5, n_rows=N_ROWS)
    refused = pmdp.DPADVI(noise_multiplier=0.5, budget=budget, sampling_rate=1.0, grad_clip=1.0)
    with pytest.raises(pmdp.PrivacyBudgetExceededError, match="Nothing was run"):
        refused.fit(100, model=row_model, progressbar=False)
    assert budget.events == () and refused.approx is None


# -- clean state per chain -------------------------------------------------------------------
def _state(value, depth=0):
    """A comparable picture of everything ``value`` holds that sampling can change.

    Plain values, arrays and generator states, recursing into the step's helper objects
    (mechanisms, tuner, correction, owners). The model layer the step was built from (PyTensor
    objects and compiled functions, the model, the data layer) is the same for every chain and
    is skipped, and so are functions.
    """
    if isinstance(value, np.random.Generator):
        return ("generator", repr(value.bit_generator.state))
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if value is None or isinstance(value, bool | int | str | bytes):
        return value
    if isinstance(value, float | np.generic):
        return ("number", repr(value))
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_state(v, depth) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), _state(v, depth)) for k, v in value.items())))
    module = type(value).__module__
    if callable(value) or module.startswith(("pytensor", "pymc.model", "pymc_dp.data")) or depth > 4:
        return ("skipped", type(value).__qualname__)
    if not hasattr(value, "__dict__"):
        return ("object", type(value).__qualname__, repr(value))
    return (type(value).__qualname__, _state(vars(value), depth + 1))


def _differences(a, b) -> list[str]:
    return sorted(k for k in set(vars(a)) | set(vars(b)) if _state(vars(a).get(k)) != _state(vars(b).get(k)))


def _new_chain(step, hook, seed, tune, draws):
    rng = np.random.default_rng(seed)
    step.set_rng(rng) if hook == "set_rng" else step.setup_chain(rng, tune, draws)
    step._get_mechanism()  # built lazily: build it on both sides, so that its caches are compared


@pytest.mark.parametrize("name", sorted(STEPS))
def test_a_new_chain_starts_from_a_fresh_steps_state(name, row_model, prior_model, data):
    """Run a chain (tuning a full interval and a mass window, then stop_tuning), start another: state = fresh.

    Both hooks on one used step (each step compiles its data layer): PyMC 5's ``set_rng``, then, after
    another chain on it, PyMC 6's ``setup_chain``; each hook is compared with a step never run.
    """
    model = _model_for(name, row_model, prior_model)
    tune, draws = 110, 10
    with model:
        kwargs = {**FIXED_NOISE[name], **REPRODUCIBLE}
        if name != "DPHMC":
            kwargs["tune_interval"] = 50
        else:
            kwargs["adapt_mass_window"] = 50
        used = STEPS[name](model, data, **kwargs)
    point = model.initial_point()
    for hook in ("set_rng", "setup_chain"):
        with model:
            fresh = STEPS[name](model, data, **kwargs)
        q = DictToArrayBijection.map({v.name: point[v.name] for v in used.vars})
        _new_chain(used, hook, 0, tune, draws)
        for i in range(tune + draws):
            if i == tune:
                used.stop_tuning()
            q, stats = used.astep(q)
        assert stats[0]["dp_iterations" if "dp_iterations" in stats[0] else "dp_accepted"] is not None
        assert _differences(used, fresh), f"the chain changed nothing: the test would be vacuous ({hook})"
        _new_chain(used, hook, 1, tune, draws)
        _new_chain(fresh, hook, 1, tune, draws)
        assert _differences(used, fresh) == [], f"per-chain state carried over to the next chain ({hook})"
        start = DictToArrayBijection.map({v.name: point[v.name] for v in used.vars})
        a, b = used.astep(start), fresh.astep(start)
        np.testing.assert_array_equal(a[0].data, b[0].data)
        assert _state(a[1]) == _state(b[1])


# -- plain pm.sample, published ----------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(STEPS))
def test_plain_pm_sample_published_is_priced_as_recorded(name, row_model, prior_model, data):
    """pm.sample + pmdp.publish(step=...) and from the statistics alone: privacy_spent = dp_epsilon."""
    model = _model_for(name, row_model, prior_model)
    run = dict(draws=30, tune=20, chains=2, cores=1, random_seed=5, **QUIET)
    with model:
        step = STEPS[name](model, data, **FIXED_NOISE[name], **REPRODUCIBLE)
        plain = pm.sample(step=step, **run)
        alone = pmdp.publish(copy.deepcopy(plain), delta=1e-5)
        pmdp.publish(plain, delta=1e-5, step=step)
        reported = pmdp.sample(step=step, delta=1e-5, **run).posterior.attrs["dp_epsilon"]
    epsilon = plain["posterior"].attrs["dp_epsilon"]
    assert pmdp.privacy_spent(plain).epsilon == epsilon
    assert pmdp.privacy_spent(alone).epsilon == alone["posterior"].attrs["dp_epsilon"]
    assert epsilon == reported, "the step's own events, as pmdp.sample records them"
    # From the statistics alone: subsampled Barker from the same event; Gaussian steps from μ summed
    # iteration by iteration in dp_mu_cumulative, which differs from k·μ by float rounding only.
    if name == "DPBarkerMH":
        assert alone["posterior"].attrs["dp_epsilon"] == epsilon
    assert alone["posterior"].attrs["dp_epsilon"] == pytest.approx(epsilon, rel=1e-12)


# -- bad settings ------------------------------------------------------------------------------
_RANDOM_WALK_BAD = [
    ({"proposal_scale": -1.0}, "proposal_scale", ValueError),
    ({"proposal_scale": [0.1, 0.2, 0.3]}, "proposal_scale", ValueError),  # checked against the model's size
    ({"tune_interval": 0}, "tune_interval", ValueError),
    ({"tune": "yes"}, "tune", TypeError),
]
_PENALTY_BAD = [
    ({"llr_clip": -1.0}, "llr_clip", ValueError),
    ({"noise_multiplier": 0.0}, "noise_multiplier", ValueError),
    ({"temperature": 0.0}, "temperature", ValueError),
    ({"temperature": "hot"}, "temperature", TypeError),
    ({"neighbouring": "swap"}, "neighbouring", ValueError),
    *_RANDOM_WALK_BAD,
]
BAD_SETTINGS = {
    "DPPenaltyMH": _PENALTY_BAD,
    "DPMultiOwnerPenaltyMH": [
        *_PENALTY_BAD,
        ({"owners": np.zeros((2, 2))}, "owners", ValueError),
        ({"owners": np.arange(7)}, "owners", ValueError),  # checked against the model's rows
    ],
    "DPHMC": [
        ({"n_leapfrog": 0}, "n_leapfrog", ValueError),
        ({"step_size": -0.1}, "step_size", ValueError),
        ({"grad_clip": 0.0}, "grad_clip", ValueError),
        ({"llr_clip": float("nan")}, "llr_clip", ValueError),
        ({"grad_noise_multiplier": 1.0}, "grad_noise_multiplier", ValueError),
        ({"grad_budget_share": 1.0}, "grad_budget_share", ValueError),
        ({"step_size_jitter": 1.0}, "step_size_jitter", ValueError),
        ({"step_size_jitter": "wide"}, "step_size_jitter", TypeError),
        ({"target_accept": 0.0}, "target_accept", ValueError),
        ({"target_accept": "high"}, "target_accept", TypeError),
        ({"adapt_mass_window": -1}, "adapt_mass_window", ValueError),
        ({"temperature": 0.0}, "temperature", ValueError),
        ({"neighbouring": "swap"}, "neighbouring", ValueError),
    ],
    "DPBarkerMH": [
        ({"batch_size": 10}, "batch_size", ValueError),
        ({"batch_size": N_ROWS}, "batch_size", ValueError),  # checked against the model's rows
        ({"batch_size": None}, "batch_size", ValueError),
        ({"tempered_size": 2.0 * N_ROWS}, "tempered_size", ValueError),
        ({"tempered_size": -1.0}, "tempered_size", ValueError),
        ({"tempered_size": None, "temperature": 1.5}, "temperature", ValueError),
        ({"temperature": 0.5}, "tempered_size", ValueError),  # both given
        ({"correction_variance": 1.0}, "correction_variance", ValueError),
        ({"llr_clip": 10.0}, "llr_clip", ValueError),
        ({"neighbouring": "add_remove"}, "neighbouring", ValueError),
        *_RANDOM_WALK_BAD,
    ],
    "DPBarkerMH-full": [
        ({"batch_size": 60}, "batch_size", ValueError),
        ({"llr_clip": -1.0}, "llr_clip", ValueError),
        ({"correction_variance": 4.0}, "correction_variance", ValueError),
        ({"neighbouring": "add_remove", "tempered_size": 20.0}, "tempered_size", ValueError),
        *_RANDOM_WALK_BAD,
    ],
    "DPSuffStatsPenaltyMH": [
        ({"noise_multiplier": -1.0}, "noise_multiplier", ValueError),
        ({"temperature": 0.0}, "temperature", ValueError),
        ({"params": {}}, "params", ValueError),
        ({"out_of_bounds": "ignore"}, "out_of_bounds", ValueError),
        ({"family_settings": {"sigma": 1.0, "bounds": (4, -4)}}, "bounds", ValueError),
        *_RANDOM_WALK_BAD[:3],
    ],
}


def _model_state(model):
    point = model.initial_point()
    return (
        sorted(model.named_vars),
        {k: np.asarray(v).tobytes() for k, v in point.items()},
        sorted(str(rv) for rv in model.observed_RVs),
        {k: np.asarray(v.get_value()).tobytes() for k, v in model.named_vars.items() if hasattr(v, "get_value")},
    )


def _with_params(name, model, data, overrides):
    if name == "DPSuffStatsPenaltyMH" and "params" in overrides:  # a positional argument
        params = overrides.pop("params")
        return pmdp.DPSuffStatsPenaltyMH(
            "normal", np.clip(data, -4, 4), params, family_settings={"sigma": 1.0, "bounds": (-4, 4)}, **overrides
        )
    return STEPS[name](model, data, **overrides)


@pytest.mark.parametrize("name", sorted(STEPS))
def test_bad_settings_name_the_parameter_and_change_nothing(name, row_model, prior_model, data):
    model = _model_for(name, row_model, prior_model)
    before = _model_state(model)
    for overrides, parameter, error in BAD_SETTINGS[name]:
        with model, pytest.raises(error, match=re.escape(f"`{parameter}`")):
            _with_params(name, model, data, dict(overrides))
    assert _model_state(model) == before, "a refused construction changed the model"
    with model:  # the same construction, with good settings, still builds a working step
        step = STEPS[name](model, data, **FIXED_NOISE[name], **REPRODUCIBLE)
    step.set_rng(np.random.default_rng(0))
    point = model.initial_point()
    q, stats = step.astep(DictToArrayBijection.map({v.name: point[v.name] for v in step.vars}))
    assert np.all(np.isfinite(q.data)) and set(stats[0]) == set(type(step).stats_dtypes_shapes)
