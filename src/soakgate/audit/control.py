"""Positive control: stand-in ops with the dangerous schema shapes, compiled with torch.compile.

Shows on a real torch that the unannotated schemas give wrong results (the op is dropped from
the AOT forward graph) and that the schemas `--fix` produces give the eager result. Needs
only torch (no tree-sitter), so the same code runs on a GPU machine via scripts/.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from soakgate.audit.fix import apply_to_text, schema_edits
from soakgate.audit.schema import parse_schema

# The stand-ins mirror ops in tests/audit/fixtures/kernlib; the written parameters are what
# the audit infers there (tests/audit/test_control.py checks that they agree).
UNANNOTATED = {
    "scale_into": "scale_into(Tensor x, Tensor out, float s) -> ()",
    "gemv": "gemv(Tensor input, Tensor weight, Tensor output) -> Tensor",
    "fused_add_rms_norm": (
        "fused_add_rms_norm(Tensor input, Tensor residual, Tensor weight, float epsilon) -> ()"
    ),
}
WRITTEN = {"scale_into": ["out"], "gemv": ["output"], "fused_add_rms_norm": ["input", "residual"]}
RETURNS_ALIAS = {"gemv"}
_counter = itertools.count()


def fixed_schemas() -> dict[str, str]:
    """The unannotated schemas rewritten the way `soakgate audit --fix` rewrites them."""
    fixed = {}
    for name, text in UNANNOTATED.items():
        edits = schema_edits(parse_schema(text), WRITTEN[name], name in RETURNS_ALIAS)
        fixed[name] = apply_to_text(text, edits)
    return fixed


@dataclass(frozen=True, slots=True)
class ControlResult:
    """One op under one schema variant and one backend."""

    op: str
    variant: str
    backend: str
    correct: bool
    """Compiled result equals the eager reference."""
    in_graph: bool | None
    """Whether the op appears in the AOT forward graph (None when not captured)."""
    detail: str


def _impls(torch: Any) -> dict[str, Callable[..., Any]]:
    def scale_into(x: Any, out: Any, s: float) -> None:
        out.copy_(x * s)

    def gemv(inp: Any, weight: Any, output: Any) -> Any:
        torch.mv(weight, inp, out=output)
        return output

    def fused_add_rms_norm(inp: Any, residual: Any, weight: Any, eps: float) -> None:
        residual.add_(inp)
        var = residual.pow(2).mean(-1, keepdim=True)
        inp.copy_(residual * torch.rsqrt(var + eps) * weight)

    return {"scale_into": scale_into, "gemv": gemv, "fused_add_rms_norm": fused_add_rms_norm}


def register(torch: Any, schemas: dict[str, str]) -> tuple[str, Any]:
    """Define the stand-in ops under a fresh namespace; returns (namespace, library handle)."""
    namespace = f"sgctl{next(_counter)}"
    lib = torch.library.Library(namespace, "DEF")
    for name, text in schemas.items():
        schema = parse_schema(text)
        lib.define(text)
        kernel = _impls(torch)[name]
        fresh = bool(schema.returns) and schema.returns[0].type.alias is None

        def impl(*args: Any, _kernel: Any = kernel, _void: bool = not schema.returns) -> Any:
            result = _kernel(*args)
            return None if _void else result

        def fake(*args: Any, _fresh: bool = fresh) -> Any:
            return torch.empty_like(args[-1]) if _fresh else None

        lib.impl(name, impl, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{namespace}::{name}", fake, lib=lib)
    return namespace, lib


def _callers(torch: Any, ops: Any) -> dict[str, Callable[..., Any]]:
    """Callers that ignore the op's return value, as real model code does."""

    def scale_into(x: Any) -> Any:
        out = torch.full_like(x, float("nan"))
        ops.scale_into(x, out, 2.0)
        return out + 1

    def gemv(inp: Any, weight: Any) -> Any:
        output = torch.full((weight.shape[0],), float("nan"), device=inp.device)
        ops.gemv(inp, weight, output)
        return output * 1

    def fused_add_rms_norm(inp: Any, residual: Any, weight: Any) -> Any:
        inp, residual = inp.clone(), residual.clone()
        ops.fused_add_rms_norm(inp, residual, weight, 1e-6)
        return torch.cat([inp, residual], dim=-1)

    return {"scale_into": scale_into, "gemv": gemv, "fused_add_rms_norm": fused_add_rms_norm}


def _references(torch: Any, inputs: dict[str, tuple[Any, ...]]) -> dict[str, Any]:
    """Eager results computed with plain torch (never through the ops under test)."""
    x = inputs["scale_into"][0]
    inp, weight = inputs["gemv"]
    fi, fr, fw = inputs["fused_add_rms_norm"]
    residual = fr + fi
    normed = residual * torch.rsqrt(residual.pow(2).mean(-1, keepdim=True) + 1e-6) * fw
    return {
        "scale_into": x * 2.0 + 1,
        "gemv": torch.mv(weight, inp),
        "fused_add_rms_norm": torch.cat([normed, residual], dim=-1),
    }


def _inputs(torch: Any, device: str) -> dict[str, tuple[Any, ...]]:
    gen = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, generator=gen).to(device)

    return {
        "scale_into": (rand(4, 8),),
        "gemv": (rand(16), rand(8, 16)),
        "fused_add_rms_norm": (rand(4, 32), rand(4, 32), rand(32)),
    }


def _graph_backend(torch: Any, graphs: list[Any]) -> Any:
    """aot_eager, but keeping each AOT forward graph for inspection."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop

    def forward(gm: Any, example_inputs: Any) -> Any:
        graphs.append(gm)
        return boxed_nop(gm, example_inputs)

    return aot_autograd(fw_compiler=forward)


def _in_graph(graphs: list[Any], qualified: str) -> bool:
    for gm in graphs:
        for node in gm.graph.nodes:
            if qualified in str(node.target) or any(qualified in str(a) for a in node.args):
                return True
    return False


def _run_one(
    torch: Any,
    name: str,
    caller: Callable[..., Any],
    args: tuple[Any, ...],
    reference: Any,
    backend: str,
    namespace: str,
) -> tuple[bool, bool | None, str]:
    """Compile `caller` with fullgraph=True and compare with the reference."""
    torch._dynamo.reset()
    graphs: list[Any] = []
    compiler = _graph_backend(torch, graphs) if backend == "aot_eager" else backend
    compiled = torch.compile(caller, backend=compiler, fullgraph=True)
    try:
        result = compiled(*args)
    except Exception as exc:  # a compile failure is a result of the control, not a crash
        return False, None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    correct = bool(torch.allclose(result, reference, rtol=1e-4, atol=1e-5))
    in_graph = _in_graph(graphs, f"{namespace}.{name}") if backend == "aot_eager" else None
    nan = int(torch.isnan(result).sum())
    detail = "matches eager" if correct else f"differs from eager ({nan} NaN of {result.numel()})"
    return correct, in_graph, detail


def run_control(
    device: str = "cpu", backends: tuple[str, ...] = ("aot_eager",)
) -> list[ControlResult]:
    """Every stand-in op, unannotated and fixed, under each backend on `device`."""
    import torch

    inputs = _inputs(torch, device)
    references = _references(torch, inputs)
    results = []
    for variant, schemas in (("unannotated", UNANNOTATED), ("fixed", fixed_schemas())):
        namespace, lib = register(torch, schemas)
        callers = _callers(torch, getattr(torch.ops, namespace))
        for backend in backends:
            for name, caller in callers.items():
                correct, in_graph, detail = _run_one(
                    torch, name, caller, inputs[name], references[name], backend, namespace
                )
                results.append(ControlResult(name, variant, backend, correct, in_graph, detail))
        lib._destroy()
    return results


def render_control(results: list[ControlResult]) -> str:
    """A table of results plus a verdict line on whether the control behaved as expected."""
    lines = [f"{'op':<20} {'variant':<12} {'backend':<10} {'in AOT graph':<13} result"]
    for r in results:
        graph = "-" if r.in_graph is None else ("yes" if r.in_graph else "NO (dropped)")
        lines.append(f"{r.op:<20} {r.variant:<12} {r.backend:<10} {graph:<13} {r.detail}")
    return "\n".join(lines) + "\n"


def control_as_expected(results: list[ControlResult]) -> bool:
    """Unannotated variants wrong, fixed variants right: the control shows the hazard and fix."""
    return all(r.correct == (r.variant == "fixed") for r in results)
