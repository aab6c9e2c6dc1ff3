"""Knobs: what differs between a clean and a failing configuration, one setting at a time, and
the configuration that changes only some of them.

A knob is one server option (`--max-num-seqs 8`, a switch such as `--enforce-eager`, every
occurrence of an option given more than once taken together), one key of an option whose value
is a JSON object (vLLM's `--compilation-config '{"mode": 3, "pass_config": {...}}'` gives
`--compilation-config.mode`, `--compilation-config.pass_config.enable_fusion`, ...; in a flags
template its braces are doubled, `'{{"mode": 3}}'`), or one environment variable. Flags are
split as a shell does (`shlex`); an option's value is the next word unless it starts with `-`,
or what follows `=`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from soakgate.campaign.model import ConfigEntry
from soakgate.errors import ConfigError

POSITIONAL = "(positional)"
"""The option name of words before the first option."""
MISSING = "(unset)"
"""How a knob's value is shown where the configuration does not set it."""


@dataclass(frozen=True, slots=True)
class Knob:
    """One setting that differs between the clean and the failing configuration."""

    name: str
    """What the user reads: `--flag`, `--json-option.key.sub`, or `$ENV_VAR`."""
    kind: str
    """`flag`, `json` or `env`."""
    option: str
    """The option (`flag`, `json`) or variable (`env`) it belongs to."""
    path: tuple[str, ...] = ()
    """The key path inside a JSON option."""
    clean: str = MISSING
    failing: str = MISSING

    def describe(self) -> str:
        """`name=failing` (the change the failure follows), e.g. `--compilation-config.mode=3`."""
        return f"{self.name}={self.failing}"


Options = dict[str, list[str | None]]
"""An option's name -> its values in order (None: a switch), in the order first given."""


def parse_flags(flags: str) -> Options:
    """Split a flags string into options (one-line ConfigError on unbalanced quotes)."""
    try:
        words = shlex.split(flags)
    except ValueError as exc:
        raise ConfigError(f"flags {flags!r}: {exc}") from None
    options: Options = {}
    name = POSITIONAL
    for word in words:
        if word.startswith("-") and not _number(word):
            name, equals, value = word.partition("=")
            options.setdefault(name, []).append(value if equals else None)
            if equals:
                name = POSITIONAL
        elif name != POSITIONAL and options[name][-1] is None:
            options[name][-1] = word
            name = POSITIONAL
        else:
            options.setdefault(POSITIONAL, []).append(word)
    return options


def diff_knobs(clean: ConfigEntry, failing: ConfigEntry) -> list[Knob]:
    """Every knob that differs between the two configurations, flags first, then environment."""
    before, after = parse_flags(clean.flags), parse_flags(failing.flags)
    knobs: list[Knob] = []
    for name in [*before, *(n for n in after if n not in before)]:
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        old_json, new_json = _json_object(old), _json_object(new)
        if (old_json is not None or old is None) and (new_json is not None or new is None):
            knobs += _json_knobs(name, old_json or {}, new_json or {})
        else:
            knobs.append(Knob(name, "flag", name, (), _show(old), _show(new)))
    for var in [*clean.env, *(v for v in failing.env if v not in clean.env)]:
        old_var, new_var = clean.env.get(var), failing.env.get(var)
        if old_var != new_var:
            knobs.append(Knob(f"${var}", "env", var, (), _or_missing(old_var),
                              _or_missing(new_var)))  # fmt: skip
    return knobs


def compose(
    clean: ConfigEntry, failing: ConfigEntry, knobs: list[Knob], changed: Iterable[int], label: str
) -> ConfigEntry:
    """The clean configuration with the knobs `changed` (indexes into `knobs`) set as in the
    failing one, labelled `label`."""
    options = parse_flags(clean.flags)
    target = parse_flags(failing.flags)
    env = dict(clean.env)
    json_values: dict[str, Any] = {}
    for index in sorted(set(changed)):
        knob = knobs[index]
        if knob.kind == "env":
            if knob.option in failing.env:
                env[knob.option] = failing.env[knob.option]
            else:
                env.pop(knob.option, None)
        elif knob.kind == "flag":
            _set_option(options, knob.option, target.get(knob.option))
        else:
            start = json_values.get(knob.option, _json_object(options.get(knob.option)) or {})
            wanted = _get_path(_json_object(target.get(knob.option)) or {}, knob.path)
            json_values[knob.option] = _set_path(start, knob.path, wanted)
    for option, value in json_values.items():
        had = options.get(option) is not None
        _set_option(options, option, [_escape(json.dumps(value))] if value or had else None)
    return replace(clean, label=label, flags=render_flags(options), env=env, plan=None)


def render_flags(options: Options) -> str:
    """The flags string of parsed options (positional words first, as given)."""
    words: list[str] = []
    for name, values in options.items():
        for value in values:
            if name != POSITIONAL:
                words.append(name)
            if value is not None:
                words.append(value)
    return shlex.join(words)


def _set_option(options: Options, name: str, values: list[str | None] | None) -> None:
    if values is None:
        options.pop(name, None)
    else:
        options[name] = list(values)


_ABSENT = object()


def _get_path(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _ABSENT
        obj = obj[key]
    return obj


def _set_path(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of `obj` with `path` set to `value` (removed when `_ABSENT`)."""
    top = json.loads(json.dumps(obj))
    node = top
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if value is _ABSENT:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return dict(top)


def _json_knobs(option: str, old: dict[str, Any], new: dict[str, Any]) -> list[Knob]:
    flat_old, flat_new = _flatten(old), _flatten(new)
    return [
        Knob(".".join((option, *path)), "json", option, path,
             _show_json(flat_old.get(path, _ABSENT)), _show_json(flat_new.get(path, _ABSENT)))
        for path in [*flat_old, *(p for p in flat_new if p not in flat_old)]
        if flat_old.get(path, _ABSENT) != flat_new.get(path, _ABSENT)
    ]  # fmt: skip


def _flatten(obj: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Leaf paths of a JSON object (an empty object is a leaf: it may mean something)."""
    flat: dict[tuple[str, ...], Any] = {}
    for key, value in obj.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, (*prefix, key)))
        else:
            flat[(*prefix, key)] = value
    return flat


def _json_object(values: list[str | None] | None) -> dict[str, Any] | None:
    """The JSON object an option was given, when it was given once and is one."""
    if values is None or len(values) != 1 or values[0] is None:
        return None
    text = _unescape(values[0].strip())
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _unescape(text: str) -> str:
    """A flags template writes a literal brace doubled (`{{"mode": 3}}`): the JSON it means."""
    return text.replace("{{", "{").replace("}}", "}")


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _show(values: list[str | None] | None) -> str:
    if values is None:
        return MISSING
    return " ".join("(set)" if v is None else v for v in values)


def _show_json(value: Any) -> str:
    return MISSING if value is _ABSENT else json.dumps(value, separators=(",", ":"))


def _or_missing(value: str | None) -> str:
    return MISSING if value is None else value


def _number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True
