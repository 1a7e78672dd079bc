"""Chain starts drawn from the prior (init="prior", pmdp.sample's default) and the priors they cannot use."""

import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp
from pymc_dp.starts import prior_starts

Y = np.random.default_rng(5).normal(0.5, 1.0, size=50)
RUN = {"draws": 10, "tune": 5, "chains": 2, "cores": 1, "random_seed": 2, "progressbar": False}


def _flat_model():
    with pm.Model() as model:
        m = pm.Flat("m")
        s = pm.HalfFlat("s")
        k = pm.Normal("k", 0, 1)
        pm.Normal("y", m + k, s, observed=Y)
    return model


def test_flat_priors_refused_by_name_with_the_way_out():
    with pytest.raises(ValueError, match=r"\['m', 's'\] have flat priors") as info:
        prior_starts(_flat_model(), 2, 0)
    assert "init='model'" in str(info.value) and "`initvals`" in str(info.value)
    with _flat_model():  # init="prior" is refused before any data access or spending
        step = pmdp.DPPenaltyMH(llr_clip=2.0)
        with pytest.raises(ValueError, match=r"\['m', 's'\] have flat priors"):
            pmdp.sample(step=step, epsilon=1.0, delta=1e-6, init="prior", **RUN)
        idata = pmdp.sample(step=step, epsilon=1.0, delta=1e-6, init="model", **RUN)  # the way out works
        assert idata["posterior"].attrs["dp_start"] == "model"
        start = [{"m": np.array(0.1 * c), "s": np.array(1.0), "k": np.array(0.0)} for c in range(2)]
        idata = pmdp.sample(step=pmdp.DPPenaltyMH(llr_clip=2.0), epsilon=1.0, delta=1e-6, initvals=start, **RUN)
        assert idata["posterior"]["m"].shape[:2] == (2, RUN["draws"])


def test_a_prior_without_random_method_refused_with_the_way_out():
    with pm.Model() as model:
        pm.CustomDist("c", logp=lambda value: -(value**2))
    with pytest.raises(ValueError, match=r"\['c'\] has no random method") as info, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PyMC 6: Numba's object-mode fallback for the op
        prior_starts(model, 2, 0)
    assert "init='model'" in str(info.value) and isinstance(info.value.__cause__, NotImplementedError)
