"""Source files built as part of another translation unit (`#include "gptq_marlin.cu"`).

Kernel libraries build one source several times under different macros: a per-dtype file
defines `MARLIN_GEMM_EXPORT_NAME gptq_marlin_gemm_fp16` and `MARLIN_ENABLE_BF16 0`, then
includes the shared `gptq_marlin.cu`, whose `torch::Tensor MARLIN_GEMM_EXPORT_NAME(...)` becomes
the op's function only in that unit. Headers are never read (an `#else` fallback there must not
replace a project definition, see `cpp_macros`), but an included *source* file is the unit's own
code: it is inlined where it is included, the unit is expanded as the compiler would, and the
functions it yields are relocated to the lines of the file they were written in.

Hand-written: no library inlines one level of source includes and keeps a line map across them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from soakgate.audit.cpp_macros import Expanded

if TYPE_CHECKING:
    from soakgate.audit.cpp_syntax import FunctionNode

_SOURCE_INCLUDE = re.compile(rb'^\s*#\s*include\s*"([^"]+\.(?:cu|cpp|cc|cxx|c))"\s*$')
_DEFINED = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.MULTILINE)
_WORD = re.compile(rb"\b[A-Za-z_]\w*\b")
SOURCE_SUFFIXES = frozenset({".cu", ".cpp", ".cc", ".cxx", ".c"})


@dataclass(frozen=True, slots=True)
class Segment:
    """Lines `start .. start + length - 1` (1-based) of the unit are `path`'s lines 1..length."""

    path: str
    start: int
    length: int


def inline_sources(
    path: str, data: bytes, contents: dict[str, bytes]
) -> tuple[bytes, list[Segment]]:
    """`data` with each `#include "x.cu"` of a source file in `contents` (resolved against the
    including file's folder) replaced by that file's text, one level deep, where `data`
    defines a macro that file uses; no segments when there is none."""
    if b"#" not in data or b"include" not in data:
        return data, []
    folder = PurePosixPath(path.replace("\\", "/")).parent
    defined = set(_DEFINED.findall(data))
    out: list[bytes] = []
    segments: list[Segment] = []
    for line in data.split(b"\n"):
        match = _SOURCE_INCLUDE.match(line)
        target = str(folder / match.group(1).decode("utf-8", "replace")) if match else ""
        if not match or target not in contents or target == path:
            out.append(line)
            continue
        if not defined & set(_WORD.findall(contents[target])):
            out.append(line)  # built the same here as on its own: nothing to add
            continue
        lines = contents[target].split(b"\n")
        segments.append(Segment(target, len(out) + 1, len(lines)))
        out.extend(lines)
    return (b"\n".join(out), segments) if segments else (data, [])


def relocated(fn: FunctionNode, segments: list[Segment]) -> FunctionNode | None:
    """`fn` (extracted from the inlined unit) moved to the file it was written in, its lines
    mapped there; None when it was written in the including file itself."""
    base = fn.lines

    def unit_line(row: int) -> int:
        return base.original_line(row) if base is not None else row + 1

    first = unit_line(fn.body.start_point[0])
    segment = next((s for s in segments if s.start <= first < s.start + s.length), None)
    if segment is None:
        return None
    rows = range(fn.body.end_point[0] + 1)
    lines = tuple(max(1, unit_line(row) - segment.start + 1) for row in rows)
    return replace(fn, path=segment.path, lines=Expanded(b"", lines))
