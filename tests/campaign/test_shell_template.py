"""A campaign whose server command runs through `sh -c` passes labels and paths as data."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.campaign.helpers import query


def test_a_label_with_shell_syntax_is_not_run_by_an_sh_c_server_command(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    label = f"eager$(touch {marker})"
    campaign = tmp_path / "campaign.toml"
    campaign.write_text(f"""
name = "shell"
devices = ["cpu:0"]

[server]
command = "sh -c 'echo {{label}} > {{log_dir}}/label.txt && exec {{python}} -m soakgate.mockserver --host {{host}} --port {{port}} {{flags}}'"
startup_timeout = 60
warmup_requests = 1
stop_grace = 3

[[configs]]
label = {label!r}
flags = "--tokens-per-s 4000 --model-name 'a model'"

[load]
concurrency = 2
max_tokens = 16
requests = 6

[guard]
telemetry = false
""")
    db = tmp_path / "c.sqlite"
    result = subprocess.run(
        [sys.executable, "-m", "soakgate", "campaign", str(campaign), "--db", str(db)],
        capture_output=True, text=True, timeout=180, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert not marker.exists()
    (written,) = [p.read_text().strip() for p in tmp_path.rglob("label.txt")]
    assert written == label
    rows = query(db, "SELECT label, error_class FROM generations")
    assert len(rows) == 6 and all(r == (label, None) for r in rows)
