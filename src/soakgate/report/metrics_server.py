"""The HTTP side of `--metrics-port`: a page rendered at most once per MAX_AGE_S whatever the
number of scrapes, served by at most SCRAPERS threads at a time and to at most RATE scrapes a
second; the scrapes beyond wait in the listening socket's backlog, which costs the soak nothing.

prometheus-client's own server starts a thread per connection and renders the page for each, in
the soak's process: 200 scrapers at once were 200 threads taking turns at the interpreter lock
with the soak's event loop, and cut its throughput by a fifth to a third. Answering the excess
503 at once does not help: scrapers retry at once, and accepting and refusing them takes the
lock as often. Here the accept thread takes a connection only when a worker is free and the
rate allows (it sleeps meanwhile, without the lock), a scrape costs sending bytes already
rendered, and a client that sends nothing is dropped after TIMEOUT_S. prometheus-client has no
bounded server; this one is the standard library's `http.server` with prometheus-client's
renderer and content type.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

MAX_AGE_S = 1.0
"""A page is rendered again only when older than this (or marked stale)."""
SCRAPERS = 4
"""Scrapes served at once; more are answered 503."""
TIMEOUT_S = 5.0
"""A connection that sends no request within this is closed."""
_BUSY_BODY = b"too many scrapes at once\n"
RATE = 10.0
"""Scrapes served per second at most (Prometheus scrapes a target every 15 s by default)."""


class CachedPage:
    """The metrics page, rendered by `render` at most once per MAX_AGE_S (thread-safe)."""

    def __init__(self, render: Callable[[], bytes], max_age_s: float = MAX_AGE_S) -> None:
        self._render, self._max_age_s = render, max_age_s
        self._lock = threading.Lock()
        self._page = b""
        self._at = -float("inf")
        self.renders = 0
        """Times the page was rendered (for the bench)."""

    def stale(self) -> None:
        """Render afresh at the next scrape (the soak ended: its final counts at once)."""
        with self._lock:
            self._at = -float("inf")

    def get(self) -> bytes:
        """The page, rendered now if the last one is too old."""
        with self._lock:
            if time.monotonic() - self._at >= self._max_age_s:
                self._page, self._at = self._render(), time.monotonic()
                self.renders += 1
            return self._page


class _Handler(BaseHTTPRequestHandler):
    server: BoundedServer
    timeout = TIMEOUT_S

    def do_GET(self) -> None:
        body = self.server.page.get()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a scrape is not news on the soak's stderr."""


class BoundedServer(HTTPServer):
    """Serves `page` on `address`: at most `scrapers` requests at once, `rate` a second."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], page: CachedPage, scrapers: int = SCRAPERS,
        rate: float = RATE,
    ) -> None:  # fmt: skip
        self.page = page
        self._slots = threading.BoundedSemaphore(scrapers)
        self._rate, self._next_at = rate, 0.0
        self._stopping = threading.Event()
        self._pool = ThreadPoolExecutor(scrapers, thread_name_prefix="soakgate-metrics")
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)
        self._thread = threading.Thread(
            target=self.serve_forever, name="soakgate-metrics-accept", daemon=True
        )

    def start(self) -> None:
        """Accept scrapes in a thread of its own."""
        self._thread.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Hand the connection to a worker once one is free and the rate allows; the accept
        thread waits meanwhile (sleeping, without the interpreter lock), so further scrapers
        wait in the kernel's backlog."""
        while not self._slots.acquire(timeout=0.5):
            if self._stopping.is_set():
                self.shutdown_request(request)
                return
        wait = self._next_at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self._next_at = time.monotonic() + 1.0 / self._rate
        self._pool.submit(self._serve, request, client_address)

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # a client that went away mid-answer is not the soak's problem
            pass
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def stop(self) -> None:
        """Stop accepting and release the port."""
        self._stopping.set()
        self.shutdown()
        self.server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)
