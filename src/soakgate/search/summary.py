"""What a search prints: its plan, its probes in order, the one-line answer, and the campaign
file of the minimal pair (clean, and clean with only the named knobs changed)."""

from __future__ import annotations

import math
from typing import Any

import tomli_w

from soakgate.search.algorithm import max_probes
from soakgate.search.knobs import compose
from soakgate.search.model import Search
from soakgate.search.plan import Scenario, clustered, simulate_factorial, simulate_search
from soakgate.search.walk import Probe, Walked
from soakgate.stats.rates import clopper_pearson

PLAN_SEARCHES = 400
"""Simulated searches behind the plan a search prints before it starts."""


def knob_lines(search: Search) -> list[str]:
    """One line per knob: its index, name, clean and failing values."""
    return [f"  k{i} {k.name}: {k.clean} -> {k.failing}" for i, k in enumerate(search.knobs)]


def plan_lines(search: Search, searches: int = PLAN_SEARCHES) -> list[str]:
    """The design of every probe and the simulated cost and errors of the search beside the
    full factorial's, for the failure needing one knob, and two (when there are two)."""
    d, s, count = search.design, search.settings, len(search.knobs)
    targets = len(search.campaign.devices)
    lines = [
        f"each probe: fails at >= {d.p_fail:.4%}, clean at <= {d.p_clean:.4%}; wrongly fails "
        f"with chance <= {d.fail_error:.2g}, wrongly clean <= {d.clean_error:.2g} (the bounds "
        f"{s.missed_knob:g} and {s.false_knob:g} shared over at most {max_probes(count)} probes); "
        f"about {d.expected_requests(s.baseline_rate):,.0f} requests at the baseline rate, "
        f"{d.expected_requests(s.failing_rate):,.0f} at the failing rate; decided by the sign of "
        f"its evidence after {d.max_requests:,} (marked truncated)",
        f"simulated ({searches} searches each, failures independent, ± Monte Carlo standard "
        "error): the search, and the full factorial judged by the same test at the same bounds",
    ]  # fmt: skip
    cases = [(0,)] + ([(0, count - 1)] if count > 1 else [])
    for needed in cases:
        scenario = Scenario(count, needed, s.failing_rate, s.baseline_rate,
                            s.block_requests * targets, s.baseline_every)  # fmt: skip
        found = simulate_search(d, scenario, searches)
        factorial, factorial_se, _ = simulate_factorial(
            scenario, s.false_knob, s.missed_knob, s.reproduce, s.design_effect,
            max(20, searches // 20),
        )  # fmt: skip
        lines.append(
            f"  failure needing {len(needed)} of {count} knobs: {found.requests:,.0f} "
            f"± {found.requests_se:,.0f} requests over {found.probes:.1f} probes, named exactly "
            f"{found.exact:.1%} ± {found.se(found.exact):.1%}, a knob that does not matter "
            f"{found.extra:.1%}, stopped {found.stopped:.1%}, warned of clustering "
            f"{found.warned:.1%}; full factorial "
            f"{factorial:,.0f} ± {factorial_se:,.0f} requests ({2**count} configurations)"
        )
    return lines


def probe_lines(search: Search, walked: Walked) -> list[str]:
    """Each probe in the order run: role, knobs changed, failures/answered, decision."""
    lines = []
    for probe in walked.probes:
        changed = "· " * max(probe.depth - 1, 0) + (
            "+".join(f"k{i}" for i in probe.knobs) or "none"
        )
        decision = probe.outcome or "undecided"
        if probe.decision is not None and probe.decision.truncated:
            decision += " (truncated: no error bound)"
        lines.append(
            f"  {probe.index:>3} {probe.role:<8} {changed:<24} {probe.failures:,}/"
            f"{probe.answered:,} = {_rate(probe)} in {len(probe.blocks)} blocks: {decision}"
        )
    return lines


def answer_line(search: Search, walked: Walked) -> str:
    """The one line: which knobs the failure follows, its rate there against the baseline's."""
    if walked.named is None:
        return f"no answer: {walked.stopped}"
    confirm = next(p for p in walked.probes if p.role == "confirm")
    baseline = walked.baseline
    knobs = " × ".join("{" + search.knobs[i].describe() + "}" for i in walked.named)
    return (
        f"the failure follows {knobs}: {_rate(confirm, True)} on fresh blocks vs "
        f"{_rate(baseline, True)} for {search.clean.label!r} (every baseline block)"
    )


PARTIAL_LEVEL = 0.01
"""Level of the exact test that says the named knobs explain only part of the failure."""


def partial_p_value(walked: Walked) -> float | None:
    """One-sided Fisher test that the failing configuration fails more often than the named
    knobs alone on fresh blocks (other knobs add failures of their own); None without both."""
    from scipy.stats import fisher_exact

    probes = {p.role: p for p in walked.probes}
    failing, confirm = probes.get("failing"), probes.get("confirm")
    if walked.named is None or failing is None or confirm is None:
        return None
    table = [[failing.failures, failing.answered - failing.failures],
             [confirm.failures, confirm.answered - confirm.failures]]  # fmt: skip
    return float(fisher_exact(table, alternative="greater").pvalue)


def partial_line(walked: Walked) -> str | None:
    """Said when the failing configuration fails significantly more than the named knobs do."""
    p_value = partial_p_value(walked)
    if p_value is None or p_value >= PARTIAL_LEVEL:
        return None
    probes = {p.role: p for p in walked.probes}
    return (
        f"the named knobs explain only part of the failure: {_rate(probes['failing'], True)} "
        f"with every knob changed (Fisher, one-sided, p = {p_value:.2g}); other knobs add "
        "failures of their own: search again with the named ones changed in the clean config"
    )


def guarantee_line(search: Search, walked: Walked) -> str:
    """The search-wide error statement with the assumptions it rests on, or, when the block counts
    say failures cluster beyond the design effect assumed, that it does not hold."""
    s, d = search.settings, search.design
    found = walked.dispersion
    if clustered(walked) and found is not None:
        return (
            f"failures cluster: block counts vary {found.ratio:.1f}x what one failing and one "
            f"clean rate with independent failures allow (Pearson, {found.df} df, p = "
            f"{found.p_value:.2g} against design_effect {d.design_effect:g}; bursts, drift, or a "
            "knob that moves the rate part-way): the error bounds do not hold; search again with "
            f"design_effect = {math.ceil(found.ratio)} (or from `soakgate plan --pilot`)"
        )
    return (
        f"search-wide: a named knob that does not matter with chance <= {s.false_knob:g}, a knob "
        f"that matters left out <= {s.missed_knob:g}, when failures are no more clustered than "
        f"design_effect {d.design_effect:g} allows (the block counts' dispersion test passed) and "
        f"every configuration fails at <= {d.p_clean:.4%} or >= {d.p_fail:.4%}; a truncated probe "
        "carries no bound"
    )


def minimal_campaign(search: Search, named: tuple[int, ...]) -> str:
    """A campaign file (TOML) of the minimal pair: the clean configuration, and the clean one with
    only the named knobs changed (label `minimal`), with the search file's other tables."""
    data: dict[str, Any] = {k: v for k, v in search.data.items() if k not in ("search", "configs")}
    data["name"] = f"{search.campaign.name}-minimal"
    raw_clean = next(c for c in search.data["configs"] if c.get("label") == search.clean.label)
    minimal = compose(search.clean, search.failing, list(search.knobs), named, "minimal")
    entry = {k: v for k, v in raw_clean.items() if k not in ("label", "flags", "env")}
    entry.update({"label": "minimal", "flags": minimal.flags})
    if minimal.env:
        entry["env"] = dict(minimal.env)
    data["configs"] = [raw_clean, entry]
    return tomli_w.dumps(data)


def _rate(probe: Probe, interval: bool = False) -> str:
    if probe.answered == 0:
        return "-"
    text = f"{probe.failures / probe.answered:.3%}"
    if interval:
        low, high = clopper_pearson(probe.failures, probe.answered)
        text += f" [{low:.3%}, {high:.3%}] ({probe.failures:,}/{probe.answered:,})"
    return text
