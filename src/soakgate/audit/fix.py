"""Rewrite schemas so torch.compile sees every write: a unified diff, or edits in place.

Edits are computed on the schema text and mapped back onto the string literals that spell it,
so a schema split over several adjacent literals keeps its split and its formatting.
"""

from __future__ import annotations

import difflib
import os
import re
import string
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from soakgate.audit.model import AuditResult, Confidence, LiteralPiece, Location, OpReport
from soakgate.audit.schema import Schema
from soakgate.errors import AuditError

_FIXABLE = {
    "void-op-unannotated",
    "unannotated-write",
    "returns-alias-unannotated",
    "annotated-return-alias",
}

Edit = tuple[int, int, str]


@dataclass(slots=True)
class OpFix:
    """The fix for one op: its new schema and where it goes, or why it needs a human."""

    op: str
    """Qualified op name."""
    old_schema: str
    """Schema before."""
    new_schema: str | None
    """Schema after, None when it cannot be fixed automatically."""
    file_edits: list[tuple[str, int, int, str]] = field(default_factory=list)
    """(path, start byte, end byte, replacement) edits in source files."""
    returns_dropped: bool = False
    """True when the op now returns `()`: callers that used the result must change."""
    call_sites: list[Location] = field(default_factory=list)
    """Python calls that use the op's return value."""
    manual: str | None = None
    """Why this op needs a hand edit, if it does."""
    impls_to_change: list[Location] = field(default_factory=list)
    """Implementations that must now return void (when returns were dropped)."""
    incomplete: list[str] = field(default_factory=list)
    """What the automatic fix leaves undone (a written parameter it cannot annotate, a return
    it must not drop); empty when the diff closes every hazard the audit found."""
    unsure: list[str] = field(default_factory=list)
    """Parameters with only low-confidence write evidence: never annotated, listed to check."""

    @property
    def complete(self) -> bool:
        """Whether applying the diff leaves none of the op's hazards behind."""
        return not self.manual and not self.incomplete and bool(self.file_edits)


def fresh_alias_sets(used: Iterable[str]) -> Iterator[str]:
    """Alias-set names not used in a schema yet: a, b, ..., then a1, b1, ..."""
    taken = set(used)
    for suffix in ("", *map(str, range(1, 100))):
        for letter in string.ascii_lowercase:
            if letter + suffix not in taken:
                yield letter + suffix


def schema_edits(schema: Schema, written: Iterable[str], drop_returns: bool) -> list[Edit]:
    """Edits on the schema text: `(x!)` for each written parameter, `()` returns if asked."""
    names = fresh_alias_sets(schema.alias_sets())
    edits: list[Edit] = []
    for name in written:
        arg = schema.argument(name)
        if arg is None or arg.is_write:
            continue
        if arg.type.alias is not None:
            raise AuditError(f"{name} has a read-only alias annotation; edit it by hand")
        edits.append((arg.type.base_end, arg.type.base_end, f"({next(names)}!)"))
    if drop_returns:
        edits.append((*schema.returns_span, "()"))
    return edits


def apply_to_text(text: str, edits: list[Edit]) -> str:
    """Apply non-overlapping edits to a string."""
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def _to_file(pieces: tuple[LiteralPiece, ...], edit: Edit) -> list[tuple[str, int, int, str]]:
    """Map one schema-coordinate edit onto the literal pieces (splitting ranges per piece)."""
    start, end, replacement = edit
    mapped = []
    position = 0
    for piece in pieces:
        piece_end = position + len(piece.text)
        if start == end and position <= start <= piece_end:
            if piece.offset < 0:
                raise AuditError("edit falls in a part of the schema that is not a literal")
            mapped.append(
                (
                    piece.path,
                    piece.offset + start - position,
                    piece.offset + start - position,
                    replacement,
                )
            )
            return mapped
        low, high = max(start, position), min(end, piece_end)
        if low < high or (start < end and low == high and low == start):
            if piece.offset < 0:
                raise AuditError("edit falls in a part of the schema that is not a literal")
            text = replacement if not mapped else ""
            mapped.append(
                (piece.path, piece.offset + low - position, piece.offset + high - position, text)
            )
        position = piece_end
    return [m for m in mapped if m[1] != m[2] or m[3]]


def _written_params(report: OpReport) -> tuple[list[str], list[str]]:
    """(parameters to annotate: medium/high evidence, parameters with low evidence only)."""
    schema = report.op.schema
    strong: set[str] = set()
    weak: set[str] = set()
    for evidence in report.writes():
        if evidence.kind != "returns-param":
            (strong if evidence.confidence >= Confidence.MEDIUM else weak).add(evidence.param)
    order = [a.name or "" for a in schema.arguments if a.type.is_tensor_like and not a.is_write]
    return [n for n in order if n in strong], [n for n in order if n in weak - strong]


def _mutates_edit(
    literal: LiteralPiece | None, written: list[str], drop: bool
) -> list[tuple[str, int, int, str]]:
    """The `mutates_args=` value with the written parameters added, as a file edit."""
    if literal is None or drop:
        raise AuditError(f"add {', '.join(repr(w) for w in written)} to mutates_args")
    text = literal.text.strip()
    names = [n for n in re.findall(r"""["']([^"']+)["']""", text)]
    names += [w for w in written if w not in names]
    quoted = ", ".join(f'"{n}"' for n in names)
    if text.startswith("{"):
        value = "{" + quoted + "}"
    elif text.startswith("["):
        value = "[" + quoted + "]"
    else:
        value = f"({quoted},)" if len(names) == 1 else f"({quoted})"
    end = literal.offset + len(literal.text.encode())
    return [(literal.path, literal.offset, end, value)]


def _return_plan(report: OpReport) -> tuple[bool, str | None]:
    """(whether the returns may become `()`, why not when a return needs a human)."""
    verdicts = set(report.verdicts)
    if not {"returns-alias-unannotated", "annotated-return-alias"} & verdicts:
        return False, None
    schema = report.op.schema
    if len(schema.returns) > 1:
        return False, "drop the aliased outputs from the tuple return by hand"
    writes = {a.type.alias.before_sets for a in schema.arguments if a.is_write and a.type.alias}
    declared = schema.returns[0].type.alias if schema.returns else None
    if declared is not None and not declared.is_write:
        return False, "the return is a read-only alias (a view): keep it or change it by hand"
    if declared is not None and declared.before_sets not in writes:
        return False, "the return's alias set names no written input: edit it by hand"
    fresh = any(0 in impl.fresh_returns for impl in report.impls)
    returned = any(0 in impl.returned_params for impl in report.impls)
    if fresh and (returned or declared is not None):
        return False, (
            "an implementation returns its input on one path and a fresh tensor on another: "
            "returning () would lose the fresh result; split the op or return a copy"
        )
    return True, None


def plan_fix(report: OpReport, call_sites: list[Location]) -> OpFix | None:
    """How to fix one op, or None when nothing needs fixing."""
    fixable = [f for f in report.findings if f.verdict in _FIXABLE]
    if not fixable:
        return None
    op = report.op
    written, unsure = _written_params(report)
    drop, keep_reason = _return_plan(report)
    fix = OpFix(op.qualname, op.schema.text, None, returns_dropped=drop, unsure=unsure)
    fix.call_sites = call_sites if drop else []
    fix.impls_to_change = [i.location for i in report.impls] if drop else []
    if keep_reason:
        fix.incomplete.append(keep_reason)
    for name in list(written):
        arg = op.schema.argument(name)
        if arg is not None and arg.type.alias is not None:
            written.remove(name)
            fix.incomplete.append(
                f"{name} has a read-only alias annotation ({arg.type}): make it writable by hand"
            )
    if not written and not drop:
        fix.manual = keep_reason or (
            "no write was found with enough confidence: mark the parameters the op writes "
            "with (x!) by hand"
        )
        fix.incomplete.clear()
        return fix
    if drop and not written and not any(a.is_write for a in op.schema.arguments):
        # `-> ()` with no written parameter declares no effect at all: torch.compile may drop
        # the call. Never propose that; the returned buffer's parameter needs a human.
        fix.manual = (
            "the op returns a buffer it writes, but no written parameter was found with enough "
            "confidence: check by hand which parameter it returns, mark it (a!) and keep the "
            "return or make it () (the schema is left as it is)"
        )
        fix.incomplete.clear()
        fix.returns_dropped = False
        fix.call_sites, fix.impls_to_change = [], []
        return fix
    try:
        edits = schema_edits(op.schema, written, drop)
        fix.new_schema = apply_to_text(op.schema.text, edits)
        if op.origin == "custom_op":
            fix.file_edits.extend(_mutates_edit(op.mutates, written, drop))
            for edit in edits if op.pieces else []:  # an explicit `schema=` says it too
                fix.file_edits.extend(_to_file(op.pieces, edit))
            return fix
        if not op.pieces:
            raise AuditError("the schema is not a plain string literal")
        if op.origin == "cpp-inferred":
            # `m.def("name", fn)`: write the whole schema where the name was
            piece = op.pieces[0]
            end = piece.offset + len(piece.text)
            fix.file_edits.append((piece.path, piece.offset, end, fix.new_schema))
        for edit in edits if op.origin != "cpp-inferred" else []:
            fix.file_edits.extend(_to_file(op.pieces, edit))
    except AuditError as exc:
        fix.manual = str(exc)
        fix.file_edits = []
        fix.returns_dropped = False
        fix.call_sites = []
        fix.impls_to_change = []
    return fix


def plan_fixes(result: AuditResult) -> list[OpFix]:
    """Fixes for every op with a fixable finding."""
    fixes = []
    for report in result.ops:
        sites = result.call_sites.get(report.op.qualname, [])
        fix = plan_fix(report, sites)
        if fix is not None:
            fixes.append(fix)
    return fixes


def _edited_files(fixes: list[OpFix]) -> dict[str, tuple[str, str]]:
    """Path -> (old text, new text) after applying every edit."""
    by_file: dict[str, list[tuple[int, int, str]]] = {}
    for fix in fixes:
        for path, start, end, text in fix.file_edits:
            by_file.setdefault(path, []).append((start, end, text))
    edited = {}
    for path, edits in by_file.items():
        data = Path(path).read_bytes()
        new = data
        for start, end, text in sorted(set(edits), reverse=True):
            new = new[:start] + text.encode() + new[end:]
        edited[path] = (data.decode("utf-8", "replace"), new.decode("utf-8", "replace"))
    return edited


def diff_root(paths: list[str]) -> Path:
    """The folder a diff of files under `paths` is relative to (and applied in): the current
    folder when everything is inside it, else the audited paths' common folder."""
    here = Path.cwd().resolve()
    folders = [p if p.is_dir() else p.parent for p in (Path(raw).resolve() for raw in paths)]
    if all(f == here or here in f.parents for f in folders):
        return here
    return Path(os.path.commonpath(folders))


def unified_diff(fixes: list[OpFix], root: Path | None = None) -> str:
    """A unified diff of every automatic fix, its paths relative to `root` (default: the
    current folder), so that `git apply` and `patch -p1` accept it when run in `root`: an
    absolute path would make `a//abs/path`, which neither takes."""
    base = (root or Path.cwd()).resolve()
    chunks: list[str] = []
    for path, (old, new) in sorted(_edited_files(fixes).items()):
        shown = Path(os.path.relpath(Path(path).resolve(), base)).as_posix()
        chunks.extend(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                f"a/{shown}",
                f"b/{shown}",
            )
        )
    return "".join(chunks)


def write_fixes(fixes: list[OpFix]) -> list[str]:
    """Apply every automatic fix in place; returns the files changed."""
    edited = _edited_files(fixes)
    for path, (_, new) in edited.items():
        Path(path).write_text(new, encoding="utf-8")
    return sorted(edited)
