"""Speculative-decoding watch: scrape Prometheus metrics during a soak, track acceptance.

A real case: acceptance fell from 39% at batch 1 to 10% at concurrency 48, throughput fell
~7x, then the engine died. The watch records acceptance and token throughput per interval
and flags a collapse of either relative to the best seen earlier in the run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from soakgate.secrets import mask_url
from soakgate.targets import fetch, http1, parse
from soakgate.targets.pool import Pool

ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
DRAFTED = "vllm:spec_decode_num_draft_tokens"
GENERATED = "vllm:generation_tokens"


@dataclass(frozen=True, slots=True)
class Sample:
    """Counter values read at one moment."""

    at: float
    accepted: float
    drafted: float
    generated: float


@dataclass(frozen=True, slots=True)
class Window:
    """What happened between two samples."""

    start: float
    end: float
    acceptance: float | None
    """Accepted / drafted tokens in the window (None when nothing was drafted)."""
    tokens_per_s: float


def counters(text: str) -> dict[str, float]:
    """Sum of each counter family's samples (label sets such as model or engine are summed)."""
    from prometheus_client.parser import text_string_to_metric_families  # at the first scrape

    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            # The parser names a counter family with or without `_total` depending on # TYPE.
            name = family.name.removesuffix("_total")
            totals[name] = totals.get(name, 0.0) + float(sample.value)
    return totals


def sample_of(text: str, at: float) -> Sample | None:
    """The speculative-decoding counters, or None when the server exposes none."""
    values = counters(text)
    if ACCEPTED not in values or DRAFTED not in values:
        return None
    return Sample(at, values[ACCEPTED], values[DRAFTED], values.get(GENERATED, 0.0))


def window(previous: Sample, current: Sample) -> Window:
    """Acceptance and throughput between two samples."""
    drafted = current.drafted - previous.drafted
    seconds = max(current.at - previous.at, 1e-9)
    acceptance = (current.accepted - previous.accepted) / drafted if drafted > 0 else None
    tokens = (current.generated - previous.generated) / seconds
    return Window(previous.at, current.at, acceptance, tokens)


def collapse_reason(history: list[Window], latest: Window, ratio: float = 0.5) -> str | None:
    """Why `latest` falls below `ratio` of the best earlier window, or None."""
    accepted = [w.acceptance for w in history if w.acceptance is not None]
    if latest.acceptance is not None and accepted and latest.acceptance < ratio * max(accepted):
        return f"acceptance {latest.acceptance:.0%} < {ratio:.0%} of best {max(accepted):.0%}"
    speeds = [w.tokens_per_s for w in history if w.tokens_per_s > 0]
    if speeds and latest.tokens_per_s < ratio * max(speeds):
        return (
            f"throughput {latest.tokens_per_s:,.0f} tok/s < {ratio:.0%} of best {max(speeds):,.0f}"
        )
    return None


class SpecDecodeWatch:
    """The speculative-decoding observer of a metrics scrape: `spec_decode` windows, and one
    `spec_decode_collapse` when two consecutive windows fall below half of the best earlier one;
    `spec_decode_absent` (and nothing more) when the first scrape has no such counters."""

    def __init__(self, metrics_url: str, record: Callable[[str, dict[str, object]], None]) -> None:
        self._url = metrics_url
        self._record = record
        self._previous: Sample | None = None
        self._history: list[Window] = []
        self._low_before = False  # one low window can be a ramp or the drain; two in a row count
        self._in_episode = False

    def observe(self, current: Sample | None) -> bool:
        """Take one scrape's sample (None: failed or no counters); False once done watching."""
        previous, record = self._previous, self._record
        if current is None and previous is None:
            record("spec_decode_absent", {"url": mask_url(self._url)})
            return False
        if current is not None and previous is not None:
            latest = window(previous, current)
            reason = collapse_reason(self._history, latest)
            figures = {"acceptance": latest.acceptance, "tokens_per_s": latest.tokens_per_s}
            record("spec_decode", {**figures, "start": latest.start})
            if reason and self._low_before and not self._in_episode:
                record("spec_decode_collapse", {"reason": reason, "start": latest.start})
                self._in_episode = True  # one event per episode, until a window recovers
            self._in_episode = self._in_episode and reason is not None
            self._low_before = reason is not None
            self._history.append(latest)
        self._previous = current or previous
        return True


async def watch(
    pool: Pool,
    metrics_url: str,
    stop: asyncio.Event,
    record: Callable[[str, dict[str, object]], None],
    interval_s: float = 5.0,
    also: Sequence[Callable[[str | None, float], bool]] = (),
    path: str = "/metrics",
) -> None:
    """Scrape `path` below `pool`'s base URL (shown as `metrics_url`) until `stop` (or until no
    observer is left); the spec-decode watch sees every scrape, and so does each of `also`
    (other observers of the same page: `text` is None when the scrape failed; an observer
    returning False is not called again)."""
    spec: SpecDecodeWatch | None = SpecDecodeWatch(metrics_url, record)
    others = list(also)
    while not stop.is_set() and (spec is not None or others):
        text, at = await _scrape(pool, path)
        if spec is not None and not spec.observe(_sample(text, at)):
            spec = None
        others = [observer for observer in others if observer(text, at)]
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
        except TimeoutError:
            continue


def _sample(text: str | None, at: float) -> Sample | None:
    if text is None:
        return None
    try:
        return sample_of(text, at)
    except ValueError:  # not Prometheus text
        return None


async def _scrape(pool: Pool, path: str) -> tuple[str | None, float]:
    """One scrape: the page's text (None on any failure) and when it was read."""
    try:
        status, body = await fetch.get(pool, path, timeout_s=5)
    except (http1.HttpError, TimeoutError, OSError, parse.ResponseFormatError):
        return None, time.time()
    if status != 200:
        return None, time.time()
    return body.decode("utf-8", "replace"), time.time()
