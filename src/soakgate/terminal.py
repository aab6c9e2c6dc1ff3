"""Where text reaches a terminal: the one rule for it (a leaf: imports nothing of soakgate).

Every string soakgate prints may come from a user (a label, a target's name), a server (a model
name, generated text) or a database, so it is shown as text: rich never reads it as markup
(`cfg[/tmp]`, `b31[graph]`) or emoji codes (`:thumbs_up:`), and control characters (an ANSI
escape, a carriage return, a bell, a bidirectional override) are written as escapes instead of
being sent to the terminal. Every rich console soakgate prints with is a `TextConsole`, and
plain text goes through `echo`; the other formats have their own one place (Markdown:
`report.tables.markdown_text`, HTML: jinja2's autoescape, CSV and JSON: their writers).
"""

from __future__ import annotations

import re
import sys
from typing import IO, Any

from rich.console import Console, HighlighterType, JustifyMethod, OverflowMethod
from rich.style import Style
from rich.text import Text

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""C0 and C1 controls but tab and newline, DEL, and the bidirectional marks and overrides."""


def printable(text: str) -> str:
    """`text` with every control character but newline and tab written as its escape
    (`\\x1b`, `\\u202e`), so nothing in it can move the cursor, recolour or reorder a line."""
    return _CONTROL.sub(lambda match: match.group().encode("unicode_escape").decode(), text)


def echo(text: str, file: IO[str] | None = None) -> None:
    """Print `text` as text (see `printable`) to stdout or `file`."""
    print(printable(text), file=file if file is not None else sys.stdout, flush=True)


class TextConsole(Console):
    """A rich console that shows every string as text: no markup, no emoji codes, no
    highlighting, control characters escaped. Table cells, titles and printed strings all
    pass through `render_str`, so this is the one place."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**kwargs, "markup": False, "emoji": False, "highlight": False})

    def render_str(
        self,
        text: str,
        *,
        style: str | Style = "",
        justify: JustifyMethod | None = None,
        overflow: OverflowMethod | None = None,
        emoji: bool | None = None,
        markup: bool | None = None,
        highlight: bool | None = None,
        highlighter: HighlighterType | None = None,
    ) -> Text:
        """The string as plain text, whatever the caller asked for."""
        return super().render_str(
            printable(text), style=style, justify=justify, overflow=overflow, emoji=False,
            markup=False, highlight=False, highlighter=highlighter,
        )  # fmt: skip


def wide_console() -> TextConsole:
    """A console for tables on stdout: 120 columns when output is not a terminal, so nothing
    is cut."""
    console = TextConsole()
    return console if console.is_terminal else TextConsole(width=120)
