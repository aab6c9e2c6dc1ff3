"""Bench (issue 18 item 6): one soakgate process driving a fleet, e.g. 8 targets x 48 streams.

For each shape TARGETSxSTREAMS, `--mocks` mock servers run as separate processes (targets are
spread over them round-robin, each target its own name and connection pool) and one `soakgate
run` drives every target at STREAMS requests in flight, streaming, every default detector on and
every generation stored. After load starts and a warm-up, a window of `--seconds` is measured:

- client CPU per request: CPU time of the soakgate process (its /proc utime+stime, children
  included) over the window / requests the mocks completed in it;
- requests in flight: the mocks' `vllm:num_requests_running`, summed, sampled every 0.5 s
  (mean and lowest sample), against TARGETS x STREAMS asked for;
- achieved rate (requests/s), the client's peak RSS, and each mock's CPU share of one core
  (a mock near 100 % would be the bottleneck, not the client);
- after the client is stopped (SIGINT, as Ctrl-C), the rows and errors in its database.

Nothing is pinned: on a small machine the mocks and the client share the cores, which is why
the client's CPU per request (its own CPU time) is the figure to read, not the rate.

Run: nice -n 10 python bench/bench_capacity.py [--shapes 8x48,64x8] [--rounds 3] [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import benchlib

from soakgate.mockserver.process import MockProcess
from soakgate.store import open_store

_ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
SAMPLE_S = 0.5


@dataclass(frozen=True, slots=True)
class Shape:
    """Targets and streams (requests in flight) per target."""

    targets: int
    streams: int

    @classmethod
    def parse(cls, text: str) -> Shape:
        targets, _, streams = text.partition("x")
        if not (targets.isdigit() and streams.isdigit()) or not int(targets) or not int(streams):
            raise argparse.ArgumentTypeError(f"shape {text!r} is not TARGETSxSTREAMS, e.g. 8x48")
        return cls(int(targets), int(streams))

    def __str__(self) -> str:
        return f"{self.targets}x{self.streams}"


@dataclass(slots=True)
class Measurement:
    """One shape's figures over the measured window."""

    shape: Shape
    mocks: int
    requests: int
    seconds: float
    client_cpu_s: float
    rss_peak: int
    in_flight: list[int]
    mock_shares: list[float]
    stored: int = 0
    errors: int = 0

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.client_cpu_s / self.requests if self.requests else float("inf")

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def client_share(self) -> float:
        return self.client_cpu_s / self.seconds


def start_mocks(count: int, args: argparse.Namespace) -> list[MockProcess]:
    """`count` mock servers, paced like a server under load (latency, then a token pace)."""
    flags = ["--tokens-per-s", str(args.tokens_per_s), "--latency-ms", str(args.latency_ms),
             "--output-tokens", str(args.max_tokens)]  # fmt: skip
    mocks: list[MockProcess] = []
    try:
        for index in range(count):
            mocks.append(MockProcess([*flags, "--seed", str(index)], start_timeout_s=60).start())
    except BaseException:
        for mock in mocks:
            mock.stop()
        raise
    return mocks


def client_command(shape: Shape, mocks: list[MockProcess], db: Path, max_tokens: int) -> list[str]:
    """One `soakgate run` over every target (target i on mock i mod len(mocks)), streaming."""
    targets = [f"--target=t{i:03d}={mocks[i % len(mocks)].url}" for i in range(shape.targets)]
    return [
        sys.executable, "-m", "soakgate", "run", *targets, "--quiet", "--concurrency",
        str(shape.streams), "--max-tokens", str(max_tokens), "--duration", "2h", "--db", str(db),
    ]  # fmt: skip


def completed(mocks: list[MockProcess]) -> int:
    return sum(benchlib.scrape(m.url)[0] for m in mocks)


def running(mocks: list[MockProcess]) -> int:
    return sum(benchlib.scrape(m.url)[1] for m in mocks)


def measure(shape: Shape, mocks: list[MockProcess], args: argparse.Namespace) -> Measurement:
    """Start the client, wait for load and a warm-up, measure the window, stop it, count rows."""
    with tempfile.TemporaryDirectory(prefix="soakgate-capacity-") as folder:
        db = Path(folder) / "soak.sqlite"
        log = (Path(folder) / "client.log").open("wb")
        argv = client_command(shape, mocks, db, args.max_tokens)
        proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True, env=_ENV)
        try:
            wait_for_load(proc, mocks, shape, args.warmup)
            result = window(shape, proc, mocks, args.seconds)
        except RuntimeError as exc:
            tail = (Path(folder) / "client.log").read_text(errors="replace")[-600:]
            raise RuntimeError(f"{exc}; the client's output ends: {tail}") from None
        finally:
            benchlib.stop_group(proc, (60, 10, 5))
            log.close()
        result.stored, result.errors = count_rows(db)
        return result


def wait_for_load(
    proc: subprocess.Popen[bytes], mocks: list[MockProcess], shape: Shape, warmup_s: float
) -> None:
    """Wait (bounded) until every stream has completed a request or so, then a warm-up."""
    start, first = time.monotonic(), completed(mocks)
    while completed(mocks) < first + shape.targets * shape.streams:
        if proc.poll() is not None:
            raise RuntimeError(f"the client exited with {proc.returncode} before sending load")
        if time.monotonic() - start > 180:
            raise RuntimeError("the client sent no full round of load within 180 s")
        time.sleep(0.2)
    time.sleep(warmup_s)


def window(
    shape: Shape, proc: subprocess.Popen[bytes], mocks: list[MockProcess], seconds: float
) -> Measurement:
    """Sample the client's CPU and RSS, the mocks' counters and CPU over `seconds`."""
    done0 = completed(mocks)
    tree0 = benchlib.sample_tree(proc.pid)
    mock0 = [benchlib.cpu_seconds(m.pid) for m in mocks]
    rss, in_flight, end = tree0.rss, [], tree0.at + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"the client exited with {proc.returncode} during the window")
        time.sleep(min(SAMPLE_S, max(0.0, end - time.monotonic())))
        rss = max(rss, benchlib.sample_tree(proc.pid).rss)
        in_flight.append(running(mocks))
    tree1 = benchlib.sample_tree(proc.pid)
    mock1 = [benchlib.cpu_seconds(m.pid) for m in mocks]
    done1 = completed(mocks)
    span = tree1.at - tree0.at
    shares = [(after - before) / span for before, after in zip(mock0, mock1, strict=True)]
    return Measurement(shape, len(mocks), done1 - done0, span, tree1.cpu_s - tree0.cpu_s, rss,
                       in_flight, shares)  # fmt: skip


def count_rows(db: Path) -> tuple[int, int]:
    """(generations stored, of them errors) in the client's database."""
    store = open_store(db)
    try:
        counts = [c for run in store.runs() for c in store.counts(run.run_id).values()]
    finally:
        store.close()
    return sum(c.requests for c in counts), sum(c.errors for c in counts)


def median_round(rounds: list[Measurement]) -> tuple[Measurement, float, float]:
    """The round with the median CPU-ms/request, and the lowest and highest of all rounds."""
    ordered = sorted(rounds, key=lambda r: r.cpu_ms_per_request)
    return (
        ordered[(len(ordered) - 1) // 2],
        ordered[0].cpu_ms_per_request,
        ordered[-1].cpu_ms_per_request,
    )


def report(results: dict[Shape, list[Measurement]], args: argparse.Namespace) -> None:
    """One row per shape (its median round), and what one core of client would drive."""
    print(
        f"\n== {args.max_tokens}-token streamed answers, mock pace {args.tokens_per_s:g} tok/s "
        f"after {args.latency_ms:g} ms; window {args.seconds:g} s; median of {args.rounds} "
        "interleaved round(s), range of CPU-ms/req across rounds; in-flight = the mocks' "
        f"running requests (mean and lowest of samples every {SAMPLE_S:g} s)"
    )
    print(
        f"{'shape':<8}{'mocks':>6}{'asked':>7}{'in-flight':>11}{'lowest':>8}{'req/s':>8}"
        f"{'CPU-ms/req':>11}{'range':>14}{'client CPU':>11}{'RSS MB':>8}{'mock CPU max':>13}"
        f"{'mocks total':>12}{'stored':>9}{'errors':>7}"
    )
    for shape, rounds in results.items():
        r, low, high = median_round(rounds)
        mean = statistics.fmean(r.in_flight) if r.in_flight else 0.0
        lowest = min(r.in_flight) if r.in_flight else 0
        print(
            f"{shape!s:<8}{r.mocks:>6}{shape.targets * shape.streams:>7}{mean:>11.1f}"
            f"{lowest:>8}{r.rate:>8.0f}{r.cpu_ms_per_request:>11.3f}{f'{low:.3f}-{high:.3f}':>14}"
            f"{r.client_share:>10.0%}{max(r.rss_peak for r in rounds) / 2**20:>8.1f}"
            f"{max(r.mock_shares):>12.0%}{sum(r.mock_shares):>11.0%}{r.stored:>9}{r.errors:>7}"
        )
    for shape, rounds in results.items():
        worst = max(r.cpu_ms_per_request for r in rounds)
        per_core = 1000 / worst
        print(
            f"{shape}: at {worst:.3f} CPU-ms per request (its costliest round) one core of "
            f"client completes at most {per_core:,.0f} requests/s "
            f"({per_core * args.max_tokens:,.0f} streamed tokens/s)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shapes", type=lambda text: [Shape.parse(s) for s in text.split(",")],
        default=[Shape(8, 48), Shape(64, 8)], help="TARGETSxSTREAMS,... (default 8x48,64x8)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds per shape")
    parser.add_argument("--mocks", type=int, default=16, help="mock servers (at most targets)")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window per shape")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds after load starts")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens per answer")
    parser.add_argument("--tokens-per-s", type=float, default=100.0, help="mock pace per request")
    parser.add_argument("--latency-ms", type=float, default=100.0, help="mock time to first token")
    args = parser.parse_args()
    if min(args.mocks, args.rounds, args.max_tokens) < 1 or args.seconds <= 0:
        parser.error("--mocks, --rounds, --seconds and --max-tokens must be positive")
    print(
        f"date {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {os.cpu_count()} CPUs; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start"
    )
    results: dict[Shape, list[Measurement]] = {shape: [] for shape in args.shapes}
    for index in range(args.rounds):  # the order rotates, so no shape always runs first
        shift = index % len(args.shapes)
        for shape in args.shapes[shift:] + args.shapes[:shift]:
            mocks = start_mocks(min(args.mocks, shape.targets), args)
            try:
                results[shape].append(measure(shape, mocks, args))
            finally:
                for mock in mocks:
                    mock.stop()
    report(results, args)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
