"""A fixed database touching every figure the analysis computes, and what the analysis said
about it before the columnar data path replaced the row objects (issue 15).

The database is built deterministically through the real store (fixed seeds and times); its
content digest is pinned too, so that a change in what is written is told apart from a
change in what the analysis computes. `python -m tests.report.golden DIR` writes the expected
outputs; they were written with the row-object analysis (main at cfe1912) and are committed
under tests/report/golden/.
"""

from __future__ import annotations

import hashlib
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from soakgate.records import Event, Generation, Run
from soakgate.stats.plan import make_plan, plan_sha256, plan_to_dict, write_plan
from soakgate.store import open_store
from soakgate.store.base import Store

T0 = 1_700_000_000.0
EXPECTED = Path(__file__).parent / "golden"
BANG = "The answer is " + "!" * 120
LOOP = "and then " * 40
CLEAN = "def add(a, b):\n    return a + b\n"
ERRORS = ("timeout", "http_5xx", "connection_reset", "dropped", "rate_limited")


def _bursty(rng: np.random.Generator, n: int, enter: float, leave: float) -> list[bool]:
    state, out = False, []
    for u, v in zip(rng.random(n), rng.random(n), strict=True):
        state = (u >= leave) if state else (u < enter)
        out.append(bool(state and v < 0.5))
    return out


def _rows(
    run: Run, target: str, flags: Sequence[bool], rng: np.random.Generator, *,
    start: float, step: float = 0.05, seq0: int = 0, errors: float = 0.003,
    differential: int = 0, pause: tuple[int, float] | None = None,
) -> list[Generation]:  # fmt: skip
    """One target's generations of a run: collapses where `flags`, errors at random, texts for
    the flagged and errored rows and for 1 in 10 clean ones, greedy rows every `differential`."""
    rows = []
    for i, bad in enumerate(flags):
        at = start + i * step + (pause[1] if pause and i >= pause[0] else 0.0)
        error = str(rng.choice(ERRORS)) if rng.random() < errors else None
        bad = bad and error is None
        kind = int(rng.integers(0, 4)) if bad else -1
        flag, text = [(["char_run"], BANG), (["word_loop"], LOOP), (["empty"], ""),
                      (["char_run", "token_run"], "!" * 200)][kind] if bad else ([], CLEAN)  # fmt: skip
        keep = bad or error is not None or i % 10 == 0
        tokens = None if error else (int(rng.integers(8, 64)) if i % 97 else None)
        details: dict[str, object] = {name: {"run": 120} for name in flag}
        divergence = None
        if differential and i % differential == 0 and error is None:
            divergence = int(rng.integers(0, 30)) if rng.random() < 0.2 else -1
            details["differential"] = {"reference": "ref", "first": divergence}
        rows.append(Generation(
            run_id=run.run_id, request_id=f"{run.run_id}-{target}-{i}", target=target,
            label=run.label, seq=seq0 + i, prompt_id=f"p{i % 7}", endpoint="completions",
            stream=i % 3 != 0, started_at=at, ended_at=at + 0.4 + 0.01 * (i % 5),
            ttft_s=0.01, prompt_tokens=12, completion_tokens=tokens, finish_reason="length",
            http_status=None if error == "dropped" else (500 if error == "http_5xx" else 200),
            error_class=error, error_detail="boom" if error else None,
            text=(text if keep else None) if error is None else None,
            text_sha256=hashlib.sha256(text.encode()).hexdigest(),
            token_ids=[0] * 16 if "token_run" in flag else None,
            scores={"char_run": 120.0 if bad else 3.0}, details=details, flags=flag,
            incarnation=1 if i > len(flags) // 2 else 0, reference_divergence=divergence,
        ))  # fmt: skip
    return rows


def _run(
    store: Store, run_id: str, label: str, targets: list[str], start: float, n: int, *,
    status: str = "completed", killed: bool = False, campaign: str | None = None,
    plan: str | None = None, load: dict[str, object] | None = None,
) -> Run:  # fmt: skip
    run = Run(run_id, label, targets, start, status=status, campaign=campaign, plan_sha256=plan,
              load={"requests_per_target": n, "concurrency": 8, **(load or {})},
              ended_at=None if killed else start + n * 0.05 + 5)  # fmt: skip
    store.save_run(run)
    return run


def build(path: Path, plan_path: Path) -> None:
    """Write the fixed database at `path` (and the plan it registered at `plan_path`)."""
    rng = np.random.default_rng(20240615)
    store = open_store(path)
    # eager: two targets side by side, a second (replicate) run on gpu0, an idle gap on gpu1,
    # a greedy differential sample against a deterministic reference.
    eager = _run(store, "eager-1", "eager", ["gpu0", "gpu1"], T0, 3000)
    rows = _rows(eager, "gpu0", list(rng.random(3000) < 0.004), rng, start=T0, differential=9)
    rows += _rows(eager, "gpu1", list(rng.random(3000) < 0.004), rng, start=T0 + 0.01,
                  seq0=3000, pause=(1500, 90.0))  # fmt: skip
    events = [Event("eager-1", T0 - 1, "reference_baseline", None,
                    {"pairs": 8, "divergent": 0, "errors": 0, "informative": True}),
              Event("eager-1", T0 + 30, "engine_fault", "gpu0", {"message": "CUDA error"}),
              Event("eager-1", T0 + 31, "restart", "gpu0", {"incarnation": 1}),
              Event("eager-1", T0 + 2, "spec_decode_absent", "gpu1", {})]  # fmt: skip
    store.add(rows, events)
    again = _run(store, "eager-2", "eager", ["gpu0"], T0 + 500, 1500)
    store.add(_rows(again, "gpu0", list(rng.random(1500) < 0.004), rng, start=T0 + 500))
    # graph: bursty on gpu0 (resumed once), independent on gpu1 which never ended, with a
    # speculative-decoding watch; greedy rows against a reference that is not deterministic.
    graph = _run(
        store, "graph-1", "graph", ["gpu0", "gpu1"], T0 + 1000, 4000, killed=True, status="running"
    )
    rows = _rows(graph, "gpu0", _bursty(rng, 4000, 0.003, 0.05), rng, start=T0 + 1000,
                 differential=11)  # fmt: skip
    rows += _rows(graph, "gpu1", list(rng.random(4000) < 0.006), rng, start=T0 + 1000.02,
                  seq0=4000)  # fmt: skip
    spec = [Event("graph-1", T0 + 1001 + i, "spec_decode", "gpu1",
                  {"acceptance": a, "tokens_per_s": 900.0 - 100 * i, "start": T0 + 1000 + i})
            for i, a in enumerate((0.40, 0.41, 0.10, 0.09))]  # fmt: skip
    events = [
        *spec,
        Event(
            "graph-1",
            T0 + 1006,
            "spec_decode_collapse",
            "gpu1",
            {"reason": "acceptance 9% < 50% of best 41%", "start": T0 + 1003},
        ),
        Event(
            "graph-1",
            T0 + 999,
            "reference_baseline",
            None,
            {"pairs": 8, "divergent": 2, "errors": 1, "informative": False},
        ),
        Event("graph-1", T0 + 1100, "resumed", None, {}),
        Event("graph-1", T0 + 1050, "brand_new_kind", "gpu0", {"x": "<b>y</b>"}),
    ]
    store.add(rows, events)
    # A replicate-block campaign A B B A B A A B on gpu2, with a plan registered before it.
    plan = make_plan("b collapses more", ("blocks-a", "blocks-b"), 0.005, 2.0, blocks=4,
                     requests_per_block=800)  # fmt: skip
    write_plan(plan, plan_path)
    for k, label in enumerate("abbabaab"):
        start = T0 + 3000 + 100 * k
        run_id = f"block-{k}"
        store.append_ledger("plan", {"sha256": plan_sha256(plan), "run_id": run_id,
                                     "plan": plan_to_dict(plan)}, at=start - 1)  # fmt: skip
        run = _run(store, run_id, f"blocks-{label}", ["gpu2"], start, 800, campaign="c1",
                   plan=plan_sha256(plan))  # fmt: skip
        rate = 0.004 if label == "a" else (0.02 if k % 3 else 0.004)
        store.add(_rows(run, "gpu2", list(rng.random(800) < rate), rng, start=start))
    # A sweep of three levels on gpu3 and a short run with sequential looks.
    for level, speed in ((1, 800.0), (2, 1500.0), (4, 1600.0)):
        step = 32 / speed
        start = T0 + 5000 + 50 * level
        run = _run(store, f"level-{level}", "sweep", ["gpu3"], start, 400,
                   load={"concurrency": level, "sweep": {"id": "sw1", "min_gain": 0.1}})  # fmt: skip
        store.add(_rows(run, "gpu3", list(rng.random(400) < 0.01 * level), rng, start=start,
                        step=step))  # fmt: skip
    short = _run(store, "short-1", "short", ["gpu3"], T0 + 6000, 1000, status="interrupted")
    looks = [Event("short-1", T0 + 6010 + k, "look", None,
                   {"look": k, "fraction": 0.25 * k, "n_per_arm": 100 * k, "events": [k, 3 * k],
                    "verdict": "continue", "test": "batch_means", "p_value": 0.3 / k,
                    "reason": f"look {k}", "deviations": [], "plan_sha256": "ab"})
             for k in (1, 2)]  # fmt: skip
    store.add(_rows(short, "gpu3", [False] * 600, rng, start=T0 + 6000), looks)
    store.close()


def content_digest(path: Path) -> str:
    """SHA-256 over every row of every table, in a fixed order (not the file's bytes, which
    depend on page layout), as the schema the expected outputs were written in (5) held them:
    `generations.checks` (schema 6) is left out once checked empty, and the version read as 5."""
    digest = hashlib.sha256()
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(generations)")]
        assert columns[-1] == "checks" and not db.execute(
            "SELECT COUNT(*) FROM generations WHERE checks != ''").fetchone()[0]  # fmt: skip
        selects = {"generations": ", ".join(columns[:-1])}
        for table in ("meta", "runs", "generations", "events", "ledger"):
            for row in db.execute(f"SELECT {selects.get(table, '*')} FROM {table} ORDER BY 1"):
                if table == "meta" and row == ("schema_version", "6"):
                    row = ("schema_version", "5")
                digest.update(repr(row).encode())
    db.close()
    return digest.hexdigest()


COMMANDS: dict[str, tuple[str, ...]] = {
    "report.json": ("report", "{db}", "--format", "json"),
    "report-no-clustering.json": ("report", "{db}", "--format", "json", "--no-clustering"),
    "report.csv": ("report", "{db}", "--format", "csv"),
    "compare-aggregates.txt": ("compare", "{db}", "eager", "graph"),
    "compare-units.txt": ("compare", "{db}", "eager@gpu0", "graph@gpu0"),
    "compare-blocks.txt": ("compare", "{db}", "blocks-a", "blocks-b"),
    "compare-plan.txt": ("compare", "{db}", "--plan", "{plan}"),
    "compare-baseline.txt": (
        "compare",
        "{db}",
        "--baseline",
        "blocks-a",
        "--allow-unit-mismatch",
    ),
    "pilot.txt": ("plan", "--pilot", "{db}", "--label", "graph", "--ratio", "2"),
    "export.csv": ("export", "{db}", "--format", "csv"),
    "export.jsonl": ("export", "{db}", "--format", "jsonl"),
}
"""Expected file -> the command whose standard output it holds."""


def outputs(db: Path, plan: Path) -> dict[str, str]:
    """What each of COMMANDS prints on the fixed database, run through the real CLI."""
    import subprocess

    found = {}
    for name, command in COMMANDS.items():
        argv = [part.format(db=db, plan=plan) for part in command]
        done = subprocess.run(
            [sys.executable, "-m", "soakgate", *argv], capture_output=True, text=True, check=False
        )
        assert done.returncode in (0, 1), (argv, done.stderr)
        found[name] = done.stdout
    found["export.parquet"] = _parquet_rows(db, plan.parent / "golden.parquet")
    return found


def _parquet_rows(db: Path, out: Path) -> str:
    """`export --format parquet` read back: every row as JSON (a Parquet file's bytes carry
    the writer's version)."""
    import json
    import subprocess

    import pyarrow.parquet as pq

    argv = ["export", str(db), "--format", "parquet", "--out", str(out)]
    subprocess.run([sys.executable, "-m", "soakgate", *argv], check=True, capture_output=True)
    rows = pq.read_table(out).to_pylist()
    return "\n".join(json.dumps(row, sort_keys=True, default=str) for row in rows)


def main(folder: str) -> None:
    """Build the database in `folder` and write the expected outputs to EXPECTED."""
    db, plan = Path(folder) / "golden.sqlite", Path(folder) / "plan.toml"
    build(db, plan)
    EXPECTED.mkdir(exist_ok=True)
    (EXPECTED / "content.sha256").write_text(content_digest(db) + "\n")
    for name, text in outputs(db, plan).items():
        (EXPECTED / expected_name(name)).write_text(normalised(name, text, db, plan))


def expected_name(name: str) -> str:
    """Exports are kept as their digest (megabytes of rows), everything else as text."""
    return f"{name}.sha256" if name.startswith("export") else name


def normalised(name: str, text: str, db: Path, plan: Path) -> str:
    """An output with its temporary paths replaced; an export as the SHA-256 of its text."""
    text = text.replace(str(plan), "PLAN").replace(str(db), "DB")
    if name.startswith("export"):
        return hashlib.sha256(text.encode()).hexdigest() + "\n"
    return text


if __name__ == "__main__":
    main(sys.argv[1])
