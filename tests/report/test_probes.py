"""The report shows what the probes stored: differential check, sweeps, spec-decode, looks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import markupsafe
import pytest
from tests.report.synth import add_run, bernoulli

from soakgate.load import LoadSpec
from soakgate.load.runner import SoakConfig, run_soak
from soakgate.mockserver.process import MockProcess
from soakgate.probes.soak import StandardProbes
from soakgate.probes.sweep import run_sweep
from soakgate.records import Event, Generation
from soakgate.report.analyze import analyze
from soakgate.report.api import compare, default_comparisons, load_analysis
from soakgate.report.html import render_html
from soakgate.report.model import ClusteringOptions
from soakgate.report.tables import render_json, render_markdown, render_table
from soakgate.stats.rates import summarize_rate
from soakgate.store import MemoryStore, open_analysis
from soakgate.targets import RequestSpec, TargetSpec

FAST = ClusteringOptions(gap_permutations=0, hmm_replicates=0)
HOSTILE = "<script>window.pwned=true</script>"


def _soak(db: Path, label: str, target: MockProcess, refs: list[MockProcess]) -> str:
    config = SoakConfig(
        probes=StandardProbes(),
        targets=[TargetSpec.parse(f"gpu0={target.url}")], label=label, db=db,
        request=RequestSpec(max_tokens=32, return_token_ids=True), load=LoadSpec(8, requests=200),
        references=[TargetSpec.parse(r.url) for r in refs], reference_fraction=0.5,
        baseline_prompts=4, watch_metrics=False,
    )  # fmt: skip
    return run_soak(config).run.run_id


def _stored(db: Path, label: str, target: str) -> list[Generation]:
    """The unit's rows as the store holds them (not as the analysis read them)."""
    store = open_analysis(db)
    try:
        return [g for g in store.generations() if (g.label, g.target) == (label, target)]
    finally:
        store.close()


@pytest.fixture(scope="module")
def differential_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    """compiled: perturbed target vs a clean reference; eager: clean vs itself; shaky: the
    perturbed target against a clean reference whose before-soak baseline also asked a
    nondeterministic second reference; twin: a target perturbed late, 1 time in 5, against a
    reference perturbed alike (two instances of one nondeterministic configuration). Yields the
    db and the number of compiled rows the mock perturbed among those compared."""
    db = tmp_path_factory.mktemp("diff") / "d.sqlite"
    fast = ("--tokens-per-s", "0")
    late = ("--perturb-rate", "0.2", "--perturb-from", "16")
    mocks = [MockProcess([*args, *fast]) for args in
             (("--seed", "3", "--perturb-rate", "0.2"), ("--seed", "4"),
              ("--seed", "6", "--perturb-rate", "1"), ("--seed", "8", *late),
              ("--seed", "9", *late))]  # fmt: skip
    try:
        with ThreadPoolExecutor(len(mocks)) as pool:  # each start waits for its ready line
            list(pool.map(MockProcess.start, mocks))
        perturbed, clean, shaky, twin, twin_reference = mocks
        _soak(db, "compiled", perturbed, [clean])
        _soak(db, "eager", clean, [clean])  # a deterministic server against itself
        _soak(db, "shaky", perturbed, [clean, shaky])
        _soak(db, "twin", twin, [twin_reference])
        truth = {row["request_id"]: row["perturbed"] > 0 for row in perturbed.ground_truth()}
    finally:
        for mock in mocks:
            mock.close()
    rows = _stored(db, "compiled", "gpu0")
    hits = sum(truth[g.request_id] for g in rows if g.reference_divergence is not None)
    yield db, hits


def test_differential_rate_matches_the_mocks_perturbations(
    differential_db: tuple[Path, int],
) -> None:
    db, perturbed = differential_db
    analysis = load_analysis(db, FAST, clustering=False)
    assert analysis.probes is not None
    found = {d.name: d for d in analysis.probes.differential}
    compiled, eager, shaky = found["compiled@gpu0"], found["eager@gpu0"], found["shaky@gpu0"]
    assert compiled.compared == sum(
        g.reference_divergence is not None for g in _stored(db, "compiled", "gpu0")
    )
    assert 60 < compiled.compared < 140 and compiled.divergent == perturbed > 0
    assert compiled.rate == summarize_rate(perturbed, compiled.compared)
    # a binomial draw (the compared rows depend on timing): judged at 1e-6, not at 5%
    wide = summarize_rate(perturbed, compiled.compared, confidence=1 - 1e-6)
    assert wide.ci_low <= 0.2 <= wide.ci_high
    assert compiled.informative and compiled.verdict.startswith("DIVERGES")
    assert compiled.median_position is not None and compiled.median_position >= 0
    assert eager.divergent == 0 and eager.informative and eager.verdict.startswith("no divergence")
    # A baseline in which a second reference diverged no longer makes the comparisons with the
    # first one uninformative (issue 25): they are judged against that reference's own repeats.
    assert shaky.baseline is not None and shaky.baseline.divergent > 0
    assert shaky.informative and shaky.verdict.startswith("DIVERGES"), shaky.verdict
    assert shaky.divergence is not None and shaky.divergence.own_source == "repeats"
    assert (shaky.divergence.own >= 0).sum() == 0  # the compared reference repeats itself
    # Two instances of one nondeterministic configuration diverge late, at one rate: no finding.
    twin = found["twin@gpu0"]
    assert twin.divergent > 0 and twin.verdict.startswith("no more divergence than"), twin.verdict
    assert twin.divergence is not None and (twin.divergence.own >= 0).sum() > 0
    assert twin.median_position is not None and twin.median_position >= 16


def test_differential_appears_in_every_output(differential_db: tuple[Path, int]) -> None:
    db, _ = differential_db
    analysis = load_analysis(db, FAST, clustering=False)
    document = json.loads(render_json(analysis))
    rows = {row["unit"]: row for row in document["probes"]["differential"]}
    assert rows["shaky@gpu0"]["informative"] is True
    assert rows["compiled@gpu0"]["baseline"]["divergent"] == 0
    assert rows["twin@gpu0"]["verdict"].startswith("no more divergence than")
    text, markdown = render_table(analysis, width=200), render_markdown(analysis)
    for output in (text, markdown):
        assert "differential check" in output and "no more divergence than" in output
        assert "DIVERGES" in output
    page = render_html(analysis, default_comparisons(analysis, FAST))
    assert 'id="differential-table"' in page
    table = page[page.index('id="differential-table"') :]
    twin_row = table[table.index("<td>twin@gpu0</td>") :].split("</tr>")[0]
    assert "no more divergence than" in twin_row and "DIVERGES" not in twin_row
    assert "differential check (greedy rows" in page  # the comparisons carry it too


def test_compare_divergence_is_judged_whatever_a_second_reference_did(
    differential_db: tuple[Path, int],
) -> None:
    db, _ = differential_db
    differ = compare(db, "eager", "compiled", options=FAST).text
    # ~20 divergences against 0 (how many, and where, varies with the soak's timing): DIFFER,
    # unless the long-range check, judged at its sparse level with so few events
    # (stats.dependence.check_level; it fires in ~30% of such runs by design), withholds it as
    # INDETERMINATE -- never "no difference", never uninformative
    line = next(x for x in differ.splitlines() if "differential verdict:" in x)
    withheld = "<= 0.3): one run per arm cannot resolve this dependence" in differ
    assert line.strip().startswith(
        "differential verdict: INDETERMINATE" if withheld else "differential verdict: DIFFER"
    ), differ
    shaky = compare(db, "eager", "shaky", options=FAST).text
    assert "UNINFORMATIVE" not in shaky and "differential verdict:" in shaky
    family = compare(db, None, None, baseline="eager", options=FAST).text
    assert family.count("differential verdict:") == 3


def sweep_store() -> MemoryStore:
    """A synthetic sweep with known throughput: 800, 1600, 3000, 3100 tok/s at 1, 2, 4, 8."""
    store = MemoryStore()
    start = 1_700_000_000.0
    for level, rate in ((1, 800.0), (2, 1600.0), (4, 3000.0), (8, 3100.0)):
        step = 32 / rate  # 32 tokens per request
        load = {"concurrency": level, "sweep": {"id": "sw1", "levels": [1, 2, 4, 8]}}
        add_run(store, "sweep", "gpu0", bernoulli(200, 0.02 * (level == 8), level),
                run_id=f"level-{level}", start=start, step_s=step, latency_s=step,
                load=load)  # fmt: skip
        start += 100
    return store


def test_sweep_levels_and_saturation_from_stored_runs() -> None:
    analysis = analyze(sweep_store(), FAST, clustering=False)
    assert analysis.probes is not None
    (sweep,) = analysis.probes.sweeps
    assert [lv.concurrency for lv in sweep.levels] == [1, 2, 4, 8]
    speeds = [lv.tokens_per_s for lv in sweep.levels]
    assert speeds == pytest.approx([800, 1600, 3000, 3100], rel=1e-6)
    # 4 -> 8 gains 3% (< 10%): saturated at 4.
    assert sweep.saturation == 4
    top = sweep.levels[-1]
    assert top.collapses > 0 and top.collapse_rate.ci_low < top.collapse_rate.rate
    rows = json.loads(render_json(analysis))["probes"]["sweeps"][0]
    assert rows["saturation_point"] == 4 and len(rows["levels"]) == 4
    assert "saturation point (throughput gain < 10%): concurrency 4" in render_table(
        analysis, width=200
    )
    page = render_html(analysis)
    assert 'id="sweep-table-1"' in page and page.count('class="sweep wide"') == 1


def test_spec_decode_acceptance_and_collapses_in_the_report(tmp_path: Path) -> None:
    # A real sweep against the mock's speculative-decoding counters: acceptance 39% at 2 in
    # flight, 10% past its collapse point of 8.
    with MockProcess(["--spec-decode", "--spec-collapse-at", "8", "--tokens-per-s", "400"]) as m:
        base = SoakConfig(
            probes=StandardProbes(),
            targets=[TargetSpec.parse(f"gpu1={m.url}")], label="spec", db=tmp_path / "s.sqlite",
            request=RequestSpec(max_tokens=16), load=LoadSpec(1, requests=1),
            metrics_interval_s=0.1,
        )  # fmt: skip
        run_sweep(base, [2, 16], requests_per_level=32)
    store_path = tmp_path / "s.sqlite"
    analysis = load_analysis(store_path, FAST, clustering=False)
    assert analysis.probes is not None
    (sweep,) = analysis.probes.sweeps
    assert sweep.acceptance_collapses == [16]
    series = analysis.probes.spec
    assert len(series) == 2 and all(s.target == "gpu1" for s in series)
    assert min(series[0].accepted) > 0.3 > 0.15 > max(series[1].accepted)
    assert "% (COLLAPSED)" in render_table(analysis, width=200)
    page = render_html(analysis)
    assert page.count('class="acceptance wide"') == 1  # one plot per target
    assert 'id="spec-collapses"' not in page  # no collapse event within a run: none claimed


def spec_events(run_id: str, target: str) -> list[Event]:
    """Four watch windows, acceptance falling from 41% to 9%, and the collapse it flagged."""
    windows = [(0.40, 900.0), (0.41, 950.0), (0.10, 300.0), (0.09, 290.0)]
    events = [
        Event(run_id, 1_700_000_001.0 + i, "spec_decode", target,
              {"acceptance": a, "tokens_per_s": v, "start": 1_700_000_000.0 + i})
        for i, (a, v) in enumerate(windows)
    ]  # fmt: skip
    reason = f"acceptance 9% < 50% of best 41% {HOSTILE}"
    collapse = {"reason": reason, "start": 1_700_000_003.0}
    return [*events, Event(run_id, 1_700_000_005.0, "spec_decode_collapse", target, collapse)]


def test_spec_collapse_events_are_listed_prominently_and_escaped() -> None:
    store = MemoryStore()
    run_id = "spec-gpu0-1700000000"
    events = spec_events(run_id, "gpu0")
    add_run(store, "spec", "gpu0", bernoulli(100, 0.0, 1), events=events)
    analysis = analyze(store, FAST, clustering=False)
    assert analysis.probes is not None
    (collapse,) = analysis.probes.spec_collapses
    assert collapse.at == 1_700_000_003.0 and collapse.label == "spec"
    assert f"ALERT: run {run_id} (spec@gpu0): speculative decoding collapsed" in render_table(
        analysis, width=200
    )
    assert "**Speculative-decoding collapses**" in render_markdown(analysis)
    page = render_html(analysis)
    assert 'id="spec-collapses"' in page and "<script" not in page.lower()
    assert str(markupsafe.escape(HOSTILE)) in page
    events_table = page[page.index('id="events-table"') :]
    assert "<td>spec_decode_collapse</td>" in events_table
    assert "<td>spec_decode</td>" not in events_table  # windows are plotted, not listed


def look_events(run_id: str) -> list[Event]:
    """Two looks as SequentialMonitor records them: continue, then differ."""
    looks = [(1, 0.25, 500, [1, 4], "continue", 0.21), (2, 0.5, 1000, [2, 19], "differ", 0.0004)]
    return [
        Event(run_id, 1_700_000_010.0 + look, "look", None, {
            "look": look, "fraction": fraction, "n_per_arm": n, "events": events,
            "verdict": verdict, "test": "pooled_z", "p_value": p,
            "reason": f"look {look}: boundary {HOSTILE}", "deviations": [], "plan_sha256": "ab",
        })
        for look, fraction, n, events, verdict, p in looks
    ]  # fmt: skip


def test_sequential_looks_get_a_table() -> None:
    store = MemoryStore()
    add_run(store, "graph", "gpu0", bernoulli(200, 0.01, 3), events=look_events("graph-gpu0"),
            run_id="graph-gpu0")  # fmt: skip
    analysis = analyze(store, FAST, clustering=False)
    assert analysis.probes is not None
    assert [(x.look, x.verdict, x.events) for x in analysis.probes.looks] == [
        (1, "continue", (1, 4)), (2, "differ", (2, 19)),
    ]  # fmt: skip
    page = render_html(analysis)
    table = page[page.index('id="looks-table"') : page.index("</table>", page.index("looks-table"))]
    assert table.count("<tr>") == 3 and "DIFFER" in table and "0.0004" in table
    assert "<script" not in page.lower()
