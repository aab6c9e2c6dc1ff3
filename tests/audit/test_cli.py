"""The `soakgate audit` command: formats, exit codes, fix, compare, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soakgate.cli.main import main

KERNLIB = str(Path(__file__).parent / "fixtures" / "kernlib")


def test_text_output_groups_by_verdict_and_fails_on_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["audit", KERNLIB]) == 1
    out = capsys.readouterr().out
    assert out.index("void-op-unannotated (4)") < out.index("unannotated-write (2)")
    assert "fake/meta impl: 9 with, 9 without" in out


def test_fail_on_threshold(tmp_path: Path) -> None:
    clean = tmp_path / "ok.cpp"
    clean.write_text('TORCH_LIBRARY(x, m) { m.def("f(Tensor a) -> Tensor"); }\n')
    assert main(["audit", str(clean)]) == 0
    assert main(["audit", str(clean), "--fail-on", "note"]) == 1  # no-impl-found is a note


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    main(["audit", KERNLIB, "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    ops = {o["op"]: o for o in data["ops"]}
    assert ops["_kernlib_C::gemv"]["verdicts"] == ["unannotated-write", "returns-alias-unannotated"]
    evidence = ops["_kernlib_C::gemv"]["findings"][0]["evidence"][0]
    assert evidence["confidence"] == "high" and "gemv.cu" in evidence["location"]


def test_sarif_output(capsys: pytest.CaptureFixture[str]) -> None:
    main(["audit", KERNLIB, "--format", "sarif"])
    log = json.loads(capsys.readouterr().out)
    assert log["version"] == "2.1.0"
    run = log["runs"][0]
    rule_ids = {r["id"] for r in run["tool"]["driver"]["rules"]}
    assert {r["ruleId"] for r in run["results"]} <= rule_ids
    void = next(r for r in run["results"] if r["ruleId"] == "void-op-unannotated")
    assert void["level"] == "error"
    assert void["locations"][0]["physicalLocation"]["region"]["startLine"] > 0


def test_fix_prints_a_diff_and_notes(capsys: pytest.CaptureFixture[str]) -> None:
    main(["audit", KERNLIB, "--fix"])
    captured = capsys.readouterr()
    assert captured.out.startswith("--- a/")
    assert "call site uses the return value" in captured.err


def test_fix_write_rewrites_and_reaudits(
    kernlib_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["audit", str(kernlib_copy), "--fix", "--write", "--fail-on", "critical"])
    assert "rewrote" in capsys.readouterr().out
    assert code == 0  # bias_add_ (a custom_op) too: its mutates_args is rewritten


@pytest.mark.parametrize(
    "argv",
    [
        ["audit"],
        ["audit", "/does/not/exist"],
        ["audit", KERNLIB, "--write"],
        ["audit", KERNLIB, "--fail-on", "loud"],
        ["audit", "verify", "mod:ns::op"],
        ["audit", KERNLIB, "--inputs", "f32[2]"],
        ["audit", "--compare", "/nope/a.so", "/nope/b.so"],
    ],
)
def test_bad_input_exits_2_without_traceback(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code in {1, 2} and "Traceback" not in err
    if argv[1:2] != ["--compare"]:
        assert code == 2


def test_compare_shows_changed_schemas(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = tmp_path / "old.so", tmp_path / "new.so"
    old.write_bytes(
        b"\x00gemv(Tensor input, Tensor output) -> Tensor\x00keep(Tensor x) -> Tensor\x00"
    )
    new.write_bytes(
        b"\x00gemv(Tensor input, Tensor(a!) output) -> ()\x00keep(Tensor x) -> Tensor\x00"
    )
    assert main(["audit", "--compare", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "gemv  (now mutable)" in out and "keep" not in out
    assert "+ gemv(Tensor input, Tensor(a!) output) -> ()" in out
