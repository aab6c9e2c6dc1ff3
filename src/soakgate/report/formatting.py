"""Number formatting shared by every stage that words a finding (a leaf: imports no report
module)."""

from __future__ import annotations

import math


def percent(value: float | None, digits: int = 3) -> str:
    """A rate as a percentage string, '-' when absent."""
    return "-" if value is None or math.isnan(value) else f"{100 * value:.{digits}f}%"
