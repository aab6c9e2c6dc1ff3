"""llama.cpp's server (the `xllamacpp` wheel) as a subprocess: the real server CI always runs.

xllamacpp has no console script: its `Server` starts llama.cpp's HTTP server inside the Python
process. `python -m soakgate.servers.llamacpp --model M.gguf --port 0` wraps it in a process of
its own, prints `soakgate-llamacpp listening on URL` when ready and serves until SIGTERM/SIGINT.
`LlamaCppProcess` starts that process on loopback through the campaign's ServerInstance.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from soakgate.errors import ServerError, UsageError

READY_PREFIX = "soakgate-llamacpp listening on "


def available() -> str | None:
    """None when xllamacpp imports, else why not (for skip messages)."""
    try:
        import xllamacpp  # noqa: F401
    except ImportError as exc:
        return f"xllamacpp is not installed ({exc}); `pip install xllamacpp`"
    return None


def make_params(args: argparse.Namespace) -> Any:
    """xllamacpp CommonParams from the command line."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(args.model)
    params.hostnames = [args.host]
    params.port = args.port
    params.n_parallel = args.parallel
    # n_ctx is shared by the slots: give each slot `ctx` positions
    params.n_ctx = args.ctx * args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.n_threads_http = max(4, 2 * args.parallel)
    params.endpoint_metrics = True
    params.warmup = False
    if args.alias:
        params.model_alias = {args.alias}
    return params


def check_port(host: str, port: int) -> None:
    """UsageError when `host:port` cannot be listened on (in use, not an address of this
    machine), found before llama.cpp loads the model and fails with a bare RuntimeError."""
    if port == 0:
        return
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as llama.cpp does
            probe.bind((host, port))
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def serve(args: argparse.Namespace) -> int:
    """Start llama.cpp's server in this process and block until SIGTERM or SIGINT."""
    if not Path(args.model).is_file():
        raise UsageError(f"no GGUF model at {args.model}")
    check_port(args.host, args.port)
    import xllamacpp

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        server = xllamacpp.Server(make_params(args))
    except RuntimeError as exc:  # llama.cpp has logged why above; say it in one line
        raise ServerError(f"llama.cpp's server did not start ({exc}); its log is above") from None
    print(f"{READY_PREFIX}{server.listening_address}", flush=True)
    while not stop.wait(0.2):
        pass
    del server  # joins llama.cpp's threads before the interpreter exits
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Arguments of `python -m soakgate.servers.llamacpp`."""
    parser = argparse.ArgumentParser(
        prog="python -m soakgate.servers.llamacpp", description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--model", required=True, help="GGUF model file")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    parser.add_argument("--parallel", type=int, default=8, help="slots (concurrent sequences)")
    parser.add_argument("--ctx", type=int, default=1024, help="context positions per slot")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for the model")
    parser.add_argument("--alias", default="", help="model name to list at /v1/models")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point: one-line errors with exit code 2, never a traceback."""
    try:
        return serve(build_parser().parse_args(argv))
    except (UsageError, ServerError, ImportError) as exc:
        print(f"soakgate-llamacpp: error: {exc}", file=sys.stderr)
        return 2


class LlamaCppProcess:
    """The launcher on a free loopback port, run by the campaign's ServerInstance (own process
    group, `/health` polled, SIGTERM then SIGKILL); `.url` once `start()` returns."""

    def __init__(
        self,
        model: Path,
        *,
        parallel: int = 8,
        ctx: int = 1024,
        threads: int = 2,
        start_timeout_s: float = 60.0,
        log_dir: Path | None = None,
    ) -> None:
        from soakgate.servers import LaunchSpec, ServerInstance, free_port

        port = free_port()
        argv = [
            sys.executable, "-m", "soakgate.servers.llamacpp", "--model", str(model),
            f"--port={port}", f"--parallel={parallel}", f"--ctx={ctx}", f"--threads={threads}",
        ]  # fmt: skip
        self.url = f"http://127.0.0.1:{port}"
        log_dir = log_dir or Path(tempfile.mkdtemp(prefix="soakgate-llamacpp-"))
        spec = LaunchSpec("llamacpp", argv, {}, self.url, log_dir, ("/health",), 10.0)
        self.instance = ServerInstance(spec)
        self._start_timeout_s = start_timeout_s
        self.start_s = 0.0
        """Seconds from spawning the process to a healthy `/health`."""

    def start(self) -> LlamaCppProcess:
        """Spawn and wait (bounded) for `/health`; ServerError with the log's tail otherwise."""
        began = time.monotonic()
        self.instance.launch()
        try:
            asyncio.run(self.instance.wait_healthy(self._start_timeout_s))
        except ServerError as exc:
            self.stop()
            raise ServerError(f"llama.cpp did not start: {exc}; {self.log_tail()}") from None
        self.start_s = time.monotonic() - began
        return self

    def log_tail(self, chars: int = 1500) -> str:
        """The end of the server's log."""
        return self.instance.log_tail(chars)

    def stop(self) -> int | None:
        """Stop the process group; returns the exit code (0 after a clean SIGTERM)."""
        return asyncio.run(self.instance.stop())

    def __enter__(self) -> LlamaCppProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
