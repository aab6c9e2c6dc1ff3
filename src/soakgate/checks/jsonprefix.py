"""Can a text the budget cut still be completed to a JSON document (RFC 8259)?

A pushdown recognizer over characters: None when some continuation makes the text one strict
JSON document, else where and why none can. Written by hand: the libraries that read partial
JSON are lenient where this must be strict (jiter's partial mode reads `[1 2]` as `[1]` and
`{"a": 4.5.1}` as `{"a": 4.5}`), or cannot tell a literal the cut left unfinished (`tru`) from a
wrong one (yajl, through ijson, calls both a lexical error).
"""

from __future__ import annotations

import json

import regex

_NUMBER = regex.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LITERALS = ("true", "false", "null")
_WHITESPACE = " \t\n\r"
_ESCAPES = '"\\/bfnrt'
_HEX = "0123456789abcdefABCDEF"

# what the recognizer expects next, outside a string, number or literal
_VALUE, _VALUE_OR_END, _KEY, _KEY_OR_END, _COLON, _AFTER, _DONE = range(7)


def prefix_error(text: str, keys: list[str] | None = None) -> str | None:
    """None when `text` can be completed to one JSON document, else why not (and where);
    `keys`, when given, receives the keys the top-level object has whole (followed by ':')."""
    stack: list[str] = []
    pending: str | None = None
    state = _VALUE
    n, size = 0, len(text)
    while n < size:
        char = text[n]
        if char in _WHITESPACE:
            n += 1
            continue
        if state == _DONE:
            return f"text after the document at {n}"
        if state == _COLON:
            if char != ":":
                return f"expected ':' at {n}"
            if keys is not None and pending is not None:
                keys.append(json.loads(pending))
            state, n = _VALUE, n + 1
            continue
        if state == _AFTER:
            if char == ",":
                state = _KEY if stack[-1] == "{" else _VALUE
            elif char == ("}" if stack[-1] == "{" else "]"):
                stack.pop()
                state = _AFTER if stack else _DONE
            else:
                return f"expected ',' or a closing bracket at {n}"
            n += 1
            continue
        if state in (_KEY, _KEY_OR_END):
            if char == "}" and state == _KEY_OR_END:
                stack.pop()
                state, n = (_AFTER if stack else _DONE), n + 1
                continue
            if char != '"':
                return f"expected a key at {n}"
            end, error = _string(text, n)
            if error is not None:
                return error
            pending = text[n:end] if len(stack) == 1 else None  # a whole key of the top object
            state, n = _COLON, end
            continue
        # a value (or, after '[', the array's end)
        if char == "]" and state == _VALUE_OR_END:
            stack.pop()
            state, n = (_AFTER if stack else _DONE), n + 1
            continue
        if char in "{[":
            stack.append(char)
            state, n = (_KEY_OR_END if char == "{" else _VALUE_OR_END), n + 1
            continue
        if char == '"':
            end, error = _string(text, n)
        elif char == "-" or char.isdigit():
            end, error = _number(text, n)
        elif char in "tfn":
            end, error = _literal(text, n)
        else:
            return f"not a JSON value at {n}"
        if error is not None:
            return error
        state, n = (_AFTER if stack else _DONE), end
    return None


def _string(text: str, start: int) -> tuple[int, str | None]:
    """The end of the string opening at `start` (past the text when the cut is inside it)."""
    n, size = start + 1, len(text)
    while n < size:
        char = text[n]
        if char == '"':
            return n + 1, None
        if char < " ":
            return n, f"a control character inside a string at {n}"
        if char == "\\":
            if n + 1 >= size:
                return size, None
            escape = text[n + 1]
            if escape == "u":
                digits = text[n + 2 : n + 6]
                if any(d not in _HEX for d in digits):
                    return n, f"a bad \\u escape at {n}"
                n += 6
                continue
            if escape not in _ESCAPES:
                return n, f"a bad escape at {n}"
            n += 2
            continue
        n += 1
    return size, None


def _token(text: str, start: int) -> tuple[int, str]:
    """The run of characters from `start` up to the next delimiter."""
    n = start
    while n < len(text) and text[n] not in _WHITESPACE and text[n] not in ",]}:":
        n += 1
    return n, text[start:n]


def _number(text: str, start: int) -> tuple[int, str | None]:
    end, token = _token(text, start)
    cut = end == len(text)  # the cut may be inside the number: a prefix of one will do
    return end, None if _NUMBER.fullmatch(token, partial=cut) else f"not a number at {start}"


def _literal(text: str, start: int) -> tuple[int, str | None]:
    end, token = _token(text, start)
    if end == len(text):
        known = any(word.startswith(token) for word in _LITERALS)
    else:
        known = token in _LITERALS
    return end, None if known else f"not a JSON value at {start}"
