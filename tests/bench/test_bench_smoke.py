"""Each bench script runs at a tiny size, exits 0 and prints its figures' labels (no rot)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_bench(script: str, *args: str, timeout_s: float = 120) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=BENCH.parent,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_bench_detectors_prints_rates_and_the_char_run_verdict() -> None:
    out = run_bench("bench_detectors.py", "--size-mb", "0.01", "--min-seconds", "0.005")
    for label in ("realistic prose", "one char '!' x size", "MB/s per core", "char_run slowest"):
        assert label in out
    assert "us CPU per generation" in out


def test_bench_store_prints_write_rates_and_a_kill_window() -> None:
    out = run_bench("bench_store.py", "--generations", "300", "--kills", "1", "--concurrency", "8")
    assert "generations/s" in out and "bytes/generation" in out
    assert "loss window over 1 kills: max" in out


def test_bench_longrun_prints_rss_checkpoints_and_db_bytes() -> None:
    out = run_bench("bench_longrun.py", "--generations", "200", "--concurrency", "8")
    assert "RSS at        200 generations" in out
    assert "bytes per generation" in out


@pytest.mark.slow
def test_bench_client_prints_cpu_per_request_for_soakgate_and_the_bare_loop() -> None:
    out = run_bench(
        "bench_client.py",
        "--seconds",
        "1",
        "--warmup",
        "0.2",
        "--clients",
        "soakgate,aiohttp",
        "--modes",
        "nostream",
        "--concurrency",
        "8",
    )
    assert "CPU-ms/req" in out and "in-flight" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("soakgate", "aiohttp"))]
    assert [row[0] for row in rows] == ["soakgate", "aiohttp"]
    assert all(float(row[1]) > 0 for row in rows)


def test_bench_ab_prints_cpu_per_request_for_each_tree() -> None:
    out = run_bench(
        "bench_ab.py", "--tree", "a=.", "--tree", "b=.", "--rounds", "1", "--requests", "150",
        "--concurrency", "4",
    )  # fmt: skip
    rows = [line.split() for line in out.splitlines() if line.startswith(("a ", "b "))]
    assert [row[0] for row in rows] == ["a", "b"]
    assert all(float(row[1]) > 0 for row in rows)


def test_bench_ab_refuses_a_tree_that_is_not_a_checkout(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_ab.py"), "--tree", f"x={tmp_path}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "NAME=PATH of a soakgate checkout" in done.stderr


def test_bench_own_cost_prints_cpu_per_request() -> None:
    out = run_bench("bench_own_cost.py", "--requests", "300")
    assert "CPU per request over 300 requests" in out


def test_bench_audit_prints_the_scan_time_and_finds_every_op() -> None:
    out = run_bench("bench_audit.py", "--files", "50", "--repeat", "1")
    assert "ops: 12 (expected 12)" in out and "audit time (s): min" in out
    macros = run_bench("bench_audit.py", "--files", "50", "--repeat", "1", "--macros")
    assert "ops: 12 (expected 12)" in macros


def test_bench_audit_accuracy_without_its_corpus_says_so(tmp_path: Path) -> None:
    (tmp_path / "somelib" / "truth").mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_audit_accuracy.py"), "--corpus", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    output = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 2 and len(output) == 1 and "somelib" in output[0], output


def test_bench_calibration_prints_false_alarms_power_and_the_block_oracle() -> None:
    out = run_bench("bench_calibration.py", "--quick", "--processes", "reset-2000", "--jobs", "1")
    for label in (
        "one run per arm, 13,000 requests per arm",
        "one run per arm, 40,000 requests per arm",
        "8 replicate blocks per arm of 5,000 requests",
        "oracle z",
        "run --plan --until-verdict",
        "indeterminate",
    ):
        assert label in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("reset-2000")]
    assert len(rows) >= 4 and all("±" in row for row in rows[1:])


def test_bench_report_prints_every_command_the_html_size_and_the_floor() -> None:
    out = run_bench("bench_report.py", "--sizes", "1000", timeout_s=240)
    for label in ("report ", "report --html", "compare ", "export parquet", "HTML size"):
        assert label in out, out
    assert "x the floor" in out or "sqlite3 command line not found" in out
    assert "load average" in out


def test_bench_reference_prints_the_scoring_cost_and_the_reference_load() -> None:
    out = run_bench("bench_reference.py", "--requests", "60", "--rounds", "1", "--concurrency",
                    "4", timeout_s=300)  # fmt: skip
    assert "client CPU of scoring:" in out and "µs per generation" in out
    assert "tokens sent per scored generation" in out and "60 rows scored" in out
