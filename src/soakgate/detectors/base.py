"""The detector registry, its configuration and the function that applies it to a generation."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from soakgate.errors import UsageError


class Detection(NamedTuple):
    """One detector's verdict on one generation (a named tuple: built for every detector on
    every response, at a third of a frozen dataclass's cost)."""

    score: float
    """The detector's measurement (e.g. the longest run length)."""
    flagged: bool
    """True when the score crosses the detector's threshold."""
    evidence: dict[str, Any]
    """What the verdict rests on (e.g. the repeated character and where the run starts)."""


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    """Thresholds of the default detectors; stored with every run so analysis knows what applied."""

    char_run_threshold: int = 80
    """Flag a run of one non-whitespace character at least this long."""
    whitespace_run_threshold: int = 400
    """Flag a run of one whitespace character at least this long (indentation is normal)."""
    separator_run_threshold: int = 160
    """Flag a run of a separator character (`-=_*#~.` and box drawing) at least this long."""
    token_run_threshold: int = 64
    """Flag a run of one repeated token id at least this long."""
    token0_run_threshold: int = 16
    """Flag a run of token id 0 (the classic compiled-graph collapse) at least this long."""
    loop_min_words: int = 64
    """Flag a repeated-phrase loop that covers at least this many words."""
    loop_min_repeats: int = 8
    """... and repeats its phrase at least this many times."""
    loop_max_period: int = 8
    """Longest phrase (in words) a loop may have."""
    empty_min_tokens: int = 4
    """Flag a blank text when the server reported at least this many tokens (1 is a bare EOS)."""
    enabled: tuple[str, ...] = ("char_run", "token_run", "word_loop", "empty")
    """Names of the detectors to apply."""

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form for the run record."""
        data = asdict(self)
        data["enabled"] = list(self.enabled)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DetectorConfig:
        """Inverse of to_dict; unknown keys are a usage error."""
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise UsageError(f"unknown detector setting(s): {', '.join(sorted(unknown))}")
        values = dict(data)
        if "enabled" in values:
            values["enabled"] = tuple(values["enabled"])
        return cls(**values)


DetectorFn = Callable[[str, Sequence[int] | None, int | None, DetectorConfig], Detection]
REGISTRY: dict[str, DetectorFn] = {}


def register(name: str) -> Callable[[DetectorFn], DetectorFn]:
    """Decorator that adds a detector function to the registry under `name`."""

    def add(fn: DetectorFn) -> DetectorFn:
        if name in REGISTRY:
            raise ValueError(f"detector {name!r} registered twice")
        REGISTRY[name] = fn
        return fn

    return add


DEFAULT_DETECTORS = DetectorConfig().enabled


def score_text(
    text: str,
    token_ids: Sequence[int] | None,
    completion_tokens: int | None,
    config: DetectorConfig,
) -> dict[str, Detection]:
    """Apply every enabled detector to one generation."""
    return {
        name: fn(text, token_ids, completion_tokens, config)
        for name, fn in _resolve(config.enabled)
    }


@functools.lru_cache(maxsize=64)
def _resolve(enabled: tuple[str, ...]) -> tuple[tuple[str, DetectorFn], ...]:
    """The registered function of each enabled detector, looked up once per configuration."""
    unknown = [name for name in enabled if name not in REGISTRY]
    if unknown:
        raise UsageError(f"unknown detector {unknown[0]!r}; known: {', '.join(sorted(REGISTRY))}")
    return tuple((name, REGISTRY[name]) for name in enabled)
