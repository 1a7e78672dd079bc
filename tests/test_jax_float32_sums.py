"""``JaxBackend(dtype="float32")``: one replaced row moves each clipped sum by at most its accounted sensitivity.

Issue 33, hole 6: the float32 backend accumulated its clipped sums in float32, so the
rounding of the running total depended on every row and one replaced row could move a
released sum by more than the accounted 2b (the reviewer's 1.17 × 2b at N = 2²⁴). The sums are
now accumulated in float64 (per-row values still float32).

The reproducer: N = 2¹⁶ rows of a normal mean model, all but one far above the mean, so that
every row's clipped term is ±b exactly (ratios: 0.5·y − 0.125 ≈ ±50 against b ≤ 2; gradients
y − μ = ±100 against b ≤ 2); the neighbour flips the one row from −100 to +100. The clipped
sums are called directly, without noise (``std = 0``), at 24 bounds b that are float32 numbers.
The true change is exactly 2b. With float64 sums it is computed exactly: every term is ±b, a
float32 number (24-bit significand), and every partial sum is an integer multiple of b below
2¹⁶·b, so it needs at most 24 + 17 < 53 bits and no addition rounds, in any order. So the test
asks for |ΔS| ≤ 2b with no tolerance. With float32 sums the partial sums round at every level of
the reduction (an integer times a 24-bit b does not fit 24 bits), and on the old code
(``edd15ad``) the largest |ΔS|/(2b) over these bounds was 1.0022 for the ratio sum and the Barker
batch mean, 1.0030 for the gradient sum, 1.0021 for DPADVI's batch sum and 1.0028 for the
linear-predictor form (measured on CPU JAX 0.10.2; the excess grows with N: for the ratio sum
1.00013 at N = 2¹², 1.046 at 2²⁰, against 50 bounds).
"""

import numpy as np
import pymc as pm
import pytest

pytest.importorskip("jax")

from pymc_dp.backends.jax_rows import JaxRowMechanisms
from pymc_dp.data import RowLikelihood
from pymc_dp.mechanisms import RowMechanisms

N_ROWS = 1 << 16
CHANGED = N_ROWS // 3
THETA, PROPOSAL = np.array([0.0]), np.array([0.5])
#: Clip bounds that are float32 numbers (so that the float64 sums of ±b are exact: module docstring).
BOUNDS = np.random.default_rng(1).uniform(0.5, 2.0, size=24).astype(np.float32).astype(np.float64)


def _device_rows(y: np.ndarray):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 10)
        pm.Normal("y", mu, 1.0, observed=y)
    return JaxRowMechanisms(RowMechanisms(RowLikelihood(model)), dtype="float32").device_rows


@pytest.fixture(scope="module")
def neighbours():
    """The float32 JAX rows of a data set and of its neighbour: row ``CHANGED`` replaced (−100 → +100)."""
    y = np.full(N_ROWS, 100.0)
    y[CHANGED] = -100.0
    return _device_rows(y), _device_rows(np.full(N_ROWS, 100.0))


def test_one_replaced_row_moves_the_float32_clipped_ratio_sum_by_at_most_2b(neighbours):
    changes = []
    for b in BOUNDS:
        sums = []
        for rows in neighbours:
            clipped, _ = rows.noisy_ratio_sum(PROPOSAL, rows.loglik(THETA), b, 0.0, 0.0)
            sums.append(clipped)
        changes.append(abs(sums[1] - sums[0]) / (2 * b))
    assert max(changes) <= 1.0
    assert min(changes) == 1.0  # the row's term did move by 2b: the sums were not clipped away


def test_one_replaced_row_moves_the_float32_clipped_gradient_sums_by_at_most_2b(neighbours):
    whole, batch = [], []
    rows_index = np.arange(N_ROWS)
    for b in BOUNDS:
        sums = [rows.noisy_gradient_sum(THETA, b, 0.0, np.zeros(1)) for rows in neighbours]
        whole.append(np.linalg.norm(sums[1] - sums[0]) / (2 * b))
        # DPADVI's Poisson-batch sum (one draw, Jacobian [1, 0]: the row's gradient and a zero), on all rows
        sums = [
            rows.noisy_batch_gradient_sum(THETA[None], np.array([[[1.0, 0.0]]]), b, 0.0, np.zeros(2), rows_index)
            for rows in neighbours
        ]
        batch.append(np.linalg.norm(sums[1] - sums[0]) / (2 * b))
    assert max(whole) <= 1.0 and min(whole) == 1.0
    assert max(batch) <= 1.0 and min(batch) == 1.0


@pytest.fixture(scope="module")
def linear_neighbours():
    """As ``neighbours`` for y ~ Normal(X @ β, 1) with X = [1, 0] per row: the linear-predictor clipped sum."""

    def device_rows(y):
        x = np.column_stack([np.ones(N_ROWS), np.zeros(N_ROWS)])
        with pm.Model() as model:
            beta = pm.Normal("beta", 0, 10, shape=2)
            pm.Normal("y", pm.math.dot(x, beta), 1.0, observed=y)
        rows = JaxRowMechanisms(RowMechanisms(RowLikelihood(model)), dtype="float32").device_rows
        assert rows.gradient_mode == "linear"
        return rows

    y = np.full(N_ROWS, 100.0)
    y[CHANGED] = -100.0
    return device_rows(y), device_rows(np.full(N_ROWS, 100.0))


def test_one_replaced_row_moves_the_float32_linear_form_gradient_sum_by_at_most_2b(linear_neighbours):
    changes = []
    for b in BOUNDS:
        sums = [rows.noisy_gradient_sum(np.zeros(2), b, 0.0, np.zeros(2)) for rows in linear_neighbours]
        changes.append(np.linalg.norm(sums[1] - sums[0]) / (2 * b))
    assert max(changes) <= 1.0 and min(changes) == 1.0


def test_one_replaced_row_moves_the_float32_barker_batch_mean_by_at_most_2b_over_the_batch(neighbours):
    rows_index = np.arange(N_ROWS)  # a batch of all rows: B = 2¹⁶, so the mean divides exactly
    changes = []
    for b in BOUNDS:
        means = [rows.batch_ratio_moments(THETA, PROPOSAL, b, rows_index)[0] for rows in neighbours]
        changes.append(abs(means[1] - means[0]) * N_ROWS / (2 * b))
    assert max(changes) <= 1.0 and min(changes) == 1.0
