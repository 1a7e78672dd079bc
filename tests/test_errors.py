"""Errors raised after the data were read carry no values computed from them (issue 12, class 6)."""

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp._errors import data_free_errors
from pymc_dp._validation import check_finite_positive


def test_a_foreign_error_is_replaced_by_one_without_its_text_or_chain():
    secret = 0.123456789
    with pytest.raises(pmdp.PrivateRunError) as info, data_free_errors("pm.sample"):
        raise FloatingPointError(f"log density at the start: {secret}")
    error = info.value
    assert "0.123" not in str(error) and "FloatingPointError" in str(error) and "pm.sample" in str(error)
    assert error.original_type == "FloatingPointError" and error.location.startswith("test_errors.py:")
    assert error.__cause__ is None and error.__suppress_context__  # the original is not chained


def test_pymc_dp_own_errors_pass_unchanged():
    # pymc-dp's messages hold public settings only; they reach the caller as raised.
    with pytest.raises(ValueError, match="`noise_multiplier` must be"), data_free_errors("pm.sample"):
        check_finite_positive("noise_multiplier", -1.0)


def test_an_import_error_passes_with_its_message_but_without_what_it_interrupted():
    # A missing optional dependency (PyMC 6's progress bar imports matplotlib) must say which module
    # to install; its text comes from the environment, not the data.
    with pytest.raises(ModuleNotFoundError, match="No module named 'pymc_dp_no_such_module'"), data_free_errors("x"):
        import pymc_dp_no_such_module  # noqa: F401
    secret = 0.123456789
    with pytest.raises(ImportError, match="cannot import name 'colors'") as info, data_free_errors("pm.sample"):
        try:
            raise FloatingPointError(f"log density at the start: {secret}")
        except FloatingPointError:
            raise ImportError("cannot import name 'colors'", name="matplotlib")  # noqa: B904
    error = info.value
    assert error.name == "matplotlib"
    assert error.__context__ is None and error.__cause__ is None  # the data-bearing error is not carried along


def test_one_posterior_sample_withholds_pymc_sampling_error_text():
    # PyMC's SamplingError lists every term's log density at the start, the tempered likelihood
    # (a sum over the rows) included: an exact data-dependent value.
    y = np.random.default_rng(0).normal(0.3, 1.0, size=50)
    with pm.Model() as model:
        pm.Normal("m", 0, 1)
        pm.HalfNormal("z", 1, default_transform=None)
        pm.Normal("y", model["m"], 1, observed=y)
    budget = pmdp.PrivacyBudget(1.0, 1e-6, n_rows=50)
    with pytest.raises(pmdp.PrivateRunError, match="SamplingError") as info:
        pmdp.one_posterior_sample(
            model, epsilon=0.1, loglik_bounds=(-3.0, 0.0), initvals={"z": -1.0}, tune=10, budget=budget
        )
    message = str(info.value)
    assert "Logp" not in message and "-inf" not in message and "{" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert budget.spent().epsilon == pytest.approx(0.1)  # charged before the data were read: stays charged


def test_dpadvi_fit_withholds_errors_raised_while_reading_the_data(monkeypatch):
    # DPADVI's iterations run after the budget is charged; an error raised while they read the
    # rows (here a per-row gradient whose message quotes a row's value) must not carry its text.
    from pymc_dp.data import RowLikelihood

    y = np.random.default_rng(1).normal(0.3, 1.0, size=50)
    secret = repr(float(y[7]))
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.Normal("y", m, 1, observed=y)

    def leaky_grad_rows(self, theta, rows=None):
        raise FloatingPointError(f"per-row gradient overflow at row 7 (y = {secret})")

    monkeypatch.setattr(RowLikelihood, "grad_rows", leaky_grad_rows)
    budget = pmdp.PrivacyBudget(5.0, 1e-5, n_rows=50)
    dpadvi = pmdp.DPADVI(noise_multiplier=3.0, sampling_rate=0.5, grad_clip=1.0, budget=budget, random_seed=1)
    with pytest.raises(pmdp.PrivateRunError, match=r"DPADVI\.fit failed .* FloatingPointError") as info:
        dpadvi.fit(5, model=model, progressbar=False)
    assert secret not in str(info.value) and secret[:5] not in str(info.value)
    assert info.value.original_type == "FloatingPointError"
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert budget.spent().epsilon > 0  # charged before the data were read: stays charged
