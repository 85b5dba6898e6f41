"""The one percentile every figure of the simulator uses, so that p90s agree across tables."""

from __future__ import annotations

import math


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]): always a value that occurred, never an
    interpolation between two jobs; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]
