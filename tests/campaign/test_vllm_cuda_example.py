"""`examples/vllm-cuda-campaign.toml`: eight GPUs, one vLLM per GPU, eager against compiled with
an eager reference beside each compiled instance; each instance with its own compile cache and a
memory share that lets two fit on one GPU."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from soakgate.campaign.launch import Launcher, launch_spec
from soakgate.campaign.model import load_campaign
from soakgate.campaign.reference import reference_specs
from soakgate.campaign.soakcfg import request_spec
from soakgate.prompts.builtin import builtin_prompts
from soakgate.records import Run
from soakgate.servers import LaunchSpec, ServerInstance
from soakgate.store import BatchWriter, open_store
from soakgate.store.memory import MemoryStore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "vllm-cuda-campaign.toml"
FAKE_VLLM = Path(__file__).resolve().parent / "fake_vllm.py"
GPUS = [f"cuda:{i}" for i in range(8)]
CACHES = ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def _share(argv: list[str]) -> float:
    """The --gpu-memory-utilization an instance is started with (vLLM's default: 0.9)."""
    return float(argv[argv.index("--gpu-memory-utilization") + 1]) if (
        "--gpu-memory-utilization" in argv) else 0.9  # fmt: skip


def _block_specs(tmp_path: Path) -> dict[str, list[LaunchSpec]]:
    """Label -> every instance a block of that label starts (targets, then references)."""
    campaign = load_campaign(EXAMPLE)
    blocks = {}
    for config in campaign.configs:
        log_dir = tmp_path / f"logs-{config.label}"
        targets = [launch_spec(campaign, config, d, i, log_dir)
                   for i, d in enumerate(campaign.devices)]  # fmt: skip
        blocks[config.label] = targets + list(reference_specs(campaign, config, log_dir).values())
    return blocks


def test_the_example_pins_eight_gpus_and_gives_each_instance_its_cache_and_share(
    tmp_path: Path,
) -> None:
    campaign = load_campaign(EXAMPLE)
    assert [d.name for d in campaign.devices] == GPUS
    assert (campaign.order, campaign.reference) == ("interleaved", "eager")
    blocks = _block_specs(tmp_path)
    assert [len(specs) for specs in blocks.values()] == [8, 16]  # eager: 8; compiled: 8 + 8 eager
    compiled = blocks["compiled"]
    assert [s.name for s in compiled] == GPUS + [f"eager@{g}" for g in GPUS]
    for specs in blocks.values():
        per_gpu: dict[str, float] = {}
        for spec in specs:
            gpu = spec.env["CUDA_VISIBLE_DEVICES"]
            per_gpu[gpu] = per_gpu.get(gpu, 0.0) + _share(spec.argv)
            for variable in CACHES:  # filled in: a per-instance folder inside the block's logs
                assert spec.env[variable].startswith(str(spec.log_dir / spec.name)), spec.env
        assert sorted(per_gpu) == [str(i) for i in range(8)]
        assert max(per_gpu.values()) <= 0.9, per_gpu  # both instances of a GPU fit
        for variable in CACHES:  # no two instances of a block share a cache
            assert len({s.env[variable] for s in specs}) == len(specs)
    shares = {_share(s.argv) for specs in blocks.values() for s in specs}
    assert shares == {0.45}  # the same KV-cache size in both arms
    eager_flags = [("--enforce-eager" in s.argv) for s in compiled]
    assert eager_flags == [False] * 8 + [True] * 8


def _small_copy(folder: Path) -> Path:
    """The example with its [server] command, env, devices and configs untouched; a small load,
    one block per config, fast guard and no fixed ports."""
    data: dict[str, Any] = tomllib.loads(EXAMPLE.read_text())
    data["repetitions"] = 1
    data["load"] = {"concurrency": 2, "max_tokens": 8, "requests": 6, "token_ids": True,
                    "grace": 5}  # fmt: skip
    data["differential"] = {"fraction": 1.0}  # every row compared: 0.5 left a GPU with none (0.5^6)
    data["guard"].update(interval=0.2, health_interval=0.5, restart_backoff=0.1, telemetry=False)
    server = data["server"]
    del server["base_port"]
    server.update(startup_timeout=90, warmup_requests=1, stop_grace=5)
    path = folder / "vllm-cuda-campaign.toml"
    path.write_text(tomli_w.dumps(data))
    return path


@pytest.mark.slow
def test_the_example_runs_eight_gpus_against_a_vllm_that_keeps_vllms_memory_rules(
    tmp_path: Path,
) -> None:
    shim, state = tmp_path / "bin", tmp_path / "fake-vllm"
    shim.mkdir()
    state.mkdir()
    (shim / "vllm").write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_VLLM))} "$@"\n'
    )
    (shim / "vllm").chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "FAKE_VLLM_STATE": str(state)}
    db = tmp_path / "runs.sqlite"
    done = subprocess.run(
        [sys.executable, "-m", "soakgate", "campaign", str(_small_copy(tmp_path)), "--db", str(db),
         "--quiet"], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    starts = [json.loads(line) for line in (state / "starts.jsonl").read_text().splitlines()]
    store = open_store(db)
    try:
        runs = {r.label: r for r in store.runs()}
        events = {label: store.events(r.run_id) for label, r in runs.items()}
        rows = {label: list(store.generations(r.run_id)) for label, r in runs.items()}
    finally:
        store.close()
    failed = [e.data.get("log_tail", "")[-300:] for es in events.values() for e in es
              if e.kind == "server_start_failed"]  # fmt: skip
    assert failed == [], failed
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert len(starts) == 8 + 16
    for variable in CACHES:
        assert len({s[variable] for s in starts}) == len(starts)  # one cache per instance
    compiled_targets = {r.target for r in rows["compiled"] if r.details.get("differential")}
    for label in ("eager", "compiled"):
        by_target: dict[str, int] = {}
        for row in rows[label]:
            by_target[row.target] = by_target.get(row.target, 0) + 1
        assert {t: n for t, n in by_target.items() if t in GPUS} == dict.fromkeys(GPUS, 6)
    assert compiled_targets == set(GPUS)  # every GPU compared with its own eager reference
    compared = subprocess.run(
        [sys.executable, "-m", "soakgate", "compare", str(db), "eager", "compiled"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert compared.returncode == 0 and "compiled" in compared.stdout, compared.stderr[-2000:]
    baseline = [e for e in events["compiled"] if e.kind == "reference_baseline"]
    assert len(baseline) == 1 and baseline[0].data["instances"] == [f"eager@{g}" for g in GPUS]


def test_two_instances_brought_up_at_once_on_one_gpu_start_one_after_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard restarts an instance through `Launcher.bring_up`; when a device fault kills
    both instances of a GPU, both are brought up at once. They must not size their memory at
    the same moment (the stand-in vllm fails the second, as vLLM can)."""
    state = tmp_path / "fake-vllm"
    state.mkdir()
    monkeypatch.setenv("FAKE_VLLM_STATE", str(state))
    campaign = load_campaign(_small_copy(tmp_path))
    compiled, eager = campaign.configs[1], campaign.configs[0]
    cuda0, log_dir = campaign.devices[0], tmp_path / "logs"
    specs = [launch_spec(campaign, compiled, cuda0, 0, log_dir),
             launch_spec(campaign, eager, cuda0, 8, log_dir, "eager@cuda:0")]  # fmt: skip
    for spec in specs:  # the stand-in instead of `vllm` (no shim on PATH in this process)
        spec.argv[:1] = [sys.executable, str(FAKE_VLLM)]
    instances = [ServerInstance(spec) for spec in specs]
    run = Run("r", "compiled", [s.name for s in specs], time.time())
    launcher = Launcher(campaign, run, BatchWriter(MemoryStore()), request_spec(campaign),
                        builtin_prompts())  # fmt: skip

    async def bring_up_both() -> list[BaseException | None]:
        try:
            return await asyncio.gather(
                *(launcher.bring_up(i) for i in instances), return_exceptions=True
            )
        finally:
            for instance in instances:
                await instance.stop()

    outcomes = asyncio.run(bring_up_both())
    assert outcomes == [None, None], [i.log_tail(400) for i in instances]
    starts = [json.loads(line) for line in (state / "starts.jsonl").read_text().splitlines()]
    assert [(s["gpu"], s["eager"]) for s in starts] == [("0", False), ("0", True)]
