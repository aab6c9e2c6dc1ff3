"""The server's own load, read from its Prometheus `/metrics` during a soak (`server_load` events).

What surrounded a collapse matters as much as the collapse: vLLM reports the requests in its
running batch and its waiting queue and the share of KV-cache blocks in use; the Prometheus
client's process collector reports when the server process started. Each scrape that has any of
them becomes one `server_load` event, so the report can say what the server itself carried when
a request collapsed (`soakgate report --collapse ID`). An observer of the metrics watch
(`specwatch.watch(also=...)`): the soak's driver knows nothing of it.
"""

from __future__ import annotations

from collections.abc import Callable

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
"""vLLM's KV-cache usage gauge (a fraction, 1 = full): the V1 name, then the older one."""
PROCESS_START = "process_start_time_seconds"


def server_load(text: str) -> dict[str, float]:
    """`running`, `waiting` (summed over engines), `kv_cache_usage` (the fullest engine's) and
    `process_start` (Unix time) where the page has them; empty when it has none."""
    from prometheus_client.parser import text_string_to_metric_families  # at the first scrape

    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            value = float(sample.value)
            if sample.name == RUNNING:
                found["running"] = found.get("running", 0.0) + value
            elif sample.name == WAITING:
                found["waiting"] = found.get("waiting", 0.0) + value
            elif sample.name in KV_CACHE:
                found["kv_cache_usage"] = max(found.get("kv_cache_usage", 0.0), value)
            elif sample.name == PROCESS_START:
                found["process_start"] = min(found.get("process_start", value), value)
    return found


class ServerLoadWatch:
    """Records one `server_load` event per scrape that reports any load figure; gives up
    (returns False) when the first readable page has none."""

    def __init__(self, record: Callable[[str, dict[str, object]], None]) -> None:
        self._record = record
        self._seen_any = False

    def __call__(self, text: str | None, at: float) -> bool:
        """Observe one scrape (`text` None: it failed); False once there is nothing to watch."""
        if text is None:
            return True
        try:
            figures = server_load(text)
        except ValueError:  # not Prometheus text
            figures = {}
        if not figures:
            return self._seen_any  # a server that never reports load is not scraped for it
        self._seen_any = True
        self._record("server_load", {**figures, "at": at})
        return True
