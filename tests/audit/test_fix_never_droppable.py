"""`--fix` never makes an op droppable (issue 32): whatever it proposes, an op that declared an
effect (a return, or a written parameter) still declares one, and an op whose returns it drops
gains a written parameter. A property over every op of every fixture tree, and the repro of the
destructive rewrite seen on held-out kernel code: an op returning its output buffer, with no
write the analyser could attribute to a parameter."""

from __future__ import annotations

from pathlib import Path

import pytest

from soakgate.audit.fix import plan_fix, plan_fixes
from soakgate.audit.scan import audit_paths
from soakgate.audit.schema import parse_schema

FIXTURES = Path(__file__).parent / "fixtures"


def _declares_an_effect(schema_text: str) -> bool:
    schema = parse_schema(schema_text)
    return bool(schema.returns) or any(a.is_write for a in schema.arguments)


@pytest.mark.parametrize("tree", sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()))
def test_no_fix_of_any_fixture_op_leaves_it_without_an_effect(tree: str) -> None:
    result = audit_paths([str(FIXTURES / tree)])
    fixes = plan_fixes(result)
    for fix in fixes:
        if fix.new_schema is None:
            continue
        before, after = parse_schema(fix.old_schema), parse_schema(fix.new_schema)
        assert _declares_an_effect(fix.new_schema), (fix.op, fix.old_schema, fix.new_schema)
        if len(after.returns) < len(before.returns):  # a dropped return needs a written input
            assert any(a.is_write for a in after.arguments), (fix.op, fix.new_schema)


def test_a_returned_buffer_with_no_named_write_is_left_for_a_human(tmp_path: Path) -> None:
    """`-> Tensor` whose implementation returns a parameter it writes through a path the analyser
    cannot attribute: before, `--fix` proposed `-> ()` with no `(a!)` anywhere."""
    result = audit_paths([str(FIXTURES / "kernlib")])
    reports = [r for r in result.ops if "returns-alias-unannotated" in r.verdicts]
    assert reports
    for report in reports:
        for impl in report.impls:  # the writes the analyser found, forgotten
            impl.writes[:] = [w for w in impl.writes if w.kind == "returns-param"]
        fix = plan_fix(report, [])
        assert fix is not None
        if fix.new_schema is not None:
            assert _declares_an_effect(fix.new_schema), (fix.op, fix.new_schema)
        else:
            assert fix.manual and not fix.file_edits
