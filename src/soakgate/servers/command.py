"""Server command templates and device pinning: pure helpers, no processes."""

from __future__ import annotations

import re
import shlex
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath

from soakgate.errors import ConfigError

PLACEHOLDERS = (
    "model", "port", "flags", "device", "python", "log_dir", "campaign_dir", "block", "label",
    "instance", "host",
)  # fmt: skip
"""Names a `server.command` template may use, e.g. `vllm serve {model} --port {port} {flags}`;
a config's flags may use all of them but {flags}."""
PLACEHOLDERS_IN_FLAGS = tuple(p for p in PLACEHOLDERS if p != "flags")

# Vendor -> environment variable that pins a process to one device (None: nothing to pin).
VENDOR_ENV: dict[str, str | None] = {
    "cuda": "CUDA_VISIBLE_DEVICES",
    "xpu": "ZE_AFFINITY_MASK",
    "rocm": "HIP_VISIBLE_DEVICES",
    "cpu": None,
}
_VENDOR_ALIASES = {
    "cuda": "cuda", "nvidia": "cuda", "gpu": "cuda",
    "xpu": "xpu", "intel": "xpu", "level_zero": "xpu", "ze": "xpu",
    "rocm": "rocm", "hip": "rocm", "amd": "rocm",
    "cpu": "cpu",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Device:
    """One device a server instance is pinned to; its name is the target (unit of analysis)."""

    vendor: str
    """`cuda`, `xpu`, `rocm` or `cpu`."""
    index: str
    """Device index (or mask) as the vendor's variable takes it, e.g. `0` or `0.1`."""
    name: str
    """Target name of the instance on this device, e.g. `cuda:0`."""

    @classmethod
    def parse(cls, text: str, name: str | None = None) -> Device:
        """`vendor:index` (e.g. `cuda:0`, `xpu:1`, `cpu:0`); a bad spec is a ConfigError."""
        vendor, _, index = text.strip().partition(":")
        canonical = _VENDOR_ALIASES.get(vendor.lower())
        if canonical is None or not index or any(c.isspace() for c in index):
            known = ", ".join(VENDOR_ENV)
            raise ConfigError(f"device {text!r} is not VENDOR:INDEX with VENDOR one of {known}")
        return cls(canonical, index, name or f"{canonical}:{index}")

    def env(self) -> dict[str, str]:
        """Environment that pins a process to this device (empty for CPU)."""
        variable = VENDOR_ENV[self.vendor]
        return {} if variable is None else {variable: self.index}


def check_template(
    template: str, what: str = "server.command", known: tuple[str, ...] = PLACEHOLDERS
) -> None:
    """Raise ConfigError when the template is empty, malformed or uses an unknown placeholder."""
    if not template.strip():
        raise ConfigError(f"{what} is empty")
    fields = _fields(template, what)
    try:
        shlex.split(template)
    except ValueError as exc:
        raise ConfigError(f"{what} cannot be parsed: {exc}") from None
    _refuse_unknown(fields, what, known)


def check_env(env: Mapping[str, str], where: str) -> None:
    """Raise ConfigError when an environment value uses an unknown placeholder or stray braces.

    Values are templates like flags (`{instance}`, `{log_dir}` ...), so a per-instance path such
    as a compile cache is one line; `{{` and `}}` are literal braces."""
    hint = " (write {{ and }} for braces)"
    for name, value in env.items():
        what = f"{where} {name}"
        _refuse_unknown(_fields(value, what, hint), what, PLACEHOLDERS_IN_FLAGS, hint)


def _fields(template: str, what: str, hint: str = "") -> set[str]:
    """The placeholder names a format template uses; ConfigError when it cannot be parsed."""
    try:
        return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ConfigError(f"{what} cannot be parsed: {exc}{hint}") from None


def _refuse_unknown(fields: set[str], what: str, known: tuple[str, ...], hint: str = "") -> None:
    """ConfigError naming the placeholders that are not `known`."""
    unknown = sorted(f for f in fields if f not in known)
    if unknown:
        used = ", ".join("{" + u + "}" for u in unknown)
        names = ", ".join("{" + p + "}" for p in known)
        raise ConfigError(f"{what} uses unknown placeholder(s) {used}; known: {names}{hint}")


def render_env(env: Mapping[str, str], values: Mapping[str, str]) -> dict[str, str]:
    """An instance's environment: each value filled like a flag (checked by `check_env`)."""
    flag_values = {k: v for k, v in values.items() if k != "flags"}
    check_env(env, "env")
    return {name: value.format_map(flag_values) for name, value in env.items()}


def check_flags(flags: str, label: str) -> None:
    """Raise ConfigError when a config's flags are malformed or use an unknown placeholder."""
    if flags.strip():
        check_template(flags, f"flags of config {label!r}", PLACEHOLDERS_IN_FLAGS)


def render_command(template: str, values: Mapping[str, str]) -> list[str]:
    """The argv of a template: split first (so a value with spaces stays one argument),
    then fill each word; a word that is exactly `{flags}` expands to the flags' own words,
    each filled in turn. A word a shell will run as a script (`sh -c '...'`) gets every value
    shell-quoted, so a label such as `$(touch x)` or a folder with spaces is data, not code."""
    check_template(template)
    flags = values.get("flags", "")
    check_flags(flags, values.get("label", ""))
    flag_values = {k: v for k, v in values.items() if k != "flags"}
    words = shlex.split(template)
    scripts = _shell_script_words(words)
    argv: list[str] = []
    for index, word in enumerate(words):
        if index in scripts:
            argv.append(word.format_map(_quoted(values, flag_values)))
        elif word == "{flags}":
            argv.extend(w.format_map(flag_values) for w in shlex.split(flags))
        else:
            argv.append(word.format_map(dict(values)))
    return argv


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})
_SCRIPT_OPTION = re.compile(r"-[A-Za-z]*c[A-Za-z]*")  # -c, -lc, -ec, -xc ...


def _shell_script_words(words: list[str]) -> set[int]:
    """Indexes of the words that a shell in the command will parse as a script."""
    scripts: set[int] = set()
    shell = False
    for index, word in enumerate(words):
        if PurePath(word).name in _SHELLS:
            shell = True
        elif shell and _SCRIPT_OPTION.fullmatch(word) and index + 1 < len(words):
            scripts.add(index + 1)
            shell = False
    return scripts


def _quoted(values: Mapping[str, str], flag_values: Mapping[str, str]) -> dict[str, str]:
    """Every value shell-quoted; the flags stay several words, each filled and quoted."""
    quoted = {k: shlex.quote(v) for k, v in values.items()}
    flags = values.get("flags", "")
    quoted["flags"] = " ".join(shlex.quote(w.format_map(flag_values)) for w in shlex.split(flags))
    return quoted
