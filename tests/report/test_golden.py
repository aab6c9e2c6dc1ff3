"""The analysis numbers do not depend on how the rows are read: on a fixed database, report,
compare, plan --pilot and export print what the row-object analysis printed (tests/report/golden/,
written before the columnar data path replaced it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.report.golden import (
    COMMANDS,
    EXPECTED,
    build,
    content_digest,
    expected_name,
    normalised,
)

from soakgate.cli.main import main


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The fixed database and its registered plan, checked to hold exactly what it held when
    the expected outputs were written."""
    folder = tmp_path_factory.mktemp("golden")
    db, plan = folder / "golden.sqlite", folder / "plan.toml"
    build(db, plan)
    assert content_digest(db) + "\n" == (EXPECTED / "content.sha256").read_text()
    return db, plan


def _printed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) in (0, 1)
    return capsys.readouterr().out


@pytest.mark.parametrize("name", [n for n in COMMANDS if not n.endswith(".json")])
def test_outputs_are_what_the_row_object_analysis_printed(
    name: str, golden: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    db, plan = golden
    argv = [part.format(db=db, plan=plan) for part in COMMANDS[name]]
    text = normalised(name, _printed(argv, capsys), db, plan)
    assert text == (EXPECTED / expected_name(name)).read_text()


@pytest.mark.parametrize("name", [n for n in COMMANDS if n.endswith(".json")])
def test_report_json_is_what_the_row_object_analysis_printed(
    name: str, golden: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    db, plan = golden
    argv = [part.format(db=db, plan=plan) for part in COMMANDS[name]]
    document = json.loads(_printed(argv, capsys))
    expected = json.loads((EXPECTED / name).read_text())
    # The verdicts on top are new (issue 15), the replayed collapses among the probes (issue
    # 19, none here), and the rate against uptime (issue 26); every key the report had is
    # unchanged.
    assert set(document) - set(expected) == {"comparisons", "no_comparison", "uptime"}
    assert document["probes"].pop("replays") == []
    assert document["probes"].pop("reference") == []  # reference scoring (issue 17), none here
    assert {key: document[key] for key in expected} == expected


def test_parquet_export_is_what_the_row_object_export_wrote(
    golden: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    import hashlib

    import pyarrow.parquet as pq

    db, plan = golden
    out = plan.parent / "golden.parquet"
    _printed(["export", str(db), "--format", "parquet", "--out", str(out)], capsys)
    rows = "\n".join(
        json.dumps(r, sort_keys=True, default=str) for r in pq.read_table(out).to_pylist()
    )
    digest = hashlib.sha256(rows.encode()).hexdigest() + "\n"
    assert digest == (EXPECTED / "export.parquet.sha256").read_text()
