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

    def state(self, params: np.ndarray) -> tuple[np.ndarray, ...]:
        """The optimiser's state as arrays (zeros before the first step): (accumulator,)."""
        return (np.zeros_like(params) if self._accumulator is None else self._accumulator,)

    def set_state(self, state: tuple[np.ndarray, ...]) -> None:
        """Take the state :meth:`update` returned."""
        (self._accumulator,) = (np.asarray(a, dtype=float) for a in state)

    def update(self, params, gradient, state, xp=np):
        """One ascent step as a pure function: (parameters, state) after it; ``xp``: NumPy or ``jax.numpy``."""
        (accumulator,) = state
        accumulator = accumulator + gradient**2
        return params + self.learning_rate * gradient / xp.sqrt(accumulator + self.epsilon), (accumulator,)

    def step(self, params: np.ndarray, gradient: np.ndarray) -> np.ndarray:
        """Return the parameters after one ascent step along ``gradient``."""
        updated, state = self.update(params, gradient, self.state(params))
        self.set_state(state)
        return updated


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

    def state(self, params: np.ndarray) -> tuple[np.ndarray, ...]:
        """The optimiser's state as arrays (zeros before the first step): (m, v, t)."""
        if self._m is None:
            return np.zeros_like(params), np.zeros_like(params), np.float64(0.0)
        return self._m, self._v, np.float64(self._t)

    def set_state(self, state: tuple[np.ndarray, ...]) -> None:
        """Take the state :meth:`update` returned."""
        m, v, t = state
        self._m, self._v, self._t = np.asarray(m, dtype=float), np.asarray(v, dtype=float), int(t)

    def update(self, params, gradient, state, xp=np):
        """One ascent step as a pure function: (parameters, state) after it; ``xp``: NumPy or ``jax.numpy``."""
        m, v, t = state
        t = t + 1.0
        m = self.beta1 * m + (1.0 - self.beta1) * gradient
        v = self.beta2 * v + (1.0 - self.beta2) * gradient**2
        step = self.learning_rate * xp.sqrt(1.0 - self.beta2**t) / (1.0 - self.beta1**t)
        return params + step * m / (xp.sqrt(v) + self.epsilon), (m, v, t)

    def step(self, params: np.ndarray, gradient: np.ndarray) -> np.ndarray:
        """Return the parameters after one ascent step along ``gradient``."""
        updated, state = self.update(params, gradient, self.state(params))
        self.set_state(state)
        return updated


OPTIMIZERS = {"adagrad": AdaGrad, "adam": Adam}


def make_optimizer(name: str, learning_rate: float | None) -> AdaGrad | Adam:
    """A fresh optimiser by name ("adagrad" or "adam")."""
    if name not in OPTIMIZERS:
        raise ValueError(f"`optimizer` must be one of {sorted(OPTIMIZERS)}. Found {name!r}.")
    return OPTIMIZERS[name](learning_rate)
