"""The DP samplers on rows that never leave the cluster (issue 37): DPPenaltyMH and DPHMC on Dask arrays' own blocks.

Steps built in ``pymc_dp.backends.dask_sampler_rows.sampler_model(model, rows)`` (a copy of a model
of ``pmdp.row_placeholder`` stand-ins) and sampled with ``pmdp.DaskBackend(client, rows=rows)``:
every release runs on the workers that computed the blocks, after the charge. What is checked: with
reproducible noise and the same seed the draws equal the in-memory run's and the run on rows
scattered into the same partitions to 1e-10, with the same ε and accountant record (but its
backend entry); the run is charged before any block is computed; a failing block names its
exception's type only; refusals name their parameter and charge nothing. On a
``LocalCluster(processes=False)`` (threads of this process: no worker start-up); the run on worker
processes with uneven chunks is in tests/test_dask_backend.py. Costs (CPU s, Python 3.12) in each docstring.
"""

import json

import numpy as np
import pymc as pm
import pytest

import pymc_dp as pmdp

distributed = pytest.importorskip("distributed")  # the `dask` extra (in `test`); the rest of the suite runs without
import dask  # noqa: E402  (installed with distributed)
import dask.array as da  # noqa: E402
import dask_shared  # noqa: E402
from dask_shared import N_ROWS, with_summed_array_in_logp  # noqa: E402

from pymc_dp.backends.dask import DaskBackendError  # noqa: E402
from pymc_dp.backends.dask_sampler_rows import reads_partitioned_rows, sampler_model  # noqa: E402
from pymc_dp.exponential_family.ops import tempered_model  # noqa: E402
from pymc_dp.results import group, group_names  # noqa: E402

client = dask_shared.client  # the module-scoped LocalCluster fixture, shared with the other Dask row tests
CHUNKS = (200, 200, 200)  # the scattered path's 3 partitions of 600 rows (np.linspace): the same sums' grouping
BETA = np.array([1.0, -0.5, 0.25])


def _rows(seed: int = 0, n_rows: int = N_ROWS) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, 3))
    y = (rng.random(n_rows) < 1 / (1 + np.exp(-(x @ BETA)))).astype("int64")
    return x, y


def _model(x, y) -> pm.Model:
    """Logistic regression on ``x``, ``y``: arrays held in the model, or placeholders."""
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 2.0, shape=3)
        pm.Bernoulli("y", logit_p=x @ beta, observed=y)
    return model


def _dask_rows(x, y, chunks=CHUNKS) -> dict:
    return {"X": da.from_array(x, chunks=(chunks, 3)), "y": da.from_array(y, chunks=(chunks,))}


def _placeholder_model(rows: dict) -> pm.Model:
    return _model(pmdp.row_placeholder(rows["X"]), pmdp.row_placeholder(rows["y"]))


def _step(method: str, **extra):
    if method.startswith("penalty"):
        clip = "auto" if method == "penalty_auto" else 0.5
        return pmdp.DPPenaltyMH(llr_clip=clip, reproducible_noise=True, **extra)
    return pmdp.DPHMC(llr_clip=0.5, grad_clip=2.0, n_leapfrog=3, reproducible_noise=True, **extra)


def _sample(model, method, backend=None, budget=None, **extra):
    """A short reproducible run (4 + 8 iterations, one chain) of a step built in ``model``."""
    with model:
        return pmdp.sample(
            step=_step(method, **extra),
            epsilon=None if budget else 2.0,
            budget=budget,
            delta=1e-5,
            draws=8,
            tune=4,
            chains=1,
            cores=1,
            random_seed=4,
            progressbar=False,
            init="prior",  # init="auto" fits DPADVI in process only without a cluster: both runs start from the prior
            **({} if backend is None else {"backend": backend}),
        )


def _same_run(remote, local) -> None:
    """Equal draws (1e-10), ε and accountant record but the backend entry and why neither run centres."""
    remote, local = remote.posterior, local.posterior
    np.testing.assert_allclose(remote["beta"].values, local["beta"].values, rtol=0, atol=1e-10)
    assert remote.attrs["dp_epsilon"] == local.attrs["dp_epsilon"]
    a, b = json.loads(remote.attrs["dp_accountant"]), json.loads(local.attrs["dp_accountant"])
    assert a.pop("backend")["name"] == "dask"
    b.pop("backend", None)
    assert not a.pop("centring", {}).get("used") and not b.pop("centring", {}).get("used")
    assert a == b


@pytest.mark.parametrize("method", ["penalty", "hmc"])
def test_a_run_on_dask_rows_equals_the_in_memory_run_and_the_scattered_run(client, method, monkeypatch):
    """DPPenaltyMH (every ratio) and DPHMC (3 leapfrog gradients and the ratio) on the blocks of Dask arrays.

    Three runs of 12 iterations with the same seed: rows held in the model, rows scattered into 3
    partitions, rows on the Dask arrays' 3 blocks. About 4 CPU s (penalty) and 6 (HMC): each run
    compiles its graphs. The run on the blocks converts its trace without the copy's observed
    stand-in (PyMC's ``extract_obs_data`` would copy its N zeros for ``observed_data``, a group then
    deleted), and its result has the groups, variables, dimensions and attributes of the in-memory run's.
    """
    import pymc.backends.arviz

    x, y = _rows()
    rows = _dask_rows(x, y)
    held = _model(x, y)
    local = _sample(held, method)
    extracted = []
    real_extract = pymc.backends.arviz.extract_obs_data
    monkeypatch.setattr(pymc.backends.arviz, "extract_obs_data", lambda v: extracted.append(v) or real_extract(v))
    partitioned = _sample(sampler_model(_placeholder_model(rows), rows), method, pmdp.DaskBackend(client, rows=rows))
    monkeypatch.undo()
    assert extracted == []
    _same_run(partitioned, local)
    assert sorted(group_names(partitioned)) == sorted(group_names(local)) == ["posterior", "sample_stats"]
    for name in ("posterior", "sample_stats"):
        mine, theirs = group(partitioned, name), group(local, name)
        assert dict(mine.sizes) == dict(theirs.sizes) and sorted(mine.data_vars) == sorted(theirs.data_vars)
        assert sorted(mine.attrs) == sorted(theirs.attrs)
    if method == "penalty":  # the scattered path's gradients are tested in test_dask_backend
        _same_run(partitioned, _sample(held, method, pmdp.DaskBackend(client, partitions=3)))


#: The budget a test watches and its events when each block was computed (the workers are threads of this process,
#: and a module-level function is pickled by reference: the blocks see these objects, not copies).
_WATCHED: dict = {}


def _watched_block(k, part, fail=False):
    _WATCHED["seen"].append(len(_WATCHED["budget"].events))
    if fail:
        raise RuntimeError("row 7 holds 0.123456789")
    x, y = _rows(k, 200)
    return x if part == "x" else y


def _watched_rows(fail=False) -> dict:
    make = dask.delayed(_watched_block, pure=False)
    return {
        "X": da.concatenate([da.from_delayed(make(k, "x"), (200, 3), float) for k in range(3)]),
        "y": da.concatenate([da.from_delayed(make(k, "y", fail and k == 1), (200,), "int64") for k in range(3)]),
    }


def test_the_run_is_charged_before_any_block_is_computed_and_a_failing_block_withholds_its_text(client):
    """Blocks made where their tasks run (no row on the client) record the budget's events when they are computed.

    Each block is computed once per run, after the run's charge (the 12 iterations' events), and kept
    on its worker for every release; a block that raises (its message quoting a value) stops the
    run with DaskBackendError naming the exception's type only, and the budget keeps the charge.
    About 3 CPU s.
    """
    budget = _WATCHED["budget"] = pmdp.PrivacyBudget(epsilon=50.0, delta=1e-5, n_rows=N_ROWS)
    seen = _WATCHED["seen"] = []
    rows = _watched_rows()
    _sample(sampler_model(_placeholder_model(rows), rows), "penalty", pmdp.DaskBackend(client, rows=rows), budget)
    assert len(seen) == 6 and min(seen) >= 1  # 3 blocks × 2 arrays, each once, all after the charge
    charged = len(budget.events)
    rows = _watched_rows(fail=True)
    with pytest.raises(DaskBackendError, match=r"partitions \(RuntimeError; its message is withheld") as caught:
        _sample(sampler_model(_placeholder_model(rows), rows), "penalty", pmdp.DaskBackend(client, rows=rows), budget)
    assert "0.123" not in str(caught.value) and caught.value.__cause__ is None and caught.value.__suppress_context__
    assert len(budget.events) > charged  # charged before the blocks were read: the charge stays


def test_refusals_name_the_parameter_read_nothing_and_charge_nothing(client):
    """Steps the rows cannot run, and steps on other rows, are refused from metadata and the graph alone.

    No block is computed (the arrays would fail if one were) and the budget keeps no event.
    About 3 CPU s (the steps are built, which compiles their checks).
    """
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=N_ROWS)
    x, y = _rows()
    rows = _watched_rows(fail=True)  # _WATCHED unset here: a block computed would raise KeyError, not the refusal
    _WATCHED.clear()
    other = _dask_rows(x, y)
    copy = sampler_model(_placeholder_model(rows), rows)
    with copy:
        barker = pmdp.DPBarkerMH(batch_size=50, reproducible_noise=True)
        owners = pmdp.DPMultiOwnerPenaltyMH(owners=np.repeat([0, 1], N_ROWS // 2), llr_clip=0.5, noise_multiplier=5.0)
    held = _model(x, y)
    held_step = _step("penalty", model=held)
    # what pymc_dp.sample would call to refuse the copy without a backend holding the rows (graph names only)
    assert reads_partitioned_rows(copy) and not reads_partitioned_rows(held)
    assert not reads_partitioned_rows(_placeholder_model(rows))
    cases = [
        (copy, barker, rows, r"`backend` with `rows` \(Dask arrays\) runs the steps DPPenaltyMH, DPHMC.*DPBarkerMH"),
        (copy, owners, rows, r"runs the steps DPPenaltyMH, DPHMC and DPADVI. Found DPMultiOwnerPenaltyMH"),
        (held, held_step, rows, r"`backend` with `rows` must run steps built in .*sampler_model.*held in this"),
        (copy, _step("penalty", model=copy), other, r"`backend` with `rows` must run steps built in .*sampler_model"),
    ]
    for model, step, case_rows, match in cases:
        with model, pytest.raises(ValueError, match=match):
            pmdp.sample(step=step, budget=budget, delta=1e-5, draws=8, tune=4, chains=1, init="prior",
                        backend=pmdp.DaskBackend(client, rows=case_rows), progressbar=False)  # fmt: skip
        assert not budget.events
    # An array of N values read only inside a distribution's log-density (its sum mixes every row's term): the copy
    # holds N rows, so the steps' row-wise checks refuse it as they do with rows held in the model
    with sampler_model(with_summed_array_in_logp(other), other), pytest.raises(ValueError, match="not computed row"):
        _step("penalty")
    with pytest.raises(ValueError, match=r"`rows` must give only the Dask arrays.*\['y'\]"):
        sampler_model(_model(pmdp.row_placeholder(other["X"]), y), other)  # the outcome held in this process
    with pytest.raises(TypeError, match=r"`rows` must be a non-empty dict of Dask arrays by role"):
        sampler_model(_placeholder_model(other), [other["X"], other["y"]])


def test_a_step_built_in_the_copy_never_releases_from_this_process(client):
    """A step of sampler_model's copy sampled anywhere but on the workers that hold the rows is refused: its zeros.

    ``pm.sample`` (the first release refuses, naming ``backend``), ``pmdp.sample`` on the default
    backend, on the JAX backend and on a DaskBackend without ``rows`` (which would scatter the zeros):
    each would fit the copy's N rows of zeros, a confidently wrong posterior. pmdp.sample refuses
    before the charge (the budget keeps no event). The arrays fail if a block is computed. About 2 CPU s.
    """
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=N_ROWS)
    rows = _watched_rows(fail=True)
    _WATCHED.clear()
    copy = sampler_model(_placeholder_model(rows), rows)
    match = r"`backend` must be a pmdp.DaskBackend holding the rows"
    with copy:
        step = pmdp.DPPenaltyMH(llr_clip=0.5, noise_multiplier=2.0, reproducible_noise=True)
        with pytest.raises(ValueError, match=match):
            pm.sample(
                step=step, draws=2, tune=0, chains=1, cores=1, progressbar=False, compute_convergence_checks=False
            )
        for backend in ("default", "jax", pmdp.DaskBackend(client)):
            with pytest.raises(ValueError, match=match):
                pmdp.sample(step=_step("penalty"), budget=budget, delta=1e-5, draws=8, tune=4, chains=1, init="prior",
                            backend=backend, progressbar=False)  # fmt: skip
            assert not budget.events


def test_the_copy_is_refused_before_any_charge_by_every_other_entry_point(client):
    """sampler_model's copy (zeros) passed to release_once, DPADVI, release_anchor, one_posterior_sample (and its
    tempered model) or the one call: refused by name before anything is spent (reviews found each charged first, then
    refused at the first release, or, for one_posterior_sample, a draw fitted to the zeros). About 2 CPU s.
    """
    budget = pmdp.PrivacyBudget(epsilon=50.0, delta=1e-5, n_rows=N_ROWS)
    rows = _watched_rows(fail=True)
    _WATCHED.clear()
    copy = sampler_model(_placeholder_model(rows), rows)
    calls = [
        lambda: pmdp.release_once(copy, epsilon=2.0, delta=1e-5, budget=budget, grad_clip=1.0, hessian_clip=1.0),
        lambda: pmdp.DPADVI(epsilon=2.0, delta=1e-5, sampling_rate=0.1, model=copy, budget=budget, grad_clip=1.0).fit(
            10
        ),
        lambda: pmdp.release_anchor(
            {"beta": np.zeros(3)}, grad_clip=1.0, noise_multiplier=1.0, model=copy, budget=budget, delta=1e-5
        ),
        # the exponential mechanism ran on the zeros and charged ε (review 9, finding 1)
        lambda: pmdp.one_posterior_sample(epsilon=1.0, loglik_bounds=(-5.0, 0.0), model=copy, budget=budget),
        lambda: tempered_model(copy, 0.5, (-5.0, 0.0)),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"`model` must hold its rows here: it is sampler_model's copy"):
            call()
        assert list(budget.events) == []
    with copy, pytest.raises(ValueError, match=r"`model` must be the model of row placeholders, not sampler_model"):
        pmdp.sample(epsilon=2.0, delta=1e-5, budget=budget, chains=2, progressbar=False)
    assert list(budget.events) == []


def test_a_worker_error_carries_no_link_to_the_exception_it_withholds():
    """The error a worker task raises holds its exception's type only: no ``__context__`` or ``__cause__`` that pickles
    the original message (which may quote row values) to the client. Pure Python, < 0.1 s."""
    from pymc_dp.backends.dask_cluster import WorkerError, _run_task

    def reads_a_row(value):
        raise FloatingPointError(f"row value {value}")

    with pytest.raises(WorkerError) as caught:
        _run_task(reads_a_row, 1.25)
    chain, error = [], caught.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or error.__context__
    assert len(chain) == 1 and "FloatingPointError" in str(chain[0]) and "1.25" not in str(chain[0])


@pytest.mark.slow  # as the scattered rows' test of the private clip bound (test_dask_backend): about 5 CPU s
def test_a_private_clip_bound_on_dask_rows_is_released_by_the_workers_at_the_same_price(client):
    """llr_clip="auto": the score-norm histogram's counts come from the blocks; the run's ε and record are the
    in-memory run's but the released bound (its histogram's noise is fresh in each run)."""
    x, y = _rows()
    rows = _dask_rows(x, y)
    runs = [
        _sample(_model(x, y), "penalty_auto"),
        _sample(sampler_model(_placeholder_model(rows), rows), "penalty_auto", pmdp.DaskBackend(client, rows=rows)),
    ]
    local, remote = (run.posterior for run in runs)
    assert remote.attrs["dp_epsilon"] == local.attrs["dp_epsilon"]
    a, b = json.loads(remote.attrs["dp_accountant"]), json.loads(local.attrs["dp_accountant"])
    assert a.pop("backend")["name"] == "dask"
    for record in (a, b):
        record.pop("centring", None)
        bound = record.pop("clip_bound")
        assert np.isfinite(bound["bounds"]["llr_clip"]) and bound["bounds"]["llr_clip"] > 0
        for step in record["steps"]:
            step.pop("llr_clip", None)
    assert a == b


def test_the_one_call_route_hands_dask_rows_to_its_penalty_step(client, monkeypatch):
    """``pmdp.sample(epsilon=..., rows=...)`` where the plan runs DPPenaltyMH: its step is built in sampler_model's copy
    and sampled on a DaskBackend holding the rows, on the open client. The run is stopped where pmdp.sample would
    start it with the step (test_a_run_on_dask_rows_equals_the_in_memory_run_and_the_scattered_run runs such a step
    on the cluster); nothing is charged before. About 2 CPU s (the step is built: its checks on the copy).
    """
    import pymc_dp.sampling

    class Stop(Exception):
        pass

    seen = {}

    def spy(**settings):  # pmdp.sample called again by the route, with the step
        seen.update(settings)
        raise Stop

    n_rows = 20_000
    y = da.from_array(np.random.default_rng(11).normal(0.5, 1.0, size=n_rows), chunks=5_000)
    with pm.Model() as model:  # one parameter, many rows: the plan's route is DPPenaltyMH (tests/test_one_call.py)
        mu = pm.Normal("mu", 0, 5)
        pm.Normal("y", mu, 1.0, observed=pmdp.row_placeholder(y))
    assert pmdp.plan(model, epsilon=4.0, delta=1e-6, chains=2).one_call_route == "DPPenaltyMH"
    one_call = pmdp.sample
    monkeypatch.setattr(pymc_dp.sampling, "sample", spy)
    budget = pmdp.PrivacyBudget(epsilon=6.0, delta=1e-6, n_rows=n_rows)
    with model, pytest.raises(Stop):
        one_call(epsilon=4.0, delta=1e-6, chains=2, rows={"y": y}, budget=budget, progressbar=False)
    backend, step = seen["backend"], seen["step"]
    assert isinstance(backend, pmdp.DaskBackend) and backend.rows == {"y": y} and backend.client is client
    assert isinstance(step, pmdp.DPPenaltyMH) and step.n_rows == n_rows
    assert reads_partitioned_rows(seen["model"]) and not reads_partitioned_rows(model)
    assert budget.spent().epsilon == 0.0 and list(budget.events) == []
