"""Soak databases of any size, fast: what a multi-day soak of four units leaves behind.

Two labels (`eager`, `compiled`) on two targets each, one run per label, ten requests a second
per target (a 10M-generation database spans about three days), collapses from a clean/burst
process (bursts of collapses, `compiled` at twice `eager`'s rate), 0.2% failed requests, rows
scored by the real detectors' score and evidence shape, texts kept for 1% of the rows (every
collapse among them). Written through soakgate's own schema (`open_store`) and row codec
(`codec.generation_row`), in large transactions.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import numpy as np

from soakgate.records import Event, Generation, Run
from soakgate.store import codec, open_store

T0 = 1_750_000_000.0
UNITS = (("eager", "gpu0"), ("eager", "gpu1"), ("compiled", "gpu0"), ("compiled", "gpu1"))
RATE_PER_S = 10.0
CHUNK = 50_000
CLEAN_TEXT = " In entry host find user size record stop new model record were group? " * 3
COLLAPSED_TEXT = "The answer is " + "!" * 200
ERRORS = np.array(["timeout", "http_5xx", "connection_reset", "dropped"])


def bursty(rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    """Clean/burst sojourns (geometric; bursts of mean 40 requests collapsing half the time)
    with `rate` collapses per request overall."""
    burst_len, inside = 40.0, 0.5
    clean_len = burst_len * inside / rate - burst_len
    states = np.zeros(n, dtype=bool)
    at = 0
    lengths = rng.geometric(1 / np.array([clean_len, burst_len]), size=(n // 200 + 10, 2))
    for clean_run, burst_run in lengths:
        at += int(clean_run)
        if at >= n:
            break
        states[at : at + int(burst_run)] = True
        at += int(burst_run)
    return states & (rng.random(n) < inside)


def _details(collapsed: bool) -> dict[str, object]:
    char = {"char": "!", "length": 200, "start": 14, "class": "other"} if collapsed else {
        "char": "l", "length": 2, "start": 112}  # fmt: skip
    return {"char_run": char, "token_run": {"available": False}, "empty": {"reported_tokens": 64}}


def _unit_rows(
    run: Run, target: str, seq0: int, n: int, rng: np.random.Generator, rate: float, offset: float
) -> list[tuple[object, ...]]:
    """Every row of one target of a run, as codec tuples."""
    collapsed = bursty(rng, n, rate)
    failed = rng.random(n) < 0.002
    collapsed &= ~failed
    keep_text = collapsed | failed | (rng.random(n) < 0.01 - rate)
    starts = T0 + offset + np.arange(n) / RATE_PER_S + rng.random(n) * 0.05
    latency = 4.0 + rng.random(n)
    tokens = rng.integers(200, 513, n)
    errors = ERRORS[rng.integers(0, len(ERRORS), n)]
    template = Generation(run.run_id, "", target, run.label, 0, "", "completions", True, 0, 0)
    digests = {t: hashlib.sha256(t.encode()).hexdigest() for t in (CLEAN_TEXT, COLLAPSED_TEXT)}
    details = {flag: _details(flag) for flag in (False, True)}
    rows = []
    for i in range(n):
        bad, err = bool(collapsed[i]), str(errors[i]) if failed[i] else None
        text = COLLAPSED_TEXT if bad else CLEAN_TEXT
        template.request_id = f"{run.run_id}-{seq0 + i:09d}"
        template.seq, template.prompt_id = seq0 + i, f"builtin-{i % 300}"
        template.started_at = float(starts[i])
        template.ended_at = float(starts[i] + latency[i])
        template.ttft_s, template.prompt_tokens = 0.02, 20
        template.completion_tokens = None if err else int(tokens[i])
        template.finish_reason = None if err else "length"
        template.http_status = 500 if err == "http_5xx" else (None if err else 200)
        template.error_class, template.error_detail = err, ("boom" if err else None)
        template.text = None if err or not keep_text[i] else text
        template.text_sha256 = digests[text]
        template.scores = {"char_run": 200.0 if bad else 2.0, "token_run": 0.0,
                           "word_loop": 0.0, "empty": 0.0}  # fmt: skip
        template.details = details[bad]
        template.flags = ["char_run"] if bad else []
        rows.append(codec.generation_row(template))
    return rows


def build_database(path: Path, generations: int, seed: int = 0) -> float:
    """Write a database of `generations` rows at `path`; returns the seconds it took."""
    began = time.perf_counter()
    rng = np.random.default_rng(seed)
    store = open_store(path)
    per_unit = generations // len(UNITS)
    runs = {}
    for label in ("eager", "compiled"):
        runs[label] = Run(f"{label}-run", label, ["gpu0", "gpu1"], T0, load={"concurrency": 48},
                          status="completed", ended_at=T0 + per_unit / RATE_PER_S + 10)  # fmt: skip
        store.save_run(runs[label])
    store.add([], [Event("compiled-run", T0 + per_unit / RATE_PER_S / 2, "engine_fault", "gpu1",
                         {"message": "CUDA error: an illegal memory access"})])  # fmt: skip
    store.close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA synchronous=OFF")
    marks = ",".join("?" * len(codec.GENERATION_FIELDS))
    insert = f"INSERT INTO generations ({codec.GENERATION_COLUMNS}) VALUES ({marks})"
    for index, (label, target) in enumerate(UNITS):
        rate = 0.002 if label == "eager" else 0.004
        seq0 = 0 if target == "gpu0" else per_unit
        for first in range(0, per_unit, CHUNK):
            count = min(CHUNK, per_unit - first)
            rows = _unit_rows(runs[label], target, seq0 + first, count, rng, rate,
                              first / RATE_PER_S + 0.01 * index)  # fmt: skip
            db.execute("BEGIN")
            db.executemany(insert, rows)
            db.execute("COMMIT")
    db.close()
    return time.perf_counter() - began
