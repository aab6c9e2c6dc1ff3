"""Bad input to `soakgate run` gives one line on stderr, exit code 2 and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CASES = {
    "unreachable": ["--target", "http://127.0.0.1:9", "--requests", "3"],
    "bad_url": ["--target", "127.0.0.1:8000", "--requests", "3"],
    "bad_scheme": ["--target", "ftp://127.0.0.1:8000", "--requests", "3"],
    "bad_port": ["--target", "http://127.0.0.1:99999", "--requests", "3"],
    "zero_concurrency": ["--target", "http://127.0.0.1:9", "--concurrency", "0"],
    "negative_requests": ["--target", "http://127.0.0.1:9", "--requests", "-5"],
    "bad_duration": ["--target", "http://127.0.0.1:9", "--duration", "soon"],
    "nan_temperature": [
        "--target",
        "http://127.0.0.1:9",
        "--requests",
        "1",
        "--temperature",
        "nan",
    ],
    "unbounded": ["--target", "http://127.0.0.1:9"],
    "no_target": ["--requests", "3"],
    "missing_prompts": [
        "--target",
        "http://127.0.0.1:9",
        "--requests",
        "1",
        "--prompts",
        "/nope.jsonl",
    ],
}


def soakgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "soakgate", *args], capture_output=True, text=True, timeout=60,
        cwd=cwd,
    )  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_and_exit_2(case: str, tmp_path: Path) -> None:
    result = soakgate("run", "--db", str(tmp_path / "r.sqlite"), *CASES[case], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0], result.stderr


def test_bad_prompts_line_names_the_file_and_line(tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "ok"}\n{"prompt": 3}\n')
    args = ["--target", "http://127.0.0.1:9", "--requests", "1", "--prompts", str(prompts)]
    result = soakgate("run", "--db", str(tmp_path / "r.sqlite"), *args, cwd=tmp_path)
    assert result.returncode == 2 and "p.jsonl:2" in result.stderr


def test_help_lists_the_commands(tmp_path: Path) -> None:
    result = soakgate("--help", cwd=tmp_path)
    assert result.returncode == 0
    for command in ("run", "demo", "mock-server"):
        assert command in result.stdout
