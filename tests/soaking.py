"""A bounded soak of one URL through `run_soak`, returning the rows as stored (shared by tests)."""

from __future__ import annotations

from pathlib import Path

from soakgate.load import LoadSpec
from soakgate.load.runner import SoakConfig, run_soak
from soakgate.probes.soak import StandardProbes
from soakgate.records import Generation
from soakgate.store import open_store
from soakgate.targets import RequestSpec, TargetSpec


def soak_rows(
    url: str, db: Path, request: RequestSpec, requests: int, concurrency: int = 8,
    label: str = "soak", grace_s: float = 30,
) -> list[Generation]:  # fmt: skip
    """Soak `url` for `requests` requests and read the run's rows back from SQLite, in order."""
    config = SoakConfig(
        probes=StandardProbes(),
        targets=[TargetSpec.parse(url)], label=label, request=request,
        load=LoadSpec(concurrency=concurrency, requests=requests, grace_s=grace_s), db=db,
    )  # fmt: skip
    run_id = run_soak(config).run.run_id
    store = open_store(db)
    try:
        return sorted(store.generations(run_id), key=lambda g: g.seq)
    finally:
        store.close()
