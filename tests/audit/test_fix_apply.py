"""`soakgate audit --fix` on an absolute path prints a diff that real `git apply` and
`patch -p1` accept (no `a//abs/path` headers), in the folder the diff says."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from tests.audit.conftest import KERNLIB
from tests.cli.helpers import soakgate

TOOLS = {
    "git": ["git", "apply", "--verbose"],
    "patch": ["patch", "-p1", "--forward"],
}


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_the_diff_of_an_absolute_path_applies_in_the_current_folder(
    tool: str, tmp_path: Path
) -> None:
    if shutil.which(TOOLS[tool][0]) is None:
        pytest.skip(f"{TOOLS[tool][0]} is not installed")
    tree = tmp_path / "kernlib"
    shutil.copytree(KERNLIB, tree)
    fix = soakgate("audit", str(tree.resolve()), "--fix", cwd=tmp_path)
    assert fix.returncode == 1, fix.stderr  # findings at/above error: the gate's code
    headers = [line for line in fix.stdout.splitlines() if line.startswith(("--- ", "+++ "))]
    assert headers and all(h[4:].startswith(("a/kernlib/", "b/kernlib/")) for h in headers)
    assert "//" not in "".join(headers)
    applied = subprocess.run(TOOLS[tool], input=fix.stdout, text=True, cwd=tmp_path,
                             capture_output=True)  # fmt: skip
    assert applied.returncode == 0, applied.stdout + applied.stderr
    again = soakgate("audit", str(tree.resolve()), "--fix", cwd=tmp_path)
    assert again.stdout == ""  # nothing left to fix automatically


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_outside_the_current_folder_the_diff_is_relative_to_the_audited_folder(
    tool: str, tmp_path: Path
) -> None:
    if shutil.which(TOOLS[tool][0]) is None:
        pytest.skip(f"{TOOLS[tool][0]} is not installed")
    tree = tmp_path / "src" / "kernlib"
    shutil.copytree(KERNLIB, tree)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fix = soakgate("audit", str(tree), "--fix", cwd=elsewhere)
    assert f"relative to {tree}: apply it there" in fix.stderr
    headers = [line for line in fix.stdout.splitlines() if line.startswith("--- ")]
    assert "--- a/csrc/torch_bindings.cpp" in headers  # relative to the audited folder
    assert all(".." not in h and "//" not in h for h in headers)
    applied = subprocess.run(TOOLS[tool], input=fix.stdout, text=True, cwd=tree,
                             capture_output=True)  # fmt: skip
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert soakgate("audit", str(tree), "--fix", cwd=elsewhere).stdout == ""
