"""The release gate: every outcome of a candidate arm judged against a baseline arm, and the one
line a pipeline's log should show.

The gate fails when some outcome of the candidate is worse than the baseline's after the
family-wise adjustment (Holm over outcomes and arms: `stats.outcomes.adjust_family`), or is
INDETERMINATE against B on overwhelming evidence (the batch t one run's check withheld, at p x
family size <= alpha / 50: a release gate errs toward failing;
`stats.outcomes.OVERWHELMING_FRACTION` says what that costs), and when
the candidate's servers crashed while the baseline's never did (a crash is a finding on its own,
whatever its p-value; `allow_crashes` opts out). A DIFFER between single instances fails it too,
and says so; `configurations_only` opts out of those.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from soakgate.records import CHECKS, NOT_ANY_FAILURE
from soakgate.report.formatting import percent
from soakgate.report.outcomes import IntArray, PerRequest, UnitOutcomes
from soakgate.stats.outcomes import (
    ANY_FAILURE,
    COLLAPSE,
    CRASH,
    CROSSTALK,
    DIVERGENCE,
    ERROR,
    INCONSISTENT,
    INVALID_STRUCTURE,
    OUTCOMES,
    OVERWHELMING_FRACTION,
    SHIFTED,
    SUSPECT,
    TWIN_MISMATCH,
    OutcomeComparison,
    adjust_family,
    crash_verdict,
    divergence_direction,
    divergence_verdict,
    divergence_words,
    rate_direction,
)
from soakgate.stats.verdict import CONFIGURATIONS, SCOPE_WORDS, decide

NAMES = {
    CRASH: "crashes", ERROR: "errors", COLLAPSE: "collapses", SUSPECT: "suspect",
    SHIFTED: "shifted (scores above the reference's p90)", DIVERGENCE: "divergence",
    CROSSTALK: "crosstalk", INVALID_STRUCTURE: "invalid structure",
    INCONSISTENT: "inconsistent numbers", TWIN_MISMATCH: "twin mismatch",
    ANY_FAILURE: "any failure",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class GateOptions:
    """What the gate lets pass."""

    allow_crashes: bool = False
    """A candidate that crashed where the baseline did not passes unless a test says worse."""
    configurations_only: bool = False
    """Fail only on configuration-level verdicts (replicate blocks), not on two instances."""
    outcomes: tuple[str, ...] = OUTCOMES
    """The outcomes judged (all by default)."""


@dataclass(slots=True)
class Gate:
    """A candidate (B) judged against a baseline (A) on every outcome both measured."""

    baseline: UnitOutcomes
    candidate: UnitOutcomes
    outcomes: list[OutcomeComparison]
    """Each outcome's comparison, adjusted in its family."""
    options: GateOptions = field(default_factory=GateOptions)

    @property
    def crashed_alone(self) -> bool:
        """The candidate's servers crashed and the baseline's, watched as well, never did
        (when crashes are among the outcomes judged)."""
        a, b = self.baseline.crash, self.candidate.crash
        judged = CRASH in self.options.outcomes
        return judged and a is not None and b is not None and b.crashes > 0 and a.crashes == 0

    def worse(self) -> list[OutcomeComparison]:
        """The outcomes on which B is judged worse, or not cleared (INDETERMINATE on overwhelming
        evidence against B: `OutcomeComparison.not_cleared`), within the scope the gate fails on."""
        return [
            o
            for o in self.outcomes
            if o.not_cleared
            and (not self.options.configurations_only or o.verdict.scope == CONFIGURATIONS)
        ]

    @property
    def fails(self) -> bool:
        """The gate's decision: exit 1 when true."""
        return bool(self.worse()) or (self.crashed_alone and not self.options.allow_crashes)

    def headline(self) -> str:
        """One line: PASS or FAIL, and what decided it."""
        a, b = self.baseline.name, self.candidate.name
        if not self.fails:
            judged = [NAMES[o.outcome] for o in self.outcomes if o.in_family]
            family = f"{len(judged)} outcome(s) with failures judged: {', '.join(judged)}"
            if not judged:
                family = "no failure of any kind in either arm"
            open_ = [NAMES[o.outcome] for o in self.outcomes
                     if o.in_family and o.word == "INDETERMINATE"]  # fmt: skip
            if open_:
                family += f"; INDETERMINATE, not resolved by this design: {', '.join(open_)}"
            return f"gate PASS: {b} is not shown worse than {a} ({family}; Holm-adjusted)"
        reasons = [outcome_words(o, self) for o in self.worse()]
        listed = {o.outcome for o in self.worse()}
        if self.crashed_alone and CRASH not in listed and not self.options.allow_crashes:
            reasons.insert(0, crash_alone_words(self))
        scopes = {o.verdict.scope for o in self.worse()} or {"instances"}
        scope = "; ".join(SCOPE_WORDS[s] for s in sorted(scopes))
        return f"gate FAIL: {b} fails more than {a}: {'; '.join(reasons)} [scope: {scope}]"


def crash_alone_words(gate: Gate) -> str:
    """`crashes 7 vs 0 (the candidate's servers crashed, the baseline's never did)`."""
    b = gate.candidate.crash
    assert b is not None
    return (
        f"crashes {b.crashes} vs 0 in {b.hours:.2g} h (the candidate's servers crashed, the "
        f"baseline's never did; {gate.candidate.crash_lost} request(s) lost to them)"
    )


def outcome_words(item: OutcomeComparison, gate: Gate) -> str:
    """An outcome's figures in a few words, e.g. `errors 24.4% vs 0% (58/238 vs 0/268, p=...)`."""
    name = NAMES[item.outcome]
    p = f"Holm p={item.adjusted_p:.3g}"
    if item.outcome == CRASH:
        return _crash_words(gate, name, p)
    if item.outcome == DIVERGENCE:
        mine, base = gate.candidate.divergence, divergence_base(gate.baseline, gate.candidate)
        assert mine is not None and base is not None
        return (
            f"{name} {divergence_words(mine.positions, mine.unit_word)} vs "
            f"{divergence_words(base, mine.unit_word)} ({divergence_basis(gate)}; {p})"
        )
    (ea, eb), (na, nb) = item.events, item.exposure
    rates = [percent(e / n, 1) if n else "-" for e, n in ((eb, nb), (ea, na))]
    words = f"{name} {rates[0]} vs {rates[1]} ({eb:,}/{nb:,.0f} vs {ea:,}/{na:,.0f}; {p})"
    if item.overwhelming and not item.worse:
        words += (
            f", INDETERMINATE yet not cleared: the dependence one run per arm cannot resolve "
            f"does not explain p <= {item.verdict.alpha * OVERWHELMING_FRACTION:.2g}"
        )
    return words


def _crash_words(gate: Gate, name: str, p: str) -> str:
    a, b = gate.baseline.crash, gate.candidate.crash
    assert a is not None and b is not None
    return (
        f"{name} {b.crashes} vs {a.crashes} ({_per_hour(b.per_hour)} vs "
        f"{_per_hour(a.per_hour)}; {gate.candidate.crash_lost} vs "
        f"{gate.baseline.crash_lost} requests lost; {p})"
    )


def _per_hour(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3g}/h"


def divergence_basis(gate: Gate) -> str:
    """What B's divergence was judged against."""
    b = gate.candidate.divergence
    if same_reference(gate.baseline, gate.candidate) and b is not None:
        return f"{gate.candidate.name} and {gate.baseline.name} against the {b.reference}"
    source = "during the soak" if b is not None and b.own_source == "repeats" else "before the soak"
    return f"{gate.candidate.name} against its reference vs the reference against itself {source}"


def _per_request(
    outcome: str, a: PerRequest | None, b: PerRequest | None, alpha: float, seed: int
) -> OutcomeComparison | None:
    if a is None or b is None or not a.n or not b.n:
        return None
    verdict = decide(a.outcomes(), b.outcomes(), alpha, seed)
    events, exposure = (a.events, b.events), (float(a.n), float(b.n))
    return OutcomeComparison(outcome, events, exposure, verdict,
                             rate_direction(events, exposure), a.events + b.events > 0)  # fmt: skip


def _crash(a: UnitOutcomes, b: UnitOutcomes, alpha: float) -> OutcomeComparison | None:
    if a.crash is None or b.crash is None:
        return None
    verdict = crash_verdict(a.crash, b.crash, alpha)
    events, exposure = (a.crash.crashes, b.crash.crashes), (a.crash.hours, b.crash.hours)
    return OutcomeComparison(CRASH, events, exposure, verdict, rate_direction(events, exposure),
                             sum(events) > 0)  # fmt: skip


def same_reference(a: UnitOutcomes, b: UnitOutcomes) -> bool:
    """Both arms were compared with one reference (or neither says which, as databases of older
    soakgates do): their divergences compare with each other."""
    x, y = a.divergence, b.divergence
    return x is not None and y is not None and x.reference == y.reference


def divergence_base(a: UnitOutcomes, b: UnitOutcomes) -> IntArray | None:
    """What B's divergence is judged against: A's (both compared with one reference), else B's
    reference's own; None when B was not compared or there is nothing to judge it against."""
    if b.divergence is None or not len(b.divergence.positions):
        return None
    base = a.divergence.positions if same_reference(a, b) and a.divergence else b.divergence.own
    return base if len(base) else None


def _divergence(a: UnitOutcomes, b: UnitOutcomes, alpha: float) -> OutcomeComparison | None:
    """B's first divergences against `divergence_base`."""
    base = divergence_base(a, b)
    if base is None or b.divergence is None:
        return None
    mine = b.divergence.positions
    verdict = divergence_verdict(base, mine, alpha, b.divergence.unit_word)
    events = (int((base >= 0).sum()), int((mine >= 0).sum()))
    return OutcomeComparison(DIVERGENCE, events, (float(len(base)), float(len(mine))), verdict,
                             divergence_direction(base, mine), sum(events) > 0)  # fmt: skip


def _any_failure(
    a: UnitOutcomes, b: UnitOutcomes, alpha: float, seed: int
) -> OutcomeComparison | None:
    """Any failure, when it unites at least two outcomes that failed somewhere (else it is one
    of them again, and would only be counted twice)."""
    with_suspect = a.suspect is not None and b.suspect is not None
    parts = [(a.error, b.error), (a.collapse, b.collapse)]
    if with_suspect:
        parts.append((a.suspect, b.suspect))
    parts += [(a.checks.get(name), b.checks.get(name)) for name in CHECKS
              if name not in NOT_ANY_FAILURE]  # fmt: skip
    failing = sum(1 for x, y in parts if (x.events if x else 0) + (y.events if y else 0) > 0)
    if failing < 2:
        return None
    return _per_request(ANY_FAILURE, a.any_failure(with_suspect), b.any_failure(with_suspect),
                        alpha, seed)  # fmt: skip


def outcome_comparisons(
    a: UnitOutcomes, b: UnitOutcomes, alpha: float = 0.05, seed: int = 0,
    outcomes: Sequence[str] = OUTCOMES,
) -> list[OutcomeComparison]:  # fmt: skip
    """Every outcome both arms measured, B against A, each at `alpha` (not yet adjusted)."""
    found: dict[str, Callable[[], OutcomeComparison | None]] = {
        CRASH: lambda: _crash(a, b, alpha),
        ERROR: lambda: _per_request(ERROR, a.error, b.error, alpha, seed),
        COLLAPSE: lambda: _per_request(COLLAPSE, a.collapse, b.collapse, alpha, seed),
        SUSPECT: lambda: _per_request(SUSPECT, a.suspect, b.suspect, alpha, seed),
        SHIFTED: lambda: _per_request(SHIFTED, a.shifted, b.shifted, alpha, seed),
        **{
            name: functools.partial(
                _per_request, name, a.checks.get(name), b.checks.get(name), alpha, seed
            )
            for name in CHECKS
        },
        DIVERGENCE: lambda: _divergence(a, b, alpha),
        ANY_FAILURE: lambda: _any_failure(a, b, alpha, seed),
    }
    return [item for name in outcomes if (item := found[name]()) is not None]


def judge(
    pairs: Sequence[tuple[UnitOutcomes, UnitOutcomes]], alpha: float = 0.05, seed: int = 0,
    options: GateOptions | None = None,
) -> list[Gate]:  # fmt: skip
    """A gate per (baseline, candidate) pair, every outcome of every pair in one Holm family."""
    options = options or GateOptions()
    gates = [
        Gate(a, b, outcome_comparisons(a, b, alpha, seed, options.outcomes), options)
        for a, b in pairs
    ]
    adjust_family([item for gate in gates for item in gate.outcomes], alpha)
    return gates


def outcome_line(item: OutcomeComparison, gate: Gate) -> str:
    """One outcome of a gate, for `compare`: figures, verdict after the adjustment, scope."""
    direction = {1: ", B worse", -1: ", B better"}.get(item.direction, "") if item.differ else ""
    v = item.verdict
    return (
        f"  {outcome_words(item, gate)}: {item.word}{direction} "
        f"({v.test} p={v.p_value:.3g}; {v.design}; scope: {v.scope})"
    )


def gate_lines(gate: Gate) -> list[str]:
    """The headline, then one line per outcome judged (and why the others were not)."""
    lines = [gate.headline()]
    lines += [outcome_line(item, gate) for item in gate.outcomes]
    judged = {item.outcome for item in gate.outcomes}
    missing = [NAMES[name] for name in gate.options.outcomes if name not in judged]
    if missing:
        lines.append(f"  not judged (not measured on both arms): {', '.join(missing)}")
    if gate.crashed_alone and gate.options.allow_crashes:
        lines.append(f"  {crash_alone_words(gate)}: allowed by --allow-crashes")
    return lines
