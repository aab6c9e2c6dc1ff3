"""Progress without a terminal (issue 30 item 7): a `run` or `campaign` whose stderr is a log
prints a progress line every --progress-every of soaking, none with 0 or --quiet. Through the
real CLI (stderr captured: not a terminal) against real mock servers; only a floor on the
number of lines is asserted (a loaded machine makes the soak longer, never shorter)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.campaign.helpers import write_campaign
from tests.cli.helpers import soakgate

from soakgate.mockserver.process import MockProcess

LINE = re.compile(r"^soakgate: ([\d,]+) s elapsed: (\S+)@(\S+) ([\d,]+) requests, ", re.M)


def _soak(tmp_path: Path, *flags: str) -> str:
    with MockProcess(["--latency-ms", "200"]) as slow:
        done = soakgate("run", "--target", f"gpu0={slow.url}", "--label", "b", "--requests",
                        "30", "--concurrency", "2", "--max-tokens", "16", "--db", "p.sqlite",
                        "--no-watch-metrics", *flags, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_a_run_in_a_log_prints_a_progress_line_every_interval(tmp_path: Path) -> None:
    lines = LINE.findall(_soak(tmp_path, "--progress-every", "1s"))
    assert len(lines) >= 2, lines  # 30 requests of >= 200 ms, 2 at a time: >= 3 s of soaking
    assert {(label, target) for _, label, target, _ in lines} == {("b", "gpu0")}
    counts = [int(n.replace(",", "")) for *_, n in lines]
    assert counts == sorted(counts) and counts[-1] <= 30


@pytest.mark.parametrize("flags", [["--progress-every", "0"], ["--quiet"]])
def test_no_progress_lines_with_0_or_quiet(tmp_path: Path, flags: list[str]) -> None:
    assert not LINE.findall(_soak(tmp_path, *flags))


def test_a_bad_interval_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = soakgate("run", "--target", "http://127.0.0.1:9", "--requests", "3",
                    "--progress-every", "soon", "--db", "x.sqlite", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and "--progress-every" in done.stderr
    assert not (tmp_path / "x.sqlite").exists()


def test_a_campaign_in_a_log_prints_progress_inside_its_blocks(tmp_path: Path) -> None:
    path = write_campaign(tmp_path, {"eager": "--latency-ms 200"}, requests=20)
    done = soakgate("campaign", str(path), "--db", "c.sqlite", "--progress-every", "1s",
                    cwd=tmp_path, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = LINE.findall(done.stderr)
    assert lines, done.stderr
    assert {label for _, label, _, _ in lines} == {"eager"}
