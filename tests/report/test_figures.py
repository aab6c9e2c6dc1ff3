"""Figures that do not grow with n: binned timelines (a lone collapse still marked, lines broken
at idle gaps, event labels that never overprint) and an honest throughput plot."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from tests.cli.helpers import soakgate
from tests.report.synth import add_run

from soakgate.records import Event, Generation, Run
from soakgate.report import bins, figures
from soakgate.report.analyze import analyze
from soakgate.report.model import ClusteringOptions
from soakgate.store import MemoryStore

FAST = ClusteringOptions(gap_permutations=0, hmm_replicates=0)


def test_a_single_collapse_among_many_requests_is_marked() -> None:
    store = MemoryStore()
    flags = [False] * 60_000
    flags[31_337] = True
    add_run(store, "quiet", "gpu0", flags, step_s=0.01)
    analysis = analyze(store, FAST, clustering=False)
    data = bins.timeline(analysis, analysis.units[0])
    assert data is not None and data.collapsed.sum() == 1 and len(data.edges) == 601
    figure = figures.timeline_figure(data)
    strip = figure.axes[0]
    red = [p for p in strip.patches if p.get_facecolor()[:3] == (214 / 255, 39 / 255, 40 / 255)]
    assert len(red) == 1
    heights = red[0].get_path().vertices[:, 1]
    assert heights.max() >= 0.65 + 0.4 * 0.35  # at least 40% of its row, though 1 in 60,000


def test_the_rolling_rate_breaks_at_the_idle_gap_between_blocks() -> None:
    store = MemoryStore()
    burst = [i % 9 == 0 for i in range(2000)]
    add_run(store, "blocks", "gpu0", burst, run_id="block-1", campaign="c")
    add_run(store, "blocks", "gpu0", burst, run_id="block-2", campaign="c",
            start=1_700_000_000.0 + 3600)  # an hour idle between the blocks  # fmt: skip
    analysis = analyze(store, FAST, clustering=False)
    data = bins.timeline(analysis, analysis.units[0])
    assert data is not None
    first_end, second_start = 100 / 60, 3600 / 60  # minutes
    centres = (data.edges[:-1] + data.edges[1:]) / 2
    inside_gap = (centres > first_end + 1) & (centres < second_start - 1)
    assert inside_gap.sum() > 100 and np.isnan(data.rolling[inside_gap]).all()
    assert not np.isnan(data.rolling[centres < first_end]).any()
    assert not np.isnan(data.rolling[centres > second_start + 1]).all()


def test_event_labels_never_overprint() -> None:
    store = MemoryStore()
    kinds = ["engine_fault", "restart", "backoff", "look"]
    events = [Event("r", 1_700_000_000.0 + 30 + 0.2 * i, kinds[i % 4], "gpu0") for i in range(40)]
    events += [Event("r", 1_700_000_000.0 + 31 + 0.5 * i, "retried", None) for i in range(8)]
    events += [Event("r", 1_700_000_000.0 + 100 + 4 * i, kind, "gpu0")
               for i, kind in zip(range(20), itertools.cycle(kinds), strict=False)]  # fmt: skip
    add_run(store, "busy", "gpu0", [i % 50 == 0 for i in range(4000)], run_id="r", events=events)
    analysis = analyze(store, FAST, clustering=False)
    data = bins.timeline(analysis, analysis.units[0])
    assert data is not None and sum(mark.count for mark in data.events) == len(events)
    assert len(data.events) <= bins.EVENT_SLOTS
    figure = figures.timeline_figure(data)
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    texts = figure.axes[1].texts
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert len(texts) >= 5
    for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2):
        assert not a.overlaps(b), (texts[i].get_text(), texts[j].get_text())
    labels = " ".join(t.get_text() for t in texts)
    assert "×" in labels or "+" in labels  # events close together share one label


def test_throughput_of_a_fully_collapsed_configuration_is_not_called_clean() -> None:
    store = MemoryStore()
    add_run(store, "healthy", "gpu0", [False] * 3000)
    add_run(store, "broken", "gpu1", [True] * 3000)  # every answer `!!!!`, at full speed
    analysis = analyze(store, FAST, clustering=False)
    data = bins.throughput(analysis)
    assert data is not None
    served = ~np.isnan(data.clean["broken@gpu1"])
    assert served.sum() > 50 and (data.clean["broken@gpu1"][served] == 0).all()
    assert data.collapsed["broken@gpu1"][served].max() > 0.5 * np.nanmax(
        data.clean["healthy@gpu0"]
    )  # degenerate output, shown as such, at the healthy one's speed
    assert "healthy@gpu0" not in data.collapsed
    labels = [line.get_label() for line in figures.throughput_figure(data).axes[0].lines]
    assert labels == ["healthy@gpu0 clean", "broken@gpu1 clean", "broken@gpu1 collapsed"]


@pytest.mark.slow
def test_the_html_report_does_not_grow_with_the_number_of_generations(tmp_path: Path) -> None:
    from bench.reportdb import build_database

    sizes = {}
    for n in (10_000, 150_000):
        db, page = tmp_path / f"{n}.sqlite", tmp_path / f"{n}.html"
        build_database(db, n)
        done = soakgate("report", str(db), "--html", str(page), "--no-clustering", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        sizes[n] = page.stat().st_size
    assert sizes[150_000] < 1.3 * sizes[10_000] and sizes[150_000] < 2_000_000, sizes


def test_throughput_of_steady_load_is_a_line_not_a_sawtooth() -> None:
    """8 workers in step, each generation 10 s long (32 tokens), for 600 s: the server makes
    25.6 tok/s all along. Counted where generations end, 5-second bins alternate between a spike
    (a wave of 8 ends) and a gap (none); spread over each generation's time in flight, every bin
    shows the steady 25.6 (issue 30 item 7)."""
    store = MemoryStore()
    start, workers, length, waves = 1_700_000_000.0, 8, 10.0, 60
    run = Run("steady", "steady", ["gpu0"], start, load={}, status="completed",
              ended_at=start + waves * length)  # fmt: skip
    store.save_run(run)
    rows = [
        Generation(run_id="steady", request_id=f"steady-{i}", target="gpu0", label="steady",
                   seq=i, prompt_id="p0", endpoint="completions", stream=True,
                   started_at=start + (i // workers) * length,
                   ended_at=start + (i // workers + 1) * length, completion_tokens=32,
                   error_class=None, text="fine", flags=[], scores={}, details={})
        for i in range(workers * waves)
    ]  # fmt: skip
    store.add(rows, [])
    data = bins.throughput(analyze(store, FAST, clustering=False))
    assert data is not None and len(data.centres) == bins.THROUGHPUT_BINS
    line = data.clean["steady@gpu0"]
    assert not np.isnan(line).any()
    assert np.allclose(line, workers * 32 / length, rtol=1e-6), line[:6]


def test_spread_puts_each_amount_where_it_was_in_flight() -> None:
    edges = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    starts, ends = np.array([0.5, 1.0, 3.5]), np.array([2.5, 1.0, 3.5])
    got = bins.spread(starts, ends, np.array([4.0, 7.0, 2.0]), edges)
    # 4 over [0.5, 2.5]: 1, 2, 1; an instant 7 at 1.0 and 2 at 3.5 where they end
    assert np.allclose(got, [1.0, 9.0, 1.0, 2.0])
    assert got.sum() == pytest.approx(13.0)
