"""The GPU workflow's scripts (README, `transformers serve` on an NVIDIA GPU): the campaign script's
own flow with the mock server in place of `transformers serve` (runs anywhere), and the real
thing on a GPU (skipped, with the reason, where there is none)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.realservers.helpers import REPO, model_dir

SCRIPT = REPO / "scripts" / "gpu" / "transformers_serve_campaign.sh"


def _gpu_skip_reason() -> str | None:
    """Why the GPU test cannot run here, or None."""
    if shutil.which("nvidia-smi") is None:
        return "no NVIDIA GPU here (nvidia-smi is not installed)"
    probe = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0 or "GPU" not in probe.stdout:
        return f"no NVIDIA GPU here (nvidia-smi -L: {probe.stderr.strip() or probe.stdout.strip()})"
    if not (model_dir() / "config.json").is_file() and not (REPO / ".model").is_dir():
        return f"no model: {model_dir()} or .model (see the README)"
    return None


def _arms(summary: str) -> dict[str, tuple[int, int, int]]:
    """label -> (n, errors, collapses) from the summary's last table."""
    arms = {}
    for line in summary.splitlines():
        match = re.match(r"^(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+\s", line)
        if match:
            label, n, errors, _cancelled, collapses = match.groups()
            arms[label] = (int(n), int(errors), int(collapses))
    return arms


def _run_script(out: Path, *args: str, timeout: float) -> dict[str, tuple[int, int, int]]:
    env = {**os.environ, "OUT": str(out)}
    done = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    summary = (out / "summary.txt").read_text()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (out / "report.html").is_file(), summary[-3000:]
    return _arms(summary)


@pytest.mark.slow
def test_the_campaign_script_runs_end_to_end_with_the_mock(tmp_path: Path) -> None:
    arms = _run_script(
        tmp_path / "out", str(model_dir()), "--mock", "--minutes", "0.1",
        "--configs", "eager,compiled-dropped-op", "--budget", "200", timeout=300,
    )  # fmt: skip
    eager, control = arms["eager"], arms["compiled-dropped-op"]
    assert eager[0] > 50 and eager[1] == 0 and eager[2] == 0
    assert control[0] > 50 and 0.3 < control[2] / control[0] < 0.7  # the mock collapses half


def test_the_campaign_script_fails_when_its_campaign_fails(tmp_path: Path) -> None:
    """It exited 0 whatever its campaign and report did: a pipeline read a broken run as done."""
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(SCRIPT), str(model_dir()), "--mock", "--minutes", "0.05", "--concurrency",
         "0", "--configs", "eager", "--budget", "100"],
        env={**os.environ, "OUT": str(out)}, capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    summary = (out / "summary.txt").read_text()
    assert done.returncode == 2, summary[-2000:]
    assert "campaign exit code 2" in summary and "concurrency must be at least 1" in summary
    assert summary.rstrip().endswith("FAILED (exit 2)")
    assert not (out / "tfserve.sqlite").exists()  # the summary's read created no database


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.timeout(560)
@pytest.mark.skipif(_gpu_skip_reason() is not None, reason=str(_gpu_skip_reason()))
def test_transformers_serve_campaign_on_a_gpu(tmp_path: Path) -> None:
    """The README's GPU command: compiled is clean, the dropped-op control collapses."""
    model = REPO / ".model" if (REPO / ".model").is_dir() else model_dir()
    arms = _run_script(
        tmp_path / "out", str(model), "--configs", "compiled,compiled-dropped-op",
        "--concurrency", "32", "--minutes", "0.5", "--budget", "440", timeout=500,
    )  # fmt: skip
    compiled, control = arms["compiled"], arms["compiled-dropped-op"]
    assert compiled[0] > 0 and compiled[2] == 0
    assert control[0] > 0 and control[2] >= 0.9 * (control[0] - control[1])


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_skip_reason() is not None, reason=str(_gpu_skip_reason()))
def test_the_nvml_probe_reads_the_gpu() -> None:
    """docs/campaigns.md: `PYTHONPATH=src python scripts/gpu_nvml_probe.py` on a GPU machine."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu_nvml_probe.py")],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
