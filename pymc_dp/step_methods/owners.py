"""The penalty algorithm with several data owners (Yıldırım and Ermiş 2019, §3.2.2, Alg. 2)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pymc_dp._errors import withholds_chains
from pymc_dp.mechanisms import OwnerLogLikelihoodRatio, mechanism_rng
from pymc_dp.step_methods.penalty import DPPenaltyMH

__all__ = ["DPMultiOwnerPenaltyMH"]


class _Owners:
    """Calls every owner's function with (θ, θ′) and adds the noisy numbers it gets back."""

    def __init__(self, functions: list[OwnerLogLikelihoodRatio], llr_clip: float, noise_multiplier: float) -> None:
        self.functions = functions
        self.llr_clip, self.noise_multiplier, self.neighbouring = llr_clip, noise_multiplier, functions[0].neighbouring

    def release(self, theta: np.ndarray, theta_proposed: np.ndarray, rng: Any) -> tuple[float, float]:
        total = sum(f(theta, theta_proposed) for f in self.functions)  # each owner: one noisy number
        std = math.sqrt(sum(f.std(theta, theta_proposed) ** 2 for f in self.functions))  # √N σ
        return float(total), std

    def keep(self, accepted: bool) -> None:
        """Owners keep no state between calls."""

    def forget(self) -> None:
        """Owners keep no state between calls."""


class DPMultiOwnerPenaltyMH(DPPenaltyMH):
    """DPPenaltyMH over rows held by several data owners, each adding its own noise.

    ``owners`` tags every row with its owner. In each iteration every owner j receives
    (θ, θ′) and returns d̂ⱼ = Σ_{i ∈ owner j} clip(rᵢ, ±b‖θ′ − θ‖₂) + N(0, σ²) with σ = τΔ
    (:class:`pymc_dp.mechanisms.OwnerLogLikelihoodRatio`, a function of the owner's rows
    alone, so it can run where they live); the chain accepts with probability
    min{1, exp(T Σⱼ d̂ⱼ − T² Nₒ σ²/2 + log prior ratio)} (Nₒ owners: the noise variances add).

    Parameters
    ----------
    owners : array-like
        One label per row (length N); the set of labels is public.
    **kwargs
        As for :class:`pymc_dp.DPPenaltyMH`.

    Notes
    -----
    **Neighbouring relation.** That of the step (substitute by default): one row of one
    owner replaced.

    **Privacy of each owner against the others.** The other owners see every d̂ and know
    their own rows; only owner j's release depends on owner j's rows, and it is a Gaussian
    mechanism with Δ/σ = 1/τ. Each owner's rows are therefore protected at μ = 1/(2τ²) per
    iteration, exactly as in :class:`DPPenaltyMH` (Yıldırım and Ermiş 2019, §3.2.2: "the
    result for differential privacy in Theorem 1 applies for the differential privacy of each
    user"). The price is Nₒ times the noise variance in the acceptance ratio. The accounting
    (``privacy_events``) is that of one owner, which is each owner's guarantee;
    ``accountant_settings`` lists the owners.

    Sampler statistics: those of :class:`pymc_dp.DPPenaltyMH`, with ``dp_noisy_llr`` the
    sum Σⱼ d̂ⱼ of the owners' releases.
    **Noise.** Each owner draws its noise from its own generator, seeded from OS entropy
    where it is created and independent of every other owner's and of ``random_seed``
    (:func:`pymc_dp.mechanisms.mechanism_rng`); with ``reproducible_noise=True`` (testing
    only) the owners' generators are derived from the chain's seeded generator.

    References
    ----------
    .. [1] Yıldırım, S. and Ermiş, B. (2019). Exact MCMC with differentially private moves.
       Statistics and Computing 29, §3.2.2, Algorithm 2, eq. (6).
    """

    mechanism_class = OwnerLogLikelihoodRatio

    name = "dp_multi_owner_penalty_mh"

    @withholds_chains
    def __init__(self, vars=None, *, owners: Any, **kwargs: Any) -> None:
        labels = np.asarray(owners)
        if labels.ndim != 1:
            raise ValueError(f"`owners` must be a 1-d array with one label per row. Found shape {labels.shape}.")
        super().__init__(vars, **kwargs)
        if labels.shape[0] != self.n_rows:
            if self.neighbouring != "substitute":  # N is private under add/remove: say nothing of it
                raise ValueError("`owners` must have one label per row. Found another length.")
            raise ValueError(f"`owners` must have one label per row ({self.n_rows}). Found {labels.shape[0]}.")
        names, index = np.unique(labels, return_inverse=True)
        self.owner_labels = [str(n) for n in names]
        self._owner_rows = [np.flatnonzero(index == j).astype(np.int64) for j in range(names.size)]

    @property
    def owner_row_indices(self) -> tuple[np.ndarray, ...]:
        """Each owner's row indices, in the order of :attr:`owner_labels` (from the caller's ``owners``: public)."""
        return tuple(self._owner_rows)

    def _reset_chain_state(self) -> None:
        super()._reset_chain_state()
        self._mechanism = None  # new owner generators for the new chain

    def _owner_rng(self) -> np.random.Generator:
        """Owner j's own noise generator: fresh OS entropy, independent of every other owner's."""
        if not self.reproducible_noise:
            return mechanism_rng(None, reproducible=False)
        return np.random.default_rng(self.noise_rng.integers(0, 2**63, size=4))  # testing only

    def _get_mechanism(self):
        mechanism = self._mechanism
        if mechanism is None or (mechanism.noise_multiplier, mechanism.llr_clip) != (
            self.noise_multiplier,
            self.llr_clip,
        ):
            self._check_ready()
            functions = [
                self._row_mechanisms.owner_ratio(
                    rows, self.llr_clip, self.noise_multiplier, self._owner_rng(), self.neighbouring
                )
                for rows in self._owner_rows
            ]
            self._mechanism = _Owners(functions, self.llr_clip, self.noise_multiplier)
        return self._mechanism

    def accountant_settings(self) -> dict[str, Any]:
        settings = super().accountant_settings()
        settings["mechanism"] = "gaussian per owner: clipped log-likelihood ratio (Yildirim & Ermis 2019, Alg. 2)"
        settings["owners"] = self.owner_labels
        settings["guarantee"] = "per owner, against all other owners; each owner's epsilon equals the reported one"
        return settings
