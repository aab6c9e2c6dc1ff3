"""Reference scoring in `report` (table, JSON, HTML) and `compare --outcome suspect`, through the
CLI on a database of two soaks: a clean arm and one with fluent corruption."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from soakgate.mockserver.process import MockProcess
from tests.command_line import soakgate

# two soaks with calibrations, and an HTML report: ~1 min on a quiet machine, past the suite's
# 300 s on one loaded to 15-30
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

SCORING = ("--false-flag-rate", "0.01", "--calibration", "500", "--max-tokens", "32")


@pytest.fixture(scope="module")
def two_arms(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """eager: a clean mock; compiled: 15% fluent corruption; both scored under a third mock.

    Each arm is three runs (400 + 300 + 300 requests): replicate blocks, which the verdict
    judges by a t over block counts. One run per arm would be judged INDETERMINATE whenever its
    correlation check fires by chance (about a third of the time at these counts: it withholds
    at level 0.3 when failures are sparse), and a test of the verdict's machinery must not
    depend on that draw. Simulated on this design (stats.verdict.decide, 2,000 pairs at 1.5%
    against 15%): DIFFER in 2,000.
    """
    folder = tmp_path_factory.mktemp("arms")
    db = folder / "arms.sqlite"
    with MockProcess(["--seed", "5"]) as clean, MockProcess(
        ["--seed", "3", "--fluent-rate", "0.15"]
    ) as fluent, MockProcess() as reference:  # fmt: skip
        for label, mock in (("eager", clean), ("compiled", fluent)):
            for requests in ("400", "300", "300"):
                result = soakgate(
                    "run", "--target", f"gpu0={mock.url}", "--label", label, "--score-reference",
                    reference.url, "--requests", requests, *SCORING, "--db", str(db), "--quiet",
                    "--no-watch-metrics", cwd=folder, timeout=900,
                )  # fmt: skip
                assert result.returncode == 0, result.stderr
    return db


def _suspects(db: Path) -> dict[str, tuple[int, int]]:
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT label, SUM(suspect), COUNT(suspect) FROM generations GROUP BY label"
        ).fetchall()
    return {label: (int(s), int(n)) for label, s, n in rows}


def test_report_counts_suspects_per_unit_with_exact_cis(two_arms: Path) -> None:
    counts = _suspects(two_arms)
    assert counts["eager"][1] == counts["compiled"][1] == 1000
    # At --false-flag-rate 0.01 a clean arm's share of false flags is itself a draw: the rate
    # of a threshold set on 500 samples is Beta(5, 496) (the typicality score is continuous, so
    # the whole rate is spent); 40 of 1,000 has probability 1e-4 under it.
    assert counts["compiled"][0] >= 25 and counts["eager"][0] <= 40
    assert counts["compiled"][0] > counts["eager"][0]
    with sqlite3.connect(two_arms) as connection:  # the mock reference's top alternatives
        (typical,) = connection.execute(
            "SELECT COUNT(*) FROM generations "
            "WHERE json_extract(details, '$.reference.typical') IS NOT NULL"
        ).fetchone()
    assert typical == 2000
    result = soakgate("report", str(two_arms), "--format", "json", cwd=two_arms.parent)
    assert result.returncode == 0, result.stderr
    units = {u["unit"]: u for u in json.loads(result.stdout)["probes"]["reference"]}
    for label, (suspects, scored) in counts.items():
        unit = units[f"{label}@gpu0"]
        assert (unit["suspect"], unit["scored"]) == (suspects, scored)
        assert unit["ci_low"] <= suspects / scored <= unit["ci_high"]
        assert unit["calibration"]["n"] == 500 and unit["unscored"] == {}
    worst = units["compiled@gpu0"]["worst"]
    assert worst and all(w["first"]["token"] and w["score"] > 7 for w in worst)
    table = soakgate("report", str(two_arms), cwd=two_arms.parent).stdout
    assert "reference scoring" in table and "compiled@gpu0" in table


def test_html_report_shows_the_distribution_and_highlights_the_implausible_token(
    two_arms: Path,
) -> None:
    page = two_arms.parent / "report.html"
    result = soakgate("report", str(two_arms), "--html", str(page), cwd=two_arms.parent)
    assert result.returncode == 0, result.stderr
    html = page.read_text()
    assert 'id="reference"' in html and "against its calibration" in html
    # The worst row is highlighted. The mock reference gives every token it did not expect the
    # same log-probability, so several rows can share the top score: any of them may be shown.
    with sqlite3.connect(two_arms) as connection:
        tied = connection.execute(
            "SELECT details FROM generations WHERE suspect = 1 AND label = 'compiled' "
            "AND reference_score = (SELECT MAX(reference_score) FROM generations "
            "WHERE suspect = 1 AND label = 'compiled')"
        ).fetchall()
    tokens = {json.loads(details)["reference"]["first"]["token"] for (details,) in tied}
    assert tokens and any(f"<mark>{token}</mark>" in html for token in tokens), tokens


def test_compare_outcome_suspect_uses_the_collapse_verdict_machinery(two_arms: Path) -> None:
    result = soakgate(
        "compare", str(two_arms), "eager", "compiled", "--outcome", "suspect",
        "--fail-on-differ", cwd=two_arms.parent,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    suspects = _suspects(two_arms)["compiled"][0]
    assert "outcome: suspect" in result.stdout and "verdict: DIFFER" in result.stdout
    assert "design: replicate blocks" in result.stdout  # what the fixture was built for
    assert f"B compiled@gpu0: {suspects} / 1,000" in result.stdout
    collapses = soakgate("compare", str(two_arms), "eager", "compiled", "--outcome", "collapse",
                         "--fail-on-differ", cwd=two_arms.parent)  # fmt: skip
    assert collapses.returncode == 0 and "verdict: DIFFER" not in collapses.stdout
    gate = soakgate("compare", str(two_arms), "eager", "compiled", "--fail-on-differ",
                    cwd=two_arms.parent)  # fmt: skip
    assert gate.returncode == 1, gate.stdout  # the gate (every outcome) sees the suspect rows
    assert "gate FAIL" in gate.stdout and "suspect" in gate.stdout


def test_compare_outcome_suspect_without_scoring_is_one_line(tmp_path: Path) -> None:
    with MockProcess() as mock:
        soakgate("run", "--target", mock.url, "--requests", "20", "--db", str(tmp_path / "x.db"),
                 "--quiet", "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
    result = soakgate("compare", str(tmp_path / "x.db"), "default", "default", "--outcome",
                      "suspect", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "reference scoring" in result.stderr
