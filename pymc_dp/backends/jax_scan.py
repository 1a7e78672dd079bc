"""The JAX backend's fused blocks: a sampler's kernel run for a block of iterations in one ``lax.scan``.

A step hands its transition over (:mod:`pymc_dp.step_methods.kernels`); the backend runs it on
:class:`_DeviceReleases` (the kernels' ``Releases`` inside one jitted iteration: the step's
mechanisms' clipped sums on the device rows plus the standard normals the host drew, scaled),
with the kernels' array operations in JAX (:func:`_jax_ops`). Here too: how kernel settings
are split into traced and static parts, the abstract shapes a block is compiled on, the
padding of a block's draws and row batches, and the scan body that skips the inactive
iterations of a block shorter than its compiled length. This module names no sampler.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np

from pymc_dp.backends.jax_compile import _clip_ratios

__all__ = ["advi_batch_rows"]


def _jax_ops(jax):
    """The kernels' ``ArrayOps`` in JAX (built here: the mechanism layer names no sampler)."""
    jnp = jax.numpy

    def loop(count, body, carry, stop=None):  # every body runs; `stop` is the host's shortcut only
        return jax.lax.fori_loop(0, int(count), body, carry)

    def when(condition, compute, otherwise):
        return jnp.where(condition, compute(), otherwise)

    return SimpleNamespace(xp=jnp, loop=loop, when=when, select=jnp.where)


def _traced(value) -> bool:
    """Whether a settings field is traced (floats, float arrays, tuples of floats) rather than fixed (anything else)."""
    if isinstance(value, float | np.floating):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype.kind == "f"
    return isinstance(value, tuple) and bool(value) and all(isinstance(v, float | np.floating) for v in value)


def _split_settings(settings) -> tuple[Any, tuple]:
    """(traced fields, static part) of kernel settings: a NamedTuple's floats are traced, the rest fixed (hashable)."""
    if isinstance(settings, tuple) and hasattr(settings, "_fields"):
        fields = settings._asdict()
        traced = {name: np.asarray(value, dtype=float) for name, value in fields.items() if _traced(value)}
        fixed = tuple(
            (name, value.item() if isinstance(value, np.generic) else value)
            for name, value in fields.items()
            if name not in traced
        )
        return traced, (type(settings), fixed)
    return (None if settings is None else np.asarray(settings, dtype=float)), (None, ())


def _settings_with(traced, static: tuple):
    """A kernel's settings again, from :func:`_split_settings`' two parts (inside the jitted function)."""
    kind, fixed = static
    return traced if kind is None else kind(**traced, **dict(fixed))


def _noise_shapes(jax, kinds: dict, n_params: int) -> dict:
    """Abstract values of one iteration's standard normals (and batch, V_cor) per release kind."""
    spec = jax.ShapeDtypeStruct
    index_type = np.int64 if jax.config.jax_enable_x64 else np.int32
    shapes = {}
    if "gradient" in kinds:
        shapes["gradient"] = spec((kinds["gradient"], n_params), np.float64)
    if "ratio" in kinds:
        shapes["ratio"] = spec((), np.float64)
    if "barker" in kinds:
        shapes["barker"] = spec((), np.float64)
        shapes["correction"] = spec((), np.float64)
        shapes["batch"] = spec((max(kinds["barker"], 1),), index_type)
    if "batch_gradient" in kinds:  # (padded batch rows, rows per chunk, D): the Poisson batch and the normals
        batch_rows, chunk, size = kinds["batch_gradient"]
        shapes["batch_gradient"] = spec((size,), np.float64)
        shapes["index"] = spec((batch_rows // chunk, chunk), index_type)
        shapes["keep"] = spec((batch_rows // chunk, chunk), np.bool_)
    return shapes


class _DeviceReleases:
    """The kernels' :class:`~pymc_dp.step_methods.kernels.Releases` inside one jitted iteration.

    Each release is the clipped sum of the step's mechanism, computed on the device rows, plus
    the iteration's standard normals (drawn on the host from the step's noise source, in the
    default backend's order) times the mechanism's noise scale: the same release, sensitivity
    and accounting as :class:`JaxLogLikelihoodRatio`, :class:`JaxClippedGradient` and
    :class:`JaxBarkerStatistic` make one call at a time. ``point`` and ``current`` (its
    per-row log-likelihoods) follow the chain through :meth:`keep`; they stay on the device.
    A trace-time object: built per iteration inside ``lax.scan``.
    """

    def __init__(self, functions: dict, noise: dict, scales: dict, point, current, data, mask) -> None:
        self._f = functions
        self._noise, self._scales, self._data, self._mask = noise, scales, data, mask
        self.point, self.current = point, current
        self._proposed = None

    def prior_logp(self, theta):
        return self._f["prior_logp"](theta)

    def prior_grad(self, theta):
        return self._f["prior_grad"](theta)

    def gradient(self, theta, index):
        bound, std, _ = self._scales["gradient"]
        clipped = self._f["gradient_sum"](theta, bound, self._data, self._mask)
        return self._f["add_noise"](clipped, std, self._noise["gradient"][index])

    def ratio(self, theta, proposal, valid):
        # σ = τ·Δ with Δ = 2b‖θ′ − θ‖ (substitute) or b‖θ′ − θ‖: linear in the distance. A bound or noise
        # scale that overflows is no private release (the host refuses it): nothing is released.
        jnp = self._f["jnp"]
        llr_clip, std_per_distance, _ = self._scales["ratio"]
        distance = jnp.sqrt(jnp.sum((proposal - theta) ** 2))
        released = valid & jnp.isfinite(distance) & jnp.isfinite(llr_clip * distance)
        released = released & jnp.isfinite(std_per_distance * distance)
        safe = jnp.where(released, proposal, theta)
        distance = jnp.where(released, distance, 0.0)
        clipped, proposed = self._f["ratio_sum"](safe, self.current, llr_clip * distance, self._data, self._mask)
        self._proposed = (safe, proposed)
        std = std_per_distance * distance
        return self._f["add_noise"](clipped, std, self._noise["ratio"]), std, released

    def barker(self, theta, proposal):
        jnp = self._f["jnp"]
        bound, scale, correction_variance = self._scales["barker"]  # scale: t (full data) or N₀ (subsampled)
        z = self._noise["barker"]
        if self._f["kinds"]["barker"] == 0:  # eq. 9, as JaxBarkerStatistic.release
            clipped, proposed = self._f["ratio_sum"](proposal, self.current, bound, self._data, self._mask)
            self._proposed = (proposal, proposed)
            return scale * self._f["add_noise"](clipped, jnp.sqrt(correction_variance) / scale, z)
        # eq. 18 on the batch whose row indices the host drew
        lik_fn, batch = self._f["lik_fn"], self._noise["batch"]
        flat = tuple(d.reshape(-1, *d.shape[2:]) for d in self._data[: self._f["n_inputs"]])
        rows = tuple(jnp.take(d, batch, axis=0) for d in flat)
        ratios = _clip_ratios(jnp, lik_fn(proposal, *rows) - lik_fn(theta, *rows), bound)
        batch_variance = jnp.minimum(scale * scale * jnp.var(ratios) / ratios.shape[0], 1.0)
        return scale * jnp.mean(ratios) + jnp.sqrt(correction_variance - batch_variance) * z

    def barker_correction(self):
        return self._noise["correction"]

    def batch_gradient(self, thetas, jacobians):
        # As JaxPoissonGradientSum.release: (the batch's clipped sum + σ·z) / q on the rows the host drew.
        bound, std, rate = self._scales["batch_gradient"]
        maps = self._f["jnp"].stack(jacobians)
        clipped = self._f["batch_sum"](thetas, maps, bound, self._noise["index"], self._noise["keep"], self._data)
        return (clipped + std * self._noise["batch_gradient"]) / rate

    def keep(self, accepted) -> None:
        if self._proposed is not None:
            jnp = self._f["jnp"]
            point, proposed = self._proposed
            self.point = jnp.where(accepted, point, self.point)
            self.current = jnp.where(accepted, proposed, self.current)
            self._proposed = None


def _abstract(jax, tree):
    """``jax.ShapeDtypeStruct`` of every leaf of ``tree`` (floats as float64, bools as bool)."""

    def leaf(value):
        value = np.asarray(value)
        dtype = np.bool_ if value.dtype == np.bool_ else np.float64
        return jax.ShapeDtypeStruct(value.shape, dtype)

    return jax.tree_util.tree_map(leaf, tree)


def _first(tree):
    """Row 0 of every array of ``tree`` (one iteration of a block's draws)."""
    import jax

    return jax.tree_util.tree_map(lambda v: v[0], tree)


def _power_of_two(count: int) -> int:
    """The smallest power of two ≥ ``count``, at least 64 (the batch paddings' sizes)."""
    return max(64, 1 << max(int(count) - 1, 0).bit_length())


def advi_batch_rows(n_rows: int, sampling_rate: float) -> int:
    """Rows a DPADVI block pads its Poisson batches to: above qN + 6√(qN(1 − q)) + 8, so nearly every block has it.

    A public function of N and q; the block compiled before the charge has this size, and a
    block whose longest batch exceeds it (probability below 10⁻⁸ per batch) compiles another.
    """
    expected = n_rows * sampling_rate
    return _power_of_two(math.ceil(expected + 6.0 * math.sqrt(expected * (1.0 - sampling_rate)) + 8.0))


def _active_only(jax, body):
    """A ``lax.scan`` body that runs ``body`` where the last input (a bool) is True, else computes nothing.

    An inactive iteration (the padding of a block shorter than the compiled length) keeps the
    carry and outputs zeros of the body's output shapes; the host draws nothing for it.
    """
    jnp = jax.numpy

    def skip(carry, inputs):
        outputs = jax.eval_shape(body, carry, inputs)[1]
        return carry, jax.tree_util.tree_map(lambda shape: jnp.zeros(shape.shape, shape.dtype), outputs)

    def wrapped(carry, inputs):
        *inputs, active = inputs
        return jax.lax.cond(active, body, skip, carry, tuple(inputs))

    return wrapped


def _padded(values: np.ndarray, iterations: int) -> np.ndarray:
    """``values`` (count, ...) padded with zeros to ``iterations`` rows."""
    values = np.asarray(values, dtype=float)
    out = np.zeros((iterations, *values.shape[1:]))
    out[: len(values)] = values
    return out


def _padded_batches(batches: list[np.ndarray], size: int, count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of each batch padded with row 0 to ``size``, and the mask of the real ones.

    Shape (``count``, size) each (default: one row per batch; rows past the batches are all padding).
    """
    count = len(batches) if count is None else count
    index = np.zeros((count, size), dtype=np.int64)
    keep = np.zeros((count, size), dtype=bool)
    for k, batch in enumerate(batches):
        index[k, : len(batch)], keep[k, : len(batch)] = batch, True
    return index, keep
