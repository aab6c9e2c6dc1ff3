"""Server-wide counters exposed at /metrics in Prometheus text format under vLLM's metric names."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from soakgate.mockserver.config import MockConfig

KV_CACHE_SEQUENCES = 64
"""Requests in flight that the mock's stand-in KV cache holds when full (its usage gauge)."""
NUM_SPECULATIVE_TOKENS = 3
"""Draft length per speculation step, as in a typical `num_speculative_tokens=3` setup."""


@dataclass(slots=True)
class Metrics:
    """Live state of the mock: in-flight requests and monotonically increasing counters."""

    config: MockConfig
    in_flight: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: dict[str, int] = field(default_factory=lambda: {"length": 0, "stop": 0, "abort": 0})
    spec_drafts: float = 0.0
    spec_draft_tokens: float = 0.0
    spec_accepted_tokens: float = 0.0
    started_at: float = field(default_factory=time.time)
    """When the server process started (Prometheus' `process_start_time_seconds`)."""

    def finish(self, reason: str | None) -> None:
        """Count a finished request under vLLM's label (a tool call's engine saw EOS: `stop`)."""
        self.finished["stop" if reason == "tool_calls" else reason or "abort"] += 1

    def generated(self, tokens: int) -> None:
        """Count generated tokens; spec-decode counters advance at the in-flight acceptance rate."""
        self.generation_tokens += tokens
        if self.config.spec_decode:
            saturated = self.in_flight >= self.config.spec_collapse_at
            rate = self.config.spec_accept_saturated if saturated else self.config.spec_accept
            # Each step proposes k drafts; accepted drafts plus one bonus token are emitted.
            steps = tokens / (1.0 + rate * NUM_SPECULATIVE_TOKENS)
            self.spec_drafts += steps
            self.spec_draft_tokens += steps * NUM_SPECULATIVE_TOKENS
            self.spec_accepted_tokens += steps * NUM_SPECULATIVE_TOKENS * rate

    def render(self) -> str:
        """The Prometheus text exposition of every metric."""
        labels = f'engine="0",model_name="{self.config.model_name}"'
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, values: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(f"{name}{{{labels}{extra}}} {float(value)!r}" for extra, value in values)

        metric(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            [("", self.in_flight)],
        )
        metric(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            [("", 0)],
        )
        metric(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            [("", min(1.0, self.in_flight / KV_CACHE_SEQUENCES))],
        )
        metric(
            "vllm:prompt_tokens_total",
            "counter",
            "Number of prefill tokens processed.",
            [("", self.prompt_tokens)],
        )
        metric(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            [("", self.generation_tokens)],
        )
        metric(
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            [(f',finished_reason="{r}"', n) for r, n in self.finished.items()],
        )
        if self.config.spec_decode:
            metric(
                "vllm:spec_decode_num_drafts_total",
                "counter",
                "Number of spec decoding drafts.",
                [("", self.spec_drafts)],
            )
            metric(
                "vllm:spec_decode_num_draft_tokens_total",
                "counter",
                "Number of draft tokens.",
                [("", self.spec_draft_tokens)],
            )
            metric(
                "vllm:spec_decode_num_accepted_tokens_total",
                "counter",
                "Number of accepted tokens.",
                [("", self.spec_accepted_tokens)],
            )
        lines.append("# HELP process_start_time_seconds Start time of the process since epoch.")
        lines.append("# TYPE process_start_time_seconds gauge")
        lines.append(f"process_start_time_seconds {self.started_at!r}")
        return "\n".join(lines) + "\n"
