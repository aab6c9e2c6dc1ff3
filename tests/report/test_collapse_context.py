"""`soakgate report DB --collapse ID`: what surrounded a collapse, from a real soak of the mock:
the requests in flight on its target at its start and end (as the database says), the server
incarnation and uptime and the load the server's own /metrics reported, and nearby guard events;
the HTML report links each exemplar to the same context."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.cli.helpers import one_error_line, soakgate

from soakgate.mockserver.process import MockProcess


@pytest.fixture
def soaked(start_mock: Callable[..., MockProcess], tmp_path: Path) -> tuple[Path, str]:
    mock = start_mock("--collapse-rate", "0.25", "--tokens-per-s", "300", "--seed", "4")
    db = tmp_path / "runs.sqlite"
    done = soakgate(
        "run", "--target", f"gpu0={mock.url}", "--label", "compiled", "--requests", "48",
        "--concurrency", "4", "--max-tokens", "64", "--db", str(db), "--quiet",
        "--metrics-interval", "0.2", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        (request_id,) = check.execute(
            "SELECT request_id FROM generations WHERE collapsed=1 AND seq > 8 ORDER BY seq"
        ).fetchone()
    return db, request_id


def _in_flight(db: Path, request_id: str, at: str) -> set[str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        (moment,) = check.execute(
            f"SELECT {at} FROM generations WHERE request_id=?", (request_id,)
        ).fetchone()
        rows = check.execute(
            "SELECT request_id FROM generations WHERE target='gpu0' AND request_id<>? "
            "AND started_at<=? AND ended_at>?", (request_id, moment, moment),
        ).fetchall()  # fmt: skip
    return {r for (r,) in rows}


def test_the_context_names_the_requests_in_flight_the_server_load_and_its_uptime(
    soaked: tuple[Path, str], tmp_path: Path
) -> None:
    db, request_id = soaked
    with sqlite3.connect(db) as add:  # a guard event 2 s after the request, as a campaign stores it
        (started,) = add.execute(
            "SELECT started_at FROM generations WHERE request_id=?", (request_id,)
        ).fetchone()
        add.execute(
            "INSERT INTO events (run_id, at, kind, target, data) SELECT run_id, ?, "
            "'engine_fault', 'gpu0', ? FROM runs", (started + 2, json.dumps({"pattern": "device lost"})),
        )  # fmt: skip
    add.close()
    done = soakgate("report", str(db), "--collapse", request_id, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert f"request {request_id} (compiled@gpu0" in text and "collapsed, flagged by" in text
    for moment, line in (("started_at", "at its start"), ("ended_at", "at its end")):
        shown = re.search(rf"in flight on gpu0 {line}: (\d+): (.*)", text)
        assert shown, text
        expected = _in_flight(db, request_id, moment)
        assert int(shown.group(1)) == len(expected) > 0
        assert set(re.findall(r"(\w+-\d+) \(\d+ prompt tokens", shown.group(2))) == expected
    load = re.search(
        r"server load at its start: (\d+) running, 0 waiting, KV cache (\d+)% used", text
    )
    assert load and 1 <= int(load.group(1)) <= 4, text  # the mock's own gauge, 4 at most
    uptime = re.search(r"incarnation 0, up ([\d.]+) s at the request's start \(its /metrics", text)
    assert uptime and 0 < float(uptime.group(1)) < 120, text
    assert re.search(r"2\.0 s after engine_fault pattern=device lost", text), text
    assert f"soakgate replay {db} --collapsed --run" in text


def test_the_html_exemplars_link_to_their_context(soaked: tuple[Path, str], tmp_path: Path) -> None:
    db, _ = soaked
    html = tmp_path / "r.html"
    done = soakgate("report", str(db), "--html", str(html), "--no-clustering", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = html.read_text()
    ids = re.findall(r'<details class="context" id="context-([^"]+)">', page)
    assert len(ids) == 3  # the first three collapses of the unit
    for request_id in ids:
        assert f'href="#context-{request_id}"' in page
    block = page.split(f'id="context-{ids[0]}"')[1].split("</details>")[0]
    assert f"request {ids[0]}" in block and "in flight on gpu0 at its start" in block
    assert "server load at its start:" in block and "running" in block


def test_an_unknown_request_id_is_one_line_and_exit_2(
    soaked: tuple[Path, str], tmp_path: Path
) -> None:
    db, _ = soaked
    done = soakgate("report", str(db), "--collapse", "nope-1", cwd=tmp_path)
    assert done.returncode == 2
    assert "no generation with request id 'nope-1'" in one_error_line(done)


def test_the_context_derives_the_targets_state_before_a_collapse(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    """A server whose requests 6 of every 18 collapse, soaked one request at a time (so the send
    order is the server's): request 21 is the 3rd of 6 collapses in a row, sent with the target
    idle just before it; at concurrency 4 the target's last idle moment is where the stored rows
    put it (the latest start, in send order, that no earlier request was still running at)."""
    mock = start_mock("--state-collapse", "6:18", "--seed", "5")
    db = tmp_path / "runs.sqlite"
    for concurrency, label in (("1", "serial"), ("4", "busy")):
        done = soakgate(
            "run", "--target", f"gpu0={mock.url}", "--label", label, "--requests", "40",
            "--concurrency", concurrency, "--max-tokens", "32", "--db", str(db), "--quiet",
            "--no-watch-metrics", cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        serial = {seq: (rid, c) for seq, rid, c in check.execute(
            "SELECT seq, request_id, collapsed FROM generations WHERE label='serial'")}  # fmt: skip
        rows = check.execute(
            "SELECT request_id, seq, started_at, ended_at FROM generations WHERE label='busy' "
            "ORDER BY seq"
        ).fetchall()
    running_until, idle_at = 0.0, 0.0
    for _, _seq, started, ended in rows[:31]:
        if started > running_until:
            idle_at = started
        running_until = max(running_until, ended)
    busy = (rows[30][0], rows[30][1], rows[30][2] - idle_at)
    assert [serial[s][1] for s in range(40)] == [int(s % 18 < 6) for s in range(40)]
    line = _state_line(db, serial[20][0], tmp_path)
    assert "request 21 this run sent to gpu0 since incarnation 0 began" in line
    assert "gpu0 idle just before it" in line and "collapse 3 of 6 in a row" in line
    assert "a lone collapse" not in _state_line(db, serial[0][0], tmp_path)
    assert "not a collapse (6 collapsed just before it)" in _state_line(db, serial[6][0], tmp_path)
    line = _state_line(db, busy[0], tmp_path)
    assert f"request {busy[1] + 1} this run sent" in line
    idle = "idle just before it" if busy[2] <= 0 else f"busy without a break for {busy[2]:.1f} s"
    assert f"gpu0 {idle};" in line


def _state_line(db: Path, request_id: str, tmp_path: Path) -> str:
    done = soakgate("report", str(db), "--collapse", request_id, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("  state: ")]
    return line


def test_the_context_as_json_and_what_collapse_refuses(
    soaked: tuple[Path, str], tmp_path: Path
) -> None:
    db, request_id = soaked
    done = soakgate("report", str(db), "--collapse", request_id, "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    context = json.loads(done.stdout)
    assert context["request_id"] == request_id and context["collapsed"] is True
    assert {n["request_id"] for n in context["in_flight_at_start"]} == _in_flight(
        db, request_id, "started_at"
    )
    assert context["state"]["requests_before"] >= 8
    for flags in (("--html", "page.html"), ("--format", "markdown"), ("--format", "csv")):
        done = soakgate("report", str(db), "--collapse", request_id, *flags, cwd=tmp_path)
        assert done.returncode == 2 and "--collapse prints one generation" in one_error_line(done)
    assert not (tmp_path / "page.html").exists()
