"""The campaign file: a TOML model, validated into frozen dataclasses with one-line errors."""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soakgate.campaign.cluster import ClusterSettings, cluster_settings
from soakgate.campaign.fields import Table
from soakgate.errors import ConfigError, SoakgateError
from soakgate.guard.patterns import DEFAULT_FATAL_PATTERNS, compile_patterns
from soakgate.guard.settings import GuardSettings
from soakgate.servers.command import Device, check_env, check_flags, check_template
from soakgate.servers.instance import DEFAULT_HEALTH_PATHS

ORDERS = ("sequential", "interleaved")


@dataclass(frozen=True, slots=True)
class ServerTemplate:
    """How to start one server instance (the `[server]` table)."""

    command: str
    """Command template with {model} {port} {flags} {device} {python} {log_dir} ... placeholders."""
    model: str = ""
    """Value of {model} (and the model name requests use, when not empty)."""
    health_paths: tuple[str, ...] = DEFAULT_HEALTH_PATHS
    """Health path(s) tried in order."""
    startup_timeout_s: float = 600.0
    """Bound on start-up (process start to healthy)."""
    warmup_requests: int = 2
    """Requests sent after start-up and not stored."""
    stop_grace_s: float = 30.0
    """SIGTERM to SIGKILL grace period."""
    host: str = "127.0.0.1"
    """Host the instances listen on (value of {host})."""
    base_port: int | None = None
    """Device i gets base_port + i; None picks free ports."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment for every instance."""


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One configuration under test (a `[[configs]]` entry)."""

    label: str
    """Configuration label (the arm of a comparison)."""
    flags: str = ""
    """Value of {flags}."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment of this configuration's instances."""
    requests: int | None = None
    """Requests per target per block."""
    duration_s: float | None = None
    """Seconds per block."""
    plan: Path | None = None
    """Pre-registered plan file (stored with its SHA-256)."""


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """The `[load]` table: request shape shared by every block."""

    concurrency: int = 8
    max_tokens: int = 128
    endpoint: str = "completions"
    stream: bool = True
    temperature: float = 0.8
    ignore_eos: bool = False
    token_ids: bool = False
    timeout_s: float = 120.0
    prompts: Path | None = None
    prompt_order: str = "round-robin"
    prompt_seed: int = 0
    store_text: str = "all"
    char_run_threshold: int = 80
    grace_s: float = 30.0
    max_response_bytes: int | None = None
    rate: float | None = None
    """Open-loop arrivals per second per target (`run --rate`); None: the closed loop."""
    arrivals: str = "poisson"
    ramp_s: float | None = None
    prompt_tokens: str | None = None
    """Synthetic prompts' length distribution (`run --prompt-tokens`), instead of `prompts`."""
    synthetic_prompts: int = 500
    tokenizer: Path | None = None
    structure_via: str = "openai"
    """The request field a structured prompt's constraint is sent in (`run --structure-via`)."""
    canaries: bool = False
    """End every prompt with its request's canary (`run --canaries`)."""
    twin_fraction: float = 0.0
    """Share of requests sent twice with the same seed (`run --twin-fraction`)."""
    twin_gap: int = 0
    """The target's requests between a first and its twin (`run --twin-gap`)."""
    twin_at_rest: int = 32
    """Twin pairs sent one at a time before each block's soak (`run --twin-at-rest`)."""


@dataclass(frozen=True, slots=True)
class Campaign:
    """A validated campaign file."""

    name: str
    """Campaign name (default: the file's stem); block ids start with it."""
    path: Path
    """The file it was read from."""
    sha256: str
    """SHA-256 of the file's bytes."""
    server: ServerTemplate
    devices: tuple[Device, ...]
    configs: tuple[ConfigEntry, ...]
    load: LoadSettings
    guard: GuardSettings
    order: str = "interleaved"
    """`sequential` (all repetitions of A, then B) or `interleaved` (A B B A ...)."""
    repetitions: int = 1
    """How many blocks each configuration gets."""
    reference: str | None = None
    """Label of the reference configuration: every other config's blocks also start one instance
    of it per device, and a sampled share of requests is compared with it token by token."""
    reference_fraction: float = 0.03
    """Share of requests sent greedy to both the target and its reference (`[differential]`)."""
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    """Where the instances run (`[cluster]`): local subprocesses, or Ray actors on a cluster."""


def load_campaign(path: str | Path) -> Campaign:
    """Read and validate a campaign file; every problem is a one-line ConfigError."""
    data, sha256 = read_toml(Path(path), "campaign file")
    return campaign_from_dict(data, Path(path), sha256)


def read_toml(file: Path, what: str) -> tuple[dict[str, Any], str]:
    """A TOML file's tables and the SHA-256 of its bytes; one-line ConfigError otherwise."""
    try:
        raw = file.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {file}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{file} is not valid TOML: {exc}") from None
    return data, hashlib.sha256(raw).hexdigest()


def campaign_from_dict(data: dict[str, Any], path: Path, sha256: str = "") -> Campaign:
    """Validate a parsed campaign table (paths are relative to the file's folder)."""
    top = Table(data, "campaign file")
    base = path.parent
    server = _server(top.table("server", required=True))
    devices = _devices(top.items("devices", required=True))
    load_table = top.table("load")
    default_bound = _bound(load_table, base)
    load = _load(load_table, base)
    entries = top.items("configs", required=True, kind=dict)
    configs = tuple(
        _config(Table(c, f"configs[{i}]"), base, default_bound) for i, c in enumerate(entries)
    )
    guard = _guard(top.table("guard"))
    differential = top.table("differential")
    campaign = Campaign(
        name=top.text("name", path.stem), path=path, sha256=sha256, server=server,
        devices=devices, configs=configs, load=load, guard=guard,
        order=top.choice("order", ORDERS, "interleaved"),
        repetitions=top.integer("repetitions", 1, minimum=1),
        reference=top.optional_str("reference"),
        reference_fraction=_fraction(differential),
        cluster=cluster_settings(top.table("cluster")),
    )  # fmt: skip
    top.done()
    if differential.data and campaign.reference is None:
        raise ConfigError('[differential] needs a reference config, e.g. reference = "eager"')
    _check(campaign)
    return campaign


def _check(campaign: Campaign) -> None:
    """Cross-field rules."""
    labels = [c.label for c in campaign.configs]
    if not labels:
        raise ConfigError("campaign file: give at least one [[configs]] entry")
    if len(set(labels)) != len(labels):
        raise ConfigError(f"configs: labels must be unique, got {', '.join(labels)}")
    names = [d.name for d in campaign.devices]
    if len(set(names)) != len(names):
        raise ConfigError(f"devices: names must be unique, got {', '.join(names)}")
    if campaign.reference is not None and campaign.reference not in labels:
        raise ConfigError(f"reference {campaign.reference!r} is not a config label")
    if campaign.reference is not None and campaign.cluster.engine == "ray":
        raise ConfigError('reference: not supported with [cluster] engine = "ray" yet')
    if not campaign.name or any(c in campaign.name for c in "/\\:"):
        raise ConfigError(f"name {campaign.name!r} must be non-empty without / \\ or :")


def _twin_fraction(table: Table) -> float:
    """`[load] twin_fraction`, in [0, 1]."""
    fraction = table.number("twin_fraction", 0.0)
    if not 0 <= fraction <= 1:
        raise ConfigError(f"load: twin_fraction must be in [0, 1], not {fraction:g}")
    return fraction


def _fraction(table: Table) -> float:
    """The `[differential]` table's sampled share of requests, in (0, 1]."""
    fraction = table.number("fraction", 0.03)
    if not 0 < fraction <= 1:
        raise ConfigError(f"differential: fraction must be in (0, 1], not {fraction:g}")
    table.done()
    return fraction


def _server(table: Table) -> ServerTemplate:
    command = table.text("command", None)
    check_template(command)
    health = table.optional_str("health")
    if health is not None and not health.startswith("/"):
        raise ConfigError(f"server.health must be a URL path like /health, not {health!r}")
    base_port = table.optional_int("base_port")
    if base_port is not None and not 1 <= base_port <= 65000:
        raise ConfigError(f"server.base_port must be 1..65000, not {base_port}")
    server = ServerTemplate(
        command=command, model=table.text("model", ""),
        health_paths=(health,) if health else DEFAULT_HEALTH_PATHS,
        startup_timeout_s=table.duration("startup_timeout", 600.0),
        warmup_requests=table.integer("warmup_requests", 2, minimum=0),
        stop_grace_s=table.duration("stop_grace", 30.0), host=table.text("host", "127.0.0.1"),
        base_port=base_port, env=table.env("env"),
    )  # fmt: skip
    table.done()
    check_env(server.env, "server.env")
    return server


def _devices(items: list[Any]) -> tuple[Device, ...]:
    if not items:
        raise ConfigError('devices: give at least one, e.g. ["cuda:0"] or ["cpu:0"]')
    devices = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            devices.append(Device.parse(item))
            continue
        if not isinstance(item, dict):
            raise ConfigError(f'devices[{i}] must be a string like "cuda:0" or a table')
        table = Table(item, f"devices[{i}]")
        devices.append(Device.parse(table.text("device", None), table.optional_str("name")))
        table.done()
    return tuple(devices)


def _bound(table: Table, base: Path) -> tuple[int | None, float | None, Path | None]:
    """The (requests, duration, plan) of a table; at most one of them."""
    requests = table.optional_int("requests", minimum=1)
    duration = table.optional_duration("duration")
    plan = table.optional_path("plan", base)
    if sum(v is not None for v in (requests, duration, plan)) > 1:
        raise ConfigError(f"{table.where}: give one of requests, duration or plan, not several")
    return requests, duration, plan


def _load(table: Table, base: Path) -> LoadSettings:
    load = LoadSettings(
        concurrency=table.integer("concurrency", 8, minimum=1),
        max_tokens=table.integer("max_tokens", 128, minimum=1),
        endpoint=table.choice("endpoint", ("completions", "chat"), "completions"),
        stream=table.flag("stream", True), temperature=table.number("temperature", 0.8),
        ignore_eos=table.flag("ignore_eos", False), token_ids=table.flag("token_ids", False),
        timeout_s=table.duration("timeout", 120.0), prompts=table.optional_path("prompts", base),
        prompt_order=table.choice("prompt_order", ("round-robin", "random"), "round-robin"),
        prompt_seed=table.integer("prompt_seed", 0), store_text=table.choice(
            "store_text", ("all", "flagged"), "all"),
        char_run_threshold=table.integer("char_run_threshold", 80, minimum=1),
        grace_s=table.duration("grace", 30.0),
        max_response_bytes=table.optional_int("max_response_bytes", minimum=1),
        rate=table.optional_positive("rate"),
        arrivals=table.choice("arrivals", ("poisson", "constant"), "poisson"),
        ramp_s=table.optional_duration("ramp"), prompt_tokens=table.optional_str("prompt_tokens"),
        synthetic_prompts=table.integer("synthetic_prompts", 500, minimum=1),
        tokenizer=_tokenizer_path(table, base),
        structure_via=table.choice("structure_via", ("openai", "llamacpp", "vllm", "guided"),
                                   "openai"),
        canaries=table.flag("canaries", False),
        twin_fraction=_twin_fraction(table), twin_gap=table.integer("twin_gap", 0, minimum=0),
        twin_at_rest=table.integer("twin_at_rest", 32, minimum=0),
    )  # fmt: skip
    table.done()
    if load.prompt_tokens is not None:
        from soakgate.prompts.synthetic import LengthDistribution

        if load.prompts is not None:
            raise ConfigError(f"{table.where}: give prompts or prompt_tokens, not both")
        try:
            LengthDistribution.parse(load.prompt_tokens)
        except SoakgateError as exc:
            raise ConfigError(f"{table.where}: prompt_tokens: {exc}") from None
    elif load.tokenizer is not None:
        raise ConfigError(f"{table.where}: tokenizer needs prompt_tokens")
    return load


def _tokenizer_path(table: Table, base: Path) -> Path | None:
    """A tokenizer.json, or a folder holding one, relative to the campaign file."""
    text = table.optional_str("tokenizer")
    if text is None:
        return None
    path = base / Path(text).expanduser()
    if not (path.is_file() or (path / "tokenizer.json").is_file()):
        raise ConfigError(f"{table.where}: tokenizer {path} is neither a tokenizer.json nor a "
                          "folder holding one")  # fmt: skip
    return path


def _config(
    table: Table, base: Path, default: tuple[int | None, float | None, Path | None]
) -> ConfigEntry:
    label = table.text("label", None)
    if not label.strip():
        raise ConfigError(f"{table.where}: label is empty")
    check_flags(table.text("flags", ""), label)
    requests, duration, plan = _bound(table, base)
    if requests is None and duration is None and plan is None:
        requests, duration, plan = default
    if requests is None and duration is None and plan is None:
        raise ConfigError(
            f"config {label!r}: give requests, duration or plan ([load] or the config)"
        )
    entry = ConfigEntry(label=label, flags=table.text("flags", ""), env=table.env("env"),
                        requests=requests, duration_s=duration, plan=plan)  # fmt: skip
    table.done()
    check_env(entry.env, f"env of config {label!r}:")
    return entry


def _guard(table: Table) -> GuardSettings:
    patterns = tuple(table.items("fatal_patterns", kind=str) or DEFAULT_FATAL_PATTERNS)
    patterns += tuple(table.items("extra_fatal_patterns", kind=str))
    compile_patterns(patterns)
    guard = GuardSettings(
        interval_s=table.duration("interval", 1.0),
        health_interval_s=table.duration("health_interval", 5.0),
        health_timeout_s=table.duration("health_timeout", 10.0),
        health_failures=table.integer("health_failures", 3, minimum=1),
        fatal_patterns=patterns, restart_on_log=table.flag("restart_on_log", True),
        max_restarts=table.integer("max_restarts", 3, minimum=0),
        restart_backoff_s=table.duration("restart_backoff", 5.0, allow_zero=True),
        telemetry=table.flag("telemetry", True),
        telemetry_interval_s=table.duration("telemetry_interval", 30.0),
    )  # fmt: skip
    table.done()
    return guard
