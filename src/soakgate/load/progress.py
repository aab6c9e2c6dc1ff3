"""Live progress while soaking and the summary table at the end (rich)."""

from __future__ import annotations

from collections.abc import Mapping

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
