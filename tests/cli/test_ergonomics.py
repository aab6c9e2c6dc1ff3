"""What users expect of a command line: every default in --help, one meaning per word, values
checked against their meaning, a report that fits the terminal, quiet on a closed pipe."""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from tests.cli.helpers import one_error_line, soakgate

from soakgate.cli.main import build_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _option_blocks(help_text: str) -> dict[str, str]:
    """Option string -> its whole help block, whitespace collapsed."""
    blocks: dict[str, list[str]] = {}
    keys: list[str] = []
    for line in help_text.splitlines():
        if line.startswith("  -"):
            invocation = re.split(r"\s{2,}", line.strip())[0]
            keys = re.findall(r"(?<![\w\[])--?[A-Za-z][\w-]*", invocation)
            for key in keys:
                blocks[key] = [line]
        elif keys and line.startswith("      "):
            for key in keys:
                blocks[key].append(line)
        else:
            keys = []
    return {key: " ".join(" ".join(lines).split()) for key, lines in blocks.items()}


@pytest.mark.parametrize("command", sorted(_commands()))
def test_help_documents_every_option_and_shows_every_default(command: str, tmp_path: Path) -> None:
    result = soakgate(command, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    blocks = _option_blocks(result.stdout)
    for action in _commands()[command]._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        assert action.help, f"{command} {action.option_strings or action.dest} has no help"
        if not action.option_strings or action.nargs == 0:
            continue
        block = blocks[action.option_strings[0]]
        if action.default not in (None, [], False):
            assert f"(default: {action.default})" in block, (command, block)


def test_sweep_has_no_requests_or_duration_it_would_ignore(tmp_path: Path) -> None:
    help_text = soakgate("sweep", "--help", cwd=tmp_path).stdout
    assert "--requests-per-level" in help_text
    assert not re.search(r"--requests\b(?!-)", help_text) and "--duration" not in help_text
    for flag, value in (("--requests", "5"), ("--duration", "10s")):
        result = soakgate("sweep", "--target", "http://127.0.0.1:9", "--requests-per-level", "50",
                          flag, value, cwd=tmp_path)  # fmt: skip
        assert result.returncode == 2 and f"unrecognized arguments: {flag}" in result.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--top-p", "5"], "(0, 1]"),
        (["--top-p", "0"], "greater than 0"),
        (["--timeout", "0"], "greater than 0"),
        (["--concurrency", "1000000", "--requests", "10"], "more than the 10 requests"),
        (["--concurrency", "1000000", "--duration", "5s"], "open connections"),
    ],
)
def test_values_are_checked_against_their_meaning(
    args: list[str], words: str, tmp_path: Path
) -> None:
    result = soakgate("run", "--target", "http://127.0.0.1:9", "--db", str(tmp_path / "r.sqlite"),
                      *args, timeout=30, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2
    assert words in one_error_line(result)
    assert not (tmp_path / "r.sqlite").exists()  # refused before anything was opened


def test_a_sweep_level_above_its_request_count_is_refused(tmp_path: Path) -> None:
    result = soakgate("sweep", "--target", "http://127.0.0.1:9", "--concurrency", "8,64",
                      "--requests-per-level", "20", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2 and "--concurrency 64" in one_error_line(result)


def test_plan_says_when_a_sample_size_is_out_of_reach(tmp_path: Path) -> None:
    absurd = soakgate("plan", "--baseline-rate", "1e-9", "--ratio", "1.0001", cwd=tmp_path)
    assert absurd.returncode == 0
    # no design within the search's 1e9 requests per arm reaches the power: said, not printed
    # as a sample size that only a z formula would give
    assert "note: 1e+09 generations per arm still falls short of the power" in absurd.stdout
    assert "out of reach: 12 days per arm" in absurd.stdout
    ordinary = soakgate("plan", "--baseline-rate", "0.002", "--ratio", "1.5", cwd=tmp_path)
    assert ordinary.returncode == 0 and "note:" not in ordinary.stdout


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_report_fits_the_terminal_and_machines_keep_their_formats(
    finished_db: Path, tmp_path: Path
) -> None:
    narrow = soakgate("report", str(finished_db), "--no-clustering", env={"COLUMNS": "100"},
                      cwd=tmp_path)  # fmt: skip
    assert narrow.returncode == 0, narrow.stderr
    assert _widest(narrow.stdout) <= 100
    assert "rate [95% CI]" in narrow.stdout and "(≤ 2.466% one-sided)" in narrow.stdout
    assert "(clean tok/s, duration s, tok/s and errors by class: --format json or csv" in " ".join(
        narrow.stdout.split()
    )
    wide = soakgate("report", str(finished_db), "--no-clustering", env={"COLUMNS": "220"},
                    cwd=tmp_path)  # fmt: skip
    header = next(line for line in wide.stdout.splitlines() if "rate [95% CI]" in line)
    assert "clean tok/s" in header and _widest(wide.stdout) <= 220  # the verdict is above it
    csv_out = soakgate("report", str(finished_db), "--format", "csv", "--no-clustering",
                       env={"COLUMNS": "40"}, cwd=tmp_path)  # fmt: skip
    assert csv_out.stdout.splitlines()[0].startswith("label,target,aggregate,requests,n,")
    assert len(csv_out.stdout.splitlines()) == 3  # a header, eager@gpu0, graph@gpu0


def test_report_in_a_real_100_column_terminal(finished_db: Path, tmp_path: Path) -> None:
    """No $COLUMNS: the width comes from the terminal itself (a pseudo-terminal here)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 100, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    process = subprocess.Popen(
        [sys.executable, "-m", "soakgate", "report", str(finished_db), "--no-clustering"],
        stdout=follower, stderr=follower, cwd=tmp_path, env=env,
    )  # fmt: skip
    os.close(follower)
    output = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process is done
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert process.wait(30) == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output.decode("utf-8", "replace"))
    assert "rate [95% CI]" in text
    assert _widest(text.replace("\r", "")) <= 100


def test_export_into_a_closed_pipe_ends_quietly(finished_db: Path, tmp_path: Path) -> None:
    shell = shutil.which("bash")
    assert shell is not None
    python = sys.executable
    script = (
        f"set -o pipefail; {python} -m soakgate export {finished_db} --format jsonl "
        "2>err.txt | head -n 1 > first.txt"
    )
    done = subprocess.run([shell, "-c", script], cwd=tmp_path, timeout=120)
    assert done.returncode == 0
    assert (tmp_path / "first.txt").read_text().startswith('{"run_id"')
    assert (tmp_path / "err.txt").read_text() == ""


def test_a_negative_duration_is_named_not_expected_one_argument(tmp_path: Path) -> None:
    done = soakgate("run", "--target", "http://127.0.0.1:9", "--requests", "1",
                    "--metrics-port", "0", "--metrics-linger", "-5s", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2
    line = one_error_line(done)
    assert "--metrics-linger: '-5s' is not a duration" in line and "must be positive" in line
    assert "expected one argument" not in line
