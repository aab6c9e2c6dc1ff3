"""A database written by real soaks of the mock server, shared (never modified) by CLI tests."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from tests.cli.helpers import soakgate

from soakgate.mockserver.process import MockProcess


@pytest.fixture(scope="session")
def finished_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two labels (`eager` clean, `graph` collapsing 30%) on one mock target, 120 requests each,
    soaked by `soakgate run`; tests copy it before anything that might write."""
    folder = tmp_path_factory.mktemp("finished")
    db = folder / "runs.sqlite"
    for label, rate in (("eager", "0"), ("graph", "0.3")):
        with MockProcess(["--collapse-rate", rate, "--seed", "3"]) as mock:
            done = soakgate(
                "run", "--target", f"gpu0={mock.url}", "--label", label, "--requests", "120",
                "--concurrency", "8", "--max-tokens", "32", "--db", str(db), "--quiet",
                "--no-watch-metrics", cwd=folder,
            )  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(db) as check:
        assert check.execute("SELECT COUNT(*) FROM generations").fetchone() == (240,)
    return db
