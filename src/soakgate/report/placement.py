"""Where each unit ran on a Ray cluster: its node (hostname and Ray node id) and GPUs per run,
from the campaign's `unit_placed` events. Pure: events and runs in, rows out."""

from __future__ import annotations

from dataclasses import dataclass

from soakgate.report.model import Analysis


@dataclass(frozen=True, slots=True)
class Placement:
    """One placement of a unit (a block's unit is placed again when its node is lost)."""

    label: str
    target: str
    run_id: str
    node_id: str
    hostname: str
    gpu_ids: tuple[str, ...]

    def line(self) -> str:
        """`HOST (node 1a2b3c4d) GPU 0`."""
        gpus = ",".join(self.gpu_ids) or "-"
        return f"{self.hostname} (node {self.node_id[:8]}) GPU {gpus}"


def placements(analysis: Analysis) -> list[Placement]:
    """Every placement, by label and target, then time."""
    labels = {run.run_id: run.label for run in analysis.runs}
    found = [
        Placement(labels.get(e.run_id, "?"), e.target or "?", e.run_id,
                  str(e.data.get("node_id", "?")), str(e.data.get("hostname", "?")),
                  tuple(str(g) for g in e.data.get("gpu_ids", [])))
        for e in analysis.events if e.kind == "unit_placed"
    ]  # fmt: skip
    return sorted(found, key=lambda p: (p.label, p.target))


def placement_lines(analysis: Analysis) -> list[str]:
    """One line per unit: the node(s) its runs were placed on (empty: not a Ray campaign)."""
    by_unit: dict[tuple[str, str], list[str]] = {}
    for placement in placements(analysis):
        lines = by_unit.setdefault((placement.label, placement.target), [])
        if placement.line() not in lines:
            lines.append(placement.line())
    return [f"{label} {target}: {'; '.join(nodes)}" for (label, target), nodes in by_unit.items()]
