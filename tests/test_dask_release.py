"""Released statistics on rows given as Dask arrays (issue 37, first stage): no cluster, Dask's own schedulers.

What is checked: the partitioned release equals the in-memory one exactly (reproducible noise, same
seed; linear, logistic with two covariate anchors and Poisson regression, uneven and misaligned
partitions) with the same accountant record; the budget is charged before any partition is read;
unknown chunk sizes and the settings this route cannot run yet are refused before anything is
read or charged, naming the parameter; a partition's failure carries no data text; the in-memory
mechanism refuses Dask arrays instead of reading them on the client. The test on a real
``LocalCluster`` is in ``tests/test_dask_backend.py`` (its cluster is started there once).

Cost: about 3 s of CPU in all (a dozen releases of a few hundred rows, synchronous scheduler).
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
    local = _release((x, y), FAMILIES[case])
    remote = _release(_dask(x, y), FAMILIES[case])
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
        (dict(data=(xd, yd), clipping_check=True), ValueError, "`clipping_check` must be False for rows given as"),
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
