"""Dynamic verification: run an importable op on fresh tensors and compare declared vs real writes.

`torch.library.opcheck(test_schema)` compares values before and after on the caller's own
inputs, so it misses a write of identical bytes (zeros into zeros). Here every tensor is
filled twice, with random values and with NaN/sentinels, and compared byte for byte.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from soakgate.audit.schema import parse_schema
from soakgate.errors import AuditError, UsageError

_DTYPES = {
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
    "i8": "int8",
    "u8": "uint8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "bool": "bool",
}
_TENSOR = re.compile(r"^(\w+)\[([\d,\s]*)\]$")
FILLS = ("random", "sentinel")


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One sample argument: a tensor (dtype, shape) or a plain Python value."""

    dtype: str | None
    """torch dtype name for a tensor; None for a plain value."""
    shape: tuple[int, ...] = ()
    """Tensor shape."""
    value: Any = None
    """The plain value (int, float, bool, None) when not a tensor."""


def parse_inputs(spec: str) -> list[InputSpec]:
    """`f32[4,8]; f32[8]; 1e-5; 3; true; none` -> argument specs (a tiny hand-written format)."""
    specs = []
    for raw in (item.strip() for item in spec.split(";")):
        if not raw:
            continue
        match = _TENSOR.match(raw)
        if match:
            dtype = _DTYPES.get(match.group(1), match.group(1))
            if dtype not in _DTYPES.values():
                raise UsageError(f"unknown dtype {match.group(1)!r} in --inputs")
            dims = tuple(int(d) for d in match.group(2).replace(" ", "").split(",") if d)
            specs.append(InputSpec(dtype, dims))
        elif raw.lower() in {"true", "false", "none"}:
            specs.append(InputSpec(None, value={"true": True, "false": False}.get(raw.lower())))
        else:
            try:
                specs.append(
                    InputSpec(None, value=int(raw) if re.fullmatch(r"-?\d+", raw) else float(raw))
                )
            except ValueError:
                raise UsageError(f"cannot read input {raw!r}: use e.g. f32[4,8], 3, 1e-5") from None
    return specs


@dataclass(slots=True)
class ArgObservation:
    """What one tensor argument declared and what happened to it."""

    name: str
    declared_write: bool
    written_in: list[str] = field(default_factory=list)
    """Fills under which its bytes changed (`random`, `sentinel`)."""


@dataclass(slots=True)
class VerifyReport:
    """Dynamic verdicts for one op."""

    op: str
    schema: str
    args: list[ArgObservation]
    returns_input: list[str] = field(default_factory=list)
    """Arguments whose storage the op returned."""
    errors: list[str] = field(default_factory=list)
    """Exceptions raised while running the op."""
    opcheck: dict[str, str] = field(default_factory=dict)
    """opcheck test name -> `ok` or its error."""

    @property
    def findings(self) -> list[tuple[str, list[str]]]:
        """(verdict, params) pairs, named like the static audit's verdicts."""
        written = [a.name for a in self.args if a.written_in and not a.declared_write]
        unused = [a.name for a in self.args if a.declared_write and not a.written_in]
        schema = parse_schema(self.schema)
        out: list[tuple[str, list[str]]] = []
        if written:
            void = not schema.returns and not schema.is_mutable
            out.append(("void-op-unannotated" if void else "unannotated-write", written))
        fresh = [r for r in schema.returns if r.type.alias is None]
        if self.returns_input and fresh:
            out.append(("returns-alias-unannotated", self.returns_input))
        if unused and not self.errors:
            out.append(("over-annotated", unused))
        return out


# Quiet-NaN bit patterns by float width; the low bits carry the argument's position so that
# copying one NaN-filled argument into another still changes bytes.
_NAN_BITS = {
    "float16": ("int16", 0x7E00),
    "bfloat16": ("int16", 0x7FC0),
    "float32": ("int32", 0x7FC00000),
    "float64": ("int64", 0x7FF8000000000000),
}


def _make(torch: Any, spec: InputSpec, fill: str, device: str, gen: Any, position: int = 0) -> Any:
    if spec.dtype is None:
        return spec.value
    dtype = getattr(torch, spec.dtype)
    if dtype.is_floating_point:
        if fill == "sentinel" and spec.dtype in _NAN_BITS:
            int_name, bits = _NAN_BITS[spec.dtype]
            pattern = torch.full(spec.shape, bits | (position + 1), dtype=getattr(torch, int_name))
            return pattern.view(dtype).to(device)
        if fill == "sentinel":
            return torch.full(spec.shape, float("nan"), dtype=dtype, device=device)
        return torch.randn(spec.shape, generator=gen).to(dtype=dtype, device=device)
    if dtype == torch.bool:
        return (
            torch.ones(spec.shape, dtype=dtype, device=device)
            if fill == "sentinel"
            else (torch.rand(spec.shape, generator=gen) > 0.5).to(device)
        )
    if fill == "sentinel":
        return torch.zeros(spec.shape, dtype=dtype, device=device)
    return torch.randint(0, 4, spec.shape, generator=gen).to(dtype=dtype, device=device)


def _changed(torch: Any, before: Any, after: Any) -> bool:
    return not torch.equal(
        before.reshape(-1).view(torch.uint8), after.reshape(-1).view(torch.uint8)
    )


def _storage(value: Any) -> int | None:
    try:
        return int(value.untyped_storage().data_ptr())
    except AttributeError:
        return None


def verify_op(
    op: Any, inputs: list[InputSpec], device: str = "cpu", opcheck: bool = True
) -> VerifyReport:
    """Run `op` (an OpOverload) under each fill and compare its declared and actual writes."""
    import torch

    schema = parse_schema(str(op._schema))
    if len(inputs) != len(schema.arguments):
        raise UsageError(
            f"{op} takes {len(schema.arguments)} arguments, --inputs gives {len(inputs)}"
        )
    report = VerifyReport(str(op._schema).split("(", 1)[0], str(op._schema), [])
    report.args = [
        ArgObservation(a.name or "", a.is_write)
        for a, s in zip(schema.arguments, inputs, strict=True)
        if s.dtype
    ]
    gen = torch.Generator().manual_seed(0)
    for fill in FILLS:
        args = [_make(torch, spec, fill, device, gen, i) for i, spec in enumerate(inputs)]
        before = [a.clone() if isinstance(a, torch.Tensor) else None for a in args]
        try:
            result = op(*args)
        except Exception as exc:  # the op's own failure is what we report
            report.errors.append(f"{fill}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            continue
        tensors = [
            (spec, a, b) for spec, a, b in zip(inputs, args, before, strict=True) if spec.dtype
        ]
        for observation, (_, after, old) in zip(report.args, tensors, strict=True):
            if _changed(torch, old, after):
                observation.written_in.append(fill)
        outputs = result if isinstance(result, tuple | list) else [result]
        storages = {_storage(o) for o in outputs} - {None}
        for observation, (_, after, _) in zip(report.args, tensors, strict=True):
            if _storage(after) in storages and observation.name not in report.returns_input:
                report.returns_input.append(observation.name)
    if opcheck:
        report.opcheck = _opcheck(torch, op, inputs, device)
    return report


def _opcheck(torch: Any, op: Any, inputs: list[InputSpec], device: str) -> dict[str, str]:
    """torch.library.opcheck's schema and fake-tensor tests on random inputs."""
    outcome = {}
    for test in ("test_schema", "test_faketensor"):
        gen = torch.Generator().manual_seed(1)
        args = tuple(_make(torch, spec, "random", device, gen) for spec in inputs)
        try:
            torch.library.opcheck(op, args, test_utils=(test,))
            outcome[test] = "ok"
        except Exception as exc:  # opcheck raises OpCheckError or the op's own error
            outcome[test] = str(exc).splitlines()[0][:200]
    return outcome


def resolve_op(target: str) -> Any:
    """`MODULE[:ns::op[.overload]]` -> the OpOverload, importing MODULE so the op is registered."""
    import torch

    module, _, op_name = target.partition(":")
    before = set(torch._C._dispatch_get_all_op_names())
    if module:
        # A module in the current folder imports as under `python -m`: the `soakgate` console
        # script does not put the current folder on sys.path.
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UsageError(f"cannot import {module}: {exc}") from exc
    if not op_name:
        # MODULE alone: the op is whatever importing it registered, if that is one op
        added = sorted(set(torch._C._dispatch_get_all_op_names()) - before)
        if len(added) != 1:
            found = ", ".join(added[:8]) or "none (already imported?)"
            raise UsageError(f"name the op as MODULE:namespace::op; {module} registered {found}")
        op_name = added[0]
    if "::" not in op_name:
        raise UsageError("verify needs MODULE:namespace::op (e.g. mypkg.ops:mylib::gemv)")
    namespace, _, name = op_name.partition("::")
    name, _, overload = name.partition(".")
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError) as exc:
        raise AuditError(f"op {op_name} is not registered after importing {module!r}") from exc


def verify(target: str, spec: str, device: str = "cpu", opcheck: bool = True) -> VerifyReport:
    """Resolve and verify one op from the command line's strings."""
    return verify_op(resolve_op(target), parse_inputs(spec), device, opcheck)


def render_verify(report: VerifyReport) -> str:
    """Human text: per-argument declared vs observed writes, then verdicts and opcheck."""
    lines = [f"{report.op}: {report.schema}"]
    for arg in report.args:
        seen = ", ".join(arg.written_in) or "never"
        lines.append(
            f"  {arg.name:<16} declared write: {'yes' if arg.declared_write else 'no ':<4}"
            f" written: {seen}"
        )
    if report.returns_input:
        lines.append(f"  returns the storage of: {', '.join(report.returns_input)}")
    lines.extend(f"  error: {e}" for e in report.errors)
    for verdict, params in report.findings:
        lines.append(f"  {verdict}: {', '.join(params)}")
    if not report.findings and not report.errors:
        lines.append("  ok: declared writes match observed writes")
    lines.extend(f"  opcheck {name}: {status}" for name, status in report.opcheck.items())
    return "\n".join(lines) + "\n"
