"""The determinism probe measures agreement within and across real mock instances."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable

from soakgate.mockserver.process import MockProcess
from soakgate.probes.determinism import probe
from soakgate.prompts import builtin_prompts
from soakgate.targets import RequestSpec, TargetSpec

PROMPTS = list(builtin_prompts())[:12]


def test_deterministic_mocks_agree_everywhere(start_mock: Callable[..., MockProcess]) -> None:
    a, b = start_mock("--seed", "1"), start_mock("--seed", "99")
    targets = [TargetSpec.parse(f"a={a.url}"), TargetSpec.parse(f"b={b.url}")]
    report = asyncio.run(probe(targets, PROMPTS, RequestSpec(max_tokens=32, stream=False), 3))
    by_scope = {row.scope: row for row in report}
    assert set(by_scope) == {"within a", "within b", "a vs b"}
    assert by_scope["within a"].pairs == 24 and by_scope["a vs b"].pairs == 12
    assert all(row.exact_match_rate == 1.0 and not row.divergence_positions for row in report)


def test_a_perturbing_instance_disagrees_with_a_clean_one(
    start_mock: Callable[..., MockProcess],
) -> None:
    clean, shaky = start_mock("--seed", "1"), start_mock("--seed", "2", "--perturb-rate", "0.5")
    targets = [TargetSpec.parse(f"clean={clean.url}"), TargetSpec.parse(f"shaky={shaky.url}")]
    spec = RequestSpec(max_tokens=32, stream=False, return_token_ids=True)
    by_scope = {row.scope: row for row in asyncio.run(probe(targets, PROMPTS, spec))}
    truth = shaky.ground_truth()
    perturbed_first = sum(
        1 for row in truth if row["perturbed"] and row["request_id"].endswith("-0")
    )
    cross = by_scope["clean vs shaky"]
    assert by_scope["within clean"].exact_match_rate == 1.0
    assert cross.pairs - cross.identical == perturbed_first > 0
    assert all(0 <= position < 32 for position in cross.divergence_positions)


def test_cli_prints_the_caveat(start_mock: Callable[..., MockProcess]) -> None:
    mock = start_mock()
    result = subprocess.run(
        [sys.executable, "-m", "soakgate", "determinism", "--target", mock.url, "--prompt-count",
         "3", "--max-tokens", "8"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "not by itself a corruption signal" in " ".join(result.stdout.split())
    assert len(mock.ground_truth()) == 3 * 2  # 3 prompts, 2 repeats each


def test_the_old_prompts_spelling_still_counts_with_a_warning(
    start_mock: Callable[..., MockProcess],
) -> None:
    """`--prompts` is a FILE in `run`; in `determinism` it was a count and is now --prompt-count."""
    mock = start_mock()
    result = subprocess.run(
        [sys.executable, "-m", "soakgate", "determinism", "--target", mock.url, "--prompts", "2",
         "--max-tokens", "8"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "deprecated; use --prompt-count 2" in result.stderr
    assert len(mock.ground_truth()) == 2 * 2
    help_text = subprocess.run(
        [sys.executable, "-m", "soakgate", "determinism", "--help"],
        capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    assert "--prompt-count" in help_text and "--prompts" not in help_text
