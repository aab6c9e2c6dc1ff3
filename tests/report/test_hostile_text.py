"""One rule for rendering: every string a user, a server or a database supplies (a label, a
target's name, a model, generated text) is shown as text in every format soakgate writes: the
terminal's tables and lines, JSON, CSV, Markdown, HTML (figures included), exports, the
comparison and a campaign's block table. A database is filled through the real CLI from the
hostile server's `markup` behaviour (tests/hostile.py), then every output is read back."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from markdown_it import MarkdownIt
from tests.campaign.helpers import write_campaign
from tests.cli.helpers import soakgate
from tests.hostile import MARKUP, HostileProcess

from soakgate.terminal import printable

ESC = "\x1b"
LABEL_A = "b31[graph]<b>x</b>"
LABEL_B = f"c[/tmp]:thumbs_up:$x$|{ESC}[31m*m*"
TARGET_A = "cfg[/tmp]<i>"
TARGET_B = "gpu[bold]$\\foo{"  # an unbalanced mathtext command: matplotlib raises on it
MODEL = "[red]m</td>"
HOSTILE = (LABEL_A, LABEL_B, TARGET_A, TARGET_B)
SHOWN = tuple(printable(s) for s in HOSTILE)
"""How each looks in a terminal: itself, with the escape character written as `\\x1b`."""
Outputs = dict[str, subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Outputs]]:
    """Two soaks through the real CLI against a server whose every answer is markup; yields
    the database and each soak's finished process (the first test checks them, so that the
    other formats are each tested on the database even where a soak failed)."""
    folder = tmp_path_factory.mktemp("hostile-text")
    server = HostileProcess("markup", folder / "server.jsonl")
    db = folder / "hostile.sqlite"
    outputs = {}
    try:
        for label, target in ((LABEL_A, TARGET_A), (LABEL_B, TARGET_B)):
            result = soakgate(
                "run", "--target", f"{target}={server.url}", "--label", label, "--model", MODEL,
                "--requests", "12", "--concurrency", "2", "--max-tokens", "32",
                "--store-text", "all", "--db", str(db), cwd=folder,
            )  # fmt: skip
            outputs[label] = result
        yield db, outputs
    finally:
        server.stop()


def stored(db: Path, sql: str) -> list[tuple[object, ...]]:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def test_the_soaks_store_every_row_and_print_the_names_as_text(
    hostile_db: tuple[Path, Outputs],
) -> None:
    db, soaks = hostile_db
    for soak in soaks.values():
        assert soak.returncode == 0 and "Traceback" not in soak.stderr, soak.stderr
    outputs = {label: soak.stdout for label, soak in soaks.items()}
    rows = stored(db, "SELECT label, target, text, collapsed, error_class FROM generations")
    assert len(rows) == 24
    assert {(r[0], r[1]) for r in rows} == {(LABEL_A, TARGET_A), (LABEL_B, TARGET_B)}
    assert all(str(r[2]).startswith(MARKUP) and r[4] is None for r in rows)
    assert sum(int(str(r[3])) for r in rows) == 12  # every other answer collapses
    assert SHOWN[0] in outputs[LABEL_A] and SHOWN[2] in outputs[LABEL_A]
    assert SHOWN[1] in outputs[LABEL_B] and SHOWN[3] in outputs[LABEL_B]
    assert ESC not in outputs[LABEL_B] and "\N{THUMBS UP SIGN}" not in outputs[LABEL_B]


def test_the_terminal_report_compare_and_collapse_show_the_names_as_text(
    hostile_db: tuple[Path, Outputs], tmp_path: Path
) -> None:
    db, _ = hostile_db
    report = soakgate("report", str(db), "--no-clustering", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    compare = soakgate("compare", str(db), LABEL_A, LABEL_B, cwd=tmp_path)
    assert compare.returncode == 0, compare.stderr
    (request_id,) = stored(db, f"SELECT request_id FROM generations WHERE collapsed = 1 AND label = '{LABEL_A}' LIMIT 1")[0]  # fmt: skip
    context = soakgate("report", str(db), "--collapse", str(request_id), cwd=tmp_path)
    assert context.returncode == 0, context.stderr
    for output in (report.stdout, compare.stdout):
        assert all(shown in output for shown in SHOWN), output
    assert f"({LABEL_A}@{TARGET_A}," in context.stdout
    for output in (report.stdout, compare.stdout, context.stdout):
        assert ESC not in output and "\N{THUMBS UP SIGN}" not in output


def test_json_and_csv_carry_the_names_exactly(
    hostile_db: tuple[Path, Outputs], tmp_path: Path
) -> None:
    db, _ = hostile_db
    document = json.loads(soakgate("report", str(db), "--no-clustering", "--format", "json", cwd=tmp_path).stdout)  # fmt: skip
    units = {(u["label"], u["target"]) for u in document["units"] if not u["aggregate"]}
    assert units == {(LABEL_A, TARGET_A), (LABEL_B, TARGET_B)}
    table = soakgate("report", str(db), "--no-clustering", "--format", "csv", cwd=tmp_path).stdout
    rows = list(csv.DictReader(io.StringIO(table)))
    assert {(r["label"], r["target"]) for r in rows if r["aggregate"] == "False"} == units


class _Tags(HTMLParser):
    """Every start tag and all the text of an HTML document."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(html: str) -> _Tags:
    parser = _Tags()
    parser.feed(html)
    return parser


def test_markdown_renders_every_name_as_its_text(
    hostile_db: tuple[Path, Outputs], tmp_path: Path
) -> None:
    db, _ = hostile_db
    result = soakgate("report", str(db), "--no-clustering", "--format", "markdown", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    html = MarkdownIt("commonmark").enable("table").render(result.stdout)
    page = parsed(html)
    assert set(page.tags) <= {"p", "strong", "table", "thead", "tbody", "tr", "th", "td", "ul", "li"}  # fmt: skip
    text = "".join(page.text)
    assert all(shown in text for shown in SHOWN), text
    assert "$" in result.stdout and "\\$" in result.stdout  # GitHub reads `$...$` as math


def test_the_html_report_shows_names_and_generated_text_as_text(
    hostile_db: tuple[Path, Outputs], tmp_path: Path
) -> None:
    db, _ = hostile_db
    page_path = tmp_path / "report.html"
    result = soakgate("report", str(db), "--no-clustering", "--html", str(page_path), cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    page = parsed(page_path.read_text())
    assert "script" not in page.tags and "i" not in page.tags
    text = "".join(page.text)
    assert LABEL_A in text and TARGET_A in text and MARKUP.split(" </td>")[0] in text


def test_exports_round_trip_every_string(hostile_db: tuple[Path, Outputs], tmp_path: Path) -> None:
    db, _ = hostile_db
    expected = sorted(stored(db, "SELECT request_id, label, target, text FROM generations"))
    for fmt in ("csv", "jsonl", "parquet"):
        out = tmp_path / f"export.{fmt}"
        result = soakgate("export", str(db), "--format", fmt, "--out", str(out), cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        if fmt == "csv":
            rows = list(csv.DictReader(io.StringIO(out.read_text(), newline="")))
        elif fmt == "jsonl":
            rows = [json.loads(line) for line in out.read_text().splitlines()]
        else:
            rows = pq.read_table(out).to_pylist()
        got = sorted((r["request_id"], r["label"], r["target"], r["text"]) for r in rows)
        assert got == expected, fmt


def test_a_campaign_prints_its_block_table_with_a_hostile_label(tmp_path: Path) -> None:
    label = "eager[graph]<b>x<b>"  # a campaign's names hold no / \\ or :
    path = write_campaign(tmp_path, {label: "--tokens-per-s 4000"}, requests=4, name="c[bold]")
    db = tmp_path / "campaign.sqlite"
    result = soakgate("campaign", str(path), "--db", str(db), cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr
    assert stored(db, "SELECT DISTINCT label FROM runs") == [(label,)]
    assert stored(db, "SELECT count(*) FROM generations") == [(8,)]
    assert "campaign c[bold]" in result.stdout
    assert result.stdout.count(label) >= 2, result.stdout  # the table's rows, one per block


def test_determinism_prints_hostile_target_names_as_text(tmp_path: Path) -> None:
    server = HostileProcess("markup", tmp_path / "server.jsonl")
    try:
        result = soakgate(
            "determinism", "--target", f"a[/x]={server.url}", "--target", f"b[bold]={server.url}",
            "--prompt-count", "2", cwd=tmp_path,
        )  # fmt: skip
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr
    assert "a[/x] vs b[bold]" in result.stdout
    assert len(server.seen()) > 0
