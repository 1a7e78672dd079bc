"""The perturbation probe on a bounded number of synthetic rows; the refusals it leaves to the shapes (issue 37).

``row_graph._perturbation_probe`` evaluates min(N, ``PROBE_ROWS``) synthetic rows with the row count
left open in the graph's types, so that checking a model costs memory and time independent of N
(a model of ``row_placeholder`` stand-ins of rows on a Dask cluster is checked on the client at
N = 2·10⁷). A graph that cannot be evaluated on so few rows (it fixes N in a shape) is probed on
all N rows as before. What mixes rows with another array of N values (a ``pm.CustomDist`` logp
summing it, a reduction over the row axis, a product contracting it) is refused by the allow-list
walk from the arrays' shapes, never their values: shown here with the probe switched off, on
``sampler_model``'s copy, whose stand-ins hold the public N as a zero-stride view. Cost: about
4 CPU s on Python 3.12 (the probes compile their graphs; no sampler runs).
"""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

import pymc_dp as pmdp
import pymc_dp.row_graph as row_graph
from pymc_dp.model_structure import ModelStructureError

N = 2_000  # above PROBE_ROWS: the bounded path
N_COPY = 1_000_000  # the copy's public N: zero-stride stand-ins, so the tests hold no array of this length


@pytest.fixture
def probed_rows(monkeypatch):
    """The numbers of rows of the synthetic arrays the probe evaluates."""
    seen: list[int] = []
    original = row_graph._synthetic_rows

    def spy(shape, dtype):
        seen.append(int(shape[0]))
        return original(shape, dtype)

    monkeypatch.setattr(row_graph, "_synthetic_rows", spy)
    return seen


def test_the_probe_runs_on_a_bounded_number_of_rows_and_still_catches_mixing(probed_rows):
    x = pytensor.shared(np.random.default_rng(2).normal(size=N), name="x")
    b = pt.scalar("b")
    with pytest.raises(ModelStructureError, match="Changing one row"):
        row_graph._perturbation_probe([b], b * (x - x.mean()), [np.array(1.0)], [x], N)
    assert probed_rows and max(probed_rows) == row_graph.PROBE_ROWS < N
    probed_rows.clear()
    row_graph._perturbation_probe([b], b * x**2, [np.array(1.0)], [x], N)  # row-wise: passes
    assert max(probed_rows) == row_graph.PROBE_ROWS
    assert x.get_value().shape == (N,)  # the user's array is untouched


def test_a_graph_not_evaluable_on_fewer_rows_is_probed_on_all_rows(probed_rows):
    """Rows beside a data-free array of N values: not evaluable on PROBE_ROWS rows, so probed on all N as before."""
    x = pytensor.shared(np.random.default_rng(3).normal(size=N), name="x")
    b = pt.scalar("b")
    positions = pt.arange(N, dtype="float64")  # row i reads entry i: row-wise, accepted
    row_graph._perturbation_probe([b], b * x + positions, [np.array(1.0)], [x], N)
    assert probed_rows == [row_graph.PROBE_ROWS, N]  # tried bounded, then all N rows
    with pytest.raises(ModelStructureError, match="Changing one row"):
        row_graph._perturbation_probe([b], b * (x - x.mean()) + positions, [np.array(1.0)], [x], N)


def test_the_probe_changes_the_last_row_too_and_does_not_trust_a_graph_that_is_nan_everywhere(probed_rows):
    """Review 9: row i reading row i + 1 (a forward shift: nobody reads row 0) and a mixing graph that is NaN on
    every synthetic row (``equal_nan`` would call it unmoved) were passed by the probe alone."""
    x = pytensor.shared(np.random.default_rng(5).normal(size=N), name="x")
    b = pt.scalar("b")
    forward = pt.concatenate([x[1:], x[-1:]])  # row i reads x[i + 1]
    with pytest.raises(ModelStructureError, match="Changing one row"):
        row_graph._perturbation_probe([b], b * forward, [np.array(1.0)], [x], N)
    probed_rows.clear()
    nan_on_the_probed_rows = b * (x - x.mean()) + pt.log(x.shape[0] - 300.0)  # NaN while fewer than 300 rows
    with pytest.raises(ModelStructureError, match="Changing one row"):
        row_graph._perturbation_probe([b], nan_on_the_probed_rows, [np.array(1.0)], [x], N)
    assert probed_rows == [row_graph.PROBE_ROWS, N]  # nothing finite on 257 rows: probed on all N


# -- sampler_model's copy: N public (a zero-stride view), the walk refuses from shapes ------------------------------


def _rows():
    da = pytest.importorskip("dask.array")
    X = da.zeros((N_COPY, 3), chunks=(N_COPY // 4, 3))
    y = da.zeros(N_COPY, chunks=N_COPY // 4, dtype="int64")
    g = da.ones(N_COPY, chunks=N_COPY // 4, dtype="int64")  # another Dask name than y's
    return {"X": X, "y": y, "g": g}


def _summed_in_custom_logp(h):
    w = pytensor.shared(np.zeros(N_COPY), name="W")  # N values held in this process (zeros: no data here)

    def logp(value, mu):
        return pm.logp(pm.Normal.dist(mu + 1e-3 * w.sum(), 1.0), value)

    pm.CustomDist("y", h["X"] @ pm.Normal("beta", 0, 1, shape=3), logp=logp, observed=h["y"].astype("float64"))


def _centred_covariate(h):
    x = h["X"][:, 0]
    pm.Bernoulli("y", logit_p=pm.Normal("b", 0, 1) * (x - x.mean()), observed=h["y"])


def _contracted_over_rows(h):
    gram = h["X"][:, 0] @ h["X"][:, 1]  # a product over the row axis: every row in one number
    pm.Bernoulli("y", logit_p=h["X"][:, 2] + gram * pm.Normal("b", 0, 1), observed=h["y"])


def _glm(h):
    pm.Bernoulli("y", logit_p=h["X"] @ pm.Normal("beta", 0, 1, shape=3), observed=h["y"])


def _grouped(h):
    alpha = pm.Normal("alpha", 0, 1, shape=4)
    pm.Bernoulli("y", logit_p=alpha[h["g"]] + h["X"] @ pm.Normal("beta", 0, 1, shape=3), observed=h["y"])


def _rowwise_custom_logp(h):
    def logp(value, mu):
        return -0.5 * (value - mu) ** 2 - pt.log1p(pt.exp(-mu))

    pm.CustomDist("y", h["X"] @ pm.Normal("beta", 0, 1, shape=3), logp=logp, observed=h["y"].astype("float64"))


def _copy(build):
    from pymc_dp.backends.dask_sampler_rows import sampler_model

    rows = _rows()
    if build is not _grouped:
        rows.pop("g")  # every array of rows must be read
    with pm.Model() as model:
        build({role: pmdp.row_placeholder(array) for role, array in rows.items()})
    return sampler_model(model, rows)


@pytest.mark.parametrize("build", [_summed_in_custom_logp, _centred_covariate, _contracted_over_rows])
def test_the_copy_refuses_a_graph_mixing_rows_from_shapes_without_the_probe(build, monkeypatch):
    """The walk refuses before the probe runs: switched off here, the refusal holds."""
    monkeypatch.setattr(row_graph, "_perturbation_probe", lambda *args, **kwargs: pytest.fail("probe reached"))
    copy = _copy(build)
    with pytest.raises(ModelStructureError, match="not computed row by row"):
        row_graph.row_loglik(copy)


@pytest.mark.parametrize("build", [_glm, _grouped, _rowwise_custom_logp])
def test_the_copy_accepts_rowwise_models_probing_a_bounded_number_of_rows(build, probed_rows):
    """N = 10⁶ public, probed on PROBE_ROWS synthetic rows: no array of N rows is made."""
    _, n_rows, _, _ = row_graph.row_loglik(_copy(build))
    assert n_rows == N_COPY
    assert probed_rows and max(probed_rows) == row_graph.PROBE_ROWS


# -- RowLikelihood's index-mode probe: bounded too, all N rows where the graph fixes N ------------------------------


def _model(kind: str) -> pm.Model:
    rng = np.random.default_rng(4)
    x_values, y_values = rng.normal(size=N), rng.normal(size=N)
    with pm.Model(coords={"obs": range(N)}) as model:
        numpy_rows = kind == "numpy"
        x = x_values if numpy_rows else pm.Data("x", x_values, dims="obs")
        y = y_values if numpy_rows else pm.Data("y_obs", y_values, dims="obs")
        b = pm.Normal("b", 0, 1)
        mean = {"fixed": b * pt.specify_shape(x, (N,)), "count": b * x / x.shape[0]}.get(kind, b * x)
        pm.Normal("y", mean, 1.0, observed=y, **({} if numpy_rows else {"dims": "obs"}))
    return model


@pytest.mark.parametrize("kind", ["data", "numpy"])
def test_the_index_mode_probe_runs_on_a_bounded_number_of_rows(kind, probed_rows):
    from pymc_dp.data import RowLikelihood

    rows = RowLikelihood(_model(kind))
    probed_rows.clear()  # the perturbation probe's, above
    assert rows.subset_mode == "index"
    assert probed_rows and max(probed_rows) == row_graph.PROBE_ROWS


def test_the_index_mode_probe_falls_back_to_all_rows_and_keeps_its_verdicts(probed_rows):
    """A shape fixed to N: not evaluable on fewer rows, probed on all N (the documented slice mode); a value read
    from the row count: refused on the bounded rows as on all of them."""
    from pymc_dp.data import RowLikelihood

    rows = RowLikelihood(_model("fixed"))
    probed_rows.clear()
    assert rows.subset_mode == "slice" and max(probed_rows) == N
    rows = RowLikelihood(_model("count"))
    with pytest.raises(ModelStructureError, match="number of rows from a shape"):
        _ = rows.subset_mode
