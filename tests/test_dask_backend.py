"""The Dask backend on a real ``distributed.LocalCluster`` (2 worker processes, 1 thread each, 2 GiB each).

What is checked: released statistics of rows that exist only on the workers (Dask arrays built
there) equal the in-memory release exactly, with the same accounting (issue 37); the clipped sums
the workers return equal the in-process ones (to 1e-10), a run gives the same draws, ε and
accounting record with and without the backend (reproducible noise, same seed), only fixed-size
sums come back to the client and no data value is in a shipped graph or an error's text,
refusals name their parameter and change nothing, and a worker lost mid-run stops the run with
a clear error while the budget keeps its charge.
"""

import json
import logging
import os
import pickle
import signal

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pymc.pytensorf import make_shared_replacements

import pymc_dp as pmdp
from pymc_dp.mechanisms import NoisyClippedGradient, NoisyLogLikelihoodRatio, NoisyScoreNormHistogram, model_access
from pymc_dp.mechanisms.centred import CentringAnchor
from pymc_dp.mechanisms.clip_bound import norm_histogram
from pymc_dp.mechanisms.clipping import clip_values, clipped_sum_l2

distributed = pytest.importorskip("distributed")  # the `dask` extra (in `test`); the rest of the suite runs without
import dask  # noqa: E402  (installed with distributed)

from pymc_dp.backends.dask import (  # noqa: E402
    ClusterRows,
    DaskBackendError,
    DaskClippedGradient,
    DaskLogLikelihoodRatio,
    DaskScoreNormHistogram,
    WorkerError,
    _run_task,
)

N_ROWS = 3000


@pytest.fixture(scope="module")
def client():
    # The suite runs two test processes on two cores: a cluster started beside a busy one may need more
    # than the default 30 s to connect. The workers fork from one server process that imported pymc_dp once
    # (each spawned worker would import PyMC on its own: seconds of CPU per worker).
    config = {"distributed.comm.timeouts.connect": "180s", "distributed.worker.multiprocessing-method": "forkserver"}
    with dask.config.set(config):
        # (after Dask's own preload list, which it sets once; no effect if this process's server already runs)
        distributed.utils.get_mp_context().set_forkserver_preload(["distributed", "pymc_dp.backends.dask"])
        cluster = distributed.LocalCluster(
            processes=True,
            n_workers=2,
            threads_per_worker=1,
            memory_limit="2GiB",  # per worker: a real cluster's limit (the workers hold 3000 rows and compiled graphs)
            dashboard_address=":0",  # any free port: None still binds the scheduler's HTTP server to 8787 (a warning,
            # so an error here, when another cluster on the machine holds it)
            silence_logs=logging.CRITICAL,
        )
        client = distributed.Client(cluster, timeout="180s")
    yield client
    client.close()
    cluster.close()


@pytest.fixture(scope="module")
def logistic():
    """Logistic regression with numpy rows (covariates in the graph, `observed=` a numpy array)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(N_ROWS, 3))
    y = (rng.random(N_ROWS) < 1 / (1 + np.exp(-x @ np.array([0.5, -1.0, 0.25])))).astype(float)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2, shape=3)
        pm.Bernoulli("y", logit_p=x @ beta, observed=y)
    return model, x, y


@pytest.fixture(scope="module")
def regression():
    """Linear regression with pm.Data rows; the gradient is taken for (a, b) with the scale s held fixed."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=N_ROWS)
    y = 1.0 + 2.0 * x + rng.normal(0, 0.5, size=N_ROWS)
    with pm.Model() as model:
        xd = pm.Data("x", x)
        yd = pm.Data("y_obs", y)
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5)
        s = pm.HalfNormal("s", 2)
        pm.Normal("y", a + b * xd, s, observed=yd)
    return model, x, y


def _mechanisms(model, var_names=None):
    """(RowMechanisms, shared) for ``var_names`` (all free variables if None), as a step builds them."""
    point = model.initial_point()
    value_vars = None if var_names is None else [model.rvs_to_values[model[name]] for name in var_names]
    shared = None if value_vars is None else make_shared_replacements(point, value_vars, model)
    _, mechanisms = model_access(model, value_vars, shared, point, None)
    return mechanisms, shared


@pytest.mark.parametrize(
    "case", ["logistic", pytest.param("regression", marks=pytest.mark.slow)]
)  # regression: pm.Data rows, a compound step's gradient for (a, b) with s held fixed and changing
def test_partition_sums_equal_the_in_process_sums(client, request, case):
    rng = np.random.default_rng(1)
    model, names = request.getfixturevalue(case)[0], (None if case == "logistic" else ["a", "b"])
    mechanisms, shared = _mechanisms(model, names)
    rows = mechanisms._rows
    cluster = ClusterRows(client, rows, 3, None)
    try:
        for _ in range(3):
            if shared:  # the parameter a compound step holds fixed changes between calls
                [var] = shared.values()
                var.set_value(np.asarray(rng.normal(), dtype=var.dtype))
            theta, theta_new = rng.normal(size=(2, rows.n_params))
            bound = 0.05
            ratios = rows.loglik_rows(theta_new) - rows.loglik_rows(theta)
            expected = float(np.sum(clip_values(ratios, bound)))
            assert cluster.clipped_ratio_sum(theta, theta_new, bound) == pytest.approx(expected, rel=1e-10, abs=1e-10)
            gradient = cluster.clipped_gradient_sum(theta, 0.7)
            np.testing.assert_allclose(gradient, clipped_sum_l2(rows.grad_rows(theta), 0.7), rtol=1e-10, atol=1e-10)
            counts = cluster.score_norm_counts(theta)
            np.testing.assert_array_equal(counts, norm_histogram(np.linalg.norm(rows.grad_rows(theta), axis=1)))
    finally:
        cluster.close()


def test_releases_equal_the_in_process_releases_with_the_same_noise(client, logistic):
    mechanisms, _ = _mechanisms(logistic[0])
    rows = mechanisms._rows
    cluster = ClusterRows(client, rows, 2, None)
    try:
        theta, theta_new = np.array([0.1, -0.2, 0.3]), np.array([0.15, -0.25, 0.2])
        pairs = [
            (NoisyLogLikelihoodRatio(rows, 0.4, 1.3), DaskLogLikelihoodRatio(cluster, 0.4, 1.3, "substitute")),
            (NoisyClippedGradient(rows, 0.9, 1.3), DaskClippedGradient(cluster, 0.9, 1.3, "substitute")),
            (NoisyScoreNormHistogram(rows, 2.0), DaskScoreNormHistogram(cluster, 2.0, "substitute")),
        ]
        for local, remote in pairs:
            args = (theta, theta_new) if isinstance(local, NoisyLogLikelihoodRatio) else (theta,)
            if isinstance(local, NoisyScoreNormHistogram):
                a = local.release_counts(theta, np.random.default_rng(9))
                b = remote.release_counts(theta, np.random.default_rng(9))
            else:
                a = local.release(*args, np.random.default_rng(9))
                b = remote.release(*args, np.random.default_rng(9))
            np.testing.assert_allclose(np.asarray(b, dtype=float), np.asarray(a, dtype=float), rtol=1e-10, atol=1e-10)
            assert type(remote).events(1.3, 5, "x") == type(local).events(1.3, 5, "x")  # the same accounting
    finally:
        cluster.close()


def test_only_fixed_size_sums_reach_the_client_and_no_data_in_the_shipped_graph(client, logistic, monkeypatch):
    model, x, _ = logistic
    mechanisms, _ = _mechanisms(model)
    cluster = ClusterRows(client, mechanisms._rows, 2, None)
    received = []
    gather = client.gather

    def spy(futures, *args, **kwargs):
        out = gather(futures, *args, **kwargs)
        received.append(out)
        return out

    monkeypatch.setattr(client, "gather", spy)
    try:
        theta = np.array([0.1, -0.2, 0.3])
        cluster.clipped_ratio_sum(theta, theta + 0.01, 0.1)
        cluster.clipped_gradient_sum(theta, 1.0)
        cluster.score_norm_counts(theta)
        assert len(received) == 3 and all(len(parts) == 2 for parts in received)
        assert all(isinstance(v, float) for v in received[0])
        assert all(np.shape(v) == (3,) for v in received[1])
        assert all(np.shape(v) == np.shape(norm_histogram(np.ones(1))) for v in received[2])
        for spec in (cluster._loglik_spec, cluster._grad_spec):
            payload = gather(spec[1])
            assert x.tobytes() not in payload and x[0].tobytes() not in payload and x[:, 0].tobytes() not in payload
            _, outputs = pickle.loads(payload)
            from pytensor.graph.basic import Constant
            from pytensor.graph.traversal import ancestors

            sizes = [np.size(v.data) for v in ancestors(outputs) if isinstance(v, Constant)]
            assert max(sizes) < N_ROWS
    finally:
        cluster.close()


def _rows_on_a_worker(seed: int, n_rows: int, part: str) -> np.ndarray:
    """One partition of a logistic data set, made where the task runs (the same rows for the same seed)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 0.8, size=(n_rows, 3))
    y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-x @ np.array([0.5, -1.0, 0.25])))).astype(float)
    return x if part == "x" else y


def test_a_release_of_rows_that_live_on_the_workers_equals_the_in_memory_release(client):
    """Issue 37: X and y are Dask arrays whose partitions are made on the workers; only sums come back."""
    sizes = (700, 1100, 400, 800)
    remote_data, local_data = _one_call_rows(sizes)
    settings = dict(
        n_features=3, x_bounds=(-2.0, 2.0), covariate_anchors=2, epsilon=1.0, random_seed=5, reproducible_noise=True
    )
    budget = pmdp.PrivacyBudget(epsilon=2.0, delta=1e-6, n_rows=sum(sizes))
    with distributed.get_task_stream(client) as stream:  # the default scheduler is `client`
        remote = pmdp.release_statistics("logistic_regression", remote_data, budget=budget, **settings)
    local = pmdp.release_statistics("logistic_regression", local_data, **settings)
    np.testing.assert_array_equal(remote.noisy_statistics, local.noisy_statistics)
    for a, b in zip(remote.covariate_anchors, local.covariate_anchors, strict=True):
        np.testing.assert_array_equal(a.noisy_statistics, b.noisy_statistics)
    assert remote.accountant_record() == local.accountant_record()
    assert budget.spent().epsilon == pytest.approx(1.0, rel=1e-12)
    ran = [task for task in stream.data if "pymc-dp-row-sums" in str(task["key"])]  # the tree's sums: 3 passes
    assert len(ran) >= 3 and {task["worker"] for task in ran} <= set(client.scheduler_info()["workers"])


def _leaky_task(partition):
    """A worker task whose exception text holds row values (what a PyTensor error may quote)."""
    raise ValueError(f"bad input: {partition[0][:3]!r}")


def test_a_failing_task_carries_no_data_text(client, logistic):
    model, x, _ = logistic
    mechanisms, _ = _mechanisms(model)
    cluster = ClusterRows(client, mechanisms._rows, 2, None)

    def install():
        from pymc_dp.backends import dask as dask_backend

        dask_backend._TASKS["leak"] = _leaky_task

    try:
        client.run(install)
        future, worker = cluster._parts[0]
        remote = client.submit(_run_task, "leak", future, workers=[worker], pure=False)
        with pytest.raises(WorkerError) as raw:
            remote.result()
        assert str(raw.value) == "ValueError in leak (message withheld)"  # all that crossed the network
        with pytest.raises(DaskBackendError, match=r"\(WorkerError; its message is withheld") as caught:
            cluster._map("leak", lambda k, part: (part,), "a test task")
        text = str(caught.value)
        assert caught.value.__cause__ is None and caught.value.__suppress_context__
        assert not any(f"{v:.4f}"[:6] in text for v in x[:3, 0])
    finally:
        client.run(lambda: __import__("pymc_dp.backends.dask").backends.dask._TASKS.pop("leak"))
        cluster.close()


def _run(model, step, backend, budget=None, **kwargs):
    with model:
        return pmdp.sample(
            step=step,
            epsilon=None if budget else 2.0,
            delta=1e-5,
            budget=budget,
            draws=8,
            tune=4,
            chains=1,
            cores=1,
            random_seed=4,
            progressbar=False,
            backend=backend,
            # Both runs start from prior draws: init="auto" would fit DPADVI in-process only without a cluster.
            **{"init": "prior", **kwargs},
        )


def _same_record(remote, local, released=()):
    """The accountant records agree, except the values ``released`` in this run (clip bounds: fresh noise)."""
    a, b = json.loads(remote.attrs["dp_accountant"]), json.loads(local.attrs["dp_accountant"])
    assert a.pop("backend")["name"] == "dask" and "backend" not in b  # the one difference: where the sums ran
    # neither run centres; the reasons may differ (a Dask backend is one of them)
    assert not a.pop("centring", {}).get("used") and not b.pop("centring", {}).get("used")
    for record in (a, b):
        for key in released:
            record.pop(key, None)
            for step in record["steps"]:  # the bounds read off the released histogram
                step.pop("llr_clip", None)
                step.pop("grad_clip", None)
    assert a == b


@pytest.mark.parametrize("method", ["penalty", pytest.param("hmc", marks=pytest.mark.slow)])
def test_a_run_gives_the_same_draws_and_accounting_with_the_backend(client, logistic, method):
    model = logistic[0]
    results = []
    for backend in (None, pmdp.DaskBackend(client)):
        with model:
            step = (
                pmdp.DPPenaltyMH(llr_clip=0.5, reproducible_noise=True)
                if method == "penalty"
                else pmdp.DPHMC(llr_clip=0.5, grad_clip=2.0, n_leapfrog=3, reproducible_noise=True)
            )
        results.append(_run(model, step, backend))
    local, remote = (r.posterior for r in results)
    np.testing.assert_allclose(remote["beta"].values, local["beta"].values, rtol=1e-8, atol=1e-10)
    assert remote.attrs["dp_epsilon"] == local.attrs["dp_epsilon"]
    _same_record(remote, local)


@pytest.mark.slow
def test_a_private_clip_bound_is_released_by_the_workers_at_the_same_price(client, logistic):
    model = logistic[0]
    results = []
    for backend in (None, pmdp.DaskBackend(client)):
        with model:
            step = pmdp.DPHMC(n_leapfrog=3)  # llr_clip, grad_clip "auto": a score-norm histogram first
        results.append(_run(model, step, backend))
    local, remote = (r.posterior for r in results)
    assert remote.attrs["dp_epsilon"] == local.attrs["dp_epsilon"]
    _same_record(remote, local, released=("clip_bound",))


def test_a_dask_run_is_recorded_in_the_accountant(client, logistic):
    """The sample docstring says dp_accountant["backend"] records the backend: on edd15ad a Dask run left it out."""
    with logistic[0]:
        step = pmdp.DPPenaltyMH(llr_clip=0.5)
    result = _run(logistic[0], step, pmdp.DaskBackend(client, partitions=3, timeout=60.0))
    record = json.loads(result.posterior.attrs["dp_accountant"])
    assert record["backend"] == {
        "name": "dask",
        "partitions": 3,
        "workers": 2,
        "timeout": 60.0,
        "distributed_version": distributed.__version__,
    }
    assert pmdp.privacy_spent(result).epsilon == pytest.approx(result.posterior.attrs["dp_epsilon"], rel=1e-12)


def test_data_owners_on_workers_give_the_same_draws_and_accounting(client, logistic):
    """DPMultiOwnerPenaltyMH: each owner's rows on one worker, its noise added there (reproducible here)."""
    model = logistic[0]
    owners = np.repeat(["a", "b", "c"], [1000, 1000, N_ROWS - 2000])
    results = []
    for backend in (None, pmdp.DaskBackend(client)):
        with model:
            step = pmdp.DPMultiOwnerPenaltyMH(owners=owners, llr_clip=0.5, reproducible_noise=True)
        results.append(_run(model, step, backend))
    local, remote = (r.posterior for r in results)
    np.testing.assert_allclose(remote["beta"].values, local["beta"].values, rtol=1e-8, atol=1e-10)
    assert remote.attrs["dp_epsilon"] == local.attrs["dp_epsilon"]
    _same_record(remote, local)


def test_an_owner_generator_is_drawn_on_its_worker_without_reproducible_noise(client, logistic):
    from pymc_dp.backends.dask import _OS_ENTROPY, DaskRowMechanisms

    mechanisms, _ = _mechanisms(logistic[0])
    cluster = ClusterRows(client, mechanisms._rows, 2, None)
    try:
        dask_mechanisms = DaskRowMechanisms(mechanisms._rows, cluster, reproducible_noise=False)
        owner = dask_mechanisms.owner_ratio(np.arange(100), 0.5, 2.0, np.random.default_rng(0), "substitute")
        assert owner.rng is _OS_ENTROPY  # the client holds no generator of the owner
        theta = np.zeros(3)
        draws = [owner(theta, theta + 0.1) for _ in range(4)]  # same move: only the noise differs
        assert len(set(draws)) == 4
    finally:
        cluster.close()


def test_refusals_name_the_parameter_and_charge_nothing(client, logistic):
    model = logistic[0]
    backend = pmdp.DaskBackend(client)
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=N_ROWS)
    with model:
        barker = pmdp.DPBarkerMH(batch_size=100)
        penalty = pmdp.DPPenaltyMH(llr_clip=1.0)
        anchor = CentringAnchor(np.zeros(3), np.zeros(3), 1.0, 3.0, "substitute", ("beta",))
        centred = pmdp.DPPenaltyMH(anchor=anchor, centre_lipschitz=1.0, noise_multiplier=5.0)
    cases = [
        (dict(step=centred, backend=backend), ValueError, "`backend` runs uncentred releases only"),
        (dict(step=barker, backend=backend), ValueError, "`backend` runs the steps"),
        (dict(step=penalty, backend="dask"), ValueError, "`backend` must be 'default', 'jax', a pymc_dp.JaxBackend or"),
        (dict(step=penalty, backend=backend, cores=2), ValueError, "`cores` must be 1"),
        (dict(step=penalty, backend=backend, init="dpadvi"), ValueError, "`init` must be 'auto', 'prior' or 'model'"),
    ]
    for kwargs, error, message in cases:
        with model, pytest.raises(error, match=message):
            pmdp.sample(epsilon=1.0, budget=budget, draws=5, tune=5, chains=1, **kwargs)
    assert budget.spent().epsilon == 0.0
    with pytest.raises(TypeError, match=r"`client` must be a distributed\.Client"):
        pmdp.DaskBackend("tcp://localhost:8786")
    with pytest.raises(ValueError, match="`partitions` must be a positive integer"):
        pmdp.DaskBackend(client, partitions=0)


@pytest.mark.slow
def test_rows_that_cannot_be_partitioned_are_refused_before_anything_is_charged(client):
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=50)
    with pm.Model() as fixed:  # the graph fixes the number of rows: subset mode "slice", cannot be partitioned
        xd = pm.Data("x", np.linspace(-1, 1, 50))
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", pt.specify_shape(mu + xd, (50,)), 1.0, observed=np.zeros(50))
        step = pmdp.DPPenaltyMH(llr_clip=1.0)
    with fixed, pytest.raises(pmdp.ModelStructureError, match="`backend` needs rows that can be partitioned"):
        pmdp.sample(step=step, epsilon=1.0, budget=budget, draws=5, tune=5, chains=1, backend=pmdp.DaskBackend(client))
    assert budget.spent().epsilon == 0.0


def _break_module_on(client, worker, name: str):
    """Make ``name`` unimportable on one worker (a worker without it, or with another pymc-dp); returns the undo."""

    def hide(name=name):
        import sys

        hidden = sys.__dict__.setdefault("_pymc_dp_test_hidden", {})
        hidden[name] = sys.modules.get(name)
        sys.modules[name] = None  # an import of it raises ModuleNotFoundError, as where it is not installed

    def restore(name=name):
        import sys

        module = sys.__dict__["_pymc_dp_test_hidden"].pop(name)
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module  # the same module object: nothing holds a second copy

    client.run(hide, workers=[worker])
    return lambda: client.run(restore, workers=[worker])


@pytest.mark.parametrize("method", ["dpadvi", "penalty"])
def test_a_worker_that_fails_the_warm_up_is_refused_before_the_charge(client, logistic, method):
    """Review finding 3b: the workers import, compile and evaluate on a dummy row before the charge. About 4 CPU s.

    One worker cannot import a module its tasks need (DPADVI's worker module; for a step, PyMC's
    pytensorf, with which a worker compiles the shipped graph). Before the warm-up this failed
    at the first release, after the charge.
    """
    model = logistic[0]
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=N_ROWS)
    worker = sorted(client.scheduler_info()["workers"])[1]
    module = "pymc_dp.backends.dask_dpadvi" if method == "dpadvi" else "pymc.pytensorf"
    restore = _break_module_on(client, worker, module)
    refusal = r"`backend`'s workers must run this model's per-row functions\. .*Refused before anything was charged"
    try:
        with pytest.raises(DaskBackendError, match=refusal) as caught:
            if method == "dpadvi":
                fit = pmdp.DPADVI(
                    noise_multiplier=2.0,
                    delta=1e-5,
                    budget=budget,
                    sampling_rate=0.5,
                    grad_clip=1.0,
                    backend=pmdp.DaskBackend(client),
                )
                fit.fit(3, model=model, progressbar=False)
            else:
                with model:
                    step = pmdp.DPPenaltyMH(llr_clip=1.0, noise_multiplier=10.0)
                _run(model, step, pmdp.DaskBackend(client), budget=budget)
    finally:
        restore()
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert budget.spent().epsilon == 0.0 and not list(budget.events)  # nothing charged
    if method == "dpadvi":
        assert fit.privacy_spent().epsilon == 0.0 and fit.noise_multiplier == 2.0 and fit._iterations == 0
        assert not hasattr(fit._row_mechanisms, "_cluster")  # the rows were released again


def _refuse_to_store(*_):
    raise MemoryError("a worker that cannot hold the owner's rows")


def _store_too_slowly(*_):
    import time

    time.sleep(3.0)


@pytest.mark.parametrize("failure", ["error", "timeout"])
def test_data_owners_rows_that_a_worker_cannot_store_are_refused_before_the_charge(
    client, logistic, monkeypatch, failure
):
    """Each owner's rows are placed on its worker before the charge (:meth:`ClusterRows.place_owners`), within the
    backend's timeout. About 1 CPU s each (the timeout case waits 0.5 s).

    Before, the rows were copied at the owner's first release, after the charge: a worker that
    could not store them failed the run with the budget charged.
    """
    store = _refuse_to_store if failure == "error" else _store_too_slowly
    if failure == "timeout":  # the workers' compile would not fit the short timeout either: not what is tested here
        monkeypatch.setattr(ClusterRows, "warm_up", lambda self, gradient, modules=(): None)

    def failing_partition(self, owner_rows):
        key = str(len(self._owners))
        if key not in self._owners:
            future = self._client.submit(store, key, pure=False)
            self._owners[key] = (future, None)
        return self._owners[key]

    monkeypatch.setattr(ClusterRows, "owner_partition", failing_partition)
    model = logistic[0]
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=N_ROWS)
    with model:
        step = pmdp.DPMultiOwnerPenaltyMH(owners=np.repeat(["a", "b"], [1000, N_ROWS - 1000]), llr_clip=0.5)
    assert len(step.owner_row_indices) == 2
    backend = pmdp.DaskBackend(client, timeout=None if failure == "error" else 0.5)
    with pytest.raises(DaskBackendError, match=r"failed to store them .*refused before anything was charged"):
        _run(model, step, backend, budget=budget)
    assert budget.spent().epsilon == 0.0 and not list(budget.events)


def test_a_worker_lost_mid_run_stops_it_and_the_budget_keeps_its_charge(client, logistic):
    """Last in the file: the killed worker is restarted by its nanny, without the rows it held."""
    model = logistic[0]
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=N_ROWS)
    with model:
        step = pmdp.DPPenaltyMH(llr_clip=1.0, noise_multiplier=10.0)
    draws = []
    pid = next(iter(client.run(os.getpid).values()))

    def kill_at_third_draw(trace, draw):
        draws.append(draw)
        if len(draws) == 3:
            os.kill(pid, signal.SIGKILL)  # a worker process dies, with the partition it holds

    with pytest.raises(DaskBackendError, match="A worker holding rows may have been lost") as caught:
        _run(model, step, pmdp.DaskBackend(client, timeout=60), budget=budget, callback=kill_at_third_draw)
    assert len(draws) >= 3
    assert "withheld" in str(caught.value)
    assert list(budget.events) == step.privacy_events(12)  # the whole run (4 + 8 iterations), charged before it ran
    assert budget.spent().epsilon > 0


@pytest.mark.slow
def test_the_example_runs_on_one_process_and_on_a_cluster_at_the_same_epsilon():
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [
            *(sys.executable, str(root / "examples" / "dask_cluster.py"), "--rows", "3000", "--draws", "30"),
            *("--tune", "10", "--iterations", "30", "--parts", "sampler", "dpadvi"),  # one-call: N = 10⁵ by the plan
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "PYTHONPATH": str(root)},  # this checkout's pymc_dp, for the workers too
    )
    assert result.returncode == 0, result.stderr[-3000:]
    epsilons = re.findall(r"ε = ([0-9.]+) in", result.stdout)
    assert len(epsilons) == 4 and epsilons[0] == epsilons[2] and epsilons[1] == epsilons[3]  # sampler, DPADVI
    assert "Dask (2 workers)" in result.stdout


def test_auto_init_starts_from_prior_draws_on_a_cluster_and_says_why(client, logistic):
    model = logistic[0]
    with model:
        step = pmdp.DPPenaltyMH(llr_clip=0.5)
    idata = _run(model, step, pmdp.DaskBackend(client), init="auto")
    start = json.loads(idata.posterior.attrs["dp_accountant"])["start"]
    assert start["source"] == "prior" and "Dask backend" in start["init"]


def _one_call_rows(sizes):
    """A logistic regression's (X, y) as Dask arrays made on the workers, and the same rows in memory."""
    import dask.array as da

    parts = {
        part: [
            da.from_delayed(
                dask.delayed(_rows_on_a_worker)(seed, n, part), shape=(n, 3) if part == "x" else (n,), dtype=float
            )
            for seed, n in enumerate(sizes)
        ]
        for part in ("x", "y")
    }
    local = [np.concatenate([_rows_on_a_worker(seed, n, part) for seed, n in enumerate(sizes)]) for part in "xy"]
    return (da.concatenate(parts["x"]), da.concatenate(parts["y"])), (local[0], local[1].astype("int64"))


def _one_call_model(x, y):
    with pm.Model() as model:
        intercept = pm.Normal("intercept", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 2.0, shape=3)
        pm.Bernoulli("y", logit_p=intercept + x @ beta, observed=y)
    return model


class _Released(Exception):
    """Stops a one-call run after its release (the route's NUTS part reads only the release)."""


def _seeded_one_call_release(monkeypatch, stop: bool):
    """The one-call route's releases with reproducible noise (seed 5), recorded; with ``stop`` the run ends there."""
    import pymc_dp.exponential_family as exponential_family

    released = []
    original = exponential_family.release_statistics

    def seeded(*args, **kwargs):
        released.append(original(*args, random_seed=5, reproducible_noise=True, **kwargs))
        if stop:
            raise _Released
        return released[-1]

    monkeypatch.setattr(exponential_family, "release_statistics", seeded)
    return released


def test_the_one_call_route_on_rows_that_live_on_the_workers_releases_what_it_releases_in_memory(client, monkeypatch):
    """Issue 37: ``pmdp.sample(epsilon=..., rows=...)`` on a model of row placeholders; the rows never leave the
    workers (they are made there), and the release and its charges are the in-memory one-call route's."""
    from pymc_dp.backends.dask_rows import row_placeholder

    released = _seeded_one_call_release(monkeypatch, stop=True)
    (xd, yd), (x, y) = _one_call_rows((700, 1100, 400, 800))
    budgets = [pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=len(y)) for _ in range(2)]
    settings = dict(epsilon=2.0, delta=1e-6, x_bounds=(-2.0, 2.0), chains=2, random_seed=1)
    with _one_call_model(x, y), pytest.raises(_Released):
        pmdp.sample(budget=budgets[0], **settings)
    with _one_call_model(row_placeholder(xd), row_placeholder(yd)), pytest.raises(_Released):
        with distributed.get_task_stream(client) as stream:  # the default scheduler is `client`
            pmdp.sample(rows={"X": xd, "y": yd}, budget=budgets[1], **settings)
    local, remote = released
    np.testing.assert_array_equal(remote.noisy_statistics, local.noisy_statistics)
    np.testing.assert_allclose(remote.statistics, local.statistics, rtol=1e-10, atol=1e-10)
    for a, b in zip(remote.covariate_anchors, local.covariate_anchors, strict=True):
        np.testing.assert_array_equal(a.noisy_statistics, b.noisy_statistics)
    assert remote.clipping_check == local.clipping_check and remote.accountant_record() == local.accountant_record()
    assert budgets[1].events == budgets[0].events
    keys = [str(task["key"]) for task in stream.data]
    assert any("pymc-dp-row-sums" in key for key in keys) and any("pymc-dp-clipped-rows" in key for key in keys)


def test_two_conversions_of_one_parquet_frame_are_refused_before_the_charge_and_one_conversion_runs(
    tmp_path, monkeypatch
):
    """The read_parquet bug (dask 2026.8.0): X and y converted from one frame separately fail at compute time.

    Before the probe the one-call route charged the release, then failed with PrivateRunError; now
    the arrays' joint graph is checked before anything is priced (metadata only), and the
    workaround (one conversion, sliced) is released. About 2 CPU s.
    """
    pytest.importorskip("pyarrow", reason="pyarrow (the benchmarks extra) writes and reads the Parquet files")
    import dask.dataframe as dd
    import pandas as pd
    import pyarrow.parquet as pq

    from pymc_dp.backends.dask_rows import row_placeholder

    rng, files = np.random.default_rng(8), []
    for k, n in enumerate((300, 200, 400)):
        x = rng.normal(size=(n, 3))
        y = (rng.random(n) < 1 / (1 + np.exp(-x @ np.array([1.0, -0.5, 0.25])))).astype("int64")
        files.append(str(tmp_path / f"part-{k}.parquet"))
        pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "y": y}).to_parquet(files[-1])
    frame = dd.read_parquet(files)
    lengths = tuple(pq.read_metadata(f).num_rows for f in files)  # public metadata, as docs/dask.md advises
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=sum(lengths))
    settings = dict(epsilon=2.0, delta=1e-6, x_bounds=(-2.0, 2.0), chains=2, random_seed=1, budget=budget)
    xs, ys = frame[["a", "b", "c"]].to_dask_array(lengths=lengths), frame["y"].to_dask_array(lengths=lengths)
    with _one_call_model(row_placeholder(xs), row_placeholder(ys)):
        with pytest.raises(
            ValueError, match=r"`data` given as Dask arrays must be computable together\. .*a\[:, :-1\]"
        ):
            pmdp.sample(rows={"X": xs, "y": ys}, **settings)
    assert not list(budget.events)  # refused before anything was priced or charged
    released = _seeded_one_call_release(monkeypatch, stop=True)
    both = frame[["a", "b", "c", "y"]].to_dask_array(lengths=lengths)
    with _one_call_model(row_placeholder(both[:, :-1]), row_placeholder(both[:, -1])), pytest.raises(_Released):
        pmdp.sample(rows={"X": both[:, :-1], "y": both[:, -1]}, **settings)
    assert released[0].n_rows == sum(lengths) and list(budget.events)  # released and charged


@pytest.mark.slow  # two NUTS runs on the noise-aware likelihood (compile and sample): about 30 CPU s
def test_the_one_call_route_on_the_cluster_gives_the_in_memory_route_s_result(client, monkeypatch):
    from pymc_dp.backends.dask_rows import row_placeholder

    _seeded_one_call_release(monkeypatch, stop=False)
    (xd, yd), (x, y) = _one_call_rows((700, 1100, 400, 800))
    settings = dict(epsilon=2.0, delta=1e-6, x_bounds=(-2.0, 2.0), chains=2, draws=200, tune=200, random_seed=1)
    with _one_call_model(x, y):
        local = pmdp.sample(progressbar=False, **settings)
    with _one_call_model(row_placeholder(xd), row_placeholder(yd)):
        remote = pmdp.sample(rows={"X": xd, "y": yd}, progressbar=False, **settings)
    np.testing.assert_allclose(remote.posterior["beta"].values, local.posterior["beta"].values, rtol=0, atol=1e-10)
    records = [json.loads(idata.posterior.attrs["dp_accountant"]) for idata in (local, remote)]
    assert records[1]["route"].pop("rows").startswith("Dask arrays")  # the one difference: where the sums ran
    assert records[1] == records[0]
    assert remote.posterior.attrs["dp_epsilon"] == local.posterior.attrs["dp_epsilon"]


# -- DPADVI on the cluster (issue 37, deliver 2): Poisson batches drawn per partition on the workers --------------
def test_dpadvi_s_gradient_on_the_workers_equals_the_in_process_release_at_q_1(client, logistic):
    """q = 1 takes every row and draws nothing: with the same generator the release is the in-process one (1e-10).

    Both branches (n_mc 1: norms through M Mᵀ; n_mc 2: the mean of the mapped gradients), a clip
    bound that binds, noise → 0 (the clipped sums compared) and σ = 1.3 (the same noise draws).
    About 2 CPU s (the gradient graph compiled on the workers).
    """
    from pymc_dp.backends.dask_dpadvi import DaskPoissonGradientSum
    from pymc_dp.mechanisms import NoisyPoissonGradientSum

    rows = _mechanisms(logistic[0])[0]._rows
    cluster = ClusterRows(client, rows, 3, None)
    rng = np.random.default_rng(2)
    try:
        for n_mc in (1, 2):
            thetas = rng.normal(0.0, 0.5, size=(n_mc, 3))
            jacobians = [rng.normal(size=(3, 6)) for _ in range(n_mc)]
            for sigma in (1e-12, 1.3):
                local = NoisyPoissonGradientSum(rows, 0.7, sigma, 1.0)
                remote = DaskPoissonGradientSum(cluster, 0.7, sigma, 1.0, "substitute", reproducible=True)
                a = local.release(thetas, jacobians, np.random.default_rng(9))
                b = remote.release(thetas, jacobians, np.random.default_rng(9))
                np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-10)
            per_row = rows.grad_rows(thetas[0]) @ jacobians[0]
            assert np.mean(np.linalg.norm(per_row, axis=1) > 0.7) > 0.5  # the bound binds for most rows
    finally:
        cluster.close()


def test_dpadvi_s_batch_on_the_workers_is_a_poisson_sample_of_all_rows(client):
    """Each row joins independently with probability q: the batch size is Binomial(N, q) (mean and variance tested).

    Every row's gradient is exactly 1 (y = 1, μ = 0 in a unit normal), so a clipped sum counts
    the batch. 120 releases from the workers' OS entropy: the mean by a z-test at 4.5 standard
    errors, the variance by a two-sided χ²(119) test at total level 1e-5 (a fixed-size batch,
    or partitions sharing a seed, which doubles the variance with two partitions, fail it);
    with reproducible seeds two releases from the same generator are equal and the next
    differ. About 4 CPU s.
    """
    from scipy import stats

    from pymc_dp.backends.dask_dpadvi import DaskPoissonGradientSum, poisson_gradient_sum

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu, 1.0, observed=np.ones(N_ROWS))
    cluster = ClusterRows(client, _mechanisms(model)[0]._rows, 2, None)
    q, releases = 0.2, 120
    try:
        sizes = np.array(
            [poisson_gradient_sum(cluster, np.zeros((1, 1)), [np.eye(1)], 10.0, q, [None, None])[0] for _ in range(120)]
        )
        np.testing.assert_array_equal(sizes, np.round(sizes))  # whole rows: each sampled row counts 1
        mean, var = N_ROWS * q, N_ROWS * q * (1 - q)
        assert abs(sizes.mean() - mean) / np.sqrt(var / releases) < 4.5
        chi2 = (releases - 1) * sizes.var(ddof=1) / var
        assert stats.chi2.ppf(5e-6, releases - 1) < chi2 < stats.chi2.isf(5e-6, releases - 1)
        seeded = DaskPoissonGradientSum(cluster, 10.0, 1e-12, q, "substitute", reproducible=True)
        args = (np.zeros((1, 1)), [np.eye(1)])
        first, again = np.random.default_rng(4), np.random.default_rng(4)
        a, b = seeded.release(*args, first), seeded.release(*args, again)
        np.testing.assert_array_equal(a, b)  # the same seeds: the same batches and noise
        assert seeded.release(*args, first)[0] != a[0]  # the next iteration's seeds: other batches (P = 2e-23 equal)
    finally:
        cluster.close()


def test_a_dpadvi_fit_on_the_cluster_is_the_in_process_fit_with_the_same_accounting(client, logistic):
    """DPADVI(backend=DaskBackend): at q = 1 with reproducible noise the same fit, ε, events and clipping check.

    20 iterations and the clipping check (its histogram on the workers too); the record differs
    only in its backend entry, which says where the batches are drawn. About 6 CPU s.
    """
    model = logistic[0]
    settings = dict(epsilon=3.0, delta=1e-5, sampling_rate=1.0, grad_clip=2.0, reproducible_noise=True, random_seed=3)
    budget, local_budget = (pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=N_ROWS) for _ in range(2))
    remote = pmdp.DPADVI(**settings, budget=budget, backend=pmdp.DaskBackend(client, partitions=3))
    local = pmdp.DPADVI(**settings, budget=local_budget)
    fits = [fit.fit(20, model=model, progressbar=False) for fit in (remote, local)]
    np.testing.assert_allclose(fits[0].mean.eval(), fits[1].mean.eval(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(fits[0].std.eval(), fits[1].std.eval(), rtol=1e-8, atol=1e-10)
    assert remote.privacy_spent() == local.privacy_spent()
    assert budget.spent().epsilon == pytest.approx(remote.privacy_spent().epsilon, rel=1e-12)
    assert budget.events == local_budget.events  # the same charge
    records = [dict(fit._dp_record) for fit in fits]
    backends = [record["settings"].pop("backend") for record in records]
    assert backends[1] == {"name": "default"} and backends[0]["name"] == "dask" and backends[0]["partitions"] == 3
    assert "OS entropy" not in backends[0]["batches"]  # reproducible: seeds from the fit's generator, said so
    assert json.dumps(records[0], sort_keys=True, default=str) == json.dumps(records[1], sort_keys=True, default=str)
    assert remote._row_mechanisms is not None and not hasattr(remote._row_mechanisms, "_cluster")  # rows released


def test_a_dpadvi_fit_on_dask_rows_on_worker_processes_is_the_in_memory_fit(client, logistic):
    """DaskBackend(client, rows=...): a model of row placeholders fitted on Dask arrays' uneven chunks (3 blocks
    computed in the worker processes, kept there) equals the in-memory fit at q = 1 with reproducible noise (1e-10),
    with the same ε and budget events. About 10 CPU s on the client (the fits compile their graphs)."""
    import dask.array as da

    model, x, y = logistic
    rows = {"X": da.from_array(x, chunks=((1200, 800, 1000), 3)), "y": da.from_array(y, chunks=((1200, 800, 1000),))}
    with pm.Model() as placeholders:
        beta = pm.Normal("beta", 0, 2, shape=3)
        pm.Bernoulli("y", logit_p=pmdp.row_placeholder(rows["X"]) @ beta, observed=pmdp.row_placeholder(rows["y"]))
    settings = dict(epsilon=3.0, delta=1e-5, sampling_rate=1.0, grad_clip=2.0, reproducible_noise=True, random_seed=3)
    budgets = [pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=N_ROWS) for _ in range(2)]
    remote = pmdp.DPADVI(**settings, budget=budgets[0], backend=pmdp.DaskBackend(client, rows=rows))
    local = pmdp.DPADVI(**settings, budget=budgets[1])
    fits = [remote.fit(10, model=placeholders, progressbar=False), local.fit(10, model=model, progressbar=False)]
    np.testing.assert_allclose(fits[0].mean.eval(), fits[1].mean.eval(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(fits[0].std.eval(), fits[1].std.eval(), rtol=0, atol=1e-10)
    assert remote.privacy_spent() == local.privacy_spent() and budgets[0].events == budgets[1].events


def test_a_sampler_run_on_dask_rows_on_worker_processes_is_the_in_memory_run(client, logistic):
    """DaskBackend(client, rows=...) with DPPenaltyMH built in sampler_model's copy of a model of row placeholders:
    the Dask arrays' uneven chunks (3 blocks computed in the worker processes, kept there) give the in-memory run's
    draws (1e-10), ε and accountant record (but the backend entry) with reproducible noise. About 5 CPU s on the
    client (both runs compile their graphs)."""
    import dask.array as da

    from pymc_dp.backends.dask_sampler_rows import sampler_model

    model, x, y = logistic
    rows = {"X": da.from_array(x, chunks=((1200, 800, 1000), 3)), "y": da.from_array(y, chunks=((1200, 800, 1000),))}
    with pm.Model() as placeholders:
        beta = pm.Normal("beta", 0, 2, shape=3)
        pm.Bernoulli("y", logit_p=pmdp.row_placeholder(rows["X"]) @ beta, observed=pmdp.row_placeholder(rows["y"]))
    results = []
    for run_model, backend in ((model, None), (sampler_model(placeholders, rows), pmdp.DaskBackend(client, rows=rows))):
        with run_model:
            results.append(_run(run_model, pmdp.DPPenaltyMH(llr_clip=0.5, reproducible_noise=True), backend))
    local, remote = (r.posterior for r in results)
    np.testing.assert_allclose(remote["beta"].values, local["beta"].values, rtol=0, atol=1e-10)
    assert remote.attrs["dp_epsilon"] == local.attrs["dp_epsilon"]
    _same_record(remote, local)


def test_a_failing_dpadvi_task_carries_no_data_text(client, logistic):
    """A worker error in the Poisson-batch sum names its type only; an unknown backend is refused. About 1 CPU s."""
    from pymc_dp.backends.dask_dpadvi import DaskPoissonGradientSum

    model, x, _ = logistic
    cluster = ClusterRows(client, _mechanisms(model)[0]._rows, 2, None)
    try:
        broken = DaskPoissonGradientSum(cluster, 1.0, 1.0, 0.5, "substitute", reproducible=False)
        with pytest.raises(DaskBackendError, match=r"\(WorkerError; its message is withheld") as caught:
            broken.release(np.zeros((1, 3)), [np.ones((5, 2))], np.random.default_rng(0))  # a map of the wrong shape
        text = str(caught.value)
        assert caught.value.__cause__ is None and caught.value.__suppress_context__
        assert not any(f"{v:.4f}"[:6] in text for v in x[:3].ravel())
    finally:
        cluster.close()
    refusal = r"or a pymc_dp\.DaskBackend \(DPADVI's batches on a Dask cluster\)\. Found 'dask'"
    with pytest.raises(ValueError, match=refusal):
        pmdp.DPADVI(epsilon=1.0, delta=1e-5, sampling_rate=0.1, grad_clip=1.0, backend="dask")
