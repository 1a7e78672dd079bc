"""pmdp.sample widens a centred run's draws by its anchor's known noise (issue 36: the anchor's noise is
carried into the result); the widening is post-processing, written in place on both ArviZ lines."""

import numpy as np
import pymc as pm
import pytest
import xarray as xr

from pymc_dp.mechanisms.centred import CentringAnchor, widen_for_anchor_noise
from pymc_dp.mechanisms.noise import mechanism_rng
from pymc_dp.results import posterior_attrs
from pymc_dp.sampling import widen_centred_draws


def _model_and_draws(transformed: bool = False):
    with pm.Model() as model:
        pm.Normal("intercept", 0.0, 1.0)
        pm.Normal("beta", 0.0, 1.0, shape=2)
        if transformed:
            pm.HalfNormal("scale", 1.0)
    rng = np.random.default_rng(0)
    posterior = xr.Dataset(
        {
            "intercept": (("chain", "draw"), rng.normal(0.3, 0.1, size=(2, 50))),
            "beta": (("chain", "draw", "beta_dim_0"), rng.normal(-0.2, 0.1, size=(2, 50, 2))),
        }
    )
    return model, {"posterior": posterior}


def _anchor(names, size):
    return CentringAnchor(
        point=np.zeros(size),
        gradient=np.zeros(size),
        grad_clip=2.0,
        noise_multiplier=3.0,
        neighbouring="substitute",
        var_names=tuple(names),
        hessian=-np.eye(size),
        hessian_clip=1.0,
        hessian_noise_multiplier=3.0,
    )


def test_the_draws_are_widened_in_place_by_the_anchors_noise_in_the_steps_order():
    model, idata = _model_and_draws()
    before = {name: idata["posterior"][name].values.copy() for name in ("intercept", "beta")}
    anchor = _anchor(["intercept", "beta"], 3)

    class Step:
        rng = np.random.default_rng(7)
        temperature = 1.0

    chains = widen_centred_draws(idata, model, anchor, Step(), reproducible=True)
    # the chains' own draws come back, unwidened, for the mixing diagnostics
    assert set(chains) == {"intercept", "beta"} and all(np.array_equal(chains[k], before[k]) for k in before)
    flat = np.concatenate([before["intercept"][..., None], before["beta"]], axis=-1)
    expected = widen_for_anchor_noise(flat, anchor, rng=mechanism_rng(np.random.default_rng(7), True))
    np.testing.assert_array_equal(idata["posterior"]["intercept"].values, expected[..., 0])
    np.testing.assert_array_equal(idata["posterior"]["beta"].values, expected[..., 1:])
    # the added spread is the anchor's: the draws moved, and by a non-zero amount in every coordinate
    assert np.all(np.std(idata["posterior"]["beta"].values - before["beta"], axis=(0, 1)) > 0)


def test_transformed_variables_are_refused_rather_than_widened_on_the_wrong_scale():
    model, idata = _model_and_draws(transformed=True)
    idata["posterior"]["scale"] = (("chain", "draw"), np.ones((2, 50)))
    anchor = _anchor(["intercept", "scale_log__"], 2)
    with pytest.raises(RuntimeError, match="transformed"):
        widen_centred_draws(idata, model, anchor, object(), reproducible=False)


def test_the_mixing_diagnostics_read_the_chains_not_the_noise_the_widening_added():
    # H36's finding: at N = 400, ε = 1 centred chains with R-hat 1.96 were published with R-hat 1.01 and
    # usable=True, the widening's independent noise hiding that they had not mixed.
    import json

    import arviz as az

    from pymc_dp.diagnostics import PoorMixingWarning, attach_diagnostics

    rng = np.random.default_rng(1)
    stuck = np.array([[0.0], [1.0]]) + 0.01 * rng.normal(size=(2, 400))  # two chains that never met
    published = stuck + rng.normal(0.0, 30.0, size=stuck.shape)  # the widening's noise swamps the gap
    as_dict = {"posterior": {"theta": published}}
    make = (
        (lambda: az.from_dict(as_dict))
        if int(az.__version__.split(".")[0]) >= 1
        else (lambda: az.from_dict(posterior={"theta": published}))
    )
    plain = json.loads(posterior_attrs(attach_diagnostics(make(), "ignore")).get("dp_diagnostics"))
    assert plain["usable"]  # what was published before the fix
    with pytest.warns(PoorMixingWarning, match="R-hat"):
        honest = attach_diagnostics(make(), "warn", chain_draws={"theta": stuck})
    recorded = json.loads(posterior_attrs(honest)["dp_diagnostics"])
    assert not recorded["usable"] and "before the published draws' added noise" in recorded["computed_on"]
