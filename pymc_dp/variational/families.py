"""Reparameterised Gaussian families of PyMC's ADVI, as plain array code (no PyMC, no data).

Both families write a draw as θ = μ + L ε with ε ~ N(0, I):

* **mean-field** (``pm.MeanField``): parameters (μ, ρ), L = diag(softplus(ρ));
* **full-rank** (``pm.FullRank``): parameters (μ, l) with l the lower triangle of L in
  ``numpy.tril_indices`` order and the diagonal of L passed through softplus.

For a function f of θ with gradient g = ∇θ f(θ), the reparameterisation gradient is
∂f/∂μ = g and ∂f/∂L_jk = g_j ε_k (j ≥ k), times softplus′ = sigmoid on the diagonal: a
linear map g ↦ g M of the gradient, with M (P × D) a function of the parameters and ε only. The
entropy of q is Σ_j log L_jj + const, whose gradient needs no data. These are the maps the
DPADVI mechanism applies to every row's gradient before clipping.

References
----------
.. [1] Kucukelbir, A., Tran, D., Ranganath, R., Gelman, A. and Blei, D. M. (2017). Automatic
   differentiation variational inference. JMLR 18(14), §2.5 and eq. (8)–(10).
.. [2] Jälkö, J., Dikmen, O. and Honkela, A. (2017). Differentially private variational
   inference for non-conjugate models. UAI, §3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy import special

__all__ = ["FullRankFamily", "MeanFieldFamily", "family_for"]


def _softplus(x: np.ndarray, xp=np) -> np.ndarray:
    return xp.logaddexp(0.0, x)


def _expit(x: np.ndarray, xp=np) -> np.ndarray:
    """The logistic sigmoid: SciPy's on the host, 1/(1 + e^{−x}) in another array namespace."""
    return special.expit(x) if xp is np else 1.0 / (1.0 + xp.exp(-x))


def _scatter(xp, shape: tuple[int, int], index: tuple[np.ndarray, np.ndarray], values):
    """A zero matrix of ``shape`` with ``values`` at ``index``: in place on the host, ``.at[].set`` in JAX."""
    if xp is np:
        out = np.zeros(shape)
        out[index] = values
        return out
    return xp.zeros(shape).at[index].set(values)


@dataclass(frozen=True)
class _GaussianFamily:
    """θ = μ + L ε over P = ``n_params`` coordinates, packed as [μ, the scale's parameters].

    What both families share: the split of the packed vector and the chain rule through
    ``parameter_jacobian`` (a subclass defines it, ``size`` and :attr:`scale_key`). Maps of
    gradients given to it; it reads no data.
    """

    n_params: int
    #: The name of the scale's part of the packed vector in :meth:`split`.
    scale_key: ClassVar[str]

    def split(self, packed: np.ndarray) -> dict[str, np.ndarray]:
        """{"mu": μ, :attr:`scale_key`: the scale's parameters} from the packed vector."""
        p = self.n_params
        return {"mu": packed[:p], self.scale_key: packed[p:]}

    def chain_rule(self, packed: np.ndarray, eps: np.ndarray, theta_grads: list[np.ndarray]) -> np.ndarray:
        """Per-row gradients w.r.t. the packed parameters, averaged over the S draws: (B, D).

        ``theta_grads[s]`` is the (B, P) matrix of per-row gradients at θ_s = μ + L ε_s; the
        result is mean_s G_s M_s, M_s the ``parameter_jacobian`` at ε_s.
        """
        total = sum(g @ self.parameter_jacobian(packed, e) for g, e in zip(theta_grads, eps, strict=True))
        return total / len(theta_grads)


@dataclass(frozen=True)
class MeanFieldFamily(_GaussianFamily):
    """θ = μ + softplus(ρ) ⊙ ε; parameters packed as [μ, ρ] (length 2P)."""

    name: str = "meanfield"
    scale_key: ClassVar[str] = "rho"

    @property
    def size(self) -> int:
        """Length D of the packed variational parameters."""
        return 2 * self.n_params

    def draws(self, packed: np.ndarray, eps: np.ndarray, xp=np) -> np.ndarray:
        """θ_s = μ + σ ⊙ ε_s for every row of ``eps`` (S, P); ``xp``: NumPy or ``jax.numpy``."""
        parts = self.split(packed)
        return parts["mu"] + _softplus(parts["rho"], xp) * eps

    def parameter_jacobian(self, packed: np.ndarray, eps_draw: np.ndarray, xp=np) -> np.ndarray:
        """M (P × 2P) with ∂f/∂[μ, ρ] = ∇θ f(θ) M at θ = μ + σ ⊙ ε: M = [I | diag(ε ⊙ sigmoid(ρ))]."""
        scale = eps_draw * _expit(self.split(packed)["rho"], xp)
        return xp.concatenate([xp.eye(self.n_params), xp.diag(scale)], axis=1)

    def entropy_gradient(self, packed: np.ndarray, xp=np) -> np.ndarray:
        """∇ of Σ log softplus(ρ) w.r.t. [μ, ρ]."""
        rho = self.split(packed)["rho"]
        return xp.concatenate([xp.zeros(self.n_params), _expit(rho, xp) / _softplus(rho, xp)])

    def mean_std(self, packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of q in the unconstrained space."""
        parts = self.split(packed)
        return parts["mu"].copy(), _softplus(parts["rho"])


@dataclass(frozen=True)
class FullRankFamily(_GaussianFamily):
    """θ = μ + L ε, L lower triangular with a softplus diagonal; packed as [μ, l] (P + P(P+1)/2)."""

    name: str = "fullrank"
    scale_key: ClassVar[str] = "L_tril"

    @property
    def size(self) -> int:
        """Length D of the packed variational parameters."""
        p = self.n_params
        return p + p * (p + 1) // 2

    @property
    def tril(self) -> tuple[np.ndarray, np.ndarray]:
        """Row and column indices of the lower triangle, in ``numpy.tril_indices`` order (PyMC's)."""
        return np.tril_indices(self.n_params)

    def _is_diagonal(self) -> np.ndarray:
        rows, cols = self.tril
        return rows == cols

    def cholesky(self, packed: np.ndarray, xp=np) -> np.ndarray:
        """L, with softplus applied to the diagonal entries of l."""
        p = self.n_params
        raw = self.split(packed)["L_tril"]
        entries = xp.where(self._is_diagonal(), _softplus(raw, xp), raw)
        return _scatter(xp, (p, p), self.tril, entries)

    def draws(self, packed: np.ndarray, eps: np.ndarray, xp=np) -> np.ndarray:
        """θ_s = μ + L ε_s for every row of ``eps`` (S, P); ``xp``: NumPy or ``jax.numpy``."""
        return self.split(packed)["mu"] + eps @ self.cholesky(packed, xp).T

    def parameter_jacobian(self, packed: np.ndarray, eps_draw: np.ndarray, xp=np) -> np.ndarray:
        """M (P × D) with ∂f/∂[μ, l] = ∇θ f(θ) M at θ = μ + L ε: ∂θ_j/∂l_k = ε_{col k} (× sigmoid on the diagonal)."""
        rows, cols = self.tril
        raw = self.split(packed)["L_tril"]
        dentry = xp.where(self._is_diagonal(), _expit(raw, xp), 1.0)
        block = _scatter(xp, (self.n_params, rows.size), (rows, np.arange(rows.size)), eps_draw[cols] * dentry)
        return xp.concatenate([xp.eye(self.n_params), block], axis=1)

    def entropy_gradient(self, packed: np.ndarray, xp=np) -> np.ndarray:
        """∇ of Σ log softplus(l_jj) w.r.t. [μ, l]."""
        raw = self.split(packed)["L_tril"]
        grad_l = xp.where(self._is_diagonal(), _expit(raw, xp) / _softplus(raw, xp), 0.0)
        return xp.concatenate([xp.zeros(self.n_params), grad_l])

    def mean_std(self, packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and marginal standard deviations of q in the unconstrained space."""
        chol = self.cholesky(packed)
        return self.split(packed)["mu"].copy(), np.sqrt(np.sum(chol**2, axis=1))


def family_for(approximation: str, n_params: int) -> MeanFieldFamily | FullRankFamily:
    """The family for ``approximation`` ("meanfield" or "fullrank")."""
    if approximation == "meanfield":
        return MeanFieldFamily(n_params)
    if approximation == "fullrank":
        return FullRankFamily(n_params)
    raise ValueError(f"`approximation` must be 'meanfield' or 'fullrank'. Found {approximation!r}.")
