"""The JAX backend's mechanisms: per-row graphs compiled through PyTensor's JAX linker, data on the device.

:class:`JaxRowMechanisms` hands DPPenaltyMH, DPHMC, DPBarkerMH and DPADVI the JAX backend's
releases in place of the default ones and passes every other mechanism (the private clip
bound) to the default backend; it runs a step's kernel for a block of iterations per device
call (:meth:`JaxRowMechanisms.kernel_block`), drawing the block's noise on the host in the
default backend's order. The pieces, each in its module (all importable from here as well):

- :mod:`pymc_dp.backends.jax_compile` — the per-row graphs made JAX functions
  (:func:`~pymc_dp.backends.jax_compile.import_jax`, :data:`JAX_DTYPES`);
- :mod:`pymc_dp.backends.jax_device` — :class:`JaxRows`: the rows on the device, the releases
  jitted on them; per-row values and clipped sums never leave the device;
- :mod:`pymc_dp.backends.jax_releases` — :class:`JaxLogLikelihoodRatio`,
  :class:`JaxClippedGradient`, :class:`JaxBarkerStatistic`, :class:`JaxPoissonGradientSum`
  (the default mechanisms' releases, the same bounds, sensitivities, noise scales and
  accounting events) and :class:`BufferedSecureNoise`;
- :mod:`pymc_dp.backends.jax_scan` — the kernels' blocks in ``lax.scan``.

JAX is imported on first use only: the package imports and runs without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive
from pymc_dp.backends.jax_compile import JAX_DTYPES, import_jax
from pymc_dp.backends.jax_device import JaxRows
from pymc_dp.backends.jax_releases import (
    BufferedSecureNoise,
    JaxBarkerStatistic,
    JaxClippedGradient,
    JaxLogLikelihoodRatio,
    JaxPoissonGradientSum,
    _noise_source,
)
from pymc_dp.backends.jax_scan import (
    _abstract,
    _first,
    _noise_shapes,
    _padded,
    _padded_batches,
    _power_of_two,
    _split_settings,
    advi_batch_rows,
)
from pymc_dp.backends.jax_scan import _jax_ops as _jax_ops  # the JAX kernels' ops (tests/test_kernels.py)
from pymc_dp.mechanisms.access import RowMechanisms
from pymc_dp.mechanisms.clipping import sensitivity_of_clipped_sum
from pymc_dp.mechanisms.subsampling import poisson_sample, sample_without_replacement

__all__ = [
    "JAX_DTYPES",
    "BufferedSecureNoise",
    "JaxBarkerStatistic",
    "JaxClippedGradient",
    "JaxLogLikelihoodRatio",
    "JaxPoissonGradientSum",
    "JaxRowMechanisms",
    "JaxRows",
    "import_jax",
]


class JaxRowMechanisms(RowMechanisms):
    """The mechanisms of one model's rows on the JAX backend (DPPenaltyMH's, DPHMC's and DPBarkerMH's releases).

    Built from the default :class:`pymc_dp.mechanisms.RowMechanisms` of a step: the log-
    likelihood ratio, the clipped gradient and the full-data Barker statistic are
    :class:`JaxLogLikelihoodRatio`, :class:`JaxClippedGradient` and
    :class:`JaxBarkerStatistic`; every other mechanism (the private clip bound's histogram)
    is the default backend's.

    Parameters
    ----------
    mechanisms : RowMechanisms
        The step's default mechanisms.
    reproducible_noise : bool
        False (default): every release draws its noise from :class:`BufferedSecureNoise`
        (``os.urandom``, the operating system's CSPRNG, read in blocks). True (testing only; do not publish):
        from the generator the step passes, derived from ``random_seed`` — the same draws as
        the default backend's.
    dtype : {"float64", "float32"}
        See :class:`JaxRows`.
    chunk_rows : int, optional
        See :class:`JaxRows`.
    whole_transition : bool
        Whether :meth:`kernel_block` runs the samplers' kernels on the device (DPHMC one call
        per iteration while tuning, and blocks).
    scan_iterations : int, default 1
        Iterations per device call of the kernels' blocks (:meth:`kernel_block`: the samplers'
        after tuning and within a tuning interval or mass-matrix window, and DPADVI's updates);
        1: none in blocks. Blocks need ``whole_transition``.

    Notes
    -----
    Neighbouring relation: that of each mechanism built. The sensitivities, noise scales and
    accounting events are those of the default mechanisms (the classes are subclasses).
    """

    def __init__(
        self,
        mechanisms: RowMechanisms,
        *,
        reproducible_noise: bool = False,
        dtype: str = "float64",
        chunk_rows: int | None = None,
        whole_transition: bool = True,
        scan_iterations: int = 1,
    ) -> None:
        if not isinstance(reproducible_noise, bool | np.bool_):
            raise TypeError(f"`reproducible_noise` must be a bool. Found {type(reproducible_noise).__name__}.")
        super().__init__(mechanisms._rows)
        self.device_rows = JaxRows(mechanisms._rows, dtype=dtype, chunk_rows=chunk_rows)
        self.dtype = dtype
        self.whole_transition = bool(whole_transition)
        self.scan_iterations = int(scan_iterations)
        self._noise = None if reproducible_noise else BufferedSecureNoise()

    def noise_source(self, rng: Any) -> Any:
        """Where this backend's releases draw their noise: OS entropy, or ``rng`` with ``reproducible_noise``."""
        return _noise_source(self._noise, rng)

    def log_likelihood_ratio(self, llr_clip: float, noise_multiplier: float, neighbouring: str):
        """A :class:`JaxLogLikelihoodRatio` on every row."""
        check_finite_positive("llr_clip", llr_clip)
        return JaxLogLikelihoodRatio(self.device_rows, llr_clip, noise_multiplier, neighbouring, self._noise)

    def barker_statistic(self, **settings: Any) -> JaxBarkerStatistic:
        """A :class:`JaxBarkerStatistic`: the full-data test, or the subsampled one with ``batch_size``."""
        return JaxBarkerStatistic(self.device_rows, noise=self._noise, **settings)

    def clipped_gradient(self, grad_clip: float, noise_multiplier: float, neighbouring: str):
        """A :class:`JaxClippedGradient` on every row."""
        return JaxClippedGradient(self.device_rows, grad_clip, noise_multiplier, neighbouring, self._noise)

    def poisson_gradient_sum(
        self, grad_clip: float, noise_multiplier: float, sampling_rate: float, neighbouring: str
    ) -> JaxPoissonGradientSum:
        """A :class:`JaxPoissonGradientSum` on Poisson batches of the rows (DPADVI's release)."""
        return JaxPoissonGradientSum(
            self.device_rows, grad_clip, noise_multiplier, sampling_rate, neighbouring, self._noise
        )

    def check_batch_gradient(self) -> None:
        """Compile the batch release now (raises if JAX cannot run it); releases nothing."""
        if self.device_rows._f_batch_sum is None:
            self.device_rows._build_batch_sum()

    def kernel_block(
        self,
        kernel,
        prior,
        *,
        gradient=None,
        gradient_releases: int = 0,
        ratio=None,
        barker=None,
        correction=None,
        batch_gradient=None,
        batch_gradient_size: int = 0,
        iterations: int | None = None,
    ):
        """A sampler's ``kernel`` run for a block of iterations per device call (``lax.scan``), or None.

        The step hands over its transition (:mod:`pymc_dp.step_methods.kernels`) and the
        mechanisms it releases through — ``gradient`` (``gradient_releases`` per iteration),
        ``ratio``, ``barker`` (with ``correction``, the source of V_cor), ``batch_gradient``
        (DPADVI's, in ``batch_gradient_size`` variational parameters) — and this backend
        runs the kernel on :class:`_DeviceReleases`: the same clipped sums, sensitivities,
        noise scales and accounting as the mechanisms' one-by-one releases. Per iteration the
        host draws from the noise source, in the default backend's order, the gradients'
        standard normals, the batch (subsampled Barker), the ratio's or Barker statistic's
        standard normal and V_cor, or DPADVI's Poisson batch and then its normals (sent as row
        indices padded to a power of two); so with ``reproducible_noise`` a block gives the one-call
        chain (tested). A block may run past the end of a chain; the iterations not used are
        never released (their noise is drawn only for the iterations asked for), and every
        iteration used was priced before the run. None unless ``whole_transition`` is set, the
        dtype is float64, the mechanisms were built here and ``iterations`` (default
        ``scan_iterations``) is at least 1 (the default: more than 1).

        Returns
        -------
        callable or None
            ``f(state, draws, settings, rng)`` → (states, infos), one row per row of
            ``draws`` (at most ``iterations``; the rest of the scan is inactive); the ratio's
            or the Barker statistic's cache then holds the chain's last point.
        """
        if not self.whole_transition or self.dtype != "float64":
            return None
        if iterations is None:
            if self.scan_iterations <= 1:
                return None
            iterations = self.scan_iterations
        rows = self.device_rows
        mechanisms = {"gradient": gradient, "ratio": ratio, "barker": barker, "batch_gradient": batch_gradient}
        if not self._ours(mechanisms):
            return None
        releases, scales = self._releases_and_scales(mechanisms, gradient_releases)
        batch_size = None if barker is None or barker.batch_size is None else int(barker.batch_size)
        loglik_owner = ratio if ratio is not None else (barker if batch_size is None else None)
        n_params, jax = rows.n_params, rows._jax
        shapes = _noise_shapes(jax, dict(releases), n_params)

        def draw_noise(source, count: int) -> dict:
            noise = {kind: np.zeros((iterations, *s.shape), dtype=s.dtype) for kind, s in shapes.items()}
            for k in range(count):  # the default backend's order, iteration by iteration
                if gradient is not None:
                    noise["gradient"][k] = source.normal(0.0, 1.0, size=(gradient_releases, n_params))
                if batch_size is not None:
                    noise["batch"][k] = sample_without_replacement(source, rows.n_rows, batch_size)
                if ratio is not None:
                    noise["ratio"][k] = source.normal(0.0, 1.0)
                if barker is not None:
                    noise["barker"][k] = source.normal(0.0, 1.0)
                    noise["correction"][k] = correction.sample(source)
            return noise

        def block(state, draws, settings, rng):
            count = len(jax.tree_util.tree_leaves(draws)[0])
            traced, static = _split_settings(settings)
            state = jax.tree_util.tree_map(lambda v: np.asarray(v, dtype=float), state)
            draws = jax.tree_util.tree_map(lambda v: _padded(v, iterations), draws)
            source = _noise_source(self._noise, rng)
            if batch_gradient is None:
                noise, block_releases = draw_noise(source, count), releases
            else:
                noise, block_releases = self._draw_batches(
                    source, batch_gradient, batch_gradient_size, count, iterations
                )
            device = rows.kernel_iterations(
                prior, kernel, block_releases, iterations, static, _abstract(jax, (state, _first(draws), traced))
            )
            point = np.zeros(n_params)
            if loglik_owner is not None:
                point = np.asarray(state[0] if isinstance(state, tuple) else state, dtype=float)
            current = loglik_owner._loglik(point) if loglik_owner is not None else np.float64(0.0)
            active = np.arange(iterations) < count
            states, infos, point, current = device(state, point, current, draws, noise, active, traced, scales)
            if ratio is not None:
                ratio._cached_point, ratio._cached_loglik, ratio._pending = point.tobytes(), current, None
            elif loglik_owner is not None:
                barker._cached = {point.tobytes(): current}
            return jax.tree_util.tree_map(lambda v: v[:count], (states, infos))

        return block

    def _ours(self, mechanisms: dict) -> bool:
        """Whether every mechanism given is this backend's own, on these device rows (else no block)."""
        types = {
            "gradient": JaxClippedGradient,
            "ratio": JaxLogLikelihoodRatio,
            "barker": JaxBarkerStatistic,
            "batch_gradient": JaxPoissonGradientSum,
        }
        used = {kind: m for kind, m in mechanisms.items() if m is not None}
        return bool(used) and all(
            isinstance(m, types[kind]) and m._rows is self.device_rows for kind, m in used.items()
        )

    def _releases_and_scales(self, mechanisms: dict, gradient_releases: int) -> tuple[tuple, dict]:
        """The kernels' releases entries (kind, count or batch size) and each release's public scales on the device.

        Gradient: (b_g, σ); ratio: (b, τ·Δ per unit of ‖θ′ − θ‖); Barker: (B, t or N₀, C);
        DPADVI's batch: (b, σ, q). The batch's own entry is set per block (its padded size).
        """
        gradient, ratio, barker, batch = (mechanisms[k] for k in ("gradient", "ratio", "barker", "batch_gradient"))
        releases, scales = [], {}
        if gradient is not None:
            releases.append(("gradient", int(gradient_releases)))
            scales["gradient"] = np.array([gradient.grad_clip, gradient.std, 0.0])
        if ratio is not None:
            per_distance = sensitivity_of_clipped_sum(ratio.llr_clip, ratio.neighbouring) * ratio.noise_multiplier
            releases.append(("ratio", 1))
            scales["ratio"] = np.array([ratio.llr_clip, per_distance, 0.0])
        if barker is not None:
            releases.append(("barker", 0 if barker.batch_size is None else int(barker.batch_size)))
            scales["barker"] = np.array([barker.llr_clip, barker.likelihood_scale, barker.correction_variance])
        if batch is not None:
            bound = float(self.device_rows._bound(batch.grad_clip))
            scales["batch_gradient"] = np.array([bound, batch.std, batch.sampling_rate])
        return tuple(releases), scales

    def batch_gradient_release(self, sampling_rate: float, size: int, longest: int = 0) -> tuple:
        """The kernels' releases entry of DPADVI's batch release: ("batch_gradient", (batch rows, chunk, D)).

        The batch is padded to :func:`advi_batch_rows` rows (or the next power of two above
        ``longest``, the longest batch of a block), split into chunks of at most the device
        rows' chunk size; one compilation per entry.
        """
        rows = self.device_rows
        batch_rows = max(advi_batch_rows(rows.n_rows, sampling_rate), _power_of_two(max(int(longest), 1)))
        return ("batch_gradient", (batch_rows, rows._batch_chunk(batch_rows), int(size)))

    def _draw_batches(self, source, mechanism, size: int, count: int, iterations: int) -> tuple[dict, tuple]:
        """DPADVI's noise for ``count`` iterations in the release's order (the Poisson batch, then its normals)."""
        rows = self.device_rows
        batches, z = [], np.zeros((iterations, size))
        for k in range(count):
            batches.append(poisson_sample(source, rows.n_rows, mechanism.sampling_rate))
            z[k] = source.normal(0.0, 1.0, size=size)
        entry = self.batch_gradient_release(mechanism.sampling_rate, size, max(len(b) for b in batches))
        batch_rows, chunk, _ = entry[1]
        index, keep = _padded_batches(batches, batch_rows, iterations)
        shape = (iterations, batch_rows // chunk, chunk)
        return {"batch_gradient": z, "index": index.reshape(shape), "keep": keep.reshape(shape)}, (entry,)

    def compile_kernel(self, kernel, prior, state, draws, settings, *, releases: tuple, iterations: int) -> None:
        """Compile ``kernel``'s block for these (example) state, draws and settings now; releases nothing.

        Raises if JAX cannot run the prior or the kernel (the caller turns blocks off).
        """
        jax = self.device_rows._jax
        traced, static = _split_settings(settings)
        self.device_rows.kernel_iterations(
            prior, kernel, tuple(releases), int(iterations), static, _abstract(jax, (state, draws, traced))
        )
