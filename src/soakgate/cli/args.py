"""Argument types shared by the commands: durations, positive numbers, target lists."""

from __future__ import annotations

import argparse
from typing import Any

from soakgate.durations import parse_duration


def duration(text: str) -> float:
    """Seconds from `90`, `30s`, `5m`, `2h`, `1.5h`, `1d`."""
    seconds = parse_duration(text)
    if seconds is None:
        positive = " (it must be positive)" if text.lstrip().startswith("-") else ""
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30s, 5m or 2h{positive}")
    return seconds


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 0")
    return value


def fraction(text: str) -> float:
    """A number in [0, 1]."""
    value = non_negative_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def top_p(text: str) -> float:
    """A nucleus-sampling mass: in (0, 1]."""
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1]: it is a probability mass")
    return value


CONNECTION_MARGIN = 64
"""File descriptors kept free beside the soak's connections (store, logs, metrics scrapes)."""


def check_concurrency(
    concurrency: int, requests: int | None, connections: int, given: bool = True
) -> None:
    """UsageError for a concurrency that cannot mean what it says: more requests in flight than
    will ever be sent (when the concurrency was `given`: a default above a small --requests is
    harmless), or more connections than this process may open (`connections` of them; the soft
    open-files limit is raised toward the hard one first, as load generators do)."""
    import resource

    from soakgate.errors import UsageError

    if given and requests is not None and concurrency > requests:
        raise UsageError(
            f"--concurrency {concurrency} is more than the {requests} requests per target: at most "
            f"{requests} are ever in flight; give --concurrency {requests} or less"
        )
    need = connections + CONNECTION_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if need <= soft:
        return
    if hard == resource.RLIM_INFINITY or need <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        return
    raise UsageError(
        f"--concurrency {concurrency} needs about {need} open connections; this process may "
        f"open {hard} (raise `ulimit -n`, or lower --concurrency)"
    )


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


_EXPLICIT = "_explicit_options"


def track_explicit(parser: argparse.ArgumentParser) -> None:
    """Make `parser` record which options were given on the command line (argparse only calls
    an option's action when it is given; defaults are set without it), for `explicit_options`."""
    for action in parser._actions:
        if action.option_strings and not isinstance(
            action, argparse._HelpAction | argparse._VersionAction
        ):
            action.__class__ = _tracking(type(action))


_TRACKING: dict[type[argparse.Action], type[argparse.Action]] = {}


def _tracking(cls: type[argparse.Action]) -> type[argparse.Action]:
    """A subclass of `cls` (one per action class) whose call records its dest."""
    if cls in _TRACKING:
        return _TRACKING[cls]

    def __call__(
        self: argparse.Action,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, _EXPLICIT, getattr(namespace, _EXPLICIT, frozenset()) | {self.dest})
        cls.__call__(self, parser, namespace, values, option_string)

    _TRACKING[cls] = type(f"Explicit{cls.__name__}", (cls,), {"__call__": __call__})
    return _TRACKING[cls]


def explicit_options(args: argparse.Namespace) -> frozenset[str]:
    """The dests of the options given on the command line (see `track_explicit`)."""
    given: frozenset[str] = getattr(args, _EXPLICIT, frozenset())
    return given


def add_gate_arguments(parser: argparse.ArgumentParser, who: str) -> None:
    """--fail-on-differ, --allow-crashes and --configurations-only: the release gate's options
    (report/gate.py), for `compare` and `campaign`; `who` says what fails it."""
    parser.add_argument(
        "--fail-on-differ", action="store_true",
        help=f"the release gate: exit 1 when {who} is judged worse on any outcome (crashes, "
        "server errors, collapses, suspect, divergence, any failure; Holm across them), or is "
        "INDETERMINATE with it worse on overwhelming evidence (not cleared), or its "
        "servers crashed and the baseline's never did",
    )  # fmt: skip
    parser.add_argument(
        "--allow-crashes", action="store_true",
        help="a crash alone is no finding (the crash-rate test still is, when it finds worse)",
    )  # fmt: skip
    parser.add_argument(
        "--configurations-only", action="store_true",
        help="fail only on configuration-level verdicts (replicate blocks), not on a DIFFER "
        "between two single server instances",
    )  # fmt: skip


def gate_options(args: argparse.Namespace) -> Any:
    """The gate's options from `add_gate_arguments`' flags."""
    from soakgate.report.gate import GateOptions

    return GateOptions(args.allow_crashes, args.configurations_only)


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """`--ca-bundle`, `--client-cert`, `--client-key`, `--insecure`: how https targets are
    checked (every connection to them: requests, model discovery, /metrics, a reference)."""
    parser.add_argument(
        "--ca-bundle", metavar="PEM",
        help="trust these authorities for https targets instead of the system's (a PEM file or "
        "a folder of hashed certificates)",
    )  # fmt: skip
    parser.add_argument(
        "--client-cert", metavar="PEM", help="client certificate (chain) for mutual TLS"
    )
    parser.add_argument(
        "--client-key", metavar="PEM", help="its private key, when not in --client-cert's file"
    )
    parser.add_argument(
        "--insecure", action="store_true",
        help="do not verify https targets' certificates or host names (warned, and recorded "
        "with the run)",
    )  # fmt: skip


def tls_from_args(args: argparse.Namespace) -> Any:
    """The TlsOptions the flags ask for, checked now (a file that cannot be used is one line and
    exit 2 before anything is sent); `--insecure` prints its warning line."""
    import sys

    from soakgate.targets.tls import TlsOptions

    tls = TlsOptions(
        getattr(args, "ca_bundle", None), getattr(args, "client_cert", None),
        getattr(args, "client_key", None), bool(getattr(args, "insecure", False)),
    )  # fmt: skip
    if tls.given or tls.client_key:
        tls.context()
    if tls.insecure:
        print(
            "soakgate: warning: --insecure: the certificates and host names of https targets are "
            "not verified",
            file=sys.stderr,
        )
    return tls
