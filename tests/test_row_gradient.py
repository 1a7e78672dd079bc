"""The summed-seed form of the reverse-mode per-row gradient (issue 38: DPHMC on PyMC 6).

Where θ meets the rows only in elementwise broadcasts, ``reverse_jacobian`` differentiates the
summed log-likelihood with respect to per-row copies of those broadcasts
(``summed_seed_jacobian``): PyMC's own gradient graph before its sum over rows. These tests check
that it gives the same matrix as the vectorised reverse form and forward mode (1e-10), that a
change of one row changes only that row of the matrix (privacy contract, rule 7), that it is
refused wherever θ reaches the rows another way (then the vectorised form is used), and that the
compiled graph is the lean one. Cost: about 10 s (3.12), most of it compiling; the MvNormal model's matrices are
compiled once for the three tests that read them.
"""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

from pymc_dp.data import RowLikelihood
from pymc_dp.row_graph import (
    _check_rows_on_axis0,
    _NoSummedSeedForm,
    forward_jacobian,
    reverse_jacobian,
    summed_seed_jacobian,
    vectorised_reverse_jacobian,
)

N = 40


def mvnormal_mean(seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(3, 3))
    cov = a @ a.T / 3 + np.eye(3)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5, size=3)
        pm.MvNormal("x", mu, cov=cov, observed=rng.multivariate_normal(np.zeros(3), cov, size=N))
    return model


def student_t_location_scale(seed=0):
    """Every parameter (location, a transformed scale and degrees of freedom) meets the rows elementwise."""
    rng = np.random.default_rng(seed)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        sigma = pm.HalfNormal("sigma", 2)
        nu = pm.Gamma("nu", 2, 0.1)
        pm.StudentT("y", nu=nu, mu=mu, sigma=sigma, observed=rng.standard_t(4, size=N))
    return model


def regression(seed=0):
    """θ reaches the rows through a matrix product: no summed-seed form."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, 2))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, size=2)
        pm.Normal("y", x @ b, 1.0, observed=rng.normal(size=N))
    return model


def _op_names(function):
    """The compiled graph's ops by name (an elementwise op by its scalar op: ``Neg``, ``Mul``)."""
    ops = [node.op for node in function.maker.fgraph.apply_nodes]
    return [type(getattr(op, "scalar_op", op)).__name__ for op in ops]


def _graphs(model):
    rows = RowLikelihood(model)
    assert rows.subset_mode == "index"
    batch, lik = rows._batch_graph()
    return rows, batch, lik


def _jacobians(model):
    rows, batch, lik = _graphs(model)
    graphs = {
        "summed": summed_seed_jacobian(batch, lik, rows._theta, rows.n_params),
        "vectorised": vectorised_reverse_jacobian(batch, lik, rows._theta, rows.n_params),
        "forward": forward_jacobian(lik, rows._theta, rows.n_params),
    }
    return rows, {name: rows._compile([rows._theta, *batch], g) for name, g in graphs.items()}


@pytest.fixture(scope="module")
def mvnormal_jacobians():
    """The MvNormal model's three compiled matrices, built once for the tests that read them (compiling is the cost)."""
    return _jacobians(mvnormal_mean())


@pytest.mark.parametrize("build", [mvnormal_mean, student_t_location_scale])
def test_summed_seed_gives_the_vectorised_and_forward_matrices(build, request):
    built = request.getfixturevalue("mvnormal_jacobians") if build is mvnormal_mean else _jacobians(build())
    rows, functions = built
    theta = rows.prior.initial_theta + np.random.default_rng(3).normal(0, 0.3, rows.n_params)
    data = [v.get_value(borrow=True) for v in rows._row_index_vars]
    matrices = {name: fn(theta, *data) for name, fn in functions.items()}
    assert matrices["summed"].shape == (N, rows.n_params)
    for other in ("vectorised", "forward"):
        np.testing.assert_allclose(matrices["summed"], matrices[other], rtol=1e-10, atol=1e-10)
    # One row changed: only that row of the matrix moves (one row influences only its own term).
    changed = [d.copy() for d in data]
    changed[0][7] = changed[0][7] + 1.5
    moved = functions["summed"](theta, *changed)
    assert not np.allclose(moved[7], matrices["summed"][7])
    np.testing.assert_array_equal(np.delete(moved, 7, axis=0), np.delete(matrices["summed"], 7, axis=0))
    # The matrix RowLikelihood uses (summed seed on Numba, vectorised on PyTensor's C backend) agrees.
    np.testing.assert_allclose(rows.grad_rows(theta), matrices["summed"], rtol=1e-10, atol=1e-10)


def test_no_summed_seed_form_through_a_matrix_product_falls_back_to_the_vectorised_form():
    rows, batch, lik = _graphs(regression())
    with pytest.raises(_NoSummedSeedForm, match="Dot"):
        summed_seed_jacobian(batch, lik, rows._theta, rows.n_params)
    fallback = reverse_jacobian(batch, lik, rows._theta, rows.n_params)
    theta = np.array([0.3, -0.2])
    data = [v.get_value(borrow=True) for v in rows._row_index_vars]
    expected = rows._compile([rows._theta, *batch], forward_jacobian(lik, rows._theta, rows.n_params))(theta, *data)
    got = rows._compile([rows._theta, *batch], fallback)(theta, *data)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


def test_a_broadcast_whose_rows_are_not_on_axis_0_is_refused():
    # Rows on axis 1 (the data transposed) and a scalar of θ broadcast over both axes: a per-row copy
    # along axis 0 would be a copy per column. Refused from the graph's shapes.
    x = pt.matrix("x_batch", shape=(None, 3))
    theta = pt.vector("theta", shape=(None,))
    term = x.T * theta[0]
    lik = term.sum(axis=0)
    with pytest.raises(_NoSummedSeedForm, match="another axis"):
        _check_rows_on_axis0([term], [x])
    with pytest.raises(_NoSummedSeedForm):
        summed_seed_jacobian([x], lik, theta, 1)
    _check_rows_on_axis0([x * theta[0]], [x])  # rows on axis 0: accepted


def test_the_compiled_summed_seed_graph_has_no_reshape_seed_or_scatter(mvnormal_jacobians):
    # The lean form: the solves of PyMC's own gradient, no reshapes of the N x P matrix around them,
    # no multiply by the seed's ones and no scatter into a zero matrix (what the vectorised form held),
    # no negations around the solves (solve(A, -B) taken as -solve(A, B): the same values bit for bit).
    _, functions = mvnormal_jacobians
    names = _op_names(functions["summed"])
    for dearer in ("Reshape", "IncSubtensor", "Alloc", "AdvancedIncSubtensor", "Neg"):
        assert dearer not in names, names
    vectorised = _op_names(functions["vectorised"])
    assert "Reshape" in vectorised  # what the test guards against, present in the other form


def test_taking_negations_out_of_solves_changes_no_bit(monkeypatch, mvnormal_jacobians):
    import pymc_dp.row_graph

    rows, functions = mvnormal_jacobians
    batch, lik = rows._batch_graph()
    theta = np.array([0.4, -1.1, 2.0])
    data = [v.get_value(borrow=True) for v in rows._row_index_vars]
    lean = functions["summed"]
    monkeypatch.setattr(pymc_dp.row_graph, "_negations_out_of_solves", lambda jacobian: jacobian)
    plain = rows._compile([rows._theta, *batch], summed_seed_jacobian(batch, lik, rows._theta, rows.n_params))
    np.testing.assert_array_equal(lean(theta, *data), plain(theta, *data))
    assert "Neg" in _op_names(plain)
