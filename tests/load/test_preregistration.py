"""`run --plan` registers the plan before any data; `--until-verdict` stops at the plan's boundary."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from soakgate.errors import PlanError
from soakgate.load import LoadSpec
from soakgate.load.runner import SoakConfig, run_soak
from soakgate.mockserver.process import MockProcess
from soakgate.probes.soak import StandardProbes
from soakgate.stats.plan import make_plan, write_plan
from soakgate.store import open_store
from soakgate.store.base import verify_chain
from soakgate.targets import RequestSpec, TargetSpec


def sequential_plan(tmp_path: Path) -> tuple[Path, str]:
    plan = make_plan("compiled collapses more than eager", ["eager", "compiled"], 0.01, 4, looks=3,
                     n_max_per_arm=430)  # fmt: skip
    path = tmp_path / "plan.toml"
    return path, write_plan(plan, path)


def two_arm_config(
    eager: MockProcess, compiled: MockProcess, tmp_path: Path, plan: Path, concurrency: int = 8
) -> SoakConfig:
    targets = [TargetSpec.parse(f"gpu0={eager.url}"), TargetSpec.parse(f"gpu1={compiled.url}")]
    return SoakConfig(
        probes=StandardProbes(),
        targets=targets, label="eager vs compiled", request=RequestSpec(max_tokens=128),
        load=LoadSpec(concurrency), db=tmp_path / "r.sqlite",
        labels={"gpu0": "eager", "gpu1": "compiled"},
        plan=plan, until_verdict=True,
    )  # fmt: skip


def test_a_large_difference_stops_at_an_early_look(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    plan_path, digest = sequential_plan(tmp_path)  # n max 430 per arm, 3 looks
    # One request at a time per server: each arm's collapse flags are then the seeded mock's
    # own sequence, so the looks see the same data every run. With 8 in flight the order varies,
    # and the honest verdict leaves 0.5% against 25% INDETERMINATE at both early looks in about
    # 5% of orders (simulated, independent arms: 14 of 300): the check withholds sparse pairs.
    eager = start_mock("--seed", "1", "--collapse-rate", "0.005")
    compiled = start_mock("--seed", "2", "--collapse-rate", "0.25")
    result = run_soak(two_arm_config(eager, compiled, tmp_path, plan_path, concurrency=1))
    assert result.stopped_by == "verdict"
    store = open_store(tmp_path / "r.sqlite")
    (entry,) = store.ledger()
    rows = list(store.generations())
    looks = [e.data for e in store.events() if e.kind == "look"]
    (run,) = store.runs()
    store.close()
    assert entry.payload["sha256"] == digest == run.plan_sha256 and verify_chain([entry]) is None
    assert entry.at < min(g.started_at for g in rows)  # registered before the first request
    assert looks[-1]["verdict"] == "differ" and len(looks) < 3
    assert {g.label for g in rows} == {"eager", "compiled"}
    assert len(rows) < 2 * 430 and run.status == "completed"


def test_equal_arms_run_to_n_max_and_never_differ(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    # ~4 collapses per arm by the last look: the verdict may honestly be INDETERMINATE (the
    # dependence check is judged at a high level with so few failures; compare_outcomes on
    # 430 independent requests per arm at 1%: 28% of 400 seeded pairs), never DIFFER early.
    plan_path, _ = sequential_plan(tmp_path)
    eager = start_mock("--seed", "1", "--collapse-rate", "0.01")
    compiled = start_mock("--seed", "2", "--collapse-rate", "0.01")
    result = run_soak(two_arm_config(eager, compiled, tmp_path, plan_path))
    store = open_store(tmp_path / "r.sqlite")
    looks = [e.data for e in store.events() if e.kind == "look"]
    store.close()
    assert [look["look"] for look in looks] == [1, 2, 3]
    assert [look["verdict"] for look in looks[:-1]] == ["continue", "continue"]
    assert looks[-1]["verdict"] in ("no_difference", "indeterminate")
    assert result.stopped_by in ("verdict", "limit")
    assert all(t.requests == 430 for t in result.tallies.values())


def test_a_label_outside_the_plan_is_refused_before_any_request(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    plan_path, _ = sequential_plan(tmp_path)
    mock = start_mock()
    config = SoakConfig(
        probes=StandardProbes(),
        targets=[TargetSpec.parse(mock.url)], label="other", request=RequestSpec(max_tokens=8),
        load=LoadSpec(2, requests=5), db=tmp_path / "r.sqlite", plan=plan_path,
    )  # fmt: skip
    with pytest.raises(PlanError, match="not arms"):
        run_soak(config)
    assert mock.ground_truth() == []


def test_cli_arms_and_bad_plan(start_mock: Callable[..., MockProcess], tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("arms = 3\n")
    result = subprocess.run(
        [sys.executable, "-m", "soakgate", "run", "--plan", str(bad), "--arm",
         "eager=http://127.0.0.1:9", "--db", str(tmp_path / "x.sqlite")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2 and "plan" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_resume_reads_each_arms_flags_from_columns(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from soakgate.load.preregistration import SequentialMonitor
    from soakgate.records import Event, Generation, Run
    from soakgate.stats.plan import read_plan
    from soakgate.store import MemoryStore

    plan_path, _ = sequential_plan(tmp_path)
    store = open_store(tmp_path / "s.sqlite") if kind == "sqlite" else MemoryStore()
    run = Run("r", "eager vs compiled", ["gpu0", "gpu1"], 1_700_000_000.0)
    store.save_run(run)
    rows = [
        Generation("r", f"r-{i}", f"gpu{i % 2}", ("eager", "compiled")[i % 2], i, "p",
                   "completions", True, 1_700_000_000.0 + i, 1_700_000_000.5 + i,
                   error_class="timeout" if i % 13 == 0 else None,
                   flags=["char_run"] if i % 5 == 0 else [])
        for i in range(400)
    ]  # fmt: skip
    store.add(rows[::-1], [Event("r", 1_700_000_100.0, "look", None, {"fraction": 0.25})])
    if kind == "sqlite":  # the whole rows are never decoded
        monkeypatch.setattr(type(store), "generations", lambda *a, **k: iter(()))
    monitor = SequentialMonitor(read_plan(plan_path), asyncio.Event(), lambda e: None, "r")
    monitor.resume(store)
    # in stored order (here the reverse of seq order); the in-memory store keeps no stored order
    # (its rows come back in seq order, as its row ids count them)
    stored = rows[::-1] if kind == "sqlite" else rows
    for arm in ("eager", "compiled"):
        expected = [g.collapsed for g in stored if g.label == arm and g.ok]
        assert list(monitor.flags[arm]) == expected and sum(expected) > 0
        assert expected != expected[::-1]  # the order is what is checked
    assert monitor.fractions == [0.25]


def test_compare_plan_replays_the_looks_in_the_order_the_answers_arrived(tmp_path: Path) -> None:
    """Under concurrency answers arrive out of seq order. The soak's monitor judges them as they
    arrive; `compare --plan` must replay that order, not seq order, or one look of one set of
    rows gets two verdicts (a CI run saw the dependence check read p=0.02 during the soak and
    p=0.04 on replay: `plan deviation: look 1 recorded differ ...`). Here compiled's failures
    arrive evenly spread, while in seq order they are the first requests sent: clustered."""
    import asyncio
    import time

    from soakgate.load.preregistration import SequentialMonitor, register_plan
    from soakgate.records import Generation, Run
    from soakgate.stats.plan import read_plan

    plan_path, _ = sequential_plan(tmp_path)
    store = open_store(tmp_path / "r.sqlite")
    run = Run("r", "eager vs compiled", ["gpu0", "gpu1"], time.time())
    register_plan(store, plan_path, run, ["eager", "compiled"])
    store.save_run(run)
    monitor = SequentialMonitor(read_plan(plan_path), asyncio.Event(),
                                lambda event: store.add([], [event]), "r")  # fmt: skip
    per_arm = 215
    fails = [i % 5 == 0 for i in range(per_arm)]  # compiled's i-th answer to arrive
    rank = {i: r for r, i in enumerate(sorted(range(per_arm), key=lambda i: (not fails[i], i)))}
    began = time.time() + 1
    for i in range(per_arm):
        for arm, seq, failed in (("eager", 2 * i, False), ("compiled", 2 * rank[i] + 1, fails[i])):
            row = Generation("r", f"r-{seq}", f"gpu{seq % 2}", arm, seq, "p", "completions",
                             True, began + i * 0.01, began + i * 0.01 + 0.005,
                             flags=["char_run"] if failed else [])  # fmt: skip
            store.add([row])
            monitor.observe(row)
    store.close()
    assert monitor.decision is not None and monitor.decision.verdict == "differ"
    compared = subprocess.run(
        [sys.executable, "-m", "soakgate", "compare", str(tmp_path / "r.sqlite"), "eager",
         "compiled", "--plan", str(plan_path)], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    assert "plan verdict: DIFFER by batch_means: look 1 of 3" in compared.stdout, compared.stdout
    assert "plan deviations: none" in compared.stdout, compared.stdout
