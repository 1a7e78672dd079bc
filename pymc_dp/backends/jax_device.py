"""The JAX backend's rows on the device: :class:`JaxRows`, the per-row values compiled and the releases jitted.

:class:`JaxRows` compiles the per-row graphs of a :class:`pymc_dp.data.RowLikelihood` through
PyTensor's JAX linker (:mod:`pymc_dp.backends.jax_compile`), puts the row data on the device
once, at construction, where they stay, and jits the releases — clip, sum and add the noise —
as functions of θ that return only the noisy sum: per-row values and clipped sums never leave
the device. It also runs a sampler's kernel for a block of iterations in one ``lax.scan``
(:mod:`pymc_dp.backends.jax_scan`). The release classes built on it are in
:mod:`pymc_dp.backends.jax_releases`, the mechanisms that hand them to the steps in
:mod:`pymc_dp.backends.jax_rows`.

JAX is imported on first use only: the package imports and runs without it.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from pymc_dp.backends.jax_compile import (
    _ASSERT_WARNING,
    CPU_CHUNK_ROWS,
    JAX_DTYPES,
    LINEAR_CHUNK_BYTES,
    _clip_ratios,
    _frozen_shared,
    _jax_function,
    _no_context,
    _widen,
    _x64_off,
    import_jax,
    row_functions,
)
from pymc_dp.backends.jax_scan import (
    _active_only,
    _DeviceReleases,
    _jax_ops,
    _noise_shapes,
    _padded_batches,
    _power_of_two,
    _settings_with,
)

__all__ = ["JaxRows"]


class JaxRows:
    """Per-row log-likelihoods and gradients of a :class:`pymc_dp.data.RowLikelihood`, with the rows on a JAX device.

    Parameters
    ----------
    rows : pymc_dp.data.RowLikelihood
        The data layer of the step's model; it must evaluate subsets of rows by indexing
        (``subset_mode == "index"``) and its parameters must be continuous.
    dtype : {"float64", "float32"}, default "float64"
        Type of the per-row values. ``"float32"`` traces the per-row graphs with JAX's 64-bit
        types off (data, θ and every intermediate of a row's log-likelihood or gradient in 32
        bits); every clip and every sum over rows is computed in float64 either way (Notes),
        and so is the noise.
    chunk_rows : int, optional
        Rows per chunk of a pass over the data (default: for a model whose clipped gradient
        sum has the linear form, the platform's :data:`LINEAR_CHUNK_BYTES` ÷ 4 × the bytes of one row;
        otherwise the data layer's memory limit
        :attr:`~pymc_dp.data.RowLikelihood.chunk_rows`, and at most :data:`CPU_CHUNK_ROWS`
        on a CPU). The rows are padded
        to a whole number of chunks (the padding rows are masked out of every sum, and left
        out of the last chunk's linear clipped sum).

    Notes
    -----
    Neighbouring relation: that of the mechanisms built on it. This class holds raw per-row
    values on the device and returns none of them: its public methods are the releases of
    :class:`JaxLogLikelihoodRatio` and :class:`JaxClippedGradient`, which return noisy sums
    only (the per-row log-likelihood of the current point is returned as a device array
    that stays inside the ratio mechanism). One row's data enter only that row's clipped
    term: the graphs are the data layer's, checked row by row, and a chunk is a set of
    whole rows.

    The per-row log-likelihood is the one-row graph (every row-indexed input replaced by one
    row) vectorised over the rows with ``jax.vmap``. The clipped gradient sum of a model whose
    parameters enter through a linear predictor is the data layer's linear form
    (:attr:`pymc_dp.data.RowLikelihood.clipped_sum_mode`: every row's norm and clip factor from
    the predictor's per-row pieces, no per-row matrix; :attr:`gradient_mode` ``"linear"``).
    Otherwise the gradient of one row is PyTensor's
    reverse-mode gradient of that graph, vectorised the same way (what ``vmap(grad(row_loglik))``
    does); when it cannot be built, the forward-mode Jacobian of the batch graph
    (:meth:`pymc_dp.data.RowLikelihood.gradient_mode`) is used instead (:attr:`gradient_mode`).

    Floating point. In float32 each row's value (log-likelihood, gradient) is computed in 32
    bits, traced with JAX's 64-bit types off inside a function traced with them on; it is
    then cast (exactly) to float64, and every clip and every sum over rows — the clipped
    ratio sum, the clipped gradient sum, DPADVI's batch sum, DPBarkerMH's batch moments — is
    computed in float64, as in float64 mode. The linear-predictor form, whose sums are inside
    the data layer's graph, runs in float64 on the float32 rows (its pieces A and ‖Aᵢ‖²
    computed from them in float64). The clip bounds are applied in float64, unrounded. Why:
    the rounding of a running sum depends on every row, so it can carry one row's change
    beyond that row's clipped term. For n terms xᵢ summed in any order with unit roundoff u,
    the computed sum is off by at most (n − 1)·u·Σ|xᵢ| + O(u²) (Higham 2002, §4.2, eq. (4.3)
    and the bound after it); with |xᵢ| ≤ b, one replaced row moves the computed sum by at most
    2b + 2(N − 1)N·u·b. In float32 (u = 2⁻²⁴) that slack exceeds 2b already at N ≈ 2¹²; the
    review of issue 33 measured 1.17 × 2b at N = 2²⁴, and tests/test_jax_float32_sums.py
    1.003 × 2b at N = 2¹⁶. In float64 (u = 2⁻⁵³) it is the floating-point residual that
    every backend's float64 sums carry, per sum at most about 10⁻⁶·b at N = 10⁵ and 2⁻⁵·b at
    N = 2²⁴ in the worst case (docs/jax.md).

    References
    ----------
    .. [1] Higham, N. J. (2002). Accuracy and Stability of Numerical Algorithms, 2nd ed.
       SIAM, §4.2 (summation, error bounds for any ordering).
    """

    def __init__(self, rows, *, dtype: str = "float64", chunk_rows: int | None = None) -> None:
        if dtype not in JAX_DTYPES:
            raise ValueError(f"`dtype` must be one of {JAX_DTYPES}. Found {dtype!r}.")
        if chunk_rows is not None and (
            isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int | np.integer) or chunk_rows < 1
        ):
            raise ValueError(f"`chunk_rows` must be a positive integer or None. Found {chunk_rows!r}.")
        jax = import_jax()
        import jax.numpy as jnp

        self._check_bounds = bool(getattr(rows, "check_bounds", True))  # as the data layer compiled its graphs
        if rows.subset_mode != "index":
            raise ValueError(
                "`backend`='jax' needs a model whose log-likelihood can be evaluated on a batch of rows. Found a "
                "graph that fixes the number of rows in a shape (see docs/data.md, 'slice' mode); use the default "
                "backend."
            )
        rows._require_continuous()
        self.dtype = dtype
        self.n_rows, self.n_params = rows.n_rows, rows.n_params
        self._jax, self._jnp = jax, jnp
        # Where the per-row values are traced: with 32-bit types in float32, inside functions traced with
        # 64-bit types (the sums over rows), so that every clip and sum is in float64 (class Notes).
        self._rows_low = _x64_off(jax) if dtype == "float32" else _no_context

        lik_fn, candidates = row_functions(jax, rows, self._jax_function)
        # The per-row gradient matrix for Poisson batches (DPADVI), built on first use: the linear form
        # gives clipped sums in θ only, while DPADVI clips each row's gradient in the variational parameters.
        self._row_gradient_candidates = [(mode, fn) for mode, fn in candidates if mode != "linear"]
        self._f_batch_sum = None
        self._lik_fn = lik_fn  # the per-row log-likelihood of a batch of rows (DPBarkerMH's subsampled test)
        self._f_batch_ratio = None

        self._place_rows(rows, chunk_rows, lik_fn, candidates)

    def _place_rows(self, rows, chunk_rows: int | None, lik_fn, candidates: list) -> None:
        """The rows on the device and the releases built and traced, with the first gradient form JAX runs.

        Sets :attr:`gradient_mode`; raises (naming ``backend``, the message of JAX's error withheld)
        where no form runs.
        """
        # The rows, padded to whole chunks, go to the device once (again, in smaller chunks, only if the
        # linear form fails to trace and the per-row gradients take over). Every release is traced now,
        # on abstract shapes (no data evaluated), so that a graph JAX cannot run is refused here, before
        # a run is charged, and not at its first release.
        platform = self._jax.devices()[0].platform
        self.device_platform = platform
        failure = None
        for mode, grad_fn in candidates:
            size = self._chunk_size(rows, chunk_rows, platform, mode)
            if getattr(self, "chunk_rows", None) != size:
                self._put_rows(rows, size)
            try:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=_ASSERT_WARNING, category=UserWarning)
                    self._build_releases(lik_fn, grad_fn() if mode == "forward" else grad_fn, linear=mode == "linear")
                    self._trace()
            except Exception as error:  # this gradient form does not run on JAX: the next one
                failure = error
                continue
            self.gradient_mode = mode
            break
        else:
            raise ValueError(
                f"`backend`='jax' cannot run this model's per-row graphs ({type(failure).__name__} while tracing them "
                "with JAX; its message is withheld, it may hold data values). Use backend='default'."
            ) from None

    @staticmethod
    def _chunk_size(rows, chunk_rows: int | None, platform: str, mode: str) -> int:
        """Rows per chunk: the caller's, else by the gradient form's memory (see the class docstring)."""
        if chunk_rows is not None:
            size = int(chunk_rows)
        elif mode == "linear":  # no per-row matrix: chunks bounded by the rows' own bytes (× 4)
            row_bytes = sum(np.asarray(v.get_value(borrow=True))[:1].nbytes for v in rows._row_index_vars)
            limit = LINEAR_CHUNK_BYTES["cpu" if platform == "cpu" else "accelerator"]
            size = max(64, int(limit // (4 * max(row_bytes, 1))))
        else:  # on a CPU, chunks that stay in cache (measured ~3x faster at N = 10⁵, P = 21)
            size = min(rows.chunk_rows, CPU_CHUNK_ROWS) if platform == "cpu" else rows.chunk_rows
        return max(1, min(size, rows.n_rows))

    def _put_rows(self, rows, size: int) -> None:
        """The rows on the device in ``size``-row chunks, the last padded with copies of row 0 (masked)."""
        jax, dtype = self._jax, self.dtype
        n_chunks = -(-self.n_rows // size)
        pad = n_chunks * size - self.n_rows
        arrays = [np.asarray(v.get_value(borrow=True)) for v in rows._row_index_vars]
        chunked = []
        for array in arrays:
            if pad:
                array = np.concatenate([array, np.repeat(array[:1], pad, axis=0)])
            if dtype == "float32":  # 32-bit types on the device (integers beyond ±2³¹ wrap: docs/jax.md)
                if np.issubdtype(array.dtype, np.floating):
                    array = array.astype(np.float32)
                elif np.issubdtype(array.dtype, np.integer) and array.dtype.itemsize > 4:
                    array = array.astype(np.int32)
            chunked.append(jax.device_put(array.reshape(n_chunks, size, *array.shape[1:])))
        mask = np.arange(n_chunks * size).reshape(n_chunks, size) < self.n_rows
        self._row_data = self._data = tuple(chunked)
        self._n_row_inputs = len(chunked)
        self._mask = jax.device_put(mask)
        self.chunk_rows, self.n_chunks, self._pad = size, n_chunks, pad

    # -- the jitted releases ----------------------------------------------------------------
    def _build_releases(self, lik_fn, grad_fn, linear: bool = False) -> None:
        jax, jnp = self._jax, self._jnp
        lax = jax.lax
        low = self.dtype == "float32"
        compute = jnp.float32 if low else jnp.float64
        wide = jnp.float64  # every clip and every sum over rows: float64 whatever the dtype (class Notes)
        rows_low = self._rows_low
        n_params = self.n_params

        n_inputs = self._n_row_inputs
        self._data = self._row_data

        def loglik_chunks(theta, data):  # (n_chunks, chunk) per-row log-likelihoods, in `compute`
            theta = theta.astype(compute)
            with rows_low():
                return lax.map(lambda chunk: lik_fn(theta, *chunk).astype(compute), data[:n_inputs])

        def ratio_sum(theta_new, current, bound, data, mask):
            proposed = loglik_chunks(theta_new, data)
            ratios = _clip_ratios(jnp, proposed.astype(wide) - current.astype(wide), bound.astype(wide))
            return jnp.sum(jnp.where(mask, ratios, 0.0)), proposed

        def gradient_sum(theta, bound, data, mask):
            theta = theta.astype(compute)
            bound = bound.astype(wide)

            def chunk_sum(total, chunk):
                rows, keep = chunk[:-1], chunk[-1]
                with rows_low():
                    grads = grad_fn(theta, *rows).astype(compute)
                grads = grads.astype(wide)
                norms = jnp.sqrt(jnp.sum(grads * grads, axis=1))
                finite = jnp.isfinite(norms) & keep  # a row with a non-finite entry contributes zero
                grads = jnp.where(finite[:, None], grads, 0.0)
                norms = jnp.where(finite, norms, 0.0)
                scale = jnp.where(norms > bound, bound / jnp.where(norms > bound, norms, 1.0), 1.0)
                return total + scale @ grads, None

            total, _ = lax.scan(chunk_sum, jnp.zeros(n_params, wide), (*data, mask))
            return total

        if linear:  # grad_fn(θ, bound, *rows, *pieces) is the chunk's clipped sum itself, rows left out as above
            whole, pad, size = self.n_chunks - (1 if self._pad else 0), self._pad, self.chunk_rows
            # The linear form's sums are inside its graph (Aᵀ(c ⊙ g)): in float32 it runs in float64 on the
            # float32 rows (class Notes), its pieces computed from them in float64 too.
            widen = _widen(jnp) if low else (lambda d: d)
            # The data-only pieces (A and ‖Aᵢ‖²) computed once, on the device, and kept beside the rows:
            # each release then reads A twice (A @ w, Aᵀ(c ⊙ g)) instead of four times.
            pieces_fn = grad_fn.pieces
            pieces = jax.jit(lambda data: lax.map(lambda chunk: tuple(pieces_fn(*map(widen, chunk))), data))(
                self._row_data
            )
            self._data = self._row_data + tuple(pieces)

            def gradient_sum(theta, bound, data, mask):
                theta, bound = theta.astype(wide), bound.astype(wide)
                total = jnp.zeros(n_params, wide)
                if whole:

                    def chunk_sum(total, rows):
                        return total + grad_fn(theta, bound, *map(widen, rows)).astype(wide), None

                    total, _ = lax.scan(chunk_sum, total, tuple(d[:whole] for d in data))
                if pad:  # the last chunk's real rows only: padding never enters a sum
                    last = (widen(d[-1][: size - pad]) for d in data)
                    total = total + grad_fn(theta, bound, *last).astype(wide)
                return total

        self._ratio_sum_fn, self._gradient_sum_fn = ratio_sum, gradient_sum
        self._device_calls: dict[Any, Any] = {}
        self._f_loglik = jax.jit(loglik_chunks)
        self._f_ratio_sum = jax.jit(ratio_sum)
        self._f_gradient_sum = jax.jit(gradient_sum)

        def add_noise(value, std, z):  # in float64, whatever the dtype of the sum
            return value.astype(jnp.float64) + std * z

        self._add_noise_fn = add_noise
        self._f_add_noise = jax.jit(add_noise)

    def _trace(self) -> None:
        """Trace and compile the releases on abstract values of the run's shapes and types."""
        jax = self._jax
        spec = jax.ShapeDtypeStruct
        theta = spec((self.n_params,), np.float64)
        scalar = spec((), np.float64)
        current = jax.eval_shape(self._f_loglik, theta, self._data)
        self._f_ratio_sum.lower(theta, current, scalar, self._data, self._mask).compile()
        self._f_gradient_sum.lower(theta, scalar, self._data, self._mask).compile()

    def loglik(self, theta: np.ndarray):
        """Per-row log-likelihoods at θ as a device array (for the ratio mechanism's cache; never to the host)."""
        return self._f_loglik(self._theta(theta), self._data)

    def _theta(self, theta: np.ndarray):
        return self._jnp.asarray(np.asarray(theta, dtype=np.float64))

    def _bound(self, bound: float) -> np.float64:
        """A clip bound as sent to the device: float64 (every clip is computed in float64, whatever the dtype)."""
        return np.float64(bound)

    def noisy_ratio_sum(self, theta_new: np.ndarray, current, bound: float, std: float, z: float):
        """(Σᵢ clip(rᵢ, ±bound) + std·z as a float, the per-row log-likelihoods at θ′ as a device array)."""
        clipped, proposed = self._f_ratio_sum(
            self._theta(theta_new), current, self._bound(bound), self._data, self._mask
        )
        return float(self._f_add_noise(clipped, np.float64(std), np.float64(z))), proposed

    def noisy_gradient_sum(self, theta: np.ndarray, bound: float, std: float, z: np.ndarray) -> np.ndarray:
        """Σᵢ clip_L2(∇θ log p(xᵢ | θ), bound) + std·z, shape (P,)."""
        clipped = self._f_gradient_sum(self._theta(theta), self._bound(bound), self._data, self._mask)
        return np.asarray(self._f_add_noise(clipped, np.float64(std), np.asarray(z, dtype=np.float64)))

    # -- Poisson batches (DPADVI) ---------------------------------------------------------------
    def _build_batch_sum(self) -> None:
        """The jitted clipped sum over a batch of rows given by index, of per-row gradients mapped by Jacobians."""
        jax, jnp = self._jax, self._jnp
        lax = jax.lax
        compute, wide = (jnp.float32 if self.dtype == "float32" else jnp.float64), jnp.float64
        rows_low = self._rows_low
        failure = None
        for _mode, candidate in self._row_gradient_candidates:
            row_grad = candidate() if _mode == "forward" else candidate

            def batch_sum(draws, jacobians, bound, index, keep, data, row_grad=row_grad):
                flat = tuple(d.reshape(-1, *d.shape[2:]) for d in data[: self._n_row_inputs])
                draws, jacobians = draws.astype(compute), jacobians.astype(wide)
                bound = bound.astype(wide)
                n_draws = draws.shape[0]

                def gradients(draw, rows):  # per-row gradients in `compute`; what follows them in float64
                    with rows_low():
                        return row_grad(draw, *rows).astype(compute)

                def chunk_sum(total, chunk):
                    idx, keep_rows = chunk
                    rows = tuple(jnp.take(d, idx, axis=0) for d in flat)
                    per_row = gradients(draws[0], rows).astype(wide) @ jacobians[0]
                    for s in range(1, n_draws):
                        per_row = per_row + gradients(draws[s], rows).astype(wide) @ jacobians[s]
                    if n_draws > 1:
                        per_row = per_row / n_draws
                    norms = jnp.sqrt(jnp.sum(per_row * per_row, axis=1))
                    finite = jnp.isfinite(norms) & keep_rows  # padding and non-finite rows contribute zero
                    per_row = jnp.where(finite[:, None], per_row, 0.0)
                    norms = jnp.where(finite, norms, 0.0)
                    scale = jnp.where(norms > bound, bound / jnp.where(norms > bound, norms, 1.0), 1.0)
                    return total + scale @ per_row, None

                total, _ = lax.scan(chunk_sum, jnp.zeros(jacobians.shape[2], wide), (index, keep))
                return total

            function = jax.jit(batch_sum)
            try:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=_ASSERT_WARNING, category=UserWarning)
                    spec = jax.ShapeDtypeStruct
                    p = self.n_params
                    function.lower(
                        spec((1, p), np.float64),
                        spec((1, p, 2 * p), np.float64),
                        spec((), np.float64),
                        spec((1, 64), np.int64),
                        spec((1, 64), np.bool_),
                        self._data,
                    ).compile()
            except Exception as error:  # this form does not run on JAX: the next one
                failure = error
                continue
            self._f_batch_sum = function
            return
        raise ValueError(
            f"`backend`='jax' cannot run this model's per-row gradients on row batches ({type(failure).__name__} "
            "while tracing them with JAX; its message is withheld, it may hold data values). Use backend='default'."
        ) from None

    def noisy_batch_gradient_sum(
        self,
        draws: np.ndarray,
        jacobians: np.ndarray,
        bound: float,
        std: float,
        z: np.ndarray,
        batch: np.ndarray,
    ) -> np.ndarray:
        """Σ_{i∈batch} clip_L2(mean_s ∇θ log p(xᵢ | θ_s) M_s, bound) + std·z, shape (D,).

        ``draws`` (S × P), ``jacobians`` (S × P × D): the data-free maps of the
        reparameterisation; ``batch``: row indices (the secret Poisson batch, drawn by the
        caller). The indices are padded to a power of two (at least 64; one compilation per
        size) and split into chunks of at most :attr:`chunk_rows` rows; the padding rows are
        masked out of the sum.
        """
        if self._f_batch_sum is None:
            self._build_batch_sum()
        batch = np.asarray(batch, dtype=np.int64)
        size = _power_of_two(len(batch))
        chunk = self._batch_chunk(size)
        index, keep = _padded_batches([batch], size)
        clipped = self._f_batch_sum(
            self._jnp.asarray(np.atleast_2d(np.asarray(draws, dtype=np.float64))),
            self._jnp.asarray(np.asarray(jacobians, dtype=np.float64)),
            self._bound(bound),
            self._jnp.asarray(index.reshape(size // chunk, chunk)),
            self._jnp.asarray(keep.reshape(size // chunk, chunk)),
            self._data,
        )
        return np.asarray(self._f_add_noise(clipped, np.float64(std), np.asarray(z, dtype=np.float64)))

    def _batch_chunk(self, batch_rows: int) -> int:
        """Rows per chunk of a padded batch of ``batch_rows`` (a power of two): at most :attr:`chunk_rows`."""
        return min(batch_rows, 1 << (max(self.chunk_rows, 1).bit_length() - 1))

    # -- DPBarkerMH's subsampled test: a batch of rows given by index ------------------------
    def _build_batch_ratio(self) -> None:
        """The jitted mean and population variance of the clipped log-likelihood ratios of a batch of rows."""
        jax, jnp = self._jax, self._jnp
        compute, wide = (jnp.float32 if self.dtype == "float32" else jnp.float64), jnp.float64
        lik_fn, n_inputs, rows_low = self._lik_fn, self._n_row_inputs, self._rows_low

        def batch_ratio(theta, theta_new, bound, index, data):
            flat = tuple(d.reshape(-1, *d.shape[2:]) for d in data[:n_inputs])
            rows = tuple(jnp.take(d, index, axis=0) for d in flat)
            theta, theta_new = theta.astype(compute), theta_new.astype(compute)
            with rows_low():  # the per-row values in `compute`; their clips and moments in float64
                proposed = lik_fn(theta_new, *rows).astype(compute)
                current = lik_fn(theta, *rows).astype(compute)
            ratios = _clip_ratios(jnp, proposed.astype(wide) - current.astype(wide), bound.astype(wide))
            return jnp.mean(ratios), jnp.var(ratios)

        self._f_batch_ratio = jax.jit(batch_ratio)

    def prepare_batch_ratio(self, batch_size: int) -> None:
        """Build and compile the batch statistic for batches of ``batch_size`` rows now, before a run is charged."""
        if self._f_batch_ratio is None:
            self._build_batch_ratio()
        jax = self._jax
        spec = jax.ShapeDtypeStruct
        vector = spec((self.n_params,), np.float64)
        index = spec((int(batch_size),), np.int64)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_ASSERT_WARNING, category=UserWarning)
                self._f_batch_ratio.lower(vector, vector, spec((), np.float64), index, self._data).compile()
        except Exception as error:
            raise ValueError(
                f"`backend`='jax' cannot run this model's log-likelihood on row batches ({type(error).__name__} while "
                "tracing it with JAX; its message is withheld, it may hold data values). Use backend='default'."
            ) from None

    def batch_ratio_moments(self, theta: np.ndarray, theta_new: np.ndarray, bound: float, batch: np.ndarray):
        """Mean and population variance of clip(rᵢ, ±bound) over the rows ``batch`` (the secret batch, the caller's).

        For :class:`JaxBarkerStatistic`'s subsampled test only, which turns them into the
        released z on the host: the two numbers never leave the mechanism. One compilation
        per batch size.
        """
        if self._f_batch_ratio is None:
            self._build_batch_ratio()
        mean, variance = self._f_batch_ratio(
            self._theta(theta),
            self._theta(theta_new),
            self._bound(bound),
            self._jnp.asarray(np.asarray(batch, dtype=np.int64)),
            self._data,
        )
        return float(mean), float(variance)

    # -- a sampler's kernel, a block of iterations per device call -----------------------------
    def kernel_iterations(self, prior, kernel, releases: tuple, iterations: int, static: tuple, shapes: tuple):
        """``iterations`` iterations of ``kernel`` in one jitted ``lax.scan`` (built and compiled on first use).

        ``kernel(ops, releases, state, draws, settings) -> (state, info)`` is a sampler's
        transition (:mod:`pymc_dp.step_methods.kernels`), handed over by the step: this class
        never names a sampler. Inside the scan it gets :class:`_DeviceReleases` on the rows here:
        each release is the clipped sum of the step's mechanism plus the standard normals the
        host drew for that iteration, scaled (the same sensitivities, noise scales and
        accounting as one release at a time). The current point and its per-row
        log-likelihoods are the scan's carry and never leave the device.

        Parameters
        ----------
        prior
            The data-free prior (its JAX form is compiled here).
        kernel : callable
            The transition.
        releases : tuple
            ``(("gradient", G), ("ratio", 1), ("barker", b or 0))``: the releases per iteration
            (G gradient releases; b the subsampled Barker test's batch, 0 for full data).
        iterations : int
            The scan's length (a block shorter than it runs the rest inactive).
        static : tuple
            The settings' fields that fix the compiled function ((name, value) pairs: ints, bools, None).
        shapes : tuple
            Abstract values (``jax.ShapeDtypeStruct``) of (state, one iteration's draws, the
            settings' other fields): the function is compiled on them now, so that a prior or a
            kernel JAX cannot run is refused before the run is charged.
        """
        key = ("kernel", kernel, releases, int(iterations), static, str(shapes))
        if key not in self._device_calls:
            self._device_calls[key] = self._build_kernel_iterations(
                prior, kernel, releases, int(iterations), static, shapes
            )
        return self._device_calls[key]

    def _build_kernel_iterations(self, prior, kernel, releases: tuple, iterations: int, static: tuple, shapes: tuple):
        jax, jnp = self._jax, self._jnp
        kinds = dict(releases)
        prior_logp, prior_grad = self._prior_functions(prior, gradient="gradient" in kinds or "batch_gradient" in kinds)
        if "batch_gradient" in kinds and self._f_batch_sum is None:
            self._build_batch_sum()
        functions = {
            "batch_sum": self._f_batch_sum,
            "jnp": jnp,
            "prior_logp": prior_logp,
            "prior_grad": prior_grad,
            "ratio_sum": self._ratio_sum_fn,
            "gradient_sum": self._gradient_sum_fn,
            "add_noise": self._add_noise_fn,
            "lik_fn": self._lik_fn,
            "n_inputs": self._n_row_inputs,
            "kinds": kinds,
        }
        ops = _jax_ops(jax)
        state_shape, draws_shape, settings_shape = shapes

        def run(state, point, current, draws, noise, active, settings, scales, data, mask):
            settings = _settings_with(settings, static)

            def body(carry, inputs):
                state, point, current = carry
                draws, noise = inputs
                device = _DeviceReleases(functions, noise, scales, point, current, data, mask)
                state, info = kernel(ops, device, state, draws, settings)
                return (state, device.point, device.current), (state, info)

            (_, point, current), (states, infos) = jax.lax.scan(
                _active_only(jax, body), (state, point, current), (draws, noise, active)
            )
            return states, infos, point, current

        spec = jax.ShapeDtypeStruct
        vector = spec((self.n_params,), np.float64)
        full_rows = "ratio" in kinds or kinds.get("barker") == 0
        current = jax.eval_shape(self._f_loglik, vector, self._data) if full_rows else spec((), np.float64)
        stacked = jax.tree_util.tree_map(lambda s: spec((iterations, *s.shape), s.dtype), draws_shape)
        noise = jax.tree_util.tree_map(
            lambda s: spec((iterations, *s.shape), s.dtype), _noise_shapes(jax, kinds, self.n_params)
        )
        scales = {kind: spec((3,), np.float64) for kind in kinds}
        scanned = jax.jit(run)
        scanned.lower(
            state_shape,
            vector,
            current,
            stacked,
            noise,
            spec((iterations,), np.bool_),
            settings_shape,
            scales,
            self._data,
            self._mask,
        ).compile()

        def call(state, point, current, draws, noise, active, settings, scales):
            states, infos, point, current = scanned(
                state, self._theta(point), current, draws, noise, active, settings, scales, self._data, self._mask
            )
            as_host = jax.tree_util.tree_map(np.asarray, (states, infos))
            return (*as_host, np.asarray(point), current)

        return call

    def _jax_function(self, inputs, output):
        """:func:`_jax_function` with the parameter checks the data layer compiled with."""
        return _jax_function(inputs, output, check_bounds=self._check_bounds)

    def _prior_functions(self, prior, gradient: bool):
        """JAX functions of the exact log prior (and its gradient) of the flat θ, from the data-free prior graph."""
        import pytensor

        theta_var = prior._theta
        # The prior reads no row (checked when the data layer was built): its shared inputs are
        # public values, fixed for the run like the per-row graphs'.
        graph = _frozen_shared(prior._graph, [theta_var])
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_ASSERT_WARNING, category=UserWarning)
            prior_logp = self._jax_function([theta_var], graph)
            prior_grad = self._jax_function([theta_var], pytensor.grad(graph, theta_var)) if gradient else None
        return prior_logp, prior_grad
