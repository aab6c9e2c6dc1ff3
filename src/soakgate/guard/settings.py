"""What the guard watches and how it recovers (the `[guard]` table of a campaign)."""

from __future__ import annotations

from dataclasses import dataclass

from soakgate.guard.patterns import DEFAULT_FATAL_PATTERNS


@dataclass(frozen=True, slots=True)
class GuardSettings:
    """Watch intervals, fault criteria and the restart policy."""

    interval_s: float = 1.0
    """Seconds between checks of process exit and new log lines."""
    health_interval_s: float = 5.0
    """Seconds between health probes of each instance."""
    health_timeout_s: float = 10.0
    """Timeout of one health probe."""
    health_failures: int = 3
    """Consecutive failed probes that declare an instance dead."""
    fatal_patterns: tuple[str, ...] = DEFAULT_FATAL_PATTERNS
    """Regexes searched in every log line; a match is an engine fault."""
    restart_on_log: bool = True
    """Restart an instance whose log matched a fatal pattern even if it still answers."""
    max_restarts: int = 3
    """Restart attempts per fault before the instance is retired for the rest of the block."""
    restart_backoff_s: float = 5.0
    """Wait before the first restart attempt; doubles with each further attempt."""
    telemetry: bool = True
    """Sample device telemetry (NVML / xpu-smi) when the tools are present."""
    telemetry_interval_s: float = 30.0
    """Seconds between telemetry samples."""
    log_tail_chars: int = 4000
    """Characters of log tail stored with a fault."""
