"""The report package flows one way: load -> analyse -> render. No module imports one of a
later stage, and no import circle (imports made only for type checking do not count: they
never run)."""

from __future__ import annotations

import ast
from pathlib import Path

import soakgate.report

PACKAGE = Path(soakgate.report.__file__).parent
STAGES = {
    "formatting": 0,  # a leaf every stage may use: it imports no report module
    "load": 1, "collapse": 1, "reference_load": 1, "latency_load": 1,
    "model": 2, "checks": 2, "probes": 2, "comparisons": 2, "bins": 2, "analyze": 2,
    "replays": 2, "placement": 2, "reference": 2, "outcomes": 2, "gate": 2, "uptime": 2,
    "searches": 2,
    "latency": 2,
    "compare_text": 3, "verdicts": 3, "tables": 3, "probe_tables": 3, "figures": 3, "html": 3,
    "outcome_table": 3,
    "api": 4, "export": 4, "parquet": 4, "live": 4, "live_metrics": 4, "metrics_server": 4,
}  # fmt: skip
NAMES = {0: "common", 1: "load", 2: "analyse", 3: "render", 4: "entry points"}


def _runtime_imports(path: Path) -> set[str]:
    """Report modules a module imports when it runs (anywhere but under `if TYPE_CHECKING`)."""
    tree = ast.parse(path.read_text())
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only |= {id(child) for child in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["soakgate", "report"] and len(parts) > 2 and parts[2] in STAGES:
                found.add(parts[2])
    return found


def graph() -> dict[str, set[str]]:
    """Module -> the report modules it imports at run time."""
    return {path.stem: _runtime_imports(path) - {path.stem} for path in PACKAGE.glob("*.py")
            if path.stem != "__init__"}  # fmt: skip


def test_every_report_module_has_a_stage() -> None:
    assert set(graph()) == set(STAGES)


def test_no_module_imports_a_later_stage() -> None:
    backwards = [
        f"{module} ({NAMES[STAGES[module]]}) imports {other} ({NAMES[STAGES[other]]})"
        for module, imports in graph().items()
        for other in imports
        if STAGES[other] > STAGES[module]
    ]
    assert backwards == []


def test_there_is_no_import_circle() -> None:
    edges = graph()
    state: dict[str, int] = {}
    circles = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for other in sorted(edges.get(module, ())):
            if state.get(other) == 1:
                circles.append(" -> ".join([*trail[trail.index(other) :], other]))
            elif other not in state:
                visit(other, [*trail, other])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert circles == []
