"""Rényi-DP curves and their conversion to (ε, δ).

The conversion is the improved one of Balle et al. (2020, Theorem 21), equal to Canonne,
Kamath and Steinke (2020, Proposition 12):

    ε = min_α [ r(α) + log(1 − 1/α) − (log δ + log α)/(α − 1) ],

computed by ``dp_accounting.rdp.rdp_privacy_accountant.compute_epsilon``. The basic
conversion r(α) + log(1/δ)/(α − 1) (Mironov 2017, Proposition 3) is always larger and is
not used.

References
----------
.. [1] Balle, B., Barthe, G., Gaboardi, M., Hsu, J. and Sato, T. (2020). Hypothesis testing
   interpretations and Rényi differential privacy. AISTATS, Theorem 21.
.. [2] Mironov, I. (2017). Rényi differential privacy. CSF, Proposition 3.
"""

from __future__ import annotations

import numpy as np
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

from pymc_dp._validation import check_unit_interval_open

__all__ = ["DEFAULT_ORDERS", "gaussian_rdp", "rdp_to_epsilon"]

#: The order grid of ``dp_accounting.rdp.RdpAccountant`` (1.1 to 10.9 in steps of 0.1, 12 to
#: 63, 128, 256, 512, 1024) extended with every integer order from 11 to 256, which
#: subsampled mechanisms need. Curves that are not finite at an order return ``inf`` there.
DEFAULT_ORDERS: np.ndarray = np.unique(
    np.concatenate(
        [
            1.0 + np.arange(1, 100) / 10.0,
            np.arange(11, 257, dtype=float),
            np.array([512.0, 1024.0]),
        ]
    )
)


def gaussian_rdp(orders: np.ndarray, mu: float) -> np.ndarray:
    """RDP curve r(α) = α μ of a Gaussian composition with total μ (= zCDP ρ)."""
    return np.asarray(orders, dtype=float) * float(mu)


def rdp_to_epsilon(orders: np.ndarray, rdp: np.ndarray, delta: float) -> tuple[float, float]:
    """Convert an RDP curve to (ε, δ) with the improved conversion.

    Parameters
    ----------
    orders : array of float
        Orders α > 1.
    rdp : array of float
        r(α) at those orders (``inf`` where the curve is not finite).
    delta : float
        Target δ in (0, 1).

    Returns
    -------
    (float, float)
        ε and the order attaining it.
    """
    delta = check_unit_interval_open("delta", delta)
    orders = np.asarray(orders, dtype=float)
    rdp = np.asarray(rdp, dtype=float)
    if orders.shape != rdp.shape or orders.ndim != 1:
        raise ValueError(
            f"`orders` and `rdp` must be 1-d arrays of equal length. Found shapes {orders.shape} and {rdp.shape}."
        )
    if np.any(np.isnan(rdp)):
        raise ValueError(f"`rdp` must not contain NaN. Found NaN at orders {orders[np.isnan(rdp)].tolist()}.")
    eps, order = compute_epsilon(orders.tolist(), rdp.tolist(), delta)
    return float(eps), float(order)
