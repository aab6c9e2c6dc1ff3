"""`soakgate search`'s walks as the report shows them (from the `search_probe` and
`search_finished` events): each search's probes as a tree, and its answer."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from soakgate.records import Event
from soakgate.stats.rates import clopper_pearson

SEARCH_HEADERS = (
    "probe", "role", "knobs changed (tree)", "failed / answered = rate [95% CI]", "evidence",
    "decision", "blocks",
)  # fmt: skip
SEARCH_NOTE = (
    "each probe is the clean configuration with the knobs shown changed, soaked block by block "
    "until its sequential test decided; indented by depth in the group test's tree, in the order "
    "run; the rate of a probe stopped by its test leans toward its decision"
)


@dataclass(frozen=True, slots=True)
class SearchProbe:
    """One probe of a search, as stored."""

    index: int
    role: str
    knobs: tuple[str, ...]
    depth: int
    failures: int
    answered: int
    evidence: float
    outcome: str
    truncated: bool
    blocks: int

    def cells(self) -> list[str]:
        """One display row, in SEARCH_HEADERS order."""
        changed = {"baseline": "none (the clean configuration)",
                   "failing": "all (the failing configuration)"}.get(self.role)  # fmt: skip
        if changed is None:
            changed = "· " * max(self.depth - 1, 0) + (", ".join(self.knobs) or "none")
        decision = self.outcome + (" (truncated: no bound)" if self.truncated else "")
        return [str(self.index), self.role, changed, _rate(self.failures, self.answered),
                f"{self.evidence:+.2f}", decision, str(self.blocks)]  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {
            "probe": self.index, "role": self.role, "knobs": list(self.knobs),
            "depth": self.depth, "failures": self.failures, "answered": self.answered,
            "evidence": self.evidence, "outcome": self.outcome, "truncated": self.truncated,
            "blocks": self.blocks,
        }  # fmt: skip


@dataclass(slots=True)
class SearchWalk:
    """One search of the database: its probes and how it ended."""

    name: str
    probes: list[SearchProbe] = field(default_factory=list)
    finished: dict[str, Any] | None = None
    """The `search_finished` event's data; None while it runs or after an interruption."""

    def answer(self) -> str:
        """One line: the knobs named, or why there is no answer, and what voids its bounds."""
        if self.finished is None:
            return "not finished (running, or interrupted: `soakgate search --resume`)"
        named = self.finished.get("named")
        line = (
            "the failure follows " + " × ".join("{" + str(k) + "}" for k in named)
            if isinstance(named, list)
            else f"no answer: {self.finished.get('stopped')}"
        )
        dispersion = self.finished.get("dispersion")
        if isinstance(dispersion, dict) and float(dispersion.get("p_value", 1.0)) < 0.01:
            line += (
                f"; failures cluster (block counts vary {float(dispersion['ratio']):.1f}x "
                "the search's model): its error bounds do not hold"
            )
        partial = self.finished.get("partial")
        if isinstance(partial, float) and partial < 0.01:
            line += "; the named knobs explain only part of the failure"
        return line

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready values."""
        return {"search": self.name, "answer": self.answer(), "finished": self.finished,
                "probes": [p.as_dict() for p in self.probes]}  # fmt: skip


def search_walks(events: Iterable[Event]) -> list[SearchWalk]:
    """Every search of the database, in the order started, its probes in the order decided."""
    walks: dict[str, SearchWalk] = {}
    for event in events:
        if event.kind not in ("search_started", "search_probe", "search_finished"):
            continue
        name = event.run_id.removeprefix("campaign:")
        walk = walks.setdefault(name, SearchWalk(name))
        d = event.data
        if event.kind == "search_finished":
            walk.finished = dict(d)
        elif event.kind == "search_probe":
            walk.probes.append(SearchProbe(
                int(d.get("probe", 0)), str(d.get("role")),
                tuple(str(k) for k in d.get("knobs", [])), int(d.get("depth", 0)),
                int(d.get("failures", 0)), int(d.get("answered", 0)),
                float(d.get("evidence", 0.0)), str(d.get("outcome")),
                bool(d.get("truncated", False)), len(d.get("blocks", [])),
            ))  # fmt: skip
    for walk in walks.values():
        walk.probes.sort(key=lambda p: p.index)
    return list(walks.values())


def _rate(failures: int, answered: int) -> str:
    if answered == 0:
        return "0/0"
    low, high = clopper_pearson(failures, answered)
    return f"{failures:,}/{answered:,} = {failures / answered:.3%} [{low:.3%}, {high:.3%}]"
