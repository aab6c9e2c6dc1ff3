"""An API key a gateway echoes and a password in a target URL are never stored, printed,
exported or reported."""

from __future__ import annotations

import base64
import sqlite3
from collections.abc import Callable
from pathlib import Path

from tests.command_line import soakgate
from tests.hostile import HostileProcess

KEY = "sk-live-4f9c2b7e1d"
PASSWORD = "hunter2secret"


def soak_and_report(url: str, tmp_path: Path, *extra: str) -> tuple[Path, list[str]]:
    """Soak the echoing gateway, then export and report: the database and every output."""
    db = tmp_path / "d.sqlite"
    run = soakgate("run", "--target", url, "--requests", "40", "--concurrency", "2",
                   "--no-stream", "--db", str(db), "--metrics-interval", "0.1", *extra,
                   cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    exported = soakgate("export", str(db), "--format", "csv", "--out", str(tmp_path / "e.csv"),
                        cwd=tmp_path)  # fmt: skip
    report = soakgate("report", str(db), "--html", str(tmp_path / "r.html"), cwd=tmp_path)
    assert exported.returncode == 0 and report.returncode == 0, exported.stderr + report.stderr
    outputs = [run.stdout, run.stderr, exported.stdout, exported.stderr, report.stdout,
               report.stderr, (tmp_path / "e.csv").read_text(), (tmp_path / "r.html").read_text(),
               db.read_bytes().decode("latin-1")]  # fmt: skip
    wal = Path(f"{db}-wal")
    if wal.exists():
        outputs.append(wal.read_bytes().decode("latin-1"))
    return db, outputs


def refusals(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT error_class, error_detail FROM generations "
                            "WHERE error_class IS NOT NULL").fetchall()  # fmt: skip
    assert len(rows) == 10 and all(c == "http_4xx" for c, _ in rows)
    return [detail for _, detail in rows]


def test_an_api_key_a_gateway_echoes_appears_nowhere(
    hostile: Callable[[str], HostileProcess], tmp_path: Path
) -> None:
    server = hostile("echo-key")
    db, outputs = soak_and_report(server.url, tmp_path, "--api-key", KEY)
    assert all("Bearer [redacted]" in detail for detail in refusals(db))
    assert not [text for text in outputs if KEY in text]


def test_credentials_in_a_target_url_are_sent_and_appear_nowhere(
    hostile: Callable[[str], HostileProcess], tmp_path: Path
) -> None:
    server = hostile("echo-key")
    db, outputs = soak_and_report(
        server.url.replace("http://", f"http://ops:{PASSWORD}@"), tmp_path
    )
    basic = base64.b64encode(f"ops:{PASSWORD}".encode()).decode()
    assert all("Basic [redacted]" in detail for detail in refusals(db))  # sent, then redacted
    with sqlite3.connect(db) as conn:
        events = conn.execute("SELECT kind, data FROM events").fetchall()
    assert any(kind == "spec_decode_absent" and "***@" in data for kind, data in events)
    assert not [text for text in outputs if PASSWORD in text or basic in text]


def test_a_bad_url_with_credentials_is_refused_without_printing_them(tmp_path: Path) -> None:
    result = soakgate("run", "--target", f"ftp://ops:{PASSWORD}@127.0.0.1:9", "--requests", "1",
                      "--db", str(tmp_path / "d.sqlite"), cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2 and PASSWORD not in result.stderr and "***@" in result.stderr
