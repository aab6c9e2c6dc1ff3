"""Default fatal patterns against real-looking log lines, and the incremental log reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from soakgate.errors import ConfigError
from soakgate.guard.patterns import (
    DEFAULT_FATAL_PATTERNS,
    LogFollower,
    compile_patterns,
    fatal_lines,
)

FATAL = [
    "RuntimeError: UR_RESULT_ERROR_DEVICE_LOST",
    "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    "ERROR [core_client.py:564] Engine core proc EngineCore_0 died unexpectedly, shutting down.",
    "RuntimeError: Engine core initialization failed. See root cause above.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "Fatal Python error: Segmentation fault",
]
ORDINARY = [
    'INFO:     127.0.0.1:51234 - "POST /v1/completions HTTP/1.1" 200 OK',
    "INFO 11-30 06:00:00 [loggers.py:123] Avg prompt throughput: 512.3 tokens/s",
    "Xidian University dataset loaded",
    "memory profiling: 12.3 GiB free",
    "Engine core started",
]


def test_every_default_pattern_catches_its_line_and_none_fires_on_ordinary_logs() -> None:
    patterns = compile_patterns(DEFAULT_FATAL_PATTERNS)
    assert fatal_lines(FATAL, patterns) == FATAL
    assert fatal_lines(ORDINARY, patterns) == []
    for pattern in patterns:  # each default pattern is needed by some line
        assert any(pattern.search(line) for line in FATAL), pattern.pattern


def test_bad_pattern_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a regex"):
        compile_patterns(["(unclosed"])


def test_follower_returns_only_new_complete_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    follower = LogFollower(log)
    assert follower.new_lines() == []  # absent file: nothing yet
    log.write_bytes(b"one\ntw")
    assert follower.new_lines() == ["one"]
    with log.open("ab") as handle:
        handle.write(b"o\r\nthree\n")
    assert follower.new_lines() == ["two", "three"]
    assert follower.new_lines() == []
