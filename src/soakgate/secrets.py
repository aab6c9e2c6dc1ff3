"""Secrets never leave the process: API keys and URL credentials are redacted from everything
stored, printed, exported or reported.

A secret is registered where it enters, when a TargetSpec is made; the store's writer redacts
each row and event before it is written (so exports and reports, which read the store, never see
one), and the command line redacts its error messages. Credentials in a URL are masked wherever
a URL is written (`mask_url`, and a pattern over stored details); the secret values themselves
are replaced wherever they appear, down to a minimum length below which a value is too common to
replace in free text.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, urlsplit

REDACTED = "[redacted]"
MIN_FREE_TEXT_LENGTH = 6
"""Shorter secrets are masked inside URLs only: replacing `pw` everywhere would garble text."""
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s@]+@")
_SECRETS: set[str] = set()


def register(*values: str | None) -> None:
    """Remember secret values (API keys, URL user names and passwords) to redact."""
    for value in values:
        if value and len(value) >= MIN_FREE_TEXT_LENGTH:
            _SECRETS.add(value)


def register_url(url: str) -> None:
    """Remember the credentials of a URL (`http://user:password@host`), if it has any."""
    parts = urlsplit(url)
    for value in (parts.username, parts.password):
        if value:
            register(value, unquote(value))


def mask_url(url: str) -> str:
    """The URL with any credentials replaced (`http://***@host:8000`)."""
    return _URL_CREDENTIALS.sub(r"\1***@", url)


def active() -> bool:
    """True when some secret is registered (redaction costs nothing otherwise)."""
    return bool(_SECRETS)


def redact(text: str, urls: bool = True) -> str:
    """The text with every registered secret replaced, and (`urls`) URL credentials masked;
    generated text is redacted with `urls=False`, since a model may write `ssh://git@host`."""
    if urls and "@" in text:
        text = mask_url(text)
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact_json(value: Any, urls: bool = True) -> Any:
    """A JSON-like value with `redact` applied to every string in it (keys included)."""
    if isinstance(value, str):
        return redact(value, urls)
    if isinstance(value, dict):
        return {redact_json(k, urls): redact_json(v, urls) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_json(v, urls) for v in value]
    return value


def forget_all() -> None:
    """Drop every registered secret (for tests)."""
    _SECRETS.clear()
