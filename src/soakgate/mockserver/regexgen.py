"""Strings that fully match a regular expression, and strings that just fail to.

Written by hand over Python's own regex parser (`re._parser`, formerly `sre_parse`): no library
generates matching strings for Python's dialect. Lookarounds, backreferences and conditionals
have no generator here; `compile_pattern` refuses them (the mock answers HTTP 400).
"""

from __future__ import annotations

import random
import re
import re._constants as sre
import re._parser as sre_parse
import string
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

REPEAT_EXTRA = 3
"""A repeat is drawn between its minimum and this many more (unbounded repeats included)."""
ATTEMPTS = 8
"""Draws tried before an answer that misses the pattern (a `\\b`, a set's corner) is given up."""

_ASCII = string.ascii_letters + string.digits
_CATEGORY_CHARS = {
    sre.CATEGORY_DIGIT: string.digits,
    sre.CATEGORY_NOT_DIGIT: string.ascii_letters + " -",
    sre.CATEGORY_SPACE: " ",
    sre.CATEGORY_NOT_SPACE: _ASCII,
    sre.CATEGORY_WORD: _ASCII + "_",
    sre.CATEGORY_NOT_WORD: " -.,",
    sre.CATEGORY_LINEBREAK: "\n",
    sre.CATEGORY_NOT_LINEBREAK: _ASCII,
}
_PRINTABLE = _ASCII + " _-.,:;/@#"
_SUPPORTED = {
    sre.LITERAL, sre.NOT_LITERAL, sre.IN, sre.ANY, sre.MAX_REPEAT, sre.MIN_REPEAT,
    sre.POSSESSIVE_REPEAT, sre.BRANCH, sre.SUBPATTERN, sre.ATOMIC_GROUP, sre.CATEGORY, sre.AT,
}  # fmt: skip
_NAMES = {
    sre.ASSERT: "lookahead/lookbehind",
    sre.ASSERT_NOT: "negative lookahead/lookbehind",
    sre.GROUPREF: "backreference",
    sre.GROUPREF_EXISTS: "conditional group",
}


class UnsupportedPattern(ValueError):
    """A pattern the generator cannot produce strings for (or one that does not compile)."""


@dataclass(frozen=True, slots=True)
class Pattern:
    """A compiled pattern and its parse tree."""

    source: str
    compiled: re.Pattern[str]
    tree: Any
    """`re._parser.parse`'s SubPattern."""
    example: str = ""
    """One string that matches (found when compiled): the answer when every draw misses."""

    def matches(self, text: str) -> bool:
        """Whether `text` matches the whole pattern."""
        return self.compiled.fullmatch(text) is not None


@lru_cache(maxsize=256)
def compile_pattern(source: str) -> Pattern:
    """Parse and check a pattern once (cached: soaks send the same few patterns again and again);
    UnsupportedPattern says why it cannot be served."""
    try:
        compiled = re.compile(source)
        tree = sre_parse.parse(source, compiled.flags)
    except re.error as exc:
        raise UnsupportedPattern(f"invalid regex {source!r}: {exc}") from None
    _check_supported(tree)
    pattern = Pattern(source, compiled, tree)
    for seed in range(ATTEMPTS):
        example = generate(pattern, random.Random(seed))
        if pattern.matches(example):
            return Pattern(source, compiled, tree, example)
    raise UnsupportedPattern(f"the mock cannot generate a string matching {source!r}")


def _check_supported(items: Any) -> None:
    for op, value in items:
        if op not in _SUPPORTED:
            name = _NAMES.get(op, str(op).lower())
            raise UnsupportedPattern(f"regex construct not supported by the mock: {name}")
        for sub in _children(op, value):
            _check_supported(sub)


def _children(op: Any, value: Any) -> list[Any]:
    """The sub-patterns of one parsed item."""
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
        return [value[2]]
    if op is sre.SUBPATTERN:
        return [value[3]]
    if op is sre.ATOMIC_GROUP:
        return [value]
    if op is sre.BRANCH:
        return list(value[1])
    return []


def generate(pattern: Pattern, rng: random.Random) -> str:
    """A string drawn from the pattern (usually a full match: check with `matches`)."""
    out: list[str] = []
    _emit(pattern.tree, bool(pattern.compiled.flags & re.DOTALL), rng, out)
    return "".join(out)


def matching(pattern: Pattern, rng: random.Random) -> str:
    """A string that fully matches the pattern (the first of a few draws that does)."""
    for _ in range(ATTEMPTS):
        text = generate(pattern, rng)
        if pattern.matches(text):
            return text
    return pattern.example


def mismatching(pattern: Pattern, text: str, rng: random.Random) -> str | None:
    """`text` with one character changed or one appended so that it no longer fully matches;
    None when no such change is found (a pattern every string matches)."""
    edits = [(position, True) for position in range(len(text))] + [(len(text), False)]
    rng.shuffle(edits)
    for position, replace in edits[:32]:
        for char in [*rng.sample(_PRINTABLE, 6), "\n"]:
            changed = text[:position] + char + text[position + replace :]
            if changed != text and not pattern.matches(changed):
                return changed
    return None


def _emit(items: Any, dotall: bool, rng: random.Random, out: list[str]) -> None:
    for op, value in items:
        if op is sre.LITERAL:
            out.append(chr(value))
        elif op is sre.NOT_LITERAL:
            out.append(rng.choice([c for c in _PRINTABLE if ord(c) != value]))
        elif op is sre.ANY:
            out.append(rng.choice(_PRINTABLE if not dotall else _PRINTABLE + "\n"))
        elif op is sre.IN:
            out.append(_from_set(value, rng))
        elif op is sre.CATEGORY:
            out.append(rng.choice(_CATEGORY_CHARS[value]))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            least, most, sub = value
            most = least + REPEAT_EXTRA if most is sre.MAXREPEAT else min(most, least + 4)
            for _ in range(rng.randint(least, most)):
                _emit(sub, dotall, rng, out)
        elif op is sre.BRANCH:
            _emit(rng.choice(value[1]), dotall, rng, out)
        elif op is sre.SUBPATTERN:
            _emit(value[3], dotall or bool(value[1] & re.DOTALL), rng, out)
        elif op is sre.ATOMIC_GROUP:
            _emit(value, dotall, rng, out)
        # AT (anchors, \b): nothing to emit; a draw that breaks \b is retried by `matching`


def _from_set(items: list[tuple[Any, Any]], rng: random.Random) -> str:
    """One character of a character class `[...]`."""
    if items and items[0][0] is sre.NEGATE:
        allowed = [c for c in _PRINTABLE if not _in_set(items[1:], c)]
        return rng.choice(allowed or ["\x00"])
    op, value = rng.choice(items)
    if op is sre.LITERAL:
        return chr(value)
    if op is sre.RANGE:
        low, high = value
        printable_low, printable_high = max(low, 0x20), min(high, 0x7E)
        if printable_low <= printable_high:  # readable answers, and never a lone surrogate
            return chr(rng.randint(printable_low, printable_high))
        code = rng.randint(low, high)
        return chr(code if not 0xD800 <= code <= 0xDFFF else low)
    if op is sre.CATEGORY:
        return rng.choice(_CATEGORY_CHARS[value])
    raise UnsupportedPattern(f"character class item not supported by the mock: {op}")


def _in_set(items: list[tuple[Any, Any]], char: str) -> bool:
    code = ord(char)
    for op, value in items:
        if (op is sre.LITERAL and value == code) or (
            op is sre.RANGE and value[0] <= code <= value[1]
        ):
            return True
        if op is sre.CATEGORY and re.fullmatch(_CATEGORY_RE[value], char):
            return True
    return False


_CATEGORY_RE = {
    sre.CATEGORY_DIGIT: r"\d", sre.CATEGORY_NOT_DIGIT: r"\D", sre.CATEGORY_SPACE: r"\s",
    sre.CATEGORY_NOT_SPACE: r"\S", sre.CATEGORY_WORD: r"\w", sre.CATEGORY_NOT_WORD: r"\W",
    sre.CATEGORY_LINEBREAK: r"\n", sre.CATEGORY_NOT_LINEBREAK: r"[^\n]",
}  # fmt: skip
