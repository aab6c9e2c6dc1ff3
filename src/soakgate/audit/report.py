"""Human text and JSON renderings of an audit result."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from soakgate.audit.fix import OpFix
from soakgate.audit.model import AuditResult, Finding, Severity
from soakgate.audit.verdicts import VERDICTS


def exit_code(result: AuditResult, fail_on: Severity) -> int:
    """1 when some finding is at or above `fail_on`, else 0."""
    return int(any(f.severity >= fail_on for f in result.findings))


def _finding_lines(finding: Finding) -> list[str]:
    lines = [f"  {finding.op}  [{finding.severity.name.lower()}]  {finding.location}"]
    lines.append(f"    {finding.message}")
    for evidence in finding.evidence[:6]:
        lines.append(
            f"    - {evidence.param}: {evidence.kind} ({evidence.confidence.name.lower()}) "
            f"at {evidence.location}: {evidence.expression}"
        )
    return lines


def render_text(result: AuditResult) -> str:
    """Findings grouped by verdict with evidence, then fake-impl coverage and a summary line."""
    lines: list[str] = []
    for verdict in VERDICTS[:-1]:
        group = [f for f in result.findings if f.verdict == verdict]
        if group:
            lines.append(f"{verdict} ({len(group)})")
            for finding in sorted(group, key=lambda f: (-f.severity, f.op)):
                lines.extend(_finding_lines(finding))
            lines.append("")
    ok = [r.op.qualname for r in result.ops if not r.findings]
    if ok:
        lines.append(f"ok ({len(ok)}): {', '.join(ok)}")
    guarded = [f"{r.op.qualname} ({r.op.guard})" for r in result.ops if r.op.guard]
    if guarded:
        lines.append(f"defined under a preprocessor guard: {', '.join(guarded)}")
    with_fake = [r.op.qualname for r in result.ops if r.has_fake]
    without = [r.op.qualname for r in result.ops if not r.has_fake and r.op.origin != "binary"]
    lines.append(f"fake/meta impl: {len(with_fake)} with, {len(without)} without")
    if without:
        lines.append(f"  without (compile graph-breaks; hazards stay latent): {', '.join(without)}")
    counts = {s.name.lower(): sum(f.severity == s for f in result.findings) for s in Severity}
    summary = ", ".join(f"{n} {name}" for name, n in counts.items() if n)
    lines.append(
        f"{len(result.ops)} ops in {result.files_scanned} files "
        f"({result.files_parsed} parsed): {summary or 'no findings'}"
    )
    return "\n".join(lines) + "\n"


def _plain(value: Any) -> Any:
    if isinstance(value, Severity):
        return value.name.lower()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def to_json(result: AuditResult) -> dict[str, Any]:
    """A JSON-ready dict: every op with its schema, verdicts, evidence and fake coverage."""
    ops = []
    for report in result.ops:
        ops.append(
            {
                "op": report.op.qualname,
                "schema": report.op.schema.text,
                "location": str(report.op.location),
                "origin": report.op.origin,
                "guard": report.op.guard,
                "verdicts": report.verdicts,
                "has_fake": report.has_fake,
                "implementations": [
                    {
                        "function": i.function,
                        "key": i.dispatch_key,
                        "location": str(i.location),
                        "alternatives": [str(a) for a in i.alternatives],
                    }
                    for i in report.impls
                ],
                "findings": [_plain(_finding_dict(f)) for f in report.findings],
            }
        )
    return {
        "files_scanned": result.files_scanned,
        "files_parsed": result.files_parsed,
        "ops": ops,
    }


def _finding_dict(finding: Finding) -> dict[str, Any]:
    data = asdict(finding)
    data["location"] = str(finding.location)
    data["evidence"] = [
        {**asdict(e), "location": str(e.location), "confidence": e.confidence.name.lower()}
        for e in finding.evidence
    ]
    return data


def render_json(result: AuditResult) -> str:
    """The JSON rendering as text."""
    return json.dumps(to_json(result), indent=2) + "\n"


def render_fix_notes(fixes: list[OpFix]) -> str:
    """What the diff does not cover: hand edits, changed returns and their callers."""
    lines = []
    for fix in fixes:
        if fix.manual:
            lines.append(f"{fix.op}: fix by hand: {fix.manual}")
            if fix.new_schema:
                lines.append(f"  suggested schema: {fix.new_schema}")
        elif fix.incomplete:
            lines.append(f"{fix.op}: incomplete: the diff annotates what it can, but")
            lines.extend(f"  still to do by hand: {item}" for item in fix.incomplete)
        if fix.unsure:
            names = ", ".join(fix.unsure)
            lines.append(
                f"{fix.op}: not annotated (low-confidence evidence only, check by hand): {names}"
            )
        if fix.returns_dropped:
            lines.append(f"{fix.op}: now returns (); callers must use the written buffer instead")
            lines.extend(f"  implementation must return void: {loc}" for loc in fix.impls_to_change)
            lines.extend(f"  call site uses the return value: {loc}" for loc in fix.call_sites)
    return "\n".join(lines) + ("\n" if lines else "")
