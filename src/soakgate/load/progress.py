"""Live progress while soaking and the summary table at the end (rich)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from rich.live import Live
from rich.table import Table

from soakgate.load.spec import TargetTally
from soakgate.terminal import TextConsole


def _rate(collapses: int, requests: int) -> str:
    """A collapse rate as a percentage string."""
    return f"{100 * collapses / requests:.3f}%" if requests else "-"


def progress_table(
    label: str, tallies: Mapping[str, TargetTally], elapsed_s: float, total_s: float | None
) -> Table:
    """Per-target requests, collapses, errors, in flight and tok/s so far."""
    remaining = f" · {max(0.0, total_s - elapsed_s):.0f}s left" if total_s else ""
    table = Table(title=f"soakgate · {label} · {elapsed_s:.0f}s elapsed{remaining}")
    for column in ("target", "requests", "in flight", "collapses", "errors", "tok/s"):
        table.add_column(column, justify="right" if column != "target" else "left")
    for tally in tallies.values():
        tok_s = tally.tokens / elapsed_s if elapsed_s > 0 else 0.0
        table.add_row(
            tally.target, str(tally.requests), str(tally.in_flight), str(tally.collapses),
            str(tally.errors), f"{tok_s:,.0f}",
        )  # fmt: skip
    return table


def summary_table(label: str, tallies: Mapping[str, TargetTally], elapsed_s: float) -> Table:
    """The end-of-soak table: label, target, n, tok/s, clean tok/s, collapses, rate, errors."""
    table = Table(title="soakgate summary")
    columns = ("label", "target", "n", "tok/s", "clean tok/s", "collapses", "rate", "errors")
    for column in columns:
        table.add_column(column, justify="left" if column in ("label", "target") else "right")
    for tally in tallies.values():
        seconds = max(elapsed_s, 1e-9)
        table.add_row(
            label, tally.target, str(tally.requests), f"{tally.tokens / seconds:,.0f}",
            f"{tally.clean_tokens / seconds:,.0f}", str(tally.collapses),
            _rate(tally.collapses, tally.requests - tally.errors), str(tally.errors),
        )  # fmt: skip
    errors = {
        f"{t.target}: " + ", ".join(f"{k}={v}" for k, v in sorted(t.errors_by_class.items()))
        for t in tallies.values()
        if t.errors_by_class
    }
    if errors:
        table.caption = "errors by class — " + "; ".join(sorted(errors))
    return table


class LiveProgress:
    """A rich Live display refreshed from the driver's tick callback."""

    def __init__(
        self, label: str, total_s: float | None, console: TextConsole | None = None
    ) -> None:
        self.label = label
        self.total_s = total_s
        self.console = console or TextConsole(stderr=True)
        self._live = Live(console=self.console, refresh_per_second=4, transient=True)

    def __enter__(self) -> LiveProgress:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.__exit__(None, None, None)

    def update(self, tallies: Mapping[str, TargetTally], elapsed_s: float) -> None:
        """Redraw with the latest tallies."""
        self._live.update(progress_table(self.label, tallies, elapsed_s, self.total_s))


PROGRESS_EVERY_S = 60.0
"""How often a soak whose stderr is not a terminal prints a progress line (--progress-every)."""


def progress_line(tallies: Mapping[str, TargetTally], elapsed_s: float,
                  total_s: float | None) -> str:  # fmt: skip
    """`soakgate: 120 s elapsed, 480 s left: baseline@gpu0 1,234 requests, 2 collapses, ...`."""
    left = f", {max(0.0, total_s - elapsed_s):,.0f} s left" if total_s else ""
    units = "; ".join(
        f"{t.label + '@' if t.label else ''}{t.target} {t.requests:,} requests, "
        f"{t.collapses:,} collapses, {t.errors:,} errors, {t.in_flight} in flight"
        for t in tallies.values()
    )
    return f"soakgate: {elapsed_s:,.0f} s elapsed{left}: {units}"


class PlainProgress:
    """Progress for a log, not a terminal (a CI job, `nohup`, a pod): one line on stderr every
    `every_s` of soaking, from the soak's own ticks (a soak observer: `run` and every campaign
    block); nothing when `every_s` is 0."""

    def __init__(self, every_s: float, total_s: float | None = None, stream: Any = None) -> None:
        self.every_s, self.total_s = every_s, total_s
        self.stream = stream if stream is not None else sys.stderr
        self._next: float | None = None
        self._tallies: object = None

    def on_tick(self, tallies: dict[str, TargetTally], elapsed_s: float) -> None:
        """Print a line when `every_s` has passed since the last (a new soak restarts the clock)."""
        if not self.every_s:
            return
        if tallies is not self._tallies:
            self._tallies, self._next = tallies, elapsed_s + self.every_s
        assert self._next is not None
        if elapsed_s >= self._next:
            self._next = elapsed_s + self.every_s
            print(progress_line(tallies, elapsed_s, self.total_s), file=self.stream, flush=True)

    def close(self, stopped_by: str | None) -> None:
        """Nothing to release."""
