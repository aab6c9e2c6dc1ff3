"""The aiohttp application: OpenAI-compatible endpoints with injected collapses, faults, quirks."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import socket
import struct
import sys
import time
from typing import Any

from aiohttp import web

from soakgate.mockserver.config import MockConfig
from soakgate.mockserver.inject import GroundTruthLog, Injector, leak
from soakgate.mockserver.metrics import Metrics
from soakgate.mockserver.plan import (
    BadRequest,
    Plan,
    check_limits,
    make_plan,
    parse_sampling,
)
from soakgate.mockserver.render import (
    DONE,
    EventWriter,
    error_body,
    response_body,
    unknown_model_body,
)
from soakgate.mockserver.text import detokenize

_JSON = "application/json"
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_PACE_SLICE_S = 0.02  # non-streamed paced responses sleep in slices of about this length


class _Cut:
    """A running stream that a newer request may cut (quirk `interrupt-streams`)."""

    __slots__ = ("cut",)

    def __init__(self) -> None:
        self.cut = False


class MockServer:
    """State shared by all requests of one mock instance, and its request handlers."""

    def __init__(self, config: MockConfig) -> None:
        self.config = config
        self.pid = os.getpid()
        self.injector = Injector(config)
        self.metrics = Metrics(config)
        self.truth = GroundTruthLog(config.ground_truth, self.pid)
        self.arrivals = 0
        self.seq = 0
        self.streams: set[_Cut] = set()
        self.recent: collections.deque[tuple[str, str]] = collections.deque(maxlen=64)
        """(request id, user text) of the requests that arrived last (crosstalk's sources)."""
        self._chat_style = "chat-logprobs" in config.quirks
        self._models = json.dumps(
            {
                "object": "list",
                "data": [
                    {
                        "id": config.model_name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "soakgate",
                        "root": config.model_name,
                        "parent": None,
                        "max_model_len": config.max_model_len,
                    }
                ],
            }
        ).encode()

    def make_app(self) -> web.Application:
        """The aiohttp application with every route."""
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics_page)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, _app: web.Application) -> None:
        self.truth.close()

    async def health(self, _request: web.Request) -> web.Response:
        """Liveness: 200 `ok`."""
        return web.Response(text="ok")

    async def models(self, _request: web.Request) -> web.Response:
        """The one served model (quirk `no-models`: 404, as servers without the route answer)."""
        if "no-models" in self.config.quirks:
            return web.Response(status=404, text="404: Not Found")
        return web.Response(body=self._models, content_type=_JSON)

    async def metrics_page(self, _request: web.Request) -> web.Response:
        """Prometheus text exposition."""
        return web.Response(text=self.metrics.render(), content_type="text/plain")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """POST /v1/completions."""
        return await self._generate(request, "completions")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """POST /v1/chat/completions."""
        return await self._generate(request, "chat")

    def _arrive(self) -> None:
        """Count the arrival: maybe die, maybe cut running streams (quirk)."""
        self.arrivals += 1
        config = self.config
        if config.die_after is not None and self.arrivals > config.die_after:
            _maybe_die(config)
        if self.streams and "interrupt-streams" in config.quirks:
            for stream in self.streams:
                stream.cut = True

    async def _generate(self, request: web.Request, endpoint: str) -> web.StreamResponse:
        """Plan the answer, log the ground truth, then answer it (with its fault, if any)."""
        self._arrive()
        try:
            body = json.loads(await request.read())
            model = body.get("model") if isinstance(body, dict) else None
            if model is not None and model != self.config.model_name:  # vLLM's answer
                return _json_response(unknown_model_body(model), 404)
            sampling = parse_sampling(endpoint, body)
            check_limits(self.config, sampling)
        except (ValueError, BadRequest) as exc:
            message = str(exc) if isinstance(exc, BadRequest) else "the body is not valid JSON"
            return _json_response(error_body(message, "BadRequestError", 400), 400)
        request_id = request.headers.get("X-Request-Id") or f"mock-{self.pid}-{self.seq}"
        numbers = sampling.logprobs is not None or not sampling.stream or sampling.include_usage
        decision = self.injector.decide(
            self.metrics.in_flight + 1,
            sampling.structure is not None,
            numbers,
            seeded=sampling.seed is not None,
        )
        rng = self.injector.rng
        plans = [make_plan(self.config, request_id, sampling, decision, rng, index)
                 for index in range(sampling.n)]  # fmt: skip
        plan = plans[0]
        text = _user_text(body)
        if decision.crosstalk and decision.injected is None:
            self._leak(plan, text)
        self.recent.append((request_id, text))
        self._log(plan, endpoint)
        if decision.crash:
            die_of_sigsegv()
        metrics = self.metrics
        metrics.in_flight += 1
        metrics.prompt_tokens += plan.prompt_tokens
        try:
            if decision.fault == "stall":
                await asyncio.sleep(self.config.stall_s)
            elif decision.fault == "http_500":
                body = error_body("injected internal server error", "InternalServerError", 500)
                return _json_response(body, 500)
            if self.config.latency_ms:
                await asyncio.sleep(self.config.latency_ms / 1000.0)
            if sampling.stream:
                return await self._stream(request, plans)
            return await self._answer(request, plans)
        finally:
            metrics.in_flight -= 1

    def _leak(self, plan: Plan, own: str) -> None:
        """Put the last words of the latest other request's prompt (one that differs from this
        one's) into the answer; nothing when no recent request has another prompt."""
        for request_id, text in reversed(self.recent):
            if text != own and text.split():
                plan.token_ids, plan.pieces = leak(plan.token_ids, text)
                plan.text, plan.leaked_from = "".join(plan.pieces), request_id
                return

    def _log(self, plan: Plan, endpoint: str) -> None:
        """One ground-truth line for this request."""
        decision, structure, broken = plan.decision, plan.sampling.structure, plan.inconsistency
        self.truth.write(
            {
                "request_id": plan.request_id,
                "seq": self.seq,
                "at": time.time(),
                "endpoint": endpoint,
                "stream": plan.sampling.stream,
                "max_tokens": plan.sampling.max_tokens,
                "temperature": plan.sampling.temperature,
                "prompt_logprobs": plan.sampling.prompt_logprobs,
                "n": plan.sampling.n,
                "seed": plan.sampling.seed,
                "injected": decision.injected,
                "fault": decision.fault,
                "perturbed": plan.perturbed,
                "fluent": len(plan.fluent_positions),
                "fluent_positions": plan.fluent_positions,
                "shifted": decision.shift,
                "crosstalk": plan.leaked_from,
                "structured": structure.kind if structure is not None else None,
                "invalid_structure": plan.invalid_structure,
                "inconsistent": broken.kind if broken is not None else None,
                "inconsistent_at": broken.at if broken is not None else None,
                "seed_drift": plan.seed_drift,
                "burst": decision.burst,
                "corrupt": decision.corrupt,
                "crash": decision.crash,
                "knob_rate": self.injector.knob_rate,
            }
        )
        self.seq += 1

    def _token_delay(self) -> float:
        """Seconds per token for one request now: the pace, shared out past saturation."""
        pace = self.config.tokens_per_s
        if pace <= 0:
            return 0.0
        saturation, in_flight = self.config.saturation, self.metrics.in_flight
        if saturation and in_flight > saturation:
            pace *= saturation / in_flight
        return 1.0 / pace

    async def _pace_bulk(self, tokens: int) -> None:
        """Spend the generation time of `tokens` tokens (non-streamed), re-reading the load."""
        while tokens > 0:
            delay = self._token_delay()
            if delay == 0:
                return
            batch = min(tokens, max(1, int(_PACE_SLICE_S / delay)))
            await asyncio.sleep(batch * delay)
            tokens -= batch

    async def _answer(self, request: web.Request, plans: list[Plan]) -> web.StreamResponse:
        """A non-streamed answer (one choice per plan, generated side by side), with a
        body-level fault applied when one was decided."""
        plan = plans[0]
        await self._pace_bulk(max(len(p.token_ids) for p in plans))
        fault = plan.decision.fault
        if fault == "server_error":
            return _json_response(error_body("injected server error", "InternalServerError", 500))
        if fault == "truncated_stream":
            # A non-streamed "truncation": shorter answers without a finish_reason.
            for cut in plans:
                kept = len(cut.token_ids) // 2
                cut.token_ids, cut.finish_reason = cut.token_ids[:kept], None
                if cut.pieces is not None:
                    cut.pieces = cut.pieces[:kept]
                cut.text = detokenize(cut.token_ids) if cut.pieces is None else "".join(cut.pieces)
        body = response_body(plans, self.config.model_name, int(time.time()), self._chat_style)
        data = json.dumps(body, separators=(",", ":")).encode()
        self.metrics.generated(sum(len(p.token_ids) for p in plans))
        if fault == "malformed_json":
            return web.Response(body=data[: len(data) * plan.fault_after // 10], content_type=_JSON)
        if fault == "reset":
            response = web.StreamResponse(headers={"Content-Type": _JSON})
            response.content_length = len(data)
            await response.prepare(request)
            await response.write(data[: len(data) // 2])
            _abort(request)
            return response
        self.metrics.finish(plan.finish_reason)
        return web.Response(body=data, content_type=_JSON)

    async def _stream(self, request: web.Request, plans: list[Plan]) -> web.StreamResponse:
        """An SSE answer, paced per token (the choices' events of each position together, as a
        server generating them side by side sends them), cut or broken as decided."""
        response = web.StreamResponse(headers=_SSE_HEADERS)
        await response.prepare(request)
        created, plan = int(time.time()), plans[0]
        writers = [EventWriter(p, self.config.model_name, created, self._chat_style) for p in plans]
        fault = plan.decision.fault
        longest = max(len(p.token_ids) for p in plans)
        # Clamped so that short outputs still show their fault.
        fault_at = min(plan.fault_after, max(longest - 1, 0))
        stop_at = fault_at if fault in ("reset", "truncated_stream", "server_error") else -1
        cut = _Cut()
        self.streams.add(cut)
        try:
            sent = await self._stream_tokens(response, writers, stop_at, cut)
            if sent < longest:
                await self._stream_break(request, response, writers[0], fault, cut)
            else:
                await self._stream_end(response, writers)
        except ConnectionError:
            self.metrics.finished["abort"] += 1
        finally:
            self.streams.discard(cut)
        return response

    async def _stream_tokens(
        self, response: web.StreamResponse, writers: list[EventWriter], stop_at: int, cut: _Cut
    ) -> int:
        """Write token events until the end, a fault point or a cut; returns how many positions
        were sent."""
        plan = writers[0].plan
        longest = max(len(w.plan.token_ids) for w in writers)
        count = longest if stop_at < 0 else min(stop_at, longest)
        malformed_at = -1
        if plan.decision.fault == "malformed_json":
            malformed_at = min(plan.fault_after, max(longest - 1, 0))
        first = b"".join(w.role() for w in writers) if plan.sampling.endpoint == "chat" else b""

        def position_events(position: int) -> bytes:
            chunk = b"".join(w.token(position) for w in writers if position < len(w.plan.token_ids))
            return writers[0].malformed() + chunk if position == malformed_at else chunk

        def tokens_at(position: int) -> int:
            return sum(position < len(w.plan.token_ids) for w in writers)

        buffered = "buffered-stream" in self.config.quirks
        if self._token_delay() == 0 or buffered:
            # Unpaced: one write for all events (real servers coalesce too); far cheaper. With
            # quirk `buffered-stream`, paced but held back and sent whole (a buffering proxy).
            if buffered:
                await asyncio.sleep(self._token_delay() * count)
            await response.write(first + b"".join(position_events(i) for i in range(count)))
            self.metrics.generated(sum(tokens_at(i) for i in range(count)))
            return count
        if first:
            await response.write(first)
        for position in range(count):
            if cut.cut:
                return position
            await asyncio.sleep(self._token_delay())
            await response.write(position_events(position))
            self.metrics.generated(tokens_at(position))
        return count

    async def _stream_break(
        self,
        request: web.Request,
        response: web.StreamResponse,
        events: EventWriter,
        fault: str | None,
        cut: _Cut,
    ) -> None:
        """End a stream early: reset, error event, or a clean close with no finish and no [DONE]."""
        self.metrics.finished["abort"] += 1
        if fault == "reset" and not cut.cut:
            await asyncio.sleep(0.005)  # let the sent events reach the client before the RST
            _abort(request)
            return
        if fault == "server_error" and not cut.cut:
            await response.write(events.error("injected server error") + DONE)
        await response.write_eof()

    async def _stream_end(self, response: web.StreamResponse, writers: list[EventWriter]) -> None:
        """finish_reason event (only for a choice with no token or a tool call: the last token's
        event carries it otherwise, as vLLM's does), usage event when asked, [DONE] unless quirk
        `no-done`."""
        plan = writers[0].plan
        tail = b"".join(
            w.finish() for w in writers if not w.plan.token_ids or w.plan.tool_call is not None
        )
        if plan.sampling.include_usage:
            tail += writers[0].usage([w.plan for w in writers])
        if "no-done" not in self.config.quirks:
            tail += DONE
        await response.write(tail)
        await response.write_eof()
        self.metrics.finish(plan.finish_reason)


def _json_response(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(body).encode(), status=status, content_type=_JSON)


def _abort(request: web.Request) -> None:
    """Reset the TCP connection (RST, via SO_LINGER 0): the client sees no valid HTTP end."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def die_of_sigsegv() -> None:
    """Die of SIGSEGV, as a server whose corrupted state reached native code does (no core
    file: the limit is set to 0 first)."""
    import resource
    import signal

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.stderr.write("Fatal Python error: Segmentation fault (injected: corrupted state)\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGSEGV)


def _user_text(body: dict[str, Any]) -> str:
    """The prompt a user wrote: the completions prompt, or chat's last message's text."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        content = messages[-1].get("content")
        return content if isinstance(content, str) else ""
    return ""


def _maybe_die(config: MockConfig) -> None:
    """Print the death message and exit 1 at once, unless the die-once file already exists."""
    marker = config.die_once_file
    if marker is not None:
        if marker.exists():
            return
        marker.touch()
    sys.stderr.write(config.die_message + "\n")
    sys.stderr.flush()
    os._exit(1)
