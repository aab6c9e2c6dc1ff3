"""The hand-written schema parser, and its agreement with torch's own parser."""

from __future__ import annotations

import re

import pytest

from soakgate.audit.schema import SchemaSyntaxError, TypeSpec, parse_schema, try_parse_schema

REAL_WORLD = [
    "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
    "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
    "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
    "aten::_foreach_add_.List(Tensor(a!)[] self, Tensor[] other, *, Scalar alpha=1) -> ()",
    "aten::native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, "
    "Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)",
    "aten::max.dim_max(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) max, "
    "Tensor(b!) max_values) -> (Tensor(a!) values, Tensor(b!) indices)",
    "aten::to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, "
    "MemoryFormat? memory_format=None) -> Tensor(a)",
    "aten::convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, "
    "SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, "
    "SymInt groups) -> Tensor",
    "aten::conv2d.padding(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, "
    'str padding="valid", SymInt[2] dilation=1, SymInt groups=1) -> Tensor',
    "aten::native_batch_norm_backward(Tensor grad_out, Tensor input, Tensor? weight, "
    "Tensor? running_mean, Tensor? running_var, Tensor? save_mean, Tensor? save_invstd, "
    "bool train, float eps, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
    "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, "
    "ScalarType? dtype=None) -> Tensor",
    "aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
    "aten::layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, "
    "Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor",
    "aten::resize_(Tensor(a!) self, SymInt[] size, *, MemoryFormat? memory_format=None) "
    "-> Tensor(a!)",
    "aten::clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
    "aten::index_put_(Tensor(a!) self, Tensor?[] indices, Tensor values, "
    "bool accumulate=False) -> Tensor(a!)",
    "aten::bernoulli_.float(Tensor(a!) self, float p=0.5, *, Generator? generator=None) "
    "-> Tensor(a!)",
    "aten::_amp_foreach_non_finite_check_and_unscale_(Tensor(a!)[] self, Tensor(b!) "
    "found_inf, Tensor inv_scale) -> ()",
    "_C::rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon) -> ()",
    "_C::copy_blocks(Tensor(a!)[] key_caches, Tensor[](b!) value_caches, "
    "Tensor block_mapping) -> ()",
    "_C::reshape_and_cache_flash(Tensor key, Tensor value, Tensor! key_cache, "
    "Tensor! value_cache, Tensor slot_mapping, str kv_cache_dtype, Tensor k_scale, "
    "Tensor v_scale) -> ()",
    "_C::marlin_gemm(Tensor a, Tensor b_q_weight, Tensor b_scales, Tensor workspace, "
    "SymInt size_m, SymInt size_n, SymInt size_k) -> Tensor",
    "mylib::bias_add_(Tensor(a1!) x, Tensor bias) -> ()",
    "mylib::f(Tensor x, SymInt[] shape, float? scale=None, int[] dims=[0, 1], "
    "bool flag=True, str mode='mean') -> Tensor",
]


@pytest.mark.parametrize("text", REAL_WORLD)
def test_parses_real_world_schemas(text: str) -> None:
    schema = parse_schema(text)
    assert schema.namespace is not None
    assert all(arg.name for arg in schema.arguments)


def test_write_semantics_come_from_alias_info_not_a_literal_pattern() -> None:
    custom = parse_schema("lib::f(Tensor(a1!) x, Tensor(a2!) y, Tensor z) -> ()")
    assert [a.is_write for a in custom.arguments] == [True, True, False]
    assert custom.is_mutable
    view = parse_schema("aten::split.Tensor(Tensor(a -> *) self, SymInt n) -> Tensor(a)[]")
    assert not view.is_mutable
    assert view.arguments[0].type.alias is not None
    assert view.arguments[0].type.alias.after_sets == ("*",)
    shorthand = parse_schema("f(Tensor! x) -> ()")
    assert shorthand.arguments[0].is_write


def test_lists_optionals_defaults_and_kwarg_only() -> None:
    schema = parse_schema(
        "ns::op.ovl(Tensor(a!)[] xs, Tensor[](b!) ys, Tensor? c=None, int[2] k=[0, 1], *, "
        "ScalarType? dtype=None) -> (Tensor a, Tensor(b) b)"
    )
    assert (schema.namespace, schema.name, schema.overload) == ("ns", "op", "ovl")
    xs, ys, c, k, dtype = schema.arguments
    assert xs.is_write and ys.is_write and str(xs.type) == "Tensor[]"
    assert str(c.type) == "Tensor?" and c.default == "None"
    assert k.default == "[0, 1]" and str(k.type) == "int[2]"
    assert dtype.kwarg_only and not k.kwarg_only
    assert [r.name for r in schema.returns] == ["a", "b"]


def test_returns_span_covers_exactly_the_return_declaration() -> None:
    text = "f(Tensor x) -> (Tensor a, Tensor b)"
    schema = parse_schema(text)
    assert text[slice(*schema.returns_span)] == "(Tensor a, Tensor b)"
    void = parse_schema("f(Tensor x) -> ()")
    assert void.returns == ()


@pytest.mark.parametrize(
    "text",
    [
        "f(Tensor) -> ()",
        "f(Tensor x -> ()",
        "f(Tensor x) ->",
        "f(Tensor x) -> () extra",
        "(x) -> ()",
    ],
)
def test_rejects_malformed_schemas(text: str) -> None:
    with pytest.raises(SchemaSyntaxError):
        parse_schema(text)


def test_try_parse_ignores_pybind_names_and_docs() -> None:
    assert try_parse_schema("get_version") is None
    assert try_parse_schema("Version string of the kernels") is None
    assert try_parse_schema("describe(x) -> str") is None


_TORCH_PY_TYPE = {
    "SymInt": "int",
    "ScalarType": "int",
    "Layout": "int",
    "MemoryFormat": "int",
    "Scalar": "number",
}


def _python_type(spec: TypeSpec) -> str:
    """Our type in the Python spelling `str(torch Argument.type)` uses (SymInt -> int, ...)."""
    text = _TORCH_PY_TYPE.get(spec.base, spec.base)
    for suffix in re.findall(r"\[\d*\]|\?", spec.suffix):
        text = f"Optional[{text}]" if suffix == "?" else f"List[{text}]"
    return text


def _summary_ours(text: str) -> tuple[object, ...]:
    s = parse_schema(text)
    args = [
        (a.name, _python_type(a.type), a.is_write, a.kwarg_only, a.default is not None)
        for a in s.arguments
    ]
    rets = [(_python_type(r.type), r.is_write) for r in s.returns]
    return (f"{s.namespace}::{s.name}", s.overload, args, rets, s.is_mutable)


def _summary_torch(text: str) -> tuple[object, ...]:
    import torch

    s = torch._C.parse_schema(text)

    def writes(a: object) -> bool:
        info = getattr(a, "alias_info", None)
        return bool(info is not None and info.is_write)

    args = [
        (a.name, str(a.type), writes(a), a.kwarg_only, a.has_default_value()) for a in s.arguments
    ]
    rets = [(str(r.type), writes(r)) for r in s.returns]
    return (s.name, s.overload_name, args, rets, s.is_mutable)


@pytest.mark.torch
@pytest.mark.parametrize("text", REAL_WORLD)
def test_agrees_with_torch_parse_schema(text: str) -> None:
    pytest.importorskip("torch")
    assert _summary_ours(text) == _summary_torch(text)
