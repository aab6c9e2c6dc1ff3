"""Headless Chromium driven over the DevTools protocol (aiohttp websockets), for report tests.

Loads a page in a fresh tab and collects everything that would mean trouble: uncaught
exceptions, console errors and browser log errors (CSP violations land there).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--disable-default-apps", "--mute-audio",
)  # fmt: skip


def find_chromium() -> str | None:
    """Path of a Chromium binary, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


@dataclass
class PageResult:
    """What a loaded page looked like to the browser."""

    values: dict[str, Any]
    """Results of the expressions evaluated after load."""
    problems: list[str] = field(default_factory=list)
    """Uncaught exceptions, console errors/warnings and browser log errors."""


class Chromium:
    """One headless browser process with its own fresh profile; `stop()` ends its group."""

    def __init__(self, binary: str, start_timeout_s: float = 60.0) -> None:
        self._profile = Path(tempfile.mkdtemp(prefix="soakgate-chromium-"))
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self._profile}", "--remote-debugging-port=0",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        self.ws_url = self._wait_for_port(start_timeout_s)

    def _wait_for_port(self, timeout_s: float) -> str:
        # Chromium writes the port it chose, then the browser's websocket path, to this file.
        active = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            lines = active.read_text().split() if active.exists() else []
            if len(lines) >= 2:
                return f"ws://127.0.0.1:{lines[0]}{lines[1]}"
            time.sleep(0.1)
        raise RuntimeError("chromium did not open its DevTools port in time")

    def load(self, url: str, expressions: dict[str, str], settle_s: float = 0.5) -> PageResult:
        """Open `url` in a new tab, wait for load, evaluate expressions, collect problems."""
        return asyncio.run(asyncio.wait_for(_load(self.ws_url, url, expressions, settle_s), 60))

    def stop(self) -> None:
        """End the browser's process group (only what this object started)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        shutil.rmtree(self._profile, ignore_errors=True)


class _Session:
    """Request/response and event plumbing of one flattened DevTools session."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws, self.ids, self.session_id = ws, itertools.count(1), ""
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self.loaded = asyncio.Event()

    async def pump(self) -> None:
        async for message in self.ws:
            data = json.loads(message.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            elif data.get("method") == "Page.loadEventFired":
                self.loaded.set()
            elif "method" in data:
                self.events.append(data)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[ident] = future
        message: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if self.session_id and not method.startswith("Target."):
            message["sessionId"] = self.session_id
        await self.ws.send_str(json.dumps(message))
        reply = await future
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result


def _problems(events: list[dict[str, Any]]) -> list[str]:
    found = []
    for event in events:
        params = event.get("params", {})
        if event["method"] == "Runtime.exceptionThrown":
            found.append(f"exception: {params['exceptionDetails'].get('text')}")
        elif event["method"] == "Runtime.consoleAPICalled" and params["type"] in (
            "error",
            "warning",
            "assert",
        ):
            found.append(f"console.{params['type']}: {params.get('args')}")
        elif event["method"] == "Log.entryAdded" and params["entry"]["level"] in (
            "error",
            "warning",
        ):
            found.append(f"log {params['entry']['level']}: {params['entry'].get('text')}")
    return found


async def _load(ws_url: str, url: str, expressions: dict[str, str], settle_s: float) -> PageResult:
    async with aiohttp.ClientSession() as http, http.ws_connect(ws_url, max_msg_size=0) as ws:
        session = _Session(ws)
        pump = asyncio.create_task(session.pump())
        target = await session.call("Target.createTarget", url="about:blank")
        attached = await session.call(
            "Target.attachToTarget", targetId=target["targetId"], flatten=True
        )
        session.session_id = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            await session.call(f"{domain}.enable")
        await session.call("Page.navigate", url=url)
        await session.loaded.wait()
        await asyncio.sleep(settle_s)  # late errors (e.g. an image failing to decode)
        values = {}
        for name, expression in expressions.items():
            reply = await session.call(
                "Runtime.evaluate", expression=expression, returnByValue=True
            )
            values[name] = reply["result"].get("value")
        await session.call("Target.closeTarget", targetId=target["targetId"])
        pump.cancel()
        return PageResult(values, _problems(session.events))
