"""The first module whose output diverges from eager: forward hooks, layer by layer.

A forward hook on every submodule records its output, in the order modules finish (children
before their parents), once eager and once compiled (Dynamo traces the hooks into the graph, so
each recorded output is a value of the compiled program). Walking eager's order, the first module
whose compiled output is beyond tolerance is where the divergence starts; everything after it
may only inherit it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from soakgate.bisect.compare import Tolerance, compare
from soakgate.bisect.model import Subject, leaves

ROOT = "<root>"


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where compiled first departs from eager."""

    module: str | None
    """Dotted name of the module (ROOT for the model itself); None when none diverges."""
    kind: str = ""
    """Its class name."""
    worst: float = 0.0
    """The largest |eager - compiled| of its output."""
    compared: int = 0
    """Module outputs compared."""
    failed: str = ""
    """Why the modules could not be compared (compiling the hooked model raised)."""
    not_called: bool = False
    """`module` is called eager but not in the compiled program."""
    diverging_parent: str | None = None
    """With `not_called`: the first module around it whose output diverges (None: none does)."""

    def describe(self) -> str:
        """`model.norm`, `model.norm (not called in the compiled program; ...)` or `none`."""
        if self.failed:
            return f"unknown (compiling with forward hooks raised {self.failed})"
        if self.module is None:
            return f"none (all {self.compared} module outputs match eager)"
        name = f"{ROOT} ({self.kind})" if self.module == ROOT else self.module
        if not self.not_called:
            return name
        if self.diverging_parent is None:
            return f"{name} (not called in the compiled program; nothing around it diverges)"
        return (f"{name} (not called in the compiled program; its parent "
                f"{self.diverging_parent} diverges by {self.worst:.3g})")  # fmt: skip


def first_divergent_module(subject: Subject, backend: Any, tolerance: Tolerance) -> Divergence:
    """Record every module's output eager and compiled with `backend`; the first that differs."""
    import torch

    with _recording(subject.model) as eager:
        subject()
    torch._dynamo.reset()
    try:
        with _recording(subject.model) as compiled:
            subject(torch.compile(subject.model, backend=backend))
    finally:
        torch._dynamo.reset()
    kinds = {name or ROOT: type(module).__name__ for name, module in subject.model.named_modules()}
    seen: dict[str, int] = {}
    not_called: list[str] = []
    by_call = {(name, n): out for name, n, out in _numbered(compiled)}
    for name, n, out in _numbered(eager):
        seen[name] = n
        other = by_call.get((name, n))
        if other is None:  # eager calls it, the compiled program does not: look at its parents
            not_called.append(name)
            continue
        difference = compare(out, other, tolerance)
        if not difference.matches:
            inside = next((c for c in not_called if _within(c, name)), None)
            if inside is not None:
                return Divergence(inside, kinds.get(inside, ""), difference.worst, len(seen),
                                  not_called=True, diverging_parent=name)  # fmt: skip
            return Divergence(name, kinds.get(name, ""), difference.worst, len(seen))
    if not_called:  # nothing diverges, yet a module is skipped: say so
        return Divergence(not_called[0], kinds.get(not_called[0], ""), 0.0, len(seen),
                          not_called=True)  # fmt: skip
    return Divergence(None, compared=len(eager))


def _within(child: str, parent: str) -> bool:
    """Whether module `child` sits inside module `parent` (the root holds every module)."""
    return parent == ROOT or child.startswith(parent + ".")


def _numbered(records: list[tuple[str, list[Any]]]) -> Iterator[tuple[str, int, list[Any]]]:
    """(module, its n-th call, outputs): a module called twice is compared call by call."""
    calls: dict[str, int] = {}
    for name, outputs in records:
        calls[name] = calls.get(name, -1) + 1
        yield name, calls[name], outputs


@contextmanager
def _recording(model: Any) -> Iterator[list[tuple[str, list[Any]]]]:
    records: list[tuple[str, list[Any]]] = []

    def hook(name: str) -> Any:
        def record(_module: Any, _args: Any, output: Any) -> None:
            records.append((name, [t.detach().clone() for t in leaves(output)]))

        return record

    handles = [m.register_forward_hook(hook(n or ROOT)) for n, m in model.named_modules()]
    try:
        yield records
    finally:
        for handle in handles:
            handle.remove()
