"""Shared fixtures: the kernel-library fixture tree and a one-time audit of it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from soakgate.audit.model import AuditResult
from soakgate.audit.scan import audit_paths

FIXTURES = Path(__file__).parent / "fixtures"
KERNLIB = FIXTURES / "kernlib"


@pytest.fixture(scope="session")
def kernlib_result() -> AuditResult:
    """The audit of the kernlib fixture (read-only; copy the tree before changing it)."""
    return audit_paths([str(KERNLIB)])


@pytest.fixture
def kernlib_copy(tmp_path: Path) -> Path:
    """A writable copy of the kernlib fixture."""
    target = tmp_path / "kernlib"
    shutil.copytree(KERNLIB, target)
    return target
