"""The differential check in a campaign: each device's target is compared with an instance of
the reference config on the same device (a matched comparison: same card, same moment)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from soakgate.campaign.launch import launch_spec
from soakgate.campaign.model import Campaign, ConfigEntry
from soakgate.load.driver import note
from soakgate.load.runner import SoakConfig
from soakgate.probes.differential import Differential, reference_baseline
from soakgate.prompts import PromptPicker
from soakgate.records import Event, Run
from soakgate.servers import LaunchSpec, ServerInstance
from soakgate.store import BatchWriter
from soakgate.targets import TargetSpec


def reference_config(campaign: Campaign, config: ConfigEntry) -> ConfigEntry | None:
    """The config that blocks of `config` are compared with; None without a reference or when
    `config` is the reference itself."""
    if campaign.reference is None or campaign.reference == config.label:
        return None
    return next(c for c in campaign.configs if c.label == campaign.reference)


def reference_name(label: str, device_name: str) -> str:
    """Target name of the reference instance on a device, e.g. `eager@cuda:0`."""
    return f"{label}@{device_name}"


def reference_specs(
    campaign: Campaign, config: ConfigEntry, log_dir: Path
) -> dict[str, LaunchSpec]:
    """Device name -> launch spec of the reference instance on that device (empty: none needed).

    Reference instances take base_port slots after the targets' (base_port + devices + i).
    """
    reference = reference_config(campaign, config)
    if reference is None:
        return {}
    offset = len(campaign.devices)
    return {
        device.name: launch_spec(campaign, reference, device, offset + i, log_dir,
                                 reference_name(reference.label, device.name))
        for i, device in enumerate(campaign.devices)
    }  # fmt: skip


def pair_up(
    specs: Mapping[str, LaunchSpec], up: Sequence[ServerInstance], models: Mapping[str, str]
) -> tuple[dict[str, TargetSpec], list[str]]:
    """Target name -> its reference, for devices where both came up; and the devices whose
    target came up without its reference (their rows are not compared)."""
    names = {i.name for i in up}
    pairs: dict[str, TargetSpec] = {}
    alone: list[str] = []
    for device, spec in specs.items():
        if device not in names:
            continue
        if spec.name in names:
            pairs[device] = TargetSpec(spec.url, spec.name, model=models.get(spec.name))
        else:
            alone.append(device)
    return pairs, alone


async def start_differential(
    cfg: SoakConfig, run: Run, writer: BatchWriter, label: str | None,
    references: Mapping[str, LaunchSpec], up: Sequence[ServerInstance], models: Mapping[str, str],
) -> Differential | None:  # fmt: skip
    """Pair each target that came up with the reference instance on its device, measure the
    references' own nondeterminism (recorded as `reference_baseline`, like `soakgate run
    --reference`), and return the differential for the soak (None: nothing to compare)."""
    pairs, alone = pair_up(references, up, models)
    for device in alone:
        message = "the reference instance on this device did not come up; rows not compared"
        writer.add_event(Event(run.run_id, time.time(), "note", device, {"message": message}))
    if not pairs:
        return None
    compared = list(pairs.values())
    picker = PromptPicker(cfg.prompts, cfg.prompt_order, cfg.seed)
    prompts = [picker.pick(seq) for seq in range(cfg.baseline_prompts)]
    baseline = await reference_baseline(compared, prompts, cfg.request)
    writer.add_event(note(run, "reference_baseline", **dataclasses.asdict(baseline),
                          informative=baseline.informative, reference=label,
                          instances=[r.name for r in compared]))  # fmt: skip
    writer.flush()
    return Differential(None, cfg.reference_fraction, pairs)
