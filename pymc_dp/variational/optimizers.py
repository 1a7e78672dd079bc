"""Gradient-ascent optimisers for DPADVI, as small stateful NumPy objects.

They only ever see the privatised gradient (noisy data part plus the exact, data-free prior
and entropy parts), so their state and output are post-processing of DP releases. The
update rules are those of PyMC's ``pm.adagrad`` and ``pm.adam`` (``pymc.variational.updates``),
written for ascent.
"""

from __future__ import annotations

import numpy as np

from pymc_dp._validation import check_finite_positive

__all__ = ["OPTIMIZERS", "AdaGrad", "Adam", "make_optimizer"]


class AdaGrad:
    """AdaGrad (Duchi et al. 2011), as in Jälkö et al. (2017, Algorithm 1).

    a ← a + g²;  x ← x + η g / √(a + ε). Same rule as ``pm.adagrad``.
    """

    default_learning_rate = 0.1

    def __init__(self, learning_rate: float | None = None, epsilon: float = 1e-6) -> None:
        lr = self.default_learning_rate if learning_rate is None else learning_rate
        self.learning_rate = check_finite_positive("learning_rate", lr)
        self.epsilon = check_finite_positive("epsilon", epsilon)
        self._accumulator: np.ndarray | None = None

    def step(self, params: np.ndarray, gradient: np.ndarray) -> np.ndarray:
        """Return the parameters after one ascent step along ``gradient``."""
        if self._accumulator is None:
            self._accumulator = np.zeros_like(params)
        self._accumulator = self._accumulator + gradient**2
        return params + self.learning_rate * gradient / np.sqrt(self._accumulator + self.epsilon)


class Adam:
    """Adam (Kingma and Ba 2015) with bias correction; same rule as ``pm.adam``."""

    default_learning_rate = 0.01

    def __init__(
        self, learning_rate: float | None = None, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8
    ) -> None:
        lr = self.default_learning_rate if learning_rate is None else learning_rate
        self.learning_rate = check_finite_positive("learning_rate", lr)
        for name, beta in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= float(beta) < 1.0:
                raise ValueError(f"`{name}` must be in [0, 1). Found {beta!r}.")
        self.beta1, self.beta2 = float(beta1), float(beta2)
        self.epsilon = check_finite_positive("epsilon", epsilon)
        self._m: np.ndarray | None = None
        self._v: np.ndarray | None = None
        self._t = 0

    def step(self, params: np.ndarray, gradient: np.ndarray) -> np.ndarray:
        """Return the parameters after one ascent step along ``gradient``."""
        if self._m is None:
            self._m, self._v = np.zeros_like(params), np.zeros_like(params)
        self._t += 1
        self._m = self.beta1 * self._m + (1.0 - self.beta1) * gradient
        self._v = self.beta2 * self._v + (1.0 - self.beta2) * gradient**2
        step = self.learning_rate * np.sqrt(1.0 - self.beta2**self._t) / (1.0 - self.beta1**self._t)
        return params + step * self._m / (np.sqrt(self._v) + self.epsilon)


OPTIMIZERS = {"adagrad": AdaGrad, "adam": Adam}


def make_optimizer(name: str, learning_rate: float | None) -> AdaGrad | Adam:
    """A fresh optimiser by name ("adagrad" or "adam")."""
    if name not in OPTIMIZERS:
        raise ValueError(f"`optimizer` must be one of {sorted(OPTIMIZERS)}. Found {name!r}.")
    return OPTIMIZERS[name](learning_rate)
