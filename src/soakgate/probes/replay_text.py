"""What `soakgate replay` prints: a line per replayed collapse, then the evidence each verdict
rests on with the level its test had to beat, what each verdict means, and where it is stored."""

from __future__ import annotations

from soakgate.probes.replay import ReplayConfig, ReplayResult
from soakgate.probes.reproduce import MEANING, NO_ANSWER, Tally


def _p(value: float, level: float) -> str:
    return f"p = {value:.3g} (needs < {level:.3g})"


def _rate(tally: Tally) -> str:
    return tally.describe()


def summary_lines(result: ReplayResult, config: ReplayConfig) -> list[str]:
    """The printed summary of a replay."""
    n = config.repeats
    lines = [
        f"replayed {len(result.replayed)} collapsed generation(s) on {config.target.name}: "
        f"{n}x alone greedy and {n}x alone with their own sampling, each pair followed by a "
        f"control prompt, then {n}x under load",
        f"{'request':<24} {'unit':<24} {'alone greedy':<16} {'alone sampled':<16} "
        f"{'under load':<16} verdict",
    ]
    for item in result.replayed:
        r = item.request
        lines.append(
            f"{r.request_id:<24} {r.label + '@' + r.target:<24} {item.greedy.short():<16} "
            f"{item.sampled.short():<16} {item.under_load.short():<16} {item.verdict}"
        )
    lines += _evidence_lines(result)
    lines += [f"{v}: {MEANING[v]}" for v in dict.fromkeys(i.verdict for i in result.replayed)]
    if result.stopped:
        lines.append(f"stopped early: {result.stopped}")
    lines.append(
        f"stored as probe run {result.run.run_id} in {config.db} (soakgate report shows it)"
    )
    return lines


def _evidence_lines(result: ReplayResult) -> list[str]:
    """The tests behind the verdicts, each with the figures it compared and its level."""
    judged = [i for i in result.replayed if i.judgement is not None]
    if not judged:
        return []
    first = judged[0].judgement
    assert first is not None
    levels = first.thresholds
    lines = [
        f"control prompt alone: {_rate(result.control_alone)}; input-triggered needs a row's "
        f"replays alone to collapse more often (one-sided Fisher, p < {levels['input']:.3g})",
        f"alone, replays and controls in the server's order: "
        f"{sum(c for _, c in result.alone_sequence)} collapsed of "
        f"{len(result.alone_sequence)}, runs test "
        f"{_p(first.state_p, levels['state'])} (state-driven also needs the control to collapse)",
    ]
    alone = result.alone_pool()
    for source, tally in result.background.items():
        pool = result.load_pool(source)
        load_p = next(
            i.judgement.load_p for i in judged if i.request.run_id == source and i.judgement
        )
        answered = tally.requests - tally.errors
        lines.append(
            f"under load for run {source}: {_rate(pool)} (background soak {tally.collapses}/"
            f"{answered}, {tally.errors} failed) against alone {_rate(alone)}: "
            f"{_p(load_p, levels['load'])}"
        )
    for item in judged:
        j = item.judgement
        if j is not None and j.verdict != NO_ANSWER and item.alone.collapsed:
            lines.append(
                f"{item.request.request_id}: alone {_rate(item.alone)} against the control: "
                f"{_p(j.input_p, levels['input'])}"
            )
    return lines
