"""Pre-registered comparison plans: build, write/read as TOML, hash, and apply their rule.

A plan fixes the comparison before any data exist; its SHA-256 over a canonical JSON
serialisation is what the store registers, so reformatting the TOML keeps the hash and any
change of content breaks it.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soakgate.errors import ConfigError, UsageError
from soakgate.stats.power import MIN_PLAN_BLOCKS, check_design
from soakgate.stats.sequential import SequentialRule

PLAN_VERSION = 1
TESTS = ("auto", "pooled_z", "fisher", "poisson_exact", "batch_means", "quasi_poisson")
FIXED_RULE = "two_sided_p_below_alpha"
SEQUENTIAL_RULE = "group_sequential_obrien_fleming"


@dataclass(frozen=True, slots=True)
class Plan:
    """A pre-registration: what is compared, on which unit, by which test and rule."""

    hypothesis: str
    """The hypothesis in words."""
    arms: tuple[str, str]
    """Labels of the reference arm A and arm B."""
    baseline_rate: float
    """Expected failure rate of arm A used for the power calculation."""
    ratio: float
    """Rate ratio B / A the plan is powered to detect."""
    alpha: float = 0.05
    """Two-sided significance level."""
    power: float = 0.8
    """Power at `ratio`."""
    unit: str = "target"
    """Unit of analysis: one target (one GPU's server) in one run."""
    matched_targets: bool = False
    """True: both arms must have run on the same targets (`plan --matched-targets`); False
    suits arms soaked side by side on different servers (`run --arm`)."""
    test: str = "auto"
    """Test the verdict uses; `auto` = the tool's documented choice (robust when clustered)."""
    design_effect: float = 1.0
    """Variance inflation the sample size allows for."""
    n_per_arm: int | None = None
    """Fixed design: generations per arm."""
    sequential: SequentialRule | None = None
    """Sequential design: the stopping rule (then `n_per_arm` is the fixed-design figure)."""
    decision_rule: str = ""
    """The rule in words."""
    blocks: int | None = None
    """Replicate-block design: blocks per arm (each a run of a freshly started server)."""
    requests_per_block: int | None = None
    """Replicate-block design: requests per target in each block."""
    warmup_requests: int | None = None
    """Requests each block's server (or each run's) is soaked before counting starts: soaked,
    stored and marked, never counted (None: counting starts at the first request)."""

    @property
    def rule(self) -> str:
        """Machine-readable rule name."""
        return SEQUENTIAL_RULE if self.sequential else FIXED_RULE


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict exactly by the plan's rule, and where the data deviate from the plan."""

    verdict: str
    """`differ`, `no_difference` or `continue` (sequential only)."""
    test: str
    """Test whose result decided."""
    p_value: float
    """p-value of that test (for sequential plans, of its fixed-sample test)."""
    deviations: tuple[str, ...]
    """Each way the data or analysis departs from the plan; empty when none."""
    reason: str
    """One line explaining the verdict."""
    plan_sha256: str
    """Hash of the plan applied."""


def make_plan(
    hypothesis: str,
    arms: Sequence[str],
    baseline_rate: float,
    ratio: float,
    alpha: float = 0.05,
    power: float = 0.8,
    design_effect: float = 1.0,
    looks: int | None = None,
    test: str = "auto",
    blocks: int | None = None,
    requests_per_block: int | None = None,
    matched_targets: bool = False,
    *,
    n_per_arm: int | None = None,
    n_max_per_arm: int | None = None,
    warmup_requests: int | None = None,
) -> Plan:
    """A plan with its sizes filled in: with `looks`, an O'Brien–Fleming stopping rule up to
    n max; with `blocks` or `requests_per_block`, a replicate-block design; else one run per
    arm. A size not given is the one the verdict soakgate applies needs for `power`, simulated
    under independent requests (short bursts when `design_effect` > 1): `stats.sizing`."""
    check_design(baseline_rate, ratio, alpha, power)
    question = (baseline_rate, ratio, alpha, power, design_effect)
    sequential = None
    if looks is not None:
        if blocks is not None or requests_per_block is not None:
            raise UsageError("a sequential plan looks at one run per arm; drop --blocks")
        sequential = SequentialRule(looks, n_max_per_arm or _sized(*question, looks=looks))
    elif blocks is not None or requests_per_block is not None:
        if blocks is None or requests_per_block is None:
            blocks, requests_per_block = _sized_blocks(*question, blocks, requests_per_block)
        n_per_arm = blocks * requests_per_block
    elif n_per_arm is None:
        n_per_arm = _sized(*question)
    plan = Plan(
        hypothesis=hypothesis,
        arms=_two_arms(arms),
        baseline_rate=baseline_rate,
        ratio=ratio,
        alpha=alpha,
        power=power,
        test=test,
        design_effect=design_effect,
        n_per_arm=n_per_arm if sequential is None else None,
        sequential=sequential,
        blocks=blocks,
        requests_per_block=requests_per_block,
        matched_targets=matched_targets,
        warmup_requests=warmup_requests or None,
    )
    _validate(plan)
    return Plan(**{**_fields(plan), "decision_rule": describe_rule(plan)})


def _sized(
    rate: float, ratio: float, alpha: float, power: float, spread: float, looks: int | None = None
) -> int:
    """n per arm (or n max for looks) by simulating the verdict under the assumed process."""
    from soakgate.stats.delivered import OneRun, SequentialRun
    from soakgate.stats.models import assumed_model
    from soakgate.stats.sizing import size_one_run, size_sequential

    model = assumed_model(rate, spread)
    if looks is None:
        one = size_one_run(model, rate, ratio, alpha, power).design
        assert isinstance(one, OneRun)
        return one.n
    found = size_sequential(model, rate, ratio, alpha, power, looks).design
    assert isinstance(found, SequentialRun)
    return found.rule.n_max_per_arm


def _sized_blocks(
    rate: float,
    ratio: float,
    alpha: float,
    power: float,
    spread: float,
    blocks: int | None,
    length: int | None,
) -> tuple[int, int]:
    from soakgate.stats.delivered import Blocks
    from soakgate.stats.models import assumed_model
    from soakgate.stats.sizing import size_blocks

    if blocks is not None and blocks < MIN_PLAN_BLOCKS:
        raise UsageError(f"a block design needs at least {MIN_PLAN_BLOCKS} blocks per arm")
    found = size_blocks(assumed_model(rate, spread), rate, ratio, alpha, power, blocks, length)
    assert isinstance(found.design, Blocks)
    return found.design.blocks, found.design.length


def describe_rule(plan: Plan) -> str:
    """The decision rule in words."""
    arms = f"{plan.arms[1]} vs {plan.arms[0]}"
    unresolved = (
        "'indeterminate' (never 'differ') when one run per arm cannot resolve its dependence"
    )
    if plan.sequential:
        s = plan.sequential
        return (
            f"{arms}: {s.looks} equally spaced looks up to {s.n_max_per_arm} per arm; at each look "
            f"'differ' if the verdict's robust t crosses the O'Brien-Fleming (Lan-DeMets) "
            f"boundary at two-sided alpha {plan.alpha}, taken to the t scale at its degrees of "
            f"freedom; 'no difference' if n max is reached without crossing; {unresolved}"
        )
    if plan.blocks is not None:
        warm = (
            f", counted after a warm-up of {plan.warmup_requests} requests soaked on each"
            if plan.warmup_requests
            else ""
        )
        return (
            f"{arms}: {plan.blocks} replicate blocks per arm of {plan.requests_per_block} "
            f"requests{warm}, each on a freshly started server; 'differ' if the two-sided p-value "
            f"of the {plan.test} test over blocks is below {plan.alpha}, else 'no difference'"
        )
    return (
        f"{arms}: after {plan.n_per_arm} generations per arm, 'differ' if the two-sided p-value "
        f"of the {plan.test} test is below {plan.alpha}, else 'no difference'; {unresolved}"
    )


def _two_arms(arms: Sequence[str]) -> tuple[str, str]:
    if len(arms) != 2 or not all(isinstance(a, str) and a for a in arms):
        raise UsageError("a plan needs exactly two arm labels")
    return (arms[0], arms[1])


def _validate(plan: Plan) -> None:
    check_design(plan.baseline_rate, plan.ratio, plan.alpha, plan.power)
    if plan.test not in TESTS:
        raise UsageError(f"unknown test {plan.test!r}; choose from {', '.join(TESTS)}")
    if plan.design_effect < 1.0:
        raise UsageError(f"design effect must be >= 1, got {plan.design_effect}")
    if plan.n_per_arm is None and plan.sequential is None:
        raise UsageError("a plan needs n per arm or a sequential stopping rule")
    if plan.sequential and (plan.sequential.looks < 1 or plan.sequential.n_max_per_arm < 1):
        raise UsageError("a sequential rule needs at least one look and a positive n max")
    if (plan.blocks is None) != (plan.requests_per_block is None):
        raise UsageError("a block design needs both blocks and requests per block")
    if plan.blocks is not None and (plan.blocks < 2 or (plan.requests_per_block or 0) < 1):
        raise UsageError("a block design needs at least 2 blocks of at least 1 request")
    if plan.warmup_requests is not None and plan.warmup_requests < 0:
        raise UsageError(f"warm-up must be >= 0 requests, got {plan.warmup_requests}")


def _fields(plan: Plan) -> dict[str, Any]:
    return {name: getattr(plan, name) for name in Plan.__slots__}


_FLOAT_FIELDS = frozenset({"baseline_rate", "ratio", "alpha", "power", "design_effect"})


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """TOML- and JSON-ready dict of the plan (None omitted: TOML has no null)."""
    data: dict[str, Any] = {"version": PLAN_VERSION, "rule": plan.rule}
    for name, value in _fields(plan).items():
        if value is None:
            continue
        if isinstance(value, SequentialRule):
            value = {k: getattr(value, k) for k in SequentialRule.__slots__}
            value = {k: v for k, v in value.items() if v is not None}
        if name in _FLOAT_FIELDS:
            value = float(value)  # `ratio=4` and `ratio = 4.0` in TOML are the same plan
        data[name] = list(value) if isinstance(value, tuple) else value
    return data


def plan_from_dict(data: dict[str, Any]) -> Plan:
    """Rebuild a plan from its dict; raises ConfigError naming what is wrong."""
    try:
        if data.get("version") != PLAN_VERSION:
            raise ConfigError(f"unsupported plan version {data.get('version')!r}")
        seq = data.get("sequential")
        sequential = None
        if seq is not None:
            futility = seq.get("futility_z")
            sequential = SequentialRule(
                int(seq["looks"]),
                int(seq["n_max_per_arm"]),
                None if futility is None else float(futility),
            )
        n_fixed = data.get("n_per_arm")
        blocks, per_block = data.get("blocks"), data.get("requests_per_block")
        warmup = data.get("warmup_requests")
        plan = Plan(
            hypothesis=str(data["hypothesis"]),
            arms=_two_arms(data["arms"]),
            baseline_rate=float(data["baseline_rate"]),
            ratio=float(data["ratio"]),
            alpha=float(data.get("alpha", 0.05)),
            power=float(data.get("power", 0.8)),
            unit=str(data.get("unit", "target")),
            matched_targets=bool(data.get("matched_targets", False)),
            test=str(data.get("test", "auto")),
            design_effect=float(data.get("design_effect", 1.0)),
            n_per_arm=None if n_fixed is None else int(n_fixed),
            sequential=sequential,
            decision_rule=str(data.get("decision_rule", "")),
            blocks=None if blocks is None else int(blocks),
            requests_per_block=None if per_block is None else int(per_block),
            warmup_requests=None if warmup is None else int(warmup),
        )
        _validate(plan)
    except KeyError as exc:
        raise ConfigError(f"plan is missing the field {exc.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"plan has a field of the wrong type: {exc}") from None
    except UsageError as exc:
        raise ConfigError(f"plan is not usable: {exc}") from None
    if data.get("rule", plan.rule) != plan.rule:
        raise ConfigError(f"plan rule {data['rule']!r} does not match its fields")
    return plan


def plan_sha256(plan: Plan) -> str:
    """SHA-256 of the canonical serialisation: sorted-key compact JSON of the plan's fields."""
    canonical = json.dumps(plan_to_dict(plan), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def write_plan(plan: Plan, path: str | Path) -> str:
    """Write the plan as TOML; returns its SHA-256."""
    import tomli_w

    try:
        Path(path).write_text(tomli_w.dumps(plan_to_dict(plan)), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write plan {path}: {exc.strerror or exc}") from None
    return plan_sha256(plan)


def read_plan(path: str | Path) -> Plan:
    """Read a TOML plan; a missing, unreadable or invalid file raises ConfigError (one line)."""
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"cannot read plan {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"plan {path} is not valid TOML: {exc}") from None
    try:
        return plan_from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"plan {path}: {exc}") from None
