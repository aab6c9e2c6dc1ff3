"""Sending replays one by one, within bounds: each row stored and scored like its run's rows,
a progress line per replay (plain lines on stderr, so also without a terminal), and a stop when
the target keeps failing or the replay's time is up (`ReplayStopped`)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from soakgate.detectors import DetectorConfig
from soakgate.load.record import score_generation, unscored_generation
from soakgate.probes.replayable import StoredRequest
from soakgate.probes.reproduce import Tally
from soakgate.records import Generation, Run
from soakgate.store import BatchWriter
from soakgate.targets import OpenAIClient, Outcome, RequestSpec, TargetSpec
from soakgate.targets.client import Session, connect

REPLAY_LABEL = "replay"


class ReplayStopped(Exception):
    """The replay stopped before its end (the target kept failing, or its time was up)."""


@dataclass(frozen=True, slots=True)
class Bounds:
    """How long a replay may take and how much failure it takes."""

    max_failures: int = 3
    """Replays failed in a row that stop it: the target is not answering."""
    max_time_s: float = 3600.0
    """Seconds the whole replay may take."""
    timeout_s: float | None = None
    """Seconds one replay may take (None: its run's stored timeout), never past the end."""


class Sender:
    """Sends replays, scores them like their run did, stores each row, counts it, says so."""

    def __init__(
        self, target: TargetSpec, run: Run, writer: BatchWriter,
        detectors: dict[str, DetectorConfig], bounds: Bounds, planned: int,
        progress: Callable[[str], None] | None,
    ) -> None:  # fmt: skip
        self.target, self.run, self.writer, self.bounds = target, run, writer, bounds
        self.detectors, self.planned, self.progress = detectors, planned, progress
        self.seq = 0
        self.failed_in_a_row = 0
        self.deadline = time.monotonic() + bounds.max_time_s
        self._clients: dict[str | None, OpenAIClient] = {}

    def check_time(self) -> None:
        """ReplayStopped when the replay's time is up."""
        if time.monotonic() >= self.deadline:
            raise ReplayStopped(
                f"stopped at the --max-time bound ({self.bounds.max_time_s:g} s) after "
                f"{self.seq} of {self.planned} replays"
            )

    async def send(
        self, session: Session, request: StoredRequest, phase: str, spec: RequestSpec,
        tally: Tally, of: str | None = None,
    ) -> Generation:  # fmt: skip
        """One replay of `request` (`of`: the collapse it is the control for) in `phase`; its
        row is stored and counted in `tally`. ReplayStopped past the bounds."""
        self.check_time()
        remaining = max(self.deadline - time.monotonic(), 0.1)
        timeout = min(self.bounds.timeout_s or spec.timeout_s, remaining)
        spec = dataclasses.replace(spec, timeout_s=timeout)
        client = await self._client(session, request.model)
        request_id = f"{self.run.run_id}-{self.seq}"
        outcome = Outcome(time.time())
        try:
            await client.generate(request.prompt, spec, request_id, outcome)
        except asyncio.CancelledError:  # stopped by a signal: the request sent is a row too
            self._store(request, phase, spec, outcome, request_id, tally, of)
            raise
        row = self._store(request, phase, spec, outcome, request_id, tally, of)
        self._say(row, phase, of or request.request_id)
        self._count_failure(row)
        return row

    def _store(
        self, request: StoredRequest, phase: str, spec: RequestSpec, outcome: Outcome,
        request_id: str, tally: Tally, of: str | None,
    ) -> Generation:  # fmt: skip
        """Score and store one replay's row, and count it."""
        row = unscored_generation(
            outcome, run_id=self.run.run_id, request_id=request_id, target=self.target.name,
            label=REPLAY_LABEL, seq=self.seq, prompt=request.prompt, spec=spec,
        )  # fmt: skip
        self.seq += 1
        detectors = self.detectors.get(request.run_id, DetectorConfig())
        score_generation(row, detectors, "all", spec.max_tokens)
        row.details["replay"] = {"of": of or request.request_id, "phase": phase}
        self.writer.add_generation(row)
        tally.add(row.collapsed, row.error_class is not None)
        return row

    def _say(self, row: Generation, phase: str, of: str) -> None:
        if self.progress is None:
            return
        state = row.error_class or ("collapsed" if row.collapsed else "clean")
        took = row.ended_at - row.started_at
        self.progress(f"replay {self.seq}/{self.planned}: {of} {phase}: {state}, {took:.1f} s")

    def _count_failure(self, row: Generation) -> None:
        self.failed_in_a_row = self.failed_in_a_row + 1 if row.error_class else 0
        if self.failed_in_a_row >= self.bounds.max_failures:
            raise ReplayStopped(
                f"the target failed {self.failed_in_a_row} replays in a row (last: "
                f"{row.error_class}); stopped after {self.seq} of {self.planned} replays"
            )

    async def _client(self, session: Session, model: str | None) -> OpenAIClient:
        """The client sending as `model` (the stored one; --model or discovery without)."""
        chosen = self.target.model or model
        if chosen not in self._clients:
            if chosen is None:
                self._clients[None] = await connect(session, self.target)
            else:
                self._clients[chosen] = OpenAIClient(session, self.target, chosen)
        return self._clients[chosen]
