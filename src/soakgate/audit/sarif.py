"""SARIF 2.1.0 output, for code-scanning UIs (GitHub, GitLab, VS Code)."""

from __future__ import annotations

import json
from typing import Any

from soakgate import __version__
from soakgate.audit.model import AuditResult, Severity
from soakgate.audit.verdicts import VERDICTS

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {
    Severity.NOTE: "note",
    Severity.WARNING: "warning",
    Severity.ERROR: "error",
    Severity.CRITICAL: "error",
}
_HELP = {
    "void-op-unannotated": "Op returns () and declares no mutable argument; compilers drop it.",
    "unannotated-write": "The implementation writes an argument the schema does not mark (x!).",
    "returns-alias-unannotated": "Returns an input under a schema that promises a fresh tensor.",
    "annotated-return-alias": "Returns Tensor(a!); torch.compile cannot functionalize this.",
    "over-annotated": "Declared mutable but never written; blocks optimisations.",
    "no-impl-found": "No implementation found to infer writes from.",
}


def to_sarif(result: AuditResult) -> dict[str, Any]:
    """A SARIF 2.1.0 log with one result per finding and one rule per verdict."""
    rules = [
        {"id": verdict, "shortDescription": {"text": _HELP[verdict]}}
        for verdict in VERDICTS
        if verdict in _HELP
    ]
    results = []
    for finding in result.findings:
        location = {
            "physicalLocation": {
                "artifactLocation": {"uri": finding.location.path},
                "region": {"startLine": max(finding.location.line, 1)},
            }
        }
        related = [
            {
                "id": index,
                "message": {"text": f"{e.param}: {e.kind}: {e.expression}"},
                "physicalLocation": {
                    "artifactLocation": {"uri": e.location.path},
                    "region": {"startLine": max(e.location.line, 1)},
                },
            }
            for index, e in enumerate(finding.evidence)
        ]
        results.append(
            {
                "ruleId": finding.verdict,
                "level": _LEVEL[finding.severity],
                "message": {"text": f"{finding.op}: {finding.message}"},
                "locations": [location],
                "relatedLocations": related,
                "properties": {
                    "severity": finding.severity.name.lower(),
                    "params": list(finding.params),
                },
            }
        )
    driver = {"name": "soakgate-audit", "version": __version__, "rules": rules}
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{"tool": {"driver": driver}, "results": results}],
    }


def render_sarif(result: AuditResult) -> str:
    """The SARIF log as text."""
    return json.dumps(to_sarif(result), indent=2) + "\n"
