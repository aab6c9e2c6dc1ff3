"""`soakgate search` through the real CLI against real mock servers on loopback: the knobs it
names, what it stores, resume, and its exit codes."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from soakgate.campaign.model import load_campaign
from soakgate.search.knobs import parse_flags
from tests.campaign.helpers import query

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mock-search.toml"
NEEDED = ["--knobs.mode=3", "--knobs.pass_config.fuse=true"]

pytestmark = pytest.mark.slow


def _search_file(folder: Path, name: str, rule: str = "mode=3&pass_config.fuse=true@0.05",
                 failing_rate: float = 0.05, block: int = 200) -> Path:  # fmt: skip
    """The example, renamed, with a faster failure (5%: probes of a few hundred requests)."""
    text = EXAMPLE.read_text().replace('name = "mock-search"', f'name = "{name}"')
    text = text.replace("mode=3&pass_config.fuse=true@0.005", rule)
    text = text.replace("failing_rate = 0.005", f"failing_rate = {failing_rate}")
    text = text.replace("block_requests = 1000", f"block_requests = {block}")
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def _soakgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "soakgate", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def _events(db: Path, kind: str) -> list[dict[str, object]]:
    return [json.loads(r[0]) for r in query(db, "SELECT data FROM events WHERE kind = ? "
                                            "ORDER BY id", kind)]  # fmt: skip


def test_the_example_names_the_two_knobs_at_half_a_percent_and_stores_every_probe(tmp_path):
    path = tmp_path / "search.toml"
    path.write_text(EXAMPLE.read_text())
    db, pair = tmp_path / "s.sqlite", tmp_path / "pair.toml"
    done = _soakgate("search", str(path), "--db", str(db), "--write-campaign", str(pair),
                     cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the failure follows {--knobs.mode=3} × {--knobs.pass_config.fuse=true}" in done.stdout
    [finished] = _events(db, "search_finished")
    assert finished["named"] == NEEDED and finished["stopped"] is None
    probes = _events(db, "search_probe")
    assert [p["role"] for p in probes][:2] == ["baseline", "failing"] or \
        [p["role"] for p in probes][:2] == ["failing", "baseline"]  # fmt: skip
    assert probes[-1]["role"] == "confirm" and probes[-1]["knobs"] == NEEDED
    assert probes[-1]["outcome"] == "fails"
    # Every block is a stored run of the configuration it probed; the counts add up.
    runs = query(db, "SELECT run_id, campaign FROM runs ORDER BY started_at")
    blocks = [b for p in probes for b in p["blocks"]]  # type: ignore[union-attr]
    assert set(blocks) <= {c for _, c in runs}
    for probe in probes:
        ids = [r for r, c in runs if c in probe["blocks"]]  # type: ignore[operator]
        marks = ",".join("?" * len(ids))
        [(flagged,)] = query(db, f"SELECT COUNT(*) FROM generations WHERE run_id IN ({marks}) "
                             "AND collapsed = 1 AND error_class IS NULL", *ids)  # fmt: skip
        assert probe["failures"] == flagged
    minimal = load_campaign(pair)
    [clean, changed] = minimal.configs
    assert (clean.label, changed.label) == ("eager", "minimal")
    knobs = json.loads(parse_flags(changed.flags)["--knobs"][0].replace("{{", "{")  # type: ignore[union-attr]
                       .replace("}}", "}"))  # fmt: skip
    assert knobs == {"mode": 3, "custom_ops": ["none"], "splitting_ops": [],
                     "pass_config": {"fuse": True}}  # fmt: skip
    assert "--knob" not in parse_flags(changed.flags) and changed.env == {}


def _completed_runs(db: Path) -> int:
    """Completed runs in the store so far (0 while the search has not created its tables: the
    file exists a moment before its schema does)."""
    try:
        return len(query(db, "SELECT 1 FROM runs WHERE status = 'completed'")) if db.exists() else 0
    except sqlite3.OperationalError:
        return 0


def test_an_interrupted_search_resumes_to_the_same_answer_without_running_a_block_twice(tmp_path):
    path = _search_file(tmp_path, "resumed")
    db = tmp_path / "s.sqlite"
    command = [sys.executable, "-m", "soakgate", "search", str(path), "--db", str(db)]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _completed_runs(db) < 3:
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:  # never leave the search running, or its pipes open, whatever failed above
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, out + err
    assert "rerun with --resume" in out
    before = {c: r for r, c in query(db, "SELECT run_id, campaign FROM runs "
                                     "WHERE status = 'completed'")}  # fmt: skip
    assert _events(db, "search_finished") == []
    done = _soakgate("search", str(path), "--db", str(db), "--resume", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    [finished] = _events(db, "search_finished")
    assert finished["named"] == NEEDED
    runs = query(db, "SELECT run_id, campaign FROM runs")
    assert len({c for _, c in runs}) == len(runs)  # no block ran twice
    assert all(dict((c, r) for r, c in runs)[c] == r for c, r in before.items())
    probes = _events(db, "search_probe")
    assert len({p["probe"] for p in probes}) == len(probes)  # each probe recorded once


def test_a_failing_configuration_that_does_not_fail_leaves_nothing_to_explain_exit_1(tmp_path):
    path = _search_file(tmp_path, "nothing", rule="mode=7@0.05")  # no config sets mode 7
    db = tmp_path / "s.sqlite"
    done = _soakgate("search", str(path), "--db", str(db), "--quiet", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no answer: the failing configuration 'compiled' did not fail" in done.stdout
    [finished] = _events(db, "search_finished")
    assert finished["named"] is None and "did not fail" in str(finished["stopped"])


def test_a_search_is_not_started_twice_in_one_database(tmp_path):
    path = _search_file(tmp_path, "twice", rule="$GRAPHS=1@0.2", failing_rate=0.2)
    db = tmp_path / "s.sqlite"
    first = _soakgate("search", str(path), "--db", str(db), "--quiet", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "the failure follows {$SOAKGATE_KNOB_GRAPHS=1}" in first.stdout
    again = _soakgate("search", str(path), "--db", str(db), cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr.strip().count("\n") == 0 and "--resume" in again.stderr


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t[: t.index("[search]")], "needs a [search] table"),
        (lambda t: t.replace('failing = "compiled"', 'failing = "nope"'), "not a config label"),
        (lambda t: t.replace('failing = "compiled"', 'failing = "eager"'), "do not differ"),
        (lambda t: t.replace("baseline_rate = 0.0 ", "baseline_rate = 0.004 "), "too close"),
        (lambda t: t.replace("failing_rate = 0.005", "failing_rate = 2"), "failing_rate"),
        (lambda t: t.replace("block_requests", "block_request"), "block_request"),
    ],
)
def test_a_bad_search_file_is_one_line_and_exit_2(tmp_path, edit, message):
    path = tmp_path / "bad.toml"
    path.write_text(edit(EXAMPLE.read_text()))
    for command in (["search", str(path), "--db", str(tmp_path / "s.sqlite")],
                    ["plan", "--search", str(path)]):  # fmt: skip
        done = _soakgate(*command, cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert message in done.stderr and done.stderr.strip().count("\n") == 0
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "s.sqlite").exists()


def test_plan_search_prints_the_knobs_and_the_simulated_cost_beside_the_factorial(tmp_path):
    done = _soakgate("plan", "--search", str(EXAMPLE), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "6 knobs differ between 'eager' and 'compiled'" in done.stdout
    assert "k3 --knobs.pass_config.fuse: false -> true" in done.stdout
    assert "k5 $SOAKGATE_KNOB_GRAPHS: (unset) -> 1" in done.stdout
    lines = [line for line in done.stdout.splitlines() if "failure needing" in line]
    assert len(lines) == 2 and all("full factorial" in line for line in lines)


def test_failures_in_bursts_are_said_to_void_the_bounds_and_exit_1(tmp_path):
    """The failing configuration collapses in long bursts (mean 100 answers, two a block, about
    17% overall): the block counts vary far more than independent failures allow, which the
    search says (the knobs it names under such bursts are often wrong: that is why it exits 1).
    Bursts of mean 10, five a block, passed the test in a CI run: too few blocks to tell."""
    text = EXAMPLE.read_text().replace('name = "mock-search"', 'name = "bursts"')
    text = text.replace("  --knob max_num_seqs=8", "  --knob max_num_seqs=8 --burst-enter 0.002 "
                        "--burst-exit 0.01 --burst-collapse-rate 1.0")  # fmt: skip
    text = text.replace("failing_rate = 0.005", "failing_rate = 0.15")
    text = text.replace("mode=3&pass_config.fuse=true@0.005", "mode=7@0.005")  # bursts only
    path = tmp_path / "bursts.toml"
    path.write_text(text)
    db = tmp_path / "s.sqlite"
    done = _soakgate("search", str(path), "--db", str(db), "--quiet", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    [finished] = _events(db, "search_finished")
    if finished["named"] is None and "did not fail" in str(finished["stopped"]):
        # a whole block of the failing configuration fell between bursts (about one run in
        # seven): the search stops with nothing to explain, exit 1, and claims no bound either
        assert "no answer: the failing configuration 'compiled' did not fail" in done.stdout
        return
    assert "failures cluster: block counts vary" in done.stdout, done.stdout[-2500:]
    assert "the error bounds do not hold" in done.stdout
    dispersion = finished["dispersion"]
    assert isinstance(dispersion, dict) and dispersion["p_value"] < 0.01


def test_knobs_that_explain_only_part_of_the_failure_are_said_to(tmp_path):
    """Two causes: mode 3 with the fusion pass (5%), and --knob max_num_seqs=8 alone (40%): the
    search names one minimal set, and says the failing configuration fails more than it does."""
    text = EXAMPLE.read_text().replace('name = "mock-search"', 'name = "partial"')
    text = text.replace(
        "mode=3&pass_config.fuse=true@0.005",
        "mode=3&pass_config.fuse=true@0.05' --knob-collapse 'max_num_seqs=8@0.4",
    )
    text = text.replace("failing_rate = 0.005", "failing_rate = 0.05")
    text = text.replace("block_requests = 1000", "block_requests = 200")
    path = tmp_path / "partial.toml"
    path.write_text(text)
    db = tmp_path / "s.sqlite"
    done = _soakgate("search", str(path), "--db", str(db), "--quiet", cwd=tmp_path)
    # The group test meets mode+fusion first ({k0,k1,k2} is clean, {k0..k3} fails at 5%).
    [finished] = _events(db, "search_finished")
    assert finished["named"] == NEEDED
    assert "the named knobs explain only part of the failure" in done.stdout
    assert isinstance(finished["partial"], float) and finished["partial"] < 0.01
    # Two failing rates (5%, 40%+) break the search's one-failing-rate model: no bound, exit 1.
    assert "failures cluster" in done.stdout and done.returncode == 1


def test_the_report_shows_each_search_as_a_tree_with_its_answer(tmp_path):
    path = _search_file(tmp_path, "reported")
    db = tmp_path / "s.sqlite"
    done = _soakgate("search", str(path), "--db", str(db), "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    probes = _events(db, "search_probe")
    assert max(int(p["depth"]) for p in probes) >= 2  # type: ignore[call-overload]
    text = _soakgate("report", str(db), "--html", str(tmp_path / "r.html"), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "configuration search reported" in text.stdout
    assert "the failure follows {--knobs.mode=3} × {--knobs.pass_config.fuse=true}" in text.stdout
    html = (tmp_path / "r.html").read_text()
    assert "<td>· --knobs." in html  # a probe below the tree's first level, indented
    assert "Configuration search reported" in html and 'id="search-table-1"' in html
    found = _soakgate("report", str(db), "--format", "json", cwd=tmp_path)
    [walk] = json.loads(found.stdout)["probes"]["searches"]
    assert walk["search"] == "reported" and len(walk["probes"]) == len(probes)
    assert [p["role"] for p in walk["probes"]][-1] == "confirm"
