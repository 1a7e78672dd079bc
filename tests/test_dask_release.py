"""Released statistics on rows given as Dask arrays (issue 37, first stage): no cluster, Dask's own schedulers.

What is checked: the partitioned release equals the in-memory one exactly (reproducible noise, same
seed; linear, logistic with two covariate anchors and Poisson regression, uneven and misaligned
partitions; the clipping check's count too) with the same accountant record; the one-call route
(``pmdp.sample(epsilon=..., rows={"X": ..., "y": ...})`` on a model built on row placeholders)
releases what the in-memory one-call route releases, with the same charges, and refuses, naming
``rows``, whatever would read the rows on the client or does not match the model; the budget is
charged before any partition is read; unknown chunk sizes and the settings this route cannot run
yet are refused before anything is read or charged, naming the parameter; a partition's failure
carries no data text; the in-memory mechanism refuses Dask arrays instead of reading them on the
client. The tests on a real ``LocalCluster`` are in ``tests/test_dask_backend.py`` (its cluster is started there once).

Cost: about 7.5 s of CPU for the file's process on this machine (imports included; a dozen releases of a few
hundred rows, synchronous scheduler), plus 2 s for the one-call tests (two one-call runs stopped after their
release, eight refusals; the linear case is marked slow).
"""

import pickle

import numpy as np
import pytest

import pymc_dp as pmdp

da = pytest.importorskip("dask.array")  # the `dask` extra (in `test`); the rest of the suite runs without
import dask  # noqa: E402

from pymc_dp.backends.dask_rows import PartitionError, partitioned_n_rows, private_statistics  # noqa: E402
from pymc_dp.mechanisms import PrivateSufficientStatistics  # noqa: E402

N_ROWS = 500
X_CHUNKS = (37, 200, 1, 150, 112)  # uneven, and misaligned with y's: Dask aligns them into more blocks
Y_CHUNKS = (250, 13, 237)
FAMILIES = {
    "linear": dict(family="linear_regression", n_features=3, x_bounds=(-2.0, 2.0), y_bounds=(-4.0, 4.0)),
    "logistic": dict(family="logistic_regression", n_features=3, x_bounds=(-2.0, 2.0), covariate_anchors=2),
    "poisson": dict(family="poisson_regression", n_features=3, x_bounds=(-1.0, 1.0), y_max=7, covariate_anchors=1),
}


@pytest.fixture(autouse=True)
def synchronous():
    with dask.config.set(scheduler="synchronous"):  # no cluster: the partitions run one after the other here
        yield


def _rows(case: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 0.8, size=(N_ROWS, 3))
    x[:5] *= 10.0  # rows outside the bounds: clamped on the workers as in memory
    eta = x @ np.array([0.5, -0.7, 0.3])
    if case == "linear":
        y = eta + rng.normal(0.0, 0.5, size=N_ROWS)
    elif case == "logistic":
        y = (rng.random(N_ROWS) < 1.0 / (1.0 + np.exp(-eta))).astype(float)
    else:
        y = rng.poisson(np.exp(np.clip(eta, -3, 2))).astype(float)
    return x, y


def _dask(x: np.ndarray, y: np.ndarray):
    return da.from_array(x, chunks=(X_CHUNKS, 3)), da.from_array(y, chunks=(Y_CHUNKS,))


def _release(data, settings, **kwargs):
    settings = dict(settings)
    family = settings.pop("family")
    return pmdp.release_statistics(
        family, data, epsilon=1.0, random_seed=11, reproducible_noise=True, **settings, **kwargs
    )


@pytest.mark.parametrize("case", sorted(FAMILIES))
def test_a_partitioned_release_equals_the_in_memory_release(case):
    x, y = _rows(case)
    local = _release((x, y), FAMILIES[case], clipping_check=True)
    remote = _release(_dask(x, y), FAMILIES[case], clipping_check=True)
    # the clipping check's weighted count, summed per partition: the same record with the same noise
    assert remote.clipping_check is not None and remote.clipping_check == local.clipping_check
    # Discrete noise on the exact integer sums: the same integers, the same noise, the same release.
    np.testing.assert_array_equal(remote.noisy_statistics, local.noisy_statistics)
    np.testing.assert_allclose(remote.statistics, local.statistics, rtol=1e-10, atol=1e-10)
    assert len(remote.covariate_anchors) == len(local.covariate_anchors) == FAMILIES[case].get("covariate_anchors", 0)
    for a, b in zip(remote.covariate_anchors, local.covariate_anchors, strict=True):
        np.testing.assert_array_equal(a.anchor, b.anchor)
        np.testing.assert_array_equal(a.noisy_statistics, b.noisy_statistics)
    assert remote.accountant_record() == local.accountant_record()
    assert remote.n_rows == N_ROWS and remote.events == local.events


def test_gaussian_and_continuous_noise_match_to_the_float_sums_order():
    x, y = _rows("logistic")
    settings = {**FAMILIES["logistic"], "covariate_anchors": 0}
    for kwargs in (dict(mechanism="gaussian", delta=1e-6), dict(noise="continuous")):
        local = _release((x, y), settings, **kwargs)
        remote = _release(_dask(x, y), settings, **kwargs)
        # continuous noise adds float sums taken in another order: equal to rounding
        np.testing.assert_allclose(remote.noisy_statistics, local.noisy_statistics, rtol=1e-10, atol=1e-10)
        assert remote.accountant_record().keys() == local.accountant_record().keys()
        assert remote.events == local.events


def test_the_budget_is_charged_before_any_partition_is_read():
    x, y = _rows("logistic")
    budget = pmdp.PrivacyBudget(epsilon=3.0, delta=1e-6, n_rows=N_ROWS)
    spent_when_read = []

    def watched(block):
        spent_when_read.append(budget.spent().epsilon)
        return block

    xd, yd = _dask(x, y)
    _release((xd.map_blocks(watched, meta=np.empty((0, 0))), yd), FAMILIES["logistic"], budget=budget)
    # one read per block and pass (the statistics, then each anchor): every one after the whole charge
    assert len(spent_when_read) >= 3 * len(X_CHUNKS)
    assert spent_when_read == pytest.approx([1.0] * len(spent_when_read), rel=1e-12)
    assert budget.spent().epsilon == pytest.approx(1.0, rel=1e-12)


def test_refusals_name_the_parameter_read_nothing_and_charge_nothing():
    x, y = _rows("logistic")
    budget = pmdp.PrivacyBudget(epsilon=3.0, delta=1e-6, n_rows=N_ROWS)
    reads = []

    def watched(block):
        reads.append(1)
        return block

    xd, yd = _dask(x, y)
    xd = xd.map_blocks(watched, meta=np.empty((0, 0)))  # meta given: Dask does not call it to infer one
    unknown = yd[yd > -1.0]  # a filtered array: its chunk sizes are unknown until computed
    settings = FAMILIES["logistic"]
    cases = [
        (dict(data=(xd, unknown)), ValueError, r"`data` given as Dask arrays must have known chunk sizes.*lengths="),
        (dict(data=(xd, y)), TypeError, "`data` must be all Dask arrays or all in-memory arrays"),
        (dict(data=(xd, yd[:-1])), ValueError, r"`data` must give every array the same number of rows"),
        (dict(data=(xd, yd), out_of_bounds="raise"), ValueError, "`out_of_bounds` must be 'clamp' for rows given as"),
        (dict(data=(xd[:, :2], yd)), ValueError, "X"),  # the family's own shape check, on one row of zeros
        # a non-numeric dtype (metadata) is refused here, not by a worker failing on a value after the charge
        (dict(data=(xd, yd.astype(object))), TypeError, "must hold booleans, integers or floats.*Found dtype object"),
    ]
    for kwargs, error, message in cases:
        data = kwargs.pop("data")
        with pytest.raises(error, match=message):
            _release(data, settings, budget=budget, **kwargs)
    assert reads == [] and budget.spent().epsilon == 0.0 and list(budget.events) == []


def test_n_is_read_from_the_chunk_sizes_only():
    x, y = _rows("logistic")
    xd, yd = _dask(x, y)
    assert partitioned_n_rows((xd, yd)) == N_ROWS
    private = private_statistics(
        pmdp.exponential_family.get_family("logistic_regression", n_features=3, x_bounds=(-2, 2)), (xd, yd)
    )
    assert private.n_rows == N_ROWS and "_exact_statistics" not in vars(private)  # built without reading a partition


def test_a_failing_partition_carries_no_data_text(monkeypatch):
    from pymc_dp.backends import dask_rows

    x, y = _rows("logistic")

    def leaky(family, data, out_of_bounds, exponent):
        raise ValueError(f"bad row {data[0][0]!r}")  # what a numerical library's message may quote

    monkeypatch.setattr(dask_rows, "row_sums", leaky)
    with pytest.raises(PartitionError, match=r"^ValueError in a partition's sums \(message withheld\)$") as caught:
        _release(_dask(x, y), FAMILIES["logistic"])
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert f"{x[0, 0]:.4f}"[:6] not in str(caught.value)


def test_the_deferred_mechanism_pickles_its_sums_not_its_reader():
    x, y = _rows("linear")
    family = pmdp.exponential_family.get_family("linear_regression", n_features=3, x_bounds=(-2, 2), y_bounds=(-4, 4))
    remote = pickle.loads(pickle.dumps(private_statistics(family, _dask(x, y), grid_scale=50.0)))
    local = PrivateSufficientStatistics(family, (x, y), grid_scale=50.0)
    assert remote._read_sums is None and remote._grid_statistics == local._grid_statistics


def test_the_in_memory_mechanism_refuses_dask_arrays_instead_of_reading_them_on_the_client():
    x, y = _rows("logistic")
    family = pmdp.exponential_family.get_family("logistic_regression", n_features=3, x_bounds=(-2, 2))
    with pytest.raises(TypeError, match=r"`data` given as Dask arrays must be released by pymc_dp\.release_statistics"):
        PrivateSufficientStatistics(family, _dask(x, y))


def test_the_sums_do_not_depend_on_the_block_size(monkeypatch):
    """The mechanism sums its rows in blocks (BLOCK_BYTES): the grid integers are the same whatever the blocks."""
    from pymc_dp.mechanisms import sufficient_statistics

    x, y = _rows("logistic")
    family = pmdp.exponential_family.get_family("logistic_regression", n_features=3, x_bounds=(-2, 2))
    whole = PrivateSufficientStatistics(family, (x, y), grid_scale=5.0)
    monkeypatch.setattr(sufficient_statistics, "BLOCK_BYTES", 8 * family.dim * 37)  # blocks of 37 rows
    sizes = []
    row_statistics = type(family).row_statistics

    def counted(self, rows):
        sizes.append(len(rows))
        return row_statistics(self, rows)

    monkeypatch.setattr(type(family), "row_statistics", counted)
    blocks = PrivateSufficientStatistics(family, (x, y), grid_scale=5.0)
    assert sizes == [37] * (N_ROWS // 37) + [N_ROWS % 37]  # every row once, in blocks
    assert blocks._grid_statistics == whole._grid_statistics
    np.testing.assert_allclose(blocks._exact_statistics, whole._exact_statistics, rtol=1e-12, atol=1e-10)


# -- the one-call route on rows that stay in partitions (issue 37, deliver 1 and 3) ----------------------------------


class _Released(Exception):
    """Stops a one-call run after its release: the route's NUTS part reads only the release (tested elsewhere)."""


@pytest.fixture
def seeded_release(monkeypatch):
    """The one-call route's release with reproducible noise (seed 5), recorded; the run stops after it."""
    import pymc_dp.exponential_family as exponential_family

    released = []
    original = exponential_family.release_statistics

    def seeded(*args, **kwargs):
        released.append(original(*args, random_seed=5, reproducible_noise=True, **kwargs))
        raise _Released

    monkeypatch.setattr(exponential_family, "release_statistics", seeded)
    return released


#: The one-call route's public bounds. Logistic only in the default run (its release has two covariate anchors
#: and the clipping check, the most the route releases); the linear case costs another 2.5 s for the same code path.
ONE_CALL = {
    "linear": dict(x_bounds=(-2.0, 2.0), y_bounds=(-4.0, 4.0)),
    "logistic": dict(x_bounds=(-2.0, 2.0)),
}


def _regression(case: str, x, y):
    import pymc as pm

    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 2.0, shape=3)
        eta = intercept + x @ beta
        if case == "linear":
            pm.Normal("y", eta, pm.HalfNormal("sigma", 1.0), observed=y)
        else:
            pm.Bernoulli("y", logit_p=eta, observed=y)
    return model


def _one_call(model, budget, **kwargs):
    with model, pytest.raises(_Released):
        pmdp.sample(epsilon=2.0, delta=1e-6, budget=budget, chains=2, random_seed=1, **kwargs)


@pytest.mark.parametrize("case", [pytest.param("linear", marks=pytest.mark.slow), "logistic"])
def test_the_one_call_route_on_dask_rows_releases_what_the_in_memory_route_releases(case, seeded_release):
    from pymc_dp.backends.dask_rows import row_placeholder

    x, y = _rows(case)
    y = y.astype("int64") if case == "logistic" else y
    budgets = [pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=N_ROWS) for _ in range(2)]
    _one_call(_regression(case, x, y), budgets[0], **ONE_CALL[case])
    xd, yd = _dask(x, y)
    placeholders = _regression(case, row_placeholder(xd), row_placeholder(yd))  # the model holds no row
    _one_call(placeholders, budgets[1], rows={"X": xd, "y": yd}, **ONE_CALL[case])
    local, remote = seeded_release
    np.testing.assert_array_equal(remote.noisy_statistics, local.noisy_statistics)
    np.testing.assert_allclose(remote.statistics, local.statistics, rtol=1e-10, atol=1e-10)
    for a, b in zip(remote.covariate_anchors, local.covariate_anchors, strict=True):
        np.testing.assert_array_equal(a.noisy_statistics, b.noisy_statistics)
    # the clipping check (the one-call route sets it), counted per partition: the same record, the same count
    assert remote.clipping_check is not None and remote.clipping_check == local.clipping_check
    assert remote.accountant_record() == local.accountant_record()
    assert budgets[1].spent() == budgets[0].spent() and budgets[1].events == budgets[0].events


def test_a_row_placeholder_holds_one_element_and_a_model_on_placeholders_needs_its_rows():
    from pymc_dp.backends.dask_rows import row_placeholder

    x, y = _rows("logistic")
    xd, yd = _dask(x, y)
    placeholder = row_placeholder(xd)
    assert placeholder.type.shape == (N_ROWS, 3) and placeholder.data.strides == (0, 0)  # zeros, one element
    assert placeholder.data.dtype == xd.dtype and not placeholder.data.any()
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=N_ROWS)
    with _regression("logistic", placeholder, row_placeholder(yd.astype("int64"))):
        with pytest.raises(ValueError, match=r"`rows` must give the Dask arrays for a model built on .*Found None"):
            pmdp.sample(epsilon=2.0, delta=1e-6, budget=budget, x_bounds=(-2, 2))
        # With a step the samplers would fit the zeros: refused from the graph before the step is looked at (so a
        # stand-in step will do), and Dask rows are refused with a step.
        step = object()
        with pytest.raises(ValueError, match=r"`model` must hold its own rows with `step`.*row placeholder"):
            pmdp.sample(step=step, epsilon=2.0, delta=1e-6, budget=budget)
        with pytest.raises(ValueError, match=r"`rows` must be None with `step`.*Found rows for \['X', 'y'\]"):
            pmdp.sample(step=step, epsilon=2.0, delta=1e-6, budget=budget, rows={"X": xd, "y": yd})
        # Every reader of a model's rows (the steps, DPADVI, release_once) refuses it from its graph, nothing read.
        with pytest.raises(pmdp.ModelStructureError, match=r"`model` must hold its rows.*row_placeholder"):
            pmdp.DPPenaltyMH(llr_clip=1.0)
        with pytest.raises(pmdp.ModelStructureError, match=r"`model` must hold its rows"):
            pmdp.DPADVI(epsilon=1.0, delta=1e-6, sampling_rate=0.1, grad_clip=1.0).fit(5, progressbar=False)
    assert pmdp.row_placeholder is row_placeholder
    assert budget.spent().epsilon == 0.0 and list(budget.events) == []


def test_one_call_refusals_of_dask_rows_name_the_parameter_read_nothing_and_charge_nothing(seeded_release):
    import pymc as pm

    from pymc_dp.backends.dask_rows import row_placeholder

    x, y = _rows("logistic")
    reads = []

    def watched(block):
        reads.append(1)
        return block

    xd, yd = _dask(x, y.astype("int64"))
    xd = xd.map_blocks(watched, meta=np.empty((0, 0)))  # meta given: Dask does not call it to infer one
    model = _regression("logistic", row_placeholder(xd), row_placeholder(yd))
    with pm.Model() as not_a_regression:  # the planner's route here reads every row in process
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu, pm.HalfNormal("s", 1.0), observed=row_placeholder(xd[:, 0]))
    grouped_x = da.from_array(np.zeros((N_ROWS, 2)), chunks=100)
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=N_ROWS)
    cases = [
        (model, dict(rows=[xd, yd]), ValueError, r"`rows` must be a dict of Dask arrays by role.*Found list"),
        (model, dict(rows={"X": xd, "z": yd}), ValueError, r"`rows` must be a dict of Dask arrays.*\['X', 'z'\]"),
        (model, dict(rows={"X": xd, "y": y}), TypeError, r'`rows\["y"\]` must be a Dask array.*numpy.ndarray'),
        (model, dict(rows={"X": xd, "y": yd[yd > -1]}), ValueError, "must have known chunk sizes"),
        (model, dict(rows={"y": yd}), ValueError, r"`rows` must give the model's X and y.*Found \['y'\]"),
        (model, dict(rows={"X": xd[:-1], "y": yd[:-1]}), ValueError, r"as many rows as the model's placeholders"),
        (model, dict(rows={"X": grouped_x, "y": yd}), ValueError, r'`rows\["X"\]` must be \(N, 3\).*\(500, 2\)'),
        (not_a_regression, dict(rows={"y": xd[:, 0]}), ValueError, r"`rows` \(Dask arrays\) can be used only on the"),
    ]
    for target, kwargs, error, message in cases:
        with target, pytest.raises(error, match=message):
            pmdp.sample(epsilon=2.0, delta=1e-6, budget=budget, chains=2, x_bounds=(-2, 2), **kwargs)
    assert reads == [] and seeded_release == [] and budget.spent().epsilon == 0.0 and list(budget.events) == []
