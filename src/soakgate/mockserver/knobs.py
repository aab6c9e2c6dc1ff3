"""Knob-driven collapses: the mock's answers collapse according to the configuration it was
started with, so that a configuration search has something true to find.

A knob is a name and a string value, from three sources: `--knobs JSON` (flattened into dotted
names, like vLLM's `--compilation-config`), `--knob NAME=VALUE`, and every environment variable
`SOAKGATE_KNOB_<NAME>` (knob `$<NAME>`). A rule `COND[&COND...]@RATE`, each COND `KEY=VALUE`,
matches when every COND equals a knob exactly; the server then collapses each request with the
largest matching rate. Everything here is pure: the caller reads the environment.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from soakgate.errors import UsageError

ENV_PREFIX = "SOAKGATE_KNOB_"
"""Environment variables with this prefix are knobs, named `$` + the rest of their name."""


@dataclass(frozen=True, slots=True)
class KnobRule:
    """One `--knob-collapse` rule: when every condition holds, collapse at `rate`."""

    conditions: tuple[tuple[str, str], ...]
    """(knob name, value) pairs, all of which must equal a knob exactly."""
    rate: float
    """Collapse probability per request while the rule matches."""

    def matches(self, knobs: Mapping[str, str]) -> bool:
        """Whether every condition equals a knob (a knob not set never matches)."""
        return all(knobs.get(key) == value for key, value in self.conditions)


def render_value(value: object) -> str:
    """A knob's value as text: a string as it is, anything else as compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def flatten_knobs(obj: Mapping[str, object], prefix: str = "") -> dict[str, str]:
    """`{"a": {"b": true}, "c": 3}` as `{"a.b": "true", "c": "3"}`: nested objects recurse with
    dots, every other value is rendered by `render_value`."""
    knobs: dict[str, str] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            knobs.update(flatten_knobs(value, f"{name}."))
        else:
            knobs[name] = render_value(value)
    return knobs


def parse_knobs_json(text: str) -> dict[str, str]:
    """The knobs of one `--knobs` JSON object; UsageError when it is not one."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--knobs: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise UsageError(f"--knobs: expected a JSON object, got {type(obj).__name__}")
    return flatten_knobs(obj)


def parse_knob(text: str) -> tuple[str, str]:
    """`NAME=VALUE` (one `--knob`) as (NAME, VALUE); UsageError without `=` or a name."""
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise UsageError(f"--knob {text!r}: expected NAME=VALUE")
    return name, value


def env_knobs(environ: Mapping[str, str]) -> dict[str, str]:
    """The knobs of an environment: `SOAKGATE_KNOB_<NAME>=V` gives knob `$<NAME>` = V."""
    return {
        "$" + key[len(ENV_PREFIX) :]: value
        for key, value in environ.items()
        if key.startswith(ENV_PREFIX)
    }


def collect_knobs(
    knobs_json: str | None, knob_args: Iterable[str], environ: Mapping[str, str]
) -> dict[str, str]:
    """Every knob of a server: `--knobs`, then `--knob` (which wins over `--knobs` on the same
    name), then the environment's `$` knobs."""
    knobs = parse_knobs_json(knobs_json) if knobs_json is not None else {}
    knobs.update(parse_knob(text) for text in knob_args)
    knobs.update(env_knobs(environ))
    return knobs


def parse_rule(text: str) -> KnobRule:
    """`KEY=VALUE[&KEY=VALUE...]@RATE` as a KnobRule; UsageError naming what is wrong."""
    conditions_text, at, rate_text = text.rpartition("@")
    if not at:
        raise UsageError(f"--knob-collapse {text!r}: expected COND[&COND...]@RATE")
    try:
        rate = float(rate_text)
    except ValueError:
        raise UsageError(f"--knob-collapse {text!r}: rate {rate_text!r} is not a number") from None
    if not 0.0 <= rate <= 1.0:  # NaN too
        raise UsageError(f"--knob-collapse {text!r}: rate must be between 0 and 1")
    return KnobRule(tuple(_condition(part, text) for part in conditions_text.split("&")), rate)


def _condition(part: str, rule: str) -> tuple[str, str]:
    """One `KEY=VALUE` of a rule; UsageError when it is empty or has no key."""
    key, equals, value = part.partition("=")
    if not equals or not key:
        raise UsageError(f"--knob-collapse {rule!r}: condition {part!r} is not KEY=VALUE")
    return key, value


def knob_rate(rules: Iterable[KnobRule], knobs: Mapping[str, str]) -> float:
    """The largest rate among the rules that match `knobs` (0 when none does)."""
    return max((rule.rate for rule in rules if rule.matches(knobs)), default=0.0)


def describe(knobs: Mapping[str, str], rate: float) -> str:
    """The startup line that shows what the server was configured with."""
    return f"knobs: {json.dumps(dict(knobs), sort_keys=True)}; knob-collapse rate {rate}"
