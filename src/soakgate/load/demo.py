"""`soakgate demo`: soak the built-in mock server and check the result against its ground truth."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from soakgate.load.runner import SoakConfig, run_soak
from soakgate.load.spec import SoakResult, TargetTally
from soakgate.mockserver.process import MockProcess
from soakgate.store import open_store
from soakgate.targets import TargetSpec

# Bursty collapses at ~1% overall plus a sprinkle of faults: what a bad compiled graph looks like.
DEMO_MOCK_ARGS = (
    "--seed", "20261130", "--collapse-rate", "0.002", "--burst-enter", "0.004",
    "--burst-exit", "0.08", "--burst-collapse-rate", "0.3", "--fault-rate",
    "http_500=0.002,truncated_stream=0.002", "--tokens-per-s", "2000",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class DemoCheck:
    """How the soak's verdicts compare with what the mock injected."""

    injected: int
    detected: int
    missed: int
    false_alarms: int
    faults_injected: int
    errors_recorded: int

    @property
    def exact(self) -> bool:
        """True when every injection was detected and nothing else was flagged."""
        return self.missed == 0 and self.false_alarms == 0 and self.injected == self.detected


def run_demo(
    config: SoakConfig,
    on_tick: Callable[[dict[str, TargetTally], float], None] | None = None,
) -> tuple[SoakResult, DemoCheck]:
    """Start the mock on loopback, soak it with `config` (targets replaced), check ground truth."""
    with MockProcess(list(DEMO_MOCK_ARGS)) as mock:
        config.targets = [TargetSpec.parse(f"mock-gpu0={mock.url}")]
        result = run_soak(config, on_tick=on_tick)
        truth = {row["request_id"]: row for row in mock.ground_truth()}
    store = open_store(config.db)
    try:
        rows = list(store.generations(result.run.run_id))
    finally:
        store.close()
    injected = {rid for rid, row in truth.items() if row["injected"] and not row["fault"]}
    flagged = {g.request_id for g in rows if g.collapsed}
    check = DemoCheck(
        injected=len(injected), detected=len(flagged & injected), missed=len(injected - flagged),
        false_alarms=len(flagged - injected),
        faults_injected=sum(1 for row in truth.values() if row["fault"]),
        errors_recorded=sum(1 for g in rows if not g.ok),
    )  # fmt: skip
    return result, check
