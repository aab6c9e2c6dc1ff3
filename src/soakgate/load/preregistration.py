"""Pre-registration during a soak: the plan's hash enters the ledger before the first request,
and a sequential plan's looks are judged while the soak runs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from soakgate.errors import PlanError, UsageError
from soakgate.records import Event, Generation, Run
from soakgate.stats.decision import judge_look, look_due
from soakgate.stats.plan import Decision, Plan, plan_sha256, plan_to_dict, read_plan
from soakgate.store import LedgerEntry, Store
from soakgate.store.base import LEDGER_ANCHOR


def register_plan(
    store: Store, path: Path, run: Run, labels: list[str]
) -> tuple[Plan, LedgerEntry]:
    """Read the plan, check this run belongs to it, and chain its hash into the ledger now."""
    plan = read_plan(path)
    strangers = sorted(set(labels) - set(plan.arms))
    if strangers:
        raise PlanError(f"label(s) {', '.join(strangers)} are not arms of the plan {plan.arms}")
    digest = plan_sha256(plan)
    payload = {"sha256": digest, "run_id": run.run_id, "labels": labels, "plan": plan_to_dict(plan)}
    entry = store.append_ledger("plan", payload, at=time.time())
    run.plan_sha256 = digest
    run.load[LEDGER_ANCHOR] = entry.entry_hash  # the runs table remembers the ledger's head
    return plan, entry


def planned_requests(plan: Plan) -> int:
    """Requests per target the plan asks for (n max for a sequential plan)."""
    if plan.sequential is not None:
        return plan.sequential.n_max_per_arm
    if plan.n_per_arm is None:
        raise UsageError("the plan fixes no n per arm; give --requests or --duration")
    return plan.n_per_arm


@dataclass(slots=True)
class SequentialMonitor:
    """Collects each arm's time-ordered collapse flags; judges the plan's looks as data arrive."""

    plan: Plan
    stop: asyncio.Event
    record: Callable[[Event], None]
    run_id: str
    flags: dict[str, bytearray] = field(default_factory=dict)
    """Per arm, one byte per clean generation (1: collapsed), in the order they are stored (the
    order answers arrive; `compare --plan` replays the looks in the same order)."""
    fractions: list[float] = field(default_factory=list)
    decision: Decision | None = None

    def __post_init__(self) -> None:
        if self.plan.sequential is None:
            raise PlanError("--until-verdict needs a sequential plan (plan --looks N --write ...)")
        self.flags = {arm: bytearray() for arm in self.plan.arms}

    def resume(self, store: Store) -> None:
        """Continue a killed run: its stored rows and looks count as if never interrupted. The
        rows are read as columns (label, error, flags), not as whole rows."""
        from soakgate.store.sqlite import reader_for

        for event in store.events(self.run_id):
            if event.kind == "look":
                self.fractions.append(float(event.data["fraction"]))
        Part = tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]  # row ids, flags
        found: dict[str, list[Part]] = {arm: [] for arm in self.flags}
        reader = reader_for(store, self.run_id)
        try:
            for batch in reader.scan(self.run_id, reader.max_row_id(), greedy=False):
                (labels, names), (errors, kinds) = batch.label, batch.error
                clean = errors == kinds.index("") if "" in kinds else np.zeros(len(batch), bool)
                for code, name in enumerate(names):
                    if name in found:
                        mine = clean & (labels == code)
                        found[name].append((batch.row_id[mine], batch.flagged[mine]))
        finally:
            reader.close()
        for name, parts in found.items():  # in stored order, as `observe` saw them
            if parts:
                ids = np.concatenate([i for i, _ in parts])
                flagged = np.concatenate([f for _, f in parts])[np.argsort(ids, kind="stable")]
                self.flags[name] += flagged.astype(np.uint8).tobytes()

    def observe(self, generation: Generation) -> None:
        """Count one stored generation; judge a look when both arms reach its information level."""
        if not generation.ok or generation.label not in self.flags or self.decision is not None:
            return
        self.flags[generation.label].append(generation.collapsed)
        rule = self.plan.sequential
        assert rule is not None
        if min(len(f) for f in self.flags.values()) >= look_due(rule, len(self.fractions) + 1):
            self._look()

    def _look(self) -> None:
        """Compare the arms (equal n, time order kept) and apply the plan's boundary."""
        rule = self.plan.sequential
        assert rule is not None
        n = min(len(f) for f in self.flags.values())
        sequences = [
            np.frombuffer(bytes(self.flags[a][:n]), dtype=np.uint8).astype(bool)
            for a in self.plan.arms
        ]
        decision, comparison = judge_look(self.plan, sequences[0], sequences[1], self.fractions)
        self.fractions.append(min(n / rule.n_max_per_arm, 1.0))
        arms = [int(seq.sum()) for seq in sequences]
        data = {
            "look": len(self.fractions), "fraction": self.fractions[-1], "n_per_arm": n,
            "events": arms, "verdict": decision.verdict,
            "test": decision.test, "p_value": decision.p_value, "reason": decision.reason,
            "design": comparison.verdict.design, "looks_planned": rule.looks,
            "deviations": list(decision.deviations), "plan_sha256": decision.plan_sha256,
        }  # fmt: skip
        self.record(Event(self.run_id, time.time(), "look", None, data))
        if decision.verdict != "continue":
            self.decision = decision
            self.stop.set()


def stopping_line(store: Store, run_id: str) -> str | None:
    """What `run --until-verdict` prints at the end: the last look and its verdict."""
    looks = [e.data for e in store.events(run_id) if e.kind == "look"]
    if not looks:
        return None
    last = looks[-1]
    planned = last.get("looks_planned", "?")
    verdict = str(last.get("verdict", "?")).replace("_", " ").upper()
    return (
        f"look {last.get('look')} of {planned} at n={last.get('n_per_arm'):,} per arm: "
        f"{verdict} ({last.get('test')}: {last.get('reason')})"
    )
