"""`--metrics-port`: Prometheus metrics of soakgate itself, scraped from real `soakgate run` and
`soakgate campaign` processes with prometheus-client's own parser; once the soak has stored its
last row (`--metrics-linger` keeps serving), the counters equal what the database holds."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from scipy.stats import beta
from tests.campaign.helpers import DEVICE_LOST, write_campaign

from soakgate.mockserver.process import MockProcess
from soakgate.report.live_metrics import SERIES

REPO = Path(__file__).resolve().parents[2]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """Every sample at `url`, parsed by prometheus-client: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def of(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in samples.items() if n == name}


def counted(samples: Samples) -> dict[tuple[tuple[str, str], ...], float]:
    """The non-zero generation counters (a unit with no collapse yet exports a 0)."""
    return {k: v for k, v in of(samples, "soakgate_generations_total").items() if v}


class Soak:
    """A soakgate process serving metrics; its stderr lines arrive on a queue."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "soakgate", *argv], cwd=cwd, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.url = self.wait_for(r"serving metrics at (\S+)").group(1)

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float = 120, during: Any = None) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.05)
            except queue.Empty:
                assert self.proc.poll() is None, "".join(self.seen)
                if during is not None:
                    during()
                continue
            self.seen.append(line)
            if match := re.search(pattern, line):
                return match
        raise AssertionError(f"no {pattern!r} in {''.join(self.seen)}")

    def end(self) -> int:
        os.killpg(self.proc.pid, signal.SIGTERM)
        code = self.proc.wait(60)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code


@pytest.fixture
def soaks() -> Iterator[list[Soak]]:
    started: list[Soak] = []
    yield started
    for soak in started:
        if soak.proc.poll() is None:
            soak.end()


def stored(db: Path) -> dict[tuple[tuple[str, str], ...], int]:
    """Generations per (error_class, label, outcome, target), as the metric labels them."""
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = connection.execute(
            "SELECT label, target, CASE WHEN error_class IS NOT NULL THEN 'error' WHEN collapsed "
            "THEN 'collapsed' ELSE 'clean' END, COALESCE(error_class, ''), COUNT(*) "
            "FROM generations GROUP BY 1, 2, 3, 4"
        ).fetchall()
    finally:
        connection.close()
    return {
        (("error_class", kind), ("label", label), ("outcome", outcome), ("target", target)): n
        for label, target, outcome, kind, n in rows
    }


def test_run_metrics_during_the_soak_and_equal_to_the_database_at_the_end(
    tmp_path: Path, soaks: list[Soak]
) -> None:
    with MockProcess(["--seed", "4", "--collapse-rate", "0.1", "--fault-rate", "http_500=0.05",
                      "--latency-ms", "40"]) as mock:  # fmt: skip
        soak = Soak(["run", "--target", f"gpu0={mock.url}", "--target", f"gpu1={mock.url}",
                     "--label", "baseline", "--requests", "120", "--concurrency", "4",
                     "--max-tokens", "16", "--db", "m.sqlite", "--quiet", "--no-watch-metrics",
                     "--metrics-port", "0", "--metrics-linger", "60"], tmp_path)  # fmt: skip
        soaks.append(soak)
        during: list[Samples] = []
        soak.wait_for("soak ended", during=lambda: during.append(scrape(soak.url)))
        final = scrape(soak.url)
    assert soak.end() == 0
    assert len(during) >= 5, len(during)
    assert any(of(s, "soakgate_soak_active")[()] == 1 for s in during)
    assert max(v for s in during for v in of(s, "soakgate_requests_in_flight").values()) >= 1
    totals = [sum(of(s, "soakgate_generations_total").values()) for s in [*during, final]]
    assert totals == sorted(totals) and any(0 < total < totals[-1] for total in totals)

    counts = stored(tmp_path / "m.sqlite")
    assert counted(final) == counts
    assert sum(counts.values()) == 240 and any(k[2][1] == "error" for k in counts)
    assert of(final, "soakgate_requests_in_flight") == {
        (("label", "baseline"), ("target", t)): 0 for t in ("gpu0", "gpu1")
    }
    assert of(final, "soakgate_soak_active")[()] == 0
    assert not of(final, "soakgate_guard_faults_total")  # a run has no guard
    connection = sqlite3.connect(tmp_path / "m.sqlite")
    for target in ("gpu0", "gpu1"):
        unit = (("label", "baseline"), ("target", target))
        k, n, last = connection.execute(
            "SELECT SUM(collapsed), COUNT(*), MAX(CASE WHEN collapsed THEN ended_at END) "
            "FROM generations WHERE target=? AND error_class IS NULL", (target,)
        ).fetchone()  # fmt: skip
        assert k > 0
        assert of(final, "soakgate_scored_generations")[unit] == n
        assert of(final, "soakgate_collapse_rate")[unit] == pytest.approx(k / n)
        exact = float(beta.ppf(0.95, k + 1, n - k))  # one-sided 95% Clopper-Pearson bound
        assert of(final, "soakgate_collapse_rate_upper_bound")[unit] == pytest.approx(exact)
        assert of(final, "soakgate_last_collapse_timestamp_seconds")[unit] == pytest.approx(last)
    connection.close()


def test_a_soak_shorter_than_one_progress_tick_is_counted_exactly(
    tmp_path: Path, soaks: list[Soak]
) -> None:
    """The observer holds the tallies from the soak's start, not from its first 0.25 s tick."""
    with MockProcess(["--seed", "2", "--collapse-rate", "0.3"]) as mock:
        soak = Soak(["run", "--target", mock.url, "--requests", "6", "--max-tokens", "8",
                     "--db", "s.sqlite", "--quiet", "--no-watch-metrics", "--metrics-port", "0",
                     "--metrics-linger", "60"], tmp_path)  # fmt: skip
        soaks.append(soak)
        soak.wait_for("soak ended")
        final = scrape(soak.url)
    assert soak.end() == 0
    counts = stored(tmp_path / "s.sqlite")
    assert counted(final) == counts and sum(counts.values()) == 6


def test_a_metrics_port_in_use_is_refused_before_any_load(tmp_path: Path) -> None:
    with socket.socket() as taken, MockProcess(["--seed", "1"]) as mock:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "soakgate", "run", "--target", mock.url, "--requests", "5",
             "--db", "x.sqlite", "--quiet", "--metrics-port", str(port)],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"soakgate: error: --metrics-port {port}: cannot listen on 127.0.0.1: Address already "
        "in use"
    ]
    assert not (tmp_path / "x.sqlite").exists()  # no run began, no request was sent


@pytest.mark.slow
def test_campaign_metrics_count_the_guards_faults_and_every_block(
    tmp_path: Path, soaks: list[Soak]
) -> None:
    flags = (f"--die-after 8 --die-once-file {{campaign_dir}}/die-{{instance}} "
             f"--die-message '{DEVICE_LOST}'")  # fmt: skip
    path = write_campaign(tmp_path, {"eager": "--collapse-rate 0.1", "graph": flags},
                          requests=20, repetitions=2, order="interleaved")  # fmt: skip
    soak = Soak(["campaign", str(path), "--db", str(tmp_path / "c.sqlite"), "--quiet",
                 "--metrics-port", "0", "--metrics-linger", "60"], tmp_path)  # fmt: skip
    soaks.append(soak)
    soak.wait_for("soak ended", timeout=240)
    final = scrape(soak.url)
    assert soak.end() == 1  # the graph servers crashed: a finding of its own (issue 25)
    assert counted(final) == stored(tmp_path / "c.sqlite")
    connection = sqlite3.connect(tmp_path / "c.sqlite")
    faults = connection.execute(
        "SELECT r.label, e.target, COUNT(*) FROM events e JOIN runs r USING (run_id) "
        "WHERE e.kind='engine_fault' GROUP BY 1, 2"
    ).fetchall()
    connection.close()
    got = {labels: v for labels, v in of(final, "soakgate_guard_faults_total").items() if v}
    assert got == {(("label", label), ("target", target)): n for label, target, n in faults}
    assert sum(got.values()) >= 2  # each graph instance died once


def test_the_example_alert_rules_parse_and_name_only_exported_series() -> None:
    rules = yaml.safe_load((REPO / "examples/prometheus/soakgate-alerts.yml").read_text())
    alerts = [rule for group in rules["groups"] for rule in group["rules"] if "alert" in rule]
    assert {"SoakgateBaselineCollapse", "SoakgateCollapseUpperBoundHigh", "SoakgateTargetFailing",
            "SoakgateStalled"} <= {rule["alert"] for rule in alerts}  # fmt: skip
    exported = {name.removesuffix("_total") for name in SERIES} | set(SERIES)
    for rule in alerts:
        names = set(re.findall(r"\bsoakgate_\w+", rule["expr"]))
        assert names and names <= exported, (rule["alert"], names - exported)
        assert rule["labels"]["severity"] and rule["annotations"]["summary"]


def test_every_exported_series_is_documented() -> None:
    text = (REPO / "docs" / "monitoring.md").read_text()
    for name in SERIES:
        assert f"`{name}`" in text, name


@pytest.mark.slow
def test_reference_scoring_series_equal_the_database_at_the_end(
    tmp_path: Path, soaks: list[Soak]
) -> None:
    with MockProcess(["--fluent-rate", "0.2"]) as candidate, MockProcess() as reference:
        soak = Soak(["run", "--target", f"gpu0={candidate.url}", "--label", "compiled",
                     "--score-reference", reference.url, "--false-flag-rate", "0.01",
                     "--calibration", "200", "--requests", "200", "--max-tokens", "16",
                     "--db", "r.sqlite", "--quiet", "--no-watch-metrics", "--metrics-port", "0",
                     "--metrics-linger", "60"], tmp_path)  # fmt: skip
        soaks.append(soak)
        soak.wait_for("soak ended")
        final = scrape(soak.url)
    assert soak.end() == 0
    with sqlite3.connect(tmp_path / "r.sqlite") as connection:
        suspect, plausible = connection.execute(
            "SELECT SUM(suspect), SUM(1 - suspect) FROM generations WHERE suspect IS NOT NULL"
        ).fetchone()
    unit = (("label", "compiled"), ("target", "gpu0"))
    expected = {"suspect": suspect, "plausible": plausible, "unscored": 0}
    assert of(final, "soakgate_reference_generations_total") == {
        tuple(sorted((*unit, ("outcome", outcome)))): count for outcome, count in expected.items()
    }
    assert suspect >= 20 and suspect + plausible == 200
    assert of(final, "soakgate_suspect_rate") == {unit: suspect / 200}
    assert of(final, "soakgate_suspect_rate_upper_bound")[unit] > suspect / 200
    # the unit-level share, live: rows whose soak z (the mock reference returns alternatives
    # and the soak samples) is above the calibration's p90, as stored
    with sqlite3.connect(tmp_path / "r.sqlite") as connection:
        zs = [z for (z,) in connection.execute(
            "SELECT json_extract(details, '$.reference.soak_z') FROM generations "
            "WHERE suspect IS NOT NULL")]  # fmt: skip
        (data,) = connection.execute(
            "SELECT data FROM events WHERE kind = 'reference_calibration'").fetchone()  # fmt: skip
    cutoff = json.loads(data)["soak_z_quantiles"]["p90"]
    above = sum(z > cutoff for z in zs)
    assert len(zs) == 200 and 0 < above < 200
    assert of(final, "soakgate_shifted_share") == {unit: above / 200}


def test_scrapes_beyond_the_bound_wait_for_a_free_worker_and_the_soak_loses_nothing(
    tmp_path: Path, soaks: list[Soak]
) -> None:
    """Four scrapers that trickle a request one byte at a time hold every worker: a fifth
    scrape is not answered while they hold them (prometheus-client's own server took every
    connection in a thread of its own and answered at once); once they let go it is, and the
    soak stored every row. (The wait before checking only shortens on a quiet machine: load
    can make the fifth scrape later, never earlier.)"""
    import contextlib
    import socket

    with MockProcess(["--seed", "6", "--latency-ms", "20"]) as mock:
        soak = Soak(["run", "--target", f"gpu0={mock.url}", "--requests", "400",
                     "--concurrency", "4", "--max-tokens", "8", "--db", "b.sqlite", "--quiet",
                     "--no-watch-metrics", "--metrics-port", "0", "--metrics-linger", "60"],
                    tmp_path)  # fmt: skip
        soaks.append(soak)
        port = int(soak.url.rsplit(":", 1)[1].split("/")[0])
        holding = threading.Event()
        holders = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]

        def trickle() -> None:
            request = b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 10_000
            for byte in request:
                if not holding.is_set():
                    return
                for holder in holders:
                    with contextlib.suppress(OSError):
                        holder.sendall(bytes([byte]))
                time.sleep(0.2)

        holding.set()
        threading.Thread(target=trickle, daemon=True).start()
        answered: list[Samples] = []
        fifth = threading.Thread(target=lambda: answered.append(scrape(soak.url)), daemon=True)
        time.sleep(1.0)  # the holders connect first
        fifth.start()
        fifth.join(timeout=3.0)
        waited = not answered  # not answered while every worker was held
        holding.clear()
        for holder in holders:
            holder.close()
        fifth.join(timeout=120)
        assert waited and answered, (waited, answered)
        soak.wait_for("soak ended")
        final = scrape(soak.url)
    assert soak.end() == 0
    counts = stored(tmp_path / "b.sqlite")
    assert counted(final) == counts and sum(counts.values()) == 400


def test_latency_histograms_and_tokens_equal_the_database_at_the_end(
    tmp_path: Path, soaks: list[Soak]
) -> None:
    """Per unit: the end-to-end latency histogram counts every clean row in the bucket its
    stored times put it, with their sum; the time-to-first-token one every clean streamed row;
    the token counter their completion tokens (issue 30)."""
    from soakgate.load.spec import LATENCY_BUCKETS

    with MockProcess(["--latency-ms", "30", "--fault-rate", "http_500=0.1"]) as mock:
        soak = Soak(["run", "--target", f"gpu0={mock.url}", "--label", "baseline",
                     "--requests", "60", "--concurrency", "4", "--max-tokens", "8", "--db",
                     "h.sqlite", "--quiet", "--no-watch-metrics", "--metrics-port", "0",
                     "--metrics-linger", "60"], tmp_path)  # fmt: skip
        soaks.append(soak)
        soak.wait_for("soak ended")
        final = scrape(soak.url)
    assert soak.end() == 0
    with sqlite3.connect(tmp_path / "h.sqlite") as connection:
        rows = connection.execute(
            "SELECT ended_at - started_at, ttft_s, stream, completion_tokens FROM generations "
            "WHERE error_class IS NULL"
        ).fetchall()
    unit = (("label", "baseline"), ("target", "gpu0"))
    seconds = [r[0] for r in rows]
    assert of(final, "soakgate_request_latency_seconds_count")[unit] == len(seconds) > 0
    assert of(final, "soakgate_request_latency_seconds_sum")[unit] == pytest.approx(sum(seconds))
    buckets = of(final, "soakgate_request_latency_seconds_bucket")
    for bound in LATENCY_BUCKETS:
        expected = sum(s <= bound for s in seconds)
        assert buckets[(*unit[:1], ("le", f"{bound:g}"), *unit[1:])] == expected, bound
    ttft = [r[1] for r in rows if r[2] and r[1] is not None]
    assert of(final, "soakgate_time_to_first_token_seconds_count")[unit] == len(ttft)
    assert of(final, "soakgate_time_to_first_token_seconds_sum")[unit] == pytest.approx(sum(ttft))
    assert of(final, "soakgate_output_tokens_total")[unit] == sum(r[3] or 0 for r in rows)


def test_target_up_and_backoff_say_which_target_is_not_answering(
    tmp_path: Path, soaks: list[Soak]
) -> None:
    """A target with nothing listening: every request refused, its workers back off (counted),
    `soakgate_target_up` 0; the healthy one beside it: 1, no back-off (issue 30)."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with MockProcess() as mock:
        soak = Soak(["run", "--target", f"up={mock.url}", "--target", f"down={dead}",
                     "--model", "soakgate-mock", "--requests", "12", "--concurrency", "2",
                     "--max-tokens", "16", "--db", "u.sqlite", "--quiet", "--no-watch-metrics",
                     "--metrics-port", "0", "--metrics-linger", "60"], tmp_path)  # fmt: skip
        soaks.append(soak)
        soak.wait_for("soak ended", timeout=300)
        final = scrape(soak.url)
    soak.end()
    up = {dict(k)["target"]: v for k, v in of(final, "soakgate_target_up").items()}
    assert up == {"up": 1.0, "down": 0.0}
    holds = {dict(k)["target"]: v for k, v in of(final, "soakgate_backoffs_total").items()}
    held = {dict(k)["target"]: v for k, v in of(final, "soakgate_backoff_seconds_total").items()}
    assert holds["up"] == held["up"] == 0
    assert holds["down"] >= 1 and held["down"] > 0
