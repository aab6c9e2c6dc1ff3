"""`soakgate replay` through the real CLI against the mock: a burst model whose collapses need
load (`--burst-min-in-flight`) is classified "only under load" or "never", never
input-triggered; a server that collapses every answer, or half of them at random, collapses the
control prompt as often (never input-triggered); a server whose collapses follow its request
count is state-driven; one that collapses one prompt is input-triggered for it; the replays are
a probe run in the database that the report shows and does not count as a unit."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.cli.helpers import one_error_line, soakgate
from tests.hostile import HostileProcess

from soakgate.mockserver.process import MockProcess

LOAD_DEPENDENT = (
    "--burst-enter", "0.3", "--burst-exit", "0.1", "--burst-collapse-rate", "0.9",
    "--burst-min-in-flight", "4", "--tokens-per-s", "800", "--seed", "7",
)  # fmt: skip


def soaked(url: str, tmp_path: Path, requests: int = 40, concurrency: int = 8) -> Path:
    """A soak of `url` as gpu0, label compiled, through the CLI: the database to replay."""
    db = tmp_path / "runs.sqlite"
    done = soakgate(
        "run", "--target", f"gpu0={url}", "--label", "compiled", "--requests", str(requests),
        "--concurrency", str(concurrency), "--max-tokens", "48", "--db", str(db), "--quiet",
        "--no-watch-metrics", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return db


def _soak(mock: MockProcess, tmp_path: Path) -> Path:
    return soaked(mock.url, tmp_path)


def _replay(
    db: Path, mock: MockProcess, tmp_path: Path, *flags: str
) -> tuple[int, str, list[dict]]:
    done = soakgate("replay", str(db), "--collapsed", "--target", f"gpu0={mock.url}",
                    "--repeats", "4", "--max-rows", "3", *flags, cwd=tmp_path)  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        verdicts = [json.loads(d) for (d,) in check.execute(
            "SELECT data FROM events WHERE kind='replay_verdict' ORDER BY id")]  # fmt: skip
    return done.returncode, done.stdout, verdicts


def test_collapses_that_need_load_replay_only_under_load_or_never(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock(*LOAD_DEPENDENT)
    db = _soak(mock, tmp_path)
    code, out, verdicts = _replay(db, mock, tmp_path)
    assert len(verdicts) == 3, out
    assert {v["verdict"] for v in verdicts} <= {"only under load", "never"}
    assert all(v["alone_greedy"] == [0, 4, 0] and v["alone_sampled"] == [0, 4, 0] for v in verdicts)
    assert code == (1 if any(v["verdict"] == "only under load" for v in verdicts) else 0)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        phases = check.execute(
            "SELECT json_extract(g.details, '$.replay.phase'), COUNT(*), SUM(g.collapsed) "
            "FROM generations g JOIN runs r USING (run_id) WHERE r.label='replay' GROUP BY 1"
        ).fetchall()
        background = check.execute(
            "SELECT COUNT(*), json_extract(r.load, '$.concurrency') FROM generations g "
            "JOIN runs r USING (run_id) WHERE r.label='replay-background'"
        ).fetchone()
    assert sorted(phases) == [("alone-greedy", 12, 0), ("alone-sampled", 12, 0),
                              ("control-alone", 12, 0),
                              ("under-load", 12, sum(v["under_load"][0] for v in verdicts))]  # fmt: skip
    assert background[0] > 0 and background[1] == 8  # the original concurrency
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        alone = {rid for (rid,) in check.execute(
            "SELECT request_id FROM generations WHERE "
            "json_extract(details, '$.replay.phase') LIKE 'alone-%'")}  # fmt: skip
    truth = {t["request_id"]: t for t in mock.ground_truth()}
    assert len(alone) == 24 and not any(truth[rid]["burst"] for rid in alone)  # held clean alone
    for v in verdicts:  # only under load: the server collapsed more under load than alone
        assert v["verdict"] == "never" or v["load_p"] < v["levels"]["load"]
    report = soakgate("report", str(db), "--no-clustering", "--format", "json", cwd=tmp_path)
    document = json.loads(report.stdout)
    assert [u["label"] for u in document["units"]] == ["compiled"]  # replays are no unit
    assert [r["verdict"] for r in document["probes"]["replays"]] == [v["verdict"] for v in verdicts]


@pytest.mark.parametrize("rate", ["1", "0.5"])
def test_a_server_that_collapses_whatever_it_is_sent_is_not_input_triggered(
    start_mock: Callable[..., MockProcess], tmp_path: Path, rate: str
) -> None:
    """The control prompt collapses alone as often as the replays: nothing ties the collapses
    to their input (the alone phase is sent one request at a time, so the seeded mock's
    decisions there are the same on every run; under load the test cannot reach its level at
    these rates)."""
    mock = start_mock("--collapse-rate", rate, "--collapse-kinds", "bang_run", "--seed", "8")
    db = _soak(mock, tmp_path)
    code, out, verdicts = _replay(db, mock, tmp_path, "--run", _run_id(db))
    assert code == 0, out
    assert {v["verdict"] for v in verdicts} <= {"any input", "never"}, out
    assert all(v["control_alone"][0] > 0 for v in verdicts)
    assert "control prompt alone:" in out and "(needs < " in out


def test_collapses_that_follow_the_servers_request_count_are_state_driven(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--state-collapse", "6:18", "--tokens-per-s", "2000", "--seed", "4")
    db = _soak(mock, tmp_path)
    code, out, verdicts = _replay(db, mock, tmp_path)
    assert code == 1, out
    assert [v["verdict"] for v in verdicts] == ["state-driven"] * 3, out
    assert verdicts[0]["state_p"] < verdicts[0]["levels"]["state"]
    assert all(v["control_alone"][0] > 0 for v in verdicts)


def test_a_prompt_that_collapses_alone_more_than_the_control_is_input_triggered(
    hostile: Callable[[str], HostileProcess], tmp_path: Path
) -> None:
    server = hostile("trigger")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": text}) + "\n" for i, text in
                               enumerate(["TRIGGER: count to ten.", "Name a river.", "Say hi."])))  # fmt: skip
    db = tmp_path / "runs.sqlite"
    done = soakgate("run", "--target", f"gpu0={server.url}", "--label", "compiled", "--prompts",
                    str(prompts), "--requests", "12", "--concurrency", "4", "--max-tokens", "16",
                    "--db", str(db), "--quiet", "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = soakgate("replay", str(db), "--collapsed", "--target", f"gpu0={server.url}",
                    "--max-rows", "2", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        verdicts = [json.loads(d) for (d,) in check.execute(
            "SELECT data FROM events WHERE kind='replay_verdict' ORDER BY id")]  # fmt: skip
    assert [v["verdict"] for v in verdicts] == ["input-triggered"] * 2
    assert all(v["alone_greedy"][:2] == [5, 5] and v["control_alone"][0] == 0 for v in verdicts)


def _run_id(db: Path) -> str:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        return str(check.execute("SELECT run_id FROM runs").fetchone()[0])


@pytest.mark.parametrize(
    "flags, message",
    [
        ((), "say what to replay: --collapsed"),
        (("--collapsed", "--run", "nope"), "no soak run 'nope'"),
        (("--collapsed",), "holds no collapsed generation to replay"),
    ],
)
def test_what_cannot_be_replayed_is_one_line_and_exit_2(
    start_mock: Callable[..., MockProcess], tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    mock = start_mock("--seed", "9")
    db = _soak(mock, tmp_path)
    done = soakgate("replay", str(db), "--target", mock.url, *flags, cwd=tmp_path)
    assert done.returncode == 2 and message in one_error_line(done)


def test_an_unreachable_target_is_exit_2(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--collapse-rate", "1", "--seed", "10")
    db = _soak(mock, tmp_path)
    mock.stop()
    done = soakgate("replay", str(db), "--collapsed", "--target", mock.url, cwd=tmp_path)
    assert done.returncode == 2 and "127.0.0.1" in one_error_line(done)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:  # no 0-row probe run left
        assert check.execute("SELECT label FROM runs").fetchall() == [("compiled",)]


def test_a_database_from_before_stored_prompts_replays_with_its_prompts_file(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--collapse-rate", "1", "--collapse-kinds", "bang_run", "--seed", "11")
    prompts, other = tmp_path / "prompts.jsonl", tmp_path / "other.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"Count to {i}."}) + "\n"
                               for i in range(3)))  # fmt: skip
    other.write_text(json.dumps({"id": "p0", "prompt": "Something else."}) + "\n")
    db = tmp_path / "runs.sqlite"
    done = soakgate("run", "--target", f"gpu0={mock.url}", "--label", "compiled", "--prompts",
                    str(prompts), "--requests", "6", "--max-tokens", "16", "--db", str(db),
                    "--quiet", "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(db) as old:  # as schema 2 left it: prompt ids only
        old.execute("DROP TABLE prompts")
        old.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    old.close()
    for flags, message in (
        ((), "give the run's --prompts FILE to replay it"),
        (("--prompts", str(other)), "the prompts given are not the ones run"),
    ):
        refused = soakgate("replay", str(db), "--collapsed", "--target", f"gpu0={mock.url}",
                           "--repeats", "1", *flags, cwd=tmp_path)  # fmt: skip
        assert refused.returncode == 2 and message in one_error_line(refused), refused.stderr
    code, out, verdicts = _replay(db, mock, tmp_path, "--prompts", str(prompts))
    assert code == 0, out  # every prompt collapses: the control (a built-in prompt) as well
    assert [v["verdict"] for v in verdicts] == ["any input"] * 3
    assert [v["alone_greedy"] for v in verdicts] == [[4, 4, 0]] * 3
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        rows = check.execute(
            "SELECT r.label, g.prompt_id, g.prompt_tokens FROM generations g "
            "JOIN runs r USING (run_id) WHERE r.label IN ('replay', 'compiled') AND "
            "COALESCE(json_extract(g.details, '$.replay.phase'), '') != 'control-alone'"
        ).fetchall()  # fmt: skip
    original = {pid: tokens for label, pid, tokens in rows if label == "compiled"}
    replayed = [(pid, tokens) for label, pid, tokens in rows if label == "replay"]
    assert len(replayed) == 3 * 4 * 3  # 3 rows, 4 repeats, 3 phases
    assert all(tokens == original[pid] for pid, tokens in replayed)  # the file's prompts, sent
