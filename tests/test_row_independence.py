"""Row independence of the data layer (issue 12, classes 1 and 3).

Per-row clipping bounds one row's influence only if row i's log-likelihood reads row i's
data alone. These tests check that (a) PyMC's parameter checks are applied row by row,
(b) models aggregating rows in the graph are refused, (c) the one-row perturbation probe is
a hard error, (d) priors and potentials reading data are refused in every entry point, and
that a zoo of ordinary models is accepted and row-wise on both PyMC 5 and 6.
"""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_dp as pmdp
from pymc_dp.data import ModelStructureError, RowLikelihood, _perturbation_probe, check_prior_reads_no_data

N = 40
K = 3  # the perturbed row
RNG = np.random.default_rng(20261124)


def _data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    x = rng.normal(size=N)
    X = rng.normal(size=(N, 2))
    return {
        "x": x,
        "X": X,
        "y_bin": (rng.random(N) < 0.5).astype("int64"),
        "y_count": rng.poisson(2.0, size=N).astype("int64"),
        "y_real": rng.normal(1.0 + 0.5 * x, 1.0),
        "g": rng.integers(0, 3, size=N).astype("int64"),
        "y_cens": np.minimum(rng.normal(0.5 * x, 1.0), 1.0),
    }


def _perturbed(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A copy with row K changed in every array (the caller's arrays are untouched)."""
    out = {k: np.array(v, copy=True) for k, v in data.items()}
    out["x"][K] += 0.7
    out["X"][K] += [0.4, -0.3]
    out["y_bin"][K] = 1 - out["y_bin"][K]
    out["y_count"][K] += 2
    out["y_real"][K] -= 0.9
    out["g"][K] = (out["g"][K] + 1) % 3
    out["y_cens"][K] = 1.0  # censored now
    return out


def _wrap(data, use_data):
    """pm.Data containers (row dim "obs") or plain numpy arrays."""
    if not use_data:
        return dict(data)
    return {k: pm.Data(k, v, dims=("obs", "col") if v.ndim == 2 else "obs") for k, v in data.items()}


def _coords():
    return {"obs": range(N), "col": range(2), "group": range(3)}


def logistic(data, use_data):
    with pm.Model(coords=_coords()) as model:
        d = _wrap(data, use_data)
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, dims="col")
        pm.Bernoulli("y", logit_p=a + d["X"] @ b, observed=d["y_bin"], dims="obs")
    return model


def poisson(data, use_data):
    with pm.Model(coords=_coords()) as model:
        d = _wrap(data, use_data)
        a = pm.Normal("a", 0, 1)
        b = pm.Normal("b", 0, 1, dims="col")
        pm.Poisson("y", mu=pt.exp(a + d["X"] @ b), observed=d["y_count"], dims="obs")
    return model


def negative_binomial(data, use_data):
    with pm.Model(coords=_coords()) as model:
        d = _wrap(data, use_data)
        a = pm.Normal("a", 0, 1)
        b = pm.Normal("b", 0, 1)
        alpha = pm.Gamma("alpha", 2, 1)
        pm.NegativeBinomial("y", mu=pt.exp(a + b * d["x"]), alpha=alpha, observed=d["y_count"], dims="obs")
    return model


def student_t(data, use_data):
    with pm.Model(coords=_coords()) as model:
        d = _wrap(data, use_data)
        a = pm.Normal("a", 0, 1)
        b = pm.Normal("b", 0, 1)
        nu = pm.Gamma("nu", 2, 0.1)
        s = pm.HalfNormal("s", 1)
        pm.StudentT("y", nu=nu, mu=a + b * d["x"], sigma=s, observed=d["y_real"], dims="obs")
    return model


def hierarchical(data, use_data):
    with pm.Model(coords=_coords()) as model:
        d = _wrap(data, use_data)
        mu = pm.Normal("mu", 0, 1)
        tau = pm.HalfNormal("tau", 1)
        alpha = pm.Normal("alpha", mu, tau, dims="group")
        s = pm.HalfNormal("s", 1)
        pm.Normal("y", alpha[d["g"]] + 0.5 * d["x"], s, observed=d["y_real"], dims="obs")
    return model


def mixture(data, use_data):
    with pm.Model(coords=_coords()) as model:
        d = _wrap(data, use_data)
        w = pm.Dirichlet("w", np.ones(2))
        m = pm.Normal("m", 0, 2, shape=2, transform=pm.distributions.transforms.ordered, initval=[-1.0, 1.0])
        s = pm.HalfNormal("s", 1)
        pm.NormalMixture("y", w=w, mu=m, sigma=s, observed=d["y_real"], dims="obs")
    return model


def several_observed(data, use_data):
    with pm.Model(coords=_coords()) as model:
        d = _wrap(data, use_data)
        a = pm.Normal("a", 0, 1)
        b = pm.Normal("b", 0, 1)
        s = pm.HalfNormal("s", 1)
        pm.Normal("y", a + b * d["x"], s, observed=d["y_real"], dims="obs")
        pm.Poisson("c", pt.exp(a + b * d["x"]), observed=d["y_count"], dims="obs")
        pm.Bernoulli("z", logit_p=a * d["x"], observed=d["y_bin"], dims="obs")
    return model


def censored(data, use_data):
    with pm.Model(coords=_coords()) as model:
        d = _wrap(data, use_data)
        b = pm.Normal("b", 0, 1)
        s = pm.HalfNormal("s", 1)
        pm.Censored("y", pm.Normal.dist(b * d["x"], s), lower=None, upper=1.0, observed=d["y_cens"], dims="obs")
    return model


ZOO = {
    f.__name__: f
    for f in (logistic, poisson, negative_binomial, student_t, hierarchical, mixture, several_observed, censored)
}


def _theta(rows: RowLikelihood) -> np.ndarray:
    return np.random.default_rng(3).normal(scale=0.3, size=rows.n_params)


@pytest.mark.parametrize("use_data", [False, True], ids=["numpy", "pm_data"])
@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_is_accepted_and_one_row_moves_only_its_own_loglik(name, use_data):
    """Accepted, row-wise, and (pm.Data) index subsets; under both relations for the pm.Data builds.

    The pm.Data case builds the unperturbed model under add/remove (the walk's stricter rules:
    no row count read) and the perturbed one under substitute: one pair of builds checks both
    relations' acceptance (a separate add/remove test built the same models again: 8 builds,
    about a quarter of the module's CPU time). The log-likelihood does not depend on the relation.
    """
    data = _data()
    relation = "add_remove" if use_data else "substitute"
    before = RowLikelihood(ZOO[name](data, use_data), neighbouring=relation)
    after = RowLikelihood(ZOO[name](_perturbed(data), use_data))
    theta = _theta(before)
    old, new = before.loglik_rows(theta), after.loglik_rows(theta)
    assert np.all(np.isfinite(old)) and np.all(np.isfinite(new))
    others = np.arange(N) != K
    np.testing.assert_allclose(new[others], old[others], rtol=1e-12, atol=1e-12)
    assert abs(new[K] - old[K]) > 1e-6
    if use_data:  # the O(B) subset path (of the add/remove build) agrees with the full vector
        assert before.subset_mode == "index"
        rows = np.array([K, 0, N - 1])
        np.testing.assert_allclose(before.loglik_rows(theta, rows), old[rows], rtol=1e-10)


# -- (a) parameter checks apply row by row ------------------------------------------------------


def _identity_poisson(x, y):
    with pm.Model() as model:
        beta = pm.HalfNormal("beta", 1.0)
        pm.Poisson("y", mu=x * beta, observed=y)
    return model


def test_one_invalid_parameter_row_makes_only_that_row_minus_inf():
    rng = np.random.default_rng(1)
    x = rng.uniform(0.5, 2.0, size=N)
    y = rng.poisson(x).astype("int64")
    x_bad = x.copy()
    x_bad[K] = -1.0  # mu = x * beta < 0 on row K only
    rows = RowLikelihood(_identity_poisson(x_bad, y))
    theta = np.array([0.1])
    values = rows.loglik_rows(theta)
    assert values[K] == -np.inf
    others = np.arange(N) != K
    assert np.all(np.isfinite(values[others]))  # before: every row was -inf
    without = RowLikelihood(_identity_poisson(x[others], y[others])).loglik_rows(theta)
    np.testing.assert_allclose(values[others], without, rtol=1e-12)


def test_invalid_row_is_clipped_by_the_mechanism_like_any_row():
    from pymc_dp.mechanisms import clip_values

    clipped = clip_values(np.array([0.5, -np.inf, np.nan]), 1.0)
    assert np.all(np.isfinite(clipped)) and np.all(np.abs(clipped) <= 1.0)


# -- (b) aggregating rows in the graph is refused -----------------------------------------------


def _refusing(build):
    data = _data()
    with pm.Model(coords=_coords()) as model:
        build(data)
    return model


def _standardised(data):
    x = pm.Data("x", data["x"], dims="obs")
    b = pm.Normal("b", 0, 1)
    xs = (x - x.mean()) / x.std()
    pm.Normal("y", b * xs, 1.0, observed=data["y_real"], dims="obs")


def _mean_in_likelihood(data):
    x = pt.as_tensor_variable(data["x"])
    m = pm.Normal("m", 0, 1)
    pm.Normal("y", m + x.mean(), 1.0, observed=data["y_real"], dims="obs")


def _normalised_by_total(data):
    x = pm.Data("x", np.abs(data["x"]), dims="obs")
    lam = pm.Gamma("lam", 2, 1)
    pm.Poisson("y", lam * N * x / x.sum(), observed=data["y_count"], dims="obs")


def _cumsum(data):
    x = pm.Data("x", data["x"], dims="obs")
    b = pm.Normal("b", 0, 1)
    pm.Normal("y", b * pt.cumsum(x), 1.0, observed=data["y_real"], dims="obs")


def _sorted(data):
    b = pm.Normal("b", 0, 1)
    pm.Normal("y", b * pt.sort(pt.as_tensor_variable(data["x"])), 1.0, observed=data["y_real"], dims="obs")


def _shifted_rows(data):
    x = pm.Data("x", data["x"], dims="obs")
    b = pm.Normal("b", 0, 1)
    pm.Normal("y", b * pt.roll(x, 1), 1.0, observed=data["y_real"], dims="obs")


def _outer(data):
    x = pm.Data("x", data["x"], dims="obs")
    b = pm.Normal("b", 0, 1)
    pm.Normal("y", b * (x[:, None] * x[None, :]).sum(axis=1), 1.0, observed=data["y_real"], dims="obs")


REFUSED = {
    f.__name__: f
    for f in (_standardised, _mean_in_likelihood, _normalised_by_total, _cumsum, _sorted, _shifted_rows, _outer)
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_likelihood_mixing_rows_is_refused_naming_variable_and_operation(name):
    model = _refusing(REFUSED[name])
    with pytest.raises(ModelStructureError, match=r"observed variable `y`.*operation `") as err:
        RowLikelihood(model)
    assert "0." not in str(err.value).split("operation")[0]  # no data value in the message


def test_refused_model_changes_no_state():
    model = _refusing(_standardised)
    before = model["x"].get_value().copy()
    with pytest.raises(ModelStructureError):
        RowLikelihood(model)
    np.testing.assert_array_equal(model["x"].get_value(), before)


# -- (c) the perturbation probe -----------------------------------------------------------------


def test_perturbation_probe_catches_a_graph_that_mixes_rows():
    x = pytensor.shared(np.random.default_rng(2).normal(size=N), name="x")
    b = pt.scalar("b")
    original = x.get_value().copy()
    with pytest.raises(ModelStructureError, match="Changing one row"):
        _perturbation_probe([b], b * (x - x.mean()), [np.array(1.0)], [x], N)
    np.testing.assert_array_equal(x.get_value(), original)  # the user's data are not changed
    _perturbation_probe([b], b * x**2, [np.array(1.0)], [x], N)  # row-wise: passes


# -- (d) data read outside the likelihood -------------------------------------------------------


def _prior_reads_data():
    data = _data()
    y = data["y_real"]
    with pm.Model() as model:
        m = pm.Normal("m", mu=pt.as_tensor_variable(y).mean(), sigma=1.0)
        pm.Normal("y", m, 1.0, observed=y)
    return model


def _potential_reads_data():
    data = _data()
    with pm.Model() as model:
        x = pm.Data("x", data["x"])
        m = pm.Normal("m", 0, 1)
        pm.Normal("y", m, 1.0, observed=data["y_real"])
        pm.Potential("pen", -((x - m) ** 2).sum())
    return model


@pytest.mark.parametrize("factory", [_prior_reads_data, _potential_reads_data])
def test_check_prior_reads_no_data(factory):
    with pytest.raises(ModelStructureError, match="reads"):
        check_prior_reads_no_data(factory())


def test_one_posterior_sample_refuses_a_prior_read_from_the_data():
    model = _prior_reads_data()
    budget = pmdp.PrivacyBudget(1.0, 1e-6, n_rows=N)
    with pytest.raises(ModelStructureError, match="free variable `m`"):
        pmdp.one_posterior_sample(model, epsilon=0.5, loglik_bounds=(-5.0, 0.0), tune=10, budget=budget)
    assert budget.events == ()  # refused before anything is charged


def test_one_posterior_sample_refuses_a_likelihood_mixing_rows():
    with pytest.raises(ModelStructureError, match="operation"):
        pmdp.one_posterior_sample(_refusing(_standardised), epsilon=0.5, loglik_bounds=(-5.0, 0.0), tune=10)


@pytest.mark.parametrize("factory", [_prior_reads_data, _potential_reads_data])
def test_steps_and_dpadvi_refuse_data_outside_the_likelihood(factory):
    model = factory()
    with model, pytest.raises(ModelStructureError):
        pmdp.DPPenaltyMH(llr_clip=5.0, noise_multiplier=1.0)
    with pytest.raises(ModelStructureError):
        dpadvi = pmdp.DPADVI(noise_multiplier=1.0, delta=1e-5, sampling_rate=0.5, grad_clip=1.0)
        dpadvi.fit(1, model=model, progressbar=False)


def test_dpadvi_refuses_a_likelihood_mixing_rows():
    with pytest.raises(ModelStructureError, match="operation"):
        pmdp.DPADVI(noise_multiplier=1.0, delta=1e-5, sampling_rate=0.5, grad_clip=1.0).fit(
            1, model=_refusing(_normalised_by_total), progressbar=False
        )


def _indexing_a_row_array(data):
    x = pm.Data("x", data["X"], dims=("obs", "col"))
    g = pm.Data("g", data["g"], dims="obs")
    b = pm.Normal("b", 0, 1)
    pm.Normal("y", b * x[:, g][:, 0], 1.0, observed=data["y_real"], dims="obs")


def test_indexing_a_row_indexed_array_is_refused():
    with pytest.raises(ModelStructureError, match="operation `"):
        RowLikelihood(_refusing(_indexing_a_row_array))


def test_model_on_released_statistics_refuses_a_potential_reading_a_row_array():
    from pymc_dp.exponential_family import release_statistics

    y = (np.random.default_rng(4).random(N) < 0.3).astype("int64")
    release = release_statistics("bernoulli", y, epsilon=1.0, random_seed=0)
    with pm.Model() as model:
        p = pm.Beta("p", 1, 1)
        release.likelihood("lik", p=p)
        pm.Potential("raw", pt.sum(pt.as_tensor_variable(y) * pt.log(p)))  # reads the raw rows
    with pytest.raises(ModelStructureError, match="Potential `raw`"):
        release.sample(model=model, draws=5, tune=5, chains=1, progressbar=False)


def test_subset_that_differs_from_the_slice_is_a_hard_error():
    data = _data()
    rows = RowLikelihood(logistic(data, use_data=True))
    full = rows._f_lik
    rows._f_lik = lambda theta: full(theta) + 1.0  # the subset path now disagrees with the full vector
    with pytest.raises(ModelStructureError, match="subset of rows differs"):
        _ = rows.subset_mode  # before: fell back to "slice" silently


# -- (e) every entry point refuses data read outside the likelihood -----------------------------


def _potential_reads_a_row_array():
    data = _data()
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.Normal("y", m, 1.0, observed=data["y_real"])
        pm.Potential("pen", -((pt.as_tensor_variable(data["x"]) - m) ** 2).sum())
    return model


def _potential_reads_a_transposed_row_array():
    data = _data()
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.Normal("y", m, 1.0, observed=data["y_real"])
        pm.Potential("pen", -((pt.as_tensor_variable(data["X"].T) - m) ** 2).sum())  # (2, N): rows on axis 1
    return model


def _dpadvi_fit(model, budget):
    pmdp.DPADVI(noise_multiplier=1.0, sampling_rate=0.5, grad_clip=1.0, budget=budget).fit(
        1, model=model, progressbar=False
    )


ENTRY_POINTS = {
    "DPPenaltyMH": lambda model, budget: pmdp.DPPenaltyMH(llr_clip=5.0, noise_multiplier=1.0, model=model),
    "DPHMC": lambda model, budget: pmdp.DPHMC(
        llr_clip=5.0, grad_clip=5.0, n_leapfrog=2, llr_noise_multiplier=1.0, grad_noise_multiplier=1.0, model=model
    ),
    "DPBarkerMH": lambda model, budget: pmdp.DPBarkerMH(batch_size=20, tempered_size=5.0, model=model),
    "DPADVI": _dpadvi_fit,
    "one_posterior_sample": lambda model, budget: pmdp.one_posterior_sample(
        model, epsilon=0.5, loglik_bounds=(-5.0, 0.0), tune=10, budget=budget
    ),
}


@pytest.mark.parametrize(
    "factory", [_potential_reads_data, _potential_reads_a_row_array, _potential_reads_a_transposed_row_array]
)
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_every_entry_point_refuses_a_potential_reading_data(entry, factory):
    # Before: only DPPenaltyMH was tested, and a (2, N) array escaped the leading-axis test.
    budget = pmdp.PrivacyBudget(2.0, 1e-5, n_rows=N)
    with pytest.raises(ModelStructureError, match="Potential `pen` reads data"):
        ENTRY_POINTS[entry](factory(), budget)
    assert budget.events == ()  # refused before anything is charged


# -- (f) row data on any axis, whatever the dim names --------------------------------------------


def _transposed_standardised(data):
    Xt = pm.Data("Xt", data["X"].T, dims=("col", "obs"))  # rows on axis 1
    b = pm.Normal("b", 0, 1, dims="col")
    xs = (Xt - Xt.mean(axis=1, keepdims=True)) / Xt.std(axis=1, keepdims=True)
    pm.Normal("y", b @ xs, 1.0, observed=data["y_real"], dims="obs")


def _transposed_numpy_standardised(data):
    Xt = pt.as_tensor_variable(data["X"].T)
    b = pm.Normal("b", 0, 1, dims="col")
    xs = (Xt - Xt.mean(axis=1, keepdims=True)) / Xt.std(axis=1, keepdims=True)
    pm.Normal("y", b @ xs, 1.0, observed=data["y_real"], dims="obs")


@pytest.mark.parametrize("build", [_transposed_standardised, _transposed_numpy_standardised])
def test_a_transposed_row_array_is_refused_naming_it(build):
    with pytest.raises(ModelStructureError, match="axis of the row length that is not its first") as err:
        RowLikelihood(_refusing(build))
    assert "`y`" in str(err.value) and str(N) not in str(err.value)  # names the variable, not the shape
    if build is _transposed_standardised:
        assert "`Xt`" in str(err.value)


def _data_with_another_dim(row_wise):
    data = _data()
    coords = {"obs": range(N), "unit": range(N)}
    with pm.Model(coords=coords) as model:
        z = pm.Data("z", data["x"], dims="unit")  # length N, first dim not named like the rows
        yd = pm.Data("y_obs", data["y_real"], dims="obs")
        b = pm.Normal("b", 0, 1)
        pm.Normal("y", b * (z if row_wise else z - z.mean()), 1.0, observed=yd, dims="obs")
    return model


def test_pm_data_with_another_dim_name_is_row_data():
    # Before: a pm.Data whose first dim was not the row dim escaped the walk, the probe and indexing.
    with pytest.raises(ModelStructureError, match=r"observed variable `y`.*operation `"):
        RowLikelihood(_data_with_another_dim(row_wise=False))
    rows = RowLikelihood(_data_with_another_dim(row_wise=True))
    assert rows.subset_mode == "index"
    theta = np.array([0.7])
    subset = np.array([K, 0, N - 1])
    np.testing.assert_allclose(rows.loglik_rows(theta, subset), rows.loglik_rows(theta)[subset], rtol=1e-12)


def test_prior_reading_a_transposed_row_array_is_refused():
    data = _data()
    with pm.Model() as model:
        m = pm.Normal("m", mu=pt.as_tensor_variable(data["X"].T).mean(), sigma=1.0)
        pm.Normal("y", m, 1.0, observed=data["y_real"])
    with pytest.raises(ModelStructureError, match="free variable `m`"):
        check_prior_reads_no_data(model)


# -- (g) the subset path: one documented fallback, everything else a hard error ---------------------


def _fixed_row_count(data):
    x = pm.Data("x", data["x"], dims="obs")
    y = pm.Data("y_obs", data["y_real"], dims="obs")
    b = pm.Normal("b", 0, 1)
    pm.Normal("y", b * pt.specify_shape(x, (N,)), 1.0, observed=y, dims="obs")


def test_a_graph_that_fixes_the_row_count_computes_subsets_on_all_rows():
    rows = RowLikelihood(_refusing(_fixed_row_count))
    assert rows.subset_mode == "slice"  # documented fallback: a strict subset cannot be evaluated
    theta, subset = np.array([0.4]), np.array([K, 1])
    np.testing.assert_allclose(rows.loglik_rows(theta, subset), rows.loglik_rows(theta)[subset], rtol=1e-12)


def test_a_subset_path_that_cannot_be_built_is_a_hard_error(monkeypatch):
    rows = RowLikelihood(logistic(_data(), use_data=True))
    secret = repr(float(_data()["x"][K]))

    def broken(inputs, outputs):
        raise TypeError(f"cannot index row {K} = {secret}")

    monkeypatch.setattr(rows, "_compile", broken)
    with pytest.raises(ModelStructureError, match=r"cannot be evaluated on a subset of rows \(TypeError") as err:
        _ = rows.subset_mode  # before: fell back to "slice" silently
    assert secret not in str(err.value) and err.value.__cause__ is None


def _reads_the_row_count(data):
    x = pm.Data("x", data["x"], dims="obs")
    y = pm.Data("y_obs", data["y_real"], dims="obs")
    b = pm.Normal("b", 0, 1)
    pm.Normal("y", b * x / x.shape[0], 1.0, observed=y, dims="obs")


def test_a_subset_that_reads_the_row_count_is_refused_not_silently_wrong():
    # At the start point b = 0 the subset and the full vector agreed, and index mode computed
    # every batch with B in place of N. The probe now also runs at a shifted point.
    rows = RowLikelihood(_refusing(_reads_the_row_count))
    with pytest.raises(ModelStructureError, match="number of rows from a shape"):
        _ = rows.subset_mode


def test_subsampling_mechanisms_check_the_subset_path_before_anything_is_charged():
    model = _refusing(_reads_the_row_count)
    with model, pytest.raises(ModelStructureError, match="subset of rows differs"):
        pmdp.DPBarkerMH(batch_size=20, tempered_size=5.0)
    budget = pmdp.PrivacyBudget(2.0, 1e-5, n_rows=N)
    with pytest.raises(ModelStructureError, match="subset of rows differs"):
        _dpadvi_fit(model, budget)
    assert budget.events == ()


# -- (h) the perturbation probe in every entry point -------------------------------------------


def _walk_disabled(monkeypatch):
    """Switch off the allow-list walk, to see the probe (the last line of defence) on its own."""
    import pymc_dp.row_graph as data_layer  # where row_loglik runs the walk (split out of data.py)

    monkeypatch.setattr(data_layer, "_check_rowwise", lambda *args, **kwargs: None)
    monkeypatch.setattr(data_layer, "_check_rowwise_params", lambda *args, **kwargs: None)


def test_one_posterior_sample_runs_the_perturbation_probe(monkeypatch):
    _walk_disabled(monkeypatch)
    budget = pmdp.PrivacyBudget(2.0, 1e-5, n_rows=N)
    with pytest.raises(ModelStructureError, match="Changing one row"):
        pmdp.one_posterior_sample(
            _refusing(_standardised), epsilon=0.5, loglik_bounds=(-5.0, 0.0), tune=10, budget=budget
        )
    assert budget.events == ()


def test_the_probe_runs_in_row_loglik_and_at_a_point_other_than_the_start(monkeypatch):
    from pymc_dp.data import row_loglik

    _walk_disabled(monkeypatch)
    model = _refusing(_standardised)  # b * (x - mean) / std: every row is 0 at the start b = 0
    with pytest.raises(ModelStructureError, match="Changing one row"):
        row_loglik(model)
    with pytest.raises(ModelStructureError, match="Changing one row"):
        RowLikelihood(model)


# -- (i) the row count is private under add/remove -----------------------------------------------


def _count_from_shape(data):
    x = pt.as_tensor_variable(data["x"])
    b = pm.Normal("b", 0, 1)
    pm.Normal("y", b * x / x.shape[0], 1.0, observed=data["y_real"], dims="obs")


def _count_from_ones(data):
    x = pm.Data("x", data["x"], dims="obs")
    b = pm.Normal("b", 0, 1)
    pm.Normal("y", b * x + pt.ones(x.shape[0]).sum(), 1.0, observed=data["y_real"], dims="obs")


def _count_from_dim_length(data):
    x = pm.Data("x", data["x"], dims="obs")
    b = pm.Normal("b", 0, 1)
    pm.Normal("y", b * x / pm.modelcontext(None).dim_lengths["obs"], 1.0, observed=data["y_real"], dims="obs")


@pytest.mark.parametrize("build", [_count_from_shape, _count_from_ones, _count_from_dim_length])
def test_a_likelihood_reading_the_row_count_is_refused_under_add_remove(build):
    model = _refusing(build)
    with pytest.raises(ModelStructureError, match=r"observed variable `y`.*operation `") as err:
        RowLikelihood(model, neighbouring="add_remove")
    assert str(N) not in str(err.value)
    with model, pytest.raises(ModelStructureError):
        pmdp.DPPenaltyMH(llr_clip=5.0, noise_multiplier=1.0, neighbouring="add_remove")


def test_the_row_count_is_public_under_substitute():
    rows = RowLikelihood(_refusing(_count_from_shape))  # numpy rows: slice mode, N a public constant
    # Either slice mode (PyMC 5: the walk sees x.shape[0]) or index mode with N folded into a constant
    # (PyMC 6 knows the length statically): a one-row subset must still divide by N, never by 1.
    theta = np.array([0.3])
    np.testing.assert_allclose(rows.loglik_rows(theta, np.array([K])), rows.loglik_rows(theta)[[K]])


def _observed_pm_data_without_dims(data):
    x = pm.Data("x", data["x"])
    y = pm.Data("y_obs", data["y_real"])
    b = pm.Normal("b", 0, 1)
    pm.Normal("y", b * x + pt.zeros_like(x), 1.0, observed=y)  # PyMC sizes `y` from y_obs.shape


# The zoo under add/remove: test_zoo_is_accepted_and_one_row_moves_only_its_own_loglik[*-pm_data].


def test_shapes_that_only_size_a_tensor_are_accepted_under_add_remove():
    rows = RowLikelihood(_refusing(_observed_pm_data_without_dims), neighbouring="add_remove")
    assert rows.subset_mode == "index"


# -- (j) messages name the operation and show N only when it is public ---------------------------


def _matrix_observed(param):
    data = _data()
    with pm.Model() as model:
        x = pm.Data("x", data["x"])
        b = pm.Normal("b", 0, 1)
        mu = b * (x if param == "vector" else x[None, :])
        pm.Normal("y", mu, 1.0, observed=np.tile(data["y_real"][:, None], (1, N)))  # (N, N)
    return model


@pytest.mark.parametrize("param", ["vector", "row_last"])
def test_parameter_messages_name_the_operation(param):
    # A (N,) or (1, N) parameter of an (N, N) observed variable: broadcasting puts its rows on axis 1.
    with pytest.raises(
        ModelStructureError, match=r"observed variable `y` does not keep the row axis first: operation `"
    ):
        RowLikelihood(_matrix_observed(param))


def test_final_check_message_names_the_operation():
    from pymc_dp.data import _check_rowwise

    x = pytensor.shared(np.zeros(N), name="x")
    with pytest.raises(ModelStructureError, match=r"`y`.*operation `.*row axis is at position 1"):
        _check_rowwise(x[None, :] * 2.0, [x], "y")


def test_the_row_rules_name_unrelated_op_types():
    # The walk looks an op's class up along its MRO in a table of per-op rules (model_structure._row_rules).
    # With no type of the table a subclass of another, an op matches one rule at most, whatever the order,
    # as in the if/elif chain the table replaced; an op matching none is refused.
    from pymc_dp.model_structure import _row_rules, _rowwise_axes

    types = list(_row_rules())
    assert [(a.__name__, b.__name__) for a in types for b in types if a is not b and issubclass(a, b)] == []
    x = pytensor.shared(np.zeros((N, 2)), name="x")
    node = pt.cumsum(x, axis=0).owner  # a running sum over the rows: not on the list
    with pytest.raises(ModelStructureError, match="is not on the list of row-wise operations"):
        _rowwise_axes(node, [0], "y")


def _two_lengths():
    data = _data()
    with pm.Model() as model:
        m = pm.Normal("m", 0, 1)
        pm.Normal("y", m, 1.0, observed=data["y_real"])
        pm.Normal("z", m, 1.0, observed=data["y_real"][:-1])
    return model


def test_row_lengths_are_shown_only_under_substitute():
    with pytest.raises(ModelStructureError, match=r"`y`.*`z`") as err:
        RowLikelihood(_two_lengths(), neighbouring="add_remove")
    assert str(N) not in str(err.value) and str(N - 1) not in str(err.value)
    with _two_lengths(), pytest.raises(ModelStructureError) as err:
        pmdp.DPPenaltyMH(llr_clip=5.0, noise_multiplier=1.0, neighbouring="add_remove")
    assert str(N - 1) not in str(err.value)
    with pytest.raises(ModelStructureError, match=f"`y`: {N}, `z`: {N - 1}"):
        RowLikelihood(_two_lengths())  # substitute: N is public
