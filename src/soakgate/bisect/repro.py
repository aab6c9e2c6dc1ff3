"""A standalone repro of the failing stage, written by PyTorch's own repro writer.

Dynamo's graph of the model (what every later stage is handed) and inputs of its shapes are
written as a script that runs the graph under the failing stage's backend and checks its
accuracy against eager (`torch._dynamo.repro.after_dynamo`: `python FILE` runs it, `python FILE
minify` hands it to PyTorch's minifier, meant to shrink the graph to the nodes the failure needs;
on the dropped-op control with torch 2.13 the minifier itself raised, so it is not run here).
The modules given to `--import` are imported first, so custom ops are registered. A divergence
in Dynamo's graph capture itself (the `eager` stage) or inside a custom backend is not in that
graph's input, so no repro is written for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from soakgate.bisect.model import Subject


def write_repro(subject: Subject, backend: str, path: Path, imports: Sequence[str]) -> str:
    """Write the repro of `backend`'s failure to `path`; one line saying what was written."""
    import torch
    from torch._dynamo.repro.after_dynamo import generate_dynamo_fx_repro_string

    if backend == "eager":
        return ("no repro written: the divergence is in Dynamo's graph capture itself, which "
                "a repro of its graph cannot show")  # fmt: skip
    graphs: list[tuple[Any, list[Any]]] = []

    def keep(gm: Any, inputs: list[Any]) -> Any:
        graphs.append((gm, list(inputs)))
        return gm.forward

    torch._dynamo.reset()
    try:
        subject(torch.compile(subject.model, backend=keep))
    finally:
        torch._dynamo.reset()
    if not graphs:
        return "no repro written: Dynamo captured no graph"
    gm, inputs = graphs[0]
    script = generate_dynamo_fx_repro_string(gm, inputs, backend, check_accuracy=True)
    header = [
        f"# soakgate bisect: Dynamo's graph of {subject.name} (graph 1 of {len(graphs)}), run "
        f"under {backend} and checked against eager.",
        "# `python THIS_FILE` runs it; `python THIS_FILE minify` runs PyTorch's minifier on it.",
        "import importlib, importlib.util, sys",
        *(_import_line(name) for name in imports),
    ]
    path.write_text("\n".join(header) + "\n" + script)
    return (f"repro: wrote {path} (Dynamo's graph 1 of {len(graphs)}, run under {backend} with "
            f"an accuracy check; `python {path} minify` hands it to PyTorch's "
            "minifier)")  # fmt: skip


def _import_line(name: str) -> str:
    """Python that imports a `--import` module (or `.py` file) as `soakgate bisect` did."""
    if name.endswith(".py"):
        file = Path(name).resolve()
        return (f"sys.path.insert(0, {str(file.parent)!r}); "
                f"importlib.import_module({file.stem!r})")  # fmt: skip
    return f"importlib.import_module({name!r})"
