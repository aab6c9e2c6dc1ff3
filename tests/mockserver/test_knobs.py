"""Knob-driven collapses: flattening, rules, the injector's rate, and a real process whose
answers collapse only under the configuration a rule names."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import aiohttp
import pytest
from scipy.stats import binomtest

from soakgate.errors import UsageError
from soakgate.mockserver import MockConfig, MockProcess
from soakgate.mockserver.inject import Injector
from soakgate.mockserver.knobs import (
    KnobRule,
    collect_knobs,
    env_knobs,
    flatten_knobs,
    knob_rate,
    parse_knob,
    parse_knobs_json,
    parse_rule,
)
from tests.mockserver.helpers import completion, post


def test_flatten_renders_strings_as_they_are_and_other_values_as_compact_json() -> None:
    knobs = flatten_knobs(
        {
            "mode": 3,
            "pass_config": {"fuse": True, "deep": {"level": None}},
            "custom_ops": ["+rms", "-silu"],
            "backend": "inductor",
            "ratio": 0.5,
            "sizes": {"a": [1, 2]},
        }
    )
    assert knobs == {
        "mode": "3",
        "pass_config.fuse": "true",
        "pass_config.deep.level": "null",
        "custom_ops": '["+rms","-silu"]',
        "backend": "inductor",
        "ratio": "0.5",
        "sizes.a": "[1,2]",
    }


def test_knobs_json_must_be_an_object() -> None:
    assert parse_knobs_json('{"mode": 3, "a": {"b": "x"}}') == {"mode": "3", "a.b": "x"}
    for text, message in (("{bad", "not valid JSON"), ("[1]", "JSON object"), ("3", "JSON object")):
        with pytest.raises(UsageError, match=message):
            parse_knobs_json(text)


def test_plain_knobs_and_environment_knobs() -> None:
    assert parse_knob("level=a=b") == ("level", "a=b")
    assert parse_knob("empty=") == ("empty", "")
    for bad in ("novalue", "=3"):
        with pytest.raises(UsageError, match="NAME=VALUE"):
            parse_knob(bad)
    environ = {"SOAKGATE_KNOB_FOO": "1", "SOAKGATE_KNOB_lower_Case": "x", "PATH": "/bin"}
    assert env_knobs(environ) == {"$FOO": "1", "$lower_Case": "x"}
    merged = collect_knobs('{"mode": 3, "level": 1}', ["level=2"], environ)
    assert merged == {"mode": "3", "level": "2", "$FOO": "1", "$lower_Case": "x"}
    assert collect_knobs(None, [], {}) == {}


def test_rules_parse_into_conditions_and_a_rate() -> None:
    assert parse_rule("mode=3&$FOO=1@0.25") == KnobRule((("mode", "3"), ("$FOO", "1")), 0.25)
    assert parse_rule('custom_ops=["+rms"]@1') == KnobRule((("custom_ops", '["+rms"]'),), 1.0)
    assert parse_rule("a=x=y&b=@0") == KnobRule((("a", "x=y"), ("b", "")), 0.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mode=3", "COND"),
        ("mode=3@", "not a number"),
        ("mode=3@high", "not a number"),
        ("mode=3@1.5", "between 0 and 1"),
        ("mode=3@-0.1", "between 0 and 1"),
        ("mode=3@nan", "between 0 and 1"),
        ("@0.5", "condition ''"),
        ("mode=3&@0.5", "condition ''"),
        ("mode=3&&a=1@0.5", "condition ''"),
        ("mode@0.5", "condition 'mode'"),
        ("=3@0.5", "condition '=3'"),
    ],
)
def test_malformed_rules_are_usage_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_rule(text)


def test_the_largest_matching_rate_wins_and_unset_knobs_never_match() -> None:
    rules = [parse_rule("mode=3@0.1"), parse_rule("mode=3&$FOO=1@0.6"), parse_rule("x=@0.9")]
    assert knob_rate(rules, {"mode": "3", "$FOO": "1"}) == 0.6
    assert knob_rate(rules, {"mode": "3"}) == 0.1
    assert knob_rate(rules, {"mode": "03", "$FOO": "1"}) == 0.0  # exact strings
    assert knob_rate(rules, {"x": ""}) == 0.9  # an empty value matches only when set
    assert knob_rate([], {"mode": "3"}) == 0.0


def _decisions(config: MockConfig, n: int) -> list[str | None]:
    injector = Injector(config)
    return [injector.decide().injected for _ in range(n)]


def test_a_matching_rule_sets_the_collapse_rate_and_a_missing_one_changes_nothing() -> None:
    rules = (parse_rule("mode=3@0.2"),)
    matched = _decisions(MockConfig(seed=5, knobs={"mode": "3"}, knob_collapse=rules), 20_000)
    collapses = sum(kind is not None for kind in matched)
    assert binomtest(collapses, len(matched), 0.2).pvalue > 0.001
    plain = MockConfig(seed=5, collapse_rate=0.05)
    unmatched = MockConfig(seed=5, collapse_rate=0.05, knobs={"mode": "2"}, knob_collapse=rules)
    assert _decisions(unmatched, 2000) == _decisions(plain, 2000)
    assert Injector(MockConfig(knob_collapse=rules)).decide().injected is None  # idle


def test_the_collapse_rate_is_a_floor_under_a_smaller_matching_rule() -> None:
    rules = (parse_rule("mode=3@0.01"),)
    config = MockConfig(seed=2, collapse_rate=0.5, knobs={"mode": "3"}, knob_collapse=rules)
    decisions = _decisions(config, 5000)
    assert binomtest(sum(k is not None for k in decisions), len(decisions), 0.5).pvalue > 0.001


def test_config_refuses_a_rule_rate_out_of_range() -> None:
    with pytest.raises(UsageError, match="--knob-collapse"):
        MockConfig(knob_collapse=(KnobRule((("a", "1"),), 1.5),))


RULE = ["--knob-collapse", "mode=3&$FOO=1@1.0", "--collapse-kinds", "bang_run", "--seed", "4"]


def _clean_env(**knobs: str) -> dict[str, str]:
    """This process's environment without its own knobs, plus `knobs` as SOAKGATE_KNOB_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOAKGATE_KNOB_")}
    return env | {f"SOAKGATE_KNOB_{name}": value for name, value in knobs.items()}


async def _answers(url: str, count: int) -> list[str]:
    async with aiohttp.ClientSession(url, timeout=aiohttp.ClientTimeout(total=20)) as session:
        bodies = await asyncio.gather(
            *(
                post(session, "/v1/completions", completion(max_tokens=128), f"k-{i}")
                for i in range(count)
            )
        )
    assert all(status == 200 for status, _ in bodies)
    return [json.loads(raw)["choices"][0]["text"] for _, raw in bodies]


def _run(args: list[str], env: dict[str, str]) -> tuple[list[str], str, list[dict[str, Any]]]:
    """(answer texts, stderr, ground truth) of 20 requests to a real mock process."""
    with MockProcess(args, env=env) as mock:
        texts = asyncio.run(_answers(mock.url, 20))
        truth = mock.ground_truth()
        stderr = mock.stderr_tail()
    return texts, stderr, truth


def test_a_process_collapses_only_when_every_condition_of_the_rule_holds() -> None:
    texts, stderr, truth = _run([*RULE, "--knobs", '{"mode":3}'], _clean_env(FOO="1"))
    assert all("!" * 100 in text for text in texts)
    assert 'knobs: {"$FOO": "1", "mode": "3"}; knob-collapse rate 1.0' in stderr
    assert [r["knob_rate"] for r in truth] == [1.0] * 20
    assert {r["injected"] for r in truth} == {"bang_run"}

    for args, env in (
        ([*RULE, "--knobs", '{"mode":3}'], _clean_env()),
        (RULE, _clean_env(FOO="1")),
    ):
        texts, stderr, truth = _run(args, env)
        assert not any("!!!!!" in text for text in texts) and all(texts)
        assert "knob-collapse rate 0.0" in stderr
        assert {r["injected"] for r in truth} == {None}


@pytest.mark.parametrize(
    "argv",
    [
        ["-m", "soakgate.mockserver", "--knob-collapse", "mode=3"],
        ["-m", "soakgate.mockserver", "--knob-collapse", "mode=3@7"],
        ["-m", "soakgate.mockserver", "--knob-collapse", "@0.5"],
        ["-m", "soakgate.mockserver", "--knobs", "[3]"],
        ["-m", "soakgate.mockserver", "--knob", "novalue"],
        ["-m", "soakgate", "mock-server", "--knob-collapse", "mode=3&@0.5"],
        ["-m", "soakgate", "mock-server", "--knobs", "{nope"],
    ],
)
def test_bad_knob_flags_exit_2_with_one_line(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, *argv], capture_output=True, timeout=30)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "error: --knob" in lines[0], lines
    assert done.stdout == b""
