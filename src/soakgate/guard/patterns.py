"""Fatal log patterns and an incremental log-file reader that finds them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from soakgate.errors import ConfigError

DEFAULT_FATAL_PATTERNS = (
    r"UR_RESULT_ERROR_DEVICE_LOST",
    r"CUDA error",
    r"\bXid\b",
    r"EngineDeadError",
    r"Engine ?[Cc]ore.*\b(died|failed)\b",
    r"[Oo]ut of memory",
    r"Segmentation fault",
)
"""Regular expressions (searched per log line) that mean the engine or device is broken."""


def compile_patterns(patterns: Sequence[str]) -> list[re.Pattern[str]]:
    """Compile the patterns; a bad regular expression is a ConfigError naming it."""
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise ConfigError(f"guard.fatal_patterns: {pattern!r} is not a regex: {exc}") from None
    return compiled


def fatal_lines(lines: Sequence[str], patterns: Sequence[re.Pattern[str]]) -> list[str]:
    """The lines that match any fatal pattern, in order."""
    return [line for line in lines if any(p.search(line) for p in patterns)]


class LogFollower:
    """Reads the lines appended to a log file since the last call (partial lines wait)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def new_lines(self, max_bytes: int = 1 << 20) -> list[str]:
        """Complete lines written since the previous call (at most `max_bytes` read per call)."""
        try:
            with self.path.open("rb") as log:
                log.seek(self._offset)
                chunk = log.read(max_bytes)
        except OSError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        *complete, self._partial = data.split(b"\n")
        return [line.decode("utf-8", "replace").rstrip("\r") for line in complete]
