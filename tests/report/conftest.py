"""Fixtures of the report tests: cheap clustering options and a two-label database."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.report.synth import add_run, bernoulli, bursty

from soakgate.report.model import ClusteringOptions
from soakgate.store import open_store

FAST = ClusteringOptions(gap_permutations=99, hmm_replicates=0)


@pytest.fixture
def fast() -> ClusteringOptions:
    """Clustering without the (slow) HMM bootstrap."""
    return FAST


@pytest.fixture(scope="session")
def two_label_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """eager and graph on gpu0 and gpu1; graph@gpu0 is bursty, everything else independent.
    Shared read-only by the tests (reports never write to a database)."""
    path = tmp_path_factory.mktemp("report") / "two.sqlite"
    store = open_store(path)
    add_run(store, "eager", "gpu0", bernoulli(3000, 0.004, 1), errors={5: "timeout", 9: "http_5xx"})
    add_run(store, "eager", "gpu1", bernoulli(3000, 0.004, 2))
    add_run(store, "graph", "gpu0", bursty(3000, 3), start=1_700_001_000.0)
    add_run(store, "graph", "gpu1", bernoulli(3000, 0.006, 4), start=1_700_001_000.0)
    store.close()
    return path
