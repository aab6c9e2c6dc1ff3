"""Dynamic verification of importable ops against their declared writes."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path
from typing import Any

import pytest

from soakgate.audit.verify import InputSpec, parse_inputs
from soakgate.errors import UsageError

_names = itertools.count()


def test_parse_inputs() -> None:
    assert parse_inputs("f32[4,8]; i64[3]; bf16[]; 3; 1e-5; true; none") == [
        InputSpec("float32", (4, 8)),
        InputSpec("int64", (3,)),
        InputSpec("bfloat16", ()),
        InputSpec(None, value=3),
        InputSpec(None, value=1e-5),
        InputSpec(None, value=True),
        InputSpec(None, value=None),
    ]
    with pytest.raises(UsageError):
        parse_inputs("q7[2]")
    with pytest.raises(UsageError):
        parse_inputs("lots")


def _library(torch: Any, defs: dict[str, tuple[str, Any]]) -> tuple[str, Any]:
    namespace = f"sgverify{next(_names)}"
    lib = torch.library.Library(namespace, "DEF")
    for name, (schema, fn) in defs.items():
        lib.define(schema)
        lib.impl(name, fn, "CompositeExplicitAutograd")
    return namespace, lib


@pytest.mark.torch
def test_declared_vs_observed_writes() -> None:
    torch = pytest.importorskip("torch")
    from soakgate.audit.verify import verify_op

    def copy_into(x: Any, out: Any) -> None:
        out.copy_(x)

    namespace, lib = _library(
        torch,
        {
            "hidden": ("hidden(Tensor x, Tensor out) -> ()", copy_into),
            "honest": ("honest(Tensor x, Tensor(a!) out) -> ()", copy_into),
            "over": ("over(Tensor(a!) x, Tensor(b!) out) -> ()", copy_into),
        },
    )
    ops = getattr(torch.ops, namespace)
    spec = parse_inputs("f32[4]; f32[4]")
    hidden = verify_op(ops.hidden.default, spec, opcheck=False)
    assert hidden.findings == [("void-op-unannotated", ["out"])]
    assert hidden.args[1].written_in == ["random", "sentinel"]
    assert verify_op(ops.honest.default, spec, opcheck=False).findings == []
    assert verify_op(ops.over.default, spec, opcheck=False).findings == [("over-annotated", ["x"])]
    lib._destroy()


@pytest.mark.torch
def test_catches_identical_byte_writes_that_opcheck_misses() -> None:
    """`out.zero_()` on a zero buffer changes no value: opcheck passes, fresh fills do not."""
    torch = pytest.importorskip("torch")
    from soakgate.audit.verify import verify_op

    def zero_into(x: Any, out: Any) -> None:
        out.zero_()

    namespace, lib = _library(
        torch, {"zero_into": ("zero_into(Tensor x, Tensor out) -> ()", zero_into)}
    )
    op = getattr(torch.ops, namespace).zero_into.default
    torch.library.opcheck(op, (torch.zeros(4), torch.zeros(4)), test_utils=("test_schema",))
    report = verify_op(op, parse_inputs("f32[4]; f32[4]"), opcheck=False)
    assert report.findings == [("void-op-unannotated", ["out"])]
    assert report.args[1].written_in == ["random", "sentinel"]
    lib._destroy()


@pytest.mark.torch
def test_returned_input_and_opcheck_report() -> None:
    torch = pytest.importorskip("torch")
    from soakgate.audit.verify import verify_op

    def gemv(x: Any, w: Any, out: Any) -> Any:
        torch.mv(w, x, out=out)
        return out

    namespace, lib = _library(
        torch, {"gemv": ("gemv(Tensor x, Tensor w, Tensor out) -> Tensor", gemv)}
    )
    op = getattr(torch.ops, namespace).gemv.default
    report = verify_op(op, parse_inputs("f32[3]; f32[2,3]; f32[2]"))
    verdicts = dict(report.findings)
    assert verdicts == {"unannotated-write": ["out"], "returns-alias-unannotated": ["out"]}
    assert "alias" in report.opcheck["test_schema"]
    lib._destroy()


@pytest.mark.torch
def test_cli_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    from soakgate.cli.main import main

    module = tmp_path / "sg_verify_mod.py"
    module.write_text(
        textwrap.dedent("""
        import torch
        lib = torch.library.Library("sgverifycli", "DEF")
        lib.define("scale(Tensor x, Tensor out) -> ()")
        lib.impl("scale", lambda x, out: (out.copy_(x * 2), None)[1], "CompositeExplicitAutograd")
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(
        [
            "audit",
            "verify",
            "sg_verify_mod:sgverifycli::scale",
            "--inputs",
            "f32[4]; f32[4]",
            "--no-opcheck",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1 and "void-op-unannotated: out" in out
    assert main(["audit", "verify", "no_such_mod_xyz:ns::op", "--inputs", "f32[1]"]) == 2


@pytest.mark.torch
def test_module_alone_names_the_one_op_it_registers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    from soakgate.audit.verify import resolve_op

    (tmp_path / "sg_verify_one.py").write_text(
        textwrap.dedent("""
        import torch
        lib = torch.library.Library("sgverifyone", "DEF")
        lib.define("only(Tensor x) -> Tensor")
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert str(resolve_op("sg_verify_one")._schema).startswith("sgverifyone::only(")
    with pytest.raises(UsageError):
        resolve_op("sg_verify_one")  # already imported: nothing new to pick
