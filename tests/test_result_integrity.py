"""Pricing checks the object it is given (issue 33): a result is priced only as pymc_dp made it.

Each refusal here was a mispricing on ``edd15ad``, where ``privacy_spent`` read the record and
trusted it: two results of ε = 1 joined along chains were priced ε = 1 (the record of the
first), a run extended along draws by a second run was priced as one run, and a record whose
events were deleted was priced ε = 0. The checks (``pymc_dp.results.check_integrity``) are
by construction: ``dp_integrity`` binds the record's text to every value the result held when
it was made (SHA-256), and the record's ε must be the composition of its events.
"""

import copy
import json

import numpy as np
import pymc as pm
import pytest
import xarray as xr

import pymc_dp as pmdp
from pymc_dp.accounting import gaussian_epsilon
from pymc_dp.results import AlteredResultError, _integrity, group, group_names, posterior_attrs

QUIET = dict(progressbar=False, compute_convergence_checks=False)
RUN = dict(draws=30, tune=10, chains=2, on_poor_mixing="ignore", **QUIET)
Y = np.random.default_rng(33).normal(0.5, 1.0, size=120)


def _model():
    with pm.Model() as model:
        m = pm.Normal("m", 0, 10)
        pm.Normal("y", m, 1.0, observed=Y)
    return model


@pytest.fixture(scope="module")
def model():
    return _model()


@pytest.fixture(scope="module")
def two_runs(model):
    """Two pmdp.sample runs on the same rows, ε = 1 each (2 chains × (10 + 30) iterations)."""
    with model:
        return [
            pmdp.sample(step=pmdp.DPPenaltyMH(llr_clip=2.0), epsilon=1.0, delta=1e-5, random_seed=seed, **RUN)
            for seed in (1, 2)
        ]


def _joined(a, b, dim):
    """``a`` and ``b`` concatenated along ``dim`` group by group, ``a``'s attributes kept (as ``xr.concat`` does)."""
    c = copy.deepcopy(a)
    for name in group_names(a):
        dataset = xr.concat([group(a, name), group(b, name)], dim=dim, combine_attrs="override")
        if dim in dataset.sizes:  # PyMC 6 writes an empty sample_stats group for DPADVI
            dataset = dataset.assign_coords({dim: np.arange(dataset.sizes[dim])})
        attrs = dict(c[name].attrs)
        del c[name]
        c[name] = dataset
        c[name].attrs.update(attrs)
    return c


def _edit_record(idata, edit):
    """A copy of ``idata`` whose ``dp_accountant`` went through ``edit`` (a function of the dict)."""
    edited = copy.deepcopy(idata)
    record = json.loads(posterior_attrs(edited)["dp_accountant"])
    edit(record)
    posterior_attrs(edited)["dp_accountant"] = json.dumps(record)
    return edited


def test_an_untouched_result_is_priced_as_before(two_runs, model):
    a = two_runs[0]
    attrs = posterior_attrs(a)
    assert isinstance(attrs["dp_integrity"], str)  # NetCDF-safe
    spent = pmdp.privacy_spent(a)
    assert spent.epsilon == pytest.approx(attrs["dp_epsilon"], rel=1e-12)
    assert spent.epsilon == pytest.approx(1.0, rel=1e-6)  # calibrated to the target
    with model:
        assert pmdp.publish(copy.deepcopy(a)) is not None  # a published result re-published: unchanged


@pytest.mark.parametrize("price", ["privacy_spent", "publish", "privacy_statement"])
def test_two_results_joined_along_chains_are_refused(two_runs, model, price):
    joined = _joined(*two_runs, "chain")
    assert group(joined, "posterior").sizes["chain"] == 4
    with model, pytest.raises(AlteredResultError, match=r"`posterior` group of 4 chains; its record priced 2"):
        {"privacy_spent": pmdp.privacy_spent, "publish": pmdp.publish, "privacy_statement": pmdp.privacy_statement}[
            price
        ](joined)


def test_a_run_extended_along_draws_is_refused(two_runs):
    extended = _joined(*two_runs, "draw")
    with pytest.raises(AlteredResultError, match=r"`posterior` group of 60 draws per chain; its record priced 30"):
        pmdp.privacy_spent(extended)


def test_deleting_the_record_events_is_refused(two_runs):
    edited = _edit_record(two_runs[0], lambda r: r.update(events=[]))
    with pytest.raises(AlteredResultError, match=r"record \(dp_accountant\) edited"):
        pmdp.privacy_spent(edited)


def test_a_recomputed_digest_does_not_hide_deleted_events(two_runs):
    """Whoever recomputes the digest gets past it (it is no signature); the record must still price itself."""
    edited = _edit_record(two_runs[0], lambda r: r.update(events=[]))
    attrs = posterior_attrs(edited)
    attrs["dp_integrity"] = json.dumps(_integrity(edited, attrs["dp_accountant"]))
    with pytest.raises(AlteredResultError, match=r"ε \(1\) is not the composition of its 0 events"):
        pmdp.privacy_spent(edited)


def test_a_record_without_its_digest_is_refused(two_runs):
    bare = copy.deepcopy(two_runs[0])
    del posterior_attrs(bare)["dp_integrity"]
    with pytest.raises(AlteredResultError, match=r"without dp_integrity"):
        pmdp.privacy_spent(bare)


def test_an_edited_epsilon_attribute_is_refused(two_runs):
    edited = copy.deepcopy(two_runs[0])
    posterior_attrs(edited)["dp_epsilon"] = 0.1
    with pytest.raises(AlteredResultError, match=r"`dp_epsilon` that disagrees with the record"):
        pmdp.privacy_spent(edited)


def test_two_thinned_runs_joined_to_the_original_shape_are_refused(two_runs):
    """Same chains and draws as the record says: only the values show that half the draws come from another run."""
    a, b = (r.isel(draw=slice(0, None, 2)) for r in two_runs)
    joined = _joined(a, b, "draw")
    assert dict(group(joined, "posterior").sizes) == dict(group(two_runs[0], "posterior").sizes)
    with pytest.raises(AlteredResultError, match=r"values of variable `m` in group `posterior`"):
        pmdp.privacy_spent(joined)


def test_statistics_of_another_run_are_refused(two_runs):
    mixed = copy.deepcopy(two_runs[0])
    attrs = dict(mixed["sample_stats"].attrs)
    del mixed["sample_stats"]
    mixed["sample_stats"] = group(two_runs[1], "sample_stats")
    mixed["sample_stats"].attrs.update(attrs)
    with pytest.raises(AlteredResultError, match=r"in group `sample_stats` that differ"):
        pmdp.privacy_spent(mixed)


def test_deleting_a_group_or_a_variable_releases_less_and_is_still_priced(two_runs):
    smaller = copy.deepcopy(two_runs[0])
    del smaller["sample_stats"]
    assert pmdp.privacy_spent(smaller).epsilon == pmdp.privacy_spent(two_runs[0]).epsilon


# -- every kind of result -----------------------------------------------------------------------------


def _sampled(model, seed):
    with model:
        return pmdp.sample(step=pmdp.DPPenaltyMH(llr_clip=2.0), epsilon=1.0, delta=1e-5, random_seed=seed, **RUN)


def _published(model, seed):
    with model:
        step = pmdp.DPPenaltyMH(llr_clip=2.0, noise_multiplier=20.0)
        idata = pm.sample(step=step, draws=20, tune=10, chains=2, cores=1, random_seed=seed, **QUIET)
        return pmdp.publish(idata, delta=1e-5, step=step)


def _dpadvi(model, seed):
    approx = pmdp.DPADVI(noise_multiplier=1.0, sampling_rate=0.5, grad_clip=2.0, delta=1e-5, random_seed=seed).fit(
        20, model=model, progressbar=False
    )
    return approx.sample(30, random_seed=seed)


def _released(model, seed):
    release = pmdp.release_statistics("bernoulli", (Y > 0.5).astype(int), epsilon=0.5)
    with pm.Model():
        p = pm.Beta("p", 1, 1)
        release.likelihood("loglik", p=p)
        return release.sample(draws=30, tune=30, chains=1, random_seed=seed, on_poor_mixing="ignore", **QUIET)


def _one_draw(model, seed):
    with model:
        return pmdp.one_posterior_sample(epsilon=0.5, loglik_bounds=(-8.0, 0.0), tune=30, random_seed=seed)


KINDS = {
    "pmdp.sample": _sampled,
    "pmdp.publish": _published,
    "DPADVI": _dpadvi,
    "release_statistics": _released,
    "one_posterior_sample": _one_draw,
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_of_result_is_priced_unchanged_and_refused_joined(model, kind):
    a, b = (KINDS[kind](model, seed) for seed in (3, 4))
    for result in (a, b):
        assert isinstance(posterior_attrs(result)["dp_integrity"], str)
        assert pmdp.privacy_spent(result).epsilon == pytest.approx(posterior_attrs(result)["dp_epsilon"], rel=1e-12)
    chains = group(a, "posterior").sizes["chain"]
    with pytest.raises(AlteredResultError, match=rf"`posterior` group of {2 * chains} chains"):
        pmdp.privacy_spent(_joined(a, b, "chain"))


# -- plain pm.sample results, priced from their statistics ------------------------------------------


@pytest.fixture(scope="module")
def two_plain_runs(model):
    """Two plain pm.sample runs with τ = 20, stripped (2 chains × (10 + 20) iterations each)."""
    runs = []
    with model:
        for seed in (5, 6):
            idata = pm.sample(
                step=pmdp.DPPenaltyMH(llr_clip=2.0, noise_multiplier=20.0),
                draws=20,
                tune=10,
                chains=2,
                cores=1,
                random_seed=seed,
                **QUIET,
            )
            runs.append(pmdp.strip_private_groups(idata, model=model))
    return runs


def test_plain_runs_joined_along_draws_are_refused(two_plain_runs, model):
    """On edd15ad the maximum of dp_mu_cumulative priced the joined result as one run."""
    extended = _joined(*two_plain_runs, "draw")
    with model:
        with pytest.raises(AlteredResultError, match=r"`dp_mu_cumulative` statistic that does not grow"):
            pmdp.privacy_spent(extended, delta=1e-5)
        with pytest.raises(AlteredResultError, match=r"`dp_mu_cumulative` statistic that does not grow"):
            pmdp.publish(extended, delta=1e-5, step=pmdp.DPPenaltyMH(llr_clip=2.0, noise_multiplier=20.0))


def test_plain_runs_joined_along_chains_are_priced_as_both(two_plain_runs, model):
    """Summed over chains, the μ of each run's chains: joining along chains is priced correctly (Sommer et al. 2019)."""
    joined = _joined(*two_plain_runs, "chain")
    mu = 4 * 30 / (2 * 20.0**2)  # 4 chains × 30 iterations at μ = 1/(2τ²) each, composed exactly
    with model:
        spent = pmdp.privacy_spent(joined, delta=1e-5)
    assert spent.mu == pytest.approx(mu, rel=1e-12)
    assert spent.epsilon == pytest.approx(gaussian_epsilon(1e-5, mu), rel=1e-12)


def test_plain_results_thinned_evenly_are_still_priced(two_plain_runs, model):
    thinned = two_plain_runs[0].isel(draw=slice(1, None, 3))  # last kept draw: iteration 10 + 20
    with model:
        assert pmdp.privacy_spent(thinned, delta=1e-5).mu == pytest.approx(2 * 30 / (2 * 20.0**2), rel=1e-12)


# -- NetCDF ----------------------------------------------------------------------------------------


def test_the_digest_survives_a_netcdf_round_trip(two_runs, tmp_path):
    """dp_integrity is a string and hashes values, not dtypes: a result read back from a file is still priced."""
    import arviz as az  # h5netcdf, which both ArviZ lines write NetCDF with, is a dependency of the package

    result = two_runs[0]  # on edd15ad to_netcdf failed: dp_reproducible_noise was a bool
    path = str(tmp_path / "result.nc")
    if hasattr(az, "from_netcdf"):  # ArviZ 0.23: InferenceData
        result.to_netcdf(path)
        back = az.from_netcdf(path)
    else:  # ArviZ 1.x: DataTree
        result.to_netcdf(path, engine="h5netcdf")
        back = xr.open_datatree(path, engine="h5netcdf")
    assert pmdp.privacy_spent(back).epsilon == pmdp.privacy_spent(two_runs[0]).epsilon
    extended = _joined(back, two_runs[1], "draw")
    with pytest.raises(AlteredResultError, match=r"60 draws per chain"):
        pmdp.privacy_spent(extended)
