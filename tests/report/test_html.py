"""The HTML report: self-contained, escaped, with every section present (no browser needed)."""

from __future__ import annotations

import re
from pathlib import Path

import markupsafe
from tests.report.synth import add_run, bernoulli, bursty

from soakgate.cli.main import main
from soakgate.records import Event
from soakgate.report.analyze import analyze
from soakgate.report.api import default_comparisons
from soakgate.report.html import render_html
from soakgate.report.model import ClusteringOptions
from soakgate.store import MemoryStore

PAYLOAD = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"


def hostile_store() -> MemoryStore:
    """Two labels; collapsed texts carry HTML/JS; a fault event of a kind nobody planned for."""
    store = MemoryStore()
    add_run(
        store,
        "eager",
        "gpu0",
        bernoulli(1500, 0.01, 1),
        texts={i: PAYLOAD + "!" * 90 for i in range(1500)},
    )
    fault = Event("graph-gpu0-1700001000", 1_700_001_020.0, "engine_fault", "gpu0",
                  {"message": "CUDA error: an illegal memory access", "exit_code": -6})  # fmt: skip
    odd = Event("graph-gpu0-1700001000", 1_700_001_030.0, "brand_new_kind", None, {"x": "<b>y</b>"})
    add_run(store, "graph", "gpu0", bursty(1500, 5, enter=0.01), start=1_700_001_000.0,
            events=[fault, odd])  # fmt: skip
    return store


def test_report_is_self_contained_and_escapes_model_text() -> None:
    page = render_html(
        analyze(hostile_store(), ClusteringOptions(gap_permutations=49, hmm_replicates=0))
    )
    assert "<script" not in page.lower() and 'onerror="' not in page
    assert str(markupsafe.escape(PAYLOAD)) in page
    assert "&lt;b&gt;y&lt;/b&gt;" in page  # event data escaped too
    # No network reference of any kind: every image is an inline data URI.
    assert not re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:|//)", page)
    # four figures, and the latency distributions (issue 30)
    assert re.findall(r"<img[^>]*src=\"([^\"]{0,26})", page) == ["data:image/svg+xml;base64,"] * 5
    assert "Content-Security-Policy" in page


def test_report_has_every_section() -> None:
    options = ClusteringOptions(gap_permutations=49, hmm_replicates=0)
    analysis = analyze(hostile_store(), options)
    page = render_html(analysis, default_comparisons(analysis, options))
    for anchor in ("summary-table", "forest-plot", "timelines", "throughput-plot", "events-table",
                   "exemplars", "comparisons"):  # fmt: skip
        assert f'id="{anchor}"' in page, anchor
    assert page.count('class="timeline wide"') == 2
    assert "engine_fault" in page and "brand_new_kind" in page and "illegal memory access" in page
    assert page.count('class="generation"') == 6  # three exemplars per unit


def test_report_cli_writes_html(tmp_path: Path, two_label_db: Path) -> None:
    out = tmp_path / "r.html"
    argv = ["report", str(two_label_db), "--html", str(out), "--hmm-replicates", "0"]
    assert main([*argv, "--gap-permutations", "49"]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "CLUSTERED" in page
