"""Releases of an exponential family's aggregate sufficient statistics (Laplace once, or Gaussian per iteration).

``release_statistics`` adds exact integer noise by default: each row's statistic is rounded to a
grid of spacing γ = 2^e, the integers are summed exactly, and discrete Laplace or discrete
Gaussian noise is added (Canonne, Kamath and Steinke 2020), so the release's guarantee does not
rest on floating-point noise (Mironov 2012).

The rows of a sufficient-statistics release are read here and nowhere else:
:class:`PrivateSufficientStatistics` checks them against the family's public bounds (or clamps
them into the bounds), sums the per-row statistics and keeps only that sum; the step and
``release_statistics`` hold this object, never the rows, and get back only noisy releases.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive
from pymc_dp.accounting.events import GaussianReleases, PrivacyEvent, PureDPReleases
from pymc_dp.mechanisms.noise import SecureNoise, discrete_gaussian_noise, discrete_laplace_noise

__all__ = [
    "BLOCK_BYTES",
    "GRID_BITS",
    "MIN_NOISE_UNITS",
    "NoisySufficientStatistics",
    "PrivateSufficientStatistics",
    "RowSums",
    "checked_row_sums",
    "grid_exponent",
    "is_partitioned",
    "laplace_sufficient_statistics",
    "refuse_partitioned_rows",
    "row_sums",
]

#: The discrete noise's grid γ = 2^e is the largest power of two with N·γ ≤ scale·2^−GRID_BITS and
#: γ ≤ (narrowest non-zero coordinate width)·2^−GRID_BITS: the rounding of all N rows together moves a
#: coordinate by at most N·γ/2 ≤ 2^−21 of the noise scale, and the noise spans ≥ N·2^20 grid units.
GRID_BITS = 20

#: The fewest grid units a noise scale may span (after any coarsening of the grid for far bounds): below it a
#: release is refused. At 2^10 units the discrete noise's variance is within 10⁻⁶ of the continuous one's and
#: the discrete Gaussian's (ε, δ) within e^{−2π²·2^20} of the continuous curve.
MIN_NOISE_UNITS = 2**10


def grid_exponent(family, scale: float, n_rows: int) -> int:
    """e of the grid γ = 2^e of a discrete-noise release with noise scale ``scale`` (public settings only).

    The largest e with N·2^e ≤ scale·2^−:data:`GRID_BITS` and 2^e ≤ w·2^−:data:`GRID_BITS`, w the
    narrowest non-zero width of the family's coordinate intervals — raised, if needed, until
    every bound lies within 2⁶² grid units (int64 rows), which happens only when the bounds
    reach about 2⁴¹/N times beyond the noise scale (for bounds of the size of Δ₁: ε·N above
    about 2·10¹²); the rounding of
    the N rows then moves S by more than 2⁻²¹ of the scale, while the privacy guarantee is
    unchanged (it never depends on γ).

    Raises
    ------
    ValueError
        When that grid would leave fewer than :data:`MIN_NOISE_UNITS` grid units in the noise
        scale (release with ``noise="continuous"`` or bounds nearer zero). The check reads
        public settings only.
    """
    scale = check_finite_positive("scale", scale)
    lo, hi = family.intervals()
    widths = np.asarray(hi, dtype=float) - np.asarray(lo, dtype=float)
    widths = widths[widths > 0]
    limit = min([scale / max(int(n_rows), 1), *widths.tolist()])
    exponent = math.frexp(limit)[1] - 1 - GRID_BITS  # 2^(frexp − 1) ≤ limit < 2^frexp
    reach = float(max(np.max(np.abs(lo)), np.max(np.abs(hi)))) if len(lo) else 0.0
    if reach > 0.0:
        exponent = max(exponent, math.frexp(reach)[1] - 61)  # reach < 2^frexp ≤ 2^61·γ: |units| ≤ 2^61
    if math.ldexp(scale, -exponent) < MIN_NOISE_UNITS:
        raise ValueError(
            "`noise`='discrete' needs the noise scale to span at least 2^10 units of a grid on which the "
            f"family's bounds stay below 2^62 units. Found bounds reaching {reach!r} and a noise scale of "
            f"{scale!r}; use noise='continuous' or bounds nearer zero."
        )
    return exponent


def _grid_sum(row_statistics: np.ndarray, family, exponent: int) -> list[int]:
    """Σᵢ round(clip(S(xᵢ))/2^e) per coordinate, exactly, as Python integers.

    Each row's statistic is clipped to the family's intervals (a no-op for admissible rows; NaN
    taken as the lower bound), scaled by 2^−e (exact: a power of two) and rounded half to even,
    so it lies in [Lⱼ, Uⱼ] of :meth:`~pymc_dp.exponential_family.ExponentialFamily.grid_intervals`
    (scaling and rounding are monotone); sums run in int64 over chunks short enough never to
    overflow (a length from public bounds only), then in Python integers. Works on a copy
    (``row_statistics`` may be a view of the caller's rows).
    """
    lo, hi = (np.asarray(v, dtype=float) for v in family.intervals())
    rows = np.array(row_statistics, dtype=float).reshape(-1, lo.size)
    np.fmax(rows, lo, out=rows)  # fmax/fmin take the bound where the row is NaN
    np.fmin(rows, hi, out=rows)
    np.ldexp(rows, -exponent, out=rows)
    units = np.rint(rows, out=rows).astype(np.int64)
    lower, upper = family.grid_intervals(exponent)
    largest = max(1, *(abs(v) for v in lower), *(abs(v) for v in upper))
    chunk = max(1, (2**63 - 1) // largest)
    totals = [0] * lo.size
    for start in range(0, units.shape[0], chunk):
        part = units[start : start + chunk].sum(axis=0, dtype=np.int64)
        totals = [t + int(v) for t, v in zip(totals, part, strict=True)]
    return totals


@dataclass(frozen=True)
class RowSums:
    """The exact sums of a set of rows' statistics (private: held by the mechanism, never released as such).

    Attributes
    ----------
    n_rows : int
        How many rows were summed.
    exact : ndarray
        Σᵢ S(xᵢ) in float64 (continuous noise, and zero-sensitivity releases).
    grid : list of int or None
        Σᵢ round(clip(S(xᵢ))/2^e) per coordinate as Python integers (discrete noise), or None
        without a grid.

    Partial sums over disjoint sets of rows add (:meth:`__add__`): the grid sums exactly
    (integers), the float sums up to rounding.
    """

    n_rows: int
    exact: np.ndarray
    grid: list[int] | None

    def __add__(self, other: RowSums) -> RowSums:
        grid = None if self.grid is None else [a + b for a, b in zip(self.grid, other.grid, strict=True)]
        return RowSums(self.n_rows + other.n_rows, self.exact + other.exact, grid)

    def __repr__(self) -> str:  # the sums are private: never in a message or a log
        return f"RowSums(n_rows={self.n_rows}, <sums withheld>)"


#: Bytes of per-row statistics (float64) computed at once: the rows are summed in blocks of at most this size,
#: so a release needs memory for its rows and one block, not for N × d statistics (at N = 10⁶ and d = 230 the
#: whole matrix took 1.8 GB, three times over). The integer sums are exact whatever the blocks; the float sums
#: of data sets under one block are taken as before.
BLOCK_BYTES = 2**26


def checked_row_sums(family, rows: np.ndarray, exponent: int | None) -> RowSums:
    """The sums of rows already mapped into the family's bounds (``family.check_data``'s output).

    The per-row work of every sufficient-statistics release: S(xᵢ) of each row, their float sum
    and, with a grid exponent, each row's statistic clipped and rounded to the grid on its own and
    the integers summed exactly (:func:`_grid_sum`), in blocks of rows of :data:`BLOCK_BYTES`. A
    function of the rows only, so that a partition of the rows gives its part of the sums and the
    parts add up exactly.
    """
    rows = np.asarray(rows)
    width = max(int(np.asarray(family.intervals()[0]).size), 1)
    block = max(1, BLOCK_BYTES // (8 * width))
    total: RowSums | None = None
    for start in range(0, max(rows.shape[0], 1), block):  # one (possibly empty) block at least
        part = rows[start : start + block]
        row_statistics = family.row_statistics(part)
        grid = None if exponent is None else _grid_sum(row_statistics, family, exponent)
        sums = RowSums(int(part.shape[0]), row_statistics.sum(axis=0), grid)
        total = sums if total is None else total + sums
    return total


def row_sums(family, data: Any, out_of_bounds: str, exponent: int | None) -> RowSums:
    """Raw rows → their :class:`RowSums`: ``family.check_data`` (each row mapped into the bounds on its own)
    then :func:`checked_row_sums`. What each partition of a cluster's rows runs (pymc_dp.backends.dask_rows).

    Notes
    -----
    Neighbouring relation: substitute. Each row is clamped and rounded on its own, so one row
    replaced moves the sums of the partition that holds it, and so the total, by at most the
    family's (grid) sensitivities, however the rows are partitioned.
    """
    return checked_row_sums(family, family.check_data(data, out_of_bounds), exponent)


def _is_partitioned(value: Any) -> bool:
    """Whether ``value`` is a Dask collection (by its type's module: Dask need not be installed or imported)."""
    return type(value).__module__.partition(".")[0] == "dask"


def is_partitioned(data: Any) -> bool:
    """Whether ``data`` (an array, or a tuple of arrays) is given as Dask collections (nothing read)."""
    parts = data if isinstance(data, tuple | list) else (data,)
    return any(_is_partitioned(part) for part in parts)


def refuse_partitioned_rows(data: Any) -> None:
    """Refuse rows given as Dask collections: this in-memory mechanism would read every row on the client."""
    if is_partitioned(data):
        parts = data if isinstance(data, tuple | list) else (data,)
        raise TypeError(
            "`data` given as Dask arrays must be released by pymc_dp.release_statistics, which sums each partition "
            "on the workers; this in-memory mechanism would read every row on the client. Found "
            f"{', '.join(type(part).__name__ for part in parts)}."
        )


class PrivateSufficientStatistics:
    """The exact aggregate S = Σᵢ S(xᵢ) of one data set under an exponential family; only noisy releases leave.

    The constructor reads the rows once: it maps every row into the family's public bounds
    (``out_of_bounds="clamp"``, row by row, nothing reported) or refuses data with a row
    outside (``"raise"``, no count and no value in the message), checks their shapes and sums
    the per-row statistics. The rows are not kept. What the object exposes is public:
    ``family``, ``out_of_bounds``, N (``n_rows``, public under substitute neighbours) and the
    sensitivities; S itself leaves only through :meth:`laplace_release`,
    :meth:`laplace_noisy`, :meth:`gaussian_noisy` and :meth:`gaussian_releases`.

    Parameters
    ----------
    family : pymc_dp.exponential_family.ExponentialFamily
        Gives S(x), the bounds, Δ₁, Δ₂ and the projection from public settings.
    data : array or (X, y)
        The raw rows.
    out_of_bounds : {"clamp", "raise"}, default "clamp"
        What happens to a row outside the public bounds (see
        :meth:`pymc_dp.exponential_family.ExponentialFamily.check_data`).
    grid_scale : float, optional
        The noise scale (Laplace b or Gaussian σ, in the statistics' units) of the discrete-noise
        release to come: the constructor then also rounds every row's statistic to the grid
        γ = 2^e of :func:`grid_exponent` and keeps the exact integer sum, which
        :meth:`discrete_laplace_noisy` and :meth:`discrete_gaussian_noisy` release.

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public). Clamping maps each row on
    its own into the bounds, so replacing one raw row moves S by at most Δ₁ (L1) and Δ₂ (L2),
    the sensitivities of the family, whatever the raw rows. On the grid, each row's statistic is
    clipped to the family's intervals and rounded on its own, and the integers are summed
    exactly, so replacing one row moves the integer sum by at most the family's
    :meth:`~pymc_dp.exponential_family.ExponentialFamily.grid_sensitivities` — exact integers
    that account for the rounding, and a sum with no floating-point error. The object pickles
    (with S, not the rows) so that a step holding it can run its chains in worker processes;
    never publish a pickled step.
    """

    def __init__(self, family, data, out_of_bounds: str = "clamp", grid_scale: float | None = None) -> None:
        if grid_scale is not None:
            grid_scale = check_finite_positive("grid_scale", grid_scale)
        refuse_partitioned_rows(data)
        rows = family.check_data(data, out_of_bounds)
        self.family = family
        self.out_of_bounds = out_of_bounds
        self.n_rows = int(np.asarray(rows).shape[0])
        #: e of the grid γ = 2^e (public: from the family, the scale and N), or None without one.
        self.grid_exponent = None if grid_scale is None else grid_exponent(family, grid_scale, self.n_rows)
        self._read_sums: Callable[[int | None], RowSums] | None = None
        self._hold(checked_row_sums(family, rows, self.grid_exponent))

    def _hold(self, sums: RowSums) -> None:
        """Keep S (and its grid integers): the only data-dependent values the object holds."""
        self._exact_statistics = sums.exact
        self._grid_statistics: list[int] | None = sums.grid

    @classmethod
    def deferred(
        cls,
        family,
        n_rows: int,
        read_sums: Callable[[int | None], RowSums],
        out_of_bounds: str = "clamp",
        grid_scale: float | None = None,
    ) -> PrivateSufficientStatistics:
        """The mechanism on rows held elsewhere (a cluster's partitions), read only at its first release.

        ``n_rows`` is N from public metadata (the partitions' lengths), never counted from rows;
        ``read_sums(grid_exponent)`` returns the :class:`RowSums` of all rows, each partition's
        computed by :func:`row_sums` (the same per-row code as the in-memory constructor) and the
        partition sums added exactly. It is called once, when S is first needed (a release), so
        that a caller who charges the budget between construction and release
        (``release_statistics``) reads no row before the charge. The grid exponent comes from
        public settings and N, as in the constructor.
        """
        if grid_scale is not None:
            grid_scale = check_finite_positive("grid_scale", grid_scale)
        self = cls.__new__(cls)
        self.family = family
        self.out_of_bounds = out_of_bounds
        self.n_rows = int(n_rows)
        self.grid_exponent = None if grid_scale is None else grid_exponent(family, grid_scale, self.n_rows)
        self._read_sums = read_sums
        return self

    def __getattr__(self, name: str) -> Any:
        # Called only for a missing attribute: S of a deferred mechanism, read where the rows are on first use.
        if name in ("_exact_statistics", "_grid_statistics") and self.__dict__.get("_read_sums") is not None:
            sums = self._read_sums(self.grid_exponent)
            if sums.n_rows != self.n_rows:  # the partitions' lengths were stated wrongly (public metadata)
                raise ValueError(
                    f"`data` must hold the {self.n_rows} rows its partitions' lengths state. Found {sums.n_rows} "
                    "rows read: compute the chunk sizes again (`compute_chunk_sizes()`)."
                )
            self._hold(sums)
            self._read_sums = None
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getstate__(self) -> dict:
        self._exact_statistics  # noqa: B018  (a deferred mechanism reads S now: it pickles with S, never a reader)
        return self.__dict__.copy()

    @property
    def grid(self) -> float | None:
        """γ = 2^e, the spacing of the discrete-noise grid (None when built without ``grid_scale``)."""
        return None if self.grid_exponent is None else math.ldexp(1.0, self.grid_exponent)

    def grid_sensitivities(self) -> tuple[int, int]:
        """(Δ₁, Δ₂²) of the rounded rows' integer sum in grid units (public, exact)."""
        if self.grid_exponent is None:
            raise ValueError("`grid_scale` must be given at construction for a discrete-noise release. Found None.")
        return self.family.grid_sensitivities(self.grid_exponent)

    def _on_grid(self, noise: list[int]) -> np.ndarray:
        """γ·(K + Z) as floats: the integer release K + Z, scaled by the power of two (post-processing)."""
        return np.array(
            [math.ldexp(float(k + z), self.grid_exponent) for k, z in zip(self._grid_statistics, noise, strict=True)]
        )

    def discrete_laplace_noisy(
        self, epsilon: float, source: np.random.Generator | SecureNoise | None = None
    ) -> tuple[np.ndarray, float]:
        """The (ε, 0)-DP release γ·(K + Z), Zⱼ discrete Laplace of scale t = Δ₁ᵍ/ε; and its scale γt.

        K is the exact integer sum of the rows rounded to the grid, Δ₁ᵍ its L1 sensitivity in grid
        units (:meth:`grid_sensitivities`, exact), and t = Δ₁ᵍ/ε the exact rational of ε's binary
        value. Every output is reachable from every data set, and the probabilities of an output
        under neighbouring data sets differ by the factor exp((‖o − K′‖₁ − ‖o − K‖₁)/t) ≤ e^ε.
        ``source``: None for OS entropy, a numpy Generator for reproducible noise.
        """
        epsilon = check_finite_positive("epsilon", epsilon)
        l1 = self.grid_sensitivities()[0]
        if l1 == 0:  # every row has the same statistic: S = N·S(x) is public
            return self._exact_statistics.copy(), 0.0
        scale = Fraction(l1) / Fraction(epsilon)
        noise = discrete_laplace_noise(scale, len(self._grid_statistics), source)
        return self._on_grid(noise), float(scale * Fraction(self.grid))

    def discrete_gaussian_noisy(
        self, noise_multiplier: float, source: np.random.Generator | SecureNoise | None = None
    ) -> tuple[np.ndarray, float]:
        """The release γ·(K + Z), Zⱼ discrete Gaussian with σᵍ² = τ²·Δ₂ᵍ²; and its standard deviation γσᵍ.

        Δ₂ᵍ² is the squared L2 sensitivity of the integer sum K in grid units (exact), so
        Δ₂ᵍ/σᵍ = 1/τ exactly: ρ = 1/(2τ²)-zCDP (Canonne, Kamath and Steinke 2020), the ρ of
        :meth:`gaussian_events`. σᵍ is at least :data:`MIN_NOISE_UNITS` grid units (refused otherwise).
        """
        noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        l2_squared = self.grid_sensitivities()[1]
        if l2_squared == 0:
            return self._exact_statistics.copy(), 0.0
        variance = Fraction(noise_multiplier) ** 2 * l2_squared
        if variance < MIN_NOISE_UNITS**2:
            raise ValueError(
                "`noise_multiplier` must give a discrete Gaussian of at least 2^10 grid units. Found "
                f"σ² = {float(variance)!r} units²; build with `grid_scale` equal to the release's σ."
            )
        noise = discrete_gaussian_noise(variance, len(self._grid_statistics), source)
        return self._on_grid(noise), math.ldexp(noise_multiplier * math.sqrt(l2_squared), self.grid_exponent)

    @property
    def l1_sensitivity(self) -> float:
        """Δ₁ = sup ‖S(x) − S(x′)‖₁ (substitute neighbours), from the family's public settings."""
        return self.family.l1_sensitivity()

    @property
    def l2_sensitivity(self) -> float:
        """Δ₂ = sup ‖S(x) − S(x′)‖₂ (substitute neighbours), from the family's public settings."""
        return self.family.l2_sensitivity()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.family!r}, n_rows={self.n_rows}, out_of_bounds={self.out_of_bounds!r})"

    @staticmethod
    def laplace_events(epsilon: float, label: str) -> list[PrivacyEvent]:
        """The accounting of one Laplace release at ε (b = Δ₁/ε): pure ε-DP."""
        return [PureDPReleases(epsilon, 1, label=label)]

    def laplace_release(self, epsilon: float, rng: np.random.Generator | SecureNoise) -> tuple[np.ndarray, float]:
        """One (ε, 0)-DP release Proj(S + Laplace(Δ₁/ε)^d); returns (statistics, Laplace scale b = Δ₁/ε)."""
        noisy, scale = self.laplace_noisy(epsilon, rng)
        return self.family.project(noisy, self.n_rows), scale

    def laplace_noisy(self, epsilon: float, rng: np.random.Generator | SecureNoise) -> tuple[np.ndarray, float]:
        """The mechanism's output itself, S + Laplace(Δ₁/ε)^d, before the projection; and b = Δ₁/ε.

        This is the (ε, 0)-DP release; the projection of :meth:`laplace_release` is
        post-processing of it. Noise-aware likelihoods model this unprojected vector.
        """
        epsilon = check_finite_positive("epsilon", epsilon)
        scale = self.l1_sensitivity / epsilon
        if scale == 0.0:  # every row has the same statistic: S = N·S(x) is public
            return self._exact_statistics.copy(), 0.0
        noisy = self._exact_statistics + np.asarray(
            rng.laplace(0.0, scale, size=self._exact_statistics.shape), dtype=float
        )
        return noisy, scale

    @staticmethod
    def gaussian_events(noise_multiplier: float, label: str) -> list[PrivacyEvent]:
        """The accounting of one Gaussian release at multiplier τ (σ = τΔ₂)."""
        return [GaussianReleases(noise_multiplier, 1, label=label)]

    def gaussian_noisy(
        self, noise_multiplier: float, rng: np.random.Generator | SecureNoise
    ) -> tuple[np.ndarray, float]:
        """One Gaussian release S + N(0, σ² I) with σ = τΔ₂, before any projection; and σ.

        Replacing one row moves S by at most Δ₂ in L2 norm, so this is the Gaussian mechanism
        with Δ₂/σ = 1/τ (its cost: :meth:`gaussian_events`).
        """
        noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        std = noise_multiplier * self.l2_sensitivity
        if std == 0.0:  # every row has the same statistic: S = N·S(x) is public
            return self._exact_statistics.copy(), 0.0
        noise = np.asarray(rng.normal(0.0, std, size=self._exact_statistics.shape), dtype=float)
        noisy = self._exact_statistics + noise
        return noisy, std

    def gaussian_releases(self, noise_multiplier: float) -> NoisySufficientStatistics:
        """A :class:`NoisySufficientStatistics` on S: a fresh Ŝ = S + N(0, (τΔ₂)² I) on every call."""
        return NoisySufficientStatistics._from_statistics(
            self, check_finite_positive("noise_multiplier", noise_multiplier)
        )


def laplace_sufficient_statistics(
    family, data, epsilon: float, rng: np.random.Generator | SecureNoise, out_of_bounds: str = "clamp"
) -> tuple[np.ndarray, float, int]:
    """The Laplace mechanism on the aggregate sufficient statistics of an exponential family.

    Maps every row into the family's public bounds (``out_of_bounds="clamp"``, row by row,
    nothing reported) or refuses data with a row outside (``"raise"``, no count and no value
    in the message), computes S = Σᵢ S(xᵢ), adds i.i.d. Laplace(0, b) noise with
    b = Δ₁/ε to every coordinate and projects the result onto the feasible set (e.g.
    non-negative counts summing to N). Only the projected noisy statistics leave.

    Parameters
    ----------
    family : pymc_dp.exponential_family.ExponentialFamily
        Gives S(x), Δ₁ and the projection from public settings.
    data : array or (X, y)
        The raw rows.
    epsilon : float
        ε > 0 of the release.
    rng : Generator or SecureNoise
        Noise source.
    out_of_bounds : {"clamp", "raise"}, default "clamp"
        What happens to a row outside the public bounds (see
        :meth:`pymc_dp.exponential_family.ExponentialFamily.check_data`).

    Returns
    -------
    (statistics, scale, n_rows)
        The released statistics, the Laplace scale b = Δ₁/ε and N.

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public). Replacing one row moves
    S by at most Δ₁ in L1 norm, so the release is (ε, 0)-DP (Dwork et al. 2006; Foulds et al.
    2016, eq. 16–17); the projection is post-processing. Clamping maps each row on its own
    into the bounds, so a replaced row still moves S by at most Δ₁.

    References
    ----------
    .. [1] Foulds, J., Geumlek, J., Welling, M. and Chaudhuri, K. (2016). On the theory and
       practice of privacy-preserving Bayesian data analysis. UAI, §3.2, eq. (16)–(17).
    """
    epsilon = check_finite_positive("epsilon", epsilon)
    statistics = PrivateSufficientStatistics(family, data, out_of_bounds)
    return (*statistics.laplace_release(epsilon, rng), statistics.n_rows)


class NoisySufficientStatistics:
    """Fresh Gaussian-noised copies of an exponential family's aggregate statistics (Alg. 3).

    Holds S = Σᵢ S(xᵢ), computed once from rows mapped into the family's public bounds
    (``out_of_bounds="clamp"``) or checked against them (``"raise"``), and releases
    Ŝ = S + N(0, ξ I) with √ξ = τ Δ₂ on every call. S itself never leaves.

    Parameters
    ----------
    family : pymc_dp.exponential_family.ExponentialFamily
    data : array or (X, y)
        Raw rows.
    noise_multiplier : float
        τ > 0.
    out_of_bounds : {"clamp", "raise"}, default "clamp"
        What happens to a row outside the public bounds (see
        :meth:`pymc_dp.exponential_family.ExponentialFamily.check_data`).

    Notes
    -----
    Neighbouring relation: substitute (one row replaced, N public); Δ₂ = sup ‖S(x) − S(x′)‖₂.
    Each release is a Gaussian mechanism with Δ₂/√ξ = 1/τ, i.e. μ = 1/(2τ²) (Sommer et al.
    2019, Lemma 12), whatever the data. The cost of a release is O(d), independent of N.

    References
    ----------
    .. [1] Yıldırım, S. and Ermiş, B. (2019). Exact MCMC with differentially private moves.
       Statistics and Computing 29, §3.3, Algorithm 3, eq. (7)–(8).
    """

    def __init__(self, family, data, noise_multiplier: float, out_of_bounds: str = "clamp") -> None:
        noise_multiplier = check_finite_positive("noise_multiplier", noise_multiplier)
        self._setup(PrivateSufficientStatistics(family, data, out_of_bounds), noise_multiplier)

    @classmethod
    def _from_statistics(
        cls, statistics: PrivateSufficientStatistics, noise_multiplier: float
    ) -> NoisySufficientStatistics:
        self = cls.__new__(cls)
        self._setup(statistics, noise_multiplier)
        return self

    def _setup(self, statistics: PrivateSufficientStatistics, noise_multiplier: float) -> None:
        self.noise_multiplier = noise_multiplier
        self.family = statistics.family
        self.n_rows = statistics.n_rows
        self._exact_statistics = statistics._exact_statistics
        self.variance = (self.noise_multiplier * statistics.l2_sensitivity) ** 2  # ξ

    def __getstate__(self) -> dict:
        raise TypeError("NoisySufficientStatistics holds exact statistics and cannot be pickled.")

    @staticmethod
    def events(noise_multiplier: float, count: int, label: str) -> list[PrivacyEvent]:
        """The accounting of ``count`` releases of fresh noisy statistics: Gaussian, Δ₂/σ = 1/τ each."""
        return [GaussianReleases(noise_multiplier, int(count), label=label)]

    def release(self, rng: np.random.Generator | SecureNoise) -> np.ndarray:
        """One fresh Ŝ ~ N(S, ξ I)."""
        if self.variance == 0.0:
            return self._exact_statistics.copy()
        return self._exact_statistics + np.asarray(
            rng.normal(0.0, math.sqrt(self.variance), size=self._exact_statistics.shape)
        )
