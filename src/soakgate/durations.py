"""Durations as users write them (`90`, `30s`, `5m`, `2h`, `1.5h`, `1d`): one parser for the
command line (`cli/args.duration`) and campaign files (`campaign/fields`)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str) -> float | None:
    """Seconds from `90`, `30s`, `5m`, `2h`, `1.5h`, `1d`; None when the text is not a positive
    duration."""
    match = _DURATION.match(text)
    if not match or float(match.group(1)) <= 0:
        return None
    return float(match.group(1)) * _UNIT_S[match.group(2)]
