"""`--metrics-port` of `run` and `campaign`: serve the soak's own Prometheus metrics; and
`--progress-every`, what an unattended soak prints to its log."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any

from soakgate.cli.args import duration


def _port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return int(text)


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    """--metrics-port, --metrics-host, --metrics-linger."""
    parser.add_argument(
        "--metrics-port", type=_port, metavar="PORT",
        help="serve soakgate's own Prometheus metrics at http://HOST:PORT/metrics during the "
        "soak (0: a free port, printed)",
    )  # fmt: skip
    parser.add_argument(
        "--metrics-host", default="127.0.0.1", metavar="HOST",
        help="interface --metrics-port listens on (0.0.0.0: every interface)",
    )  # fmt: skip
    parser.add_argument(
        "--metrics-linger", type=duration, metavar="DURATION",
        help="after the soak, keep serving the final metrics this long (a last scrape; "
        "Ctrl-C/SIGTERM ends it early)",
    )  # fmt: skip


def _every(text: str) -> float:
    """A --progress-every value: a duration, or 0 for none."""
    return 0.0 if text.strip() in ("0", "0s") else duration(text)


def add_progress_argument(parser: argparse.ArgumentParser, always: bool = False) -> None:
    """--progress-every: the progress line of a soak whose stderr is not a terminal (`always`:
    of a command that has no live display, on a terminal too)."""
    when = "" if always else "when stderr is not a terminal (a CI log, nohup), "
    parser.add_argument(
        "--progress-every", type=_every, default=60.0, metavar="DURATION",
        help=f"{when}print a progress line on stderr this often (default 60s; 0: none)",
    )  # fmt: skip


def start_metrics(
    args: argparse.Namespace, guarded: bool = False, units: Iterable[tuple[str, str]] = ()
) -> Any:
    """The started LiveMetrics observer (None without --metrics-port); a port in use is a
    UsageError, raised before any load is sent. `guarded`: a campaign (guard faults too).
    `units`: the (label, target) pairs the soak will send to, expected before the address is
    announced, so that the first scrape a reader of that line makes serves each of them."""
    from soakgate.errors import UsageError

    if args.metrics_port is None:
        if args.metrics_linger is not None:
            raise UsageError("--metrics-linger needs --metrics-port")
        return None
    from soakgate.report.live_metrics import LiveMetrics

    metrics = LiveMetrics(args.metrics_host, args.metrics_port, guarded)
    url = metrics.start()
    metrics.expect(units)
    print(f"soakgate: serving metrics at {url}", file=sys.stderr, flush=True)
    return metrics


def finish_metrics(metrics: Any, args: argparse.Namespace, interrupted: bool = False) -> None:
    """Serve the final metrics for --metrics-linger (not after an interrupt), then stop."""
    if metrics is None:
        return
    from soakgate.report.live_metrics import linger

    try:
        if args.metrics_linger and not interrupted:
            announce = [f"soakgate: soak ended; serving the final metrics for "
                        f"{args.metrics_linger:g} s (Ctrl-C ends it)"]  # fmt: skip
            linger(args.metrics_linger, announce)
    finally:
        metrics.stop()
