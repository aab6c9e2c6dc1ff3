"""Bisect asks the soak's question (the stored generation's tokens, teacher-forced), says when a
module is not called in the compiled program, and picks its tolerance by dtype with eager's own
rounding noise printed beside it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from tests.cli.helpers import soakgate

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
]

REPO = Path(__file__).resolve().parents[2]
VOCAB = 12

TOY = """
import torch

class Toy(torch.nn.Module):
    '''A tiny language model whose compiled program raises token 7 from position FROM on.'''

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(12, 8)
        self.head = torch.nn.Linear(8, 12)

    def forward(self, input_ids, use_cache=False):
        logits = self.head(self.embed(input_ids))
        if torch.compiler.is_compiling():
            bump = torch.zeros_like(logits)
            bump[:, FROM:, 7] = 50.0
            logits = logits + bump
        return logits
"""


def _toy(from_position: int):
    import torch

    from soakgate.bisect.model import Subject

    namespace: dict[str, object] = {}
    exec(TOY.replace("FROM", str(from_position)), namespace)
    model = namespace["Toy"]().eval()  # type: ignore[operator]
    with torch.no_grad():  # the "stored generation": eager's own greedy tokens after 3 prompt ones
        ids = [1, 2, 3]
        for _ in range(6):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return Subject(model, (), {"input_ids": torch.tensor([ids])}, "toy", 3, lambda t: f"t{t}")


def test_the_first_generated_position_where_compiled_leaves_eager_is_found():
    from soakgate.bisect.tokens import check_tokens

    subject = _toy(5)
    found = check_tokens(subject, subject(), "eager", 3, lambda t: f"t{t}")
    # logits at position p predict generated token p - 2: from the fourth on, compiled says t7
    stored = subject.kwargs["input_ids"][0, 3:].tolist()
    expected = next(i for i in range(3, 6) if stored[i] != 7)
    assert found.generated == 6 and found.position == expected and found.compiled_top == "t7"
    assert found.reproduced == 6  # the stored tokens are eager's greedy answer
    assert found.stored_rank_eager == 1 and found.stored_rank_compiled == 2 and found.margin > 0


def test_bisect_reports_the_token_then_bisects_the_input_up_to_it():
    from soakgate.bisect import bisect_model

    finding = bisect_model(_toy(5), backend="eager")
    assert finding.diverges and finding.tokens is not None
    line = finding.line()
    position = finding.tokens.position
    assert line.startswith(f"first divergent token: position {position} of 6 generated (stored")
    assert "compiled's 't7'" in line and "first failing stage: eager (Dynamo graph capture)" in line
    assert finding.tolerance_line().startswith(
        "tolerance: rtol 0.001, atol 0.001 (float32); eager's own rounding, float32 against float64"
    )


def test_a_compiled_program_that_keeps_every_token_says_so():
    from soakgate.bisect.tokens import check_tokens

    toy = _toy(99)
    found = check_tokens(toy, toy(), "eager", 3, lambda t: f"t{t}")
    assert found.position is None and found.describe(None).startswith(
        "compiled's top token is eager's at all 6 generated positions"
    )


def test_a_flip_within_eager_rounding_noise_is_a_near_tie_not_a_finding():
    from soakgate.bisect.tokens import Noise, TokenCheck

    flip = TokenCheck(8, 8, 2, "a", "a", "b", 1, 2, margin=0.004)
    assert not flip.real(Noise("bfloat16", "float32", 0.03))
    assert "within eager's rounding noise: a near tie" in flip.describe(
        Noise("bfloat16", "float32", 0.03)
    )
    assert flip.real(Noise("float32", "float64", 1e-6)) and flip.real(None)


def test_a_module_the_compiled_program_never_calls_is_said_to_be_not_called(tmp_path):
    done = soakgate("bisect", str(REPO / "examples/bisect/compile_only_path.py") + ":model",
                    "--repro", "repro.py", cwd=tmp_path, timeout=300)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert done.stdout.splitlines()[2].startswith("no repro written: the divergence is in "
                                                  "Dynamo's graph capture itself")  # fmt: skip
    assert not (tmp_path / "repro.py").exists()
    assert first.startswith("first divergent module: block.norm (not called in the compiled "
                            "program; its parent block diverges by ")  # fmt: skip
    assert "first failing stage: eager (Dynamo graph capture)" in first


BF16 = """
import torch

def model():
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    return block.to(torch.bfloat16), (torch.randn(4, 16, dtype=torch.bfloat16),)
"""


@pytest.mark.slow
def test_a_bfloat16_model_gets_its_dtypes_tolerance_with_its_own_rounding_noise(tmp_path):
    (tmp_path / "half.py").write_text(BF16)
    done = soakgate("bisect", "half.py:model", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    first, second = done.stdout.splitlines()
    assert first.startswith("no divergence: compiled matches eager at every stage")
    assert second.startswith("tolerance: rtol 0.016, atol 0.016 (bfloat16); eager's own "
                             "rounding, bfloat16 against float32: up to ")  # fmt: skip
    assert float(second.rsplit(" ", 1)[1]) > 0  # measured: bfloat16 rounds
    given = soakgate("bisect", "half.py:model", "--rtol", "1e-9", cwd=tmp_path, timeout=600)
    assert "tolerance: rtol 1e-09, atol 1e-09 (bfloat16)" in given.stdout
