"""Secret batches: fixed-size sampling without replacement and Poisson sampling."""

from __future__ import annotations

import math

import numpy as np

from pymc_dp._validation import check_sampling_rate
from pymc_dp.mechanisms.noise import SecureNoise

__all__ = ["poisson_sample", "sample_without_replacement"]


def sample_without_replacement(rng: np.random.Generator | SecureNoise, n_rows: int, batch_size: int) -> np.ndarray:
    """A uniformly random subset of ``batch_size`` distinct row indices out of ``n_rows``.

    The fixed-size sampling without replacement that subsampling amplification by Wang,
    Balle and Kasiviswanathan (2019) assumes. The subset is secret: draw it from the
    mechanism-noise generator (:func:`mechanism_rng`: OS entropy by default).
    """
    if not 0 < batch_size < n_rows:
        raise ValueError(f"`batch_size` must lie in 1..{n_rows - 1} (fewer than the rows). Found {batch_size}.")
    return np.asarray(rng.choice(n_rows, batch_size, replace=False), dtype=np.int64)


def poisson_sample(rng: np.random.Generator | SecureNoise, n_rows: int, sampling_rate: float) -> np.ndarray:
    """Poisson sampling: every row of ``n_rows`` joins the batch independently with probability q.

    The batch size is random (Binomial(N, q)); this is the sampling that the Poisson
    subsampled-Gaussian accountant assumes. The included rows are found by their gaps, which
    in a sequence of independent Bernoulli(q) trials are independent Geometric(q) variables:
    the same distribution at O(qN) cost, from a NumPy generator or from
    :class:`SecureNoise` (``SecureNoise.geometric``: the inverse CDF of a 53-bit uniform, as
    NumPy's). The batch is secret: draw it from the mechanism-noise generator. Returns the
    sorted row indices.
    """
    q = check_sampling_rate("sampling_rate", sampling_rate)
    if q == 1.0:
        return np.arange(n_rows, dtype=np.int64)
    expected = n_rows * q
    chunk = int(expected + 6.0 * math.sqrt(expected) + 8)
    # A gap past the last row ends the batch whatever its length: held at N + 1, so the sums cannot overflow.
    positions = np.cumsum(np.minimum(rng.geometric(q, size=chunk), n_rows + 1)) - 1  # index of each included row
    while positions[-1] < n_rows:  # rarely: more gaps are needed to pass the last row
        gaps = np.minimum(rng.geometric(q, size=chunk), n_rows + 1)
        positions = np.concatenate([positions, positions[-1] + np.cumsum(gaps)])
    return positions[: np.searchsorted(positions, n_rows)].astype(np.int64, copy=False)
