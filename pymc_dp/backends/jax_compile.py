"""The JAX backend's per-row compile: PyTensor's per-row graphs made JAX functions.

:func:`row_functions` takes the per-row log-likelihood graph that :class:`pymc_dp.data.RowLikelihood`
built and checked (row-wise parameter checks, the allow-list walk, the one-row perturbation
probe, the subset-vs-all-rows probe) and compiles it, and the candidate forms of the per-row
gradient (the linear clipped sum, reverse mode per row, the batch's forward Jacobian), through
PyTensor's JAX linker (``jax_funcify``); :func:`_jax_function` is that compile for one graph.
Also here: the types the backend computes in (:data:`JAX_DTYPES`), its chunk sizes, and the
contexts that trace per-row values in 32 bits inside float64 sums (:func:`_x64_off`).

Nothing here holds or reads data values: the functions are built from graphs and applied to
the rows by :class:`pymc_dp.backends.jax_device.JaxRows` on the device. JAX is imported on
first use only (:func:`import_jax`).
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

__all__ = ["CPU_CHUNK_ROWS", "JAX_DTYPES", "LINEAR_CHUNK_BYTES", "import_jax", "row_functions"]

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


def row_functions(jax, rows, jax_function) -> tuple:
    """(per-row log-likelihoods of a batch of rows, the per-row gradient's candidate forms), as JAX functions.

    ``rows`` is the data layer (:class:`pymc_dp.data.RowLikelihood`; only its graphs are read
    here, no value), ``jax_function(inputs, output)`` the compile (:func:`_jax_function` with
    the data layer's parameter checks). The log-likelihood comes from the batch graph (row-
    independent: checked by the data layer), which XLA compiles to one matrix-vector product
    where ``vmap`` of one row's graph made a batched dot of 1-row products (measured 4.5x
    slower at N = 10⁵ on a CPU); one row's graph, vectorised, where that fails. The gradient
    candidates, in order of preference, are ``(mode, function)`` pairs: ``"linear"`` (the
    linear clipped sum, no per-row matrix, where the graph has a linear predictor; its
    ``pieces`` attribute the data-only pieces A and ‖Aᵢ‖²), ``"reverse"`` (one row's
    reverse-mode gradient, vectorised) and ``"forward"`` (a function that builds the batch
    graph's forward-mode Jacobian on demand).
    """
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
        try:
            lik_fn = jax_function([theta, *batch], lik_batch)
        except Exception:
            lik_fn = jax.vmap(jax_function([theta, *one], lik_one), in_axes=vectorised)
        candidates = []
        try:  # the linear clipped sum (no per-row matrix), where the graph has a linear predictor
            candidates.append(("linear", _linear_function(rows, theta, batch, lik_batch, jax_function)))
        except Exception:  # _NotLinear, or no JAX form: the per-row gradients below
            pass
        try:
            grad_one = jax_function([theta, *one], pytensor.grad(lik_one, theta))
            candidates.append(("reverse", jax.vmap(grad_one, in_axes=vectorised)))
        except Exception:  # no reverse-mode gradient of one row: the batch graph's forward-mode Jacobian
            pass
        jacobian = rows._forward_jacobian
        candidates.append(("forward", lambda: jax_function([theta, *batch], jacobian(lik_batch))))
    return lik_fn, candidates


def _linear_function(rows, theta, batch, lik_batch, jax_function):
    """The linear form's clipped sum of a chunk, ``f(θ, bound, *rows, *pieces)``, with ``f.pieces(*rows)``.

    Raises where the graph has no linear predictor (the data layer's ``_NotLinear``) or no JAX form.
    """
    import pytensor.tensor as pt

    from pymc_dp.data import _linear_clipped_sum

    bound_var = pt.dscalar("bound")
    linear_total, pieces = _linear_clipped_sum(theta, rows.n_params, batch, lik_batch, bound_var, precomputed=True)
    piece_inputs = [a_in for *_, a_in, _ in pieces] + [sq_in for *_, sq_in in pieces]
    linear_total = _frozen_shared(linear_total, [theta, bound_var, *batch, *piece_inputs])
    # A with its non-finite rows set to zero, and ‖Aᵢ‖² (non-finite rows stay so: left out)
    safe_a = [pt.switch((pt.isnan(sq) | pt.isinf(sq))[:, None], 0, a) for a, sq, *_ in pieces]
    piece_graph = _frozen_shared([*safe_a, *[sq for _, sq, *_ in pieces]], list(batch))
    linear_fn = jax_function([theta, bound_var, *batch, *piece_inputs], linear_total)
    linear_fn.pieces = jax_function(list(batch), piece_graph)
    return linear_fn


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
