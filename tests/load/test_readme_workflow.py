"""README's pre-registered workflow, command for command, against two mock servers."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from soakgate.store import open_store


@pytest.fixture
def two_mock_servers() -> Iterator[tuple[str, str]]:
    """`soakgate mock-server --port 0` twice (eager: 0.2% collapses; compiled: 5%)."""
    procs = []
    urls = []
    try:
        for seed, rate in (("1", "0.002"), ("2", "0.05")):
            proc = subprocess.Popen(
                [sys.executable, "-m", "soakgate", "mock-server", "--port", "0", "--seed", seed,
                 "--collapse-rate", rate, "--tokens-per-s", "0", "--output-tokens", "8"],
                stdout=subprocess.PIPE, start_new_session=True,
            )  # fmt: skip
            procs.append(proc)
            assert proc.stdout is not None
            urls.append(proc.stdout.readline().decode().rsplit(" ", 1)[1].strip())
        yield urls[0], urls[1]
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()


def soakgate(cwd: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "soakgate", *argv], cwd=cwd, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


@pytest.mark.slow
def test_plan_run_until_verdict_compare_as_the_readme_shows(
    two_mock_servers: tuple[str, str], tmp_path: Path
) -> None:
    eager, compiled = two_mock_servers
    planned = soakgate(
        tmp_path, "plan", "--baseline-rate", "0.002", "--ratio", "1.5", "--sequential",
        "--looks", "5", "--arms", "eager", "compiled", "--hypothesis",
        "compiled collapses more", "--write", "plan.toml",
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    ran = soakgate(
        tmp_path, "run", "--plan", "plan.toml", "--until-verdict", "--arm", f"eager={eager}",
        "--arm", f"compiled={compiled}", "--db", "runs.sqlite",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "stopped by the plan's verdict at look" in ran.stdout
    assert ": DIFFER (batch_means:" in ran.stdout
    compared = soakgate(
        tmp_path, "compare", "runs.sqlite", "eager", "compiled", "--plan", "plan.toml"
    )
    assert compared.returncode == 0, compared.stderr
    # compare --plan replays the looks over the stored rows: the look that stopped the soak,
    # at the same n, with the same verdict, whatever rows arrived after it
    stopped = re.search(r"look \d+ of 5 at n=[\d,]+ per arm", ran.stdout)
    assert stopped is not None, ran.stdout
    assert f"plan verdict: DIFFER by batch_means: {stopped[0]}" in compared.stdout, compared.stdout
    assert "plan deviations: none" in compared.stdout, compared.stdout
    store = open_store(tmp_path / "runs.sqlite")
    (entry,) = store.ledger()
    looks = [e.data for e in store.events() if e.kind == "look"]
    first = min(g.started_at for g in store.generations())
    targets = {g.label: g.target for g in store.generations()}
    store.close()
    assert entry.at < first and looks[-1]["verdict"] == "differ" and len(looks) < 5
    assert targets["eager"] != targets["compiled"]  # side by side on different servers
