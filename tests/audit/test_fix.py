"""`--fix`: diffs that keep formatting and literal splits, and leave no findings behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from soakgate.audit.fix import apply_to_text, plan_fixes, schema_edits, unified_diff, write_fixes
from soakgate.audit.scan import audit_paths
from soakgate.audit.schema import parse_schema
from soakgate.errors import AuditError

FIXED_VERDICTS = {
    "void-op-unannotated",
    "unannotated-write",
    "returns-alias-unannotated",
    "annotated-return-alias",
}


def test_schema_edits_pick_fresh_alias_sets_and_drop_aliased_returns() -> None:
    text = "f(Tensor(a!) x, Tensor y, Tensor? z, Tensor[] w) -> Tensor"
    edits = schema_edits(parse_schema(text), ["y", "z", "w"], drop_returns=True)
    fixed = apply_to_text(text, edits)
    assert fixed == "f(Tensor(a!) x, Tensor(b!) y, Tensor(c!)? z, Tensor(d!)[] w) -> ()"
    assert parse_schema(fixed).is_mutable


def test_read_only_alias_annotation_needs_a_human() -> None:
    with pytest.raises(AuditError):
        schema_edits(parse_schema("f(Tensor(a) x) -> Tensor(a)"), ["x"], drop_returns=False)


def test_diff_keeps_literal_splits_and_formatting(kernlib_copy: Path) -> None:
    diff = unified_diff(plan_fixes(audit_paths([str(kernlib_copy)])))
    assert '-          "Tensor output) -> Tensor");' in diff
    assert '+          "Tensor(a!) output) -> ()");' in diff
    assert '   ops.def("gemv(Tensor input, Tensor weight, "' in diff  # untouched first piece
    assert '+      "rotary_embedding(Tensor positions, Tensor(a!) query,"' in diff
    assert '+      "                 Tensor(b!) key, int head_size) -> ()",' in diff
    assert '+lib.define("scale_into(Tensor x, Tensor(a!) out, float s) -> ()")' in diff


def test_diff_applies_with_patch_and_then_nothing_fixable_remains(kernlib_copy: Path) -> None:
    before = audit_paths([str(kernlib_copy)])
    fixes = plan_fixes(before)
    diff = unified_diff(fixes, kernlib_copy)
    done = subprocess.run(
        ["patch", "-p1", "--quiet"],
        input=diff,
        text=True,
        cwd=kernlib_copy,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    after = audit_paths([str(kernlib_copy)])
    auto_fixed = {f.op for f in fixes if f.file_edits}
    assert auto_fixed == {
        "_kernlib_C::fused_add_rms_norm",
        "_kernlib_C::gemv",
        "_kernlib_C::silu_and_mul",
        "_kernlib_C::rotary_embedding",
        "_kernlib_C::marlin_gemm",
        "kernlib_py::scale_into",
        "kernlib_py::bias_add_",
    }
    for report in after.ops:
        if report.op.qualname in auto_fixed:
            assert not FIXED_VERDICTS & set(report.verdicts), report.op.qualname


def test_write_edits_in_place_and_reports_manual_fixes(kernlib_copy: Path) -> None:
    fixes = plan_fixes(audit_paths([str(kernlib_copy)]))
    changed = write_fixes(fixes)
    assert {Path(p).name for p in changed} == {"torch_bindings.cpp", "py_ops.py"}
    text = (kernlib_copy / "csrc" / "torch_bindings.cpp").read_text()
    assert '"fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, "' in text
    assert {f.op: f.manual for f in fixes if f.manual} == {}
    # a custom_op is fixed in its mutates_args (here `()`, which becomes `("x",)`)
    py_ops = (kernlib_copy / "kernlib" / "py_ops.py").read_text()
    assert '@torch.library.custom_op("kernlib_py::bias_add_", mutates_args=("x",))' in py_ops
    assert '@torch.library.custom_op("kernlib_py::softcap", mutates_args=("out",))' in py_ops
    gemv = next(f for f in fixes if f.op == "_kernlib_C::gemv")
    assert gemv.returns_dropped and [s.line for s in gemv.call_sites] == [18]
    assert [loc.path.endswith("gemv.cu") for loc in gemv.impls_to_change] == [True]
