"""https targets through the real CLI: the mock serves TLS with certificates a test CA signed,
and soakgate trusts that CA (`--ca-bundle`), shows a client certificate (`--client-cert`,
`--client-key`), or verifies nothing (`--insecure`, warned and recorded). Every connection to
the target uses the options: generation requests, model discovery and the /metrics scrape."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.cli.helpers import one_error_line
from tests.command_line import soakgate
from tests.tlscerts import Certs, make_certs

from soakgate.mockserver.process import MockProcess


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_mock(start_mock: Callable[..., MockProcess], certs: Certs, *extra: str) -> MockProcess:
    mock = start_mock("--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key),
                      *extra)  # fmt: skip
    assert mock.url.startswith("https://127.0.0.1:"), mock.url
    return mock


def soak(url: str, db: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return soakgate("run", "--target", url, "--requests", "12", "--concurrency", "2", "--db",
                    str(db), "--metrics-interval", "0.1", *extra, cwd=db.parent)  # fmt: skip


def stored_rows(db: Path) -> int:
    """Generations stored (0 when the file is empty or absent)."""
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        return (
            conn.execute("SELECT count(*) FROM generations").fetchone()[0]
            if "generations" in tables
            else 0
        )


def rows(db: Path) -> list[tuple[str | None, str | None]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT error_class, text FROM generations").fetchall()


def stored_tls(db: Path) -> object:
    with sqlite3.connect(db) as conn:
        (load,) = conn.execute("SELECT load FROM runs").fetchone()
    return json.loads(load).get("tls")


def events(db: Path, kind: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(
            conn.execute("SELECT count(*) FROM events WHERE kind = ?", (kind,)).fetchone()[0]
        )


def test_a_ca_bundle_verifies_an_https_target_for_requests_discovery_and_metrics(
    start_mock: Callable[..., MockProcess], certs: Certs, tmp_path: Path
) -> None:
    mock = tls_mock(start_mock, certs)
    db = tmp_path / "d.sqlite"
    run = soak(mock.url, db, "--ca-bundle", str(certs.ca))  # no --model: discovered
    assert run.returncode == 0, run.stderr
    got = rows(db)
    assert len(got) == 12 and all(cls is None and text for cls, text in got)
    assert len(mock.ground_truth()) == 12
    assert events(db, "server_load") >= 1  # the /metrics scrape went over TLS too
    assert stored_tls(db) == {"ca_bundle": str(certs.ca), "client_cert": None,
                              "client_key": None, "verify": True}  # fmt: skip


def test_an_untrusted_certificate_is_refused_in_one_line_before_anything_is_stored(
    start_mock: Callable[..., MockProcess], certs: Certs, tmp_path: Path
) -> None:
    mock = tls_mock(start_mock, certs)
    for n, extra in enumerate([(), ("--ca-bundle", str(certs.other_ca))]):
        db = tmp_path / f"d{n}.sqlite"
        run = soak(mock.url, db, *extra)
        assert run.returncode == 2 and "CERTIFICATE_VERIFY_FAILED" in one_error_line(run)
        assert stored_rows(db) == 0
    assert mock.ground_truth() == []


def test_a_verification_failure_with_a_named_model_is_stored_as_connection_failures(
    start_mock: Callable[..., MockProcess], certs: Certs, tmp_path: Path
) -> None:
    """With --model the soak starts without asking the server; each request's handshake fails,
    and every row says why (no row is a success, none reached the server)."""
    mock = tls_mock(start_mock, certs)
    db = tmp_path / "d.sqlite"
    soak(mock.url, db, "--model", "mock", "--ca-bundle", str(certs.other_ca))
    got = rows(db)
    assert len(got) == 12 and all(cls is not None for cls, _ in got), got
    with sqlite3.connect(db) as conn:
        details = [d for (d,) in conn.execute("SELECT error_detail FROM generations")]
    assert all("CERTIFICATE_VERIFY_FAILED" in d for d in details), details[:2]
    assert mock.ground_truth() == []


def test_insecure_soaks_a_self_signed_target_warns_and_is_recorded(
    start_mock: Callable[..., MockProcess], certs: Certs, tmp_path: Path
) -> None:
    mock = tls_mock(start_mock, certs)
    db = tmp_path / "d.sqlite"
    run = soak(mock.url, db, "--insecure")
    assert run.returncode == 0, run.stderr
    assert "soakgate: warning: --insecure" in run.stderr
    assert len(rows(db)) == 12 and all(cls is None for cls, _ in rows(db))
    assert stored_tls(db) == {"ca_bundle": None, "client_cert": None, "client_key": None,
                              "verify": False}  # fmt: skip


def test_mutual_tls_needs_the_client_certificate_and_works_with_it(
    start_mock: Callable[..., MockProcess], certs: Certs, tmp_path: Path
) -> None:
    mock = tls_mock(start_mock, certs, "--tls-client-ca", str(certs.ca))
    ca = ("--ca-bundle", str(certs.ca))
    refused = tmp_path / "refused.sqlite"
    soak(mock.url, refused, "--model", "mock", *ca)
    assert len(rows(refused)) == 12 and all(cls is not None for cls, _ in rows(refused))
    assert mock.ground_truth() == []  # the server answered nothing without a certificate
    for name, extra in [("both", ("--client-cert", str(certs.client_both))),
                        ("split", ("--client-cert", str(certs.client_cert),
                                   "--client-key", str(certs.client_key)))]:  # fmt: skip
        db = tmp_path / f"{name}.sqlite"
        run = soak(mock.url, db, *ca, *extra)
        assert run.returncode == 0, run.stderr
        assert len(rows(db)) == 12 and all(cls is None for cls, _ in rows(db))
        stored = stored_tls(db)
        assert isinstance(stored, dict) and stored["client_cert"] == extra[1]
    assert len(mock.ground_truth()) == 24


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--ca-bundle", "{missing}"), "--ca-bundle {missing}: cannot use it: No such file"),
        (("--ca-bundle", "{server_key}"), "--ca-bundle {server_key}: cannot use it"),
        (("--client-key", "{client_key}"), "--client-key needs --client-cert"),
        (("--client-cert", "{ca}"), "--client-cert {ca}: cannot use it"),
        (("--client-cert", "{client_cert}", "--client-key", "{server_key}"),
         "--client-cert {client_cert} (key {server_key}): cannot use it"),
    ],
)  # fmt: skip
def test_tls_files_that_cannot_be_used_are_one_line_exit_2_and_nothing_stored(
    certs: Certs, tmp_path: Path, flags: tuple[str, ...], says: str
) -> None:
    names = {"missing": str(tmp_path / "nope.pem"), "server_key": str(certs.server_key),
             "client_key": str(certs.client_key), "ca": str(certs.ca),
             "client_cert": str(certs.client_cert)}  # fmt: skip
    args = [flag.format(**names) for flag in flags]
    db = tmp_path / "d.sqlite"
    # The port is never dialled: the options are checked before anything is sent.
    for command in (["run", "--target", "https://127.0.0.1:9", "--requests", "3", "--db", str(db)],
                    ["determinism", "--target", "https://127.0.0.1:9"]):  # fmt: skip
        result = soakgate(*command, *args, cwd=tmp_path)
        assert result.returncode == 2
        assert says.format(**names) in one_error_line(result)
    assert stored_rows(db) == 0


def test_determinism_reaches_an_https_target_with_the_ca_bundle(
    start_mock: Callable[..., MockProcess], certs: Certs, tmp_path: Path
) -> None:
    mock = tls_mock(start_mock, certs)
    result = soakgate("determinism", "--target", mock.url, "--prompt-count", "3", "--repeats",
                      "2", "--max-tokens", "8", "--ca-bundle", str(certs.ca), cwd=tmp_path)  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    assert len(mock.ground_truth()) == 6
