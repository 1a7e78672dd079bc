"""Privacy of the DP Barker test: Heikkilä et al. (2019), Theorems 1–2 and Corollary 2.

Two mechanisms:

- **Full data** (Theorem 1): the test releases N(Δ, C) with Δ a sum of per-row ratios each
  bounded by B, a Gaussian mechanism with sensitivity 2B (substitute) and variance C, so
  ε(α) = 2αB²/C. pymc-dp accounts it exactly as a Gaussian mechanism (μ = 2B²/C per
  iteration, Sommer et al. 2019, Lemma 12), which is tighter than converting the RDP curve.
- **Subsampled** (Theorem 2 with eq. 22): each iteration draws a fixed-size batch of b rows
  without replacement and releases N(Δ*, C − s²) with per-row ratios bounded by √b/N₀ and
  C = 2. Theorem 2 bounds the RDP of one release on a batch (for α < b/5); Wang, Balle and
  Kasiviswanathan (2019, Theorem 9) amplify it by subsampling without replacement under the
  substitute relation. Since ε(∞) = ∞ for this mechanism, their general bound is exactly
  the paper's eq. (22). Only integer orders are covered.

Everything here depends on public settings only (N, b, T, α); it is evaluated in log space
so that large orders do not overflow.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from pymc_dp._validation import check_finite_positive, check_positive_int, check_unit_interval_open
from pymc_dp.accounting.rdp import rdp_to_epsilon

__all__ = [
    "MAX_BARKER_ORDER",
    "barker_orders",
    "barker_subsampled_rdp",
    "barker_theorem2_rdp",
    "subsampled_barker_epsilon",
    "subsampled_barker_max_iterations",
    "without_replacement_amplified_rdp",
]

#: Largest order used by default; the optimum for δ ≥ 1e-12 and ε ≥ 0.01 lies far below it.
MAX_BARKER_ORDER = 1024


def barker_orders(batch_size: int) -> np.ndarray:
    """Integer orders 2, 3, …, ⌈b/5⌉ − 1 (Theorem 2 needs α < b/5), capped at :data:`MAX_BARKER_ORDER`."""
    b = check_positive_int("batch_size", batch_size)
    top = min(math.ceil(b / 5) - 1, MAX_BARKER_ORDER)
    if top < 2:
        raise ValueError(
            f"`batch_size` must exceed 10: Theorem 2 of Heikkilä et al. (2019) needs α < b/5 for some order "
            f"α ≥ 2. Found {b}."
        )
    return np.arange(2, top + 1, dtype=float)


def barker_theorem2_rdp(orders: np.ndarray, batch_size: int) -> np.ndarray:
    """RDP of one subsampled-Barker release on a batch (Heikkilä et al. 2019, Theorem 2, eq. 21).

    ε(α) = 5/(2b) + ln(2b/(b − 5α))/(2(α − 1)) + 2α/(b − 5α) for 1 < α < b/5, ``inf`` beyond.
    Valid for C = 2 and per-row ratios bounded by √b/N₀.
    """
    b = float(check_positive_int("batch_size", batch_size))
    alpha = np.asarray(orders, dtype=float)
    out = np.full(alpha.shape, math.inf)
    ok = (alpha > 1) & (alpha < b / 5.0)
    a = alpha[ok]
    out[ok] = 5.0 / (2.0 * b) + np.log(2.0 * b / (b - 5.0 * a)) / (2.0 * (a - 1.0)) + 2.0 * a / (b - 5.0 * a)
    return out


def without_replacement_amplified_rdp(orders: np.ndarray, sampling_ratio: float, inner_rdp) -> np.ndarray:
    """RDP at integer ``orders`` of a mechanism run on a batch drawn without replacement.

    Wang, Balle and Kasiviswanathan (2019), Theorem 9, for a mechanism with ε(∞) = ∞
    (so every min{2, (e^{ε(∞)} − 1)^j} equals 2), which is Heikkilä et al. (2019), eq. (22):

        ε′(α) = 1/(α−1) · ln(1 + q² C(α,2) min{4(e^{ε(2)} − 1), 2e^{ε(2)}}
                               + Σ_{j=3}^{α} 2 q^j C(α,j) e^{(j−1)ε(j)}).

    Parameters
    ----------
    orders : array of int
        Integer orders α ≥ 2 (non-integer orders raise).
    sampling_ratio : float
        q = b/N in (0, 1).
    inner_rdp : callable
        ε(j) of the mechanism on a batch, vectorised over integer j.

    Notes
    -----
    Neighbouring relation: substitute (one row replaced; N and b public). Evaluated in log
    space; ``inf`` where some ε(j), j ≤ α, is infinite.
    """
    alpha = np.asarray(orders, dtype=float)
    if np.any(alpha < 2) or np.any(alpha != np.round(alpha)):
        raise ValueError(f"`orders` must be integers ≥ 2 (Theorem 9 covers integer orders). Found {alpha.tolist()}.")
    q = float(sampling_ratio)
    if not 0.0 < q < 1.0:
        raise ValueError(f"`sampling_ratio` must lie in (0, 1). Found {sampling_ratio!r}.")
    top = int(alpha.max())
    j = np.arange(2, top + 1, dtype=float)
    eps_j = np.asarray(inner_rdp(j), dtype=float)
    # log of the j-th term without the binomial coefficient, j ≥ 2.
    log_terms = np.empty_like(j)
    e2 = eps_j[0]
    log_terms[0] = 2.0 * math.log(q) + min(math.log(4.0) + e2 + math.log1p(-math.exp(-e2)), math.log(2.0) + e2)
    log_terms[1:] = math.log(2.0) + j[1:] * math.log(q) + (j[1:] - 1.0) * eps_j[1:]
    out = np.empty_like(alpha)
    for i, a in enumerate(alpha):
        n = int(a)
        jj = j[: n - 1]
        if not np.all(np.isfinite(eps_j[: n - 1])):
            out[i] = math.inf
            continue
        log_binomial = special.gammaln(n + 1.0) - special.gammaln(jj + 1.0) - special.gammaln(n - jj + 1.0)
        total = special.logsumexp(np.concatenate([[0.0], log_binomial + log_terms[: n - 1]]))
        out[i] = total / (n - 1.0)
    return out


def barker_subsampled_rdp(
    n_rows: int, batch_size: int, orders: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-iteration RDP curve of the subsampled DP Barker test: (orders, ε′(orders)).

    Theorem 2 amplified by eq. (22) with q = b/N, on :func:`barker_orders` by default, or
    Theorem 2 alone where that is smaller (large q).
    """
    n = check_positive_int("n_rows", n_rows)
    b = check_positive_int("batch_size", batch_size)
    if b >= n:
        raise ValueError(f"`batch_size` must be smaller than the number of rows ({n}). Found {b}.")
    if orders is None:
        orders = barker_orders(b)
    else:
        orders = np.asarray(orders, dtype=float)
        too_large = orders[orders >= b / 5.0]
        if too_large.size:
            raise ValueError(
                f"`orders` must be below b/5 = {b / 5:g} (Theorem 2 needs b > 5α). Found {too_large.tolist()}."
            )
    inner = barker_theorem2_rdp(orders, b)
    amplified = without_replacement_amplified_rdp(orders, b / n, lambda a: barker_theorem2_rdp(a, b))
    # The general bound carries a factor 2 that can push it above the unamplified curve when q is
    # large; the unamplified curve is valid too (a substituted row is in the batch or not, and a
    # mixture is no further apart than its worst component), so take the smaller.
    return orders, np.minimum(inner, amplified)


def subsampled_barker_epsilon(n_rows: int, batch_size: int, iterations: int, delta: float) -> float:
    """ε at δ of ``iterations`` subsampled DP Barker iterations (all chains together).

    Examples
    --------
    The reference values of Heikkilä et al.'s setting (N = 10⁶, b = 1000, δ = 10⁻⁵):

    >>> round(subsampled_barker_epsilon(10**6, 1000, 1000, 1e-5), 6)
    0.148701
    """
    k = check_positive_int("iterations", iterations)
    delta = check_unit_interval_open("delta", delta)
    orders, rdp = barker_subsampled_rdp(n_rows, batch_size)
    return rdp_to_epsilon(orders, k * rdp, delta)[0]


def subsampled_barker_max_iterations(epsilon: float, delta: float, n_rows: int, batch_size: int) -> int:
    """The largest total number of iterations T (all chains, tuning included) with ε(T) ≤ ``epsilon``.

    Returns 0 when not even one iteration fits.
    """
    epsilon = check_finite_positive("epsilon", epsilon)
    delta = check_unit_interval_open("delta", delta)
    orders, rdp = barker_subsampled_rdp(n_rows, batch_size)

    def fits(t: int) -> bool:
        return rdp_to_epsilon(orders, t * rdp, delta)[0] <= epsilon

    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
        if high > 10**15:
            return low
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
