"""The answer first: the terminal, Markdown, JSON and HTML reports open with one line per
comparison (the verdict, the rates, the ratio with its interval, the design), methodology
warnings beside; the comparisons section is a table; collapsed generations with no text say
what was flagged, and a unit's first `!!!!` is shown."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.cli.helpers import soakgate
from tests.report.synth import add_run, bernoulli

from soakgate.store import open_store


@pytest.fixture(scope="module")
def differ_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """eager (0.2%) and compiled (3%) on gpu0; compiled's first collapses are empty texts."""
    db = tmp_path_factory.mktemp("verdict") / "v.sqlite"
    store = open_store(db)
    add_run(store, "eager", "gpu0", bernoulli(6000, 0.002, 5), pause_at=3000, pause_s=120.0)
    flags = bernoulli(6000, 0.03, 6)
    first = [i for i, bad in enumerate(flags) if bad][:5]
    texts = {i: "" for i in first[:4]}  # collapsed to nothing: the `empty` detector's case
    add_run(store, "compiled", "gpu0", flags, start=1_700_010_000.0, texts=texts,
            flagged_by=dict.fromkeys(first[:4], "empty"))  # fmt: skip
    store.close()
    return db


def test_the_terminal_report_opens_with_the_verdict_and_the_warnings(
    differ_db: Path, tmp_path: Path
) -> None:
    done = soakgate("report", str(differ_db), "--no-clustering", cwd=tmp_path,
                    env={"COLUMNS": "100"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "verdict on collapses (every label against eager@gpu0):"
    assert lines[1].startswith("DIFFER: compiled@gpu0 vs eager@gpu0: ")
    verdict = " ".join(lines[1:4])
    assert re.search(r"ratio \d[\d.]* \[\d[\d.]*, \d[\d.]*\]", verdict), verdict
    assert "one run per arm" in verdict and "batch_means" in verdict
    table = next(i for i, line in enumerate(lines) if "soakgate report (n = answered" in line)
    warning = next(i for i, line in enumerate(lines) if line.startswith("warning: run"))
    assert warning < table and "idle gap" in lines[warning]
    assert all(len(line) <= 100 for line in lines)


def test_json_and_markdown_carry_the_verdicts(differ_db: Path, tmp_path: Path) -> None:
    done = soakgate("report", str(differ_db), "--format", "json", "--no-clustering", cwd=tmp_path)
    (comparison,) = json.loads(done.stdout)["comparisons"]
    assert comparison["verdict"] == "differ" and comparison["design"] == "one run per arm"
    assert comparison["ratio_ci"][0] > 1 and comparison["line"].startswith("DIFFER: ")
    markdown = soakgate("report", str(differ_db), "--format", "markdown", cwd=tmp_path).stdout
    assert markdown.startswith("**DIFFER: compiled@gpu0 vs eager@gpu0")


def test_the_html_report_opens_with_a_verdict_table_and_tabulates_comparisons(
    differ_db: Path, tmp_path: Path
) -> None:
    page = tmp_path / "r.html"
    done = soakgate("report", str(differ_db), "--html", str(page), "--no-clustering", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert html.index('id="verdict-table"') < html.index('id="summary-table"')
    top = html[
        html.index('id="verdict-table"') : html.index("</table>", html.index("verdict-table"))
    ]
    assert "DIFFER" in top and "compiled@gpu0 vs eager@gpu0" in top and "one run per arm" in top
    assert html.index('id="top-warnings"') < html.index('id="summary-table"')
    assert 'id="comparisons-table"' in html and '<pre class="comparison">' not in html


def test_empty_collapses_say_what_was_flagged_and_the_first_run_is_shown(
    differ_db: Path, tmp_path: Path
) -> None:
    page = tmp_path / "x.html"
    soakgate("report", str(differ_db), "--html", str(page), "--no-clustering", cwd=tmp_path)
    html = page.read_text()
    shown = re.findall(r'<pre class="generation">(.*?)</pre>', html, re.S)
    compiled = [text for text in shown if "!" in text or "empty text" in text]
    assert "(empty text; the server reported 32 tokens: flagged by empty)" in shown
    assert not [text for text in shown if text.strip() == ""]  # no blank grey boxes
    assert any(text.startswith("The answer is !!!!") for text in compiled[3:])


def test_no_verdict_says_why(tmp_path: Path) -> None:
    db = tmp_path / "one.sqlite"
    store = open_store(db)
    add_run(store, "only", "gpu0", bernoulli(500, 0.01, 3))
    store.close()
    done = soakgate("report", str(db), "--no-clustering", cwd=tmp_path)
    assert done.stdout.splitlines()[0] == "no verdict: one label (only): nothing to compare"
