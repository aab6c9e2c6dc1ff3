"""`soakgate audit verify MODULE` imports a module from the current folder, as `python -m` would,
through the installed console script and without PYTHONPATH."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from tests.cli.helpers import ENTRY_POINT, soakgate


@pytest.mark.torch
def test_verify_imports_a_module_from_the_current_folder(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    assert ENTRY_POINT.exists()
    (tmp_path / "sg_cwd_mod.py").write_text(
        textwrap.dedent("""
        import torch
        lib = torch.library.Library("sgcwd", "DEF")
        lib.define("scale(Tensor x, Tensor out) -> ()")
        lib.impl("scale", lambda x, out: (out.copy_(x * 2), None)[1], "CompositeExplicitAutograd")
    """)
    )
    result = soakgate(
        "audit", "verify", "sg_cwd_mod:sgcwd::scale", "--inputs", "f32[4]; f32[4]",
        "--no-opcheck", cwd=tmp_path, entry_point=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr  # a finding: it writes `out`
    assert "void-op-unannotated: out" in result.stdout
