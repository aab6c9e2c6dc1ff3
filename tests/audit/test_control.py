"""Positive control: unannotated stand-ins go wrong under torch.compile, `--fix` output does not."""

from __future__ import annotations

import pytest

from soakgate.audit.control import (
    UNANNOTATED,
    control_as_expected,
    fixed_schemas,
    render_control,
    run_control,
)
from soakgate.audit.fix import plan_fixes
from soakgate.audit.model import AuditResult


def test_stand_ins_match_the_fixture_and_its_fix(kernlib_result: AuditResult) -> None:
    """The control's schemas are the fixture's, and its fixed schemas are what --fix writes."""
    by_name = {r.op.schema.name: r for r in kernlib_result.ops}
    fixes = {f.op.split("::", 1)[1]: f.new_schema for f in plan_fixes(kernlib_result)}
    for name, text in UNANNOTATED.items():
        assert by_name[name].op.schema.text == text
        assert fixes[name] == fixed_schemas()[name]


@pytest.mark.torch
def test_aot_eager_drops_unannotated_ops_and_keeps_fixed_ones() -> None:
    pytest.importorskip("torch")
    results = run_control("cpu", ("aot_eager",))
    table = render_control(results)
    assert len(results) == 6
    for result in results:
        if result.variant == "unannotated":
            assert not result.correct, table
            assert result.in_graph is False, table
        else:
            assert result.correct, table
            assert result.in_graph is True, table
    assert control_as_expected(results)


@pytest.mark.torch
@pytest.mark.slow
# Inductor imports torch.jit, which warns about its own deprecation on torch 2.13.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_inductor_gives_the_same_picture() -> None:
    pytest.importorskip("torch")
    results = run_control("cpu", ("inductor",))
    assert control_as_expected(results), render_control(results)
