"""Knobs between a clean and a failing configuration, and the configurations in between."""

from __future__ import annotations

import json
import shlex

import pytest

from soakgate.campaign.model import ConfigEntry
from soakgate.errors import ConfigError
from soakgate.search.knobs import MISSING, compose, diff_knobs, parse_flags

CLEAN = ConfigEntry(
    "eager",
    flags="""--compilation-config '{{"mode": 0, "pass_config": {{"fuse": false}}}}' """
    "--max-num-seqs 8 --swap-space 4",
    env={"KEEP": "1", "DROP": "x"},
)
FAILING = ConfigEntry(
    "graph",
    flags="""--compilation-config '{{"mode": 3, "pass_config": {{"fuse": true, "x": 1}}}}' """
    "--max-num-seqs 16 --swap-space 4 --enforce-eager",
    env={"KEEP": "1", "NEW": "2"},
)


def test_every_difference_is_one_knob_and_nothing_else_is():
    knobs = diff_knobs(CLEAN, FAILING)
    assert [(k.name, k.clean, k.failing) for k in knobs] == [
        ("--compilation-config.mode", "0", "3"),
        ("--compilation-config.pass_config.fuse", "false", "true"),
        ("--compilation-config.pass_config.x", MISSING, "1"),
        ("--max-num-seqs", "8", "16"),
        ("--enforce-eager", MISSING, "(set)"),
        ("$DROP", "x", MISSING),
        ("$NEW", MISSING, "2"),
    ]


def _json(config: ConfigEntry) -> dict[str, object]:
    words = shlex.split(config.flags)
    text = words[words.index("--compilation-config") + 1]
    return json.loads(text.replace("{{", "{").replace("}}", "}"))


def test_composing_none_gives_the_clean_configuration_and_all_the_failing_one():
    knobs = diff_knobs(CLEAN, FAILING)
    none = compose(CLEAN, FAILING, knobs, [], "none")
    every = compose(CLEAN, FAILING, knobs, range(len(knobs)), "all")
    assert parse_flags(none.flags) == parse_flags(CLEAN.flags) and none.env == CLEAN.env
    assert _json(every) == _json(FAILING) and every.env == FAILING.env
    assert {k: v for k, v in parse_flags(every.flags).items() if k != "--compilation-config"} == {
        k: v for k, v in parse_flags(FAILING.flags).items() if k != "--compilation-config"
    }


def test_composing_some_knobs_changes_exactly_those():
    knobs = diff_knobs(CLEAN, FAILING)
    names = [k.name for k in knobs]
    some = compose(CLEAN, FAILING, knobs, [names.index("--compilation-config.pass_config.x"),
                                           names.index("--enforce-eager"),
                                           names.index("$DROP")], "some")  # fmt: skip
    assert _json(some) == {"mode": 0, "pass_config": {"fuse": False, "x": 1}}
    flags = parse_flags(some.flags)
    assert flags["--max-num-seqs"] == ["8"] and flags["--enforce-eager"] == [None]
    assert some.env == {"KEEP": "1"} and some.label == "some"


def test_a_json_option_only_one_side_has_is_split_into_its_keys():
    clean = ConfigEntry("a", flags="--max-num-seqs 8")
    failing = ConfigEntry("b", flags="""--max-num-seqs 8 -O '{{"mode": 3, "level": 1}}'""")
    knobs = diff_knobs(clean, failing)
    assert [k.name for k in knobs] == ["-O.mode", "-O.level"]
    assert "-O" not in parse_flags(compose(clean, failing, knobs, [], "x").flags)
    assert _json_of(compose(clean, failing, knobs, [1], "x"), "-O") == {"level": 1}


def _json_of(config: ConfigEntry, option: str) -> object:
    value = parse_flags(config.flags)[option][0]
    assert value is not None
    return json.loads(value.replace("{{", "{").replace("}}", "}"))


def test_a_repeated_option_is_one_knob_and_option_forms_parse():
    assert parse_flags("serve m --a 1 --b --c=2 --a 3 -5") == {
        "(positional)": ["serve", "m", "-5"], "--a": ["1", "3"], "--b": [None], "--c": ["2"],
    }  # fmt: skip
    assert parse_flags("--delta -5") == {"--delta": ["-5"]}
    knobs = diff_knobs(ConfigEntry("a", flags="--knob x=1 --knob y=2"),
                       ConfigEntry("b", flags="--knob x=1"))  # fmt: skip
    assert [(k.name, k.clean, k.failing) for k in knobs] == [("--knob", "x=1 y=2", "x=1")]


def test_unbalanced_quotes_are_a_one_line_config_error():
    with pytest.raises(ConfigError, match="flags"):
        parse_flags("--a 'unclosed")
