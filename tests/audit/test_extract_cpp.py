"""Extraction hazards in C++/CUDA bindings: literals, macros, guards, pybind11, lambdas."""

from __future__ import annotations

from soakgate.audit.extract_cpp import extract_cpp, preprocess

BINDINGS = b"""
#define MY_NS _ext
TORCH_LIBRARY_EXPAND(MY_NS, ops) {
  ops.def("split_op(Tensor a, "
          "Tensor(a!) out) -> ()");
  ops.def("with_fn(Tensor x) -> Tensor", &with_fn_impl);
  ops.def("tagged(Tensor! x) -> ()", {at::Tag::needs_fixed_stride_order});
#ifdef USE_ROCM
  ops.def("rocm_only(Tensor x) -> Tensor");
#endif
  ops.impl("split_op", torch::kCUDA, &split_op_impl);
  ops.impl("tagged", torch::kCUDA, TORCH_FN(tagged_impl));
  ops.impl("lam", [](at::Tensor& w) { w.zero_(); });
}
TORCH_LIBRARY_IMPL(_ext, Meta, m) { m.impl("split_op", &split_op_meta); }
PYBIND11_MODULE(ext, m) { m.def("version", &version, "Library version (x) -> y"); }
"""


def test_concatenated_literals_become_one_schema_with_pieces() -> None:
    unit = extract_cpp(BINDINGS, "b.cpp")
    split = next(d for d in unit.defs if d.schema.name == "split_op")
    assert split.schema.text == "split_op(Tensor a, Tensor(a!) out) -> ()"
    assert [p.text for p in split.pieces] == ["split_op(Tensor a, ", "Tensor(a!) out) -> ()"]
    for piece in split.pieces:
        assert BINDINGS[piece.offset : piece.offset + len(piece.text)].decode() == piece.text


def test_defs_with_function_tags_and_guards() -> None:
    unit = extract_cpp(BINDINGS, "b.cpp")
    defs = {d.schema.name: d for d in unit.defs}
    assert set(defs) == {"split_op", "with_fn", "tagged", "rocm_only"}
    assert defs["with_fn"].inline_impl == "with_fn_impl"
    assert defs["tagged"].inline_impl is None
    assert defs["rocm_only"].guard == "#ifdef USE_ROCM"
    assert defs["split_op"].guard is None
    assert defs["split_op"].library == "MY_NS" and unit.macros["MY_NS"] == "_ext"


def test_impls_map_ops_to_functions_keys_and_lambdas() -> None:
    unit = extract_cpp(BINDINGS, "b.cpp")
    impls = {(i.op, i.dispatch_key): i for i in unit.impls}
    assert impls[("split_op", "CUDA")].function == "split_op_impl"
    assert impls[("tagged", "CUDA")].function == "tagged_impl"
    assert impls[("split_op", "Meta")].function == "split_op_meta"
    assert impls[("with_fn", None)].function == "with_fn_impl"
    lam = impls[("lam", None)].lambda_fn
    assert lam is not None and lam.params == [("w", "at::Tensor& w")]


def test_pybind11_defs_are_not_schemas() -> None:
    unit = extract_cpp(BINDINGS, "b.cpp")
    assert "version" not in {d.schema.name for d in unit.defs}


def test_cuda_launch_syntax_is_blanked_without_moving_offsets() -> None:
    source = b"__global__ void k(float* o) { o[0] = 1; }\nvoid f() { k<<<1, 2>>>(p); }\n"
    cleaned = preprocess(source)
    assert len(cleaned) == len(source)
    assert b"<<<" not in cleaned and b"__global__" not in cleaned
    names = [f.name for f in extract_cpp(source, "k.cu").functions]
    assert names == ["k", "f"]
