"""A database that fills up, is deleted or is made immutable mid-soak stops the soak within about a
second, says so in one line, exits 2, and loses nothing the server answered: what the database
did not take is in a sidecar file that `soakgate import` loads."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from soakgate.mockserver.process import MockProcess

FAST_MOCK = ("--seed", "3", "--tokens-per-s", "20000", "--output-tokens", "96")


def soak_command(url: str, db: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "soakgate", "run", "--target", f"gpu0={url}", "--label", "fault",
        "--requests", "200000", "--duration", "90s", "--concurrency", "8", "--max-tokens", "96",
        "--db", str(db), "--quiet", "--no-watch-metrics", *extra,
    ]  # fmt: skip


def stored_ids(db: Path) -> list[str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [r for (r,) in conn.execute("SELECT request_id FROM generations")]


def wait_for_rows(db: Path, minimum: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if db.exists():
            try:
                if len(stored_ids(db)) >= minimum:
                    return
            except sqlite3.Error:
                pass
        time.sleep(0.1)
    raise AssertionError(f"fewer than {minimum} rows before the fault")


def finish(process: subprocess.Popen[str]) -> tuple[int, list[str]]:
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return process.returncode, stderr.strip().splitlines()


def sidecar_of(line: str) -> Path:
    """The sidecar path the one-line error names (`... soakgate import DB FILE)`)."""
    return Path(line.rsplit(" ", 1)[1].rstrip(")"))


def import_into(db: Path, sidecar: Path, cwd: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "soakgate", "import", str(db), str(sidecar)],
        capture_output=True, text=True, timeout=60, cwd=cwd,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def answered(mock: MockProcess) -> dict[str, float]:
    """Request id -> when the mock received it, for every request it saw."""
    return {row["request_id"]: row["at"] for row in mock.ground_truth()}


def first_failed_at(sidecar: Path) -> float:
    for line in sidecar.read_text().splitlines():
        event = json.loads(line).get("event")
        if event and event["kind"] == "store_failed":
            return float(event["data"]["first_failed_at"])
    raise AssertionError("no store_failed event in the sidecar")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (the disk that fills up); skipped where mounting is not allowed."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.mark.slow
def test_a_full_disk_stops_the_soak_and_every_answered_row_is_kept(
    start_mock: Callable[..., MockProcess], small_disk: Path, tmp_path: Path
) -> None:
    mock = start_mock(*FAST_MOCK)
    db, fallback = small_disk / "d.sqlite", tmp_path / "fallback"
    fallback.mkdir()
    env = {**os.environ, "TMPDIR": str(fallback)}  # the sidecar cannot go beside the db
    process = subprocess.Popen(soak_command(mock.url, db), stderr=subprocess.PIPE, text=True,
                               env=env, cwd=tmp_path)  # fmt: skip
    code, lines = finish(process)
    assert code == 2 and len(lines) == 1, lines
    assert "failed" in lines[0] and "full" in lines[0] and "soakgate import" in lines[0], lines
    sidecar = sidecar_of(lines[0])
    assert sidecar.parent == fallback and sidecar.exists()
    seen = answered(mock)
    assert max(seen.values()) <= first_failed_at(sidecar) + 1.6  # stopped within about a second
    copy = tmp_path / "copy.sqlite"
    for suffix in ("", "-wal"):
        if Path(f"{db}{suffix}").exists():
            shutil.copy(f"{db}{suffix}", f"{copy}{suffix}")
    in_db = stored_ids(copy)
    import_into(copy, sidecar, tmp_path)
    rows = stored_ids(copy)
    assert len(rows) == len(set(rows)) and set(rows) == set(seen)
    assert 0 < len(in_db) < len(rows)
    with sqlite3.connect(copy) as conn:
        assert conn.execute("SELECT status FROM runs").fetchall() == [("failed",)]


@pytest.mark.slow
def test_a_database_deleted_mid_soak_is_detected_and_its_rows_are_rescued(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock(*FAST_MOCK)
    db = tmp_path / "d.sqlite"
    process = subprocess.Popen(soak_command(mock.url, db), stderr=subprocess.PIPE, text=True,
                               cwd=tmp_path)  # fmt: skip
    wait_for_rows(db, 300, process)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink()
    code, lines = finish(process)
    assert code == 2 and len(lines) == 1, lines
    assert "deleted" in lines[0] and "soakgate import" in lines[0], lines
    sidecar = sidecar_of(lines[0])
    assert sidecar.parent == tmp_path
    output = import_into(tmp_path / "new.sqlite", sidecar, tmp_path)
    rows = stored_ids(tmp_path / "new.sqlite")
    assert len(rows) == len(set(rows)) and set(rows) == set(answered(mock)) and len(rows) > 300
    assert "(0 already present)" in output
    again = import_into(tmp_path / "new.sqlite", sidecar, tmp_path)  # importing twice adds nothing
    assert again.startswith("imported 0 generations") and len(
        stored_ids(tmp_path / "new.sqlite")
    ) == len(rows)


@pytest.mark.slow
def test_an_immutable_shm_file_stops_the_soak_without_sigbus(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("chattr (e2fsprogs) is not installed")
    mock = start_mock(*FAST_MOCK)
    db = tmp_path / "d.sqlite"
    shm = Path(f"{db}-shm")
    process = subprocess.Popen(soak_command(mock.url, db), stderr=subprocess.PIPE, text=True,
                               cwd=tmp_path)  # fmt: skip
    try:
        wait_for_rows(db, 300, process)
        made = subprocess.run(["chattr", "+i", str(shm)], capture_output=True, text=True)
        if made.returncode != 0:
            process.send_signal(signal.SIGTERM)
            pytest.skip(f"this filesystem has no immutable flag: {made.stderr.strip()}")
        code, lines = finish(process)
    finally:
        subprocess.run(["chattr", "-i", str(shm)], capture_output=True)
    assert code == 2, (code, lines)  # not 135 (SIGBUS)
    assert len(lines) == 1 and "immutable" in lines[0] and "soakgate import" in lines[0], lines
    import_into(db, sidecar_of(lines[0]), tmp_path)
    rows = stored_ids(db)
    assert len(rows) == len(set(rows)) and set(rows) == set(answered(mock))


@pytest.mark.slow
def test_a_campaign_whose_disk_fills_stops_in_one_line_with_its_rows_in_a_sidecar(
    small_disk: Path, tmp_path: Path
) -> None:
    from tests.campaign.helpers import write_campaign

    campaign = write_campaign(tmp_path, {"eager": "--tokens-per-s 20000 --seed 1",
                                         "graph": "--tokens-per-s 20000 --seed 2"},
                              requests=3000, max_tokens=96)  # fmt: skip
    db, fallback = small_disk / "c.sqlite", tmp_path / "fallback"
    fallback.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "soakgate", "campaign", str(campaign), "--db", str(db)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(fallback)},
    )  # fmt: skip
    errors = [line for line in result.stderr.splitlines() if line.startswith("soakgate:")]
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(errors) == 1 and "full" in errors[0] and "soakgate import" in errors[0], errors
    assert "Traceback" not in result.stderr
    sidecar = sidecar_of(errors[0])
    assert sidecar.exists() and sidecar.stat().st_size > 0
