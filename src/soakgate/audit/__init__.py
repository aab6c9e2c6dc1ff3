"""Audit PyTorch custom-op schemas for writes torch.compile cannot see (issue 4).

Pipeline: extract (C++ via tree-sitter, Python via ast, `.so` as bytes) -> parse schemas
(`schema`) -> infer writes (`writes`) -> verdicts -> text/JSON/SARIF, `--fix` diffs, binary
compare, and dynamic verification with torch (`verify`, `control`).
"""

from __future__ import annotations

from soakgate.audit.compare import compare_libraries
from soakgate.audit.fix import plan_fixes, unified_diff, write_fixes
from soakgate.audit.model import AuditResult, Finding, OpReport, Severity
from soakgate.audit.scan import audit_paths
from soakgate.audit.schema import Schema, parse_schema

__all__ = [
    "AuditResult",
    "Finding",
    "OpReport",
    "Schema",
    "Severity",
    "audit_paths",
    "compare_libraries",
    "parse_schema",
    "plan_fixes",
    "unified_diff",
    "write_fixes",
]
