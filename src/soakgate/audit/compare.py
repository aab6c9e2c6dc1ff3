"""Which schemas changed between two builds of a library (e.g. did the rebuild carry the fix)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from soakgate.audit.extract_so import schemas_in
from soakgate.audit.schema import parse_schema
from soakgate.errors import AuditError


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """One op whose schema differs between the old and new library."""

    op: str
    """Op name (with overload) as spelled in the library."""
    old: str | None
    """Schema in the old library, None when added."""
    new: str | None
    """Schema in the new library, None when removed."""

    @property
    def mutability(self) -> str:
        """`now mutable`, `no longer mutable` or '' when the op's is_mutable did not change."""
        if self.old is None or self.new is None:
            return ""
        before, after = parse_schema(self.old).is_mutable, parse_schema(self.new).is_mutable
        return "" if before == after else ("now mutable" if after else "no longer mutable")


def _load(path: str) -> dict[str, str]:
    try:
        return schemas_in(Path(path).read_bytes())
    except OSError as exc:
        raise AuditError(f"cannot read {path}: {exc.strerror}") from exc


def compare_libraries(old_path: str, new_path: str) -> list[SchemaChange]:
    """Schema changes from `old_path` to `new_path`, by op name."""
    old, new = _load(old_path), _load(new_path)
    changes = [
        SchemaChange(op, old.get(op), new.get(op))
        for op in sorted(old.keys() | new.keys())
        if old.get(op) != new.get(op)
    ]
    return changes


def render_changes(changes: list[SchemaChange], unchanged: int | None = None) -> str:
    """Human text, one block per changed op."""
    if not changes:
        return "no schema changed\n"
    lines = []
    for change in changes:
        note = f"  ({change.mutability})" if change.mutability else ""
        lines.append(f"{change.op}{note}")
        lines.append(f"  - {change.old}" if change.old else "  - (absent)")
        lines.append(f"  + {change.new}" if change.new else "  + (absent)")
    return "\n".join(lines) + "\n"
