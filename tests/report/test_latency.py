"""Latency, time to first token and time per output token per unit (issue 30 item 1): through
the real CLI against two real mock servers that delay their first token and pace every token by
known amounts, and checked against the stored rows."""

from __future__ import annotations

import base64
import csv
import io
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tests.cli.helpers import soakgate
from tests.hostile import TIMED_FIRST_S, TIMED_PACE_S, HostileProcess

from soakgate.mockserver.process import MockProcess

FAST_MS, SLOW_MS, PACE = 40, 240, 100  # first-token delays (ms); tokens per second


@pytest.fixture(scope="module")
def timed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One streamed run against two mocks side by side (fast and slow first token, same pace),
    and one run without streaming."""
    folder = tmp_path_factory.mktemp("latency")
    db = folder / "l.sqlite"
    with (
        MockProcess(["--latency-ms", str(FAST_MS), "--tokens-per-s", str(PACE)]) as fast,
        MockProcess(["--latency-ms", str(SLOW_MS), "--tokens-per-s", str(PACE)]) as slow,
    ):
        streamed = soakgate(
            "run", "--target", f"fast={fast.url}", "--target", f"slow={slow.url}",
            "--requests", "160", "--max-tokens", "8", "--concurrency", "4", "--db", str(db),
            "--quiet", "--no-watch-metrics", cwd=folder,
        )  # fmt: skip
        assert streamed.returncode == 0, streamed.stderr
        whole = soakgate(
            "run", "--target", f"fast={fast.url}", "--label", "whole", "--no-stream",
            "--requests", "60", "--max-tokens", "8", "--db", str(db), "--quiet",
            "--no-watch-metrics", cwd=folder,
        )  # fmt: skip
        assert whole.returncode == 0, whole.stderr
    return db


def _stored(db: Path, label: str, target: str) -> dict[str, np.ndarray]:
    """The measures recomputed from the stored rows, independently of the report's code."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT ended_at - started_at, ttft_s, completion_tokens FROM generations "
            "WHERE label = ? AND target = ? AND error_class IS NULL ORDER BY seq",
            (label, target),
        ).fetchall()
    seconds = np.array([r[0] for r in rows])
    ttft = np.array([r[1] for r in rows if r[1] is not None])
    tpot = np.array([(r[0] - r[1]) / (r[2] - 1) for r in rows if r[1] is not None and r[2] >= 2])
    return {"end_to_end": seconds, "ttft": ttft, "tpot": tpot}


def test_report_json_holds_each_units_quantiles_as_the_stored_rows_give_them(timed: Path) -> None:
    made = soakgate("report", str(timed), "--format", "json", cwd=timed.parent)
    assert made.returncode == 0, made.stderr
    units = {u["unit"]: u for u in json.loads(made.stdout)["latency"]}
    assert set(units) == {"default@fast", "default@slow", "whole@fast"}
    for name, unit in units.items():
        label, target = name.split("@")
        stored = _stored(timed, label, target)
        assert unit["answered"] == len(stored["end_to_end"]) > 0
        assert unit["streamed"] == len(stored["ttft"])
        for measure, values in stored.items():
            found = unit[measure]
            if not len(values):
                assert found is None, (name, measure)
                continue
            assert found["n"] == len(values)
            for q in (50, 90, 99):
                assert found[f"p{q}_s"] == pytest.approx(np.quantile(values, q / 100), rel=1e-9)
                low, high = found[f"p{q}_ci_s"]
                assert low is None or low <= found[f"p{q}_s"] * (1 + 1e-9)
                assert high is None or high >= found[f"p{q}_s"] * (1 - 1e-9)
    # What the mocks were told to do bounds what was measured from below (a loaded machine can
    # only add to it): the first token after the delay, every later token after 1/PACE s.
    assert units["default@fast"]["ttft"]["p50_s"] >= FAST_MS / 1000
    assert units["default@slow"]["ttft"]["p50_s"] >= SLOW_MS / 1000
    for name in ("default@fast", "default@slow"):
        assert units[name]["tpot"]["p50_s"] >= 0.9 / PACE
        assert units[name]["end_to_end"]["p50_s"] >= units[name]["ttft"]["p50_s"]
    assert units["whole@fast"]["ttft"] is None and units["whole@fast"]["streamed"] == 0


def test_every_format_shows_the_latency_section(timed: Path) -> None:
    table = soakgate("report", str(timed), cwd=timed.parent).stdout
    assert "latency per unit" in table and "TTFT p50 / p90 / p99" in table
    markdown = soakgate("report", str(timed), "--format", "markdown", cwd=timed.parent).stdout
    assert "**latency per unit" in markdown and "| default@slow |" in markdown
    rows = list(csv.DictReader(io.StringIO(
        soakgate("report", str(timed), "--format", "csv", cwd=timed.parent).stdout
    )))  # fmt: skip
    slow = next(r for r in rows if r["label"] == "default" and r["target"] == "slow")
    assert float(slow["ttft_p50_s"]) >= SLOW_MS / 1000
    assert float(slow["end_to_end_p99_s"]) >= float(slow["end_to_end_p50_s"])
    page = timed.parent / "report.html"
    made = soakgate("report", str(timed), "--html", str(page), cwd=timed.parent)
    assert made.returncode == 0, made.stderr
    html = page.read_text()
    assert 'id="latency"' in html and 'id="latency-table"' in html
    assert 'id="latency-plot"' in html and "data:image/svg+xml;base64," in html
    uri = html.split('id="latency-plot"')[1].split('src="data:image/svg+xml;base64,')[1]
    svg = base64.b64decode(uri.split('"')[0]).decode()
    assert "mathdefault" not in svg and "$" not in svg  # tick labels as text, not mathtext


def test_compare_tests_the_difference_in_medians_outside_the_gate(timed: Path) -> None:
    result = soakgate("compare", str(timed), "default@fast", "default@slow", cwd=timed.parent)
    assert result.returncode == 0, result.stdout + result.stderr  # latency does not gate
    lines = result.stdout.splitlines()
    (title,) = [i for i, line in enumerate(lines) if line.startswith("  latency, ")]
    measures = {line.split(":")[0].strip(): line for line in lines[title + 1 : title + 4]}
    assert set(measures) == {"end-to-end", "TTFT", "TPOT"}
    # 240 ms against 40 ms before the first token: B/A far above 1, judged to differ
    assert measures["TTFT"].endswith(": differs") and "B/A " in measures["TTFT"]
    ratio = float(measures["TTFT"].split("B/A ")[1].split(";")[0])
    assert ratio > 2


def test_a_database_of_failed_requests_has_no_latency_section(tmp_path: Path) -> None:
    with MockProcess(["--fault-rate", "http_500=1.0"]) as broken:
        run = soakgate("run", "--target", broken.url, "--requests", "20", "--db",
                       str(tmp_path / "e.sqlite"), "--quiet", "--no-watch-metrics",
                       cwd=tmp_path)  # fmt: skip
        assert run.returncode in (0, 1), run.stderr
    made = soakgate("report", str(tmp_path / "e.sqlite"), "--format", "json", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["latency"] == []
    table = soakgate("report", str(tmp_path / "e.sqlite"), cwd=tmp_path).stdout
    assert "latency per unit" not in table


def test_stored_timings_hold_against_the_servers_own_clock(
    hostile: Callable[[str], HostileProcess], tmp_path: Path
) -> None:
    """The independent measurement: a raw-socket server that sends its head and an empty event
    at once, the first token 0.2 s later and then a token every 50 ms, and logs on its own
    clock when it read each request and when it began to send the first token and the last
    bytes (the moment before each write: a client may read the bytes before a clock read after
    the write, and did once on a loaded machine).
    Per request (matched by id), causality bounds what soakgate stored on either side whatever
    the machine's load: it started before the server read the request, its first token came
    after the server sent it (so the empty event is not taken for a token), its end after the
    last byte; and the report's TTFT is at least the server's delay."""
    server = hostile("timed")
    db = tmp_path / "t.sqlite"
    done = soakgate("run", "--target", f"timed={server.url}", "--model", "hostile", "--requests",
                    "12", "--concurrency", "3", "--db", str(db), "--quiet",
                    "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = {line["rid"]: line for line in server.seen()}
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT request_id, started_at, ttft_s, ended_at, error_class "
                                  "FROM generations").fetchall()  # fmt: skip
    assert len(rows) == 12 and set(seen) == {r[0] for r in rows}
    for request_id, started, ttft, ended, error in rows:
        clock = seen[request_id]
        assert error is None and ttft is not None
        assert started <= clock["received"] + 1e-3, request_id
        assert started + ttft >= clock["first_token"] - 1e-3, (request_id, ttft)
        assert ended >= clock["last_byte"] - 1e-3, request_id
        assert ttft >= TIMED_FIRST_S and ended - started >= TIMED_FIRST_S + 4 * TIMED_PACE_S
    made = soakgate("report", str(db), "--format", "json", cwd=tmp_path)
    (unit,) = json.loads(made.stdout)["latency"]
    assert unit["ttft"]["p50_s"] >= TIMED_FIRST_S and unit["answered"] == 12
