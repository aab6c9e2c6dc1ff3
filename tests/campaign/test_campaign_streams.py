"""A campaign block watches its streams as `run` does (issue 27): a configuration whose streams
arrive whole (a buffering proxy, here the mock's `--quirk buffered-stream`) gets one warning line
per block and a stored `stream_buffered` event; a configuration that streams does not."""

from __future__ import annotations

import json
from pathlib import Path

from tests.campaign.helpers import query, write_campaign
from tests.command_line import soakgate


def test_a_block_whose_streams_arrive_whole_warns_once_and_stores_an_event(
    tmp_path: Path,
) -> None:
    path = write_campaign(
        tmp_path,
        {"streams": "--tokens-per-s 200", "buffered": "--tokens-per-s 200 --quirk buffered-stream"},
        requests=30, max_tokens=24,
    )  # fmt: skip
    db = tmp_path / "c.sqlite"
    done = soakgate("campaign", str(path), "--db", str(db), cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    warnings = [line for line in done.stderr.splitlines() if "first token came" in line]
    assert warnings and all(line.startswith("soakgate: warning: block ") for line in warnings)
    events = query(db, "SELECT e.target, r.label, e.data FROM events e JOIN runs r "
                       "ON r.run_id = e.run_id WHERE e.kind = 'stream_buffered'")  # fmt: skip
    assert events and {label for _, label, _ in events} == {"buffered"}
    assert len(events) == len(warnings)  # one per buffered target and block, never repeated
    for target, _, data in events:
        assert json.loads(data)["whole"] >= 0.9 * json.loads(data)["judged"]
        assert any(f": {target}: in " in line for line in warnings)
