"""`soakgate import` checks a sidecar whole before it stores anything: every field of every
record against the schema (type and range), rows of a run the file does not name, a database
given in its place; a bad file is one line naming its line, exit 2, and no database is created
or changed. A good one loads exactly, and a second import adds nothing."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.cli.helpers import one_error_line, sha256, soakgate

from soakgate.mockserver.process import MockProcess
from soakgate.store import open_analysis
from soakgate.store.unstored import Sidecar


@pytest.fixture(scope="module")
def soaked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("import")
    with MockProcess(["--seed", "6", "--collapse-rate", "0.3", "--fault-rate", "http_500=0.1"]) as mock:  # fmt: skip
        done = soakgate("run", "--target", f"gpu0={mock.url}", "--label", "compiled",
                        "--requests", "30", "--max-tokens", "16", "--db", "soak.sqlite",
                        "--quiet", "--no-watch-metrics", cwd=folder)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return folder / "soak.sqlite"


@pytest.fixture
def sidecar(soaked: Path, tmp_path: Path) -> Path:
    """The soak's rows as the sidecar a failed database leaves (the production writer)."""
    store = open_analysis(soaked)
    try:
        (run,) = store.runs()
        generations, events = list(store.generations()), store.events()
    finally:
        store.close()
    writer = Sidecar(tmp_path / "lost.sqlite", run, fallbacks=[])
    writer(generations, events)
    writer.write_run(run)
    writer.close()
    assert writer.path is not None
    return writer.path


def _rows(db: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        return check.execute("SELECT request_id, seq, text, details FROM generations ORDER BY seq").fetchall()  # fmt: skip


def test_a_sidecar_loads_exactly_and_twice_adds_nothing(
    soaked: Path, sidecar: Path, tmp_path: Path
) -> None:
    for _ in range(2):
        done = soakgate("import", "new.sqlite", str(sidecar), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert "imported 0 generations (30 already present)" in done.stdout
    assert _rows(tmp_path / "new.sqlite") == _rows(soaked)


def _edit(path: Path, kind: str, change: Callable[[dict[str, Any]], None]) -> int:
    """Change the first record of `kind` in a sidecar; returns its line number."""
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines[1:], start=2):
        record = json.loads(line)
        if kind in record:
            change(record[kind])
            lines[number - 1] = json.dumps(record)
            path.write_text("\n".join(lines) + "\n")
            return number
    raise AssertionError(f"no {kind} record")


CASES: dict[str, tuple[str, Callable[[dict[str, Any]], None], str]] = {
    "seq as text": ("generation", lambda g: g.update(seq="abc"), "'seq' must be an integer"),
    "seq past 64 bits": ("generation", lambda g: g.update(seq=2**64), "'seq' must be an integer"),
    "incarnation past 64 bits": (
        "generation", lambda g: g.update(incarnation=2**70), "'incarnation' must be"),
    "text as a number": ("generation", lambda g: g.update(text=12345), "'text' must be a string"),
    "details as a list": ("generation", lambda g: g.update(details=[1, 2]), "'details' must be an object"),
    "token ids as a string": (
        "generation", lambda g: g.update(token_ids="1,2,3"), "'token_ids' must be a list"),
    "an unknown field": ("generation", lambda g: g.update(colour="red"), "no field 'colour'"),
    "a missing field": ("generation", lambda g: g.pop("request_id"), "'request_id' is missing"),
    "an unknown error class": (
        "generation", lambda g: g.update(error_class="gremlins"), "a known error class"),
    "a row of another run": (
        "generation", lambda g: g.update(run_id="elsewhere"), "a row of run 'elsewhere'"),
    "an event of another run": ("event", lambda e: e.update(run_id="elsewhere"), "a row of run 'elsewhere'"),
    "a started_at that is no time": (
        "generation", lambda g: g.update(started_at=float("nan")), "'started_at' must be a time"),
    "a run status": ("run", lambda r: r.update(status="exploded"), "'status' must be a run status"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_field_is_one_line_naming_its_line_and_nothing_is_created(
    sidecar: Path, tmp_path: Path, case: str
) -> None:
    kind, change, message = CASES[case]
    number = _edit(sidecar, kind, change)
    done = soakgate("import", "new.sqlite", str(sidecar), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_error_line(done)
    assert f"{sidecar}:{number}:" in line and message in line, line
    assert not (tmp_path / "new.sqlite").exists()


def test_a_bad_line_late_in_the_file_leaves_an_existing_database_unchanged(
    soaked: Path, sidecar: Path, tmp_path: Path
) -> None:
    lines = sidecar.read_text().splitlines()
    last = json.loads(lines[-2])  # the last generation or event, after every other row
    (kind,) = last
    last[kind]["run_id"] = 7
    lines[-2] = json.dumps(last)
    sidecar.write_text("\n".join(lines) + "\n")
    db = tmp_path / "kept.sqlite"
    db.write_bytes(soaked.read_bytes())
    before = sha256(db)
    done = soakgate("import", str(db), str(sidecar), cwd=tmp_path)
    assert done.returncode == 2 and f":{len(lines) - 1}:" in one_error_line(done)
    assert sha256(db) == before


def test_a_value_only_a_server_sends_is_stored_repaired_as_in_a_soak(
    sidecar: Path, tmp_path: Path
) -> None:
    """A usage count past 64 bits and a token id past 32 bits are what a server sent: the row is
    stored with them repaired and the raw values kept (store.repair), not refused."""
    _edit(sidecar, "generation", lambda g: g.update(prompt_tokens=2**64, token_ids=[1, 2**40]))
    done = soakgate("import", "new.sqlite", str(sidecar), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(f"file:{tmp_path / 'new.sqlite'}?mode=ro", uri=True) as check:
        (details,) = check.execute(
            "SELECT details FROM generations WHERE json_extract(details, '$.unstorable') "
            "IS NOT NULL").fetchone()  # fmt: skip
    assert str(2**64) in details


def test_a_database_given_as_the_sidecar_is_named_as_such(soaked: Path, tmp_path: Path) -> None:
    done = soakgate("import", "new.sqlite", str(soaked), cwd=tmp_path)
    assert done.returncode == 2
    line = one_error_line(done)
    assert "is an SQLite database, not a file of unstored rows" in line and "codec" not in line
    assert not (tmp_path / "new.sqlite").exists()


def test_import_and_replay_refuse_a_foreign_database_without_naming_options_they_lack(
    sidecar: Path, tmp_path: Path
) -> None:
    from tests.cli.helpers import foreign_database

    db = foreign_database(tmp_path / "bookmarks.sqlite")
    before = sha256(db)
    for argv in (("import", str(db), str(sidecar)),
                 ("replay", str(db), "--collapsed", "--target", "http://127.0.0.1:9")):  # fmt: skip
        done = soakgate(*argv, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        line = one_error_line(done)
        assert "is not a soakgate database (it holds bookmarks)" in line, line
        assert "--allow-foreign-tables" not in line and "--db" not in line, line
    run = soakgate("run", "--target", "http://127.0.0.1:9", "--requests", "1", "--db", str(db),
                   cwd=tmp_path)  # fmt: skip
    assert run.returncode == 2 and "--allow-foreign-tables" in one_error_line(run)
    assert sha256(db) == before


@pytest.mark.parametrize("kind", ["generation", "run", "event"])
def test_the_sidecar_schema_checks_every_field_a_record_has(kind: str) -> None:
    # A field added to a record (gateway_retries was) must be added to the import's checks,
    # or every sidecar a soak writes from then on is refused on import.
    import dataclasses

    from soakgate.records import Event, Generation, Run
    from soakgate.store.sidecar_schema import EVENT, GENERATION, RUN

    record, schema = {"generation": (Generation, GENERATION), "run": (Run, RUN),
                      "event": (Event, EVENT)}[kind]  # fmt: skip
    assert {f.name for f in dataclasses.fields(record)} == set(schema)
