"""Versions of the packages that computed a result (standard library only)."""

from __future__ import annotations

from importlib import metadata

__all__ = ["versions"]

_PACKAGES = ("pymc-dp", "pymc", "pytensor", "dp-accounting", "numpy", "scipy")


def versions() -> dict[str, str]:
    """Versions of the packages that computed a result (recorded in ``dp_accountant`` and in ledgers)."""
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "unknown"
    return out
