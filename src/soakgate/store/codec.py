"""Conversion between records and flat SQL rows (shared by the SQLite store and exports)."""

from __future__ import annotations

import json
from array import array
from typing import Any

import orjson

from soakgate.records import Event, Generation, Run

SCHEMA_VERSION = 6
"""1: the first schema. 2: `generations.attempts` (times a request was sent). 3: `prompts`
(each distinct prompt of a run, once, so that every row can be sent again: `soakgate replay`).
4: `generations.reference_score` and `generations.suspect` (reference scoring).
5: `generations.gateway_retries` (retries a gateway made upstream), with a partial index.
6: `generations.checks` (integrity checks the answer failed: `records.CHECKS`), with a partial
index."""

GATEWAY_INDEX = (
    "CREATE INDEX IF NOT EXISTS generations_gateway ON generations (run_id) "
    "WHERE gateway_retries > 0"
)
"""The few rows a gateway retried, found without reading the others (report). Made once the
table has the column (after any migration), so not in SCHEMA."""

CHECKS_INDEX = (
    "CREATE INDEX IF NOT EXISTS generations_checks ON generations (run_id) WHERE checks != ''"
)
"""The few rows that failed an integrity check, found without reading the others (analysis)."""

PROMPTS_TABLE = """CREATE TABLE IF NOT EXISTS prompts (
    run_id TEXT NOT NULL, prompt_id TEXT NOT NULL, text TEXT NOT NULL, system TEXT,
    PRIMARY KEY (run_id, prompt_id)
)"""

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, label TEXT NOT NULL, targets TEXT NOT NULL,
    started_at REAL NOT NULL, ended_at REAL, status TEXT NOT NULL,
    load TEXT NOT NULL, detectors TEXT NOT NULL, software TEXT NOT NULL,
    plan_sha256 TEXT, campaign TEXT
);
CREATE TABLE IF NOT EXISTS generations (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, request_id TEXT NOT NULL UNIQUE,
    target TEXT NOT NULL, label TEXT NOT NULL, seq INTEGER NOT NULL, prompt_id TEXT NOT NULL,
    endpoint TEXT NOT NULL, stream INTEGER NOT NULL, started_at REAL NOT NULL,
    ended_at REAL NOT NULL, ttft_s REAL, prompt_tokens INTEGER, completion_tokens INTEGER,
    finish_reason TEXT, http_status INTEGER, error_class TEXT, error_detail TEXT,
    text TEXT, text_sha256 TEXT NOT NULL, token_ids BLOB, scores TEXT NOT NULL,
    details TEXT NOT NULL, flags TEXT NOT NULL, collapsed INTEGER NOT NULL,
    incarnation INTEGER NOT NULL, reference_divergence INTEGER,
    attempts INTEGER NOT NULL DEFAULT 1, reference_score REAL, suspect INTEGER,
    gateway_retries INTEGER, checks TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS generations_run_seq ON generations (run_id, seq);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, at REAL NOT NULL, kind TEXT NOT NULL,
    target TEXT, data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_run_at ON events (run_id, at);
{PROMPTS_TABLE};
CREATE TABLE IF NOT EXISTS ledger (
    idx INTEGER PRIMARY KEY, at REAL NOT NULL, kind TEXT NOT NULL, payload TEXT NOT NULL,
    prev_hash TEXT NOT NULL, entry_hash TEXT NOT NULL
);
"""

GENERATION_COLUMNS = (
    "run_id, request_id, target, label, seq, prompt_id, endpoint, stream, started_at, ended_at, "
    "ttft_s, prompt_tokens, completion_tokens, finish_reason, http_status, error_class, "
    "error_detail, text, text_sha256, token_ids, scores, details, flags, collapsed, incarnation, "
    "reference_divergence, attempts, reference_score, suspect, gateway_retries, checks"
)
GENERATION_FIELDS = tuple(name.strip() for name in GENERATION_COLUMNS.split(","))
"""The column names of GENERATION_COLUMNS, in order."""
MIGRATIONS: dict[int, str | tuple[str, ...]] = {
    2: "ALTER TABLE generations ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1",
    3: PROMPTS_TABLE,
    4: (
        "ALTER TABLE generations ADD COLUMN reference_score REAL",
        "ALTER TABLE generations ADD COLUMN suspect INTEGER",
    ),
    5: ("ALTER TABLE generations ADD COLUMN gateway_retries INTEGER", GATEWAY_INDEX),
    6: ("ALTER TABLE generations ADD COLUMN checks TEXT NOT NULL DEFAULT ''", CHECKS_INDEX),
}
"""Schema version -> the statement(s) that bring a database of the version before up to it."""
COLUMN_DEFAULTS = {
    "attempts": "1", "reference_score": "NULL", "suspect": "NULL", "gateway_retries": "NULL",
    "checks": "''",
}  # fmt: skip
"""SQL for a column that a database of an older schema lacks, when it is read unmigrated."""


def generation_select(present: set[str]) -> str:
    """The SELECT list of GENERATION_FIELDS on a table with the columns `present`: a column that
    an older, unmigrated database lacks reads as its default."""
    return ", ".join(
        name if name in present else f"{COLUMN_DEFAULTS[name]} AS {name}"
        for name in GENERATION_FIELDS
    )


RUN_COLUMNS = (
    "run_id, label, targets, started_at, ended_at, status, load, detectors, software, "
    "plan_sha256, campaign"
)


# One encoder for every row: json.dumps with non-default options builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def _dumps_fast(value: Any) -> str:
    """`_dumps` for the per-generation columns at a tenth of its cost (orjson).

    orjson writes NaN and infinities as `null` where the stdlib writes `NaN`, and refuses what it
    cannot encode (non-string keys, huge ints); whenever its output holds a `null`, or it
    refuses, the stdlib encodes instead, so what is stored is what `_dumps` would store.
    """
    try:
        encoded = orjson.dumps(value)
    except TypeError:
        return _ENCODER.encode(value)
    return _ENCODER.encode(value) if b"null" in encoded else encoded.decode()


def generation_row(g: Generation) -> tuple[Any, ...]:
    """A Generation as a tuple in GENERATION_COLUMNS order."""
    ids = array("i", g.token_ids).tobytes() if g.token_ids is not None else None
    return (
        g.run_id, g.request_id, g.target, g.label, g.seq, g.prompt_id, g.endpoint, int(g.stream),
        g.started_at, g.ended_at, g.ttft_s, g.prompt_tokens, g.completion_tokens, g.finish_reason,
        g.http_status, g.error_class, g.error_detail, g.text, g.text_sha256, ids,
        _dumps_fast(g.scores), _dumps_fast(g.details), ",".join(g.flags), int(g.collapsed),
        g.incarnation, g.reference_divergence, g.attempts, g.reference_score,
        None if g.suspect is None else int(g.suspect), g.gateway_retries, ",".join(g.checks),
    )  # fmt: skip


def generation_from_row(row: tuple[Any, ...]) -> Generation:
    """Inverse of generation_row."""
    (run_id, request_id, target, label, seq, prompt_id, endpoint, stream, started_at, ended_at,
     ttft_s, prompt_tokens, completion_tokens, finish_reason, http_status, error_class,
     error_detail, text, text_sha256, ids, scores, details, flags, _collapsed, incarnation,
     reference_divergence, attempts, reference_score, suspect, gateway_retries,
     checks) = row  # fmt: skip
    token_ids = array("i", ids).tolist() if ids is not None else None
    return Generation(
        run_id=run_id, request_id=request_id, target=target, label=label, seq=seq,
        prompt_id=prompt_id, endpoint=endpoint, stream=bool(stream), started_at=started_at,
        ended_at=ended_at, ttft_s=ttft_s, prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens, finish_reason=finish_reason, http_status=http_status,
        error_class=error_class, error_detail=error_detail, text=text, text_sha256=text_sha256,
        token_ids=token_ids, scores=json.loads(scores), details=json.loads(details),
        flags=flags.split(",") if flags else [], incarnation=incarnation,
        reference_divergence=reference_divergence, attempts=attempts,
        reference_score=reference_score, suspect=None if suspect is None else bool(suspect),
        gateway_retries=gateway_retries, checks=checks.split(",") if checks else [],
    )  # fmt: skip


def run_row(r: Run) -> tuple[Any, ...]:
    """A Run as a tuple in RUN_COLUMNS order."""
    return (
        r.run_id, r.label, _dumps(r.targets), r.started_at, r.ended_at, r.status, _dumps(r.load),
        _dumps(r.detectors), _dumps(r.software), r.plan_sha256, r.campaign,
    )  # fmt: skip


def run_from_row(row: tuple[Any, ...]) -> Run:
    """Inverse of run_row."""
    run_id, label, targets, started, ended, status, load, detectors, software, plan, camp = row
    return Run(
        run_id=run_id, label=label, targets=json.loads(targets), started_at=started,
        ended_at=ended, status=status, load=json.loads(load), detectors=json.loads(detectors),
        software=json.loads(software), plan_sha256=plan, campaign=camp,
    )  # fmt: skip


def event_row(e: Event) -> tuple[Any, ...]:
    """An Event as a tuple (run_id, at, kind, target, data)."""
    return (e.run_id, e.at, e.kind, e.target, _dumps(e.data))


def event_from_row(row: tuple[Any, ...]) -> Event:
    """Inverse of event_row."""
    run_id, at, kind, target, data = row
    return Event(run_id=run_id, at=at, kind=kind, target=target, data=json.loads(data))
