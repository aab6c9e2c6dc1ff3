"""Run the real `soakgate` command in a subprocess, and small database fixtures for CLI tests."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

ENTRY_POINT = Path(sys.executable).parent / "soakgate"
"""The installed console script: unlike `python -m soakgate`, it does not put the current
directory on sys.path, so it is what a user's shell runs."""


def soakgate(
    *args: str,
    cwd: Path,
    env: dict[str, str | None] | None = None,
    timeout: float = 600,
    entry_point: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`python -m soakgate ARGS` (or the console script) in `cwd`, with `env` over the test's
    environment (None: removed); output captured as text. The
    timeout is generous (a loaded machine stretches a command many times over)."""
    command = [str(ENTRY_POINT)] if entry_point else [sys.executable, "-m", "soakgate"]
    merged = {**os.environ, **(env or {})}  # a None value removes the variable
    merged = {name: value for name, value in merged.items() if value is not None}
    if entry_point:  # what a user's shell runs: no PYTHONPATH
        merged.pop("PYTHONPATH", None)
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=merged
    )


_MODULES = "\n--- modules loaded at exit ---\n"
_LISTING = (
    "import atexit, runpy, sys\n"
    "mark = sys.argv[1]\n"
    "atexit.register(lambda: print(mark + ' '.join(sorted(sys.modules)), flush=True))\n"
    "sys.argv = ['soakgate', *sys.argv[2:]]\n"
    "runpy.run_module('soakgate', run_name='__main__', alter_sys=True)\n"
)


def soakgate_listing_modules(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m soakgate ARGS` (through runpy) in a process that prints, after the command's
    own output, the modules it had loaded when it exited (`loaded_modules` reads them). Read
    from sys.modules: `python -X importtime`'s report misses a module imported through
    `importlib.import_module`, as the CLI imports its commands."""
    return subprocess.run(
        [sys.executable, "-c", _LISTING, _MODULES, *args],
        capture_output=True, text=True, timeout=600, cwd=cwd,
    )  # fmt: skip


def loaded_modules(done: subprocess.CompletedProcess[str]) -> set[str]:
    """The modules a `soakgate_listing_modules` command had loaded when it exited."""
    return set(done.stdout.rsplit(_MODULES, 1)[1].split())


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed command (asserts there is exactly one, no traceback)."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def sha256(path: Path) -> str:
    """Digest of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tables(path: Path) -> set[str]:
    """Table names of an SQLite file (opened read-only)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        db.close()


def foreign_database(path: Path) -> Path:
    """Another program's SQLite database: one table with a few rows."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE bookmarks (id INTEGER PRIMARY KEY, url TEXT)")
    db.executemany(
        "INSERT INTO bookmarks (url) VALUES (?)", [(f"https://x/{i}",) for i in range(50)]
    )
    db.commit()
    db.close()
    return path


def stored_rows(db: Path) -> dict[str, Any]:
    """Every stored generation of a database, by request id."""
    from soakgate.store import open_store

    store = open_store(db)
    try:
        return {g.request_id: g for g in store.generations()}
    finally:
        store.close()
