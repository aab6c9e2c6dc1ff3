"""The code's shape is the soak's pipeline (issue 31): each stage imports only the stages below
it, and no module imports one that imports it back. Imports inside functions count (they run
when the function does); imports under `if TYPE_CHECKING` do not (they never run). grimp reads
the import graph from the source; the last test adds an upward import and a circle to that
graph and shows both checks fail on them."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

from soakgate.errors import UsageError
from soakgate.load import LoadSpec
from soakgate.load.runner import SoakConfig
from soakgate.targets import RequestSpec, TargetSpec

LAYERS: tuple[str | set[str], ...] = (
    "__main__",
    "cli",  # the commands: thin, over everything below
    "search",  # a configuration search: probes run as campaign blocks
    {"campaign", "report", "bisect"},  # each independent of the others
    {"probes", "reference", "checks", "audit"},  # observers of the soak; the schema audit
    "load",  # the soak loop: it is handed its probes and scorer, it imports none
    {"guard", "mockserver"},
    {"targets", "store", "detectors", "stats", "servers"},
    {"prompts", "records"},
    {"terminal", "secrets", "durations"},
    "errors",
)  # fmt: skip
"""Stages from the highest to the lowest; a set holds stages that must not import each other."""


@pytest.fixture
def graph() -> grimp.ImportGraph:
    """The package's import graph, built afresh for each test (one test adds imports to it)."""
    return grimp.build_graph("soakgate", exclude_type_checking_imports=True, cache_dir=None)


def upward(graph: grimp.ImportGraph) -> list[str]:
    """Every chain of imports from a lower stage into a higher one (or between siblings)."""
    found = graph.find_illegal_dependencies_for_layers(layers=LAYERS, containers={"soakgate"})
    lines = []
    for dependency in sorted(found, key=lambda d: (d.importer, d.imported)):
        for route in dependency.routes:
            for head in sorted(route.heads):
                for tail in sorted(route.tails):
                    chain = [head, *route.middle, tail]
                    lines.append(f"{dependency.importer} imports {dependency.imported}: "
                                 + " -> ".join(chain))  # fmt: skip
    return lines


def circles(graph: grimp.ImportGraph) -> list[str]:
    """Each direct import A -> B where B's imports lead back to A, as the circle A -> ... -> A."""
    found = set()
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                found.add(" -> ".join([module, *back]))
    return sorted(found)


def test_every_module_of_the_package_has_a_stage(graph: grimp.ImportGraph) -> None:
    named = {s for layer in LAYERS for s in ({layer} if isinstance(layer, str) else layer)}
    children = {child.split(".", 1)[1] for child in graph.find_children("soakgate")}
    assert children == named


def test_no_stage_imports_a_higher_one(graph: grimp.ImportGraph) -> None:
    assert upward(graph) == []


def test_there_is_no_import_circle(graph: grimp.ImportGraph) -> None:
    assert circles(graph) == []


def test_the_checks_fail_on_an_upward_import_and_on_a_circle(graph: grimp.ImportGraph) -> None:
    graph.add_import(importer="soakgate.load.driver", imported="soakgate.probes.differential")
    assert any(line.startswith("soakgate.load imports soakgate.probes") and
               "soakgate.load.driver -> soakgate.probes.differential" in line
               for line in upward(graph)), upward(graph)  # fmt: skip
    graph.add_import(importer="soakgate.store.columns", imported="soakgate.store.sqlite")
    assert any(circle.startswith("soakgate.store.columns -> soakgate.store.sqlite")
               for circle in circles(graph)), circles(graph)  # fmt: skip


def test_a_soak_with_a_reference_but_no_probes_is_refused(tmp_path: Path) -> None:
    """The load loop cannot reach the differential by itself: a reference without the probes
    that compare against it would be soaked and never compared, so it is refused."""
    with pytest.raises(UsageError, match="reference needs the soak's probes"):
        SoakConfig(targets=[TargetSpec("http://127.0.0.1:1", "a")], label="x",
                   request=RequestSpec(), load=LoadSpec(1, requests=1), db=tmp_path / "d.sqlite",
                   references=[TargetSpec("http://127.0.0.1:2", "ref")])  # fmt: skip
