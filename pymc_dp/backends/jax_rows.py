"""The JAX backend's mechanisms: per-row graphs compiled through PyTensor's JAX linker, data on the device.

:class:`JaxRows` takes the per-row log-likelihood graph that :class:`pymc_dp.data.RowLikelihood`
built and checked (row-wise parameter checks, the allow-list walk, the one-row perturbation
probe, the subset-vs-all-rows probe) and compiles it, and the gradient of one row's
log-likelihood, through PyTensor's JAX linker (``jax_funcify``). The row data are put on the
device once, at construction, and stay there. The releases — clip, sum and add the noise —
are jitted functions of θ that return only the noisy sum: per-row values and clipped sums
never leave the device.

:class:`JaxLogLikelihoodRatio` and :class:`JaxClippedGradient` are the releases of
:class:`pymc_dp.mechanisms.NoisyLogLikelihoodRatio` and
:class:`pymc_dp.mechanisms.NoisyClippedGradient` with the same bounds, sensitivities, noise
scales and accounting events (they are subclasses that override only where the sums are
computed); :class:`JaxRowMechanisms` hands them to DPPenaltyMH, DPHMC and DPBarkerMH in place of the
default ones and passes every other mechanism (the private clip bound) to the default backend.

JAX is imported on first use only: the package imports and runs without it.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np

from pymc_dp._validation import check_finite_positive
from pymc_dp.mechanisms.access import RowMechanisms
from pymc_dp.mechanisms.barker import NoisyBarkerStatistic
from pymc_dp.mechanisms.clipping import _check_bound, sensitivity_of_clipped_sum
from pymc_dp.mechanisms.gradient import NoisyClippedGradient
from pymc_dp.mechanisms.log_likelihood_ratio import NoisyLogLikelihoodRatio
from pymc_dp.mechanisms.noise import SecureNoise, _open_unit
from pymc_dp.mechanisms.poisson_gradient import NoisyPoissonGradientSum
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

#: Floating-point types the JAX backend computes per-row values in (noise is always added in float64).
JAX_DTYPES = ("float64", "float32")

#: Rows per chunk on a CPU device by default: a (chunk × P) block of per-row gradients stays in cache.
#: One chunk of 10⁵ rows (P = 21, float64) took about 3x as long per gradient release as chunks of
#: 16,384 on the 2-core development machine (CPU JAX 0.12); on a GPU the default is the memory limit.
CPU_CHUNK_ROWS = 16384
#: Memory limit of one chunk for the linear clipped sum (no per-row gradient matrix), by device
#: platform. Larger chunks were faster wherever measured (benchmarks/bench_jax_transition.py,
#: DPHMC, P = 21): on a 2-core CPU at N = 10⁵, one chunk 31 ms per iteration against 62 ms in
#: 16,384-row chunks; on one H100 at N = 10⁷, one chunk 35 ms against 52 ms in 1.6·10⁶-row chunks.
LINEAR_CHUNK_BYTES = {"cpu": 1 << 30, "accelerator": 8 << 30}

#: JAX drops PyTensor's ``Assert`` ops when it traces a graph (it cannot raise inside ``jit``). In the
#: per-row graphs the parameter checks were turned into per-row −∞ by the data layer before this point
#: (``pymc_dp.data._row_term``); what remains are shape checks of a graph that the default backend has
#: already evaluated on all rows and on subsets (RowLikelihood's probes).
_ASSERT_WARNING = r"Skipping .* Op .*as JAX tracing would remove it"
#: JAX's warning that a float64 (int64) type is truncated to 32 bits: what the float32 opt-in asks for.
_TRUNCATION_WARNING = r"Explicitly requested dtype .* is not available"
#: ... and that a float32 gradient is scattered into a buffer PyTensor's dispatch typed float64.
_SCATTER_WARNING = r"scatter inputs have incompatible types"


def import_jax():
    """``jax``, with 64-bit types enabled; an ImportError naming ``backend`` when it is not installed."""
    try:
        import jax
    except ImportError:
        raise ImportError(
            "`backend`='jax' needs JAX. Found no `jax` module: install it with `pip install 'pymc-dp[jax]'` "
            "(CPU) or JAX's CUDA wheels."
        ) from None
    jax.config.update("jax_enable_x64", True)  # float64 by default; PyTensor's JAX dispatch does the same
    return jax


def _frozen_shared(graph, keep):
    """``graph`` with every shared variable not in ``keep`` replaced by a constant of its current value.

    The per-row graphs of a step that samples every free variable read, besides θ and the row
    placeholders, only public shared arrays (``pm.Data`` without a row axis); their values are
    fixed for the run and compiled into the device program.
    """
    import pytensor.tensor as pt
    from pytensor.compile.sharedvalue import SharedVariable
    from pytensor.graph.replace import graph_replace
    from pytensor.graph.traversal import ancestors

    keep_ids = {id(v) for v in keep}
    outputs = list(graph) if isinstance(graph, list | tuple) else [graph]
    frozen = {
        v: pt.constant(np.asarray(v.get_value(borrow=True)), dtype=v.dtype)
        for v in ancestors(outputs)
        if isinstance(v, SharedVariable) and id(v) not in keep_ids
    }
    if not frozen:
        return graph
    replaced = graph_replace(outputs, frozen, strict=False)
    return replaced if isinstance(graph, list | tuple) else replaced[0]


def _clip_ratios(jnp, ratios, bound):
    """`clip_values` on the device: each ratio to ±bound, NaN (−∞ − (−∞), an invalid row) to −bound."""
    ratios = jnp.clip(ratios, -bound, bound)
    return jnp.where(jnp.isnan(ratios), -bound, ratios)


def _jax_function(inputs, output, check_bounds: bool = True):
    """The JAX function PyTensor's JAX linker makes of ``output`` (inputs in order).

    Compiled with the rewrite PyMC compiles log-densities with (:func:`pymc.pytensorf.compile`),
    chosen by the model's ``check_bounds`` (not by whatever model context is open): with it a
    parameter check (``CheckParameterValue``, e.g. a Beta's α > 0) becomes a switch to −∞, as
    on the default backend, instead of an assertion that JAX tracing would drop; without it
    the check is removed, as there. One output variable: the function returns its value; a
    list: the tuple of their values.
    """
    import pytensor
    from pytensor.compile.mode import Mode, get_mode
    from pytensor.link.jax.dispatch import jax_funcify

    check = "local_check_parameter_to_ninf_switch" if check_bounds else "local_remove_check_parameter"
    jax_mode = get_mode("JAX")
    mode = Mode(linker=jax_mode.linker, optimizer=jax_mode.provided_optimizer.including(check))
    several = isinstance(output, list | tuple)
    fn = pytensor.function(inputs, list(output) if several else output, mode=mode, on_unused_input="ignore")
    funcified = jax_funcify(fn.maker.fgraph)

    def call(*args):
        values = funcified(*args)
        return tuple(values) if several else values[0]

    return call


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

        import pytensor
        import pytensor.tensor as pt
        from pytensor.graph.replace import graph_replace

        batch, lik_batch = rows._batch_graph()
        theta = rows._theta
        lik_batch = _frozen_shared(lik_batch, [theta, *batch])
        one = [pt.tensor(f"{b.name}_row", dtype=b.dtype, shape=b.type.shape[1:]) for b in batch]
        lik_one = graph_replace(lik_batch, {b: r[None] for b, r in zip(batch, one, strict=True)}, strict=False)[0]
        vectorised = (None,) + (0,) * len(one)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_ASSERT_WARNING, category=UserWarning)
            # The per-row log-likelihoods from the batch graph (row-independent: checked by the data layer), which
            # XLA compiles to one matrix-vector product where vmap of one row's graph made a batched dot of 1-row
            # products (measured 4.5x slower at N = 10^5 on a CPU); one row's graph, vectorised, where it fails.
            try:
                lik_fn = self._jax_function([theta, *batch], lik_batch)
            except Exception:
                lik_fn = jax.vmap(self._jax_function([theta, *one], lik_one), in_axes=vectorised)
            candidates = []
            try:  # the linear clipped sum (no per-row matrix), where the graph has a linear predictor
                from pymc_dp.data import _linear_clipped_sum

                bound_var = pt.dscalar("bound")
                linear_total, pieces = _linear_clipped_sum(
                    theta, rows.n_params, batch, lik_batch, bound_var, precomputed=True
                )
                piece_inputs = [a_in for *_, a_in, _ in pieces] + [sq_in for *_, sq_in in pieces]
                linear_total = _frozen_shared(linear_total, [theta, bound_var, *batch, *piece_inputs])
                # A with its non-finite rows set to zero, and ‖Aᵢ‖² (non-finite rows stay so: left out)
                safe_a = [pt.switch((pt.isnan(sq) | pt.isinf(sq))[:, None], 0, a) for a, sq, *_ in pieces]
                piece_graph = _frozen_shared([*safe_a, *[sq for _, sq, *_ in pieces]], list(batch))
                linear_fn = self._jax_function([theta, bound_var, *batch, *piece_inputs], linear_total)
                linear_fn.pieces = self._jax_function(list(batch), piece_graph)
                candidates.append(("linear", linear_fn))
            except Exception:  # _NotLinear, or no JAX form: the per-row gradients below
                pass
            try:
                grad_one = self._jax_function([theta, *one], pytensor.grad(lik_one, theta))
                candidates.append(("reverse", jax.vmap(grad_one, in_axes=vectorised)))
            except Exception:  # no reverse-mode gradient of one row: the batch graph's forward-mode Jacobian
                pass
            jacobian = rows._forward_jacobian
            candidates.append(("forward", lambda: self._jax_function([theta, *batch], jacobian(lik_batch))))
        # The per-row gradient matrix for Poisson batches (DPADVI), built on first use: the linear form
        # gives clipped sums in θ only, while DPADVI clips each row's gradient in the variational parameters.
        self._row_gradient_candidates = [(mode, fn) for mode, fn in candidates if mode != "linear"]
        self._f_batch_sum = None
        self._lik_fn = lik_fn  # the per-row log-likelihood of a batch of rows (DPBarkerMH's subsampled test)
        self._f_batch_ratio = None

        # The rows, padded to whole chunks, go to the device once (again, in smaller chunks, only if the
        # linear form fails to trace and the per-row gradients take over). Every release is traced now,
        # on abstract shapes (no data evaluated), so that a graph JAX cannot run is refused here, before
        # a run is charged, and not at its first release.
        platform = jax.devices()[0].platform
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


@contextlib.contextmanager
def _no_context():
    yield


def _widen(jnp):
    """A function casting a floating array to float64 (other arrays unchanged): the float32 rows of the linear form."""

    def widen(array):
        return array.astype(jnp.float64) if jnp.issubdtype(array.dtype, jnp.floating) else array

    return widen


def _x64_off(jax):
    """A context in which JAX traces with 32-bit types: the per-row values of the float32 opt-in.

    The float64 types that PyTensor's graphs request are truncated to float32 (and int64 to
    int32) there: that is the opt-in, so JAX's warning about it is silenced. It is entered
    only around a per-row computation inside a function traced with 64-bit types, whose
    clips and sums over rows are float64 (:class:`JaxRows`, Notes).
    """

    @contextlib.contextmanager
    def context():
        with jax.enable_x64(False), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_TRUNCATION_WARNING, category=UserWarning)
            warnings.filterwarnings("ignore", message=_SCATTER_WARNING, category=FutureWarning)
            yield

    return context


class BufferedSecureNoise(SecureNoise):
    """:class:`pymc_dp.mechanisms.SecureNoise` reading ``os.urandom`` in blocks of ``block_bytes``.

    The same variates (53-bit uniforms from the operating system's CSPRNG, Box–Muller
    Gaussians), with one system call per block instead of one per draw: a DPHMC iteration
    makes L + 2 releases, and one ``os.urandom`` call per release cost about 50–100 µs on the
    2-core development machine (measured under load), more than a release of a small model.
    The unread part of the block lives only in this object's memory, as a generator's state
    does; it is never returned, logged or pickled (a copy starts with an empty block).

    Parameters
    ----------
    block_bytes : int, default 65536
        Bytes read per system call (8 per uniform).
    """

    def __init__(self, block_bytes: int = 65536) -> None:
        if isinstance(block_bytes, bool) or not isinstance(block_bytes, int) or block_bytes < 8:
            raise ValueError(f"`block_bytes` must be an integer of at least 8. Found {block_bytes!r}.")
        self._block_words = block_bytes // 8
        self._words = np.empty(0, dtype=np.uint64)

    def __getstate__(self) -> dict:
        return {"_block_words": self._block_words, "_words": np.empty(0, dtype=np.uint64)}

    def _uniform(self, size: int) -> np.ndarray:
        """Uniforms on (0, 1) with 53 random bits each, from the buffered OS entropy."""
        if self._words.size < size:
            fresh = np.frombuffer(os.urandom(8 * max(self._block_words, size)), dtype=np.uint64)
            self._words = np.concatenate([self._words, fresh])
        words, self._words = self._words[:size], self._words[size:]
        return _open_unit(words >> np.uint64(11))


def _noise_source(noise: Any, rng: Any) -> Any:
    """The generator of a release's noise: the mechanism's own (OS entropy) or, when reproducible, the step's."""
    return rng if noise is None else noise


class JaxLogLikelihoodRatio(NoisyLogLikelihoodRatio):
    """:class:`pymc_dp.mechanisms.NoisyLogLikelihoodRatio` with the per-row ratios on a JAX device.

    Releases λ̂ = Σᵢ clip(rᵢ, ±b‖θ′ − θ‖₂) + ξ, ξ ~ N(0, σ²), σ = τΔ, Δ = 2b‖θ′ − θ‖₂
    (substitute) or b‖θ′ − θ‖₂ (add/remove), exactly as the default mechanism; the per-row
    log-likelihood of the current point is cached on the device.

    Parameters
    ----------
    rows : JaxRows
        The rows on the device.
    llr_clip, noise_multiplier, neighbouring
        As for :class:`pymc_dp.mechanisms.NoisyLogLikelihoodRatio`.
    noise : SecureNoise or None
        The noise source; None draws from the generator the step passes to :meth:`release`
        (``reproducible_noise=True``, for testing).

    Notes
    -----
    Neighbouring relation, sensitivity and accounting: those of the parent class (one
    Gaussian release with Δ/σ = 1/τ, μ = 1/(2τ²), per call). The standard normal ξ/σ is drawn
    on the host and sent to the device, where it is scaled and added in float64; the
    clipped sum itself never leaves the device.

    References
    ----------
    .. [1] Yıldırım, S. and Ermiş, B. (2019). Exact MCMC with differentially private moves.
       Statistics and Computing 29, Algorithm 1 and eq. (2).
    """

    def __init__(
        self, rows: JaxRows, llr_clip: float, noise_multiplier: float, neighbouring: str = "substitute", noise=None
    ) -> None:
        super().__init__(rows, llr_clip, noise_multiplier, neighbouring)
        self._noise = noise

    def _loglik(self, theta: np.ndarray):
        key = theta.tobytes()
        if key != self._cached_point:
            self._cached_loglik = self._rows.loglik(theta)
            self._cached_point = key
        return self._cached_loglik

    def release(self, theta: np.ndarray, theta_proposed: np.ndarray, rng: Any) -> tuple[float, float]:
        """Release λ̂ for the move θ → θ′; returns (λ̂, σ). The cache then holds θ′ (see :meth:`keep`)."""
        theta = np.asarray(theta, dtype=float)
        theta_proposed = np.asarray(theta_proposed, dtype=float)
        distance = float(np.linalg.norm(theta_proposed - theta))
        bound = _check_bound("bound", self.llr_clip * distance)
        if math.isinf(bound):
            raise ValueError(f"`bound` must be finite for a private release. Found {bound!r}.")
        std = self.noise_multiplier * sensitivity_of_clipped_sum(bound, self.neighbouring)
        # As the default mechanism: no draw for a zero bound (the release is then the data-free 0).
        z = 0.0 if std == 0.0 else float(_noise_source(self._noise, rng).normal(0.0, 1.0))
        noisy, proposed = self._rows.noisy_ratio_sum(theta_proposed, self._loglik(theta), bound, std, z)
        self._pending = (theta_proposed.tobytes(), proposed)
        return noisy, std


class JaxBarkerStatistic(NoisyBarkerStatistic):
    """:class:`pymc_dp.mechanisms.NoisyBarkerStatistic` with the per-row ratios on a JAX device.

    Full data: releases z = t Σᵢ clip(rᵢ, ±B) + ξ, ξ ~ N(0, C), exactly as the default
    mechanism (Heikkilä et al. 2019, eq. 9); the per-row log-likelihoods of the current and the
    proposed point stay on the device, and only z comes back. Subsampled (``batch_size=b``,
    eq. 18): the batch of b distinct rows is drawn on the host from the noise source, the
    device returns the mean and variance of the batch's clipped ratios, and z = N₀ r̄ +
    N(0, C − s²) is released here, with the default mechanism's draws in its order.

    Parameters
    ----------
    rows : JaxRows
        The rows on the device.
    correction_variance, llr_clip, likelihood_scale, batch_size
        As for :class:`pymc_dp.mechanisms.NoisyBarkerStatistic` (full data: t the temperature;
        subsampled: N₀ and b).
    noise : SecureNoise or None
        The noise source; None draws from the generator the step passes to :meth:`release`
        (``reproducible_noise=True``, for testing).

    Notes
    -----
    Neighbouring relation, sensitivity and accounting: those of the parent class (full data:
    substitute 2tB or add/remove tB, one Gaussian release with μ = Δ²/(2C) per call;
    subsampled: substitute neighbours, batches of b without replacement, the RDP of Theorem 2
    amplified by eq. 22). Full data: the standard normal ξ/√C is drawn on the host, sent to
    the device, scaled by √C/t and added to the clipped sum in float64 there; the sum never
    leaves the device. Subsampled: the batch's mean and variance come back to this mechanism,
    which adds the noise; only z leaves it.

    References
    ----------
    .. [1] Heikkilä, M., Jälkö, J., Dikmen, O. and Honkela, A. (2019). Differentially private
       Markov chain Monte Carlo. NeurIPS, eq. (9), Theorem 1.
    """

    def __init__(
        self,
        rows: JaxRows,
        *,
        correction_variance: float,
        llr_clip: float,
        likelihood_scale: float,
        batch_size: int | None = None,
        noise=None,
    ) -> None:
        super().__init__(
            rows,
            correction_variance=correction_variance,
            llr_clip=llr_clip,
            likelihood_scale=likelihood_scale,
            batch_size=batch_size,
        )
        self._noise = noise
        self._cached: dict[bytes, Any] = {}  # θ → per-row log-likelihoods on the device (the last move's two points)

    def _loglik(self, theta: np.ndarray):
        key = theta.tobytes()
        if key not in self._cached:
            self._cached = {key: self._rows.loglik(theta)}
        return self._cached[key]

    def release(self, theta: np.ndarray, theta_proposed: np.ndarray, rng: Any) -> float:
        """Release z for the move θ → θ′ (``rng`` draws the batch and the noise when the noise is reproducible)."""
        theta = np.asarray(theta, dtype=float)
        theta_proposed = np.asarray(theta_proposed, dtype=float)
        if self.batch_size is not None:
            return self._release_subsampled(theta, theta_proposed, _noise_source(self._noise, rng))
        current = self._loglik(theta)
        z = float(_noise_source(self._noise, rng).normal(0.0, 1.0))
        t = self.likelihood_scale
        noisy, proposed = self._rows.noisy_ratio_sum(
            theta_proposed, current, self.llr_clip, math.sqrt(self.correction_variance) / t, z
        )
        self._cached = {theta.tobytes(): current, theta_proposed.tobytes(): proposed}
        return t * noisy

    def _release_subsampled(self, theta: np.ndarray, theta_proposed: np.ndarray, noise: Any) -> float:
        """Eq. 18: z = N₀ r̄ + N(0, C − s²) on a batch of b distinct rows drawn from ``noise``, as the parent's."""
        batch = sample_without_replacement(noise, self._rows.n_rows, int(self.batch_size))
        mean, variance = self._rows.batch_ratio_moments(theta, theta_proposed, self.llr_clip, batch)
        return self._subsampled_statistic(mean, variance, batch.size, noise)


class JaxClippedGradient(NoisyClippedGradient):
    """:class:`pymc_dp.mechanisms.NoisyClippedGradient` with the per-row gradients on a JAX device.

    Releases Σᵢ clip_L2(∇θ log p(xᵢ | θ), b_g) + ξ, ξ ~ N(0, σ² I), σ = τΔ, Δ = 2b_g
    (substitute) or b_g (add/remove), exactly as the default mechanism.

    Parameters
    ----------
    rows : JaxRows
        The rows on the device.
    grad_clip, noise_multiplier, neighbouring
        As for :class:`pymc_dp.mechanisms.NoisyClippedGradient`.
    noise : SecureNoise or None
        The noise source; None draws from the generator the step passes to :meth:`release`.

    Notes
    -----
    Neighbouring relation, sensitivity and accounting: those of the parent class (one
    Gaussian release with Δ/σ = 1/τ_g per call). Per-row gradients exist only on the device,
    one chunk at a time.

    References
    ----------
    .. [1] Räisä, O., Koskela, A. and Honkela, A. (2021). Differentially private Hamiltonian
       Monte Carlo, eq. (1) and Theorem 3.3.
    """

    def __init__(
        self, rows: JaxRows, grad_clip: float, noise_multiplier: float, neighbouring: str = "substitute", noise=None
    ) -> None:
        super().__init__(rows, grad_clip, noise_multiplier, neighbouring)
        self._noise = noise

    def release(self, theta: np.ndarray, rng: Any) -> np.ndarray:
        """One noisy clipped gradient of the log-likelihood at θ, shape (P,)."""
        z = _noise_source(self._noise, rng).normal(0.0, 1.0, size=self._rows.n_params)
        return self._rows.noisy_gradient_sum(np.asarray(theta, dtype=float), self.grad_clip, self.std, z)


class JaxPoissonGradientSum(NoisyPoissonGradientSum):
    """DPADVI's release (:class:`pymc_dp.mechanisms.NoisyPoissonGradientSum`), the batch's gradients on a JAX device.

    Releases ĝ = (Σ_{i∈S} clip_C(gᵢ) + ξ) / q, ξ ~ N(0, σ²Δ² I), Δ = 2C (substitute) or C
    (add/remove), exactly as the default mechanism: the Poisson batch S and the standard
    normals are drawn on the host, in the default mechanism's order, from ``noise`` (the
    operating system's CSPRNG, read in blocks) or, where it is None (``reproducible_noise``,
    testing only), from the generator DPADVI passes — then the default backend's draws; the
    batch's rows are gathered, differentiated, mapped to the variational parameters, clipped
    and summed on the device, and the noise is added there in float64.

    Parameters
    ----------
    rows : JaxRows
        The rows on the device.
    grad_clip, noise_multiplier, sampling_rate, neighbouring
        As for :class:`pymc_dp.mechanisms.NoisyPoissonGradientSum`.
    noise : SecureNoise or None
        The source of the batches and the noise; None: the generator passed to :meth:`release`.

    Notes
    -----
    Neighbouring relation, sensitivity and accounting: those of the parent class (one
    Poisson-subsampled Gaussian release per call, accounted by
    :class:`pymc_dp.accounting.pld.PoissonGaussianReleases`). The batch is secret: it is
    drawn from the mechanism's generator and sent to the device as indices only.

    References
    ----------
    .. [1] Jälkö, J., Dikmen, O. and Honkela, A. (2017). Differentially private variational
       inference for non-conjugate models. UAI, Algorithm 1.
    """

    def __init__(
        self,
        rows: JaxRows,
        grad_clip: float,
        noise_multiplier: float,
        sampling_rate: float,
        neighbouring: str,
        noise: SecureNoise | None = None,
    ) -> None:
        super().__init__(rows, grad_clip, noise_multiplier, sampling_rate, neighbouring)
        self._noise = noise

    def release(self, theta_draws: np.ndarray, parameter_jacobians: list[np.ndarray], rng: Any) -> np.ndarray:
        """One noisy gradient estimate, shape (D,) (see the parent class)."""
        rng = _noise_source(self._noise, rng)
        batch = poisson_sample(rng, self._rows.n_rows, self.sampling_rate)
        jacobians = np.stack([np.asarray(m, dtype=float) for m in parameter_jacobians])
        z = rng.normal(0.0, 1.0, size=jacobians.shape[2])
        noisy = self._rows.noisy_batch_gradient_sum(theta_draws, jacobians, self.grad_clip, self.std, z, batch)
        return noisy / self.sampling_rate


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
