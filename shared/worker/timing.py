"""Stage timings in milliseconds, as every ``timings_ms`` field reports them."""

from __future__ import annotations

import time


def elapsed_ms(t0: float, t1: float | None = None) -> float:
    """Milliseconds from ``t0`` to ``t1`` (default: now), both ``time.perf_counter()`` values."""
    return round(((t1 if t1 is not None else time.perf_counter()) - t0) * 1000, 2)
