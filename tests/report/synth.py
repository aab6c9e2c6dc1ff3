"""Synthetic soak data written through the real store API (known rates, bursts, texts)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from soakgate.records import Event, Generation, Run
from soakgate.store.base import Store

COLLAPSED_TEXT = "The answer is " + "!" * 120
CLEAN_TEXT = "def add(a, b):\n    return a + b\n"


def bernoulli(n: int, rate: float, seed: int) -> list[bool]:
    """Independent failures at `rate`."""
    return list(np.random.default_rng(seed).random(n) < rate)


def bursty(
    n: int, seed: int, enter: float = 0.002, leave: float = 0.05, inside: float = 0.5
) -> list[bool]:
    """Failures from a two-state (clean/burst) Markov chain: they come in clusters."""
    rng = np.random.default_rng(seed)
    state, out = False, []
    for u, v in zip(rng.random(n), rng.random(n), strict=True):
        state = (u >= leave) if state else (u < enter)
        out.append(bool(state and v < inside))
    return out


def add_run(
    store: Store,
    label: str,
    target: str,
    collapses: Sequence[bool],
    *,
    run_id: str | None = None,
    start: float = 1_700_000_000.0,
    step_s: float = 0.05,
    errors: dict[int, str] | None = None,
    texts: dict[int, str] | None = None,
    events: Sequence[Event] = (),
    requests_asked: int | None = None,
    pause_at: int | None = None,
    pause_s: float = 0.0,
    latency_s: float = 0.5,
    load: dict[str, object] | None = None,
    divergence: dict[int, int] | None = None,
    campaign: str | None = None,
    flagged_by: dict[int, str] | None = None,
    incarnations: Sequence[int] | None = None,
) -> Run:
    """Store one run on one target: generation i collapses when collapses[i] (unless errored)."""
    run_id = run_id or f"{label}-{target}-{int(start)}"
    load = {"requests_per_target": requests_asked, **(load or {})}
    run = Run(run_id, label, [target], start, load=load, campaign=campaign,
              status="completed", ended_at=start + len(collapses) * step_s + pause_s)  # fmt: skip
    store.save_run(run)
    rows, errors, texts = [], errors or {}, texts or {}
    for i, bad in enumerate(collapses):
        at = start + i * step_s + (pause_s if pause_at is not None and i >= pause_at else 0.0)
        error = errors.get(i)
        text = texts.get(i, COLLAPSED_TEXT if bad else CLEAN_TEXT)
        rows.append(Generation(
            run_id=run_id, request_id=f"{run_id}-{i}", target=target, label=label, seq=i,
            prompt_id="p0", endpoint="completions", stream=True, started_at=at,
            ended_at=at + latency_s, completion_tokens=None if error else 32,
            error_class=error, text=None if error else text,
            flags=[(flagged_by or {}).get(i, "char_run")] if bad and not error else [],
            scores={"char_run": 120.0 if bad else 1.0},
            details={"char_run": {"char": "!"}} if bad and not error else {},
            reference_divergence=(divergence or {}).get(i),
            incarnation=incarnations[i] if incarnations is not None else 0,
        ))  # fmt: skip
    store.add(rows, events)
    return run
