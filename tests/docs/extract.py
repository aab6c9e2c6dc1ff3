"""The commands README.md and docs/*.md show, as a reader would copy them.

A command is a shell line in a code block (fenced or indented; continuation lines joined,
trailing `# comments` dropped) that starts with a program a reader runs (soakgate, python,
pip, bash, a script, ...), a `run:` step of a YAML snippet, or an inline code span that starts
with one. Output samples, TOML and diffs are not commands. Parsing is markdown-it-py's (rich's
own dependency): code blocks are found exactly as a Markdown renderer finds them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = ("README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")))
PROGRAMS = ("soakgate", "python", "python3", "pip", "bash", "export", "mkdir", "curl", "kill", "cp")
"""First words of a command line (after `VAR=value` assignments); `scripts/...` too."""
NOT_COMMANDS = ("toml", "diff", "json", "text")
"""Fence languages that hold data, not commands."""
_ASSIGNMENT = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S+\s+)*")


@dataclass(frozen=True, slots=True)
class Command:
    """One documented command and where it is shown."""

    text: str
    """The command, whitespace collapsed, without its trailing comment."""
    where: str
    """`FILE:LINE` of the block or paragraph."""


def _is_command(line: str) -> bool:
    word = _ASSIGNMENT.sub("", line).split(" ", 1)[0]
    return word in PROGRAMS or word.startswith("scripts/")


def _strip_comment(line: str) -> str:
    """The line without a trailing ` # comment` (a `#` outside quotes, after whitespace)."""
    quote = ""
    for index, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
    return line


def _logical_lines(block: str) -> Iterator[str]:
    """Lines of a code block with backslash continuations joined."""
    pending = ""
    for raw in block.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def _normalise(text: str) -> str:
    return " ".join(_strip_comment(text).split())


def commands_in(document: str) -> list[Command]:
    """Every command a document shows, in order."""
    tokens = MarkdownIt("commonmark").parse((REPO / document).read_text(encoding="utf-8"))
    found: list[Command] = []
    for token in tokens:
        where = f"{document}:{(token.map or [0])[0] + 1}"
        if token.type in ("fence", "code_block"):
            language = token.info.strip().split(" ")[0]
            if language in NOT_COMMANDS:
                continue
            for line in _logical_lines(token.content):
                text = line.strip()
                if language == "yaml":
                    match = re.match(r"-?\s*run:\s*(.+)", text)
                    text = match.group(1) if match else ""
                text = _normalise(text)
                if text and _is_command(text):
                    found.append(Command(text, where))
        elif token.type == "inline":
            for child in token.children or []:
                text = _normalise(child.content)
                if child.type == "code_inline" and " " in text and _is_command(text):
                    found.append(Command(text, where))
    return found


def documented_commands() -> list[Command]:
    """Every command of README.md and docs/*.md."""
    return [command for document in DOCUMENTS for command in commands_in(document)]
