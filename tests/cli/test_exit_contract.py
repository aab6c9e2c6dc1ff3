"""Exit codes mean one thing each: 0 done, 1 a finding, 2 could not do its job, 130 interrupted
(README, *Exit codes*). Every case here goes through the real command."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.cli.helpers import foreign_database, one_error_line, sha256, soakgate, tables

from soakgate.mockserver.process import MockProcess

ANALYSES = (
    ("report", "{db}"),
    ("compare", "{db}", "eager", "graph", "--fail-on-differ"),
    ("export", "{db}", "--format", "jsonl"),
)


def _bad_db(kind: str, folder: Path) -> Path:
    if kind == "text":
        path = folder / "notes.txt"
        path.write_text("not a database\n" * 100)
        return path
    if kind == "folder":
        return folder
    return folder / "missing" / "runs.sqlite"


@pytest.mark.parametrize("kind", ["text", "folder", "missing_folder"])
def test_an_unusable_db_path_is_exit_2_for_every_command(
    kind: str, start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock()
    db = _bad_db(kind, tmp_path)
    before = sha256(db) if db.is_file() else None
    run = soakgate("run", "--target", mock.url, "--requests", "2", "--db", str(db), "--quiet",
                   cwd=tmp_path)  # fmt: skip
    assert run.returncode == 2 and str(db.name) in one_error_line(run), run.stderr
    for command in ANALYSES:
        result = soakgate(*(part.format(db=db) for part in command), cwd=tmp_path)
        assert result.returncode == 2, (command, result.stderr)
        one_error_line(result)
    assert mock.ground_truth() == []  # nothing was sent: the database is checked first
    if before is not None:
        assert sha256(db) == before


def test_compare_fail_on_differ_on_a_corrupt_database_is_2_not_the_differ_code(
    tmp_path: Path,
) -> None:
    db = tmp_path / "corrupt.sqlite"
    db.write_bytes(b"SQLite format 3\x00" + b"\x17" * 20000)  # an SQLite header, then garbage
    result = soakgate("compare", str(db), "eager", "graph", "--fail-on-differ", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    one_error_line(result)


def test_audit_compare_with_a_missing_library_is_exit_2(tmp_path: Path) -> None:
    present = tmp_path / "old.so"
    present.write_bytes(b"\x7fELF")
    for old, new in ((tmp_path / "nope.so", present), (present, tmp_path / "nope.so")):
        result = soakgate("audit", "--compare", str(old), str(new), cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert "nope.so" in one_error_line(result)


def test_run_refuses_a_database_with_foreign_tables_unless_told(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock()
    db = foreign_database(tmp_path / "app.sqlite")
    digest = sha256(db)
    args = ["run", "--target", mock.url, "--requests", "4", "--db", str(db), "--quiet"]
    refused = soakgate(*args, cwd=tmp_path)
    assert refused.returncode == 2
    line = one_error_line(refused)
    assert "not a soakgate database" in line and "bookmarks" in line
    assert "--allow-foreign-tables" in line
    assert sha256(db) == digest and mock.ground_truth() == []
    allowed = soakgate(*args, "--allow-foreign-tables", cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr
    assert {"bookmarks", "generations", "meta"} <= tables(db)
    with sqlite3.connect(db) as check:
        assert check.execute("SELECT COUNT(*) FROM bookmarks").fetchone() == (50,)
        assert check.execute("SELECT COUNT(*) FROM generations").fetchone() == (4,)
    check.close()


def test_run_initialises_an_empty_file_and_keeps_soakgate_databases(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock()
    db = tmp_path / "new.sqlite"
    db.write_bytes(b"")  # e.g. `touch new.sqlite`: no tables, nobody else's data
    args = ["run", "--target", mock.url, "--requests", "3", "--db", str(db), "--quiet"]
    assert soakgate(*args, cwd=tmp_path).returncode == 0
    assert soakgate(*args, cwd=tmp_path).returncode == 0  # a soakgate database: appended to
    with sqlite3.connect(db) as check:
        assert check.execute("SELECT COUNT(*) FROM generations").fetchone() == (6,)
    check.close()


def test_an_api_key_with_a_line_break_is_one_line_on_the_discovery_path(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock()
    for key in ("secret\r\nX-Injected: 1", "secret\n"):
        result = soakgate(
            "run", "--target", mock.url, "--requests", "2", "--db", str(tmp_path / "r.sqlite"),
            "--quiet", env={"SOAKGATE_API_KEY": key}, cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 2
        assert "line break" in one_error_line(result)
        assert "secret" not in result.stderr  # the key is never echoed
    assert mock.ground_truth() == []


def _failing_campaign(folder: Path) -> Path:
    path = folder / "broken.toml"
    path.write_text(
        'name = "allfail"\ndevices = ["cpu:0"]\n\n[server]\n'
        'command = "/nonexistent/bin/server --port {port}"\nstartup_timeout = 10\n\n'
        '[[configs]]\nlabel = "eager"\nflags = ""\n\n[[configs]]\nlabel = "compiled"\n'
        'flags = ""\n\n[load]\nconcurrency = 2\nrequests = 5\n\n[guard]\ntelemetry = false\n'
    )
    return path


def test_a_campaign_whose_blocks_fail_prints_why_and_exits_1(tmp_path: Path) -> None:
    campaign = _failing_campaign(tmp_path)
    db = tmp_path / "c.sqlite"
    result = soakgate("campaign", str(campaign), "--db", str(db), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if " failed: " in line]
    assert len(lines) == 2, result.stdout
    for line, block in zip(lines, ("000-eager-r0", "001-compiled-r0"), strict=True):
        assert line.startswith(f"block allfail/{block} failed: ")
        assert "cannot run '/nonexistent/bin/server'" in line
    again = soakgate("campaign", str(campaign), "--db", str(db), "--resume", cwd=tmp_path)
    assert again.returncode == 1  # the campaign still has failed blocks
    assert again.stdout.count(" failed: cpu:0: cannot run") == 2


@pytest.mark.parametrize("content", ["empty", "no_sources"])
def test_audit_of_a_folder_with_nothing_to_scan_is_exit_2(content: str, tmp_path: Path) -> None:
    folder = tmp_path / "kernels"
    folder.mkdir()
    if content == "no_sources":
        (folder / "README.txt").write_text("the kernels live elsewhere\n")
        (folder / "notes.md").write_text("# notes\n")
    result = soakgate("audit", str(folder), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "nothing was scanned" in one_error_line(result)
    assert "no findings" not in result.stdout


def test_audit_of_python_files_without_custom_ops_says_so_and_exits_2(tmp_path: Path) -> None:
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "util.py").write_text("def add(a, b):\n    return a + b\n")
    result = soakgate("audit", str(folder), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no custom op" in one_error_line(result)


def test_a_bug_exits_2_with_its_traceback_never_the_finding_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An exception soakgate did not expect is a bug: the traceback is kept for the report, and
    the status is 2 (could not do its job), never 1, which a pipeline reads as a finding."""
    import soakgate.report.api
    from soakgate.cli.main import main

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(soakgate.report.api, "compare", broken)
    code = main(["compare", str(tmp_path / "x.sqlite"), "a", "b", "--fail-on-differ"])
    err = capsys.readouterr().err
    assert code == 2
    assert "ZeroDivisionError: a bug" in err and "internal error" in err.splitlines()[-1]
