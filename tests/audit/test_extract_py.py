"""Python op definitions, implementations and fake registrations."""

from __future__ import annotations

from soakgate.audit.extract_py import extract_python

SOURCE = b"""
import torch
from torch import Tensor

lib = torch.library.Library("demo", "DEF")
lib.define("a(Tensor x, "
           "Tensor out) -> ()")
torch.library.define("demo::b", "(Tensor x) -> Tensor", lib=lib)

@torch.library.impl(lib, "a", "CPU")
def a_impl(x, out):
    out[...] = x

@torch.library.register_fake("demo::b")
def b_fake(x):
    return torch.empty_like(x)

@torch.library.custom_op("demo::c", mutates_args="unknown")
def c(x: Tensor, ys: list[Tensor], k: int, s: float | None = None) -> Tensor:
    return x.clone()

def use(x):
    y = torch.ops.demo.b(x)
    torch.ops.demo.a.default(x, y)
    return torch.ops.demo.c(x, [y], 1)
"""


def test_defines_with_pieces_and_qualified_defines() -> None:
    unit = extract_python(SOURCE, "demo.py")
    defs = {d.qualname: d for d in unit.defs}
    assert set(defs) == {"demo::a", "demo::b", "demo::c"}
    assert [p.text for p in defs["demo::a"].pieces] == ["a(Tensor x, ", "Tensor out) -> ()"]
    for piece in defs["demo::a"].pieces:
        assert SOURCE[piece.offset : piece.offset + len(piece.text)].decode() == piece.text
    assert defs["demo::b"].schema.text == "b(Tensor x) -> Tensor"


def test_custom_op_schema_is_inferred_like_torch_does() -> None:
    unit = extract_python(SOURCE, "demo.py")
    custom = next(d for d in unit.defs if d.qualname == "demo::c")
    assert custom.schema.text == "c(Tensor(a1!) x, Tensor(a2!)[] ys, SymInt k, float? s) -> Tensor"
    assert custom.origin == "custom_op"


def test_impls_fakes_and_call_sites() -> None:
    unit = extract_python(SOURCE, "demo.py")
    impl = dict(unit.impls)["demo::a"]
    assert [(e.param, e.kind) for e in impl.writes] == [("out", "store")]
    assert unit.fakes == {"demo::b"}
    assert {k: [s.line for s in v] for k, v in unit.call_sites.items()} == {
        "demo::b": [23],
        "demo::c": [25],
    }


def test_op_call_sites_through_every_binding_of_an_op_path() -> None:
    """`torch.ops`, a namespace or a single op bound to a name by assignment (also inside a
    function) or import: each call whose result is used reaches the op (one reader, `py_flow.op_namespaces`, serves
    call sites and an op's own calls alike)."""
    source = b"""import torch
from torch import ops as tops
from torch.ops import demo as d
import torch.ops as every

b_op = torch.ops.demo.b


def use(x):
    y = tops.demo.b(x)
    y = d.b(y)
    y = every.demo.b.default(y)
    y = b_op(y)
    local = torch.ops.demo
    return local.c(y)
"""
    unit = extract_python(source, "sites.py")
    assert {k: [s.line for s in v] for k, v in unit.call_sites.items()} == {
        "demo::b": [10, 11, 12, 13],
        "demo::c": [15],
    }
