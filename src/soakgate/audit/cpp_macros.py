"""Expand the macros a project defines, with a real C preprocessor (pcpp), keeping line numbers.

Kernel libraries hide most of their data flow in function-like macros (`LAUNCH_KERNEL(...)`,
dispatch-case macros, `#define EXTRACT_PTR(v, t) auto v = ...`). Before write inference, every
C++ file that uses a macro defined anywhere in the scanned tree is run through pcpp with:

- includes passed through untouched (the macros they would bring are predefined instead, from
  wherever in the tree they are defined, so nothing outside the tree is needed);
- `#if`/`#ifdef` on unknown names passed through with both branches kept, as the unexpanded
  parse does (a CUDA body and its `#else` stub are both seen);
- `#line` markers turned into a map from each output line to its original line, so evidence
  still points at the line the user wrote (the macro's call site).

Macros the tree does not define (`TORCH_CHECK`, `AT_DISPATCH_*`) stay as written.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

_DEFINE = re.compile(
    rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\([^)\n]*\))?((?:[^\n\\]|\\\r?\n|\\.)*)",
    re.MULTILINE,
)
_WORD = re.compile(rb"[A-Za-z_]\w*")
_LINE = re.compile(r'^#line (\d+)(?: "[^"]*")?\s*$')
# Macros whose expansion only hides registration syntax the extractor reads as written.
_KEEP = re.compile(r"^(?:(?:STABLE_)?TORCH_LIBRARY|EXEC_(?:NPU|OPAPI)\w*CMD$)")
# (torch_npu's `EXEC_NPU_CMD(aclnnName, ...)` names the operator it calls: `cpp_vendor` reads it)


@dataclass(frozen=True, slots=True)
class Macro:
    """One `#define` found in the tree."""

    name: str
    params: str | None
    """`(a, b)` for a function-like macro, None for an object-like one."""
    body: str
    """Replacement text with line continuations joined."""
    path: str

    @property
    def directive(self) -> str:
        """The definition as pcpp's `define()` takes it."""
        return f"{self.name}{self.params or ''} {self.body}".rstrip()

    @property
    def matters(self) -> bool:
        """Whether expanding it can change what write inference sees."""
        return self.params is not None or bool(re.search(r"[(\[=<{;]", self.body))


@dataclass(frozen=True, slots=True)
class Expanded:
    """A preprocessed source and, per output line, the original 1-based line."""

    text: bytes
    lines: tuple[int, ...]

    def original_line(self, row: int) -> int:
        """Original line of 0-based output row `row`."""
        if not self.lines:
            return row + 1
        return self.lines[min(row, len(self.lines) - 1)]


def collect_macros(contents: dict[str, bytes]) -> dict[str, Macro]:
    """Every `#define` in the given C++ sources (first definition of a name wins)."""
    found: dict[str, Macro] = {}
    for path, data in contents.items():
        if b"#" not in data or b"define" not in data:
            continue
        for match in _DEFINE.finditer(data):
            name = match.group(1).decode()
            if name in found or _KEEP.match(name):
                continue
            params = match.group(2).decode() if match.group(2) else None
            body = re.sub(rb"\\\r?\n", b" ", match.group(3)).decode("utf-8", "replace").strip()
            found[name] = Macro(name, params, body, path)
    return found


def needed_macros(source: bytes, macros: dict[str, Macro]) -> list[Macro] | None:
    """Project macros to predefine for `source` (those it uses but does not define, with the
    macros their bodies use), or None when it uses none that matter (no expansion needed)."""
    words = {w.decode() for w in _WORD.findall(source)}
    # The file's own #defines are its own business (pcpp reads them in place); predefining a
    # same-named macro from elsewhere would clash with them.
    own = {m.group(1).decode() for m in _DEFINE.finditer(source)}
    seeds = [macros[w] for w in sorted(words) if w in macros]
    if not any(m.matters for m in seeds):
        return None
    ordered: list[Macro] = []
    seen: set[str] = set(own)
    stack = [m for m in reversed(seeds) if m.name not in own]
    while stack:
        macro = stack.pop()
        if macro.name in seen:
            continue
        seen.add(macro.name)
        ordered.append(macro)
        for word in set(re.findall(r"[A-Za-z_]\w*", macro.body)):
            if word in macros and word not in seen:
                stack.append(macros[word])
    return ordered


def expand(source: bytes, path: str, macros: list[Macro]) -> Expanded | None:
    """`source` with the given macros (and its own `#define`s) expanded; None if pcpp fails."""
    from pcpp import Action, OutputDirective, Preprocessor

    class _Quiet(Preprocessor):  # type: ignore[misc]
        """pcpp with includes and unknown conditions passed through, errors collected."""

        def __init__(self) -> None:
            super().__init__()
            self.failures = 0
            self.passthru_includes = re.compile(".*")
            self.line_directive = "#line"

        def on_error(self, file: str, line: int, msg: str) -> None:
            self.failures += 1

        def on_file_open(self, is_system_include: bool, includepath: str) -> object:
            # Never read an include, even one that exists next to the file: pcpp would run
            # its directives, and an `#else` fallback there (`#define CASE(...)` empty)
            # would replace the project's real definition predefined above.
            raise OSError(includepath)

        def on_include_not_found(self, *args: object) -> None:
            raise OutputDirective(Action.IgnoreAndPassThrough)

        def on_unknown_macro_in_defined_expr(self, tok: object) -> None:
            return None

        def on_unknown_macro_in_expr(self, ident: object) -> None:
            return None

        def on_unknown_macro_function_in_expr(self, ident: object) -> None:
            return None

        def on_directive_unknown(self, *args: object) -> None:
            raise OutputDirective(Action.IgnoreAndPassThrough)

    try:
        text = source.decode("utf-8", "replace")
        preprocessor = _Quiet()
        for macro in macros:
            preprocessor.define(macro.directive)
        preprocessor.parse(text, path)
        out = io.StringIO()
        preprocessor.write(out)
    except Exception:
        return None
    if preprocessor.failures:
        return None
    return _with_line_map(out.getvalue())


def _with_line_map(output: str) -> Expanded:
    kept: list[str] = []
    lines: list[int] = []
    current = 1
    for line in output.split("\n"):
        marker = _LINE.match(line)
        if marker:
            current = int(marker.group(1))
            continue
        kept.append(line)
        lines.append(current)
        current += 1
    return Expanded("\n".join(kept).encode(), tuple(lines))
