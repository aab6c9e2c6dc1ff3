"""Forward proxies through the real CLI (issue 30 item 5): `HTTP_PROXY`, `HTTPS_PROXY` and
`NO_PROXY` honoured as curl honours them, with tinyproxy (a real forward proxy, Debian's) in
the middle. A plain-http target is reached with absolute-form request lines, an https target
through a CONNECT tunnel (TLS end to end: the proxy sees no request); model discovery and the
/metrics scrape take the same way; the proxy's credentials are never stored."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.cli.helpers import one_error_line
from tests.command_line import soakgate
from tests.proxies import Tinyproxy, free_port, needs_tinyproxy
from tests.targets.test_tls import rows, stored_rows, tls_mock
from tests.tlscerts import Certs, make_certs

from soakgate.mockserver.process import MockProcess

_PROXY_VARIABLES = ("http_proxy", "https_proxy", "no_proxy", "all_proxy")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def proxied(
    url: str, db: Path, env: dict[str, str], *extra: str
) -> subprocess.CompletedProcess[str]:
    """`soakgate run` with exactly the proxy variables in `env` (inherited ones removed)."""
    cleared: dict[str, str | None] = {
        name: None for lower in _PROXY_VARIABLES for name in (lower, lower.upper())
    }
    command = ["run", "--target", url, "--requests", "12", "--concurrency", "2", "--db", str(db),
               "--metrics-interval", "0.1", *extra]  # fmt: skip
    return soakgate(*command, cwd=db.parent, env={**cleared, **env})


def load(db: Path) -> dict[str, object]:
    with sqlite3.connect(db) as conn:
        (text,) = conn.execute("SELECT load FROM runs").fetchone()
    return dict(json.loads(text))


def events(db: Path, kind: str) -> int:
    with sqlite3.connect(db) as conn:
        (count,) = conn.execute("SELECT count(*) FROM events WHERE kind = ?", (kind,)).fetchone()
    return int(count)


@needs_tinyproxy
def test_a_plain_http_target_is_soaked_through_the_proxy_in_http_proxy(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock()
    db = tmp_path / "d.sqlite"
    with Tinyproxy(tmp_path / "proxy") as proxy:
        run = proxied(mock.url, db, {"HTTP_PROXY": proxy.url})
        seen = proxy.requests()
    assert run.returncode == 0, run.stderr
    got = rows(db)
    assert len(got) == 12 and all(cls is None and text for cls, text in got)
    assert seen.count(f"POST {mock.url}/v1/completions") == 12, seen
    assert f"GET {mock.url}/v1/models" in seen and f"GET {mock.url}/metrics" in seen
    assert events(db, "server_load") >= 1
    assert load(db)["proxy"] == {mock.url.removeprefix("http://"): proxy.url}


@needs_tinyproxy
def test_an_https_target_is_reached_through_a_connect_tunnel(
    start_mock: Callable[..., MockProcess], certs: Certs, tmp_path: Path
) -> None:
    """`HTTPS_PROXY` without a scheme (as curl reads it); the proxy relays TLS it cannot read."""
    mock = tls_mock(start_mock, certs)
    authority = mock.url.removeprefix("https://")
    db = tmp_path / "d.sqlite"
    with Tinyproxy(tmp_path / "proxy") as proxy:
        bare = proxy.url.removeprefix("http://")
        run = proxied(mock.url, db, {"HTTPS_PROXY": bare}, "--ca-bundle", str(certs.ca))
        seen = proxy.requests()
    assert run.returncode == 0, run.stderr
    got = rows(db)
    assert len(got) == 12 and all(cls is None and text for cls, text in got)
    assert len(mock.ground_truth()) == 12
    assert seen and all(line == f"CONNECT {authority}" for line in seen), seen
    assert events(db, "server_load") >= 1  # the scrape went through a tunnel too
    assert load(db)["proxy"] == {authority: proxy.url}


def test_no_proxy_sends_a_target_direct(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock()
    db = tmp_path / "d.sqlite"
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: a proxied request would fail
    run = proxied(mock.url, db, {"HTTP_PROXY": dead, "NO_PROXY": "localhost,127.0.0.1"})
    assert run.returncode == 0, run.stderr
    assert len(rows(db)) == 12 and all(cls is None for cls, _ in rows(db))
    assert "proxy" not in load(db)


@needs_tinyproxy
def test_proxy_credentials_are_sent_and_never_stored(
    start_mock: Callable[..., MockProcess], certs: Certs, tmp_path: Path
) -> None:
    plain, tls = start_mock(), tls_mock(start_mock, certs)
    ca = ("--ca-bundle", str(certs.ca))
    with Tinyproxy(tmp_path / "proxy", basic_auth="soak:Pa55-w0rd") as proxy:
        port = proxy.port
        good = f"http://soak:Pa55-w0rd@127.0.0.1:{port}"
        for name, url, variable in [("plain", plain.url, "HTTP_PROXY"),
                                    ("tls", tls.url, "HTTPS_PROXY")]:  # fmt: skip
            db = tmp_path / f"{name}.sqlite"
            run = proxied(url, db, {variable: good}, *ca)
            assert run.returncode == 0, run.stderr
            assert len(rows(db)) == 12 and all(cls is None for cls, _ in rows(db))
            stored = db.read_bytes() + run.stdout.encode() + run.stderr.encode()
            assert b"Pa55-w0rd" not in stored and b"c29hazpQYTU1LXcwcmQ" not in stored
            assert list(load(db)["proxy"].values()) == [f"http://127.0.0.1:{port}"]  # type: ignore[attr-defined]
        # wrong credentials: the tunnel is refused; with --model every row says so
        db = tmp_path / "refused.sqlite"
        bad = {"HTTPS_PROXY": f"http://soak:wrong@127.0.0.1:{port}"}
        proxied(tls.url, db, bad, *ca, "--model", "soakgate-mock")
    with sqlite3.connect(db) as conn:
        details = [d for (d,) in conn.execute("SELECT error_detail FROM generations")]
    assert len(details) == 12, details
    # tinyproxy refuses wrong credentials with 401 (missing ones with 407)
    assert all(d and "did not open a tunnel" in d and " 401 " in d for d in details), details[:2]


@pytest.mark.parametrize(
    ("variable", "value", "scheme", "message"),
    [
        ("HTTPS_PROXY", "socks5://127.0.0.1:1080", "https", "only http:// proxies"),
        ("HTTP_PROXY", "https://127.0.0.1:3128", "http", "only http:// proxies"),
        ("HTTP_PROXY", "http://127.0.0.1:99999", "http", "not a port number"),
    ],
)
def test_a_proxy_soakgate_cannot_use_is_one_line_and_exit_2(
    tmp_path: Path, variable: str, value: str, scheme: str, message: str
) -> None:
    db = tmp_path / "d.sqlite"
    run = proxied(f"{scheme}://127.0.0.1:9", db, {variable: value})
    line = one_error_line(run)
    assert run.returncode == 2 and variable in line and message in line, line
    assert stored_rows(db) == 0
