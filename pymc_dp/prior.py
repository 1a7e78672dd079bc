"""The data-free prior: what step methods and DPADVI receive instead of the rows.

:func:`prior_graph` builds the model's prior (log prior + log|Jacobian| of the transforms +
the potentials, every one checked not to read data by
:func:`pymc_dp.data.check_prior_reads_no_data` before the graph is used) and
:class:`PriorDensity` holds it compiled as a function of the flat unconstrained θ, with the
parameter layout. Nothing here reads a row: this module sits below the data layer
(:mod:`pymc_dp.data`, which builds a :class:`PriorDensity` next to the per-row functions) and
imports nothing of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.pytensorf import compile as pm_compile
from pytensor.graph.basic import Variable

__all__ = ["PriorDensity", "prior_graph"]


def prior_graph(model) -> Variable:
    """log prior + log|Jacobian| of the transforms + the potentials, as a graph of the value variables.

    Parameters
    ----------
    model : pm.Model
        The model. Its potentials must read no data (checked by
        :func:`pymc_dp.data.check_prior_reads_no_data` before the graph is compiled).

    Returns
    -------
    TensorVariable
        A scalar graph of the model's value variables.

    Notes
    -----
    Neighbouring relation: either. The graph is data-free once the check has passed; values
    computed from it are exact, neither clipped nor noised, and cost no privacy.
    """
    terms = [model.logp(vars=model.free_RVs, jacobian=True, sum=True)]
    terms += [model.logp(vars=[pot], sum=True) for pot in model.potentials]  # data-free: checked
    return pt.add(*terms) if len(terms) > 1 else terms[0]


def _compile_data_free(inputs, outputs, compile_kwargs: dict[str, Any]):
    """Compile a data-free graph (the prior) with the caller's compile options."""
    fn = pm_compile(inputs, outputs, **compile_kwargs)
    fn.trust_input = True
    return fn


class PriorDensity:
    """The data-free part of a model: what step methods and DPADVI receive instead of the rows.

    Holds the prior + log|Jacobian| of the transforms + the potentials that read no data (all
    checked data-free when the :class:`RowLikelihood` it comes from was built), compiled as
    functions of the flat unconstrained θ, and the parameter layout. It holds no row-indexed
    array, no function of one and no reference to the :class:`RowLikelihood` (not even
    through a bound method): the per-row values stay with the :class:`RowLikelihood`, which
    only the mechanisms (:mod:`pymc_dp.mechanisms`) receive.

    Parameters
    ----------
    value_vars : list
        The value variables θ is made of, in model order.
    n_rows : int
        N.
    row_dim : str or None
        Name of the row dimension.
    initial_theta : numpy.ndarray
        The model's initial point as a flat θ.
    theta : TensorVariable
        The flat θ input of ``graph``.
    graph : TensorVariable
        The prior + Jacobian + data-free potentials as a function of ``theta`` (data-free).
    f_prior : callable
        ``graph`` compiled (θ ↦ value).
    continuous : bool
        Whether every parameter is continuous (gradients available).
    compile_kwargs : dict, optional
        Used to compile the gradient on first use.

    Attributes
    ----------
    value_vars : list
        The value variables θ is made of, in model order.
    n_params : int
        Length of θ.
    n_rows : int
        N (public under substitute neighbours; never released under add/remove).
    row_dim : str or None
        Name of the row dimension.
    initial_theta : numpy.ndarray
        The model's initial point as a flat θ (data-free: the model's initial values).

    Notes
    -----
    Neighbouring relation: either. Nothing here reads a row, so nothing here is released
    about one (the prior and potentials were checked by :func:`check_prior_reads_no_data`);
    values computed from it are exact, neither clipped nor noised. ``n_rows`` is public only
    under substitute neighbours: under add/remove a step must not release it.

    References
    ----------
    .. [1] Dwork, C. and Roth, A. (2014). The algorithmic foundations of differential privacy.
       Foundations and Trends in Theoretical Computer Science 9(3–4), Proposition 2.1
       (post-processing).
    """

    def __init__(
        self,
        *,
        value_vars: Sequence[Variable],
        n_rows: int,
        row_dim: str | None,
        initial_theta: np.ndarray,
        theta: Variable,
        graph: Variable,
        f_prior,
        continuous: bool,
        compile_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.value_vars = list(value_vars)
        self.initial_theta = np.array(initial_theta, dtype=np.float64, copy=True)
        self.n_params = int(self.initial_theta.size)
        self.n_rows = int(n_rows)
        self.row_dim = row_dim
        self._continuous = bool(continuous)
        self._compile_kwargs = dict(compile_kwargs or {})
        self._theta, self._graph = theta, graph
        self._f_prior = f_prior
        self._f_prior_grad = None  # compiled on first use

    def _check_theta(self, theta: np.ndarray) -> np.ndarray:
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (self.n_params,):
            raise ValueError(f"`theta` must be a flat vector of length {self.n_params}. Found shape {theta.shape}.")
        return theta

    def prior_logp(self, theta: np.ndarray) -> float:
        """log prior + log|Jacobian| of the transforms (+ data-free potentials)."""
        return float(self._f_prior(self._check_theta(theta)))

    def prior_logp_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """:meth:`prior_logp` and its gradient w.r.t. θ."""
        if not self._continuous:
            raise ValueError("Gradients need continuous parameters. Found discrete parameters.")
        if self._f_prior_grad is None:
            grad = pytensor.grad(self._graph, self._theta)
            self._f_prior_grad = _compile_data_free([self._theta], [self._graph, grad], self._compile_kwargs)
        value, grad = self._f_prior_grad(self._check_theta(theta))
        return float(value), np.asarray(grad)
