"""Entry point of the `soakgate` command: discovers `cmd_*` modules and maps errors to exit codes.

Each command module exposes `register(subparsers)`, which adds one subparser and sets
`func(args) -> int`. Heavy imports belong inside `func`, so `soakgate --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sqlite3
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from soakgate import __version__, secrets
from soakgate.cli import exits
from soakgate.errors import SoakgateError


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Help that shows every meaningful default (not None, False, an empty list, or a switch's
    implied value) and keeps hand-made line breaks in descriptions."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "%(default)" in text or action.default in (None, False, [], argparse.SUPPRESS):
            return text
        if action.nargs == 0:  # a switch (store_true/false): its help says what it changes
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line and exit 2, with no usage dump; its help shows
    every default; options are spelled out in full."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("formatter_class") in (None, argparse.RawDescriptionHelpFormatter):
            kwargs["formatter_class"] = HelpFormatter
        # No abbreviations: in a script, `--requests` silently meant `--requests-per-level` in
        # `sweep`, and an abbreviation changes meaning when a later version adds a flag.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(exits.FAILED, f"{self.prog}: error: {message}\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every discovered command registered; given `command` (the first word of
    a command line), only the module of that name (`cmd_<command>`, dashes as underscores) when
    it registers that command, since building every command's arguments costs a start-up ~10 ms
    (BENCHMARKS.md §20). A word that names no command gets the full parser, whose error lists
    them all."""
    parser = _Parser(
        prog="soakgate",
        description="Find silent output corruption in LLM inference servers.",
        epilog="Run `soakgate demo` for a 30 s tour; `soakgate COMMAND --help` for details.",
    )
    parser.add_argument("--version", action="version", version=f"soakgate {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    package = importlib.import_module("soakgate.cli")
    names = sorted(i.name for i in pkgutil.iter_modules(package.__path__) if i.name[:4] == "cmd_")
    alone = f"cmd_{command.replace('-', '_')}" if command else None
    if alone in names:
        importlib.import_module(f"soakgate.cli.{alone}").register(subparsers)
        if command in subparsers.choices:
            return parser
        names.remove(alone)  # registered, under another name: the rest join it
    for name in names:
        importlib.import_module(f"soakgate.cli.{name}").register(subparsers)
    return parser


def _negative_values_attached(argv: Sequence[str]) -> list[str]:
    """`--option -5s` as `--option=-5s`: argparse reads a value that starts with a dash and is
    not a plain number as another option, and says only "expected one argument"; attached, the
    option's own check says what is wrong with the value."""
    attached: list[str] = []
    for token in argv:
        previous = attached[-1] if attached else ""
        if token[:2].startswith("-") and token[1:2].isdigit() and previous.startswith("--") \
                and "=" not in previous:  # fmt: skip
            attached[-1] = f"{previous}={token}"
        else:
            attached.append(token)
    return attached


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit code: 0 done, 1 a finding, 2 could not do its job,
    130 interrupted (`soakgate.cli.exits`)."""
    words = _negative_values_attached(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words and not words[0].startswith("-") else None)
    args = parser.parse_args(words)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return exits.FAILED
    try:
        code: int = args.func(args)
        sys.stdout.flush()
    except SoakgateError as exc:
        from soakgate.terminal import echo

        echo(f"soakgate: error: {secrets.redact(str(exc))}", sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        print("soakgate: interrupted", file=sys.stderr)
        code = exits.INTERRUPTED
    except BrokenPipeError:
        # The reader closed the pipe (`| head`): a quiet end, not an error. Point stdout at
        # /dev/null so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = exits.OK
    except sqlite3.DatabaseError as exc:  # a safety net: stores translate their own errors
        from soakgate.terminal import echo

        echo(f"soakgate: error: database error: {secrets.redact(str(exc))}", sys.stderr)
        code = exits.FAILED
    except Exception:  # a bug: keep the traceback for the report, but never exit 1 (a finding)
        traceback.print_exc()
        print("soakgate: internal error (a bug in soakgate; please report it)", file=sys.stderr)
        code = exits.FAILED
    _exit_now_if_a_database_was_abandoned(code)
    return code


def _exit_now_if_a_database_was_abandoned(code: int) -> None:
    """A database whose files became immutable mid-run must never be closed (SQLite would
    write through its memory map and the kernel would kill the process with SIGBUS, exit 135,
    hiding the one-line error): end the process here, without running finalizers."""
    store = sys.modules.get("soakgate.store.sqlite")
    if store is not None and store.ABANDONED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
