"""The PyMC/ArviZ workflow on a DP result: predictions on public data only; which ArviZ calls work."""

import logging
import warnings

import arviz as az
import matplotlib
import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.diagnostics import PoorMixingWarning
from pymc_dp.results import group, group_names
from pymc_dp.workflow import TRAINING_ROWS_GUARD, TrainingRowsWarning, data_read_by

matplotlib.use("Agg")  # no display in CI
QUIET = dict(progressbar=False, compute_convergence_checks=False)
N = 200


@pytest.fixture(scope="module")
def fitted():
    """A regression with pm.Data covariates and observed rows, sampled privately."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=N)
    y = 1.0 + 2.0 * x + rng.normal(size=N)
    with pm.Model() as model:
        xd = pm.Data("x", x)
        yd = pm.Data("y_obs", y)
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5)
        pm.Normal("y", a + b * xd, 1.0, observed=yd, shape=xd.shape)
        # A large ε, so that every chain moves: a chain stuck at one value (no proposal accepted, which small
        # runs at a small ε often give) makes ArviZ's own KDE warn, and warnings are errors here.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PoorMixingWarning)  # a short run; mixing is not what is tested
            idata = pmdp.sample(
                step=pmdp.DPPenaltyMH(llr_clip=3.0), epsilon=50.0, delta=1e-5, draws=60, tune=30, chains=2, **QUIET
            )
    accepted = np.asarray(group(idata, "sample_stats")["dp_accepted"]).mean(axis=1)
    assert np.all(accepted > 0.05), f"acceptance per chain {accepted}: the run must move for the plots"
    return model, idata, x


def test_predictions_on_public_data_are_simulated_from_the_draws_and_leave_the_model_alone(fitted):
    model, idata, x = fitted
    grid = np.linspace(-2.0, 2.0, 5)
    pred = pmdp.sample_posterior_predictive(
        idata, model, data={"x": grid, "y_obs": np.zeros(grid.size)}, random_seed=3, progressbar=False
    )
    assert group_names(pred) == ["predictions"]  # no observed_data, no constant_data
    draws = np.asarray(group(pred, "predictions")["y"])
    a = np.asarray(group(idata, "posterior")["a"])[..., None]
    b = np.asarray(group(idata, "posterior")["b"])[..., None]
    assert draws.shape == (*a.shape[:2], grid.size)
    # y = a + b·grid + N(0, 1) per draw: the residuals are standard normal (200 of them)
    residuals = (draws - (a + b * grid)).ravel()
    se = 1 / np.sqrt(residuals.size)
    assert abs(residuals.mean()) < 5 * se
    assert abs(residuals.var(ddof=1) - 1) < 5 * np.sqrt(2 / (residuals.size - 1))
    np.testing.assert_array_equal(model["x"].get_value(), x)  # the caller's model still holds its data
    posterior = pmdp.sample_posterior_predictive(
        idata, model, data={"x": grid, "y_obs": np.zeros(grid.size)}, predictions=False, progressbar=False
    )
    assert group_names(posterior) == ["posterior_predictive"]


def test_predictions_that_would_read_the_training_rows_are_refused(fitted):
    model, idata, x = fitted
    grid = np.linspace(-2.0, 2.0, 5)
    with pytest.raises(ValueError, match=r"\['y_obs'\] would keep their training rows"):
        pmdp.sample_posterior_predictive(idata, model, data={"x": grid})
    with pytest.raises(ValueError, match=r"`data` must name pm.Data containers .* Found \['z'\]"):
        pmdp.sample_posterior_predictive(idata, model, data={"x": grid, "y_obs": grid, "z": grid})
    with pytest.raises(ValueError, match=r"`data` must be a non-empty dict"):
        pmdp.sample_posterior_predictive(idata, model, data={})
    with pytest.raises(ValueError, match=r"`var_names` must name variables"):
        pmdp.sample_posterior_predictive(idata, model, data={"x": grid, "y_obs": grid}, var_names=["nope"])
    y = np.asarray(model["y_obs"].get_value())
    with pm.Model() as hard_coded:  # covariates as a NumPy array: the training rows are in the graph
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5)
        pm.Normal("y", a + b * x, 1.0, observed=pm.Data("y_obs", y))
    with pytest.raises(ValueError, match=r"`y` must be simulated from public data only"):
        pmdp.sample_posterior_predictive(idata, hard_coded, data={"y_obs": grid})
    with pm.Model() as constant_rows:  # observed rows as a NumPy array
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5)
        pm.Normal("y", a + b * pm.Data("x", x), 1.0, observed=y)
    with pytest.raises(ValueError, match=r"observed data of `y` in a pm.Data container"):
        pmdp.sample_posterior_predictive(idata, constant_rows, data={"x": grid})
    with model:
        plain = pm.sample(
            step=pmdp.DPPenaltyMH(llr_clip=3.0, noise_multiplier=50.0), draws=5, tune=0, chains=1, **QUIET
        )
    with pytest.raises(ValueError, match=r"`result` must be a published private result"):
        pmdp.sample_posterior_predictive(plain, model, data={"x": grid, "y_obs": grid})


def _plain_trace(idata):
    """The same draws without a privacy record (as a plain pm.sample would give them)."""
    posterior = {name: np.asarray(group(idata, "posterior")[name]) for name in ("a", "b")}
    if int(az.__version__.split(".")[0]) >= 1:  # ArviZ 1.x (PyMC 6): groups in one mapping, a DataTree back
        return az.from_dict({"posterior": posterior})
    return az.from_dict(posterior=posterior)


def test_a_plain_pymc_predictive_call_on_a_dp_result_warns_as_it_runs(fitted, caplog):
    model, idata, _ = fitted
    caplog.set_level(logging.INFO, logger="pymc")  # PyMC's own default outside pytest: its "Sampling:" line
    assert TRAINING_ROWS_GUARD in logging.getLogger("pymc.sampling.forward").filters  # added by `import pymc_dp`
    for trace in (idata, idata["posterior"]):  # the result, or its posterior group alone
        with model, pytest.warns(TrainingRowsWarning) as caught:
            draws = pm.sample_posterior_predictive(trace, progressbar=False, random_seed=1)
        (warning,) = caught
        message = str(warning.message)
        assert "the draws read pm.Data `x`." in message  # y's mean reads x; y_obs only through its shape
        assert "pymc_dp.sample_posterior_predictive(idata, model, data={...})" in message
        assert not any(ch.isdigit() for ch in message)  # names and words only: no value of the data
        assert warning.filename == __file__  # it points at the caller's line, not inside PyMC
        assert "posterior_predictive" in group_names(draws)  # PyMC's call itself is unchanged
    assert any(r.getMessage() == "Sampling: [y]" for r in caplog.records)  # and so is its log line
    caplog.clear()
    grid = np.linspace(-2.0, 2.0, 3)
    with model:  # the safe path (public data on a clone) and a trace without a privacy record: nothing said
        pmdp.sample_posterior_predictive(idata, data={"x": grid, "y_obs": np.zeros(grid.size)}, progressbar=False)
        pm.sample_posterior_predictive(_plain_trace(idata), progressbar=False, random_seed=1)
    assert sum(r.getMessage() == "Sampling: [y]" for r in caplog.records) == 2  # both ran past the filter


def test_what_a_predictive_graph_reads_of_the_data():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=20), rng.normal(size=20)
    with pm.Model() as shapes_only:  # y's draws read y_obs's length (N, public), not its values
        a = pm.Normal("a", 0, 5)
        pm.Normal("y", a, 1.0, observed=pm.Data("y_obs", y), shape=pm.Data("x", x).shape)
    assert data_read_by(shapes_only, [shapes_only["y"]]) == []
    with pm.Model() as normal_mean:  # observed rows as a NumPy array: y's draws read only their number
        a = pm.Normal("a", 0, 5)
        pm.Normal("y", a, 1.0, observed=y)
    assert data_read_by(normal_mean, [normal_mean["y"]]) == []
    with pm.Model() as hard_coded:  # covariates as a NumPy array; the prior's own array constant is not data
        b = pm.Normal("b", np.zeros(2), 5, shape=2)
        pm.Normal("y", b[0] + b[1] * x, 1.0, observed=y)
    assert data_read_by(hard_coded, [hard_coded["y"]]) == ["an array given to the model as a NumPy array"]
    assert data_read_by(hard_coded, [hard_coded["b"]]) == []


# ArviZ 0.23's plots call a matplotlib API deprecated in 3.11; pyproject caps matplotlib below 3.11 on this line,
# but an environment with 3.11 must not fail on ArviZ's own call.
@pytest.mark.filterwarnings("ignore:Passing a dict or None as alias_mapping:DeprecationWarning")
def test_arviz_summaries_and_plots_work_on_a_dp_result(fitted):
    _, idata, _ = fitted
    summary = az.summary(idata)
    assert list(summary.index) == ["a", "b"] and "r_hat" in summary.columns
    az.plot_trace(idata)
    az.plot_forest(idata)
    matplotlib.pyplot.close("all")


@pytest.mark.parametrize("call", ["loo", "compare"])
def test_arviz_model_comparison_is_refused_for_lack_of_log_likelihoods(fitted, call):
    _, idata, _ = fitted
    assert "log_likelihood" not in group_names(idata)  # exact per-row log-likelihoods read the rows
    with pytest.raises(TypeError, match=r"log likelihood not found|ELPD"):
        az.loo(idata) if call == "loo" else az.compare({"one": idata, "two": idata})


def test_the_numba_warnings_pytensor_hides_stay_hidden_and_no_other():
    # PyTensor filters these two when it loads its Numba backend; pymc_dp's compile blocks
    # (warnings.catch_warnings) dropped its filters when that happened inside one (docs/workflow.md)
    from pymc_dp.workflow import keep_pytensors_numba_filters

    hidden = [
        'Cannot cache compiled function "numba_funcified_fgraph" as it uses dynamic globals (such as ctypes '
        "pointers and large global arrays)",
        "\x1b[1m'@' is faster on contiguous arrays, called on (Array(float64, 2, 'A', False, aligned=True),)",
    ]
    shown = [
        'Cannot cache compiled function "my_function" as it uses dynamic globals',
        "Cannot cache compiled function as it uses lifted code",
        "np.dot() is slow here",
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()  # no filter but the ones the function adds
        warnings.simplefilter("always")
        keep_pytensors_numba_filters()
        for text in hidden + shown:
            warnings.warn_explicit(text, UserWarning, "<string>", 1)
    assert [str(w.message) for w in caught] == shown


@pytest.mark.slow  # a fresh interpreter: about 9 CPU-s to import pymc_dp (pytest drops the filters its imports add)
def test_importing_pymc_dp_adds_pytensors_numba_filters():
    import ast
    import subprocess
    import sys

    from pymc_dp.workflow import NUMBA_FILTERS

    script = (
        "import warnings, pymc_dp, sys; "
        "sys.stdout.write(repr({f[1].pattern for f in warnings.filters if f[0] == 'ignore' and f[1] is not None}))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert set(NUMBA_FILTERS) <= ast.literal_eval(result.stdout)  # a set of strings, printed by repr
