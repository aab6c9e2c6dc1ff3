"""The shipped alert rules (examples/prometheus/soakgate-alerts.yml) and the series they need
(issue 30 item 2): promtool's own rule tests, every unit's series served from the first scrape,
and a real Prometheus scraping a real soak and firing the baseline alert."""

from __future__ import annotations

import json
import shutil
import socket
import sqlite3
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from tests.report.test_live_metrics import Soak, of, scrape, soaks  # noqa: F401 (a fixture)

from soakgate.mockserver.process import MockProcess
from soakgate.records import ERROR_CLASSES

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "examples" / "prometheus"
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian: prometheus) is not installed")
def test_promtool_checks_the_rules_and_their_tests_pass() -> None:
    assert PROMTOOL is not None
    for command in (["check", "rules", "soakgate-alerts.yml"],
                    ["test", "rules", "soakgate-alerts.test.yml"]):  # fmt: skip
        done = subprocess.run([PROMTOOL, *command], cwd=RULES, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS" in done.stdout


def test_every_units_series_is_served_from_the_first_scrape(
    tmp_path: Path,
    soaks: list[Soak],  # noqa: F811
) -> None:
    """Before any row is stored, each unit of the run has its counters at 0 (every error class
    among them), its progress clock and soakgate's info: an `increase()` then sees the first
    collapse or error, and a stall is timed from the start."""
    with MockProcess(["--latency-ms", "3000"]) as slow:
        soak = Soak(["run", "--target", f"gpu0={slow.url}", "--arm", f"compiled={slow.url}",
                     "--label", "baseline", "--requests", "4", "--concurrency", "2",
                     "--db", "s.sqlite", "--quiet", "--no-watch-metrics", "--metrics-port",
                     "0"], tmp_path)  # fmt: skip
        soaks.append(soak)
        first = scrape(soak.url)
        soak.end()
    generations = of(first, "soakgate_generations_total")
    units = {(dict(k)["label"], dict(k)["target"]) for k in generations}
    assert len(units) == 2, units
    for label, target in units:
        kinds = {dict(k)["error_class"] for k in generations
                 if dict(k)["label"] == label and dict(k)["target"] == target}  # fmt: skip
        assert kinds == {"", *ERROR_CLASSES}, kinds
    assert len(of(first, "soakgate_last_progress_timestamp_seconds")) == 2
    (info,) = of(first, "soakgate_info").items()
    assert dict(info[0])["version"] and info[1] == 1.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _query(base: str, expr: str) -> list[dict[str, object]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        document = json.load(answer)
    assert document["status"] == "success", document
    result: list[dict[str, object]] = document["data"]["result"]
    return result


@pytest.mark.slow
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus (Debian package) is not installed")
def test_a_real_prometheus_scrapes_a_soak_and_pages_on_the_baselines_collapse(
    tmp_path: Path,
    soaks: list[Soak],  # noqa: F811
) -> None:
    assert PROMETHEUS is not None
    with MockProcess(["--seed", "2", "--collapse-rate", "0.3", "--latency-ms", "20"]) as mock:
        soak = Soak(["run", "--target", f"gpu0={mock.url}", "--label", "baseline",
                     "--requests", "200", "--concurrency", "2", "--db", "p.sqlite", "--quiet",
                     "--no-watch-metrics", "--metrics-port", "0", "--metrics-linger", "120"],
                    tmp_path)  # fmt: skip
        soaks.append(soak)
        target = soak.url.removeprefix("http://").removesuffix("/metrics")
        shutil.copy(RULES / "soakgate-alerts.yml", tmp_path / "soakgate-alerts.yml")
        (tmp_path / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "rule_files: [soakgate-alerts.yml]\n"
            f"scrape_configs: [{{job_name: soakgate, static_configs: [{{targets: ['{target}']}}]}}]\n"
        )
        port = _free_port()
        prometheus = subprocess.Popen(
            [PROMETHEUS, "--config.file=prometheus.yml", f"--storage.tsdb.path={tmp_path}/tsdb",
             f"--web.listen-address=127.0.0.1:{port}"], cwd=tmp_path,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            soak.wait_for("soak ended", timeout=300)
            with sqlite3.connect(tmp_path / "p.sqlite") as connection:
                (rows,) = connection.execute("SELECT COUNT(*) FROM generations").fetchone()
            deadline, total, firing = time.monotonic() + 120, -1.0, []
            while time.monotonic() < deadline:  # Prometheus's next scrapes and evaluations
                try:
                    summed = _query(base, "sum(soakgate_generations_total)")
                    firing = _query(base, 'ALERTS{alertname="SoakgateBaselineCollapse", '
                                          'alertstate="firing"}')  # fmt: skip
                except OSError:  # not listening yet
                    summed = []
                total = float(summed[0]["value"][1]) if summed else -1.0  # type: ignore[index]
                if total == rows and firing:
                    break
                time.sleep(0.5)
            assert total == rows, (total, rows)
            assert [f["metric"]["target"] for f in firing] == ["gpu0"]  # type: ignore[index]
        finally:
            prometheus.terminate()
            prometheus.wait(30)
            soak.end()
