"""Turn a schema plus inferred writes into verdicts: what torch.compile will get wrong."""

from __future__ import annotations

from collections.abc import Iterable

from soakgate.audit.model import (
    Confidence,
    Finding,
    ImplInfo,
    OpDef,
    Severity,
    WriteEvidence,
    all_writes,
)

VERDICTS = (
    "void-op-unannotated",
    "unannotated-write",
    "returns-alias-unannotated",
    "annotated-return-alias",
    "over-annotated",
    "no-impl-found",
    "ok",
)
# Names are a weak hint only: they are reported next to a no-impl-found verdict, never judged.
_OUTPUT_LIKE = ("out", "output", "result", "dst", "o0", "y")


def _written(
    op: OpDef, impls: list[ImplInfo], callers: Iterable[WriteEvidence] = ()
) -> dict[str, list[WriteEvidence]]:
    """Schema argument name -> evidence from every implementation (and caller) that writes it."""
    names = {arg.name for arg in op.schema.arguments if arg.type.is_tensor_like}
    written: dict[str, list[WriteEvidence]] = {}
    for evidence in all_writes(impls, callers):
        if evidence.param in names and evidence.kind != "returns-param":
            written.setdefault(evidence.param, []).append(evidence)
    return written


def _declared_write(op: OpDef, name: str) -> bool:
    arg = op.schema.argument(name)
    return arg is not None and arg.is_write


def _best(evidence: list[WriteEvidence]) -> Confidence:
    return max(e.confidence for e in evidence)


def _returned(op: OpDef, impls: list[ImplInfo]) -> dict[int, tuple[str, ImplInfo]]:
    returned: dict[int, tuple[str, ImplInfo]] = {}
    for impl in impls:
        for position, param in impl.returned_params.items():
            if op.schema.argument(param) is not None:
                returned.setdefault(position, (param, impl))
    return returned


def _finding(
    op: OpDef,
    verdict: str,
    severity: Severity,
    message: str,
    params: Iterable[str | None] = (),
    evidence: Iterable[WriteEvidence] = (),
) -> Finding:
    names = tuple(p for p in params if p)
    return Finding(op.qualname, verdict, severity, message, op.location, names, tuple(evidence))


def judge(op: OpDef, impls: list[ImplInfo], callers: Iterable[WriteEvidence] = ()) -> list[Finding]:
    """Every verdict other than `ok` that applies to one op (`callers`: what the tree's
    callers show about its writes, `py_callers`)."""
    written = _written(op, impls, callers)
    findings = _write_findings(op, written)
    findings.extend(_return_findings(op, impls))
    findings.extend(_coverage_findings(op, impls, written))
    return findings


def _write_findings(op: OpDef, written: dict[str, list[WriteEvidence]]) -> list[Finding]:
    schema = op.schema
    undeclared = {n: ev for n, ev in written.items() if not _declared_write(op, n)}
    strong = sorted(n for n, ev in undeclared.items() if _best(ev) >= Confidence.MEDIUM)
    weak = sorted(n for n in undeclared if n not in strong)
    evidence = [e for n in strong or weak for e in undeclared[n]]
    if not schema.returns and not schema.is_mutable:
        what = f"writes {', '.join(strong)}" if strong else "declares no effect at all"
        message = f"returns () and {what}: torch.compile can drop the whole call"
        return [_finding(op, "void-op-unannotated", Severity.CRITICAL, message, strong, evidence)]
    # A raw pointer handed to code we cannot see is only worth a finding when the schema
    # declares no write at all; otherwise it is mentioned next to the real finding.
    if not strong and not (weak and not schema.is_mutable):
        return []
    params = strong or weak
    doubt = "" if strong else " (low confidence: pointer passed to code not found)"
    if strong and weak:
        doubt = f" (maybe also {', '.join(weak)}: pointers passed to code not found)"
    message = (
        f"writes {', '.join(params)} without `(x!)`{doubt}: compiled callers may read stale data"
    )
    severity = Severity.ERROR if strong else Severity.WARNING
    return [_finding(op, "unannotated-write", severity, message, params, evidence)]


def _coverage_findings(
    op: OpDef, impls: list[ImplInfo], written: dict[str, list[WriteEvidence]]
) -> list[Finding]:
    """over-annotated and no-impl-found: what the implementations do not show."""
    schema = op.schema
    if op.origin == "binary":
        return []
    if impls:
        # a tensor handed to an op whose writes are not known here (`ImplInfo.unseen`) is not
        # shown unwritten: the op it was handed to may write it
        unseen = {name for impl in impls for name in impl.unseen}
        unused = [
            a.name or ""
            for a in schema.arguments
            if a.is_write and a.name not in written and a.name not in unseen
        ]
        if not unused:
            return []
        message = (
            f"declares {', '.join(unused)} written but no write was found (blocks optimisation)"
        )
        return [_finding(op, "over-annotated", Severity.NOTE, message, unused)]
    if not schema.returns:
        return []
    hints = [a.name or "" for a in schema.arguments if a.name in _OUTPUT_LIKE and not a.is_write]
    hint = f" (weak hint from names: {', '.join(hints)})" if hints else ""
    message = f"no implementation found to infer writes from{hint}"
    return [_finding(op, "no-impl-found", Severity.NOTE, message, hints)]


def _return_findings(op: OpDef, impls: list[ImplInfo]) -> list[Finding]:
    findings = []
    schema = op.schema
    for position, (param, impl) in sorted(_returned(op, impls).items()):
        declared = schema.returns[position] if position < len(schema.returns) else None
        if declared is not None and declared.type.alias is None:
            message = f"returns its argument {param} under a schema that promises a fresh tensor"
            proof = [e for e in impl.writes if e.param == param and e.kind == "returns-param"]
            findings.append(
                _finding(op, "returns-alias-unannotated", Severity.ERROR, message, [param], proof)
            )
    aliased = [r for r in schema.returns if r.type.alias is not None]
    if aliased and schema.namespace != "aten":
        message = (
            "returns an alias-annotated tensor: torch.compile cannot functionalize custom ops "
            "whose outputs alias inputs; return () instead"
        )
        findings.append(_finding(op, "annotated-return-alias", Severity.WARNING, message))
    return findings
