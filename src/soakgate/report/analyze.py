"""Analyse: columns in, every figure of the report out (units, warnings, probe findings).

The second stage of the report: pure functions over what `load` read; nothing here opens the
database or formats text for a terminal or a page.
"""

from __future__ import annotations

from soakgate.report.checks import methodology_warnings
from soakgate.report.load import Columns, load_store
from soakgate.report.model import Analysis, ClusteringOptions, build_units
from soakgate.report.probes import find_probes
from soakgate.store.base import Store


def analyze_columns(
    columns: Columns, options: ClusteringOptions | None = None, clustering: bool = True
) -> Analysis:
    """Units, aggregates, clustering verdicts, methodology warnings and probe findings."""
    options = options or ClusteringOptions()
    analysis = Analysis(build_units(columns, options, clustering), columns)
    analysis.warnings = methodology_warnings(analysis)
    analysis.probes = find_probes(analysis)
    return analysis


def analyze(
    store: Store, options: ClusteringOptions | None = None, clustering: bool = True
) -> Analysis:
    """Read an open store and analyse it (`load.load_store`, then `analyze_columns`)."""
    return analyze_columns(load_store(store), options, clustering)
