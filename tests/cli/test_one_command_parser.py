"""The CLI builds only the parser of the command it runs (every command's arguments cost a
start-up ~10 ms), and that parser is the same one the full parser holds for the command."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from tests.cli.helpers import loaded_modules, one_error_line, soakgate, soakgate_listing_modules

from soakgate.cli.main import build_parser


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


FULL = _commands(build_parser())


@pytest.mark.parametrize("command", sorted(FULL))
def test_a_command_alone_has_the_parser_the_full_one_holds_for_it(command: str) -> None:
    alone = _commands(build_parser(command))
    assert list(alone) == [command]
    assert alone[command].format_help() == FULL[command].format_help()
    assert alone[command].format_usage() == FULL[command].format_usage()


@pytest.mark.parametrize("word", [None, "no-such-command", "--version", "cmd_run", "_run"])
def test_a_word_that_names_no_command_gets_every_command(word: str | None) -> None:
    assert set(_commands(build_parser(word))) == set(FULL)


def test_an_unknown_command_still_lists_every_command(tmp_path: Path) -> None:
    done = soakgate("no-such-command", cwd=tmp_path)
    assert done.returncode == 2
    line = one_error_line(done)
    assert "invalid choice: 'no-such-command'" in line
    assert all(repr(name) in line for name in FULL), line


@pytest.mark.parametrize(("argv", "loaded"), [
    (["run", "--help"], {"soakgate.cli.cmd_run"}),
    (["mock-server", "--help"], {"soakgate.cli.cmd_mock_server"}),
    (["--help"], {f"soakgate.cli.cmd_{name.replace('-', '_')}" for name in FULL}),
])  # fmt: skip
def test_the_command_line_loads_only_the_command_it_runs(
    argv: list[str], loaded: set[str], tmp_path: Path
) -> None:
    # in a process of its own: this one has built the full parser
    done = soakgate_listing_modules(*argv, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert {m for m in loaded_modules(done) if m.startswith("soakgate.cli.cmd_")} == loaded
