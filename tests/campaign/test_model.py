"""The campaign file model: a full example validates; every mistake is a one-line ConfigError."""

from __future__ import annotations

from pathlib import Path

import pytest

from soakgate.campaign import load_campaign
from soakgate.campaign.soakcfg import request_spec, requests_per_block
from soakgate.errors import ConfigError
from soakgate.stats.plan import make_plan, write_plan

REPO = Path(__file__).resolve().parents[2]

GOOD = """
name = "eager-vs-graph"
order = "interleaved"
repetitions = 2
reference = "eager"
devices = ["cuda:0", {device = "cuda:1", name = "gpu1"}]

[server]
command = "vllm serve {model} --port {port} --dtype float16 {flags}"
model = "/models/m"
startup_timeout = "15m"
warmup_requests = 4
env = {VLLM_LOGGING_LEVEL = "INFO", FLAG = true}

[[configs]]
label = "eager"
flags = "--enforce-eager"

[[configs]]
label = "graph"
duration = "2h"

[load]
concurrency = 16
max_tokens = 256
requests = 500

[guard]
extra_fatal_patterns = ["NCCL error"]
max_restarts = 5
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_a_full_campaign_validates(tmp_path: Path) -> None:
    campaign = load_campaign(_write(tmp_path, GOOD))
    assert [d.name for d in campaign.devices] == ["cuda:0", "gpu1"]
    assert campaign.devices[1].env() == {"CUDA_VISIBLE_DEVICES": "1"}
    assert campaign.server.startup_timeout_s == 900 and campaign.server.env["FLAG"] == "true"
    eager, graph = campaign.configs
    assert (eager.requests, eager.duration_s) == (500, None)  # from [load]
    assert (graph.requests, graph.duration_s) == (None, 7200)  # the config's own bound
    assert campaign.reference == "eager" and campaign.guard.max_restarts == 5
    assert campaign.guard.fatal_patterns[-1] == "NCCL error"
    assert len(campaign.sha256) == 64
    assert request_spec(campaign).response_cap == 256 * 1024 + 4096 * 256  # from max_tokens


def test_the_response_cap_is_a_load_setting(tmp_path: Path) -> None:
    text = GOOD.replace("max_tokens = 256", "max_tokens = 256\nmax_response_bytes = 5000000")
    assert request_spec(load_campaign(_write(tmp_path, text))).response_cap == 5_000_000
    with pytest.raises(ConfigError, match="at least 1"):
        load_campaign(_write(tmp_path, text.replace("5000000", "0")))


def test_the_shipped_example_validates() -> None:
    campaign = load_campaign(REPO / "examples" / "mock-campaign.toml")
    assert [c.label for c in campaign.configs] == ["eager", "graph"]


def test_a_plan_file_is_accepted_and_sizes_the_blocks(tmp_path: Path) -> None:
    plan = make_plan("graph collapses more", ["eager", "graph"], 0.01, 2.0)
    write_plan(plan, tmp_path / "plan.toml")
    text = GOOD.replace("requests = 500", 'plan = "plan.toml"')
    campaign = load_campaign(_write(tmp_path, text))
    eager = campaign.configs[0]
    assert eager.plan == tmp_path / "plan.toml"
    per_block = requests_per_block(campaign, eager)
    assert per_block is not None and per_block * 2 * 2 >= (plan.n_per_arm or 0)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('order = "interleaved"', 'order = "random"', "order must be sequential or interleaved"),
        ("max_tokens = 256", "max_tokens = 256\nmax_tokenz = 1", "unknown key"),
        ('reference = "eager"', 'reference = "compiled"', "not a config label"),
        ('"cuda:0", {', '"tpu:0", {', "VENDOR:INDEX"),
        ("{flags}", "{flags} {gpu}", "{gpu}"),
        ('flags = "--enforce-eager"', 'flags = "--x {flags}"', "flags of config"),
        ('label = "graph"', 'label = "eager"', "labels must be unique"),
        ('duration = "2h"', 'duration = "2h"\nrequests = 5', "not several"),
        ('duration = "2h"', 'duration = "soon"', "duration like"),
        ('startup_timeout = "15m"', "startup_timeout = -1", "duration like"),
        ("requests = 500", "requests = 0", "at least 1"),
        ("requests = 500", 'plan = "missing.toml"', "does not exist"),
        ('model = "/models/m"', "model = 3", "must be a string"),
        ("repetitions = 2", "repetitions = 2.5", "whole number"),
        ('extra_fatal_patterns = ["NCCL error"]', 'fatal_patterns = ["("]', "not a regex"),
    ],
)
def test_mistakes_are_one_line_config_errors(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    assert old in GOOD
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("}", r"\}")) as info:
        load_campaign(_write(tmp_path, GOOD.replace(old, new, 1)))
    assert "\n" not in str(info.value)


def test_unbounded_config_and_missing_tables_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="give requests, duration or plan"):
        load_campaign(_write(tmp_path, GOOD.replace("requests = 500", "")))
    with pytest.raises(ConfigError, match="server is required"):
        load_campaign(_write(tmp_path, 'devices = ["cpu:0"]\n[[configs]]\nlabel = "a"\n'))
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_campaign(_write(tmp_path, "name = "))
    with pytest.raises(ConfigError, match="cannot read"):
        load_campaign(tmp_path / "absent.toml")


def test_environment_values_are_filled_per_instance_and_braces_can_be_doubled(
    tmp_path: Path,
) -> None:
    from soakgate.campaign.launch import launch_spec

    text = GOOD.replace(
        'env = {VLLM_LOGGING_LEVEL = "INFO", FLAG = true}',
        'env = {VLLM_CACHE_ROOT = "{log_dir}/{instance}/cache", JSON = "{{\\"gpu\\": {device}}}"}',
    ).replace(
        'flags = "--enforce-eager"',
        'flags = "--enforce-eager"\nenv = {TAG = "{label}-{port}", SEED = "{block}"}',
    )
    campaign = load_campaign(_write(tmp_path, text))
    eager = campaign.configs[0]
    specs = [
        launch_spec(campaign, eager, d, i, tmp_path / "003-eager-r1")
        for i, d in enumerate(campaign.devices)
    ]
    assert [s.env["VLLM_CACHE_ROOT"] for s in specs] == [
        f"{tmp_path}/003-eager-r1/cuda:0/cache", f"{tmp_path}/003-eager-r1/gpu1/cache",
    ]  # fmt: skip
    assert [s.env["JSON"] for s in specs] == ['{"gpu": 0}', '{"gpu": 1}']
    assert [s.env["TAG"] for s in specs] == [f"eager-{s.url.rsplit(':', 1)[1]}" for s in specs]
    # {block} is the block's name alone: the same wherever the campaign's logs are written.
    assert [s.env["SEED"] for s in specs] == ["003-eager-r1", "003-eager-r1"]


@pytest.mark.parametrize(
    ("env", "where"),
    [
        (
            '[server.env]\nCACHE = "/c/{instnace}"',
            "server.env CACHE uses unknown placeholder(s) {instnace}",
        ),
        ('[server.env]\nX = "{flags}"', "server.env X uses unknown placeholder(s) {flags}"),
        ('[server.env]\nX = "{"', "server.env X cannot be parsed"),
    ],
)
def test_a_bad_placeholder_in_an_environment_value_is_one_line(
    tmp_path: Path, env: str, where: str
) -> None:
    text = f'devices = ["cpu:0"]\n[server]\ncommand = "srv {{port}}"\n{env}\n'
    text += '[[configs]]\nlabel = "a"\n[load]\nrequests = 5\n'
    with pytest.raises(ConfigError, match=r"\(write \{\{ and \}\} for braces\)") as error:
        load_campaign(_write(tmp_path, text))
    assert str(error.value).startswith(where) and "\n" not in str(error.value)
