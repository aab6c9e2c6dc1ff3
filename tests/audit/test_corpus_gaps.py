"""Write-inference gaps found by the held-out part of the real-kernel corpus (issue 16).

Each fixture under `tests/audit/fixtures/corpus_gaps/` is a minimal, self-written example of
one construct the corpus showed the audit missing or misreading; the tests run the real CLI
(`soakgate audit --format json`) on it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from soakgate.cli.main import main

GAPS = Path(__file__).parent / "fixtures" / "corpus_gaps"


def _audit(capsys: pytest.CaptureFixture[str], name: str) -> dict[str, dict[str, Any]]:
    main(["audit", str(GAPS / name), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    return {op["op"]: op for op in data["ops"]}


def _written(op: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Parameter -> medium/high-confidence write evidence of the op's findings."""
    found: dict[str, list[dict[str, Any]]] = {}
    for finding in op["findings"]:
        for evidence in finding["evidence"]:
            if evidence["kind"] != "returns-param" and evidence["confidence"] != "low":
                found.setdefault(evidence["param"], []).append(evidence)
    return found


def test_an_implementation_returning_a_reference_is_found_and_analysed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    op = _audit(capsys, "g1_ref_return")["g1::scale_"]
    assert "no-impl-found" not in op["verdicts"]
    assert "returns-alias-unannotated" in op["verdicts"]
    assert set(_written(op)) == {"self"}


def test_an_assignment_after_a_check_macro_without_semicolon_still_aliases(
    capsys: pytest.CaptureFixture[str],
) -> None:
    op = _audit(capsys, "g2_glued_assignment")["g2::fill"]
    assert op["verdicts"] == ["void-op-unannotated"]
    # z_ is written through z = z_.value(); out_z = z; x is only read
    written = _written(op)
    assert set(written) == {"z_"}
    assert written["z_"][0]["location"].endswith("ops.cpp:16")


def test_an_accessor_built_from_mutable_data_ptr_is_a_view_not_a_write(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ops = _audit(capsys, "g3_accessors")
    assert ops["g3::pack"]["verdicts"] == ["ok"]  # mask is only read through mask_a
    clear = ops["g3::clear"]
    assert clear["verdicts"] == ["void-op-unannotated"]
    written = _written(clear)
    assert set(written) == {"m"} and written["m"][0]["kind"] == "store"


def test_a_schema_inferred_from_the_cpp_signature_is_audited_and_fixed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ops = _audit(capsys, "g4_inferred_schema")
    scale = ops["g4::scale"]
    # named after the definition (output), typed the way torch infers it (double -> float)
    assert scale["schema"] == "scale(Tensor output, Tensor input, float factor) -> ()"
    assert scale["verdicts"] == ["void-op-unannotated"]
    assert set(_written(scale)) == {"output"}
    assert ops["g4::twice"]["schema"] == "twice(Tensor x) -> Tensor"
    assert ops["g4::twice"]["verdicts"] == ["ok"]
    top_k = ops["g4::top_k"]
    assert top_k["schema"] == "top_k(Tensor probs, Tensor renorm, Tensor? maybe_k, int k) -> ()"
    assert set(_written(top_k)) == {"renorm"}
    # --fix spells the whole schema where the name was, with the written parameter marked
    tree = tmp_path / "g4"
    shutil.copytree(GAPS / "g4_inferred_schema", tree)
    main(["audit", str(tree), "--fix", "--write"])
    capsys.readouterr()
    text = (tree / "csrc" / "bindings.cu").read_text()
    assert 'm.def("scale(Tensor(a!) output, Tensor input, float factor) -> ()", scale);' in text
    assert 'm.def("twice", &twice);' in text
    after = _audit_path(capsys, tree)
    assert after["g4::scale"]["verdicts"] == ["ok"] and after["g4::top_k"]["verdicts"] == ["ok"]


def _audit_path(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, dict[str, Any]]:
    main(["audit", str(path), "--format", "json"])
    return {op["op"]: op for op in json.loads(capsys.readouterr().out)["ops"]}


def test_an_included_header_does_not_redefine_the_project_macros_with_its_else_branch(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the header is found next to the source (and from the tree's root, as a user runs it):
    # reading it would let its `#else` fallback (an empty case) win over the real definition
    for where in (GAPS / "g5_conditional_macros", GAPS / "g5_conditional_macros" / "csrc"):
        monkeypatch.chdir(where)
        op = _audit_path(capsys, Path("."))["g5::negate"]
        assert op["verdicts"] == ["void-op-unannotated"]
        assert set(_written(op)) == {"out"}


def test_kernels_launched_through_the_cuda_runtime_api_are_followed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ops = _audit(capsys, "g6_launch_apis")
    for name in ("g6::add_one", "g6::scale"):
        op = ops[name]
        assert op["verdicts"] == ["void-op-unannotated"], name
        # y is stored to in the kernel; x is passed as a non-const pointer but only loaded
        written = _written(op)
        assert set(written) == {"y"}, name
        assert all(e["kind"] == "kernel-store" for e in written["y"]), name
        weak = {e["param"] for f in op["findings"] for e in f["evidence"]}
        assert weak == {"y"}, name  # not even low-confidence evidence for x


def test_a_struct_built_by_its_constructor_carries_pointers_into_a_kernel(
    capsys: pytest.CaptureFixture[str],
) -> None:
    op = _audit(capsys, "g7_struct_methods")["g7::append"]
    assert op["verdicts"] == ["void-op-unannotated"]
    written = _written(op)
    # only get_k_ptr's field is stored through; v_cache and indices are never written
    assert set(written) == {"k_cache"}
    assert written["k_cache"][0]["kind"] == "field-store"


def test_custom_op_reached_through_an_alias_with_a_name_from_a_constant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ops = _audit(capsys, "g8_custom_op_alias")
    assert set(ops) == {"g8::scale_", "g8::bias"}
    assert ops["g8::scale_"]["verdicts"] == ["ok"] and ops["g8::scale_"]["has_fake"]
    bias = ops["g8::bias"]
    assert bias["verdicts"] == ["void-op-unannotated"] and set(_written(bias)) == {"x"}


def test_a_python_impl_calling_a_pybind11_extension_is_followed_into_the_cpp(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ops = _audit(capsys, "g9_pybind")
    fill = ops["g9::fill"]
    assert fill["verdicts"] == ["void-op-unannotated"]
    written = _written(fill)
    assert set(written) == {"out"}  # x is only read
    assert written["out"][0]["kind"] == "extension-call"
    assert "o[n] = i[n] * scale" in written["out"][0]["expression"]
    # keyword arguments are matched to the C++ parameter names py::arg gives them
    assert ops["g9::copy_back"]["verdicts"] == ["ok"]


def test_a_store_on_the_other_branch_than_the_binding_is_not_a_write_of_the_tensor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    op = _audit(capsys, "g10_exclusive_branches")["g10::dropout_scale"]
    assert op["verdicts"] == ["ok"]  # out is written and declared; rng_state is only read


def test_fix_adds_the_missing_parameter_to_a_custom_ops_mutates_args(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    op = _audit(capsys, "g11_mutates_args")["g11::step"]
    assert op["verdicts"] == ["unannotated-write"] and set(_written(op)) == {"out"}
    tree = tmp_path / "g11"
    shutil.copytree(GAPS / "g11_mutates_args", tree)
    assert main(["audit", str(tree), "--fix", "--write"]) == 0
    capsys.readouterr()
    assert '    mutates_args={"state", "out"},\n' in (tree / "ops.py").read_text()
    assert _audit_path(capsys, tree)["g11::step"]["verdicts"] == ["ok"]
