"""Ordinary generations that must never be flagged: tables, code, rules, `!!!` in prose, ..."""

from __future__ import annotations

TABLE = (
    "| Option | Default | Meaning |\n"
    "|" + "-" * 60 + "|" + "-" * 40 + "|" + "-" * 70 + "|\n"
    "| `--dtype` | auto | weights and activations |\n"
    "| `--max-model-len` | 2048 | context length |\n"
)

WIDE_TABLE = "| " + " | ".join(f"c{i}" for i in range(30)) + " |\n|" + "---|" * 30 + "\n"

CODE = (
    '''
class Cache:
    """An LRU cache."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: dict[str, bytes] = {}

    def get(self, key: str) -> bytes | None:
        if key in self.items:
            value = self.items.pop(key)
            self.items[key] = value
            return value
        return None
'''
    + "\n".join(" " * (4 * depth) + f"if x{depth}:" for depth in range(12))
    + "\n"
)

DEEP_INDENT = "\n".join(" " * 64 + f"call_{i}(argument_{i})" for i in range(20))

MARKDOWN_RULES = (
    "Section one\n"
    + "=" * 79
    + "\n\nText.\n\n"
    + "-" * 79
    + "\n\n"
    + "*" * 40
    + "\n"
    + "#" * 78
    + "\n# Header block of a shell script\n"
    + "#" * 78
    + "\n"
)

BANGS_IN_PROSE = (
    "It works!!! After three days of debugging, the cache finally returned the right value!!!! "
    "Amazing!!!!!!!!!! Never again!!!!!!!!!!!!!!!!!!!!"
)

BOX_DRAWING = "┌" + "─" * 100 + "┐\n│ report │\n└" + "─" * 100 + "┘\n"

LEADER_DOTS = "\n".join(f"Chapter {i} " + "." * 70 + f" {i * 10}" for i in range(1, 10))

ZEROS_LIST = "weights = [" + ", ".join(["0.0"] * 40) + "]\n"

ELLIPSIS = "Hmm" + "." * 30 + " let me think about that" + "?" * 12

URLS = " ".join(f"https://example.org/a/b/c/{i}?q={'x' * 20}" for i in range(10))

BASE64 = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=" * 8

REPEATED_LINES = "\n".join(f"assert f({i}) == {i * i}" for i in range(40))

CSV = "id,name,value\n" + "\n".join(f"{i},item{i},{i * 3.5}" for i in range(50))

LOREM_CHAT = (
    "Sure! Here is a summary:\n\n1. SQLite's WAL lets readers proceed during writes.\n"
    "2. Checkpoints move pages back into the database.\n3. `PRAGMA synchronous=NORMAL` is "
    "durable against application crashes in WAL mode.\n\nLet me know if you need more detail!"
)

CHORUS = "Row, row, row your boat,\ngently down the stream.\n" * 4

CORPUS: dict[str, str] = {
    "table": TABLE, "wide_table": WIDE_TABLE, "code": CODE, "deep_indent": DEEP_INDENT,
    "markdown_rules": MARKDOWN_RULES, "bangs_in_prose": BANGS_IN_PROSE,
    "box_drawing": BOX_DRAWING, "leader_dots": LEADER_DOTS, "zeros_list": ZEROS_LIST,
    "ellipsis": ELLIPSIS, "urls": URLS, "base64": BASE64, "repeated_lines": REPEATED_LINES,
    "csv": CSV, "chat": LOREM_CHAT, "chorus": CHORUS, "empty_after_eos": "",
}  # fmt: skip
