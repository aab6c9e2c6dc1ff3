"""Analysis never writes to its input: report, compare and export open the database read-only,
work on archives and read-only media, and refuse what is not a soakgate database (exit 2, one
line, the file untouched)."""

from __future__ import annotations

import csv
import io
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.helpers import foreign_database, one_error_line, sha256, soakgate, tables

ANALYSES = (
    ("report", "{db}", "--no-clustering"),
    ("compare", "{db}", "eager", "graph", "--fail-on-differ"),
    ("export", "{db}", "--format", "csv"),
)


def _run(command: tuple[str, ...], db: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return soakgate(*(part.format(db=db) for part in command), cwd=cwd)


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(writable source folder, the same folder bind-mounted read-only); skipped where this
    process may not mount (the test needs root or CAP_SYS_ADMIN)."""
    source, mounted = tmp_path / "source", tmp_path / "ro"
    source.mkdir()
    mounted.mkdir()
    bind = subprocess.run(["mount", "--bind", str(source), str(mounted)], capture_output=True)
    if bind.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bind.stderr.decode().strip()}")
    try:
        remount = subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(mounted)], capture_output=True
        )
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remount.stderr.decode().strip()}")
        yield source, mounted
    finally:
        subprocess.run(["umount", str(mounted)], check=True)


def test_analysis_works_on_a_read_only_mount_of_a_finished_run(
    finished_db: Path, read_only_folder: tuple[Path, Path], tmp_path: Path
) -> None:
    source, mounted = read_only_folder
    shutil.copy(finished_db, source / "archive.sqlite")  # copied out of a finished run
    db = mounted / "archive.sqlite"
    digest = sha256(db)
    with pytest.raises(OSError):
        (mounted / "probe").write_text("x")  # really read-only, even for root
    report, compare, export = (_run(command, db, tmp_path) for command in ANALYSES)
    for result in (report, compare, export):
        assert "readonly" not in result.stderr and "Traceback" not in result.stderr
    assert report.returncode == 0 and "graph" in report.stdout and "eager" in report.stdout
    assert compare.returncode == 1 and "DIFFER" in compare.stdout  # graph collapses 30%
    assert export.returncode == 0
    assert len(list(csv.DictReader(io.StringIO(export.stdout)))) == 240  # every generation
    parquet = soakgate("export", str(db), "--format", "parquet", cwd=tmp_path)
    assert parquet.returncode == 0, parquet.stderr
    assert sha256(db) == digest
    assert sorted(p.name for p in mounted.iterdir()) == ["archive.sqlite"]


def test_analysis_leaves_a_copied_database_byte_for_byte_unchanged(
    finished_db: Path, tmp_path: Path
) -> None:
    db = tmp_path / "copy.sqlite"
    shutil.copy(finished_db, db)
    digest, before = sha256(db), tables(db)
    for command in ANALYSES[1:]:
        assert _run(command, db, tmp_path).returncode in (0, 1)
    html = soakgate("report", str(db), "--html", str(tmp_path / "r.html"), "--no-clustering",
                    cwd=tmp_path)  # fmt: skip
    assert html.returncode == 0, html.stderr
    assert (tmp_path / "r.html").stat().st_size > 10_000
    assert sha256(db) == digest and tables(db) == before


def test_a_schema_1_database_is_read_without_being_migrated(
    finished_db: Path, tmp_path: Path
) -> None:
    db = tmp_path / "v1.sqlite"
    shutil.copy(finished_db, db)
    with sqlite3.connect(db) as old:
        old.execute("ALTER TABLE generations DROP COLUMN attempts")
        old.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    old.close()
    digest = sha256(db)
    report, compare = (_run(command, db, tmp_path) for command in ANALYSES[:2])
    assert report.returncode == 0 and "graph" in report.stdout, report.stderr
    assert compare.returncode == 1, compare.stderr
    assert sha256(db) == digest
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        assert check.execute("SELECT value FROM meta").fetchone() == ("1",)


@pytest.mark.parametrize("kind", ["foreign", "empty", "text"])
def test_what_is_not_a_soakgate_database_is_refused_and_untouched(
    kind: str, tmp_path: Path
) -> None:
    db = tmp_path / "other.sqlite"
    if kind == "foreign":
        foreign_database(db)
    elif kind == "empty":
        db.write_bytes(b"")
    else:
        db.write_text("just some notes\n" * 20)
    digest, size = sha256(db), db.stat().st_size
    for command in ANALYSES if kind == "foreign" else ANALYSES[:1]:
        result = _run(command, db, tmp_path)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert "not a soakgate database" in one_error_line(result)
    assert sha256(db) == digest and db.stat().st_size == size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.sqlite"]


def test_text_that_is_not_utf8_is_named_malformed_without_the_garbage(
    finished_db: Path, tmp_path: Path
) -> None:
    """A damaged page can hand sqlite bytes that are not UTF-8 where text is stored: that is
    the database being malformed, in one line, not the garbage the column held."""
    db = tmp_path / "damaged.sqlite"
    shutil.copy(finished_db, db)
    with sqlite3.connect(db) as damage:
        damage.execute("UPDATE generations SET label = CAST(x'62a5a5ff' AS TEXT) "
                       "WHERE id = (SELECT MIN(id) FROM generations)")  # fmt: skip
    damage.close()
    for command in ANALYSES:
        result = _run(command, db, tmp_path)
        assert result.returncode == 2, (command, result.stdout[-500:], result.stderr)
        line = one_error_line(result)
        assert "malformed" in line and "\ufffd" not in line, line


def test_a_database_damaged_mid_file_is_one_line_and_exit_2(
    finished_db: Path, tmp_path: Path
) -> None:
    db = tmp_path / "damaged.sqlite"
    shutil.copy(finished_db, db)
    data = bytearray(db.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8192] = b"\xa5" * 8192  # two pages of generations overwritten
    db.write_bytes(bytes(data))
    for command in ANALYSES:
        result = _run(command, db, tmp_path)
        assert result.returncode == 2, (command, result.stdout[-500:], result.stderr)
        line = one_error_line(result)
        assert "malformed" in line or "not a database" in line, line


def test_a_schema_2_database_is_read_and_its_builtin_prompts_replayed_without_migrating(
    finished_db: Path, tmp_path: Path
) -> None:
    from soakgate.probes.replayable import known_prompts, stored_request
    from soakgate.prompts import builtin_prompts
    from soakgate.store import open_analysis

    db = tmp_path / "v2.sqlite"
    shutil.copy(finished_db, db)
    with sqlite3.connect(db) as old:
        old.execute("DROP TABLE prompts")
        old.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    old.close()
    digest = sha256(db)
    report, compare = (_run(command, db, tmp_path) for command in ANALYSES[:2])
    assert report.returncode == 0 and "graph" in report.stdout, report.stderr
    assert compare.returncode == 1, compare.stderr
    store = open_analysis(db)
    try:
        run = store.runs()[0]
        assert store.prompts(run.run_id) == {}  # schema 2 kept only prompt ids
        row = next(store.generations(run.run_id))
        prompt = stored_request(run, row, known_prompts(run, {})).prompt
        assert prompt in builtin_prompts() and prompt.prompt_id == row.prompt_id
    finally:
        store.close()
    assert sha256(db) == digest
    assert "prompts" not in tables(db)
