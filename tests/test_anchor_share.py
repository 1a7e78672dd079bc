"""The covariate anchors' share of a release's budget is fixed by public settings before any row is read (issue 34)."""

import numpy as np
import pytest

from pymc_dp.exponential_family import release_statistics
from pymc_dp.exponential_family.anchors import ANCHOR_SHARE, LAST_ANCHOR_PART, anchor_shares


def _release(seed, mechanism):
    rng = np.random.default_rng(seed)
    n = 400
    design = np.column_stack([np.ones(n), rng.uniform(-1.0, 1.0, (n, 2))])
    y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-design @ rng.normal(0.0, 2.0, 3)))).astype(int)
    noise = {"mechanism": "gaussian", "delta": 1e-5} if mechanism == "gaussian" else {}
    return release_statistics(
        "logistic_regression", (design, y), epsilon=1.0, n_features=3, x_bounds=([1.0, -1.0, -1.0], [1.0, 1.0, 1.0]),
        covariate_anchors=2, clipping_check=False, **noise,
    )  # fmt: skip


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_the_anchors_noise_is_the_same_for_any_rows_with_the_same_public_settings(mechanism):
    # < 1 s: two data sets with different labels, covariates and coefficients, the same N, ε, δ and bounds. The split
    # of the budget (ANCHOR_SHARE, LAST_ANCHOR_PART) and so every noise scale is identical: nothing about the rows
    # moves it (privacy contract 2: the spend is computed from public settings before the rows are read).
    first, second = _release(1, mechanism), _release(2, mechanism)
    assert first.scale == second.scale
    assert [a.scale for a in first.covariate_anchors] == [a.scale for a in second.covariate_anchors]
    assert not np.allclose(first.noisy_statistics, second.noisy_statistics)  # the rows did differ


def test_the_shares_sum_to_the_anchor_share_and_the_last_anchor_takes_its_part():
    # < 0.01 s: the split is arithmetic on public settings only (the count of anchors and the share).
    assert anchor_shares(0) == []
    assert anchor_shares(1) == [ANCHOR_SHARE]
    shares = anchor_shares(3)
    assert sum(shares) == pytest.approx(ANCHOR_SHARE)
    assert shares[-1] == pytest.approx(LAST_ANCHOR_PART * ANCHOR_SHARE) and shares[0] == shares[1]
