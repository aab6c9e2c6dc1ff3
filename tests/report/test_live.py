"""Live status for long soaks: `report` on a database a soak is writing, and `run --report-every
--html` refreshing a report while the soak runs (an observer, in a child process)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.cli.helpers import one_error_line, soakgate

from soakgate.mockserver.process import MockProcess

FAST = ("--tokens-per-s", "0", "--collapse-rate", "0.02")


def _run(db: Path, url: str, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "soakgate", "run", "--target", f"gpu0={url}", "--label",
            "live", "--concurrency", "8", "--max-tokens", "16", "--db", str(db), "--quiet",
            "--no-watch-metrics", *extra]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _units(db: Path, cwd: Path) -> dict[str, dict[str, object]]:
    done = soakgate("report", str(db), "--format", "json", "--no-clustering", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return {f"{u['label']}@{u['target']}": u for u in json.loads(done.stdout)["units"]}


def test_run_refreshes_the_html_report_while_it_soaks_and_at_the_end(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock(*FAST)
    db, page = tmp_path / "live.sqlite", tmp_path / "live.html"
    # 30 s: the first refresh (a child `soakgate report`, seconds to start on a loaded machine)
    # lands well within the soak; an interrupted soak gets no final refresh, so it must end
    soak = _run(db, mock.url, "--duration", "30s", "--report-every", "1s", "--html", str(page))
    seen_during = None
    while soak.poll() is None:
        if seen_during is None and page.exists():
            seen_during = page.read_text()
        time.sleep(0.2)
    _, err = soak.communicate(timeout=900)
    assert soak.returncode == 0, err
    assert seen_during is not None, "no report was written while the soak ran"
    assert "soakgate report: live.sqlite" in seen_during and 'id="verdict"' in seen_during
    assert "refreshed" in err and str(page) in err
    final = page.read_text()
    unit = _units(db, tmp_path)["live@gpu0"]
    assert f'<td class="num">{unit["n"]:,}</td>' in final  # the final refresh has every row
    assert sorted(p.name for p in tmp_path.iterdir() if "live.html" in p.name) == ["live.html"]


def test_report_every_needs_an_html_file(tmp_path: Path) -> None:
    done = soakgate("run", "--target", "http://127.0.0.1:9", "--requests", "1",
                    "--report-every", "10m", "--db", str(tmp_path / "x.sqlite"), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2
    assert "--report-every needs --html FILE" in one_error_line(done)
    assert not (tmp_path / "x.sqlite").exists()


@pytest.mark.slow
def test_report_reads_a_large_database_a_soak_is_writing(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    from bench.reportdb import build_database

    db = tmp_path / "big.sqlite"
    build_database(db, 200_000)  # four units, as a days-long soak would have left
    mock = start_mock(*FAST)
    soak = _run(db, mock.url, "--duration", "10m")
    counts: list[int] = []
    deadline = time.monotonic() + 600  # reads of 200,000 rows take seconds each, more loaded
    try:  # read until two reads saw the live run's rows, then end the soak
        while (
            soak.poll() is None
            and time.monotonic() < deadline
            and (len(counts) < 2 or counts[-1] == 0)
        ):
            units = _units(db, tmp_path)  # while rows are being written
            for name, unit in units.items():
                errors = sum(unit["errors_by_class"].values())  # type: ignore[union-attr]
                assert unit["requests"] == unit["n"] + errors == unit["n"] + unit["errors"], name
            assert units["eager@gpu0"]["requests"] == 50_000  # the finished data, whole
            counts.append(units.get("live@gpu0", {"requests": 0})["requests"])
    finally:
        soak.send_signal(signal.SIGINT)
        _, err = soak.communicate(timeout=300)
    assert soak.returncode == 130, err  # stopped by the test; the writer was never blocked
    assert len(counts) >= 2 and counts == sorted(counts) and counts[-1] > 0
    final = _units(db, tmp_path)["live@gpu0"]["requests"]
    assert final >= counts[-1]
