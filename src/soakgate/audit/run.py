"""The three things `soakgate audit` does, each one call from the CLI: scan, compare, verify."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from soakgate.audit.compare import compare_libraries, render_changes
from soakgate.audit.model import AuditResult, Severity
from soakgate.errors import UsageError

FORMATS = ("text", "json", "sarif")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to print and which exit code to return."""

    stdout: str
    stderr: str
    code: int


def _severity(text: str) -> Severity:
    try:
        return Severity.parse(text)
    except KeyError:
        names = ", ".join(s.name.lower() for s in Severity)
        raise UsageError(f"unknown severity {text!r}; use one of {names}") from None


def run_scan(
    paths: list[str],
    fmt: str = "text",
    fail_on: str = "error",
    fix: bool = False,
    write: bool = False,
) -> Outcome:
    """Audit paths; render findings, or with `fix` a diff (or in-place edits with `write`)."""
    from soakgate.audit.fix import diff_root, plan_fixes, unified_diff, write_fixes
    from soakgate.audit.report import exit_code, render_fix_notes, render_json, render_text
    from soakgate.audit.sarif import render_sarif
    from soakgate.audit.scan import audit_paths

    threshold = _severity(fail_on)
    if write and not fix:
        raise UsageError("--write only makes sense with --fix")
    if not paths:
        raise UsageError("give at least one PATH to audit")
    result = audit_paths(paths)
    _require_something_audited(result, paths)
    if not fix:
        render = {"text": render_text, "json": render_json, "sarif": render_sarif}[fmt]
        return Outcome(render(result), "", exit_code(result, threshold))
    fixes = plan_fixes(result)
    notes = render_fix_notes(fixes)
    if not write:
        root = diff_root(paths)
        if root != Path.cwd().resolve():
            notes += (
                f"the diff's paths are relative to {root}: apply it there "
                f"(cd {root} && git apply FILE, or patch -p1 < FILE)\n"
            )
        return Outcome(unified_diff(fixes, root), notes, exit_code(result, threshold))
    changed = write_fixes(fixes)
    after = audit_paths(paths)
    summary = "".join(f"rewrote {path}\n" for path in changed)
    return Outcome(summary, notes, exit_code(after, threshold))


def _require_something_audited(result: AuditResult, paths: list[str]) -> None:
    """A UsageError when the paths held nothing to audit: a gate must not pass on nothing
    (an empty or mistyped folder)."""
    where = ", ".join(paths)
    if result.files_scanned == 0:
        raise UsageError(
            f"nothing was scanned: no C++/CUDA, Python or library (.so, .pyd, .dylib) files "
            f"under {where}"
        )
    if not result.ops:
        raise UsageError(
            f"nothing was audited: no custom op is defined in the {result.files_scanned} "
            f"files scanned under {where}"
        )


def run_compare(old: str, new: str, fmt: str = "text") -> Outcome:
    """Schema changes between two builds of a library; exit 0 (informational)."""
    changes = compare_libraries(old, new)
    if fmt == "text":
        return Outcome(render_changes(changes), "", 0)
    rows = [{**asdict(c), "mutability": c.mutability} for c in changes]
    return Outcome(json.dumps(rows, indent=2) + "\n", "", 0)


def run_verify(
    target: str, inputs: str, device: str = "cpu", opcheck: bool = True, fmt: str = "text"
) -> Outcome:
    """Dynamic check of one op; exit 1 when declared and observed writes disagree."""
    from soakgate.audit.verify import render_verify, verify

    report = verify(target, inputs, device, opcheck)
    code = int(bool(report.findings or report.errors))
    if fmt == "text":
        return Outcome(render_verify(report), "", code)
    data = {**asdict(report), "findings": [{"verdict": v, "params": p} for v, p in report.findings]}
    return Outcome(json.dumps(data, indent=2) + "\n", "", code)
