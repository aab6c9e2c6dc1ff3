"""Typed reads from one TOML table with one-line errors, and a check that no key was misspelt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soakgate.durations import parse_duration
from soakgate.errors import ConfigError

_MISSING = object()


class Table:
    """A TOML table being read; `done()` rejects the keys nobody asked for (typos)."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"{where} must be a table")
        self.data: dict[str, Any] = data
        self.where = where
        self._seen: set[str] = set()

    def _get(self, key: str, default: Any) -> Any:
        self._seen.add(key)
        value = self.data.get(key, _MISSING)
        if value is _MISSING:
            if default is None:
                raise ConfigError(f"{self.where}: {key} is required")
            return default
        return value

    def _fail(self, key: str, wanted: str, value: Any) -> ConfigError:
        return ConfigError(f"{self.where}: {key} must be {wanted}, not {value!r}")

    def text(self, key: str, default: str | None) -> str:
        """A string (default None: required)."""
        value = self._get(key, default)
        if not isinstance(value, str):
            raise self._fail(key, "a string", value)
        return value

    def optional_str(self, key: str) -> str | None:
        """A string or None when absent."""
        return None if self._absent(key) else self.text(key, "") or None

    def integer(self, key: str, default: int, minimum: int | None = None) -> int:
        """An integer, at least `minimum`."""
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(key, "a whole number", value)
        if minimum is not None and value < minimum:
            raise self._fail(key, f"at least {minimum}", value)
        return value

    def optional_int(self, key: str, minimum: int | None = None) -> int | None:
        """An integer or None when absent."""
        return None if self._absent(key) else self.integer(key, 0, minimum)

    def number(self, key: str, default: float) -> float:
        """A non-negative number."""
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise self._fail(key, "a number >= 0", value)
        return float(value)

    def optional_positive(self, key: str) -> float | None:
        """A number > 0, or None when absent."""
        if self._absent(key):
            return None
        value = self.number(key, 0.0)
        if value <= 0:
            raise self._fail(key, "a number > 0", value)
        return value

    def flag(self, key: str, default: bool) -> bool:
        """true or false."""
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value

    def duration(self, key: str, default: float, allow_zero: bool = False) -> float:
        """Seconds from a number or a string like `30s`, `5m`, `2h`."""
        value = self._get(key, default)
        if isinstance(value, int | float) and not isinstance(value, bool):
            if value > 0 or (allow_zero and value == 0):
                return float(value)
        elif isinstance(value, str) and (seconds := parse_duration(value)) is not None:
            return seconds
        raise self._fail(key, 'a duration like 30, "30s", "5m" or "2h"', value)

    def optional_duration(self, key: str) -> float | None:
        """A duration or None when absent."""
        return None if self._absent(key) else self.duration(key, 1.0)

    def optional_path(self, key: str, base: Path) -> Path | None:
        """An existing file path relative to `base`, or None when absent."""
        if self._absent(key):
            return None
        path = base / Path(self.text(key, None)).expanduser()
        if not path.is_file():
            raise ConfigError(f"{self.where}: {key} file {path} does not exist")
        return path

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        """One of `choices`."""
        value = self.text(key, default)
        if value not in choices:
            raise self._fail(key, " or ".join(choices), value)
        return value

    def env(self, key: str) -> dict[str, str]:
        """A table of environment variables (values converted to strings)."""
        value = self._get(key, {})
        if not isinstance(value, dict):
            raise self._fail(key, 'a table like {NAME = "value"}', value)
        return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}

    def table(self, key: str, required: bool = False) -> Table:
        """A sub-table (empty when absent and not required)."""
        return Table(self._get(key, None if required else {}), key)

    def items(self, key: str, required: bool = False, kind: type | None = None) -> list[Any]:
        """A list (of `kind` items when given)."""
        value = self._get(key, None if required else [])
        if not isinstance(value, list):
            raise self._fail(key, "a list", value)
        if kind is not None and not all(isinstance(v, kind) for v in value):
            raise self._fail(key, f"a list of {kind.__name__} items", value)
        return value

    def _absent(self, key: str) -> bool:
        """True when an optional key is absent (it counts as read either way)."""
        self._seen.add(key)
        return key not in self.data

    def done(self) -> None:
        """Raise on keys that were never read (misspelt or unsupported)."""
        unknown = sorted(set(self.data) - self._seen)
        if unknown:
            raise ConfigError(f"{self.where}: unknown key(s) {', '.join(unknown)}")
