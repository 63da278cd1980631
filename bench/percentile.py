"""The one percentile every bench prints: nearest rank."""
from __future__ import annotations

import math
from typing import Optional, Sequence


def pct(xs: Sequence[float], q: float, empty: Optional[float] = math.nan) -> Optional[float]:
    """The nearest-rank ``q``-quantile (q in [0, 1]): the smallest value with at least a
    share q of the values at or below it; ``empty`` when there are none."""
    s = sorted(xs)
    return s[max(0, math.ceil(q * len(s)) - 1)] if s else empty
