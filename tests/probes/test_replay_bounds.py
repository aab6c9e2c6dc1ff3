"""`soakgate replay` against a server that now fails: it stops after consecutive failed replays
or at its time bound, says why in one line and exits 2, says what it does while it runs (also
without a terminal), and keeps every replay it sent as a row of a `failed` probe run."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.cli.helpers import soakgate
from tests.hostile import HostileProcess
from tests.probes.test_replay import soaked

from soakgate.mockserver.process import MockProcess


def _soak(server_url: str, tmp_path: Path) -> Path:
    return soaked(server_url, tmp_path, requests=12, concurrency=2)


def _stored(db: Path) -> tuple[list[tuple[str, str]], list[str | None], list[dict]]:
    """(label, status) of every run, the replay rows' error classes, the replay events."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        runs = check.execute("SELECT label, status FROM runs ORDER BY started_at").fetchall()
        errors = [e for (e,) in check.execute(
            "SELECT error_class FROM generations WHERE label='replay' ORDER BY seq")]  # fmt: skip
        events = [{"kind": k, **json.loads(d)} for k, d in check.execute(
            "SELECT kind, data FROM events WHERE kind LIKE 'replay_%' ORDER BY id")]  # fmt: skip
    return runs, errors, events


@pytest.mark.parametrize(
    "behaviour, flags, error",
    [("reset", (), "dropped"), ("garbage", (), "truncated_stream"),
     ("hang", ("--timeout", "1s"), "timeout")],
)  # fmt: skip
def test_a_target_that_keeps_failing_stops_the_replay_with_exit_2(
    hostile: Callable[[str], HostileProcess], tmp_path: Path, behaviour: str,
    flags: tuple[str, ...], error: str,
) -> None:  # fmt: skip
    db = _soak(hostile("ok").url, tmp_path)
    broken = hostile(behaviour)
    done = soakgate("replay", str(db), "--collapsed", "--target", f"gpu0={broken.url}", *flags,
                    cwd=tmp_path, timeout=180)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("soakgate: error: the target failed 3 replays in a row"), last
    progress = [line for line in done.stderr.splitlines() if line.startswith("replay ")]
    assert len(progress) == 3 and all(error in line for line in progress), done.stderr
    runs, errors, events = _stored(db)
    assert runs == [("compiled", "completed"), ("replay", "failed")]
    assert errors == [error] * 3 and len(broken.seen()) == 3
    assert {e["kind"] for e in events} == {"replay_verdict", "replay_stopped"}
    assert all(e["verdict"] == "inconclusive" for e in events if e["kind"] == "replay_verdict")


def test_the_time_bound_stops_a_slow_replay_with_exit_2(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--collapse-rate", "0.5", "--latency-ms", "300", "--seed", "3")
    db = _soak(mock.url, tmp_path)
    done = soakgate("replay", str(db), "--collapsed", "--target", f"gpu0={mock.url}",
                    "--max-time", "2s", cwd=tmp_path, timeout=180)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "stopped at the --max-time bound (2 s)" in done.stderr.strip().splitlines()[-1]
    runs, errors, events = _stored(db)
    assert runs[-1] == ("replay", "failed")
    planned = 4 * 5 * len([e for e in events if e["kind"] == "replay_verdict"])
    assert 0 < len(errors) < planned  # what was sent is kept; the rest was never sent
    assert "stopped early: stopped at the --max-time bound" in done.stdout


def test_sigterm_stops_the_replay_at_once_with_exit_130_and_keeps_its_rows(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys

    mock = start_mock("--collapse-rate", "0.5", "--latency-ms", "200", "--seed", "3")
    db = _soak(mock.url, tmp_path)
    replay = subprocess.Popen(
        [sys.executable, "-m", "soakgate", "replay", str(db), "--collapsed", "--target",
         f"gpu0={mock.url}"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=os.environ,
    )  # fmt: skip
    assert replay.stderr is not None
    first = replay.stderr.readline()  # a progress line: the replay is sending
    assert first.startswith("replay 1/"), first
    replay.send_signal(signal.SIGTERM)
    _, rest = replay.communicate(timeout=120)
    assert replay.returncode == 130, first + rest
    assert "Traceback" not in rest and rest.strip().endswith("soakgate: interrupted")
    runs, errors, _ = _stored(db)
    assert runs[-1] == ("replay", "interrupted") and errors.count("cancelled") <= 1
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        stored = {r for (r,) in check.execute("SELECT request_id FROM generations")}
    seen = {t["request_id"] for t in mock.ground_truth()}
    assert seen <= stored  # every request the server read is a row (the one in flight: cancelled)


def test_sigterm_while_a_replay_hangs_stores_it_as_cancelled(
    hostile: Callable[[str], HostileProcess], tmp_path: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    db = _soak(hostile("ok").url, tmp_path)
    hung = hostile("hang")
    replay = subprocess.Popen(
        [sys.executable, "-m", "soakgate", "replay", str(db), "--collapsed", "--target",
         f"gpu0={hung.url}"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=os.environ,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not hung.seen() and time.monotonic() < deadline:  # the server has read the replay
        time.sleep(0.05)
    replay.send_signal(signal.SIGTERM)
    _, err = replay.communicate(timeout=120)
    assert replay.returncode == 130, err
    runs, errors, _ = _stored(db)
    assert runs[-1] == ("replay", "interrupted") and errors == ["cancelled"]
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        (stored,) = check.execute(
            "SELECT request_id FROM generations WHERE label='replay'"
        ).fetchone()
    assert hung.request_ids() == [stored]
