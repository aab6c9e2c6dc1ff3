"""The HTML report in a real headless Chromium: it renders, logs no error, and runs no injected
script. Skips when Chromium is absent (`apt-get install -y chromium`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.report.chromium import Chromium, find_chromium
from tests.report.synth import add_run, bernoulli
from tests.report.test_html import PAYLOAD, hostile_store
from tests.report.test_probes import look_events, spec_events, sweep_store

from soakgate.report.analyze import analyze
from soakgate.report.api import default_comparisons
from soakgate.report.html import render_html
from soakgate.report.model import ClusteringOptions

pytestmark = pytest.mark.browser

PROBES = {
    "title": "document.title",
    "scripts": "document.querySelectorAll('script').length",
    "handlers": "document.querySelectorAll('[onerror],[onload]').length",
    "summary_rows": "document.querySelectorAll('#summary-table tbody tr').length",
    "figures": "[...document.images].filter(i => i.complete && i.naturalWidth > 100).length",
    "images": "document.images.length",
    "exemplar": "document.querySelector('pre.generation').textContent",
    "pwned": "window.pwned === true",
}


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    binary = find_chromium()
    if binary is None:
        pytest.skip("chromium not installed (Debian: apt-get install -y chromium)")
    chromium = Chromium(binary)
    yield chromium
    chromium.stop()


def test_report_renders_without_errors_and_runs_no_injected_script(
    browser: Chromium, tmp_path: Path
) -> None:
    options = ClusteringOptions(gap_permutations=49, hmm_replicates=0)
    analysis = analyze(hostile_store(), options)
    page = tmp_path / "report.html"
    page.write_text(render_html(analysis, default_comparisons(analysis, options), title="safe"))
    result = browser.load(page.as_uri(), PROBES)
    assert result.problems == []
    values = result.values
    assert values["title"] == "safe" and values["pwned"] is False
    assert values["scripts"] == 0 and values["handlers"] == 0
    assert values["summary_rows"] == len(analysis.units)
    assert values["images"] == values["figures"] == 5  # forest, two timelines, throughput, latency
    assert values["exemplar"].startswith(PAYLOAD)  # shown as text, verbatim


def test_probe_sections_render_without_errors(browser: Chromium, tmp_path: Path) -> None:
    store = sweep_store()
    divergence = {i: (i % 7 if i % 5 == 0 else -1) for i in range(0, 400, 2)}
    add_run(store, "graph", "gpu1", bernoulli(400, 0.0, 9), run_id="graph-gpu1",
            events=[*spec_events("graph-gpu1", "gpu1"), *look_events("graph-gpu1")],
            divergence=divergence)  # fmt: skip
    options = ClusteringOptions(gap_permutations=0, hmm_replicates=0)
    analysis = analyze(store, options, clustering=False)
    page = tmp_path / "probes.html"
    page.write_text(render_html(analysis, title="probes"))
    probes = {
        **PROBES,
        "sections": "['differential', 'sweeps', 'spec-decode', 'spec-collapses', 'looks']"
        ".filter(id => document.getElementById(id)).length",
        "look_rows": "document.querySelectorAll('#looks-table tbody tr').length",
    }
    result = browser.load(page.as_uri(), probes)
    assert result.problems == []
    values = result.values
    assert values["pwned"] is False and values["scripts"] == 0 and values["handlers"] == 0
    assert values["sections"] == 5 and values["look_rows"] == 2
    # forest, two timelines, throughput, the sweep and one acceptance plot: all decoded
    assert values["images"] == values["figures"] == 7  # and the latency distributions


def test_harness_sees_script_execution_and_console_errors(
    browser: Chromium, tmp_path: Path
) -> None:
    # The same payload, unescaped and without a CSP: the probes above must be able to fail.
    page = tmp_path / "unsafe.html"
    page.write_text(
        f"<html><body>{PAYLOAD}<script>window.pwned = true; console.error('boom')</script>"
    )
    result = browser.load(page.as_uri(), PROBES)
    assert result.values["title"] == "pwned" and result.values["pwned"] is True
    assert any("boom" in p for p in result.problems)


@pytest.mark.slow
def test_a_million_generation_report_renders_with_the_verdict_in_the_first_screen(
    browser: Chromium, tmp_path: Path
) -> None:
    from bench.reportdb import build_database
    from tests.cli.helpers import soakgate

    db, page = tmp_path / "million.sqlite", tmp_path / "million.html"
    build_database(db, 1_000_000)
    done = soakgate("report", str(db), "--html", str(page), "--no-clustering", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert page.stat().st_size < 5_000_000
    result = browser.load(page.as_uri(), {
        **PROBES,
        "verdict": "(() => { const r = document.querySelector('#verdict-table .verdict-line')"
                   ".getBoundingClientRect(); return [r.top, r.bottom, r.height]; })()",
        "screen": "[window.innerWidth, window.innerHeight]",
        "word": "document.querySelector('#verdict-table .verdict-line td').textContent",
        "sideways": "document.documentElement.scrollWidth > window.innerWidth",
    })  # fmt: skip
    assert result.problems == []
    values = result.values
    top, bottom, height = values["verdict"]
    assert height > 0 and top >= 0 and bottom <= values["screen"][1], values
    assert values["word"] in ("DIFFER", "no significant difference", "INDETERMINATE")
    assert values["images"] == values["figures"] == 7  # forest, four timelines, throughput, latency
    assert values["sideways"] is False and values["scripts"] == 0
