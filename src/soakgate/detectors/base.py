"""The detector registry, its configuration and the function that applies it to a generation."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from soakgate.errors import UsageError

if TYPE_CHECKING:
    from soakgate.detectors.runs import CharRunSummary


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
    tail_fraction: float = 0.5
    """In an output cut by the token budget, flag a run or loop that reaches its end and covers
    at least this fraction of it (a degenerate model runs on to the budget)."""
    tail_min_run: int = 8
    """... a run of one ordinary character must also be at least this long,"""
    tail_min_words: int = 8
    """... and a loop must also cover at least this many words and repeat its phrase twice."""
    tail_separator_whole: float = 0.9
    """... and a run of an ASCII separator (`^`, `-`, `=`, `~`: tokenizers merge their runs,
    and rules and underlines end cut outputs) must also be at least this fraction of the cut
    output's text, surrounding whitespace aside: it fills (nearly) the whole output."""
    enabled: tuple[str, ...] = ("char_run", "token_run", "word_loop", "empty")
    """Names of the detectors to apply."""

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form for the run record."""
        data = asdict(self)
        data["enabled"] = list(self.enabled)
        return data

    @classmethod
    def of_run(cls, detectors: dict[str, Any]) -> DetectorConfig:
        """The detector settings of a run record, less what other stages keep beside them
        (`RUN_EXTRAS`: reference scoring's calibration, the crosstalk check's settings)."""
        return cls.from_dict({k: v for k, v in detectors.items() if k not in RUN_EXTRAS})

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


RUN_EXTRAS = frozenset({"reference", "crosstalk"})
"""Keys of a run's `detectors` that are not detector settings: reference scoring's calibration
(`load.scoring`) and the crosstalk check's settings (`checks.crosstalk`)."""


class Output(NamedTuple):
    """What a detector sees of one generation (a named tuple: one is built per response)."""

    text: str
    """The generated text."""
    token_ids: Sequence[int] | None
    """The generated token ids, when the server returned them."""
    completion_tokens: int | None
    """The number of tokens the server reported generating."""
    finish_reason: str | None = None
    """`length` when the token budget cut the output; `stop`, ... otherwise."""
    max_tokens: int | None = None
    """The request's token budget."""
    char_runs: CharRunSummary | None = None
    """`runs.char_runs(text, char_run_threshold)` when its batch measured it already
    (`runs.char_runs_many`); None: the detector measures it."""

    @property
    def budget_tokens(self) -> int | None:
        """Tokens of an output cut by its budget (None when not cut): the reported count, else
        the budget asked for."""
        if self.finish_reason != "length":
            return None
        return self.completion_tokens if self.completion_tokens is not None else self.max_tokens


DetectorFn = Callable[[Output, DetectorConfig], Detection]
NeedFn = Callable[[DetectorConfig], tuple[int, str]]
"""The least `--max-tokens` at which a detector does its job, and why (a short clause)."""
REGISTRY: dict[str, DetectorFn] = {}
NEEDS: dict[str, NeedFn] = {}


def register(name: str, needs: NeedFn | None = None) -> Callable[[DetectorFn], DetectorFn]:
    """Decorator that adds a detector function to the registry under `name`, with what token
    budget it needs (for the warning when a soak's budget is smaller)."""

    def add(fn: DetectorFn) -> DetectorFn:
        if name in REGISTRY:
            raise ValueError(f"detector {name!r} registered twice")
        REGISTRY[name] = fn
        if needs is not None:
            NEEDS[name] = needs
        return fn

    return add


DEFAULT_DETECTORS = DetectorConfig().enabled


def score_text(
    text: str,
    token_ids: Sequence[int] | None,
    completion_tokens: int | None,
    config: DetectorConfig,
    *,
    finish_reason: str | None = None,
    max_tokens: int | None = None,
    char_runs: CharRunSummary | None = None,
) -> dict[str, Detection]:
    """Apply every enabled detector to one generation (`char_runs`: see `Output.char_runs`)."""
    output = Output(text, token_ids, completion_tokens, finish_reason, max_tokens, char_runs)
    return {name: fn(output, config) for name, fn in _resolve(config.enabled)}


def budget_warning(config: DetectorConfig, max_tokens: int) -> str | None:
    """One line saying which enabled detectors need a larger token budget than `max_tokens`
    to do their job, and how large; None when the budget is enough for all of them."""
    short = []
    for name, _ in _resolve(config.enabled):
        if name in NEEDS:
            needed, purpose = NEEDS[name](config)
            if max_tokens < needed:
                short.append(f"{name} needs >= {needed} ({purpose})")
    if not short:
        return None
    return (
        f"--max-tokens {max_tokens} is below what the detectors need: {'; '.join(short)}; "
        "shorter collapses go unseen"
    )


@functools.lru_cache(maxsize=64)
def _resolve(enabled: tuple[str, ...]) -> tuple[tuple[str, DetectorFn], ...]:
    """The registered function of each enabled detector, looked up once per configuration."""
    unknown = [name for name in enabled if name not in REGISTRY]
    if unknown:
        raise UsageError(f"unknown detector {unknown[0]!r}; known: {', '.join(sorted(REGISTRY))}")
    return tuple((name, REGISTRY[name]) for name in enabled)
