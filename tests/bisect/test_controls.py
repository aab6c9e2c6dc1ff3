"""The controls of `soakgate bisect` and `soakgate replay`, through the real CLI on torch CPU.

- dropped op: the op of examples/vllm-dropped-op-plugin patched into the shared tiny Llama
  (transformers, from that path only): bisect names the module (`model.norm`), the stage
  (`aot_eager`) and the op (`soakgate_ctl::copy_into`); served compiled, its collapses replay as
  input-triggered.
- inductor stage: a custom post-grad pass that drops one add: bisect names inductor's post-grad
  passes, not an earlier stage.
- a model compiled correctly: no divergence, exit 0.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import subprocess
import sys
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.cli.helpers import one_error_line, soakgate
from tests.realservers.helpers import model_dir

from soakgate.mockserver.process import MockProcess

REPO = Path(__file__).resolve().parents[2]
CONTROL = "examples/bisect/dropped_op_transformers.py"
WRONG_PASS = "examples/bisect/wrong_post_grad_pass.py:model"

pytestmark = pytest.mark.torch
needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed: pip install -e '.[torch]'",
)
needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="transformers is not installed: pip install -e '.[transformers]'",
)


def _model() -> Path:
    model = model_dir()
    if not (model / "config.json").is_file():
        pytest.skip(f"the shared model is not at {model}")
    return model


@pytest.mark.slow
@needs_transformers
def test_bisect_names_the_module_the_stage_and_the_dropped_op(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    db = tmp_path / "runs.sqlite"  # the input: the prompt of a stored generation
    soaked = soakgate("run", "--target", f"gpu0={start_mock().url}", "--requests", "3",
                      "--db", str(db), "--quiet", "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
    assert soaked.returncode == 0, soaked.stderr
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        (request_id,) = check.execute("SELECT request_id FROM generations WHERE seq=2").fetchone()
    done = soakgate("bisect", str(_model()), "--import", str(REPO / CONTROL), "--layers", "2",
                    "--from-db", str(db), "--request", request_id, "--repro", "repro.py",
                    cwd=tmp_path, timeout=600)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # a finding: compiled diverges
    first, second, third = done.stdout.splitlines()
    # The stored answer is the mock's, not the model's: compiled leaves eager at once.
    assert first.startswith("first divergent token: position 0 of "), first
    assert first.endswith(
        "; first divergent module: model.norm; first failing stage: aot_eager (AOTAutograd: "
        "functionalization); missing op: soakgate_ctl::copy_into (schema declares no write and "
        "returns nothing: run soakgate audit)"
    )
    assert second.startswith("tolerance: rtol 0.001, atol 0.001 (float32); eager's own rounding")
    assert third.startswith("repro: wrote repro.py (Dynamo's graph 1 of 1, run under aot_eager")
    # PyTorch's repro, run alone: the op is dropped there too, and its accuracy check says so
    again = subprocess.run([sys.executable, "repro.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=600)  # fmt: skip
    assert again.returncode != 0 and "AccuracyError" in again.stderr, again.stderr[-2000:]


@pytest.mark.slow
@needs_torch
def test_bisect_blames_inductors_post_grad_passes_for_a_wrong_custom_pass(tmp_path: Path) -> None:
    done = soakgate("bisect", str(REPO / WRONG_PASS), "--verbose", cwd=tmp_path, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr  # a finding: compiled diverges
    for backend in ("eager", "aot_eager", "aot_eager_decomp_partition"):  # each checked, each clean
        assert f"bisect: {backend} : matches eager" in done.stderr, done.stderr
    # PyTorch's own bisector says it: the custom pass is an application of post_grad_passes
    assert "Disabling post_grad_passes fixed the issue." in done.stderr
    assert "Debug info: post_grad_custom_post_pass" in done.stderr
    line = done.stdout.splitlines()[0]
    assert "first failing stage: inductor (post_grad_passes: post_grad_custom_post_pass" in line
    assert line.startswith("first divergent module: <root> (Residual);"), line
    assert line.endswith("missing op: none")


CORRECT = """
import torch

def model():
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))
    return block, (torch.randn(4, 16),)
"""


@pytest.mark.slow
@needs_torch
def test_a_correctly_compiled_model_is_no_finding(tmp_path: Path) -> None:
    (tmp_path / "correct.py").write_text(CORRECT)
    done = soakgate("bisect", "correct.py:model", "--progress-every", "1ms", cwd=tmp_path,
                    timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().startswith("no divergence: compiled matches eager at every stage")
    # progress on stderr while it compiles (issue 30 item 7), never in the finding on stdout
    progress = [line for line in done.stderr.splitlines() if " elapsed, " in line]
    assert progress and all(line.startswith("soakgate: ") for line in progress), done.stderr
    assert "steps: bisect: " in progress[-1] and "elapsed" not in done.stdout


@needs_torch
@pytest.mark.parametrize(
    "model, message",
    [
        ("no/such/dir", "is neither a model directory nor module:function"),
        ("correct.py:not_a_model", "must return (model, example_inputs)"),
        ("missing.py:model", "no file missing.py"),
    ],
)
def test_what_cannot_be_bisected_is_one_line_and_exit_2(
    tmp_path: Path, model: str, message: str
) -> None:
    (tmp_path / "correct.py").write_text(CORRECT + "\ndef not_a_model():\n    return 3\n")
    done = soakgate("bisect", model, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and message in one_error_line(done)


@needs_torch
def test_a_stored_prompt_that_is_not_there_is_one_line_and_exit_2(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    (tmp_path / "correct.py").write_text(CORRECT)
    db = tmp_path / "runs.sqlite"
    soaked = soakgate("run", "--target", f"gpu0={start_mock().url}", "--requests", "2",
                      "--db", str(db), "--quiet", "--no-watch-metrics", cwd=tmp_path)  # fmt: skip
    assert soaked.returncode == 0, soaked.stderr
    for flags, message in (
        (("--from-db", str(db), "--request", "nope-1"), "no generation with request id 'nope-1'"),
        (("--from-db", str(db)), "--from-db and --request go together"),
    ):
        done = soakgate("bisect", "correct.py:model", *flags, cwd=tmp_path, timeout=120)
        assert done.returncode == 2 and message in one_error_line(done), done.stderr


@pytest.fixture
def compiled_server() -> Iterator[str]:
    """The dropped-op tiny Llama, compiled, behind an OpenAI-compatible server (tests/hfserve)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.hfserve", str(_model()), "--dropped-op"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert server.stdout is not None
    try:
        line = server.stdout.readline()
        assert "listening on " in line, "tests.hfserve did not start"
        yield line.split("listening on ")[1].strip()
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stdout.close()


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a CPU model answering one request at a time: minutes under load
@needs_transformers
def test_the_dropped_op_collapses_replay_as_any_input(compiled_server: str, tmp_path: Path) -> None:
    db = tmp_path / "control.sqlite"  # the soak as docs/trace.md shows it (/metrics watched)
    soaked = soakgate(
        "run", "--target", f"cpu0={compiled_server}", "--label", "compiled", "--requests", "6",
        "--concurrency", "3", "--max-tokens", "16", "--no-stream", "--db", str(db), cwd=tmp_path,
        timeout=300,
    )  # fmt: skip
    assert soaked.returncode == 0, soaked.stderr
    done = soakgate("replay", str(db), "--collapsed", "--target", f"cpu0={compiled_server}",
                    "--repeats", "2", "--max-rows", "2", cwd=tmp_path, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr  # no trigger: every prompt collapses
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        verdicts = [json.loads(d) for (d,) in check.execute(
            "SELECT data FROM events WHERE kind='replay_verdict'")]  # fmt: skip
        texts = {t for (t,) in check.execute("SELECT text FROM generations")}
    assert [v["verdict"] for v in verdicts] == ["any input"] * 2
    assert all(v["alone_greedy"] == [2, 2, 0] and v["alone_sampled"] == [2, 2, 0] for v in verdicts)
    assert all(v["control_alone"] == [4, 4, 0] for v in verdicts)  # the control prompt as well
    assert texts == {"!" * 16}  # token id 0, every answer, alone and under load


@pytest.mark.slow
@pytest.mark.timeout(900)
@needs_transformers
def test_a_soaked_generation_is_bisected_to_its_first_divergent_token_and_module(
    compiled_server: str, tmp_path: Path
) -> None:
    """The soak's question asked of the model: the dropped-op server answered `!` (token 0);
    teacher-forced, compiled's top token is the stored one and eager's is not, from the first
    generated position; the input up to it is then bisected to the module, stage and op."""
    db = tmp_path / "control.sqlite"
    soaked = soakgate(
        "run", "--target", f"cpu0={compiled_server}", "--requests", "2", "--concurrency", "1",
        "--max-tokens", "6", "--temperature", "0", "--token-ids", "--no-stream", "--db", str(db),
        "--quiet",
        "--no-watch-metrics", cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert soaked.returncode == 0, soaked.stderr
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        (request_id, text, ids) = check.execute(
            "SELECT request_id, text, token_ids FROM generations WHERE seq = 1").fetchone()  # fmt: skip
    assert text == "!" * 6 and array("i", ids).tolist() == [0] * 6  # the server's own tokens
    done = soakgate("bisect", str(_model()), "--import", str(REPO / CONTROL), "--layers", "2",
                    "--from-db", str(db), "--request", request_id, cwd=tmp_path, timeout=600)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("first divergent token: position 0 of 6 generated"), first
    assert "(stored '!', rank " in first and ", 1 compiled): eager's top " in first
    assert "compiled's '!'" in first
    assert "; first divergent module: model.norm; first failing stage: aot_eager" in first


CUSTOM = "examples/bisect/custom_backend.py"


@pytest.mark.slow
@needs_torch
def test_a_custom_backends_own_pass_is_bisected_only_when_the_backend_is_kept(
    tmp_path: Path,
) -> None:
    """The backend hands the graph to inductor with a wrong pass of its own (as vLLM's backend
    installs its passes): kept at the inductor stage, the bisector names that pass; plain
    torch.compile (inductor without it) is correct."""
    kept = soakgate("bisect", f"{REPO / CUSTOM}:model", "--backend", f"{REPO / CUSTOM}:backend",
                    cwd=tmp_path, timeout=600)  # fmt: skip
    assert kept.returncode == 1, kept.stdout + kept.stderr
    first = kept.stdout.splitlines()[0]
    assert "first failing stage: inductor (post_grad_passes: post_grad_custom_post_pass" in first
    assert first.startswith("first divergent module: <root> (Residual);")
    plain = soakgate("bisect", f"{REPO / CUSTOM}:model", cwd=tmp_path, timeout=600)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert plain.stdout.startswith("no divergence: compiled matches eager at every stage")
    bad = soakgate("bisect", f"{REPO / CUSTOM}:model", "--backend", f"{REPO / CUSTOM}:nope",
                   cwd=tmp_path, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "has no callable 'nope'" in one_error_line(bad)
