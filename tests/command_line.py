"""The real `soakgate` command line, run as a user runs it (a subprocess)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def soakgate(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -m soakgate ARGS` in `cwd`; its exit code, stdout and stderr. The timeout is
    generous (a loaded machine stretches a command many times over); it only ends a hang."""
    return subprocess.run(
        [sys.executable, "-m", "soakgate", *args], capture_output=True, text=True,
        timeout=timeout, cwd=cwd,
    )  # fmt: skip
