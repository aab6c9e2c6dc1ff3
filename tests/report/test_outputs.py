"""Report formats and exports read back to the numbers the model computed."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from soakgate.cli.main import main
from soakgate.report.api import load_analysis
from soakgate.report.model import ClusteringOptions
from soakgate.report.tables import render_csv, render_json, render_markdown, render_table
from soakgate.store import open_store


def test_json_and_csv_carry_every_unit(two_label_db: Path, fast: ClusteringOptions) -> None:
    analysis = load_analysis(two_label_db, fast)
    document = json.loads(render_json(analysis))
    rows = list(csv.DictReader(io.StringIO(render_csv(analysis))))
    assert len(document["units"]) == len(rows) == len(analysis.units) == 6
    for unit, from_json, from_csv in zip(analysis.units, document["units"], rows, strict=True):
        assert unit.rate is not None
        assert from_json["n"] == unit.n == int(from_csv["n"])
        assert from_json["ci_high"] == unit.rate.ci_high == float(from_csv["ci_high"])
        assert from_json["aggregate"] is unit.aggregate
        assert json.loads(from_csv["errors_by_class"]) == unit.errors_by_class
    bursty = document["units"][3]
    assert (bursty["label"], bursty["target"], bursty["clustered"]) == ("graph", "gpu0", True)


def test_table_and_markdown_mark_aggregates(two_label_db: Path, fast: ClusteringOptions) -> None:
    analysis = load_analysis(two_label_db, fast, clustering=False)
    markdown = render_markdown(analysis).splitlines()
    assert markdown[0] == "**Failures per unit**"  # every outcome first (issue 25)
    assert markdown[2].startswith("| unit | requests | server errors | crashes |")
    assert any(line.startswith("| label | target | n |") for line in markdown)
    assert sum("ALL (aggregate)" in line for line in markdown) == 2
    assert "ALL (aggregate)" in render_table(analysis, width=200)


def test_report_cli_formats_and_missing_db(
    two_label_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(two_label_db), "--format", "json", "--no-clustering"]) == 0
    assert len(json.loads(capsys.readouterr().out)["units"]) == 6
    assert main(["report", str(tmp_path / "absent.sqlite")]) == 2
    assert "no database at" in capsys.readouterr().err
    assert not (tmp_path / "absent.sqlite").exists()  # reading never creates a database


def test_export_round_trips_in_every_format(
    two_label_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(two_label_db)
    stored = list(store.generations())
    store.close()
    for fmt in ("parquet", "csv", "jsonl"):
        out = tmp_path / f"g.{fmt}"
        assert main(["export", str(two_label_db), "--format", fmt, "--out", str(out)]) == 0
        assert f"exported {len(stored)} generations" in capsys.readouterr().err
    table = pq.read_table(tmp_path / "g.parquet").to_pylist()
    lines = [json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    rows = list(csv.DictReader(io.StringIO((tmp_path / "g.csv").read_text())))
    assert len(table) == len(lines) == len(rows) == len(stored)
    first = stored[0]
    assert table[0]["request_id"] == lines[0]["request_id"] == rows[0]["request_id"]
    assert table[0]["scores"] == list(first.scores.items())
    assert lines[0]["flags"] == first.flags and json.loads(rows[0]["flags"]) == first.flags
    assert sum(r["collapsed"] for r in table) == sum(g.collapsed for g in stored)
    assert [r["error_class"] for r in lines if r["error_class"]] == ["timeout", "http_5xx"]


def test_export_parquet_without_out_writes_db_stem_parquet_here(
    two_label_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert main(["export", str(two_label_db), "--format", "parquet"]) == 0
    assert "to two.parquet" in capsys.readouterr().err
    assert pq.read_table(tmp_path / "two.parquet").num_rows == 12000
