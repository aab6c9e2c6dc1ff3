"""`soakgate replay`'s verdicts as the report shows them (from the `replay_verdict` events)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from soakgate.probes.reproduce import MEANING
from soakgate.records import Event

REPLAY_HEADERS = (
    "collapse", "unit", "alone greedy", "alone sampled", "control alone", "under load",
    "load vs alone", "verdict", "replay run",
)  # fmt: skip
REPLAY_NOTE = (
    "each stored collapse sent again N times alone (greedy, and with its own sampling), each "
    "pair followed by a control prompt, then N times inside a background soak at its run's "
    "concurrency; k/n collapsed (n: clean answers); load vs alone: everything answered under "
    "load (replays and background) against everything alone"
)


@dataclass(frozen=True, slots=True)
class ReplayVerdict:
    """One replayed collapse and its verdict."""

    replay_run: str
    of: str
    unit: str
    verdict: str
    alone_greedy: tuple[int, int]
    alone_sampled: tuple[int, int]
    under_load: tuple[int, int]
    """(collapsed, clean answers) of each phase."""
    control_alone: tuple[int, int] = (0, 0)
    """The control prompt alone, over the whole replay (absent before issue 27)."""
    load_pool: tuple[int, int] = (0, 0)
    alone_pool: tuple[int, int] = (0, 0)
    """Everything answered under load for the row's run, and everything alone."""

    def cells(self) -> list[str]:
        """One display row, in REPLAY_HEADERS order."""
        return [
            self.of, self.unit, _counts(self.alone_greedy), _counts(self.alone_sampled),
            _counts(self.control_alone), _counts(self.under_load),
            f"{_counts(self.load_pool)} vs {_counts(self.alone_pool)}", self.verdict,
            self.replay_run,
        ]  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {
            "replay_run": self.replay_run, "of": self.of, "unit": self.unit,
            "verdict": self.verdict, "meaning": MEANING.get(self.verdict, ""),
            "alone_greedy": list(self.alone_greedy), "alone_sampled": list(self.alone_sampled),
            "under_load": list(self.under_load), "control_alone": list(self.control_alone),
            "load_pool": list(self.load_pool), "alone_pool": list(self.alone_pool),
        }  # fmt: skip


def replay_verdicts(events: Iterable[Event]) -> list[ReplayVerdict]:
    """Every `replay_verdict` event, in time order."""
    found = []
    for event in events:
        if event.kind != "replay_verdict":
            continue
        d = event.data
        found.append(ReplayVerdict(
            event.run_id, str(d.get("of")), str(d.get("unit")), str(d.get("verdict")),
            _pair(d.get("alone_greedy")), _pair(d.get("alone_sampled")), _pair(d.get("under_load")),
            _pair(d.get("control_alone")), _pair(d.get("load_pool")), _pair(d.get("alone_pool")),
        ))  # fmt: skip
    return found


def _pair(value: object) -> tuple[int, int]:
    if isinstance(value, list) and len(value) >= 2:
        return int(value[0]), int(value[1])
    return 0, 0


def _counts(pair: tuple[int, int]) -> str:
    return f"{pair[0]}/{pair[1]}"
