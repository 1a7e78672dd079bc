"""The JAX backend of :func:`pymc_dp.sample`: DPPenaltyMH's, DPHMC's and DPBarkerMH's releases on a device.

``pmdp.sample(..., backend="jax")`` (or ``backend=pmdp.JaxBackend(dtype="float32")``) runs
the same steps, with the same transitions, tuning, statistics, calibration and accounting as
the default backend; only the releases — the per-row log-likelihood ratios and gradients,
clipped, summed and noised — run on the device, through
:class:`pymc_dp.backends.jax_rows.JaxRowMechanisms` (the mechanism layer). This module reads
no data: it checks the settings, swaps a step's mechanisms for the run and records the backend.
See docs/jax.md.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pymc_dp._validation import check_one_core
from pymc_dp.backends.jax_rows import JAX_DTYPES, JaxRowMechanisms, import_jax

__all__ = ["SUPPORTED_STEPS", "JaxBackend", "attach_backend", "check_backend"]

#: The step classes that run on the JAX backend (exactly these classes; subclasses are refused).
SUPPORTED_STEPS = ("DPPenaltyMH", "DPHMC", "DPBarkerMH")


@dataclass(frozen=True)
class JaxBackend:
    """Settings of the JAX backend of :func:`pymc_dp.sample` (``backend="jax"`` is ``JaxBackend()``).

    Parameters
    ----------
    dtype : {"float64", "float32"}, default "float64"
        Type of the per-row values on the device (data, θ and each row's log-likelihood or
        gradient). ``"float32"`` halves the rows' memory and traffic; every clip and every sum
        over rows is still computed in float64, so that one row moves a sum by its clipped
        term only, up to float64 rounding (docs/jax.md, "float32"; a float32 running sum could
        carry it past the accounted sensitivity). The noise is drawn and added in float64 either way.
    chunk_rows : int, optional
        Rows per chunk of a pass over the data on the device (default: the data layer's
        memory limit, :attr:`pymc_dp.data.RowLikelihood.chunk_rows`, and at most 16,384 rows
        on a CPU, where a chunk's per-row gradients then stay in cache).
    whole_transition : bool, default True
        DPHMC in float64: run each iteration's L + 1 gradient releases, the leapfrog, the
        ratio release and the penalty log-acceptance in one jitted device call (the noise's
        standard normals drawn on the host first, in the order the one-by-one releases draw
        them, all of them even where a trajectory diverges; the accept/reject decision on the
        host), instead of one call per release. Compiled when the run starts, before it is
        charged; a prior JAX cannot run falls back to one call per release.
        Same releases, draws and accounting (tested against the default backend); fewer
        host–device round trips. False: one device call per release.
    scan_iterations : int, default 64
        DPHMC, DPPenaltyMH and DPBarkerMH after tuning, in float64 with ``whole_transition``:
        run this many iterations, the accept/reject decision included, in one jitted
        ``lax.scan`` per device call, the current point (and, on full data, its per-row
        log-likelihoods) staying on the device; the step returns the iterations one by one to
        PyMC. The step's randomness (momenta, jitter, proposals, log U) and the mechanisms'
        draws (the noise's normals, Barker's batches and V_cor) are drawn on the host for the
        whole block, in the order one call per iteration draws them: with
        ``reproducible_noise`` the same chain as ``scan_iterations=1`` (tested). A block may
        run past a chain's last draw: those iterations are computed and dropped, never
        released. While tuning, DPPenaltyMH and DPBarkerMH (whose proposal scale changes only
        at the end of each ``tune_interval``) run blocks cut at the interval's end and at the
        end of tuning; DPHMC within each mass-matrix window, its dual averaging of the step
        size run on the device and replayed on the host from the returned acceptance
        probabilities. On a CPU, DPHMC measured no faster in blocks (docs/jax.md): set 1 there.
        DPADVI in float64 (``pmdp.DPADVI(..., backend=JaxBackend(...))``): this many
        iterations per device call, the optimiser's step included (its state carried on the
        device), each block's Poisson batches and normals drawn on the host first in the
        release's order; a fit's last block draws for its remaining iterations only, so with
        ``reproducible_noise`` the fit equals ``scan_iterations=1``'s (tested).
        1: one call per iteration.

    Notes
    -----
    Neighbouring relation, sensitivities, noise scales and accounting: those of the steps, as
    on the default backend. The noise comes from the operating system's CSPRNG
    (``os.urandom`` read in blocks: :class:`pymc_dp.backends.jax_rows.BufferedSecureNoise`),
    drawn on the host and sent to the device with each release, unless the step has
    ``reproducible_noise=True`` (testing only), which draws it from the same seeded
    generator as the default backend.
    Floating-point noise is open to precision attacks (Mironov 2012) on every backend; in
    float32 the per-row values are rounded to 24 bits, their clips, sums and the noise are
    computed in float64.

    References
    ----------
    .. [1] Mironov, I. (2012). On significance of the least significant bits for differential
       privacy. ACM CCS.
    """

    dtype: str = "float64"
    chunk_rows: int | None = None
    whole_transition: bool = True
    scan_iterations: int = 64

    def __post_init__(self) -> None:
        if self.dtype not in JAX_DTYPES:
            raise ValueError(f"`dtype` must be one of {JAX_DTYPES}. Found {self.dtype!r}.")
        chunk = self.chunk_rows
        if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
            raise ValueError(f"`chunk_rows` must be a positive integer or None. Found {chunk!r}.")
        if not isinstance(self.whole_transition, bool):
            raise ValueError(f"`whole_transition` must be a bool. Found {self.whole_transition!r}.")
        scan = self.scan_iterations
        if isinstance(scan, bool) or not isinstance(scan, numbers.Integral) or scan < 1:
            raise ValueError(f"`scan_iterations` must be a positive integer. Found {scan!r}.")
        object.__setattr__(self, "scan_iterations", int(scan))  # a NumPy integer, as a plain int

    def check(self, steps: list[Any], kwargs: dict[str, Any]) -> None:
        """:class:`pymc_dp.backends.Backend`'s check: refuse, naming the setting, what this backend cannot run."""
        check_backend(self, steps, kwargs)

    def attach(self, steps: list[Any]) -> Callable[[], None]:
        """:class:`pymc_dp.backends.Backend`'s attach: the JAX mechanisms for the run (compiled, nothing released)."""
        return attach_backend(self, steps)


def check_backend(backend: Any, steps: list[Any], kwargs: dict[str, Any]) -> JaxBackend | None:
    """The run's backend (None for the default), after checking that it can run ``steps``.

    Changes nothing but ``kwargs["cores"]``, set to 1 for the JAX backend (the chains run one
    after another in this process, where the data are on the device; PyMC's default would
    start worker processes).

    Raises
    ------
    ValueError
        For an unknown ``backend``, steps the JAX backend does not run, or ``cores`` > 1.
    ImportError
        When ``backend`` is JAX and JAX is not installed.
    """
    if backend is None or (isinstance(backend, str) and backend == "default"):
        return None
    if isinstance(backend, str) and backend == "jax":
        backend = JaxBackend()
    if not isinstance(backend, JaxBackend):
        raise ValueError(
            f"`backend` must be 'default', 'jax', a pymc_dp.JaxBackend or a pymc_dp.DaskBackend. Found {backend!r}."
        )
    import_jax()
    names = [type(s).__name__ for s in steps]
    if len(steps) != 1 or names[0] not in SUPPORTED_STEPS:
        raise ValueError(
            f"`backend`='jax' runs one DPPenaltyMH, DPHMC or DPBarkerMH step covering every free variable. "
            f"Found steps {names}; DPMultiOwnerPenaltyMH, DPSuffStatsPenaltyMH and compound steps run on "
            "backend='default'."
        )
    check_one_core(kwargs.get("cores"), "with `backend`='jax' (the chains run one after another on the device)")
    kwargs["cores"] = 1
    return backend


def attach_backend(backend: JaxBackend | None, steps: list[Any]) -> Callable[[], None]:
    """Give each step the JAX mechanisms for this run (compiled here, before any release); returns the undo.

    Compiles the per-row graphs and puts the rows on the device: nothing is released.
    """
    if backend is None:
        return lambda: None
    originals = [s._row_mechanisms for s in steps]
    swapped = [
        JaxRowMechanisms(
            original,
            reproducible_noise=s.reproducible_noise,
            dtype=backend.dtype,
            chunk_rows=backend.chunk_rows,
            whole_transition=backend.whole_transition,
            scan_iterations=backend.scan_iterations,
        )
        for s, original in zip(steps, originals, strict=True)
    ]
    for s, mechanisms in zip(steps, swapped, strict=True):
        _compile_transitions(s, mechanisms, backend)
        _use_mechanisms(s, mechanisms)

    def restore() -> None:
        for s, original in zip(steps, originals, strict=True):
            _use_mechanisms(s, original)

    return restore


def _compile_transitions(step: Any, mechanisms: JaxRowMechanisms, backend: JaxBackend) -> None:
    """Compile the step's kernel calls now, before the charge; what JAX cannot run is turned off.

    The step says what to compile (:meth:`~pymc_dp.step_methods.base.DPStep.kernel_compilations`:
    its kernel, releases and example shapes); a prior or kernel without a JAX form turns
    ``whole_transition`` off (one device call per release, as before) and ``scan_iterations``
    to 1 (one call per iteration).
    """
    rows = mechanisms.device_rows
    if getattr(step, "batch_size", None) is not None:  # the subsampled Barker test's release (raises if JAX cannot)
        rows.prepare_batch_ratio(step.batch_size)
    blocks = mechanisms.scan_iterations > 1 and backend.dtype == "float64"
    if mechanisms.whole_transition and backend.dtype == "float64":
        try:
            for kernel, releases, state, draws, settings, iterations in step.kernel_compilations(
                mechanisms.scan_iterations if blocks else 1
            ):
                mechanisms.compile_kernel(
                    kernel, step._prior, state, draws, settings, releases=releases, iterations=iterations
                )
        except Exception:  # the prior has no JAX form
            mechanisms.whole_transition = False
            mechanisms.scan_iterations = 1
    if backend.dtype != "float64" or not mechanisms.whole_transition:
        mechanisms.scan_iterations = 1  # no blocks for this step: recorded as 1


def _use_mechanisms(step: Any, mechanisms: Any) -> None:
    """Set the step's row mechanisms and drop the releases it built from the previous ones."""
    step.forget_private_state()
    step._row_mechanisms = mechanisms
    for cached in ("_mechanism", "_llr_mechanism", "_grad_mechanism", "_fused_cache", "_block_cache"):
        if hasattr(step, cached):
            setattr(step, cached, None)


def backend_record(backend: JaxBackend, steps: list[Any]) -> dict[str, Any]:
    """The public description of the backend written in ``dp_accountant`` (no data)."""
    jax = import_jax()
    mechanisms = steps[0]._row_mechanisms
    whole = bool(
        getattr(mechanisms, "whole_transition", False)
        and backend.dtype == "float64"
        and type(steps[0]).__name__ == "DPHMC"
    )
    return {
        "name": "jax",
        "dtype": backend.dtype,
        "device": jax.devices()[0].platform,
        "jax_version": jax.__version__,
        "gradient_mode": getattr(getattr(mechanisms, "device_rows", None), "gradient_mode", None),
        "noise": "reproducible (seeded)" if steps[0].reproducible_noise else "os.urandom (BufferedSecureNoise)",
        "whole_transition": whole,
        "scan_iterations": int(getattr(mechanisms, "scan_iterations", 1)),
    }
