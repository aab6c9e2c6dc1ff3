"""Which custom op disappeared: the ops eager ran against the ops of the compiled graph.

Eager execution is traced with a TorchDispatchMode (every operator called, custom ops by their
qualified name); the compiled graph is captured at the failing stage (Dynamo's graph, the
AOTAutograd forward graph after functionalization, or inductor's post-grad graph). A custom op
(any namespace that is not PyTorch's own) that eager ran and the graph lacks was dropped; its
schema says why torch.compile could: one that declares no write and returns nothing looks
dead to dead-code elimination (`soakgate audit` finds such schemas statically).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from soakgate.bisect.model import Subject

BUILTIN_NAMESPACES = frozenset(
    {"aten", "prims", "prim", "profiler", "quantized", "_quantized", "inductor", "c10d",
     "_c10d_functional", "c10d_functional", "_dtensor", "debugprims", "higher_order", "mkldnn",
     "onednn", "quantized_decomposed", "_inductor_test"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class MissingOp:
    """A custom op eager ran that the compiled graph does not call (or calls less often)."""

    name: str
    """`namespace::op`."""
    eager_calls: int
    graph_calls: int
    schema: str
    """Its registered schema."""
    why: str
    """What the schema lets torch.compile assume."""

    def describe(self) -> str:
        """`soakgate_ctl::copy_into (schema declares no write: run soakgate audit)`."""
        count = "" if self.graph_calls == 0 else f", {self.graph_calls} of {self.eager_calls} calls"
        return f"{self.name} ({self.why}{count})"


def eager_ops(subject: Subject) -> Counter[str]:
    """`namespace::op` -> times eager execution called it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    called: Counter[str] = Counter()

    class Trace(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            called[_qualified(func)] += 1
            return func(*args, **(kwargs or {}))

    with Trace():  # type: ignore[no-untyped-call]
        subject()
    return called


def graph_ops(graphs: list[Any]) -> Counter[str]:
    """`namespace::op` -> call_function nodes calling it, over the captured FX graphs."""
    found: Counter[str] = Counter()
    for graph in graphs:
        for node in graph.nodes:
            if node.op == "call_function":
                found[_qualified(node.target)] += 1
    return found


def missing_custom_ops(eager: Counter[str], graph: Counter[str]) -> list[MissingOp]:
    """Custom ops called fewer times in the graph than eager ran them."""
    missing = []
    for name, calls in sorted(eager.items()):
        namespace = name.partition("::")[0]
        if namespace in BUILTIN_NAMESPACES or graph.get(name, 0) >= calls:
            continue
        schema, why = _schema(name)
        missing.append(MissingOp(name, calls, graph.get(name, 0), schema, why))
    return missing


def capture_graphs(subject: Subject, backend: str, custom: Any = None) -> list[Any]:
    """The FX graphs the failing stage produced: Dynamo's for `eager`, the AOTAutograd forward
    graph for the aot_* stages, inductor's post-grad graph for `inductor` (through the `custom`
    backend, when one is kept there). Raises when no graph was seen (a custom backend that
    replaces the post-grad passes hides it)."""
    import torch
    from torch._dynamo.backends.common import aot_autograd

    graphs: list[Any] = []

    def keep(gm: Any, _inputs: Any) -> Any:
        graphs.append(gm.graph)
        return gm.forward

    torch._dynamo.reset()
    try:
        if backend == "eager":
            subject(torch.compile(subject.model, backend=keep))
        elif backend == "aot_eager":
            subject(torch.compile(subject.model, backend=aot_autograd(fw_compiler=keep)))
        elif backend.startswith("aot_eager_decomp_partition"):
            subject(torch.compile(subject.model, backend=_decomp_partition(keep)))
        else:
            with _reading_post_grad_graph(graphs.append):
                compiled = torch.compile(subject.model, backend=custom) if custom is not None \
                    else torch.compile(subject.model)  # fmt: skip
                subject(compiled)
    finally:
        torch._dynamo.reset()
    if not graphs:
        raise RuntimeError(f"no {backend} graph was seen")
    return graphs


@contextlib.contextmanager
def _reading_post_grad_graph(record: Callable[[Any], None]) -> Iterator[None]:
    """Append `record` (a pass that only reads the graph) after the user's post-grad passes."""
    from torch._inductor import config

    current = config.post_grad_custom_post_pass
    passes = list(current) if isinstance(current, list | tuple) else [current] if current else []
    with config.patch(post_grad_custom_post_pass=[*passes, record]):
        yield


def _decomp_partition(keep: Any) -> Any:
    """aot_eager_decomp_partition's AOTAutograd, keeping the forward graph."""
    from functools import partial

    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table

    return aot_autograd(
        fw_compiler=keep, bw_compiler=keep, decompositions=select_decomp_table(),
        partition_fn=partial(min_cut_rematerialization_partition, compiler="inductor"),
    )  # fmt: skip


def _qualified(target: Any) -> str:
    """`namespace::op` of an OpOverload, an OpOverloadPacket or any other callable."""
    namespace = getattr(target, "namespace", None)
    name = getattr(target, "_opname", None) or getattr(target, "__name__", None)
    if isinstance(namespace, str) and isinstance(name, str):
        return f"{namespace}::{name.split('.')[0]}"
    qualified = getattr(target, "_qualified_op_name", None)
    return str(qualified) if qualified else str(target)


def _schema(name: str) -> tuple[str, str]:
    """The op's registered schema and what it declares, read with soakgate audit's parser."""
    import torch

    from soakgate.audit.schema import try_parse_schema

    namespace, _, op = name.partition("::")
    try:
        text = str(getattr(getattr(torch.ops, namespace), op).default._schema)
    except (AttributeError, RuntimeError):
        return "", "schema not found"
    schema = try_parse_schema(text)
    if schema is None:
        return text, "schema unreadable"
    if not schema.is_mutable:
        returns = "returns nothing" if not schema.returns else "returns fresh values"
        return text, f"schema declares no write and {returns}: run soakgate audit"
    return text, "schema declares a write; the op was dropped nonetheless"
