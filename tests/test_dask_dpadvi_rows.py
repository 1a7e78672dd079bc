"""DPADVI on rows that never leave the cluster (issue 37, deliver 2): a model of row placeholders, Dask rows.

``pmdp.DPADVI(..., backend=pmdp.DaskBackend(client, rows={"X": X, "y": y}))`` fits a model built on
``pmdp.row_placeholder`` stand-ins; each row chunk of the Dask arrays is computed where Dask places
it, after the charge, and the Poisson batches and clipped sums run there. What is checked: with
reproducible noise the fit equals the in-memory fit at q = 1 and the fit on rows scattered from the
client at q < 1 (the same partitions, so the same per-partition seeds) to 1e-10, with the same ε,
budget events and accountant record (but its backend entry); the budget is charged before any
block is computed; a failing block names its exception's type only; refusals from metadata name
their parameter and charge nothing. On a ``LocalCluster(processes=False)`` (threads of this
process: no worker start-up); the test on worker processes is in tests/test_dask_backend.py.
About 25 CPU s in all on Python 3.12 (mostly the compilation of each model's per-row graphs).
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

client = dask_shared.client  # the module-scoped LocalCluster fixture, shared with the other Dask row tests
CHUNKS = (200, 200, 200)  # the scattered path's 3 partitions of 600 rows (np.linspace): the same seed per partition
BETA = np.array([1.0, -0.5, 0.25])


def _rows(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N_ROWS, 3))
    y = (rng.random(N_ROWS) < 1 / (1 + np.exp(-(x @ BETA)))).astype("int64")
    return x, y


def _model(x, y) -> pm.Model:
    """Logistic regression on ``x``, ``y``: arrays held in the model, or placeholders (the rows' dim has length N)."""
    with pm.Model(coords={"row": np.arange(N_ROWS), "feature": ["a", "b", "c"]}) as model:
        beta = pm.Normal("beta", 0.0, 2.0, dims="feature")
        pm.Bernoulli("y", logit_p=x @ beta, observed=y, dims="row")
    return model


def _dask_rows(x, y, chunks=CHUNKS) -> dict:
    return {"X": da.from_array(x, chunks=(chunks, 3)), "y": da.from_array(y, chunks=(chunks,))}


def _placeholder_model(rows: dict) -> pm.Model:
    return _model(pmdp.row_placeholder(rows["X"]), pmdp.row_placeholder(rows["y"]))


SETTINGS = dict(epsilon=3.0, delta=1e-5, grad_clip=2.0, reproducible_noise=True, random_seed=3)


def _fit(model, q, backend=None, iterations=15):
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=N_ROWS)
    extra = {} if backend is None else {"backend": backend}
    fit = pmdp.DPADVI(**SETTINGS, sampling_rate=q, budget=budget, **extra)
    return fit, fit.fit(iterations, model=model, progressbar=False), budget


def _same_fit(a, b) -> None:
    """Two fits (DPADVI, approximation, budget): equal parameters (1e-10), ε, charge and record (but the backend)."""
    (fit_a, approx_a, budget_a), (fit_b, approx_b, budget_b) = a, b
    np.testing.assert_allclose(approx_a.mean.eval(), approx_b.mean.eval(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(approx_a.std.eval(), approx_b.std.eval(), rtol=0, atol=1e-10)
    assert fit_a.privacy_spent() == fit_b.privacy_spent()
    assert budget_a.events == budget_b.events
    records = [dict(approx._dp_record) for approx in (approx_a, approx_b)]
    for record in records:
        record["settings"] = {k: v for k, v in record["settings"].items() if k != "backend"}
    assert json.dumps(records[0], sort_keys=True, default=str) == json.dumps(records[1], sort_keys=True, default=str)


def test_a_fit_on_dask_rows_equals_the_in_memory_fit_and_the_scattered_fit(client):
    """q = 1: the in-memory fit (no seed drawn); q = 0.2: the fit on scattered rows (same partitions, same seeds).

    15 iterations each and the clipping check (its histogram on the workers). The record says
    where the rows were. (At q < 1 the in-memory fit draws one batch over all rows from one generator: other
    batches, another fit.) About 12 CPU s (four fits, each compiling its graphs).
    """
    x, y = _rows()
    rows = _dask_rows(x, y)
    held, placeholders = _model(x, y), _placeholder_model(rows)
    partitioned = _fit(placeholders, 1.0, pmdp.DaskBackend(client, rows=rows))
    _same_fit(partitioned, _fit(held, 1.0))
    backend = partitioned[1]._dp_record["settings"]["backend"]
    assert backend["name"] == "dask" and backend["rows"].startswith("Dask arrays ['X', 'y']")
    assert "OS entropy" not in backend["batches"]  # reproducible: seeds from the fit's generator, said so
    scattered = _fit(held, 0.2, pmdp.DaskBackend(client, partitions=3))
    partitioned = _fit(placeholders, 0.2, pmdp.DaskBackend(client, rows=rows))
    _same_fit(partitioned, scattered)


#: The budget a test watches and its events when each block was computed (the workers are threads of this process,
#: and a module-level function is pickled by reference: the blocks see these objects, not copies).
_WATCHED: dict = {}


def _watched_block(k, part, fail=False):
    _WATCHED["seen"].append(len(_WATCHED["budget"].events))
    if fail:
        raise RuntimeError("row 7 holds 0.123456789")
    x, y = _rows(k)
    return x[:200] if part == "x" else y[:200]


def test_the_fit_is_charged_before_any_block_is_computed_and_a_failing_block_withholds_its_text(client):
    """Blocks made where their tasks run (no row on the client) record the budget's events when they are computed.

    Every block is computed after the fit's charge, once per fit (kept on its worker for every
    iteration), and again after a refine's charge; a block that raises (its message quoting a value) stops the fit with
    DaskBackendError naming the exception's type only, and the budget keeps the charge.
    About 4 CPU s.
    """
    budget = _WATCHED["budget"] = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=N_ROWS)
    seen = _WATCHED["seen"] = []

    def arrays(fail=False):
        make = dask.delayed(_watched_block, pure=False)
        return {
            "X": da.concatenate([da.from_delayed(make(k, "x"), (200, 3), float) for k in range(3)]),
            "y": da.concatenate([da.from_delayed(make(k, "y", fail and k == 1), (200,), "int64") for k in range(3)]),
        }

    rows = arrays()
    settings = {**SETTINGS, "epsilon": None, "noise_multiplier": 1.0}  # σ set: the refine's iterations fit the budget
    fit = pmdp.DPADVI(**settings, sampling_rate=0.3, budget=budget, backend=pmdp.DaskBackend(client, rows=rows))
    approx = fit.fit(5, model=_placeholder_model(rows), progressbar=False)
    assert np.all(np.isfinite(approx.mean.eval()))
    assert len(seen) == 6 and min(seen) >= 1  # 3 blocks × 2 arrays, each once, all after the charge
    charged = len(budget.events)
    fit.refine(3, progressbar=False)  # the workers released the blocks when the fit ended: made again, after its charge
    assert len(seen) == 12 and min(seen[6:]) > charged
    rows = arrays(fail=True)
    failing = pmdp.DPADVI(**SETTINGS, sampling_rate=0.3, budget=budget, backend=pmdp.DaskBackend(client, rows=rows))
    charged = len(budget.events)
    with pytest.raises(DaskBackendError, match=r"partitions \(RuntimeError; its message is withheld") as caught:
        failing.fit(5, model=_placeholder_model(rows), progressbar=False)
    assert "0.123" not in str(caught.value) and caught.value.__cause__ is None and caught.value.__suppress_context__
    assert len(budget.events) > charged  # charged before the blocks were read: the charge stays


def _refused(client, budget, model, rows, error, match):
    with pytest.raises(error, match=match):
        backend = pmdp.DaskBackend(client, rows=rows)
        fit = pmdp.DPADVI(**SETTINGS, sampling_rate=0.5, budget=budget, backend=backend)
        fit.fit(5, model=model, progressbar=False)
    assert not budget.events


def _with_summed_data(rows: dict) -> pm.Model:
    """The placeholder model plus ``pm.Data`` of the rows' length held in this process, summed into the predictor."""
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 2.0, shape=3)
        w = pm.Data("w", np.random.default_rng(1).normal(size=N_ROWS))
        logit_p = pmdp.row_placeholder(rows["X"]) @ beta + 1e-3 * w.sum()
        pm.Bernoulli("y", logit_p=logit_p, observed=pmdp.row_placeholder(rows["y"]))
    return model


def test_refusals_name_the_parameter_read_nothing_and_charge_nothing(client):
    """Each refusal comes from metadata or the graph (no block is computed) and leaves the budget without an event.

    About 6 CPU s (the models that reach the row checks are compiled).
    """
    budget = pmdp.PrivacyBudget(epsilon=5.0, delta=1e-5, n_rows=N_ROWS)
    x, y = _rows()
    rows = _dask_rows(x, y)
    model = _placeholder_model(rows)
    unknown = {"X": rows["X"][rows["y"] > 0], "y": rows["y"][rows["y"] > 0]}  # chunk sizes nan: a private N
    other = _dask_rows(x + 1.0, y)  # another array (another Dask name) of the same shape and dtype
    mixed = _model(pmdp.row_placeholder(rows["X"]), y)  # the outcome held in this process
    cases = [
        (model, None, pmdp.ModelStructureError, r"`model` must hold its rows.*DaskBackend\(client, rows="),
        (model, [rows["X"], rows["y"]], TypeError, r"`rows` must be a non-empty dict of Dask arrays by role"),
        (model, {"X": x, "y": rows["y"]}, TypeError, r'`rows\["X"\]` must be a dask.array array'),
        (model, unknown, ValueError, r'`rows\["X"\]` must have known chunk sizes'),
        (model, {"X": rows["X"], "y": rows["y"][:-1]}, ValueError, r"`rows` must give every array the same number"),
        (model, {"X": other["X"], "y": rows["y"]}, ValueError, r"`rows` must give the Dask array of every row place"),
        (model, {**rows, "z": rows["y"] + 1}, ValueError, r"`rows` must give only the Dask arrays.*\['z'\]"),
        (model, {**rows, "z": rows["y"]}, ValueError, r"`rows` must give a different Dask array for each role"),
        (mixed, rows, ValueError, r"`rows` must give only the Dask arrays.*\['y'\]"),
        (mixed, {"X": rows["X"]}, ValueError, r"`rows` must hold every row the model reads.*\(600,\), N = 600"),
        # An in-process length-N array beside the placeholders (the review's case: its sum mixes every row's term;
        # the same model with in-memory rows is refused by the row-wise checks)
        (_with_summed_data(rows), rows, ValueError, r"`rows` must hold every row the model reads.*Found w with"),
        # The same, read only inside a distribution's log-density (the second review's case: not in the model's
        # graph, only in the per-row log-likelihood's)
        (with_summed_array_in_logp(rows), rows, ValueError, r"`rows` must hold every row the model reads.*Found W"),
    ]
    for case_model, case_rows, error, match in cases:
        if case_rows is None:  # a model of placeholders on a backend without rows: it would be fitted to the zeros
            with pytest.raises(error, match=match):
                backend = pmdp.DaskBackend(client)
                pmdp.DPADVI(**SETTINGS, sampling_rate=0.5, budget=budget, backend=backend).fit(5, model=case_model)
            assert not budget.events
            continue
        _refused(client, budget, case_model, case_rows, error, match)
    with pytest.raises(ValueError, match=r"`partitions` must be None with `rows`"):
        pmdp.DaskBackend(client, partitions=2, rows=rows)
    with pytest.raises(ValueError, match=r"`backend` with `rows` must run steps built in .*sampler_model"):
        pmdp.DaskBackend(client, rows=rows).check([pmdp.DPPenaltyMH(model=_model(x, y))], {})


def test_the_one_call_route_s_backend_for_dask_rows(client):
    """What routes.py's DPADVI route takes for ``rows=`` (dpadvi_route_backend): the client given, or the default."""
    from pymc_dp.backends.dask_partitions import dpadvi_route_backend

    x, y = _rows()
    rows = _dask_rows(x, y)
    given = dpadvi_route_backend(pmdp.DaskBackend(client, timeout=30.0), rows)
    assert given.client is client and given.rows == rows and given.timeout == 30.0
    assert dpadvi_route_backend(None, rows).client is distributed.default_client()
    assert dpadvi_route_backend("default", rows).rows == rows  # the route's own default
    with pytest.raises(ValueError, match=r"`backend` must be None or a pymc_dp.DaskBackend without rows"):
        dpadvi_route_backend(given, rows)


def _student_t_on_placeholders(n_rows: int = 2000, n_covariates: int = 18) -> tuple[pm.Model, dict]:
    """A Student-t regression (no released-statistics family; P = 20 on 2,000 rows: release_once cannot resolve its
    curvature, so the plan fits it with DPADVI, as tests/test_one_call.py checks in memory) on placeholders."""
    rng = np.random.default_rng(9)
    x = rng.normal(size=(n_rows, n_covariates)).clip(-3, 3)
    y = 0.5 + x @ np.linspace(1.0, -0.5, n_covariates) + 0.8 * rng.standard_t(4, size=n_rows)
    rows = {"X": da.from_array(x, chunks=(1000, n_covariates)), "y": da.from_array(y, chunks=1000)}
    with pm.Model() as model:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 2.5, shape=n_covariates)
        pm.StudentT("y", nu=4, mu=a + pmdp.row_placeholder(rows["X"]) @ b, sigma=pm.HalfNormal("s", 2),
                    observed=pmdp.row_placeholder(rows["y"]))  # fmt: skip
    return model, rows


def test_the_one_call_route_hands_dask_rows_to_its_dpadvi_fit(client, monkeypatch):
    """``pmdp.sample(epsilon=..., rows=...)`` where the plan fits DPADVI: the fit gets a DaskBackend holding the rows.

    The fit itself is stopped at its construction (the whole route on the cluster is the slow test below, about 45
    CPU s): what is checked here is the wiring, and that nothing was charged before the fit would have been.
    """
    import pymc_dp.routes

    class Stop(Exception):
        pass

    seen = {}

    def spy(**settings):
        seen.update(settings)
        raise Stop

    model, rows = _student_t_on_placeholders()
    assert pmdp.plan(model, epsilon=4.0, delta=1e-6).one_call_route == "DPADVI"
    monkeypatch.setattr(pymc_dp.routes, "DPADVI", spy)
    budget = pmdp.PrivacyBudget(epsilon=6.0, delta=1e-6, n_rows=2000)
    with model, pytest.raises(Stop):
        pmdp.sample(epsilon=4.0, delta=1e-6, rows=rows, grad_clip=3.0, budget=budget, progressbar=False)
    backend = seen["backend"]
    assert isinstance(backend, pmdp.DaskBackend) and backend.rows == rows and backend.client is client
    assert budget.spent().epsilon == 0.0


@pytest.mark.slow  # about 45 CPU s on Python 3.12 (the planned DPADVI iterations, each a round trip to the workers)
def test_the_one_call_route_fits_dpadvi_on_dask_rows_where_the_plan_says(client):
    """The whole route on the cluster: ε, the budget's one charge and the record's route and backend as planned."""
    model, rows = _student_t_on_placeholders()
    plan = pmdp.plan(model, epsilon=4.0, delta=1e-6)
    budget = pmdp.PrivacyBudget(epsilon=6.0, delta=1e-6, n_rows=2000)
    with model:
        idata = pmdp.sample(
            epsilon=4.0, delta=1e-6, rows=rows, draws=50, grad_clip=3.0, budget=budget, progressbar=False
        )
    record = json.loads(idata.posterior.attrs["dp_accountant"])
    assert idata.posterior.attrs["dp_route"] == "DPADVI" and record["settings"]["backend"]["name"] == "dask"
    assert record["iterations"] == plan.method("DPADVI").iterations
    assert pmdp.privacy_spent(idata).epsilon == pytest.approx(4.0, rel=1e-6)
    assert budget.spent().epsilon == pytest.approx(4.0, rel=1e-6) and len(budget.labels) == 1
    assert set(idata.posterior.data_vars) == {"a", "b", "s"}
