"""The SoakConfig and Run record of one block, from the campaign's settings."""

from __future__ import annotations

import functools
import hashlib
import math
from pathlib import Path
from typing import Any

from soakgate.campaign.blocks import Block
from soakgate.campaign.model import Campaign, ConfigEntry
from soakgate.checks import CrosstalkSettings, open_answer_checks
from soakgate.checks.twins import TwinSettings, open_twins
from soakgate.detectors import DetectorConfig
from soakgate.errors import ConfigError, SoakgateError
from soakgate.load.runner import SoakConfig, new_run
from soakgate.load.spec import LoadSpec
from soakgate.prompts import builtin_prompts, load_prompts
from soakgate.prompts.synthetic import LengthDistribution, described, synthetic_prompts
from soakgate.records import Run
from soakgate.targets import RequestSpec, TargetSpec
from soakgate.targets.parse import check_structures


def request_spec(campaign: Campaign) -> RequestSpec:
    """How each request of the campaign is made."""
    load = campaign.load
    return RequestSpec(
        endpoint=load.endpoint, stream=load.stream, max_tokens=load.max_tokens,
        temperature=load.temperature, ignore_eos=load.ignore_eos,
        return_token_ids=load.token_ids, timeout_s=load.timeout_s,
        max_response_bytes=load.max_response_bytes, structure_via=load.structure_via,
    )  # fmt: skip


def detector_config(campaign: Campaign) -> DetectorConfig:
    """The detectors every block of the campaign applies."""
    return DetectorConfig(char_run_threshold=campaign.load.char_run_threshold)


def requests_per_block(campaign: Campaign, config: ConfigEntry) -> int | None:
    """Requests per target per block; a plan's generations per arm are spread evenly over the
    devices and repetitions (rounded up)."""
    if config.requests is not None or config.plan is None:
        return config.requests
    plan = _read_plan(config.plan)
    if plan.requests_per_block is not None:  # a replicate-block design fixes the block length
        return int(plan.requests_per_block) + int(plan.warmup_requests or 0)
    per_arm: int | None = plan.sequential.n_max_per_arm if plan.sequential else plan.n_per_arm
    if not per_arm:
        raise ConfigError(f"plan {config.plan} gives no sample size per arm")
    return max(1, math.ceil(per_arm / (len(campaign.devices) * campaign.repetitions)))


def warmup_requests(config: ConfigEntry) -> int:
    """Requests per target each block soaks before counting starts (its plan's warm-up)."""
    if config.plan is None or config.requests is not None:
        return 0
    return int(_read_plan(config.plan).warmup_requests or 0)


def check_block_plans(campaign: Campaign) -> None:
    """Refuse a campaign that runs fewer blocks per config than its block-design plan asks."""
    for config in campaign.configs:
        if config.plan is None:
            continue
        plan = _read_plan(config.plan)
        blocks = campaign.repetitions * len(campaign.devices)
        if plan.blocks is not None and blocks < plan.blocks:
            needed = math.ceil(plan.blocks / len(campaign.devices))
            raise ConfigError(
                f"plan {config.plan} asks for {plan.blocks} replicate blocks per arm of "
                f"{plan.requests_per_block} requests, but config {config.label!r} gets "
                f"{campaign.repetitions} repetition(s) x {len(campaign.devices)} device(s) = "
                f"{blocks}; set repetitions = {needed}"
            )


def soak_config(
    campaign: Campaign, config: ConfigEntry, block: Block, targets: list[TargetSpec], db: Path
) -> SoakConfig:
    """A validated SoakConfig for one block."""
    load = campaign.load
    context: dict[str, Any] = {}
    if load.prompt_tokens is not None:
        lengths = LengthDistribution.parse(load.prompt_tokens)
        tokenizer = None if load.tokenizer is None else str(load.tokenizer)
        prompts = synthetic_prompts(lengths, load.synthetic_prompts, load.prompt_seed, tokenizer)
        context["synthetic_prompts"] = described(lengths, load.synthetic_prompts, tokenizer)
    else:
        prompts = load_prompts(load.prompts) if load.prompts else list(builtin_prompts())
    request = request_spec(campaign)
    structured = check_structures(prompts, request)
    return SoakConfig(
        targets=targets, label=config.label, request=request,
        load=LoadSpec(load.concurrency, requests_per_block(campaign, config), config.duration_s,
                      load.grace_s, rate=load.rate, arrivals=load.arrivals, ramp_s=load.ramp_s),
        context=context,
        db=db, prompts=prompts, prompt_order=load.prompt_order, seed=load.prompt_seed,
        detectors=detector_config(campaign),
        store_text=load.store_text, campaign=block.block_id,
        reference_fraction=campaign.reference_fraction,
        answer_check=functools.partial(open_answer_checks,
                                       CrosstalkSettings(canaries=load.canaries),
                                       structured, None),
        twin_check=functools.partial(open_twins, TwinSettings(
            load.twin_fraction, load.twin_gap, load.twin_at_rest), request),
    )  # fmt: skip


def block_run(cfg: SoakConfig, campaign: Campaign, config: ConfigEntry, block: Block) -> Run:
    """A new run record for the block, with the campaign context in its load spec."""
    run = new_run(cfg)
    context: dict[str, Any] = {
        "campaign": campaign.name, "block": block.block_id, "block_index": block.index,
        "repetition": block.repetition, "order": campaign.order, "flags": config.flags,
        "env": config.env, "server_command": campaign.server.command,
        "model": campaign.server.model, "devices": [d.name for d in campaign.devices],
        "reference": campaign.reference, "reference_fraction": campaign.reference_fraction,
    }  # fmt: skip
    if config.plan is not None:
        context["plan"] = str(config.plan)
        context["plan_file_sha256"] = hashlib.sha256(config.plan.read_bytes()).hexdigest()
    run.load["campaign"] = context
    warmup = warmup_requests(config)
    if warmup:  # soaked and stored, never counted: the report and compare leave these out
        run.load["warmup_requests"] = warmup
    return run


def _read_plan(path: Path) -> Any:
    from soakgate.stats.plan import read_plan

    try:
        return read_plan(path)
    except SoakgateError:
        raise
    except Exception as exc:  # the plan module is another stage's; translate at the boundary
        raise ConfigError(f"cannot read plan {path}: {exc}") from None
