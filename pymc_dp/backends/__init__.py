"""Where a private run's releases are computed: the default backend, a JAX device, a Dask cluster.

Every backend gives the steps the same mechanisms — the same clipped sums, sensitivities, noise
scales and accounting events — computed elsewhere; none adds a release or changes what ε
covers, and none imports or names a sampler (each step hands its kernel over,
:mod:`pymc_dp.step_methods.kernels`). One interface, :class:`Backend`:

- :mod:`pymc_dp.backends.jax` — :class:`~pymc_dp.backends.jax.JaxBackend` (``backend="jax"``),
  its mechanisms in :mod:`pymc_dp.backends.jax_rows` (docs/jax.md), built from the per-row
  graphs made JAX functions (:mod:`~pymc_dp.backends.jax_compile`), the rows on a JAX device
  with the releases jitted on them (:mod:`~pymc_dp.backends.jax_device`), the release classes
  (:mod:`~pymc_dp.backends.jax_releases`) and the kernels' blocks in ``lax.scan``
  (:mod:`~pymc_dp.backends.jax_scan`);
- :mod:`pymc_dp.backends.dask` — :class:`~pymc_dp.backends.dask.DaskBackend`: the rows scattered to
  a Dask cluster's workers once, each full-data release gathering only the partitions' clipped
  sums (docs/dask.md).

The default backend is the mechanism layer itself (:mod:`pymc_dp.mechanisms`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

__all__ = ["Backend", "DaskBackend", "DaskBackendError", "JaxBackend"]


@runtime_checkable
class Backend(Protocol):
    """What :func:`pymc_dp.sample` asks of a backend: check the run, then attach to its steps.

    Both calls read no data values: ``check`` looks at public settings and the steps' types and
    is called before anything is charged; ``attach`` puts the rows where they are computed and
    compiles the releases (nothing released), after the plan and before the charge, and returns
    the function that gives the steps their default mechanisms back.
    """

    def check(self, steps: list[Any], kwargs: dict[str, Any]) -> None:
        """Refuse, naming the setting, a run this backend cannot run; may set ``kwargs["cores"]``."""

    def attach(self, steps: list[Any]) -> Callable[[], None]:
        """Give each step this backend's mechanisms for the run; returns the undo."""


def __getattr__(name: str) -> Any:
    # The backends import JAX or Dask only when used: their classes are loaded on first access.
    if name == "JaxBackend":
        from pymc_dp.backends.jax import JaxBackend

        return JaxBackend
    if name in ("DaskBackend", "DaskBackendError"):
        from pymc_dp.backends import dask

        return getattr(dask, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
