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
    printed = _printed(argv, capsys)
    if name.startswith("export"):  # every row's failed checks are exported now (issue 29)
        printed = _without_checks(name, printed)
    text = normalised(name, printed, db, plan)
    expected = (EXPECTED / expected_name(name)).read_text()
    if name.startswith("compare"):  # the gate over every outcome opens it now (issue 25)
        blocks = text.split("\n\n")
        gates = [b for b in blocks if b.startswith("gate (every outcome of B against A")]
        assert len(gates) == 1
        text = "\n\n".join(b for b in blocks if b not in gates)
        # the differential comparison of two arms, each against its reference, is judged now
        # even where a reference's baseline diverged (each is judged against its reference's
        # own divergence instead: issue 25)
        text, expected = _differential_verdicts(text, expected)
        text = _without_latency(text)  # each comparison's latencies are new (issue 30)
    if name == "report.csv":  # every outcome's columns follow the unit's own (issue 25)
        width = len(expected.splitlines()[0].split(","))
        text = "\n".join(_first_columns(line, width) for line in text.splitlines()) + "\n"
    assert text == expected


def _without_checks(name: str, text: str) -> str:
    """An export with its `checks` column (empty on every row of this database) taken out, as
    the exports were before it existed."""
    import csv
    import io

    if name == "export.csv":
        rows = list(csv.reader(io.StringIO(text)))
        where = rows[0].index("checks")
        assert all(row[where] == "[]" for row in rows[1:]), {row[where] for row in rows[1:]}
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(
            [value for i, value in enumerate(row) if i != where] for row in rows
        )
        return out.getvalue()
    lines = []
    for line in text.splitlines():
        row = json.loads(line)
        assert row.pop("checks") == []
        lines.append(json.dumps(row, default=str) + "\n")
    return "".join(lines)


UNINFORMATIVE = "    differential verdict: UNINFORMATIVE, no finding ({}: uninformative: " + (
    "reference baseline: 2/8 pairs diverged, 1 lost to errors (reference not deterministic))"
)


def _differential_verdicts(text: str, expected: str) -> tuple[str, str]:
    """Both texts with the differential verdict line that issue 25 changed taken out: it was
    UNINFORMATIVE, and is now the comparison's own verdict."""
    old = next((UNINFORMATIVE.format(arm) for arm in ("graph", "graph@gpu0")
                if UNINFORMATIVE.format(arm) in expected), None)  # fmt: skip
    if old is None:
        return text, expected
    lines = text.splitlines(keepends=True)
    (judged,) = [i for i, line in enumerate(lines) if line.startswith("    differential verdict:")]
    assert "UNINFORMATIVE" not in lines[judged]
    del lines[judged]
    return "".join(lines), expected.replace(old + "\n", "")


def _without_latency(text: str) -> str:
    """The text without each comparison's latency block (its title line and the measures under
    it), which the row-object analysis did not print."""
    kept, inside = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith("  latency, "):
            inside = True
            continue
        if inside and line.startswith("    "):
            continue
        inside = False
        kept.append(line)
    return "".join(kept)


def _first_columns(line: str, width: int) -> str:
    import csv
    import io

    (cells,) = csv.reader([line])
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(cells[:width])
    return buffer.getvalue()


@pytest.mark.parametrize("name", [n for n in COMMANDS if n.endswith(".json")])
def test_report_json_is_what_the_row_object_analysis_printed(
    name: str, golden: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    db, plan = golden
    argv = [part.format(db=db, plan=plan) for part in COMMANDS[name]]
    document = json.loads(_printed(argv, capsys))
    expected = json.loads((EXPECTED / name).read_text())
    # The verdicts on top are new (issue 15), and the replayed collapses among the probes (issue
    # 19, none here); every outcome per unit and the gates (issue 25); the rate against uptime
    # (issue 26); the latency per unit (issue 30); every key the report had is unchanged.
    assert set(document) - set(expected) == {
        "comparisons", "no_comparison", "gates", "outcomes", "uptime", "latency"
    }  # fmt: skip
    assert document["probes"].pop("replays") == []
    assert document["probes"].pop("reference") == []  # reference scoring (issue 17), none here
    assert document["probes"].pop("searches") == []  # configuration searches (issue 33), none
    outcome_columns = {"judged_requests", "server_errors", "crashes", "crashes_per_hour",
                       "requests_lost_to_crashes", "suspect", "scored", "divergent", "compared",
                       "any_failure", "crosstalk", "checked", "invalid_structure",
                       "structure_judged", "inconsistent", "numbers_judged", "twin_mismatch",
                       "twins_judged"}  # fmt: skip
    for unit in document["units"]:
        assert set(unit) - set(expected["units"][0]) == outcome_columns
        for key in outcome_columns:
            unit.pop(key)
    for item in document["probes"]["differential"]:  # judged against the reference's own now
        item.pop("verdict")
        item.pop("informative")
    for item in expected["probes"]["differential"]:
        item.pop("verdict")
        item.pop("informative")
    assert {key: document[key] for key in expected} == expected


def test_parquet_export_is_what_the_row_object_export_wrote(
    golden: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    import hashlib

    import pyarrow.parquet as pq

    db, plan = golden
    out = plan.parent / "golden.parquet"
    _printed(["export", str(db), "--format", "parquet", "--out", str(out)], capsys)
    table = pq.read_table(out)
    assert table.column("checks").to_pylist() == [[]] * table.num_rows  # new in issue 29
    rows = "\n".join(
        json.dumps(r, sort_keys=True, default=str) for r in table.drop(["checks"]).to_pylist()
    )
    digest = hashlib.sha256(rows.encode()).hexdigest() + "\n"
    assert digest == (EXPECTED / "export.parquet.sha256").read_text()
