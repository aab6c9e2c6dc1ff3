"""The write patterns the audit used to miss or misread (issue 16), one fixture each.

Every test runs `soakgate audit --format json` on its fixture under
`tests/audit/fixtures/patterns/` and asserts which parameters the evidence names.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from soakgate.cli.main import main

PATTERNS = Path(__file__).parent / "fixtures" / "patterns"


def _audit(capsys: pytest.CaptureFixture[str], name: str) -> dict[str, dict[str, Any]]:
    main(["audit", str(PATTERNS / name), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    return {op["op"]: op for op in data["ops"]}


def _written(op: dict[str, Any], strong_only: bool = True) -> dict[str, list[dict[str, Any]]]:
    """Parameter -> evidence of the op's findings (medium/high confidence unless asked)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for finding in op["findings"]:
        for evidence in finding["evidence"]:
            if evidence["kind"] == "returns-param":
                continue
            if strong_only and evidence["confidence"] == "low":
                continue
            found.setdefault(evidence["param"], []).append(evidence)
    return found


def _fixed_copy(capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str) -> tuple[Path, int]:
    """A copy of fixture `name` after `soakgate audit --fix --write` on it, and the exit code."""
    tree = tmp_path / name
    shutil.copytree(PATTERNS / name, tree)
    code = main(["audit", str(tree), "--fix", "--write"])
    capsys.readouterr()
    return tree, code


def test_project_macros_are_expanded_and_evidence_points_at_the_call_site(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ops = _audit(capsys, "p1_macros")
    scale = ops["p1::scale"]
    assert scale["verdicts"] == ["void-op-unannotated"]
    written = _written(scale)
    assert set(written) == {"out"}  # x is only read
    evidence = written["out"][0]
    assert evidence["kind"] == "kernel-store"
    # LAUNCH_KERNEL(scale_kernel) is on line 18 of kernels.cu, inside the P1_DISPATCH lambda
    assert evidence["location"].endswith("kernels.cu:18")


def test_sycl_functors_built_by_aggregate_and_constructor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ops = _audit(capsys, "p2_functors")
    assert set(_written(ops["p2::copy_into"])) == {"dst"}
    assert set(_written(ops["p2::add_residual"])) == {"residual"}
    assert {e["kind"] for e in _written(ops["p2::add_residual"])["residual"]} == {"kernel-store"}
    # declared as a variable (`ScaleKernel kfn(...)`), writing through a local lambda
    assert set(_written(ops["p2::scale_into"])) == {"dst"}


def test_vector_and_intrinsic_stores_write_and_loads_do_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ops = _audit(capsys, "p3_vector_stores")
    written = _written(ops["p3::esimd_ops"], strong_only=False)
    assert set(written) == {"out", "acc", "o2", "dst", "gm"}  # block_load(x) reads x
    assert all(e["confidence"] == "high" for ev in written.values() for e in ev)
    assert set(_written(ops["p3::cpu_vec"], strong_only=False)) == {"out"}  # v.save(op)
    # st.global in inline PTX writes out; ld.global of x (non-const cast) is only a load
    assert set(_written(ops["p3::copy4"], strong_only=False)) == {"out"}


def test_pointer_arrays_and_parameter_structs(capsys: pytest.CaptureFixture[str]) -> None:
    ops = _audit(capsys, "p4_arrays_structs")
    assert set(_written(ops["p4::split2"])) == {"o1", "o2"}
    doubled = _written(ops["p4::doubled"])
    assert set(doubled) == {"out"}  # params.in_ptr is only read
    assert doubled["out"][0]["kind"] == "field-store"


def test_optional_unwrap_reassignment_conditional_and_const_auto(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ops = _audit(capsys, "p5_aliases")
    assert set(_written(ops["p5::fill_c"])) == {"c_or_none"}
    assert set(_written(ops["p5::fill_const_auto"])) == {"out"}
    maybe = ops["p5::fill_maybe_inplace"]
    assert set(_written(maybe)) == {"x"}
    assert "returns-alias-unannotated" in maybe["verdicts"]


def test_what_is_not_a_write(capsys: pytest.CaptureFixture[str]) -> None:
    ops = _audit(capsys, "p6_not_writes")
    # stores through addresses loaded from ptr_table do not write the table
    assert "ptr_table" not in _written(ops["p6::scatter_rows"], strong_only=False)
    # alignment check, C-style cast to const, __ldg: nothing written, not even low
    assert ops["p6::checksum"]["verdicts"] == ["ok"]
    # `CHECK_INPUT(x)` without `;` glued to the next line: flags is written, x is not
    assert ops["p6::checked"]["verdicts"] == ["ok"]
    launch = ops["p6::launch_elsewhere_op"]
    low = _written(launch, strong_only=False)
    assert set(low) == {"x", "out"} and not _written(launch)  # low confidence only


def test_stub_and_real_implementation_and_stable_abi(capsys: pytest.CaptureFixture[str]) -> None:
    ops = _audit(capsys, "p7_which_impl")
    norm = ops["p7::fused_norm"]
    assert set(_written(norm)) == {"input", "residual"}  # not bound to the #ifndef stub
    assert norm["implementations"][0]["function"] == "fused_norm"
    assert [a.rsplit(":", 1)[0] for a in norm["implementations"][0]["alternatives"]] == [
        str(PATTERNS / "p7_which_impl" / "ops.cu")
    ]  # both definitions are analysed and reported
    assert set(_written(ops["p7s::add_into"])) == {"out"}  # STABLE_TORCH_LIBRARY(_IMPL)


def test_fakes_registered_indirectly(capsys: pytest.CaptureFixture[str]) -> None:
    ops = _audit(capsys, "p8_fakes")
    assert {name: op["has_fake"] for name, op in ops.items()} == {
        f"_p8::f{letter}": True for letter in "abcde"
    }
    main(["audit", str(PATTERNS / "p8_fakes")])
    assert "fake/meta impl: 5 with, 0 without" in capsys.readouterr().out


def test_fake_names_built_inside_the_registering_functions_are_found_and_none_guessed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 32 item 3: a namespace constant local to the function, a parameter's default,
    loops over module and local lists and a dict's items, a helper that builds the name, a
    function that returns it. `lj` (a parameter given at run time) and `lk` (a local that
    shadows the module's constant with a run-time value) cannot be known: not found; `ll` has
    no fake at all."""
    ops = _audit(capsys, "p9_local_names")
    found = {name: op["has_fake"] for name, op in ops.items()}
    assert found == {f"_p9::l{c}": c not in "jkl" for c in "abcdefghijkl"}


def test_extension_names_come_from_setup_py_per_translation_unit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`TORCH_LIBRARY(TORCH_EXTENSION_NAME, m)` is named by the extension whose sources list the
    file (the last part of `CUDAExtension(name=...)`), over a fallback `#define` in the file."""
    ops = _audit(capsys, "p10_build_setup")
    assert {name: op["has_fake"] for name, op in ops.items()} == {
        "_p10::pa": True, "_p10_moe::pb": True,
    }  # fmt: skip


def test_extension_names_come_from_cmake_targets_and_an_unlisted_file_is_not_guessed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """vLLM's form: `define_gpu_extension_target(_C ... SOURCES ${VAR})` with the sources in
    `set`/`list(APPEND ...)`; `CONCAT(TORCH_EXTENSION_NAME, _ops)` pastes onto the target's
    name. A file no target lists, in a build of two extensions, keeps the macro's name."""
    ops = _audit(capsys, "p11_build_cmake")
    assert {name: op["has_fake"] for name, op in ops.items()} == {
        "_C::ca": True, "_moe_C_ops::cb": True, "TORCH_EXTENSION_NAME::cz": False,
    }  # fmt: skip


def test_a_call_reaches_the_definition_a_compiler_would(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 32 item 2: a CUDA binding's function is the GPU file's body, not the CPU file's of
    the same name (which normalises `input` in place); a helper is the one the launcher
    includes, not an unrelated one of the same name in another translation unit (which writes
    its second argument). Before, both were merged: `input` written, at high confidence."""
    ops = _audit(capsys, "p12_which_body")
    assert set(_written(ops["p12::rms"])) == {"out"}
    assert ops["p12::rms"]["implementations"][0]["alternatives"] == []
    assert set(_written(ops["p12::act"])) == {"out"}
    main(["audit", str(PATTERNS / "p12_which_body"), "--fix"])
    diff = capsys.readouterr().out
    assert '+  m.def("rms(Tensor(a!) out, Tensor input) -> ()");' in diff
    assert "Tensor(b!) input" not in diff and "Tensor(a!) input" not in diff


def test_a_project_out_function_is_read_and_in_place_through_a_view_writes_its_base(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A project function named `*_out` whose body is in the tree is read, not taken to write
    its first argument by ATen's convention; `x.view(-1).mul_(s)` in Python writes x (and not
    the argument s)."""
    ops = _audit(capsys, "p13_names_and_views")
    assert set(_written(ops["p13::gather"])) == {"result"}
    assert set(_written(ops["p13py::scale"])) == {"x"}


def test_pointers_copied_into_a_functors_field_array_in_a_launch_macro_are_written(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 32's largest cause of misses: output pointers gathered into a local array, copied
    element by element into a default-constructed functor's field array inside a launch
    macro, written by `operator()` through the field; and a functor filled field by field and
    launched inside `queue.submit`. A field the functor never writes through (`scratch`) and a
    const input are not written."""
    ops = _audit(capsys, "p14_functor_fields")
    assert set(_written(ops["p14::split"])) == {"o1", "o2"}
    assert set(_written(ops["p14::gate"])) == {"out"}


def test_platform_alternatives_inside_a_parameter_list_and_a_launch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`#ifndef USE_ROCM` / `#else` inside a kernel's parameter list and its launch's argument
    list (the held-out miss of aphrodite's `squeezellm_gemm`): the first alternative is read,
    so `mul` is written and nothing else."""
    ops = _audit(capsys, "p15_platform_alternatives")
    assert set(_written(ops["p15::lut_gemm"])) == {"mul"}


def test_address_tables_handed_to_the_driver_are_not_taken_for_outputs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 32: int64 tensors of addresses and sizes reinterpreted as `CUdeviceptr*` /
    `size_t*` / `void**` arrays and handed to a driver entry point (through a function pointer
    from `cuGetProcAddress`, or by name) are read by it: not a write at the confidence `--fix`
    acts on, although the code asked for `mutable_data_ptr` (the C API's arrays are
    non-const). A float output handed to the same unreadable call keeps its medium write."""
    ops = _audit(capsys, "p16_address_tables")
    assert not _written(ops["p16::copy_batch"])
    assert set(_written(ops["p16::gather_batch"])) == {"out"}


@pytest.mark.parametrize(
    ("fixture", "op", "written"),
    [
        ("p17_calls_followed", "p17::fill_sign", {"h"}),  # a store through `*ptr++`
        ("p17_calls_followed", "p17::hgemm", {"c"}),  # cuBLAS writes C, reads A and B
        ("p17_calls_followed", "p17::picked_gemm", {"c"}),  # kernel = pick_kernel(m)
        ("p17_calls_followed", "p17::make_matrix", {"q_weight", "q_perm"}),  # new QMatrix
        ("p17_calls_followed", "p17::linear_run", {"y"}),  # the certain path of two
        ("p18_extension_objects", "p18::marlin_gemm", {"workspace"}),  # ext.lib.name(...)
        ("p18_extension_objects", "p18::scale_rows", {"out"}),  # _C = load(...); _C.name
        ("p19_argument_structs", "p19::cutlass_gemm", {"out"}),  # const inputs in the struct
        ("p20_unity_builds", "p20::gemm_fp16", {"c", "workspace"}),  # built by #include
        ("p22_autograd_functions", "p22::scatter_sum", {"optional_out"}),  # X::apply -> forward
        ("p22_autograd_functions", "p22::clamp_in_place", {"x"}),  # ctx->mark_dirty({x})
        ("p23_python_dsl_kernels", "p23::norm_out", {"out"}),  # @kernel_op -> CuTe kernel
        ("p23_python_dsl_kernels", "p23::norm_inplace", {"x"}),  # the same launcher, in place
        ("p23_python_dsl_kernels", "p23::double", {"out"}),  # kernel[grid](x, out): tl.store
        ("p23_python_dsl_kernels", "p23::double_rows", {"out"}),  # wrap_triton; `X += ...`
    ],
)
def test_what_the_first_run_on_the_held_out_libraries_missed_is_followed(
    capsys: pytest.CaptureFixture[str], fixture: str, op: str, written: set[str]
) -> None:
    """Issue 32: the misses of the first run on gptqmodel and optimum-quanto, one fixture
    op each (a write at the confidence `--fix` acts on): a store through a pointer that
    moves (`*ptr++ = v`); a cuBLAS GEMM's output; a kernel launched through the pointer a
    picker function returns; a constructor reached by `new` that keeps the pointers in
    fields, launches on one and calls a method of its class that writes another (the
    constant input it keeps is not written); a callee's
    certain write carried up although a low-confidence one was found first; a Python impl
    calling an extension through a module-level object (`ext.lib.name(...)`) or a name
    bound to `load(...)`; and the false writes of the tuned auditor's first run on
    gptqmodel's GEMMs: pointers to const gathered with a writable one into a CUTLASS
    arguments aggregate handed to the library are not made writable by it; and its misses
    (Marlin): an op function that exists only in the unit that defines its name and then
    includes the shared source (`#define GEMM_EXPORT_NAME gemm_fp16` + `#include
    "gemm_impl.cu"`), whose kernel comes from a picker returning a local it assigned
    template instances to (and a default kernel made by a macro); and the misses of the
    first run on PyG's torch_scatter: `ScatterSum::apply(args...)` runs the autograd
    Function's `forward(ctx, args...)` (its `Variable` parameters are tensors), and
    `ctx->mark_dirty({x})` is torch's own statement that `x` is modified in place; and the
    misses of the first run on QuACK: ops registered through the package's own decorator that
    calls `torch.library.custom_op`, whose writes happen in a CuTe DSL kernel reached through
    a launcher, a compiled kernel object, its `__call__` and `self.kernel(...)`, through tiles
    and partitions made in comprehensions and a `partial` copy helper; and a Triton kernel
    launched as `kernel[grid](...)` or `wrap_triton(kernel)[grid](...)` storing through
    `out_ptr + offsets` (moving a pointer with `X += ...` stores nothing)."""
    assert set(_written(_audit(capsys, fixture)[op])) == written


def test_python_kernels_read_what_they_only_load_and_fix_annotates_an_explicit_schema(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The QuACK repro's reads: a tensor the kernel only loads (`x`, and `starts`, whose
    `Int32` element offsets the output), one a branch views while the other branch writes a
    new tensor (`p23::gather`); and `--fix` on an op with an explicit `schema=` annotates the
    schema string and `mutates_args` together (torch refuses them when they disagree)."""
    ops = _audit(capsys, "p23_python_dsl_kernels")
    assert ops["p23::gather"]["verdicts"] == ["ok"] and not _written(ops["p23::gather"])
    assert set(_written(ops["p23::norm_out"])) == {"out"}  # not x, not starts
    tree, code = _fixed_copy(capsys, tmp_path, "p23_python_dsl_kernels")
    assert code == 0
    text = (tree / "p23pkg" / "norm.py").read_text()
    assert (
        'mutates_args=("out",),\n    schema="(Tensor x, Tensor starts, Tensor(a!) out) -> ()"'
        in text
    )
    main(["audit", str(tree), "--format", "json"])
    fixed = {op["op"]: op for op in json.loads(capsys.readouterr().out)["ops"]}
    assert {name: op["verdicts"] for name, op in fixed.items()} == {n: ["ok"] for n in fixed}
    torch = pytest.importorskip("torch")

    def norm_out(x: Any, starts: Any, out: Any) -> None:
        return None

    norm_out.__annotations__ = dict.fromkeys(("x", "starts", "out"), torch.Tensor)
    norm_out.__annotations__["return"] = None
    schema = "(Tensor x, Tensor starts, Tensor(a!) out) -> ()"  # what the fix wrote
    torch.library.custom_op("p23_test::norm_out", norm_out, mutates_args=("out",), schema=schema)


def test_a_function_built_by_including_a_source_is_reported_where_it_is_written(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The unit `gemm_fp16.cu` makes `gemm_fp16` out of `gemm_impl.cu`'s text: its evidence
    points at the lines of `gemm_impl.cu`, where the code is, not at the including file."""
    op = _audit(capsys, "p20_unity_builds")["p20::gemm_fp16"]
    locations = {e["location"].rsplit("/", 1)[-1] for e in _written(op)["c"]}
    assert locations == {"gemm_impl.cu:39"}


def test_ops_registered_with_the_legacy_register_operators_api_are_audited(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`torch::RegisterOperators().op("ns::name", &fn)` (PyG's torch_scatter and torch_sparse)
    registers ops outside any TORCH_LIBRARY block: before, they were silently absent. A name
    without a schema gets the one torch infers (no annotation: `optional_out`, written in
    place, is a hazard); a schema string is read as written."""
    ops = _audit(capsys, "p21_register_operators")
    assert set(ops) == {"p21::scatter_sum", "p21::gather_rows"}
    assert set(_written(ops["p21::scatter_sum"])) == {"optional_out"}
    assert "unannotated-write" in ops["p21::scatter_sum"]["verdicts"]
    assert ops["p21::gather_rows"]["verdicts"] == ["ok"]


def test_the_fix_of_a_register_operators_name_keeps_its_namespace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--fix` writes the inferred schema where the name was, after the namespace the legacy
    API needs in the string (`"p21::scatter_sum(..., Tensor(a!)? optional_out, ...)"`)."""
    main(["audit", str(PATTERNS / "p21_register_operators"), "--fix"])
    diff = capsys.readouterr().out
    added = [line for line in diff.splitlines() if line.startswith("+ ") or line.startswith("+\t")
             or (line.startswith("+") and not line.startswith("+++"))]  # fmt: skip
    assert any('.op("p21::scatter_sum(Tensor src' in line and "(a!)? optional_out" in line
               for line in added), diff  # fmt: skip


def test_an_inferred_schema_comes_from_the_registering_files_own_function(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two extensions of one tree each register `m.def("forward", forward)` over their own
    `forward` (rwkv 0.8.32's rwkv5/6/7 ops, the sixth held-out first run): torch infers each
    op's schema from the signature its own file defines, so the other extension's `forward`
    (another arity) must lend neither its parameters nor its writes."""
    ops = _audit(capsys, "p24_same_name_extensions")
    small, large = ops["p24_wkv4::forward"], ops["p24_wkv5::forward"]
    assert small["schema"] == "forward(int n, Tensor state, Tensor r, Tensor k, Tensor y) -> ()"
    assert large["schema"] == (
        "forward(int n, Tensor state, Tensor r, Tensor w, Tensor k, Tensor v, Tensor a, "
        "Tensor y) -> ()"
    )
    assert set(_written(small)) == {"state", "y"}
    assert set(_written(large)) == {"state", "y"}
    evidence = _written(large)["y"][0]
    assert "wkv5" in evidence["location"]


def test_callers_that_hand_an_op_a_fresh_buffer_show_what_it_writes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Ops over a closed vendor binary (vLLM-Kunlun 0.11.1, the sixth held-out first run): the
    package's own callers show the writes. An uninitialised buffer (`torch.empty`, `empty_like`,
    `new_empty`) handed to the op before anything reads it is filled by the op; an initialised
    one (`torch.zeros`) only when the caller then returns it untouched. Not evidence: a buffer
    an earlier op filled (`out` at `quant`), a zero-element placeholder (`stats`), an
    initialised input never returned (`bias`), a name a branch may rebind (`shift`'s `out`),
    a buffer touched before the call (`scale`'s `out`), a parameter the implementation never
    reads or reads only for its metadata. `--fix` annotates `mutates_args`."""
    ops = _audit(capsys, "p25_caller_buffers")
    assert set(_written(ops["p25::act"])) == {"out"}
    assert set(_written(ops["p25::quant"])) == {"q", "scale"}
    assert set(_written(ops["p25::topk"])) == {"score", "index"}
    assert set(_written(ops["p25::accumulate"])) == {"acc"}
    assert not _written(ops["p25::shift"]) and not _written(ops["p25::scale"])
    # an implementation that never reads the parameter (Python), or reads only its sizes and
    # options (C++: a shape pattern, xformers' `_ck_rand_uniform`), overrides the caller
    assert set(_written(ops["p25::gate"])) == {"weights", "indices"}
    assert ops["p25::rand_like_pattern"]["verdicts"] == ["ok"]
    kinds = {e["kind"] for e in _written(ops["p25::act"])["out"]}
    assert kinds == {"caller-fresh-buffer"}
    assert {e["kind"] for e in _written(ops["p25::accumulate"])["acc"]} == {
        "caller-returned-buffer"
    }
    assert _written(ops["p25::act"])["out"][0]["location"].endswith("layers.py:11")
    tree, _ = _fixed_copy(capsys, tmp_path, "p25_caller_buffers")
    text = (tree / "p25pkg" / "ops.py").read_text()
    assert '@custom_op("p25::act", mutates_args=("out",))' in text
    assert '@custom_op("p25::quant", mutates_args=("q", "scale"))' in text
    assert '@custom_op("p25::shift", mutates_args=())' in text  # nothing found: left alone


def test_ops_registered_by_direct_register_custom_op_are_audited(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """vLLM's `direct_register_custom_op` (its own Python and its plugins': vLLM-Kunlun's
    `vllm::gdn_attention` was not seen on the sixth held-out first run) registers `op_func`
    under `vllm::op_name`, or under `target_lib`'s namespace, with the schema `custom_op` would
    infer; `fake_impl` is its fake. `--fix` adds the written parameter to `mutates_args`."""
    ops = _audit(capsys, "p26_direct_register")
    assert set(ops) == {
        "vllm::unified_attention_with_output", "p26::rotate", "vllm::preshuffled_gemm",
    }  # fmt: skip
    # a function the tree does not define returns its own tensor (vLLM 0.34.0's aiter GEMM:
    # `output = gemm(A, B); output.add_(bias)` writes neither A nor B)
    assert ops["vllm::preshuffled_gemm"]["verdicts"] == ["ok"]
    attention = ops["vllm::unified_attention_with_output"]
    assert attention["has_fake"] and attention["verdicts"] == ["void-op-unannotated"]
    assert set(_written(attention)) == {"output"}
    assert ops["p26::rotate"]["verdicts"] == ["ok"]
    tree, _ = _fixed_copy(capsys, tmp_path, "p26_direct_register")
    assert 'mutates_args=["output"],' in (tree / "attention.py").read_text()


def test_a_python_op_writes_what_the_ops_it_calls_write(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A Python op whose body (or a helper of the tree it calls) hands its tensors to another
    op through `torch.ops` writes what that op writes: the called op's evidence where the tree
    has its implementation (through chains of ops), its schema's `(a!)` where the tree has only
    the schema. A tensor handed to an op of another library is not shown unwritten (vLLM
    0.34.0's XPU wrappers were all `over-annotated` notes), and one handed to an op whose
    implementation only reads it is not written."""
    ops = _audit(capsys, "p27_ops_calling_ops")
    through = ("p27::norm_via_alias", "p27::norm_via_import", "p27::norm_via_bound_op")
    for name in ("p27::norm", "p27::norm_via_helper", *through, "p27::norm_via_root"):
        assert ops[name]["verdicts"] == ["void-op-unannotated"], name
        assert set(_written(ops[name])) == {"out"}
        assert {e["kind"] for e in _written(ops[name])["out"]} == {"op-call"}
    assert _written(ops["p27::norm_via_helper"])["out"][0]["location"].endswith("layers.py:9")
    assert set(_written(ops["p27::closed_wrapper"])) == {"dst"}  # by its keyword-bound schema
    assert set(_written(ops["p27::chain"])) == {"result"}  # chain -> norm -> fill
    assert ops["p27::peek_wrapper"]["verdicts"] == ["ok"]
    assert ops["p27::vendor_wrapper"]["verdicts"] == ["ok"]
    assert ops["p27::peek"]["verdicts"] == ["over-annotated"]
    # a method of something else (`_CACHES.get(layer)`) does not return a view of its argument
    # (vLLM 0.34.0: `get_attention_context(layer_name)`'s KV cache was taken for the name's)
    assert ops["p27::cache_update"]["verdicts"] == ["ok"]
    tree, _ = _fixed_copy(capsys, tmp_path, "p27_ops_calling_ops")
    text = (tree / "p27pkg" / "layers.py").read_text()
    assert '@custom_op("p27::norm", mutates_args=("out",))' in text
    assert '@custom_op("p27::chain", mutates_args=("result",))' in text
    assert '@custom_op("p27::peek_wrapper", mutates_args=())' in text


def test_ascend_npu_ops_are_followed_into_their_ascendc_kernels(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """vLLM-Ascend's two ways to an NPU kernel (the seventh held-out first run found none of
    its 38 written parameters): pointers captured by an `OpCommand` handler that launches an
    AscendC kernel from another file, and `EXEC_NPU_CMD(aclnnName, ...)` into an operator the
    tree defines (`OpDef`: inputs, then outputs; an output named as an input is that input)
    whose kernel `name` is followed with the tensors in its parameters' order. In the kernel,
    `GlobalTensor` members bound by `SetGlobalBuffer` in `Init`, in a constructor (also through
    `this->` and `reinterpret_cast`) or in the method that stores, written by `DataCopy` /
    `DataCopyPad` (destination first) in other methods; a load into local memory is not a
    write. `aclrtMemcpyAsync` writes its destination. A closed CANN operator (not in the tree)
    and an operator's own fresh output write nothing of the op's parameters."""
    ops = _audit(capsys, "p28_ascendc")
    # the schema marks x and weight `Tensor!`: the kernel only loads them
    assert ops["p28::shrink"]["verdicts"] == ["over-annotated"]
    assert ops["p28::shrink"]["findings"][0]["params"] == ["x", "weight"]
    assert set(_written(ops["p28::swap"])) == {"dst"}
    scale = _written(ops["p28::scale_"])
    assert set(scale) == {"x"}
    assert {e["kind"] for e in scale["x"]} == {"vendor-output", "mutating-call"}
    assert set(_written(ops["p28::store"])) == {"cache"}  # no output: only the kernel says so
    # members and the storing method in a base class, bound by the derived class's `Init`
    assert set(_written(ops["p28::rotate_"])) == {"q"}
    assert ops["p28::norm"]["verdicts"] == ["ok"]  # CANN's own operator, not in the tree
    assert ops["p28::copy_out"]["verdicts"] == ["ok"]  # staging only read, y its own output
    tree, _ = _fixed_copy(capsys, tmp_path, "p28_ascendc")
    text = (tree / "vendor.cpp").read_text()
    assert '"scale_(Tensor(a!) x, Tensor factor) -> ()"' in text
    assert '"store(Tensor key, Tensor(a!) cache, Tensor slots) -> ()"' in text


def test_ops_of_a_projects_own_registrar_are_found_and_followed_into_their_kernels(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """SGLang 0.5.9's shape (the eighth held-out first run found 1 of its 32 written
    parameters): ops registered by the project's own decorator over
    `direct_register_custom_op` (named after the function or its `op_name=`, also applied to a
    function of another module), implemented by Python whose flags a caller settles
    (`inplace=False` rules out `out = x`), by `torch.distributed` collectives on an object
    looked up at run time, and by CUDA compiled at run time from the tree (`load_jit(...,
    cuda_wrappers=[("store_cache", "StoreKernel<...>::run")])`) over tvm-ffi tensor views,
    launched by a launcher object called with the kernel."""
    ops = _audit(capsys, "p29_registration_wrappers")
    assert ops["sglang::fill_out"]["verdicts"] == ["ok"]
    assert ops["sglang::fill_out"]["has_fake"]
    assert set(_written(ops["sglang::scale_inplace"])) == {"x"}
    assert set(_written(ops["sglang::renamed_fill"])) == {"out"}
    # constant flags: only the caller that passes `inplace=True` writes x
    for name in ("sglang::inplace_experts", "sglang::outplace_experts"):
        assert ops[name]["verdicts"] == ["ok"], name
    assert ops["sglang::default_experts"]["verdicts"] == ["ok"]
    # collectives by their documented contract, through a method only one class defines
    assert set(_written(ops["sglang::reduce_in_place"])) == {"tensor"}
    assert set(_written(ops["sglang::gather_into"])) == {"output"}
    assert not _written(ops["sglang::send_only"])
    # run-time compiled CUDA: a member of the named class, a free function template
    assert set(_written(ops["sglang::store_cache"])) == {"k_cache"}
    assert set(_written(ops["sglang::quant_rows"])) == {"q", "scale"}
    # a parameters struct (designated initializers, a `static constexpr` member kernel, a
    # structured binding, pointers moved by a helper, either of two fields stored through),
    # exported under an alias template of the class
    assert set(_written(ops["sglang::qknorm_rows"])) == {"q", "k"}
    # its kernel picked from a member variable template, through either of two picker calls
    assert set(_written(ops["sglang::scatter_rows"])) == {"out"}
    # a registrar that names its own library (`target_lib=`) puts the op there; Helion's
    # `hl.store(out, index, value)` writes `out`
    assert "sglang::scale_rows" not in ops
    assert set(_written(ops["sglang_kernels::scale_rows"])) == {"out"}
    assert ops["sglang_kernels::named_rows"]["verdicts"] == ["ok"]  # `register_kernel("name")`
    tree, _ = _fixed_copy(capsys, tmp_path, "p29_registration_wrappers")
    text = (tree / "sglang" / "srt" / "layers.py").read_text()
    assert 'register_custom_op(store_cache, mutates_args=["k_cache"])' in text
    assert '@register_custom_op(op_name="renamed_fill", mutates_args=["out"])' in text


def test_typed_stubs_of_a_registrar_built_on_library_define_run_their_extension_functions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """AITER 0.1.7's shape (the ninth held-out first run found none of its 39 ops): a stub
    decorated `@compile_ops("module")` becomes `<ns>::<its name>` through a decorator that
    hands it to another (`@torch_compile_guard(..., calling_func_=func)`), which defines the op
    on its module's `Library` with a schema inferred from the hints (every tensor declared
    written: `mutates_args="unknown"` by default); the op runs the extension function of the
    stub's name, or `fc_name=`, bound by `m.def` in a header's macro, whose kernel stores
    through a ck_tile buffer view (`buf.template set(...)`)."""
    ops = _audit(capsys, "p30_compiled_stubs")
    assert "mini::custom_wrapper" not in ops  # the nested wrapper registers the stub, not itself
    assert ops["mini::sync_device"]["schema"] == "sync_device() -> ()"

    def declared_not_written(name: str) -> set[str]:
        op = ops[name]
        assert "Tensor(a" in op["schema"]  # every tensor declared written ("unknown")
        found = [f["params"] for f in op["findings"] if f["verdict"] == "over-annotated"]
        return set(found[0]) if found else set()

    assert declared_not_written("mini::silu_and_mul") == {"input"}  # out written
    assert declared_not_written("mini::fused_add_norm") == {"weight"}
    assert declared_not_written("mini::static_quant") == {"input", "scale"}  # the view's set
    # `fc_name="norm_fwd"` returns a fresh tensor; the binding named `norm` (writes input) is
    # not what the stub runs
    assert declared_not_written("mini::norm") == {"input", "weight"}
