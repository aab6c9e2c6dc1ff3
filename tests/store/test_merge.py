"""`soakgate merge`: shards made by independent `soakgate run` processes merge into a database
that reports as their sum; a duplicated, foreign, corrupt or broken shard is refused, exit 2,
with nothing written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.command_line import soakgate
from tests.docs.extract import documented_commands

from soakgate.mockserver.process import MockProcess
from soakgate.store import open_analysis
from soakgate.store.base import verify_chain
from soakgate.store.codec import SCHEMA_VERSION
from soakgate.store.lock import RunLock
from soakgate.store.merge import SHARD_ENTRY, shard_chains_intact

TEXTS = {c.text for c in documented_commands()}
SHARDS = (("eager", ("gpu0", "gpu1")), ("compiled", ("gpu2",)), ("eager", ("gpu0",)))
"""Label and targets of each shard's run: the third is a second run of the unit eager@gpu0."""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _report(folder: Path, db: str) -> dict[str, Any]:
    done = soakgate("report", db, "--format", "json", cwd=folder)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.fixture(scope="module")
def made_shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three databases, each written by its own `soakgate run` process against a mock that
    collapses and fails; the first run registers a plan (its ledger has an entry)."""
    folder = tmp_path_factory.mktemp("shards")
    with MockProcess(
        ["--seed", "5", "--collapse-rate", "0.2", "--fault-rate", "http_500=0.1"]
    ) as mock:
        planned = soakgate("plan", "--baseline-rate", "0.01", "--ratio", "2", "--arms", "eager",
                           "compiled", "--hypothesis", "shards merge", "--write", "plan.toml",
                           cwd=folder)  # fmt: skip
        assert planned.returncode == 0, planned.stderr
        made = []
        for index, (label, targets) in enumerate(SHARDS):
            db = folder / f"shard-{index}.sqlite"
            argv = [arg for name in targets for arg in ("--target", f"{name}={mock.url}")]
            argv += ["--plan", "plan.toml"] if index == 0 else []
            done = soakgate("run", *argv, "--label", label, "--requests", "40", "--max-tokens",
                            "32", "--db", db.name, "--quiet", "--no-watch-metrics",
                            cwd=folder)  # fmt: skip
            assert done.returncode == 0, done.stderr
            made.append(db)
    return made


@pytest.fixture
def shards(made_shards: list[Path], tmp_path: Path) -> list[Path]:
    """Fresh copies of the three shards for one test."""
    return [Path(shutil.copy(path, tmp_path / path.name)) for path in made_shards]


@pytest.mark.slow
def test_three_shards_merge_into_the_sum_of_their_reports(shards: list[Path]) -> None:
    folder = shards[0].parent
    before = {p: _sha(p) for p in shards}
    done = soakgate("merge", *(p.name for p in shards), "--into", "all.sqlite", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert {p: _sha(p) for p in shards} == before  # the shards are never written

    merged = _report(folder, "all.sqlite")
    parts = [_report(folder, p.name) for p in shards]
    summed: dict[tuple[str, str], dict[str, Any]] = {}
    for part in parts:
        for unit in (u for u in part["units"] if not u["aggregate"]):
            into = summed.setdefault((unit["label"], unit["target"]), {
                "requests": 0, "n": 0, "collapses": 0, "errors": 0, "errors_by_class": {},
                "runs": 0})  # fmt: skip
            for key in ("requests", "n", "collapses", "errors", "runs"):
                into[key] += unit[key]
            for kind, count in unit["errors_by_class"].items():
                into["errors_by_class"][kind] = into["errors_by_class"].get(kind, 0) + count
    got = {
        (u["label"], u["target"]): {k: u[k] for k in summed[u["label"], u["target"]]}
        for u in merged["units"]
        if not u["aggregate"]
    }
    assert got == summed
    (everything,) = [u for u in merged["units"] if u["aggregate"]]  # eager over its 2 targets
    for key in ("requests", "n", "collapses", "errors"):
        assert everything[key] == sum(
            v[key] for (label, _), v in summed.items() if label == "eager"
        )
    assert sum(u["collapses"] for u in summed.values()) > 0
    assert sum(u["errors"] for u in summed.values()) > 0
    key = lambda e: (e["run_id"], e["at"], e["kind"])  # noqa: E731
    assert sorted(merged["events"], key=key) == sorted(
        (e for p in parts for e in p["events"]), key=key
    )

    store = open_analysis(folder / "all.sqlite")
    try:
        ledger, runs = store.ledger(), {r.run_id for r in store.runs()}
        rows = sorted(g.request_id for g in store.generations())
        prompts = {run: store.prompts(run) for run in runs}
    finally:
        store.close()
    originals = []
    for path in shards:
        shard = open_analysis(path)
        try:
            originals.append((shard.ledger(), {r.run_id for r in shard.runs()}))
            rows_of = sorted(g.request_id for g in shard.generations())
            for run in originals[-1][1]:  # what `soakgate replay` sends again is merged too
                assert shard.prompts(run) and prompts[run] == shard.prompts(run)
        finally:
            shard.close()
        assert set(rows_of) <= set(rows)
    assert runs == set().union(*(ids for _, ids in originals))  # runs keep their ids
    assert len(rows) == len(set(rows)) == 40 * 4
    assert verify_chain(ledger) is None
    assert [e.kind for e in ledger].count(SHARD_ENTRY) == 3
    assert shard_chains_intact(ledger) == {p.name: True for p in shards}
    plan = next(e for e in ledger if e.kind == "plan")
    (original,) = originals[0][0]
    assert (plan.at, plan.payload) == (original.at, original.payload)
    assert original.payload["run_id"] in runs


def test_a_duplicated_shard_is_refused_and_nothing_is_written(shards: list[Path]) -> None:
    folder = shards[0].parent
    shutil.copy(shards[1], folder / "copy.sqlite")
    for argv in ((shards[0].name, shards[1].name, shards[0].name),
                 (shards[1].name, "copy.sqlite")):  # fmt: skip
        done = soakgate("merge", *argv, "--into", "all.sqlite", cwd=folder)
        assert done.returncode == 2, done.stderr
        assert "is in both" in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert not (folder / "all.sqlite").exists()
        assert not list(folder.glob(".all.sqlite*"))  # nor a temporary file left behind


def test_a_duplicated_generation_is_refused(shards: list[Path]) -> None:
    """Two runs whose rows share a request id (a shard edited by hand): refused."""
    folder = shards[0].parent
    taken = sqlite3.connect(shards[0])
    (request_id,) = taken.execute("SELECT request_id FROM generations LIMIT 1").fetchone()
    taken.close()
    db = sqlite3.connect(shards[2])
    db.execute("UPDATE generations SET request_id=? WHERE id=(SELECT MAX(id) FROM generations)",
               (request_id,))  # fmt: skip
    db.commit()
    db.close()
    done = soakgate("merge", shards[0].name, shards[2].name, "--into", "all.sqlite", cwd=folder)
    assert done.returncode == 2, done.stderr
    assert "is also in an earlier shard" in done.stderr
    assert not (folder / "all.sqlite").exists()


@pytest.mark.parametrize("kind", ["text", "foreign", "truncated", "broken-ledger", "newer"])
def test_a_shard_that_is_not_a_good_soakgate_database_exits_2(
    shards: list[Path], kind: str
) -> None:
    folder = shards[0].parent
    bad = folder / "bad.sqlite"
    if kind == "text":
        bad.write_text("not a database\n")
    elif kind == "foreign":
        db = sqlite3.connect(bad)
        db.execute("CREATE TABLE users (name TEXT)")
        db.commit()
        db.close()
    elif kind == "truncated":
        shutil.copy(shards[1], bad)
        bad.write_bytes(bad.read_bytes()[: 3 * 4096])
    else:
        shutil.copy(shards[0], bad)
        db = sqlite3.connect(bad)
        sql = ("UPDATE ledger SET payload='{}'" if kind == "broken-ledger"
               else "UPDATE meta SET value='99' WHERE key='schema_version'")  # fmt: skip
        db.execute(sql)
        db.commit()
        db.close()
        shards = shards[1:]  # bad.sqlite stands for the first shard
    done = soakgate("merge", *(p.name for p in shards), "bad.sqlite", "--into", "all.sqlite",
                    cwd=folder)  # fmt: skip
    assert done.returncode == 2, (kind, done.stderr)
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "bad.sqlite" in done.stderr, done.stderr
    assert not (folder / "all.sqlite").exists() and not list(folder.glob(".all.sqlite*"))


def test_an_existing_into_is_refused(shards: list[Path]) -> None:
    folder = shards[0].parent
    (folder / "all.sqlite").write_bytes(b"")
    done = soakgate("merge", shards[0].name, "--into", "all.sqlite", cwd=folder)
    assert done.returncode == 2 and "exists" in done.stderr
    assert (folder / "all.sqlite").read_bytes() == b""


def test_a_schema_1_shard_merges_with_its_rows_attempted_once(shards: list[Path]) -> None:
    """A shard written before `attempts` existed (schema 1) merges; its rows read as sent once."""
    folder = shards[0].parent
    old = folder / "old.sqlite"
    shutil.copy(shards[1], old)
    db = sqlite3.connect(old)
    db.execute("ALTER TABLE generations DROP COLUMN attempts")
    db.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    db.commit()
    db.close()
    done = soakgate("merge", shards[0].name, "old.sqlite", "--into", "all.sqlite", cwd=folder)
    assert done.returncode == 0, done.stderr
    merged = sqlite3.connect(folder / "all.sqlite")
    try:
        version = merged.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        attempts = merged.execute("SELECT COUNT(*), SUM(attempts) FROM generations").fetchone()
        (entry,) = [json.loads(p) for (p,) in merged.execute(
            "SELECT payload FROM ledger WHERE kind=? AND payload LIKE '%old.sqlite%'",
            (SHARD_ENTRY,))]  # fmt: skip
    finally:
        merged.close()
    assert version == (str(SCHEMA_VERSION),) and attempts == (120, 120)
    assert entry["schema_version"] == 1
    assert _report(folder, "all.sqlite")["units"]


def _documented(*needles: str) -> str:
    (text,) = [t for t in TEXTS if all(n in t for n in needles)]
    return text


@pytest.mark.slow
def test_the_indexed_job_recipe_runs_as_documented(tmp_path: Path) -> None:
    """docs/campaigns.md's pod script with JOB_COMPLETION_INDEX 0..2 (and 3, a late shard), then
    its merge and report, and merging the late shard into a new file."""
    pod = _documented("soakgate run", "JOB_COMPLETION_INDEX")
    merge_all = _documented("soakgate merge /shards/")
    report = _documented("soakgate report /shards/")
    late = _documented("soakgate merge all.sqlite late.sqlite")
    (tmp_path / "shards").mkdir()

    def shell(line: str, url: str = "", index: int | None = None) -> None:
        line = line.replace("/shards/", f"{tmp_path}/shards/").replace(
            "soakgate ", f"{sys.executable} -m soakgate "
        )
        line = line.replace("http://127.0.0.1:8000", url).replace("http://127.0.0.1:8001", url)
        line = line.replace("--duration 2h", "--requests 20 --max-tokens 32 --quiet")
        env = {**os.environ, "JOB_COMPLETION_INDEX": str(index)}
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=tmp_path,
                              env=env, timeout=120)  # fmt: skip
        assert done.returncode == 0, (line, done.stderr)

    with MockProcess(["--seed", "7", "--collapse-rate", "0.2"]) as mock:
        for index in range(4):
            shell(pod, mock.url, index)
    (tmp_path / "shards" / "shard-3.sqlite").rename(tmp_path / "late.sqlite")
    shell(merge_all)
    shell(report)
    units = _report(tmp_path, "shards/all.sqlite")["units"]
    assert sorted(u["target"] for u in units if not u["aggregate"]) == sorted(
        f"node{i}-gpu{g}" for i in range(3) for g in range(2)
    )
    assert sum(u["requests"] for u in units if not u["aggregate"]) == 3 * 2 * 20
    shutil.copy(tmp_path / "shards" / "all.sqlite", tmp_path / "all.sqlite")
    shell(late)
    store = open_analysis(tmp_path / "all2.sqlite")
    try:
        assert len(store.runs()) == 4 and verify_chain(store.ledger()) is None
        assert shard_chains_intact(store.ledger()) == {
            "all.sqlite": True, "late.sqlite": True,
            **{f"shard-{i}.sqlite": True for i in range(3)},
        }  # fmt: skip
    finally:
        store.close()


def test_a_shard_whose_run_is_still_being_written_is_refused(shards: list[Path]) -> None:
    """A pod still soaking: its run's lock is held, so its rows are not all there yet."""
    folder = shards[0].parent
    with RunLock(shards[1], _run_ids(shards[1])[0]):
        done = soakgate("merge", shards[0].name, shards[1].name, "--into", "all.sqlite",
                        cwd=folder)  # fmt: skip
    assert done.returncode == 2 and "still being written" in done.stderr, done.stderr
    assert not (folder / "all.sqlite").exists()
    assert soakgate("merge", shards[0].name, shards[1].name, "--into", "all.sqlite",
                    cwd=folder).returncode == 0  # fmt: skip


def _run_ids(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [run_id for (run_id,) in db.execute("SELECT run_id FROM runs")]
    finally:
        db.close()


@pytest.mark.parametrize("table", ["generations", "events"])
def test_rows_of_a_run_the_shard_does_not_name_are_refused(shards: list[Path], table: str) -> None:
    """A shard edited by hand: rows whose run is in no runs table would merge into nothing."""
    folder = shards[0].parent
    db = sqlite3.connect(shards[1])
    db.execute(f"UPDATE {table} SET run_id='elsewhere' WHERE id=(SELECT MIN(id) FROM {table})")
    db.commit()
    db.close()
    done = soakgate("merge", shards[0].name, shards[1].name, "--into", "all.sqlite", cwd=folder)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert f"{table} of run elsewhere" in done.stderr and shards[1].name in done.stderr
    assert not (folder / "all.sqlite").exists() and not list(folder.glob(".all.sqlite*"))


def test_a_ledger_cut_at_its_tail_is_noticed_by_merge_and_the_report(shards: list[Path]) -> None:
    """The first shard's run registered a plan; its runs table anchors that entry's hash. With
    the entry deleted the chain that is left still verifies, so only the anchor can tell."""
    folder = shards[0].parent
    anchored = sqlite3.connect(f"file:{shards[0]}?mode=ro", uri=True)
    ((anchor, digest),) = anchored.execute(
        "SELECT json_extract(load, '$.ledger_anchor'), plan_sha256 FROM runs"
    ).fetchall()
    (head,) = anchored.execute("SELECT entry_hash FROM ledger ORDER BY idx DESC LIMIT 1").fetchone()
    anchored.close()
    assert anchor == head and digest
    db = sqlite3.connect(shards[0])
    db.execute("DELETE FROM ledger WHERE idx=(SELECT MAX(idx) FROM ledger)")
    db.commit()
    db.close()
    assert verify_chain(open_analysis(shards[0]).ledger()) is None  # what is left chains
    done = soakgate("merge", shards[0].name, shards[1].name, "--into", "all.sqlite", cwd=folder)
    assert done.returncode == 2, done.stderr
    assert "tail was cut" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (folder / "all.sqlite").exists()
    report = _report(folder, shards[0].name)
    assert any("tail was cut" in w for w in report["warnings"])


def test_anchors_hold_through_a_merge_of_merged_databases(shards: list[Path]) -> None:
    folder = shards[0].parent
    for argv, into in (((shards[0].name, shards[1].name), "ab.sqlite"),
                       (("ab.sqlite", shards[2].name), "abc.sqlite")):  # fmt: skip
        done = soakgate("merge", *argv, "--into", into, cwd=folder)
        assert done.returncode == 0, done.stderr
    report = _report(folder, "abc.sqlite")
    assert not any("tail was cut" in w for w in report["warnings"])
