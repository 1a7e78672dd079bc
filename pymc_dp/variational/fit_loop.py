"""DPADVI's fit loop: one iteration of its update here, or blocks of them from the JAX backend.

Each iteration is :func:`pymc_dp.step_methods.kernels.advi_kernel`: the Monte Carlo draws (data-
free), one release of the mechanism (the Poisson batch's clipped, noised gradient), the exact
data-free gradients and the optimiser's step. On the default backend it runs here, one release
at a time (:class:`pymc_dp.step_methods.host_releases.HostReleases`); on the JAX backend the
same kernel runs on the device in ``lax.scan`` blocks, with the same draws in the same order.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from pymc_dp.mechanisms import NoisyPoissonGradientSum
from pymc_dp.step_methods import kernels
from pymc_dp.step_methods.host_releases import HostReleases
from pymc_dp.variational.fit_diagnostics import _GradientTrace, _IterateTail


class _FitLoop:
    """DPADVI's iterations: the step of one iteration, the JAX backend's blocks, the packed parameters.

    A mixin of :class:`pymc_dp.variational.dpadvi.DPADVI`, which sets what it reads (``_family``,
    ``_params``, ``_optimizer_state``, ``_prior``, ``_to_rows``, ``_row_mechanisms``, ``_mc_rng``,
    ``_noise_rng``, ``n_mc``, ``sampling_rate``, ``average_iterates``) in its ``_setup`` and ``fit``.
    """

    def _compile_blocks(self, mechanisms: Any, prior: Any) -> None:
        """Compile the JAX backend's ``lax.scan`` block for the expected batch, before the charge.

        Where it cannot be built (a prior JAX cannot run; float32) the fit runs one device call
        per iteration, recorded as ``scan_iterations`` 1 in the backend record.
        """
        if mechanisms.scan_iterations <= 1 or mechanisms.dtype != "float64":
            mechanisms.scan_iterations = 1
            return
        size = self._family.size
        try:
            mechanisms.compile_kernel(
                kernels.advi_kernel,
                prior,
                (np.zeros(size), self._optimizer_state.state(np.zeros(size))),
                np.zeros((self.n_mc, prior.n_params)),
                self._advi_settings(),
                releases=(mechanisms.batch_gradient_release(self.sampling_rate, size),),
                iterations=mechanisms.scan_iterations,
            )
        except Exception as error:  # a piece the block adds (the prior) has no JAX form: one call per iteration
            warnings.warn(
                f"DPADVI's lax.scan block could not be compiled ({type(error).__name__}; its message is withheld, it "
                "may hold data values): the fit runs one device call per iteration (recorded as scan_iterations 1).",
                UserWarning,
                stacklevel=4,
            )
            mechanisms.scan_iterations = 1

    def _packed(self) -> np.ndarray:
        return np.concatenate([np.asarray(p.get_value(), dtype=float) for p in self._params])

    def _unpack(self, packed: np.ndarray) -> None:
        parts = self._family.split(packed)
        for shared, value in zip(self._params, parts.values(), strict=True):
            # Fresh arrays every step (the optimiser never updates in place): no copy needed.
            shared.set_value(np.asarray(value, dtype=shared.dtype), borrow=True)

    def _advi_settings(self) -> kernels.ADVISettings:
        return kernels.ADVISettings(
            self._family, self._optimizer_state, tuple(int(i) for i in self._to_rows), self._prior.n_params
        )

    def _make_step(self, mechanism: NoisyPoissonGradientSum, tail: _IterateTail, trace: _GradientTrace, n: int):
        """One iteration of :func:`pymc_dp.step_methods.kernels.advi_kernel`: here, or from the backend's blocks."""
        settings = self._advi_settings()

        def step() -> None:
            packed = self._packed()
            eps = self._mc_rng.standard_normal((self.n_mc, self._prior.n_params))
            releases = HostReleases(self._prior, self._noise_rng, batch_gradient=mechanism)
            state = (packed, self._optimizer_state.state(packed))
            (updated, optimizer_state), info = kernels.advi_kernel(kernels.NUMPY_OPS, releases, state, eps, settings)
            self._optimizer_state.set_state(optimizer_state)
            trace.add(info.mean, info.released)
            tail.add(updated)
            self._unpack(updated)

        block = self._block(mechanism)
        if block is None:
            return step
        size = self._row_mechanisms.scan_iterations
        pending: list[tuple] = []
        remaining, left_at = [n], [b""]

        def block_step() -> None:
            # Iterations come from blocks of `size`, run on the device from where the last one left the
            # parameters; anything else moved them (a callback): the rest of the block is dropped, never used.
            packed = self._packed()
            if pending and packed.tobytes() != left_at[0]:
                pending.clear()
            if not pending:
                count = min(size, remaining[0])
                eps = self._mc_rng.standard_normal((count, self.n_mc, self._prior.n_params))
                state = (packed, self._optimizer_state.state(packed))
                (updated, states), info = block(state, eps, settings, self._noise_rng)
                pending.extend(
                    (updated[k], tuple(a[k] for a in states), info.mean[k], info.released[k]) for k in range(count)
                )
            updated, state, mean, released = pending.pop(0)
            remaining[0] -= 1
            trace.add(mean, released)
            self._optimizer_state.set_state(state)
            tail.add(updated)
            self._unpack(updated)
            left_at[0] = self._packed().tobytes()  # as the parameters hold it (their dtype), for the check above

        block_step.drop = pending.clear  # after the fit: iterations computed and never used are not kept
        return block_step

    def _block(self, mechanism: NoisyPoissonGradientSum):
        """The JAX backend's iterations in ``lax.scan`` blocks for this fit (None: one call per iteration)."""
        build = getattr(self._row_mechanisms, "kernel_block", None)
        if build is None:
            return None
        return build(kernels.advi_kernel, self._prior, batch_gradient=mechanism, batch_gradient_size=self._family.size)

    def _run_iterations(
        self, mechanism: NoisyPoissonGradientSum, n: int, progressbar: bool, progressbar_theme: Any, callbacks
    ) -> tuple[_IterateTail, _GradientTrace]:
        """Run ``n`` iterations through ``mechanism`` (inside the fit's release); returns what they kept.

        Ends at the average of the second half of the iterates when ``average_iterates`` (and
        at least two were kept): post-processing of the released gradients.
        """
        if progressbar_theme is None:
            from pymc.progress_bar import default_progress_theme as progressbar_theme
        tail = _IterateTail(start=n - max(1, n // 2))  # the second half of this fit's iterates
        trace = _GradientTrace(start=n - max(1, n // 2))  # and the gradients released there
        step = self._make_step(mechanism, tail, trace, n)
        try:
            self.state = self._iterate_without_loss(0, n, step, progressbar, progressbar_theme, list(callbacks or []))
        finally:
            getattr(step, "drop", lambda: None)()
        # Post-processing of the released gradients: iterate averaging.
        if tail.count >= 2 and self.average_iterates:
            self._unpack(tail.mean)
        return tail, trace
