"""Open-loop arrivals (`run --rate R`, issue 30 item 3): requests arrive on a schedule of their
own, capped by --concurrency in flight, every arrival over the cap counted and stored (never
silently dropped), the schedule stored with the run and kept by --resume. Through the real CLI
against the real mock; no assertion on a measured rate (a loaded machine only makes sends later,
so the schedule's span is asserted as a floor)."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.cli.helpers import one_error_line, soakgate

from soakgate.load.arrivals import Arrivals
from soakgate.mockserver.process import MockProcess


def _arrivals(db: Path) -> list[tuple[str, dict[str, object]]]:
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT target, data FROM events WHERE kind = 'arrivals' ORDER BY id"
        ).fetchall()
    return [(target, json.loads(data)) for target, data in rows]


def test_arrivals_over_the_cap_are_counted_and_stored_never_dropped(tmp_path: Path) -> None:
    """20 arrivals a second at a server that takes at least 300 ms, 2 in flight at most: most
    arrivals find both busy. Every one is accounted for: sent (a row) or overflowed (counted)."""
    with MockProcess(["--latency-ms", "300"]) as slow:
        done = soakgate("run", "--target", f"gpu0={slow.url}", "--rate", "20", "--concurrency",
                        "2", "--requests", "12", "--max-tokens", "4", "--db", "o.sqlite",
                        "--quiet", "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(tmp_path / "o.sqlite") as connection:
        (rows,) = connection.execute("SELECT COUNT(*) FROM generations").fetchone()
        (load,) = connection.execute("SELECT load FROM runs").fetchone()
    assert rows == 12
    assert json.loads(load)["rate"] == 20.0 and json.loads(load)["arrivals"] == "poisson"
    ((target, counts),) = _arrivals(tmp_path / "o.sqlite")
    assert target == "gpu0" and counts["cap"] == 2 and counts["process"] == "poisson"
    assert counts["arrived"] == rows + counts["overflowed"]  # type: ignore[operator]
    assert counts["overflowed"] > 0  # type: ignore[operator]
    assert f"{counts['overflowed']} of {counts['arrived']} arrivals" in done.stderr


def test_a_constant_schedule_sends_on_its_own_clock(tmp_path: Path) -> None:
    """Closed loop, a fast mock answers 8 requests at concurrency 4 in a blink; at a constant 5
    a second they are sent 0.2 s apart, never earlier (the schedule is absolute)."""
    with MockProcess(["--tokens-per-s", "0"]) as fast:
        done = soakgate("run", "--target", f"gpu0={fast.url}", "--rate", "5", "--arrivals",
                        "constant", "--concurrency", "4", "--requests", "8", "--max-tokens", "4",
                        "--db", "c.sqlite", "--quiet", "--no-watch-metrics",
                        cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(tmp_path / "c.sqlite") as connection:
        starts = [row[0] for row in connection.execute(
            "SELECT started_at FROM generations ORDER BY started_at")]  # fmt: skip
    assert len(starts) == 8
    assert starts[-1] - starts[0] >= 7 * 0.2 * 0.95  # a floor: load only makes sends later
    ((_, counts),) = _arrivals(tmp_path / "c.sqlite")
    assert counts == {"rate": 5.0, "process": "constant", "arrived": 8, "overflowed": 0, "cap": 4}


def test_a_poisson_schedule_is_seeded_and_has_the_rate() -> None:
    async def gaps(seed: str) -> list[float]:
        schedule = Arrivals(50.0, "poisson", seed)
        return [schedule._gap() for _ in range(4000)]

    first, again, other = (asyncio.run(gaps(s)) for s in ("run:gpu0:0", "run:gpu0:0", "x"))
    assert first == again and first != other
    mean = sum(first) / len(first)
    assert abs(mean - 1 / 50) < 4 * (1 / 50) / len(first) ** 0.5  # exponential: sd = mean


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--arrivals", "constant"], "--arrivals needs --rate"),
     (["--rate", "0"], "--rate"), (["--rate", "-3"], "--rate"),
     (["--rate", "5", "--arrivals", "bursty"], "--arrivals")],
)  # fmt: skip
def test_bad_rate_flags_are_one_line_and_exit_2(
    flags: list[str], message: str, tmp_path: Path
) -> None:
    done = soakgate("run", "--target", "http://127.0.0.1:9", "--requests", "3", *flags,
                    "--db", "x.sqlite", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2
    assert message in one_error_line(done)
    assert not (tmp_path / "x.sqlite").exists()


def test_resume_keeps_the_stored_schedule_and_ramp(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    with MockProcess(["--latency-ms", "50"]) as mock:
        soaker = subprocess.Popen(
            [sys.executable, "-m", "soakgate", "run", "--target", f"gpu0={mock.url}", "--rate",
             "10", "--arrivals", "constant", "--ramp", "1s", "--concurrency", "2", "--requests", "60",
             "--max-tokens", "4", "--db", str(db), "--quiet", "--no-watch-metrics"],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _count(db) < 10:
            time.sleep(0.2)
        soaker.send_signal(signal.SIGINT)
        assert soaker.wait(timeout=60) == 130
        with sqlite3.connect(db) as connection:
            (run_id,) = connection.execute("SELECT run_id FROM runs").fetchone()
        differing = soakgate("run", "--resume", run_id, "--target", f"gpu0={mock.url}",
                             "--rate", "3", "--db", str(db), "--quiet", cwd=tmp_path)  # fmt: skip
        ramped = soakgate("run", "--resume", run_id, "--target", f"gpu0={mock.url}",
                          "--ramp", "5s", "--db", str(db), "--quiet", cwd=tmp_path)  # fmt: skip
        resumed = soakgate("run", "--resume", run_id, "--target", f"gpu0={mock.url}", "--db",
                           str(db), "--quiet", "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
    assert _count(db) == 60
    schedules = [counts for _, counts in _arrivals(db)]
    assert len(schedules) == 2  # the interrupted soak's and the resumed one's
    assert all(s["rate"] == 10.0 and s["process"] == "constant" for s in schedules)
    assert all(s["ramp_s"] == 1.0 for s in schedules)  # the resumed soak ramped again
    assert ramped.returncode == 2 and "--ramp 5.0 (stored: 1.0)" in ramped.stderr
    assert differing.returncode == 2 and "--rate 3.0 (stored: 10.0)" in differing.stderr


def _count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db) as connection:
            return int(connection.execute("SELECT COUNT(*) FROM generations").fetchone()[0])
    except sqlite3.OperationalError:  # its schema is not committed yet
        return 0


def test_a_ramp_raises_the_arrival_rate_linearly(tmp_path: Path) -> None:
    """--ramp 10s at a constant 50/s: arrival k is due when the integrated rate reaches k,
    sqrt(2 * 10 * k / 50) s after the start (0.63 s, 0.89 s, ... 2 s for the tenth), not every
    20 ms. Floors again: the run's record is written before the schedule starts."""
    with MockProcess(["--tokens-per-s", "0"]) as fast:
        done = soakgate("run", "--target", f"gpu0={fast.url}", "--rate", "50", "--arrivals",
                        "constant", "--ramp", "10s", "--concurrency", "4", "--requests", "10",
                        "--max-tokens", "4", "--db", "ramp.sqlite", "--quiet",
                        "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(tmp_path / "ramp.sqlite") as connection:
        (started, load) = connection.execute("SELECT started_at, load FROM runs").fetchone()
        starts = [row[0] for row in connection.execute(
            "SELECT started_at FROM generations ORDER BY started_at")]  # fmt: skip
    assert json.loads(load)["ramp_s"] == 10.0 and len(starts) == 10
    for k, start in enumerate(starts, start=1):
        assert start - started >= (2 * 10 * k / 50) ** 0.5 - 0.01, (k, start - started)
    ((_, counts),) = _arrivals(tmp_path / "ramp.sqlite")
    assert counts["ramp_s"] == 10.0 and counts["arrived"] == 10


def test_a_ramped_poisson_schedule_has_the_ramped_intensity() -> None:
    """Time rescaling, checked by simulation: over a ramp of T at rate R the count of arrivals
    in [0, T] is Poisson with mean R*T/2 and in [T, 2T] with mean R*T."""

    async def counts(seed: int) -> tuple[int, int]:
        schedule = Arrivals(40.0, "poisson", f"s{seed}", ramp_s=2.0)
        g, times = 0.0, []
        while (t := schedule.offset(g := g + schedule._gap())) < 4.0:
            times.append(t)
        return sum(t < 2.0 for t in times), sum(t >= 2.0 for t in times)

    draws = [asyncio.run(counts(seed)) for seed in range(1000)]
    for index, mean in ((0, 40.0), (1, 80.0)):
        observed = sum(d[index] for d in draws) / len(draws)
        assert abs(observed - mean) < 4 * (mean / len(draws)) ** 0.5, (index, observed)
    schedule = Arrivals(1.0, "constant", "x", ramp_s=10.0)
    assert [schedule.offset(g) for g in (0.0, 1.25, 5.0, 6.0)] == [0.0, 5.0, 10.0, 11.0]


def test_a_closed_loop_ramp_starts_the_workers_one_after_another(tmp_path: Path) -> None:
    """--concurrency 3 --ramp 1h: the second worker would start after 20 minutes, so the six
    requests go one at a time (no two overlap), and the soak ends when they are done instead of
    waiting for the ramp. Without the ramp, three go at once."""
    overlaps = {}
    with MockProcess(["--latency-ms", "400"]) as slow:
        for name, extra in (("ramp", ["--ramp", "1h"]), ("flat", [])):
            done = soakgate("run", "--target", f"gpu0={slow.url}", "--concurrency", "3",
                            "--requests", "6", "--max-tokens", "4", "--db", f"{name}.sqlite",
                            "--quiet", "--no-watch-metrics", *extra, cwd=tmp_path)  # fmt: skip
            assert done.returncode == 0, done.stderr
            with sqlite3.connect(tmp_path / f"{name}.sqlite") as connection:
                spans = connection.execute(
                    "SELECT started_at, ended_at FROM generations").fetchall()  # fmt: skip
            assert len(spans) == 6
            overlaps[name] = max(sum(s <= t < e for s, e in spans) for t, _ in spans)
    assert overlaps["ramp"] == 1 and overlaps["flat"] >= 2, overlaps
