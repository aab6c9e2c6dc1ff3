"""`--fix` is complete where it says so and never destructive (issue 16).

The diff is produced by the real CLI from inside a git repository (as a user runs it at the
root of a kernel repository), applied with `git apply`, and the tree is audited again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import soakgate

FIXTURES = Path(__file__).parent / "fixtures"
FIXED = {"void-op-unannotated", "unannotated-write", "returns-alias-unannotated"}
# The subprocesses run the soakgate this test imported (the source tree under test).
_ENV = {**os.environ, "PYTHONPATH": str(Path(soakgate.__file__).parents[1])}


def _soakgate(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "soakgate", "audit", ".", *args],
        cwd=tree,
        env=_ENV,
        text=True,
        capture_output=True,
        check=False,
        timeout=120,
    )


def _git(tree: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=tree,
        input=stdin,
        text=True,
        capture_output=True,
        check=False,
    )


def _repo(tmp_path: Path, *fixtures: str) -> Path:
    tree = tmp_path / "repo"
    for name in fixtures:
        shutil.copytree(FIXTURES / name, tree / name, ignore=shutil.ignore_patterns("*.patch"))
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-qm", "before")
    return tree


def _ops(tree: Path) -> dict[str, dict[str, Any]]:
    done = _soakgate(tree, "--format", "json")
    return {op["op"]: op for op in json.loads(done.stdout)["ops"]}


@pytest.fixture(scope="module")
def fixed(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, dict[str, Any]], dict[str, dict[str, Any]], str]:
    """(tree, ops before, ops after `git apply` of the diff, fix notes); read-only."""
    tree = _repo(tmp_path_factory.mktemp("fix"), "fixlib", "kernlib", "patterns")
    before = _ops(tree)
    done = _soakgate(tree, "--fix")
    assert done.stdout.startswith("--- a/"), done.stderr
    applied = _git(tree, "apply", "-", stdin=done.stdout)
    assert applied.returncode == 0, applied.stderr
    return tree, before, _ops(tree), done.stderr


def _schema(ops: dict[str, dict[str, Any]], name: str) -> str:
    return str(ops[name]["schema"])


def test_every_written_parameter_gets_its_own_alias_set(fixed: Any) -> None:
    _, _, after, _ = fixed
    assert _schema(after, "fixlib::two_writes") == (
        "two_writes(Tensor x, Tensor(a!) a, Tensor(b!) b) -> ()"
    )
    assert _schema(after, "fixlib::gemv") == "gemv(Tensor x, Tensor(a!) out) -> ()"
    # both outputs of a kernel fed an array of pointers, and an in-place residual
    assert _schema(after, "p4::split2") == "split2(Tensor x, Tensor(a!) o1, Tensor(b!) o2) -> ()"
    assert _schema(after, "p7::fused_norm") == (
        "fused_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight) -> ()"
    )


def test_fixes_left_incomplete_are_listed_as_incomplete(fixed: Any) -> None:
    _, _, after, notes = fixed
    # x carries a read-only alias annotation: out is annotated, x is left for a human
    assert _schema(after, "fixlib::partial_alias") == (
        "partial_alias(Tensor(a) x, Tensor(b!) out) -> ()"
    )
    assert "fixlib::partial_alias: incomplete" in notes
    assert re.search(r"still to do by hand: x has a read-only alias annotation", notes)


def test_returns_that_are_not_aliases_of_written_inputs_are_kept(fixed: Any) -> None:
    _, before, after, notes = fixed
    # a read-only alias (view) return, and a return that is fresh on one path
    assert _schema(after, "fixlib::view_write").endswith("-> Tensor(a)")
    assert _schema(after, "fixlib::maybe_inplace") == (
        "maybe_inplace(Tensor(a!) x, bool inplace) -> Tensor"
    )
    assert "read-only alias (a view)" in notes
    assert "returns its input on one path and a fresh tensor on another" in notes
    assert _schema(after, "fixlib::fresh") == _schema(before, "fixlib::fresh")


def test_call_sites_that_use_the_return_value_are_listed_through_module_aliases(
    fixed: Any,
) -> None:
    _, _, _, notes = fixed
    block = notes.split("fixlib::gemv: now returns ()", 1)[1].split("\n\n", 1)[0]
    sites = re.findall(r"call site uses the return value: (\S+)", block)
    assert sites[:2] == ["fixlib/fixlib/wrappers.py:10", "fixlib/fixlib/wrappers.py:14"]


def test_low_confidence_evidence_never_becomes_an_annotation(fixed: Any) -> None:
    _, before, after, notes = fixed
    assert _schema(after, "fixlib::low_only") == _schema(before, "fixlib::low_only")
    assert "fixlib::low_only: not annotated (low-confidence evidence only" in notes


def test_reaudit_leaves_no_hazard_the_fix_claimed_to_close(fixed: Any) -> None:
    _, before, after, notes = fixed
    claimed = [
        name
        for name, op in before.items()
        if FIXED & set(op["verdicts"])
        and f"{name}: fix by hand" not in notes
        and f"{name}: incomplete" not in notes
        and f"{name}: not annotated" not in notes
    ]
    assert {"fixlib::two_writes", "fixlib::gemv", "_kernlib_C::gemv"} <= set(claimed)
    for name in claimed:
        assert not FIXED & set(after[name]["verdicts"]), (name, after[name]["verdicts"])
        added = {
            p
            for p in after[name]["schema"].split("(", 1)[1].split(", ")
            if "!" in p and p not in before[name]["schema"]
        }
        over = [f for f in after[name]["findings"] if f["verdict"] == "over-annotated"]
        assert not (over and added), (name, over)


def test_no_destructive_rewrites(fixed: Any) -> None:
    tree, before, after, _ = fixed
    diff = _git(tree, "diff", "-U0").stdout
    changed = [line for line in diff.splitlines() if line.startswith(("+", "-"))]
    for line in changed:
        if line.startswith(("+++", "---")):
            continue
        # a schema string, or a custom_op's `mutates_args=` literal (`()` has no quote)
        assert '"' in line or "mutates_args=" in line, f"edit outside a literal: {line}"
    for name, op in before.items():
        assert name in after
        old_writes = re.findall(r"\(([a-z0-9]+)!\)", op["schema"])
        assert set(old_writes) <= set(re.findall(r"\(([a-z0-9]+)!\)", after[name]["schema"]))
        if not op["schema"].endswith("-> ()") and after[name]["schema"].endswith("-> ()"):
            # only ops that returned a buffer they write (or `-> Tensor(a!)`) lose the return
            assert name in {"fixlib::gemv", "_kernlib_C::gemv", "_kernlib_C::silu_and_mul"}, name
