"""Empirical privacy audits: a statistical lower bound on ε from the code's actual outputs.

The accountant proves an upper bound on ε. An audit checks, by experiment, that the code
delivers it: run one release of a mechanism many times on two neighbouring data sets built to
be worst case for it, pick a distinguishing event on half of the runs, and on the other half
bound ε from below with exact (Clopper–Pearson) confidence intervals on the two event
frequencies:

    (ε, δ)-DP  ⇒  P(M(D) ∈ E) ≤ e^ε P(M(D′) ∈ E) + δ  for every event E,

so ε ≥ log((p̲ − δ)/p̄) with p̲ a lower confidence bound on P(M(D) ∈ E) and p̄ an upper one on
P(M(D′) ∈ E) (and the same with D and D′ swapped). A correct mechanism gives a lower bound at
or below the accountant's ε; a broken one (noise halved, clipping off) gives one above it. The
deliberately broken variants that show the audit's power are test code, not part of the
package: they live in ``tests/_broken_variants.py`` (used by ``tests/test_audit.py`` and
``scripts/run_audit.py``).
This is the approach of Jagielski, Ullman and Oprea (2020) and Nasr et al. (2021), and of the
statistical testers shipped with DP libraries.

Each scenario drives the *real* mechanism classes of :mod:`pymc_dp.mechanisms` (clipping,
sensitivity, noise, batch sampling) with the data layer replaced by a table of per-row values
holding the worst-case row, so that millions of releases take seconds. The claimed ε of each
scenario comes from :mod:`pymc_dp.accounting`, for one release.

References
----------
.. [1] Jagielski, M., Ullman, J. and Oprea, A. (2020). Auditing differentially private machine
   learning: how private is private SGD? NeurIPS.
.. [2] Nasr, M., Song, S., Thakurta, A., Papernot, N. and Carlini, N. (2021). Adversary
   instantiation: lower bounds for differentially private machine learning. IEEE S&P.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from pymc_dp._validation import check_positive_int, check_unit_interval_open
from pymc_dp.accounting.barker import barker_subsampled_rdp
from pymc_dp.accounting.composition import compose_epsilon
from pymc_dp.accounting.events import PoissonGaussianReleases, PureDPReleases
from pymc_dp.accounting.gaussian import gaussian_epsilon
from pymc_dp.accounting.rdp import rdp_to_epsilon
from pymc_dp.exponential_family.families import Normal
from pymc_dp.mechanisms import (
    NoisyBarkerStatistic,
    NoisyClippedGradient,
    NoisyLogLikelihoodRatio,
    NoisyPoissonGradientSum,
    NoisySufficientStatistics,
    RowMechanisms,
    laplace_sufficient_statistics,
)

__all__ = [
    "SCENARIOS",
    "AuditResult",
    "AuditScenario",
    "audit",
    "barker_scenario",
    "cross_row_scenario",
    "dpadvi_gradient_scenario",
    "epsilon_lower_bound",
    "hmc_gradient_scenario",
    "laplace_statistics_scenario",
    "owner_ratio_scenario",
    "penalty_scenario",
    "suffstats_scenario",
]


@dataclass(frozen=True)
class AuditResult:
    """Outcome of one audit.

    Attributes
    ----------
    mechanism : str
        What was audited (and which broken variant, if any).
    claimed_epsilon : float
        The accountant's ε for one release at ``delta``.
    epsilon_lower_bound : float
        The audited lower bound (0 when the event frequencies cannot tell D from D′).
    delta : float
        δ of the claim and of the bound (0 for pure-DP mechanisms).
    runs : int
        Releases per data set (half choose the event, half bound ε).
    confidence : float
        Joint confidence of the two Clopper–Pearson bounds.
    event : str
        The distinguishing event chosen on the first half.
    seconds : float
        Wall time.
    """

    mechanism: str
    claimed_epsilon: float
    epsilon_lower_bound: float
    delta: float
    runs: int
    confidence: float
    event: str
    seconds: float

    @property
    def broken(self) -> bool:
        """Whether this was a deliberately broken variant."""
        return "[broken:" in self.mechanism

    @property
    def consistent(self) -> bool:
        """Whether the lower bound does not exceed the claim."""
        return self.epsilon_lower_bound <= self.claimed_epsilon


def _bound(k_num: int, k_den: int, n: int, delta: float, alpha: float) -> float:
    """log((p̲ − δ)/p̄) with one-sided Clopper–Pearson bounds at level α/2 each (0 if not positive).

    p̲ is the exact lower bound on the success probability behind ``k_num`` successes out of
    ``n``, p̄ the exact upper bound behind ``k_den``; by the union bound both hold together with
    probability ≥ 1 − α.
    """
    p_lower = stats.beta.ppf(alpha / 2, k_num, n - k_num + 1) if k_num > 0 else 0.0
    p_upper = stats.beta.ppf(1 - alpha / 2, k_den + 1, n - k_den) if k_den < n else 1.0
    if p_lower <= delta or p_upper <= 0:
        return 0.0
    return max(0.0, math.log((p_lower - delta) / p_upper))


def _counts(outputs: np.ndarray, threshold: float, above: bool) -> int:
    return int(np.count_nonzero(outputs > threshold if above else outputs <= threshold))


def _check_delta(delta: float) -> float:
    if isinstance(delta, int | float | np.floating) and not isinstance(delta, bool) and delta == 0:
        return 0.0
    return check_unit_interval_open("delta", delta)


def epsilon_lower_bound(
    outputs: np.ndarray,
    outputs_neighbour: np.ndarray,
    delta: float,
    confidence: float = 0.99,
    seed: int = 0,
) -> tuple[float, str]:
    """A ``confidence``-level lower bound on ε from scalar outputs on D and D′.

    The runs are split in halves at random. On the first half every threshold event
    {output > t} or {output ≤ t} (t at 400 quantiles of the pooled outputs, both directions,
    both orders of D and D′) is scored by the same bound at the same confidence (which
    discounts rare events with few counts, whose held-out frequencies are noisy), and the
    best is kept. On the second half, that single event gets exact one-sided Clopper–Pearson bounds
    at level (1 − ``confidence``)/2 each: the result holds with probability ≥ ``confidence``
    (the event is independent of the second half, and the union bound covers both intervals).

    Parameters
    ----------
    outputs, outputs_neighbour : array_like
        Scalar releases on D and on D′ (at least 20 each; the halves use the smaller count).
    delta : float
        δ in [0, 1) of the (ε, δ) guarantee being tested; 0 for pure ε-DP.
    confidence : float
        Joint confidence level in (0, 1).
    seed : int
        Seed of the random split.

    Returns
    -------
    (float, str)
        The lower bound and a description of the event.
    """
    delta = _check_delta(delta)
    confidence = check_unit_interval_open("confidence", confidence)
    rng = np.random.default_rng(seed)
    a = rng.permutation(np.asarray(outputs, dtype=float))
    b = rng.permutation(np.asarray(outputs_neighbour, dtype=float))
    n = min(a.size, b.size) // 2
    if n < 10:
        raise ValueError(f"`outputs` must hold at least 20 runs per data set. Found {min(a.size, b.size)}.")
    select = (a[:n], b[:n])
    check = (a[n : 2 * n], b[n : 2 * n])
    pooled = np.concatenate(select)
    levels = np.unique(np.concatenate([np.geomspace(1.0 / n, 0.5, 200), 1 - np.geomspace(1.0 / n, 0.5, 200)]))
    thresholds = np.unique(np.quantile(pooled, levels))
    alpha = 1.0 - confidence
    best = (0.0, None)
    for t in thresholds:
        for above in (True, False):
            k = (_counts(select[0], t, above), _counts(select[1], t, above))
            for first in (0, 1):
                score = _bound(k[first], k[1 - first], n, delta, alpha)
                if score > best[0]:
                    best = (score, (t, above, first))
    if best[1] is None:
        return 0.0, "none (no event separates D and D′ on the first half)"
    t, above, first = best[1]
    k = (_counts(check[0], t, above), _counts(check[1], t, above))
    bound = _bound(k[first], k[1 - first], n, delta, alpha)
    names = ("D", "D′")
    event = f"output {'>' if above else '≤'} {t:.4g}, more likely under {names[first]}"
    return bound, event


@dataclass(frozen=True)
class AuditScenario:
    """One mechanism on a worst-case pair of neighbouring data sets.

    Attributes
    ----------
    name : str
        Label for the table (with ``[broken: …]`` for a broken variant).
    make_release : callable
        ``make_release(rng)`` builds the mechanisms on D and D′ (inside :attr:`context`) and
        returns ``release(dataset)``: one scalar output on data set 0 (D) or 1 (D′), with the
        randomness drawn from ``rng``.
    claimed_epsilon : callable
        ``claimed_epsilon(delta)``: the accountant's ε for one release.
    context : callable
        Entered around building and running (a nullcontext for the real mechanisms; the
        broken variants of the test suite use it to switch clipping off in the mechanism layer).
    pure : bool
        A pure ε-DP mechanism: claim and bound at δ = 0 whatever δ the audit is given.
    """

    name: str
    make_release: Callable[[np.random.Generator], Callable[[int], float]]
    claimed_epsilon: Callable[[float], float]
    context: Callable[[], contextlib.AbstractContextManager] = field(default=contextlib.nullcontext)
    pure: bool = False


def audit(
    scenario: AuditScenario, runs: int = 200_000, delta: float = 1e-5, confidence: float = 0.99, seed: int = 0
) -> AuditResult:
    """Run ``scenario`` ``runs`` times on each data set and bound ε from below.

    Parameters
    ----------
    scenario : AuditScenario
        The mechanism and its worst-case neighbouring pair.
    runs : int
        Releases per data set.
    delta : float
        δ in (0, 1) of the claim and the bound (ignored, i.e. 0, for pure-DP scenarios).
    confidence : float
        Joint confidence of the lower bound.
    seed : int
        Seed of the releases (and, plus one, of the split).

    Returns
    -------
    AuditResult

    Notes
    -----
    Neighbouring relation: substitute (each scenario replaces one row of D by the worst-case
    row of D′). The claimed ε is for a single release at ``delta``.
    """
    runs = check_positive_int("runs", runs)
    delta = 0.0 if scenario.pure else check_unit_interval_open("delta", delta)
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    with scenario.context():
        release = scenario.make_release(rng)
        outputs = [np.fromiter((release(d) for _ in range(runs)), dtype=float, count=runs) for d in (0, 1)]
    bound, event = epsilon_lower_bound(outputs[0], outputs[1], delta, confidence, seed + 1)
    return AuditResult(
        scenario.name,
        float(scenario.claimed_epsilon(delta)),
        bound,
        delta,
        runs,
        confidence,
        event,
        time.perf_counter() - start,
    )


# -- stand-ins for the data layer -------------------------------------------------------------


class _RowTable:
    """Per-row values in place of a model: log-likelihood ratios and gradients of a fixed table.

    ``loglik_rows(θ)`` is 0 at the current point θ = 0 and the table's ratios at any other
    point, so every mechanism sees exactly the per-row ratios (and gradients) of the table.
    """

    def __init__(self, ratios: np.ndarray, gradients: np.ndarray | None = None) -> None:
        self.ratios = np.asarray(ratios, dtype=float)
        self.gradients = gradients
        self.n_rows = self.ratios.size if gradients is None else len(gradients)
        self.n_params = 1 if gradients is None else np.shape(gradients)[1]

    def loglik_rows(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        values = self.ratios if np.any(theta != 0) else np.zeros_like(self.ratios)
        return values if rows is None else values[rows]

    def loglik_ratio_rows(self, theta: np.ndarray, theta_new: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return self.ratios[rows]

    def grad_rows(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        return self.gradients if rows is None else self.gradients[rows]


def _worst_case_tables(
    n_rows: int, bound: float, typical: float = 0.3, outlier: float = 100.0
) -> tuple[np.ndarray, np.ndarray]:
    """D and D′: the same rows except the last, at −``outlier``·bound in D and +``outlier``·bound in D′.

    Clipped, the last row sits at ∓bound: the clipped sums differ by 2·bound, the substitute
    sensitivity. The other rows are fixed values in ±``typical``·bound (0 gives rows that add
    no randomness through batch sampling).
    """
    rng = np.random.default_rng(12345)
    base = rng.uniform(-typical * bound, typical * bound, size=n_rows)
    d, d_prime = base.copy(), base.copy()
    d[-1], d_prime[-1] = -outlier * bound, outlier * bound
    return d, d_prime


def _worst_case_gradients(n_rows: int, clip: float, n_params: int, typical: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-row gradient tables: the last row at ∓100·clip along the first axis, the others fixed and small."""
    rng = np.random.default_rng(54321)
    base = rng.uniform(-typical, typical, size=(n_rows, n_params)) * clip / math.sqrt(n_params)
    direction = np.zeros(n_params)
    direction[0] = 1.0
    d, d_prime = base.copy(), base.copy()
    d[-1], d_prime[-1] = -100.0 * clip * direction, 100.0 * clip * direction
    return d, d_prime


def _half_step(n_rows: int, llr_clip: float) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """The ratio scenarios' move θ: 0 → 0.5 and their rows D, D′ for it (per-row bound b·‖θ′ − θ‖ = b/2)."""
    return np.zeros(1), np.full(1, 0.5), _worst_case_tables(n_rows, llr_clip * 0.5)


def _gaussian_claim(noise_multiplier: float) -> Callable[[float], float]:
    """ε(δ) of one Gaussian release with Δ/σ = 1/τ: μ = 1/(2τ²), Sommer et al. (2019) closed form."""
    return lambda delta: gaussian_epsilon(delta, 0.5 / noise_multiplier**2)


# -- scenarios --------------------------------------------------------------------------------


def penalty_scenario(noise_multiplier: float = 1.0, llr_clip: float = 1.0) -> AuditScenario:
    """DPPenaltyMH's release: the clipped, noised log-likelihood ratio λ̂ of one proposal.

    The accept decision and the next state are post-processing of λ̂ and the (data-free)
    proposal, so auditing λ̂ covers them. Claim: one Gaussian release, μ = 1/(2τ²).

    Parameters
    ----------
    noise_multiplier : float
        τ.
    llr_clip : float
        b; the move has ‖θ′ − θ‖ = 0.5, so the per-row bound is b/2.

    Returns
    -------
    AuditScenario
    """
    theta, proposal, tables = _half_step(20, llr_clip)

    def make(rng: np.random.Generator) -> Callable[[int], float]:
        mechanisms = [NoisyLogLikelihoodRatio(_RowTable(t), llr_clip, noise_multiplier) for t in tables]
        return lambda dataset: mechanisms[dataset].release(theta, proposal, rng)[0]

    return AuditScenario("DPPenaltyMH: noisy log-likelihood ratio", make, _gaussian_claim(noise_multiplier))


#: The move log β: 0 → log 1.2 of :func:`cross_row_scenario`.
_CROSS_ROW_STEP = float(np.log(1.2))


def _identity_poisson_models() -> list:
    """y ~ Poisson(x·β) on D (x > 0 on every row) and on D′, whose last row has x < 0.

    x < 0 is an invalid parameter for every β > 0: a row-wise check makes only that row −∞,
    PyMC's ``check_parameters`` as built reduces over all rows and turns every row −∞.
    """
    import pymc as pm

    n = 20
    x = np.linspace(0.5, 0.8, n)
    y = np.ones(n, dtype=np.int64)
    y[-1] = 5  # clipped at +bound in D
    models = []
    for last_x in (0.5, -1.0):
        x_d = x.copy()
        x_d[-1] = last_x
        with pm.Model() as model:
            beta = pm.HalfNormal("beta", 1.0)
            pm.Poisson("y", mu=x_d * beta, observed=y)
        models.append(model)
    return models


def cross_row_scenario(noise_multiplier: float = 1.0, llr_clip: float = 1.0) -> AuditScenario:
    """DPPenaltyMH's release on a model where one row's data can invalidate every row.

    An identity-link Poisson regression y ~ Poisson(x·β): a negative covariate on one row is
    an invalid parameter. PyMC's ``check_parameters`` reduces its condition over all rows, so
    the data layer before issue 12 turned *every* row's log-likelihood to −∞: per-row
    clipping then bounds nothing (all N clipped rows move). The real mechanism, built from
    the model through :func:`pymc_dp.mechanisms.model_access`, applies the check row by row;
    the claim (one Gaussian release, μ = 1/(2τ²), substitute neighbours) then holds.

    Parameters
    ----------
    noise_multiplier, llr_clip : float
        τ and b, as in :func:`penalty_scenario` (the move is log β: 0 → log 1.2).

    Returns
    -------
    AuditScenario
    """
    from pymc_dp.mechanisms import model_access

    theta, proposal = np.zeros(1), np.full(1, _CROSS_ROW_STEP)
    models = _identity_poisson_models()

    def make(rng: np.random.Generator) -> Callable[[int], float]:
        mechanisms = [
            model_access(m, None, None, None, None)[1].log_likelihood_ratio(llr_clip, noise_multiplier, "substitute")
            for m in models
        ]
        return lambda dataset: mechanisms[dataset].release(theta, proposal, rng)[0]

    return AuditScenario("DPPenaltyMH: one invalid row (row-wise checks)", make, _gaussian_claim(noise_multiplier))


def owner_ratio_scenario(noise_multiplier: float = 1.0, llr_clip: float = 1.0) -> AuditScenario:
    """DPMultiOwnerPenaltyMH's release by one owner: Σ over its rows of clip(rᵢ) + N(0, σ²).

    Claim: one Gaussian release on the owner's rows, μ = 1/(2τ²).

    Parameters
    ----------
    noise_multiplier, llr_clip : float
        τ and b, as in :func:`penalty_scenario`.

    Returns
    -------
    AuditScenario
    """
    theta, proposal, tables = _half_step(10, llr_clip)

    def make(rng: np.random.Generator) -> Callable[[int], float]:
        owners = [
            RowMechanisms(_RowTable(t)).owner_ratio(np.arange(len(t)), llr_clip, noise_multiplier, rng, "substitute")
            for t in tables
        ]
        return lambda dataset: owners[dataset](theta, proposal)

    return AuditScenario("DPMultiOwnerPenaltyMH: one owner's noisy ratio", make, _gaussian_claim(noise_multiplier))


def barker_scenario(n_rows: int = 200, batch_size: int = 100, tempered_size: float = 50.0) -> AuditScenario:
    """DPBarkerMH's release: z = N₀·(batch mean of clipped ratios) + N(0, C − s²), b rows without replacement.

    The other rows have ratio 0, so batch sampling adds no randomness beyond whether the
    substituted row is in the batch. Claim: the per-iteration RDP of Theorem 2 amplified by
    eq. (22) (:func:`pymc_dp.accounting.barker.barker_subsampled_rdp`), converted at δ.

    Parameters
    ----------
    n_rows, batch_size : int
        N and b (q = b/N).
    tempered_size : float
        N₀; the clip is c = √b/N₀.

    Returns
    -------
    AuditScenario
    """
    clip = math.sqrt(batch_size) / tempered_size
    tables = _worst_case_tables(n_rows, clip, typical=0.0)
    theta, proposal = np.zeros(1), np.ones(1)

    def make(rng: np.random.Generator) -> Callable[[int], float]:
        mechanisms = [
            NoisyBarkerStatistic(
                _RowTable(t),
                correction_variance=2.0,
                llr_clip=clip,
                likelihood_scale=tempered_size,
                batch_size=batch_size,
            )
            for t in tables
        ]
        return lambda dataset: mechanisms[dataset].release(theta, proposal, rng)

    def claimed(delta: float) -> float:
        orders, rdp = barker_subsampled_rdp(n_rows, batch_size)
        return rdp_to_epsilon(orders, rdp, delta)[0]

    return AuditScenario("DPBarkerMH: subsampled Barker statistic", make, claimed)


def hmc_gradient_scenario(noise_multiplier: float = 1.0, grad_clip: float = 1.0, n_params: int = 3) -> AuditScenario:
    """DPHMC's gradient release: Σ clip_L2(per-row gradients) + N(0, σ²I), projected on the worst-case direction.

    One DPHMC iteration releases L + 1 such gradients and one noisy ratio (the penalty
    scenario), each a Gaussian release accounted separately (Theorem 3.3 adds their μ); this
    audits one gradient against its own μ = 1/(2τ_g²).

    Parameters
    ----------
    noise_multiplier, grad_clip : float
        τ_g and b_g.
    n_params : int
        Dimension of the gradient.

    Returns
    -------
    AuditScenario
    """
    tables = _worst_case_gradients(20, grad_clip, n_params, typical=0.3)
    theta = np.zeros(n_params)

    def make(rng: np.random.Generator) -> Callable[[int], float]:
        mechanisms = [NoisyClippedGradient(_RowTable(np.zeros(20), g), grad_clip, noise_multiplier) for g in tables]
        return lambda dataset: float(mechanisms[dataset].release(theta, rng)[0])

    return AuditScenario("DPHMC: noisy clipped gradient", make, _gaussian_claim(noise_multiplier))


def dpadvi_gradient_scenario(
    noise_multiplier: float = 1.0,
    sampling_rate: float = 1.0,
    clip: float = 1.0,
    n_rows: int = 20,
    n_params: int = 2,
) -> AuditScenario:
    """DPADVI's noisy gradient: a Poisson batch of clipped per-row gradients, summed, plus N(0, (2σC)² I), over q.

    The other rows have zero gradient (batch sampling adds no randomness beyond whether the
    substituted row is in the batch). The release is projected on the worst-case direction.
    Claim: one :class:`pymc_dp.accounting.pld.PoissonGaussianReleases` (σ, q, substitute)
    through :func:`pymc_dp.accounting.compose_epsilon` (dp_accounting's PLD).

    Parameters
    ----------
    noise_multiplier : float
        σ.
    sampling_rate : float
        q in (0, 1].
    clip : float
        C.
    n_rows, n_params : int
        N and the gradient's dimension.

    Returns
    -------
    AuditScenario
    """
    tables = _worst_case_gradients(n_rows, clip, n_params, typical=0.0)
    draws = np.zeros((1, n_params))

    identity = [np.eye(n_params)]  # the optimised parameters are θ itself: one draw, identity Jacobian

    def make(rng: np.random.Generator) -> Callable[[int], float]:
        mechanisms = [
            NoisyPoissonGradientSum(_RowTable(np.zeros(n_rows), g), clip, noise_multiplier, sampling_rate)
            for g in tables
        ]
        return lambda dataset: float(mechanisms[dataset].release(draws, identity, rng)[0])

    def claimed(delta: float) -> float:
        return compose_epsilon([PoissonGaussianReleases(noise_multiplier, sampling_rate, 1, "substitute")], delta)[0]

    return AuditScenario(f"DPADVI: noisy gradient, q = {sampling_rate:g}", make, claimed)


def _statistics_tables(neighbour_row: float | None) -> tuple[Normal, tuple[np.ndarray, np.ndarray]]:
    """The statistics scenarios' Normal family (public bounds [0, 1]) and its 20 rows D, D′.

    The last row is at the lower bound in D and at ``neighbour_row`` (the upper bound if None) in D′.
    """
    family = Normal(sigma=1.0, bounds=(0.0, 1.0))
    lo, hi = family.bounds
    base = np.random.default_rng(2468).uniform(lo, hi, size=20)
    d, d_prime = base.copy(), base.copy()
    d[-1], d_prime[-1] = lo, hi if neighbour_row is None else neighbour_row
    return family, (d, d_prime)


def laplace_statistics_scenario(epsilon: float = 1.0, neighbour_row: float | None = None) -> AuditScenario:
    """The Laplace release of sufficient statistics (``pmdp.release_statistics``): S + Laplace(Δ₁/ε), projected.

    A Normal family with public bounds [0, 1] (S(x) = x, Δ₁ = 1); the substituted row moves
    from the lower bound to ``neighbour_row``. Claim: pure ε (δ = 0) from
    :class:`pymc_dp.accounting.PureDPReleases`.

    Parameters
    ----------
    epsilon : float
        ε of the release.
    neighbour_row : float, optional
        x of the substituted row in D′: the upper bound 1 by default; a value outside the
        bounds audits the clamping (the mechanism maps it onto the bound).

    Returns
    -------
    AuditScenario
    """
    family, tables = _statistics_tables(neighbour_row)

    def make(rng: np.random.Generator) -> Callable[[int], float]:
        return lambda dataset: float(laplace_sufficient_statistics(family, tables[dataset], epsilon, rng)[0][0])

    def claimed(delta: float) -> float:
        return compose_epsilon([PureDPReleases(epsilon)], 0.0)[0]

    return AuditScenario("Laplace sufficient statistics", make, claimed, pure=True)


def suffstats_scenario(noise_multiplier: float = 1.0, neighbour_row: float | None = None) -> AuditScenario:
    """DPSuffStatsPenaltyMH's release (Alg. 3): fresh S + N(0, (τΔ₂)²) per iteration.

    Same family and rows as :func:`laplace_statistics_scenario`. Claim: one Gaussian release,
    μ = 1/(2τ²).

    Parameters
    ----------
    noise_multiplier : float
        τ.
    neighbour_row : float, optional
        As for :func:`laplace_statistics_scenario`.

    Returns
    -------
    AuditScenario
    """
    family, tables = _statistics_tables(neighbour_row)

    def make(rng: np.random.Generator) -> Callable[[int], float]:
        mechanisms = [NoisySufficientStatistics(family, t, noise_multiplier) for t in tables]
        return lambda dataset: float(mechanisms[dataset].release(rng)[0])

    return AuditScenario("DPSuffStatsPenaltyMH: noisy statistics", make, _gaussian_claim(noise_multiplier))


#: The audited mechanisms, by name (``scripts/run_audit.py`` runs them with the test suite's broken variants).
SCENARIOS: dict[str, Callable[[], AuditScenario]] = {
    "penalty": lambda: penalty_scenario(),
    "hmc_gradient": lambda: hmc_gradient_scenario(),
    "barker": lambda: barker_scenario(),
    "dpadvi": lambda: dpadvi_gradient_scenario(),
    "dpadvi_poisson": lambda: dpadvi_gradient_scenario(sampling_rate=0.5),
    "laplace_statistics": lambda: laplace_statistics_scenario(),
    "suffstats": lambda: suffstats_scenario(),
    "owner_ratio": lambda: owner_ratio_scenario(),
    "cross_row": lambda: cross_row_scenario(),
}
