"""Live Prometheus metrics of a soak (`--metrics-port`): an observer of the soak (`on_tick`,
`close`) that a Prometheus/Grafana stack scrapes, so a collapse can page someone while the soak
runs.

The observer does no work per generation: the driver's own per-target tallies (counted as rows
are stored) are read when Prometheus scrapes, off the soak's event loop, in the server's threads
(`report.metrics_server`: the page rendered at most once a second, at most 4 scrapes served at
once, more answered 503), so scrapers cannot slow the soak. It holds a
reference to each soak's tallies from the soak's first tick (before any row is counted); a new
tallies object (the next campaign block or segment) folds the finished one into the totals. So
at any scrape, and exactly once the soak has stored its last row, the counters equal the rows
this process stored (the page is rendered afresh once the soak has ended). A private
CollectorRegistry: nothing enters prometheus-client's global one.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest

from soakgate import __version__
from soakgate.errors import UsageError
from soakgate.load.spec import Buckets
from soakgate.records import CHECKS, ERROR_CLASSES, SPARSE_CHECKS, Event
from soakgate.report.metrics_server import BoundedServer, CachedPage
from soakgate.stats.rates import clopper_pearson

CONFIDENCE = 0.95
"""Confidence of the one-sided upper bound exported with each collapse rate."""
SERIES = {
    "soakgate_generations_total": "counter: generations stored, by label, target, outcome "
    "(clean, collapsed, error) and error_class (empty unless outcome is error; every class is "
    "served from the first scrape, at 0 until it happens)",
    "soakgate_collapse_rate": "gauge: collapsed / scored (clean + collapsed) generations",
    "soakgate_collapse_rate_upper_bound": "gauge: exact (Clopper-Pearson) one-sided 95% upper "
    "bound of the collapse rate",
    "soakgate_scored_generations": "gauge: generations the collapse rate is over (n)",
    "soakgate_requests_in_flight": "gauge: requests sent and not yet answered",
    "soakgate_last_collapse_timestamp_seconds": "gauge: Unix time the last collapsed answer "
    "ended (absent before the first collapse)",
    "soakgate_last_progress_timestamp_seconds": "gauge: Unix time the unit's last generation "
    "ended (error or not), or the current soak (run, campaign block) began sending load if "
    "later: a stall alert's clock",
    "soakgate_info": "gauge: 1, with soakgate's version and the serving process's start time "
    "as labels",
    "soakgate_request_latency_seconds": "histogram: end-to-end latency of answered generations",
    "soakgate_time_to_first_token_seconds": "histogram: time to first token of clean streamed "
    "generations",
    "soakgate_output_tokens_total": "counter: completion tokens of answered generations",
    "soakgate_target_up": "gauge: 1 when the unit's last request reached its server, 0 when it "
    "failed to connect, was reset, dropped or timed out (absent before the first answer)",
    "soakgate_backoff_seconds_total": "counter: seconds the unit's workers held back (after "
    "connection errors, and in rate-limit windows)",
    "soakgate_backoffs_total": "counter: times a worker of the unit held back",
    "soakgate_guard_faults_total": "counter: engine faults the campaign guard recorded",
    "soakgate_soak_active": "gauge: 1 while a soak sends load, 0 once it has ended",
    "soakgate_reference_generations_total": "counter: generations chosen for reference scoring, "
    "by label, target and outcome (suspect, plausible, unscored); a suspect one may also be "
    "counted collapsed above",
    "soakgate_check_failures_total": "counter: answered generations that failed an integrity "
    "check, by label, target and check (crosstalk: another request's canary or prompt in the "
    "answer)",
    "soakgate_check_judged_total": "counter: answered generations a sparse check judged, by "
    "label, target and check (twin_mismatch: the second requests of twin pairs compared with "
    "their first), the denominator of its failures above",
    "soakgate_suspect_rate": "gauge: suspect / reference-scored generations",
    "soakgate_suspect_rate_upper_bound": "gauge: exact (Clopper-Pearson) one-sided 95% upper "
    "bound of the suspect rate",
    "soakgate_shifted_share": "gauge: share of reference-scored generations whose soak z "
    "(else typicality, else mean surprisal) is above the calibration's 90th percentile (a "
    "reference-like unit's is 0.1, less 1/(calibration samples + 1) at most)",
}
"""Every series exported, with its type and meaning (README, *Live metrics*)."""


@dataclass(slots=True)
class _Totals:
    """One unit's counts from soaks that have ended (folded from their tallies)."""

    clean: int = 0
    collapsed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    last_collapse_at: float | None = None
    last_at: float | None = None
    tokens: int = 0
    up: bool | None = None
    backoff_s: float = 0.0
    backoffs: int = 0
    latency: Buckets = field(default_factory=Buckets)
    ttft: Buckets = field(default_factory=Buckets)
    scored: int = 0
    suspects: int = 0
    unscored: int = 0
    shift_judged: int = 0
    shifted: int = 0
    checks: dict[str, int] = field(default_factory=dict)
    judged: dict[str, int] = field(default_factory=dict)

    def add(self, tally: Any) -> None:
        """Add one soak's tally of this unit."""
        requests, errors, collapses = tally.requests, tally.errors, tally.collapses
        self.clean += requests - errors - collapses
        self.collapsed += collapses
        for kind, count in list(tally.errors_by_class.items()):
            self.errors[kind] = self.errors.get(kind, 0) + count
        self.last_collapse_at = _latest(self.last_collapse_at, tally.last_collapse_at)
        self.last_at = _latest(self.last_at, getattr(tally, "last_at", None))
        self.tokens += getattr(tally, "tokens", 0)
        if getattr(tally, "up", None) is not None:
            self.up = tally.up  # the later soak's last answer is the latest
        self.backoff_s += getattr(tally, "backoff_s", 0.0)
        self.backoffs += getattr(tally, "backoffs", 0)
        for mine, theirs in ((self.latency, getattr(tally, "latency", None)),
                             (self.ttft, getattr(tally, "ttft", None))):  # fmt: skip
            if theirs is not None:
                mine.add(theirs)
        self.scored += getattr(tally, "scored", 0)
        self.suspects += getattr(tally, "suspects", 0)
        self.unscored += getattr(tally, "unscored", 0)
        self.shift_judged += getattr(tally, "shift_judged", 0)
        self.shifted += getattr(tally, "shifted", 0)
        for name, count in list(getattr(tally, "checks", {}).items()):
            self.checks[name] = self.checks.get(name, 0) + count
        for name, count in list(getattr(tally, "judged", {}).items()):
            self.judged[name] = self.judged.get(name, 0) + count

    def copy(self) -> _Totals:
        """A copy that later additions to this one do not change."""
        latency, ttft = Buckets(list(self.latency.counts), self.latency.total), Buckets(
            list(self.ttft.counts), self.ttft.total)  # fmt: skip
        return dataclasses.replace(self, errors=dict(self.errors), latency=latency, ttft=ttft,
                                   checks=dict(self.checks), judged=dict(self.judged))  # fmt: skip


def _latest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


class LiveMetrics:
    """Serves the soak's metrics at http://HOST:PORT/metrics from `start()` until `stop()`."""

    def __init__(self, host: str, port: int, guarded: bool = False) -> None:
        self.host, self.port, self.guarded = host, port, guarded
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)  # a collector: prometheus-client calls collect()
        self._lock = threading.Lock()
        self._done: dict[tuple[str, str], _Totals] = {}
        self._current: dict[str, Any] | None = None
        self._faults: dict[tuple[str, str], int] = {}
        self._active = False
        self._bounds: dict[tuple[int, int], float] = {}
        self.page = CachedPage(lambda: generate_latest(self.registry))
        self._server: BoundedServer | None = None
        self._expected: set[tuple[str, str]] = set()
        self._started_at = time.time()
        self._began = self._started_at

    def expect(self, units: Iterable[tuple[str, str]]) -> None:
        """The (label, target) units the soak will send to: their series are served from the
        first scrape, at 0, so that `increase()` sees the first collapse or error."""
        with self._lock:
            self._expected.update(units)
        self.page.stale()

    def start(self) -> str:
        """Bind and serve (a port in use is a UsageError: exit 2 before any load); the URL."""
        try:
            server = BoundedServer((self.host, self.port), self.page)
        except OSError as exc:
            raise UsageError(
                f"--metrics-port {self.port}: cannot listen on {self.host}: {exc.strerror or exc}"
            ) from None
        server.start()
        self._server = server
        self.port = int(server.server_address[1])
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def on_tick(self, tallies: dict[str, Any], elapsed_s: float) -> None:
        """A soak's progress: keep its tallies (read at scrape time); fold the previous soak's."""
        if tallies is self._current:
            return
        with self._lock:
            self._fold()
            self._current, self._active = tallies, True
            self._began = time.time()  # a new soak (run, block or segment) sends load from now
        self.page.stale()

    def close(self, stopped_by: str | None) -> None:
        """The soak (a run, or a whole campaign) ended: its tallies are final; they go on being
        served until `stop()`."""
        self._active = False
        self.page.stale()

    def on_event(self, label: str, event: Event) -> None:
        """An event of a campaign block: count the guard's engine faults."""
        if event.kind != "engine_fault" or event.target is None:
            return
        with self._lock:
            key = (label, event.target)
            self._faults[key] = self._faults.get(key, 0) + 1

    def _fold(self) -> None:
        for tally in (self._current or {}).values():
            self._done.setdefault((tally.label, tally.target), _Totals()).add(tally)
        self._current = None

    def _snapshot(self) -> tuple[dict[tuple[str, str], _Totals], dict[tuple[str, str], int]]:
        """Totals per (label, target): ended soaks plus the current one's live tallies."""
        with self._lock:
            units = {key: done.copy() for key, done in self._done.items()}
            for key in self._expected:
                units.setdefault(key, _Totals())
            in_flight: dict[tuple[str, str], int] = {}
            for tally in list((self._current or {}).values()):
                key = (tally.label, tally.target)
                units.setdefault(key, _Totals()).add(tally)
                in_flight[key] = tally.in_flight
            for key in self._faults:
                units.setdefault(key, _Totals())
        return units, in_flight

    def _upper_bound(self, collapsed: int, n: int) -> float:
        """The exact one-sided upper bound: the upper end of the two-sided Clopper-Pearson
        interval at 1 - 2(1 - CONFIDENCE) (cached: scrapes repeat the same counts)."""
        if (collapsed, n) not in self._bounds:
            if len(self._bounds) > 10_000:
                self._bounds.clear()
            self._bounds[collapsed, n] = clopper_pearson(collapsed, n, 1 - 2 * (1 - CONFIDENCE))[1]
        return self._bounds[collapsed, n]

    def collect(self) -> Iterator[Metric]:
        """The metric families (prometheus-client calls this at each scrape)."""
        units, in_flight = self._snapshot()
        names = ["label", "target"]
        generations = CounterMetricFamily("soakgate_generations", SERIES[
            "soakgate_generations_total"], labels=[*names, "outcome", "error_class"])  # fmt: skip
        rate, upper, scored, flying, last, progress = (
            GaugeMetricFamily(n, SERIES[n], labels=names) for n in (
                "soakgate_collapse_rate", "soakgate_collapse_rate_upper_bound",
                "soakgate_scored_generations", "soakgate_requests_in_flight",
                "soakgate_last_collapse_timestamp_seconds",
                "soakgate_last_progress_timestamp_seconds"))  # fmt: skip
        faults = CounterMetricFamily("soakgate_guard_faults", SERIES[
            "soakgate_guard_faults_total"], labels=names)  # fmt: skip
        for (label, target), totals in sorted(units.items()):
            unit = [label, target]
            generations.add_metric([*unit, "clean", ""], totals.clean)
            generations.add_metric([*unit, "collapsed", ""], totals.collapsed)
            for kind in sorted({*ERROR_CLASSES, *totals.errors}):
                generations.add_metric([*unit, "error", kind], totals.errors.get(kind, 0))
            n = totals.clean + totals.collapsed
            scored.add_metric(unit, n)
            if n:
                rate.add_metric(unit, totals.collapsed / n)
                upper.add_metric(unit, self._upper_bound(totals.collapsed, n))
            flying.add_metric(unit, in_flight.get((label, target), 0))
            if totals.last_collapse_at is not None:
                last.add_metric(unit, totals.last_collapse_at)
            progress.add_metric(unit, _latest(self._began, totals.last_at) or 0.0)
            if self.guarded:
                faults.add_metric(unit, self._faults.get((label, target), 0))
        yield from self._speed(units)
        active = GaugeMetricFamily("soakgate_soak_active", SERIES["soakgate_soak_active"])
        active.add_metric([], 1.0 if self._active else 0.0)
        info = GaugeMetricFamily("soakgate_info", SERIES["soakgate_info"],
                                 labels=["version", "started"])  # fmt: skip
        info.add_metric([__version__, f"{self._started_at:.0f}"], 1.0)
        yield from (generations, rate, upper, scored, flying, last, progress, faults, active, info)
        yield from self._reference(units)
        yield from self._checks(units)

    def _speed(self, units: dict[tuple[str, str], _Totals]) -> Iterator[Metric]:
        """Latency and time-to-first-token histograms and the output token counter, per unit."""
        names = ["label", "target"]
        latency, ttft = (
            HistogramMetricFamily(n, SERIES[n], labels=names)
            for n in ("soakgate_request_latency_seconds", "soakgate_time_to_first_token_seconds")
        )
        tokens = CounterMetricFamily(
            "soakgate_output_tokens", SERIES["soakgate_output_tokens_total"], labels=names
        )
        up = GaugeMetricFamily("soakgate_target_up", SERIES["soakgate_target_up"], labels=names)
        held, holds = (
            CounterMetricFamily(n.removesuffix("_total"), SERIES[n], labels=names)
            for n in ("soakgate_backoff_seconds_total", "soakgate_backoffs_total")
        )
        for (label, target), totals in sorted(units.items()):
            unit = [label, target]
            for family, buckets in ((latency, totals.latency), (ttft, totals.ttft)):
                family.add_metric(unit, buckets.cumulative(), buckets.total)
            tokens.add_metric(unit, totals.tokens)
            if totals.up is not None:
                up.add_metric(unit, 1.0 if totals.up else 0.0)
            held.add_metric(unit, totals.backoff_s)
            holds.add_metric(unit, totals.backoffs)
        yield from (latency, ttft, tokens, up, held, holds)

    def _checks(self, units: dict[tuple[str, str], _Totals]) -> Iterator[Metric]:
        """Integrity checks' failures: every check for every unit (0 until one fails), so a
        rate over the series starts at the soak's start."""
        name = "soakgate_check_failures"
        counts = CounterMetricFamily(
            name, SERIES[f"{name}_total"], labels=["label", "target", "check"]
        )
        for (label, target), totals in sorted(units.items()):
            for check in CHECKS:
                counts.add_metric([label, target, check], totals.checks.get(check, 0))
        yield counts
        judged = [(key, totals) for key, totals in sorted(units.items()) if totals.judged]
        if judged:
            name = "soakgate_check_judged"
            family = CounterMetricFamily(
                name, SERIES[f"{name}_total"], labels=["label", "target", "check"]
            )
            for (label, target), totals in judged:
                for check in sorted(SPARSE_CHECKS):
                    family.add_metric([label, target, check], totals.judged.get(check, 0))
            yield family

    def _reference(self, units: dict[tuple[str, str], _Totals]) -> Iterator[Metric]:
        """Reference scoring's series, for the units that had generations chosen for it."""
        chosen = {k: t for k, t in units.items() if t.scored or t.unscored}
        if not chosen:
            return
        name = "soakgate_reference_generations"
        counts = CounterMetricFamily(
            name, SERIES[f"{name}_total"], labels=["label", "target", "outcome"]
        )
        rate, upper, shifted = (
            GaugeMetricFamily(n, SERIES[n], labels=["label", "target"]) for n in (
                "soakgate_suspect_rate", "soakgate_suspect_rate_upper_bound",
                "soakgate_shifted_share"))  # fmt: skip
        for (label, target), totals in sorted(chosen.items()):
            unit = [label, target]
            counts.add_metric([*unit, "suspect"], totals.suspects)
            counts.add_metric([*unit, "plausible"], totals.scored - totals.suspects)
            counts.add_metric([*unit, "unscored"], totals.unscored)
            if totals.scored:
                rate.add_metric(unit, totals.suspects / totals.scored)
                upper.add_metric(unit, self._upper_bound(totals.suspects, totals.scored))
            if totals.shift_judged:
                shifted.add_metric(unit, totals.shifted / totals.shift_judged)
        yield from (counts, rate, upper, shifted)


def linger(seconds: float, announce: Iterable[str] = ()) -> None:
    """Keep serving the final metrics for `seconds` (a last scrape after the soak), ended early
    by SIGINT/SIGTERM."""
    import signal
    import sys

    done = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: done.set()) for sig in
                (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
    try:
        for line in announce:
            print(line, file=sys.stderr, flush=True)
        done.wait(seconds)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
