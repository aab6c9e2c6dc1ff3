"""What `--resume` continues with: the stored run's request and load settings, never new ones.

A resumed run whose rows were made under other settings (16 tokens instead of 128, greedy
instead of sampled) would mix two experiments under one configuration record. So the settings
stored with the run are taken, and a setting given explicitly on the command line that differs
from the stored one is refused by name. Pure functions over the stored record and the config.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from soakgate.detectors import DetectorConfig
from soakgate.errors import UsageError
from soakgate.prompts import Prompt
from soakgate.records import Event, Run


def prompts_digest(prompts: Sequence[Prompt]) -> str:
    """SHA-256 of a prompt set (ids, texts, system messages, structures, in order; a prompt
    without a structure as before structures existed)."""
    canonical = json.dumps(
        [[p.prompt_id, p.text, p.system, *_structure(p)] for p in prompts], ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _structure(prompt: Prompt) -> list[str]:
    s = prompt.structure
    return [] if s is None else [s.kind, s.spec, s.tool_choice]


@dataclass(frozen=True, slots=True)
class Setting:
    """One resumable setting: its flag, where the run record keeps it, where the config does."""

    flag: str
    """The command-line flag, as the user types it."""
    stored: Callable[[Run], Any]
    """Its value in the stored run (KeyError: the record predates it)."""
    current: Callable[[Any], Any]
    """Its value in a SoakConfig."""


def _load(key: str) -> Callable[[Run], Any]:
    return lambda run: run.load[key]


SETTINGS: dict[str, Setting] = {
    "endpoint": Setting("--endpoint", _load("endpoint"), lambda c: c.request.endpoint),
    "stream": Setting("--no-stream", _load("stream"), lambda c: c.request.stream),
    "max_tokens": Setting("--max-tokens", _load("max_tokens"), lambda c: c.request.max_tokens),
    "temperature": Setting("--temperature", _load("temperature"), lambda c: c.request.temperature),
    "top_p": Setting("--top-p", _load("top_p"), lambda c: c.request.top_p),
    "seed": Setting("--seed", _load("sampling_seed"), lambda c: c.request.seed),
    "ignore_eos": Setting("--ignore-eos", _load("ignore_eos"), lambda c: c.request.ignore_eos),
    "logprobs": Setting("--logprobs", _load("logprobs"), lambda c: c.request.logprobs),
    "token_ids": Setting(
        "--token-ids", _load("return_token_ids"), lambda c: c.request.return_token_ids
    ),
    "timeout": Setting("--timeout", _load("timeout_s"), lambda c: c.request.timeout_s),
    "concurrency": Setting("--concurrency", _load("concurrency"), lambda c: c.load.concurrency),
    "requests": Setting("--requests", _load("requests_per_target"), lambda c: c.load.requests),
    "duration": Setting("--duration", _load("duration_s"), lambda c: c.load.duration_s),
    "rate": Setting("--rate", _load("rate"), lambda c: c.load.rate),
    "arrivals": Setting(
        "--arrivals", _load("arrivals"), lambda c: c.load.arrivals if c.load.rate else None
    ),
    "ramp": Setting("--ramp", _load("ramp_s"), lambda c: c.load.ramp_s),
    "prompt_order": Setting("--prompt-order", _load("prompt_order"), lambda c: c.prompt_order),
    "prompt_seed": Setting("--prompt-seed", _load("seed"), lambda c: c.seed),
    "store_text": Setting("--store-text", _load("store_text"), lambda c: c.store_text),
    "char_run_threshold": Setting(
        "--char-run-threshold",
        lambda run: run.detectors["char_run_threshold"],
        lambda c: c.detectors.char_run_threshold,
    ),
}
"""Keyed by the argparse dest of each flag."""


def _shown(value: Any) -> str:
    return "(none)" if value is None else str(value)


def check_resumable(run: Run, generations: int) -> None:
    """A UsageError for a run that has nothing left to continue."""
    if run.status == "completed":
        ended = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.ended_at or run.started_at))
        raise UsageError(
            f"run {run.run_id} already completed ({generations} generations, ended {ended}); "
            "nothing to resume: start a new run instead"
        )


def settings_conflicts(run: Run, config: Any, explicit: Collection[str]) -> list[str]:
    """One line per explicitly given setting that differs from the stored run."""
    conflicts = []
    for dest, setting in SETTINGS.items():
        if dest not in explicit:
            continue
        try:
            stored = setting.stored(run)
        except KeyError:
            continue  # recorded by no older soakgate: the explicit value is taken
        given = setting.current(config)
        if given != stored:
            conflicts.append(f"{setting.flag} {_shown(given)} (stored: {_shown(stored)})")
    return conflicts


def apply_stored_settings(run: Run, config: Any, elapsed_s: float) -> None:
    """Replace the config's request, load, prompt-order and detector settings with the stored
    ones; a stored duration becomes what is left of it after `elapsed_s` of soaking."""
    load, request = run.load, config.request
    fields = {f.name for f in dataclasses.fields(request)} - {"extra"}
    stored_request = {k: load[k] for k in fields if k in load}
    if "sampling_seed" in load:
        stored_request["seed"] = load["sampling_seed"]
    else:
        stored_request.pop("seed", None)  # an older record: "seed" there is the prompt seed
    config.request = dataclasses.replace(request, **stored_request)
    total = load.get("duration_s", config.load.duration_s)
    duration = None if total is None else total - elapsed_s
    if duration is not None and duration <= 0:
        raise UsageError(
            f"run {run.run_id} already soaked its whole --duration ({total:g} s); "
            "nothing to resume: start a new run instead"
        )
    config.load = dataclasses.replace(
        config.load,
        concurrency=load.get("concurrency", config.load.concurrency),
        requests=load.get("requests_per_target", config.load.requests),
        duration_s=duration,
        rate=load.get("rate", config.load.rate),
        arrivals=load.get("arrivals") or config.load.arrivals,
        ramp_s=load.get("ramp_s", config.load.ramp_s),
    )
    config.prompt_order = load.get("prompt_order", config.prompt_order)
    config.seed = load.get("seed", config.seed)
    config.store_text = load.get("store_text", config.store_text)
    if run.detectors:
        config.detectors = DetectorConfig.of_run(run.detectors)


def check_prompts(run: Run, prompts: Sequence[Prompt]) -> None:
    """The prompt set must be the stored one (prompts are not stored: a run soaked from a file
    is resumed with the same file)."""
    stored_count = run.load.get("prompts")
    stored_digest = run.load.get("prompts_sha256")
    same = (
        prompts_digest(prompts) == stored_digest
        if stored_digest is not None
        else stored_count is None or stored_count == len(prompts)
    )
    if not same:
        raise UsageError(
            f"run {run.run_id} was soaked with another prompt set ({stored_count} prompts, "
            f"not these {len(prompts)}); give the --prompts FILE it was soaked with"
        )


def soaked_seconds(run: Run, events: Sequence[Event], ended_at: Iterable[float]) -> float:
    """How long the run has soaked so far: the sum of its segments (its start, then each
    `resumed`), each up to its `ended` event or, for a segment that was killed, its last row."""
    starts = sorted([run.started_at, *(e.at for e in events if e.kind == "resumed")])
    last = list(starts)

    def see(at: float) -> None:
        index = bisect.bisect_right(starts, at) - 1
        if index >= 0 and at > last[index]:
            last[index] = at

    ends = [e.at for e in events if e.kind == "ended"]
    for at in ends:
        see(at)
    if len(ends) < len(starts):  # a segment was killed (no `ended`): its rows say how long
        for at in ended_at:
            see(at)
    return sum(end - start for start, end in zip(starts, last, strict=True))
