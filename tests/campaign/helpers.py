"""Campaign files against the mock server, and reading the store back."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

MOCK = "{python} -m soakgate.mockserver --host {host} --port {port} --seed {device} {flags}"
DEVICE_LOST = "RuntimeError: UR_RESULT_ERROR_DEVICE_LOST: device lost (injected by the test)"


def write_campaign(
    folder: Path, configs: dict[str, str], *, requests: int, order: str = "interleaved",
    repetitions: int = 1, max_tokens: int = 16, name: str = "t", token_ids: bool = False,
    top: str = "", tables: str = "", load: str = "",
) -> Path:  # fmt: skip
    """A two-device CPU campaign of mock servers; `configs` maps label -> mock flags; `top` adds
    top-level keys, `load` keys of the [load] table and `tables` whole tables."""
    entries = "".join(f"[[configs]]\nlabel = {label!r}\nflags = {flags!r}\n\n"
                      for label, flags in configs.items())  # fmt: skip
    text = f"""
name = "{name}"
order = "{order}"
repetitions = {repetitions}
devices = ["cpu:0", "cpu:1"]
{top}

[server]
command = "{MOCK}"
startup_timeout = 60
warmup_requests = 1
stop_grace = 3

{entries}
[load]
concurrency = 2
max_tokens = {max_tokens}
requests = {requests}
grace = 5
token_ids = {str(token_ids).lower()}
{load}

[guard]
interval = 0.1
health_interval = 0.5
restart_backoff = 0.1
max_restarts = 2
telemetry = false

{tables}
"""
    path = folder / "campaign.toml"
    path.write_text(text)
    return path


def query(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of a read-only query (works while a campaign process writes the file)."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return connection.execute(sql, params).fetchall()
    finally:
        connection.close()
