"""Every failure observed reaches the report and the verdict (issue 25): crashes and the requests
lost to them, server errors, and the gate, on a database whose every figure is known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.report.synth import add_run, bernoulli

from soakgate.cli.main import main
from soakgate.records import Event
from soakgate.report.api import COMPARE_OUTCOMES, load_analysis
from soakgate.report.outcomes import analysis_outcomes
from soakgate.store import open_store

T0 = 1_700_000_000.0
STEP = 0.5  # seconds per request: 400 requests are 200 s under load
CRASHES = (100, 250)  # the candidate's server dies at these rows


def _crash_events(run_id: str, target: str) -> list[Event]:
    """What the guard records for each crash: the fault, its window, the restart."""
    events = []
    for incarnation, row in enumerate(CRASHES):
        start = T0 + 1_000 + row * STEP
        events.append(Event(run_id, start + 0.1, "engine_fault", target, {
            "cause": "process_exit", "window_start": start, "incarnation": incarnation,
            "exit_code": -11,
        }))  # fmt: skip
        events.append(Event(run_id, start + 2.0, "fault_window", target, {
            "start": start, "end": start + 2.0, "incarnation_before": incarnation,
            "incarnation_after": incarnation + 1, "recovered": True, "cause": "process_exit",
        }))  # fmt: skip
    return events


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """flag-off: 400 clean-ish requests; flag-on: the same, but its server crashed twice, each
    crash losing the 4 requests in flight and refusing 3 more (all errors of the dead
    incarnation from its window on); one 5xx earlier that no crash explains."""
    db = tmp_path_factory.mktemp("gate") / "crashed.sqlite"
    store = open_store(db)
    add_run(store, "flag-off", "gpu0", bernoulli(400, 0.01, 1), start=T0, step_s=STEP,
            campaign="c/000-flag-off-r0")  # fmt: skip
    errors = {10: "http_5xx"}
    incarnations = []
    for i in range(400):
        incarnations.append(sum(i >= row + 7 for row in CRASHES))
    for row in CRASHES:
        errors |= {row + k: "dropped" if k < 4 else "connection_refused" for k in range(7)}
    errors[390] = "cancelled"  # the soak's own stop: not the server's
    run_id = "flag-on-gpu0"
    add_run(store, "flag-on", "gpu0", bernoulli(400, 0.01, 2), run_id=run_id, start=T0 + 1_000,
            step_s=STEP, errors=errors, latency_s=0.1, incarnations=incarnations,
            events=_crash_events(run_id, "gpu0"), campaign="c/001-flag-on-r0")  # fmt: skip
    store.close()
    return db


def test_crashes_and_the_requests_they_lost_belong_to_the_crashing_unit(crashed: Path) -> None:
    analysis = load_analysis(crashed, clustering=False)
    off, on = (o for o in analysis_outcomes(analysis) if not o.unit.aggregate)
    assert off.crash is not None and off.crash.crashes == 0 and off.crash_lost == 0
    assert on.crash is not None and on.crash.crashes == 2
    assert on.crash_lost == 14  # 7 per crash; the early 5xx was no crash's
    assert on.crash_causes == {"process_exit": 2}
    assert on.judged == 399 and on.error.events == 15  # the cancelled row says nothing
    hours = on.crash.hours
    assert hours == pytest.approx((399 * STEP + 0.1 - 4.0) / 3600)  # less the two 2 s windows
    assert on.crash.per_hour == pytest.approx(2 / hours)
    assert on.crash.per_hour_ci[0] < on.crash.per_hour < on.crash.per_hour_ci[1]


def test_compare_judges_every_outcome_and_the_gate_fails_on_the_crashes(
    crashed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", str(crashed), "flag-off", "flag-on", "--fail-on-differ"]) == 1
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("gate FAIL"))
    assert line.startswith("gate FAIL: flag-on@gpu0 fails more than flag-off@gpu0: crashes 2 vs 0")
    assert "14 request(s) lost to them" in line
    judged = [x.split()[0] for x in out.splitlines() if x.startswith("  ") and "scope:" in x]
    assert judged[:3] == ["crashes", "errors", "collapses"]
    # the crashes alone fail it; opting out leaves the tests, which find too little here
    assert main(["compare", str(crashed), "flag-off", "flag-on", "--fail-on-differ",
                 "--allow-crashes"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "gate PASS" in out and "allowed by --allow-crashes" in out
    # one outcome alone, as before issue 25: collapses only
    assert main(["compare", str(crashed), "flag-off", "flag-on", "--fail-on-differ",
                 "--outcome", "collapse"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "crashes" not in out.split("\n\n")[0].split("\n", 2)[2]


def test_every_format_shows_every_outcome_per_unit_first(
    crashed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(crashed), "--no-clustering"]) == 0
    text = capsys.readouterr().out
    failures = text.index("failures per unit")
    assert failures < text.index("soakgate report (n = answered generations")
    assert "2 (" in text[failures:] and "14 lost" in text[failures:]
    assert text.index("gate FAIL") < failures
    assert main(["report", str(crashed), "--format", "json", "--no-clustering"]) == 0
    document = json.loads(capsys.readouterr().out)
    units = {o["unit"]: o for o in document["outcomes"]}
    assert units["flag-on@gpu0"]["crashes"]["crashes"] == 2
    assert units["flag-on@gpu0"]["crashes"]["requests_lost"] == 14
    assert units["flag-on@gpu0"]["server_errors"]["events"] == 15
    (gate,) = document["gates"]
    assert gate["fails"] and gate["crashed_alone"] and gate["line"].startswith("gate FAIL")
    rows = {(r["label"], r["target"]): r for r in document["units"]}
    assert rows[("flag-on", "gpu0")]["crashes"] == 2
    assert main(["report", str(crashed), "--format", "csv", "--no-clustering"]) == 0
    header = capsys.readouterr().out.splitlines()[0].split(",")
    assert {"crashes", "requests_lost_to_crashes", "server_errors", "any_failure"} <= set(header)
    page = tmp_path / "r.html"
    assert main(["report", str(crashed), "--html", str(page), "--no-clustering"]) == 0
    html = page.read_text()
    assert html.index('id="outcome-table"') < html.index('id="summary-table"')
    assert html.index("gate FAIL") < html.index('id="outcome-table"')


def test_the_command_line_offers_exactly_the_library_outcomes() -> None:
    from soakgate.cli.cmd_compare import COMPARE_OUTCOMES as OFFERED

    assert OFFERED == COMPARE_OUTCOMES


def test_a_differ_between_two_instances_fails_the_gate_unless_only_configurations_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One run per arm answers a question about two server instances; replicate blocks (runs of
    restarted servers) answer one about the configurations. The gate fails on both, and says
    which; --configurations-only fails on the second alone."""
    db = tmp_path / "scope.sqlite"
    store = open_store(db)
    # (seeds whose one-run verdict is DIFFER: with ~90 failures the correlation check, at its
    # sparse level, withholds about a quarter of such verdicts as INDETERMINATE, by design)
    add_run(store, "old", "gpu0", bernoulli(3000, 0.003, 1), start=T0)
    add_run(store, "new", "gpu0", bernoulli(3000, 0.03, 101), start=T0 + 10_000)
    for block in range(4):  # four restarted blocks of each, interleaved
        add_run(store, "old-blocks", "gpu0", bernoulli(1000, 0.003, 10 + block),
                start=T0 + 20_000 + 2_000 * block)  # fmt: skip
        add_run(store, "new-blocks", "gpu0", bernoulli(1000, 0.03, 20 + block),
                start=T0 + 21_000 + 2_000 * block)  # fmt: skip
    store.close()
    argv = ["compare", str(db), "old", "new", "--fail-on-differ"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "[scope: these server instances (one run per arm" in out
    assert main([*argv, "--configurations-only"]) == 0
    capsys.readouterr()
    blocks = ["compare", str(db), "old-blocks", "new-blocks", "--fail-on-differ"]
    assert main([*blocks, "--configurations-only"]) == 1
    out = capsys.readouterr().out
    assert "[scope: the configurations (replicate blocks" in out
    assert "replicate blocks; scope: configurations)" in out
    assert main(["report", str(db), "--format", "json", "--no-clustering"]) == 0
    scopes = {c["b"]: c["scope"] for c in json.loads(capsys.readouterr().out)["comparisons"]}
    assert scopes["new@gpu0"] == "instances"  # every label against the first (one run)
