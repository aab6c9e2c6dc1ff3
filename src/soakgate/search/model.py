"""The search file: a campaign file (server, devices, load, guard, configs) with a `[search]`
table naming its clean and failing configurations and the error rates the search must keep."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soakgate.campaign.fields import Table
from soakgate.campaign.model import Campaign, ConfigEntry, campaign_from_dict, read_toml
from soakgate.errors import ConfigError
from soakgate.search.algorithm import max_probes
from soakgate.search.knobs import Knob, diff_knobs
from soakgate.stats.sprt import ProbeDesign, probe_design


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """The `[search]` table."""

    clean: str
    """Label of the configuration that does not fail (the baseline)."""
    failing: str
    """Label of the configuration that fails."""
    failing_rate: float
    """The failing configuration's rate, as an earlier soak measured it (sizes every probe)."""
    baseline_rate: float = 0.0
    """The clean configuration's rate, as measured."""
    reproduce: float = 0.5
    """A probe reproduces the failure at this share of failing_rate or more."""
    false_knob: float = 0.05
    """Bound on the chance the named set holds a knob that does not matter."""
    missed_knob: float = 0.05
    """Bound on the chance a knob that matters is left out."""
    block_requests: int = 1000
    """Requests per target in each block of a probe (the probe looks after each block)."""
    baseline_every: int = 4
    """A block of the clean configuration after every this many probe blocks (drift check)."""
    design_effect: float = 1.0
    """Variance inflation of clustered failures (from `plan --pilot`); 1: independent."""
    max_probe_requests: int | None = None
    """Requests after which an undecided probe is decided by its evidence's sign."""


@dataclass(frozen=True, slots=True)
class Search:
    """A validated search file."""

    campaign: Campaign
    settings: SearchSettings
    clean: ConfigEntry
    failing: ConfigEntry
    knobs: tuple[Knob, ...]
    design: ProbeDesign
    data: dict[str, Any]
    """The parsed file (for writing the minimal pair's campaign file)."""


def load_search(path: str | Path) -> Search:
    """Read and validate a search file; every problem is a one-line ConfigError."""
    file = Path(path)
    data, sha256 = read_toml(file, "search file")
    rest = {k: v for k, v in data.items() if k != "search"}
    campaign = campaign_from_dict(rest, file, sha256)
    if campaign.reference is not None or campaign.cluster.engine != "local":
        raise ConfigError("search: a reference configuration and [cluster] are not supported yet")
    if "search" not in data:
        raise ConfigError("a search file needs a [search] table (clean, failing, failing_rate)")
    settings = _settings(Table(data["search"], "[search]"))
    labels = {c.label: c for c in campaign.configs}
    for role in ("clean", "failing"):
        if getattr(settings, role) not in labels:
            raise ConfigError(
                f"[search] {role} = {getattr(settings, role)!r} is not a config label"
            )
    clean, failing = labels[settings.clean], labels[settings.failing]
    knobs = tuple(diff_knobs(clean, failing))
    if not knobs:
        raise ConfigError(f"configs {clean.label!r} and {failing.label!r} do not differ: no knobs")
    return Search(campaign, settings, clean, failing, knobs, design_for(settings, len(knobs)),
                  data)  # fmt: skip


def design_for(settings: SearchSettings, knobs: int) -> ProbeDesign:
    """Every probe's test: the search-wide error bounds shared equally over the most probes the
    search can make (Bonferroni: a probe's decision may be wrong only within its share)."""
    shares = max(1, max_probes(knobs))
    try:
        return probe_design(
            settings.baseline_rate, settings.failing_rate, settings.missed_knob / shares,
            settings.false_knob / shares, settings.reproduce, settings.design_effect,
            settings.max_probe_requests,
        )  # fmt: skip
    except ValueError as exc:
        raise ConfigError(f"[search]: {exc}") from None


def _settings(table: Table) -> SearchSettings:
    def rate(key: str, default: float | None, low: float, high: float) -> float:
        value = table.number(key, default) if default is not None else _required(table, key)
        if not low <= value <= high or (key != "baseline_rate" and value == low):
            raise ConfigError(f"[search]: {key} must be in ({low:g}, {high:g}], not {value:g}")
        return value

    settings = SearchSettings(
        clean=table.text("clean", None), failing=table.text("failing", None),
        failing_rate=rate("failing_rate", None, 0.0, 0.999),
        baseline_rate=rate("baseline_rate", 0.0, 0.0, 0.999),
        reproduce=rate("reproduce", 0.5, 0.0, 1.0),
        false_knob=rate("false_knob", 0.05, 0.0, 0.5),
        missed_knob=rate("missed_knob", 0.05, 0.0, 0.5),
        block_requests=table.integer("block_requests", 1000, minimum=1),
        baseline_every=table.integer("baseline_every", 4, minimum=1),
        design_effect=rate("design_effect", 1.0, 0.0, 1000.0),
        max_probe_requests=table.optional_int("max_probe_requests", minimum=1),
    )  # fmt: skip
    table.done()
    return settings


def _required(table: Table, key: str) -> float:
    if key not in table.data:
        raise ConfigError(f"[search]: {key} is required (the rate an earlier soak measured)")
    return table.number(key, 0.0)
