"""Gateways and proxies between soakgate and the server: a gateway's upstream retries are
recorded and counted apart from clean answers, a proxy's own error page is not the server's
error, and a stream a proxy hands on whole is warned about. Each case runs the real `soakgate`
command against the mock server behind a gateway double (tests/gateway.py) or real nginx
(tests/proxies.py), and checks the rows stored against what the servers received."""

from __future__ import annotations

import csv
import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.cli.helpers import soakgate
from tests.gateway import GatewayProcess
from tests.proxies import Nginx, free_port, needs_nginx

from soakgate.mockserver.process import MockProcess

HEADERS = {
    "litellm": {"x-litellm-attempted-retries", "x-litellm-model-api-base"},
    "envoy": {"x-envoy-attempt-count", "x-envoy-upstream-service-time"},
}


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


@pytest.mark.parametrize("flavour", ["litellm", "envoy"])
def test_a_gateways_upstream_retries_are_recorded_and_counted_apart_from_clean(
    tmp_path: Path, flavour: str
) -> None:
    faults = ["--fault-rate", "http_500=0.08,malformed_json=0.06", "--seed", "7"]
    with MockProcess(faults) as mock, GatewayProcess(mock.url, flavour, tmp_path / "gw") as gw:
        result = soakgate("run", "--target", f"gw={gw.url}", "--no-stream", "--requests", "150",
                          "--concurrency", "4", "--max-tokens", "16", "--db", "runs.sqlite",
                          "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
        received = Counter(line["request_id"] for line in mock.ground_truth())
        seen = {line["rid"]: line for line in gw.seen()}
    assert result.returncode == 0, result.stderr
    db = tmp_path / "runs.sqlite"
    rows = _rows(db, "SELECT request_id, error_class, gateway_retries, details FROM generations")
    assert len(rows) == 150
    for request_id, _, retries, details in rows:
        assert retries == seen[request_id]["attempts"] - 1  # what the gateway said it did
        assert received[request_id] == 1 + retries  # what the server saw
        assert set(json.loads(details)["gateway"]) == HEADERS[flavour]
    retried = [(error, retries) for _, error, retries, _ in rows if retries]
    clean = sum(1 for error, _ in retried if error is None)
    assert retried and clean, retried  # answers the gateway's retries turned clean
    # The server's own count reconciles with the rows: every upstream attempt is on one.
    assert sum(received.values()) == len(rows) + sum(r for _, r in retried)
    _check_report(tmp_path, len(retried), clean, sum(r for _, r in retried))


def _check_report(folder: Path, retried: int, clean: int, retries: int) -> None:
    """Report and export show the retried answers apart from clean ones."""
    document = json.loads(soakgate("report", "runs.sqlite", "--format", "json", cwd=folder).stdout)
    (unit,) = document["units"]
    assert (unit["gateway_retried"], unit["gateway_retried_clean"], unit["gateway_retries"]) == (
        retried, clean, retries,
    )  # fmt: skip
    assert any(f"a gateway retried {retried} answer(s) upstream ({retries} retries" in w
               for w in document["warnings"])  # fmt: skip
    # wide enough that no cell wraps: which error classes share the cell varies between runs
    table = soakgate("report", "runs.sqlite", cwd=folder, env={"COLUMNS": "1000"}).stdout
    assert f"gateway retried {retried} ({clean} clean)" in table
    exported = soakgate("export", "runs.sqlite", "--format", "csv", "--out", "rows.csv", cwd=folder)
    assert exported.returncode == 0, exported.stderr
    with (folder / "rows.csv").open() as handle:
        column = [int(r["gateway_retries"] or 0) for r in csv.DictReader(handle)]
    assert sum(column) == retries and sum(1 for n in column if n) == retried


@needs_nginx
def test_nginx_own_error_pages_are_proxy_errors_and_the_servers_errors_stay_the_servers(
    tmp_path: Path,
) -> None:
    with MockProcess(["--fault-rate", "http_500=0.15", "--seed", "3"]) as mock:
        dead = f"http://127.0.0.1:{free_port()}"  # nginx answers its own 502 page for it
        with Nginx(tmp_path / "nginx", [mock.url, dead]) as nginx:
            result = soakgate(
                "run", "--target", f"live={nginx.urls[0]}", "--target", f"dead={nginx.urls[1]}",
                "--model", "soakgate-mock", "--requests", "60", "--concurrency", "2",
                "--max-tokens", "16", "--db", "runs.sqlite", "--no-watch-metrics", cwd=tmp_path,
            )  # fmt: skip
        faults = {line["request_id"] for line in mock.ground_truth() if line["fault"] == "http_500"}
    assert result.returncode == 0, result.stderr
    rows = _rows(tmp_path / "runs.sqlite",
                 "SELECT request_id, target, error_class, error_detail FROM generations")  # fmt: skip
    dead_rows = [(error, detail) for _, target, error, detail in rows if target == "dead"]
    assert len(dead_rows) == 60 and all(error == "proxy_error" for error, _ in dead_rows)
    assert all("from a proxy (Server: nginx/" in d and "502 Bad Gateway" in d for _, d in dead_rows)
    live = {rid: error for rid, target, error, _ in rows if target == "live"}
    # nginx puts its own Server header on the server's 500 too: the JSON body says whose it is
    assert {rid for rid, error in live.items() if error == "http_5xx"} == faults and faults
    assert "proxy_error" not in live.values()
    document = json.loads(
        soakgate("report", "runs.sqlite", "--format", "json", cwd=tmp_path).stdout
    )
    by_target = {u["target"]: u["errors_by_class"] for u in document["units"]}
    assert by_target["dead"] == {"proxy_error": 60}
    assert by_target["live"] == {"http_5xx": len(faults)}
    exported = soakgate("export", "runs.sqlite", "--format", "csv", "--out", "rows.csv",
                        cwd=tmp_path)  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    with (tmp_path / "rows.csv").open() as handle:
        classes = Counter((r["target"], r["error_class"]) for r in csv.DictReader(handle))
    assert classes[("dead", "proxy_error")] == 60


@needs_nginx
def test_a_stream_a_proxy_hands_on_whole_is_one_warning_and_an_event(tmp_path: Path) -> None:
    # nginx's own upstream defaults (HTTP/1.0 to the server): the stream arrives whole
    with (
        MockProcess(["--tokens-per-s", "100"]) as mock,
        Nginx(tmp_path / "nginx", [mock.url], keepalive=False) as nginx,
    ):
        result = soakgate(
            "run", "--target", f"direct={mock.url}", "--target", f"proxied={nginx.urls[0]}",
            "--requests", "30", "--concurrency", "2", "--max-tokens", "16",
            "--db", "runs.sqlite", "--no-watch-metrics", cwd=tmp_path,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "first token came" in line]
    assert len(warnings) == 1 and warnings[0].startswith("soakgate: warning: proxied: "), warnings
    events = _rows(tmp_path / "runs.sqlite",
                   "SELECT target, data FROM events WHERE kind = 'stream_buffered'")  # fmt: skip
    assert [target for target, _ in events] == ["proxied"]
    data = json.loads(events[0][1])
    assert data["judged"] >= 20 and data["whole"] >= 0.9 * data["judged"]
