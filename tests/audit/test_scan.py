"""Verdicts over the kernlib fixture: every verdict, fake coverage, namespaces and call sites."""

from __future__ import annotations

from pathlib import Path

import pytest

from soakgate.audit.model import AuditResult, OpReport, Severity
from soakgate.audit.scan import audit_paths
from soakgate.errors import UsageError

KERNLIB = Path(__file__).parent / "fixtures" / "kernlib"


def op(result: AuditResult, qualname: str) -> OpReport:
    """The report for one op."""
    return next(r for r in result.ops if r.op.qualname == qualname)


EXPECTED = {
    "_kernlib_C::rms_norm": ["ok"],
    "_kernlib_C::fused_add_rms_norm": ["void-op-unannotated"],
    "_kernlib_C::rms_norm_residual": ["ok"],
    "_kernlib_C::gemv": ["unannotated-write", "returns-alias-unannotated"],
    "_kernlib_C::silu_and_mul": ["annotated-return-alias"],
    "_kernlib_C::rotary_embedding": ["void-op-unannotated"],
    "_kernlib_C::scaled_fp8_quant": ["over-annotated"],
    "_kernlib_C::quant.tensor": ["ok"],
    "_kernlib_C::marlin_gemm": ["unannotated-write"],
    "_kernlib_C::cutlass_scaled_mm": ["ok"],
    "_kernlib_C::zero_workspace": ["ok"],
    "_kernlib_C::topk_softmax": ["ok"],
    "_kernlib_C::moe_sum": ["no-impl-found"],
    "_kernlib_C_cache_ops::copy_blocks": ["ok"],
    "kernlib_py::scale_into": ["void-op-unannotated"],
    "kernlib_py::clamp_into": ["ok"],
    "kernlib_py::bias_add_": ["void-op-unannotated"],
    "kernlib_py::softcap": ["ok"],
}


def test_every_op_gets_its_verdicts(kernlib_result: AuditResult) -> None:
    got = {r.op.qualname: r.verdicts for r in kernlib_result.ops}
    assert got == EXPECTED


def test_written_params_and_evidence(kernlib_result: AuditResult) -> None:
    fused = op(kernlib_result, "_kernlib_C::fused_add_rms_norm").findings[0]
    assert fused.params == ("input", "residual")
    assert fused.severity == Severity.CRITICAL
    assert all("layernorm_kernels.cu" in str(e.location) for e in fused.evidence)
    gemv = op(kernlib_result, "_kernlib_C::gemv")
    write = next(f for f in gemv.findings if f.verdict == "unannotated-write")
    assert write.params == ("output",)
    assert any("output + row" in e.expression for e in write.evidence)
    marlin = op(kernlib_result, "_kernlib_C::marlin_gemm").findings[0]
    assert marlin.params == ("workspace",)
    assert "maybe also a, b_q_weight" in marlin.message
    assert op(kernlib_result, "_kernlib_C::scaled_fp8_quant").findings[0].params == ("scale",)


def test_residual_read_only_next_to_residual_written(kernlib_result: AuditResult) -> None:
    assert op(kernlib_result, "_kernlib_C::rms_norm_residual").verdicts == ["ok"]
    fused = op(kernlib_result, "_kernlib_C::fused_add_rms_norm")
    assert "residual" in fused.findings[0].params


def test_names_are_only_a_weak_hint(kernlib_result: AuditResult) -> None:
    moe = op(kernlib_result, "_kernlib_C::moe_sum").findings[0]
    assert moe.severity == Severity.NOTE and "weak hint" in moe.message


def test_guards_namespaces_and_fake_coverage(kernlib_result: AuditResult) -> None:
    assert op(kernlib_result, "_kernlib_C::marlin_gemm").op.guard == "#ifndef USE_ROCM"
    with_fake = {r.op.qualname for r in kernlib_result.ops if r.has_fake}
    assert with_fake == {
        "_kernlib_C::rms_norm",
        "_kernlib_C::fused_add_rms_norm",
        "_kernlib_C::gemv",
        "_kernlib_C::silu_and_mul",
        "_kernlib_C::rotary_embedding",
        "_kernlib_C::marlin_gemm",
        "kernlib_py::scale_into",
        "kernlib_py::clamp_into",
        "kernlib_py::softcap",
    }


def test_python_call_sites_that_use_the_return_value(kernlib_result: AuditResult) -> None:
    sites = kernlib_result.call_sites["_kernlib_C::gemv"]
    assert [s.line for s in sites] == [18]  # gemv_into (line 22) ignores the result
    assert "_kernlib_C::rms_norm" not in kernlib_result.call_sites


def test_binary_schemas_are_judged_from_the_schema_alone(tmp_path: Path) -> None:
    library = tmp_path / "_C.so"
    library.write_bytes(
        b"\x7fELF\x00\x01gemv(Tensor input, Tensor weight, Tensor output) -> ()\x00"
        b"rms_norm(Tensor! out, Tensor x) -> ()\x00version 1.2 (x86) -> ok\x00"
    )
    result = audit_paths([str(library)])
    assert {r.op.schema.name: r.verdicts for r in result.ops} == {
        "gemv": ["void-op-unannotated"],
        "rms_norm": ["ok"],
    }


def test_missing_path_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        audit_paths([str(KERNLIB / "nope")])
