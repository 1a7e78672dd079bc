"""Floating-point rounding on the private side (no dependencies: every accounting module may use it)."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["round_towards_privacy"]


def round_towards_privacy(
    value: float, holds: Callable[[float], bool], towards: float, max_steps: int = 10_000
) -> float:
    """Move a positive ``value`` towards ``towards`` (``math.inf`` or 0) until ``holds(value)``.

    Calibrations and ε evaluations computed in floating point can miss their exact value by
    a few ulps; this moves them, a few ulps at a time, to the side where the privacy
    statement provably holds in floating point (more noise, larger ε, smaller μ).

    Raises
    ------
    RuntimeError
        If ``max_steps`` moves do not reach a value where ``holds`` is true (a bug upstream:
        the starting value was not within rounding of the answer).
    """
    factor = 1.0 + 1e-15 if towards > value else 1.0 - 1e-15
    for _ in range(max_steps):
        if holds(value):
            return value
        value = math.nextafter(value, towards) * factor
    raise RuntimeError("round_towards_privacy: the value did not reach the private side within rounding.")
