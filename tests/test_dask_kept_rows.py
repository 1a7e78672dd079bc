"""Released statistics on a cluster keep the decoded blocks on the workers between releases (issue 37).

``pmdp.release_statistics`` on Dask arrays computes each partition's sums where Dask computes the
partition; on a ``distributed`` cluster the first release of the arrays (after its charge) keeps
their blocks on the workers (``pymc_dp.backends.dask_rows._kept_arrays``), so that the covariate
anchors, the clipping check and later releases of the same arrays do not decode the files again.
What is checked, on the shared ``LocalCluster(processes=False)`` (threads of this process, so that
a module-level list sees every block the workers make): each block is made once over two releases
of four passes each, after the first release's charge, and both releases equal the in-memory one
exactly with the same accountant record; arrays too large for ``KEEP_SHARE`` of the workers' memory
are decoded at every pass, with the same release; the kept blocks are dropped with the arrays and
after a failing block (whose text no error carries); Dask's local schedulers keep nothing. The four
tests took 6.4 s (a dozen releases of 600 rows, no compilation; measured on 2 shared cores, load
average 9); the file's process 16 CPU s with its imports and the cluster's start.
"""

import gc

import numpy as np
import pytest

import pymc_dp as pmdp

distributed = pytest.importorskip("distributed")  # the `dask` extra (in `test`); the rest of the suite runs without
import dask  # noqa: E402  (installed with distributed)
import dask.array as da  # noqa: E402
import dask_shared  # noqa: E402

from pymc_dp.backends import dask_rows  # noqa: E402

client = dask_shared.client  # the module-scoped LocalCluster fixture, shared with the other Dask row tests
SIZES = (250, 200, 150)
SETTINGS = dict(
    n_features=3,
    x_bounds=(-2.0, 2.0),
    epsilon=1.0,
    random_seed=5,
    reproducible_noise=True,
    covariate_anchors=2,  # with the statistics and the clipping check: four passes over the rows per release
    clipping_check=True,
)
#: Each block the workers make: (its index, the budget's events then). The workers are threads of this process and a
#: module-level function is pickled by reference, so the blocks append here.
_MADE: list = []
_BUDGET: dict = {}


def _block(k: int, n_rows: int, fail: bool = False) -> np.ndarray:
    budget = _BUDGET.get("budget")
    _MADE.append((k, None if budget is None else len(budget.events)))
    if fail:
        raise RuntimeError("row 7 holds 0.123456789")
    rng = np.random.default_rng(k)
    x = rng.normal(0.0, 0.8, size=(n_rows, 3))
    y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-x @ [0.5, -0.7, 0.3]))).astype(float)
    return np.column_stack([x, y])


def _arrays(fail: bool = False) -> tuple:
    """X and y sliced from one array of blocks made where their tasks run (as a Parquet frame's columns)."""
    make = dask.delayed(_block, pure=False)
    columns = da.concatenate([da.from_delayed(make(k, n, fail and k == 1), (n, 4), float) for k, n in enumerate(SIZES)])
    return columns[:, :3], columns[:, 3]


def _release(data, budget=None):
    return pmdp.release_statistics("logistic_regression", data, budget=budget, **SETTINGS)


def _in_memory():
    blocks = [_block(k, n) for k, n in enumerate(SIZES)]
    _MADE.clear()
    rows = np.concatenate(blocks)
    return _release((rows[:, :3], rows[:, 3]))


def _same(remote, local) -> None:
    assert np.array_equal(remote.noisy_statistics, local.noisy_statistics)
    assert remote.accountant_record() == local.accountant_record()


def test_the_blocks_are_made_once_after_the_charge_and_the_releases_are_the_in_memory_one(client):
    local = _in_memory()
    budget = pmdp.PrivacyBudget(epsilon=10.0, delta=1e-6, n_rows=sum(SIZES))
    _BUDGET["budget"] = budget
    try:
        data = _arrays()
        first = _release(data, budget)
        second = _release(data)
    finally:
        _BUDGET.clear()
    assert sorted(k for k, _ in _MADE) == [0, 1, 2]  # once each over 2 releases × 4 passes (24 reads without keeping)
    assert {events for _, events in _MADE} == {len(budget.events)} and len(budget.events) > 0  # after the charge
    _same(first, local)
    _same(second, local)
    key = tuple(id(a) for a in data)
    assert key in dask_rows._KEPT
    kept = dask_rows._KEPT[key]
    assert kept.nbytes == sum(a.nbytes for a in data) and all(isinstance(a, da.Array) for a in kept.arrays)
    del data, kept
    gc.collect()
    assert key not in dask_rows._KEPT  # dropped with the arrays: the workers free the blocks
    _MADE.clear()


def test_arrays_beyond_the_share_of_worker_memory_are_decoded_at_every_pass(client, monkeypatch):
    local = _in_memory()
    data = _arrays()
    limits = sum(w["memory_limit"] for w in client.scheduler_info()["workers"].values())
    monkeypatch.setattr(dask_rows, "KEEP_SHARE", 0.9 * sum(a.nbytes for a in data) / limits)  # just too small
    _same(_release(data), local)
    assert sorted(k for k, _ in _MADE) == sorted([0, 1, 2] * 4)  # statistics, 2 anchors, the check: 4 reads each
    assert not dask_rows._KEPT
    _MADE.clear()


def test_a_failing_block_carries_no_data_text_and_is_not_kept(client):
    data = _arrays(fail=True)
    with pytest.raises(pmdp.PrivateRunError, match="RuntimeError") as caught:
        _release(data)
    assert "0.123456789" not in str(caught.value) and caught.value.__cause__ is None
    assert tuple(id(a) for a in data) not in dask_rows._KEPT
    _MADE.clear()


def test_nothing_is_kept_under_a_local_scheduler(client):
    local = _in_memory()
    with dask.config.set(scheduler="synchronous"):  # the blocks would sit in this process
        data = _arrays()
        _same(_release(data), local)
        _same(_release(data), local)
    assert not dask_rows._KEPT and len(_MADE) == 2 * 4 * len(SIZES)
    _MADE.clear()


def test_a_release_refused_by_its_budget_decodes_and_keeps_nothing(client):
    """The charge comes before any block is kept or made: a release over its budget persists nothing (``persist`` is
    asynchronous, so a persist issued before the charge would make the blocks on the workers after the refusal; the
    wait lets such blocks appear). Review 10's mutant, ``_kept_arrays`` called before the charge, fails this."""
    import time

    _MADE.clear()
    data = _arrays()
    budget = pmdp.PrivacyBudget(epsilon=0.5, delta=1e-6, n_rows=sum(SIZES))  # the release asks for ε = 1
    with pytest.raises(pmdp.PrivacyBudgetExceededError):
        _release(data, budget)
    time.sleep(1.0)
    assert not budget.events and _MADE == [] and not dask_rows._KEPT
