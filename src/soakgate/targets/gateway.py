"""What a gateway or proxy between soakgate and the server says about an answer: how often it
retried the request upstream (its headers), and whether an error page is its own rather than
the server's. Pure functions over headers and bytes; `http1` collects the headers.

A gateway that retries an upstream fault and returns the retry's clean answer hides that fault
(LiteLLM without streaming retried 5 of 7 injected faults: the server saw 305 requests for 300
rows); a proxy's own 502 page is not the server's error. Both are kept apart on the row.
"""

from __future__ import annotations

from collections.abc import Mapping

PROXY_SERVERS = (
    "nginx", "openresty", "tengine", "haproxy", "envoy", "istio-envoy", "traefik", "caddy",
    "cloudflare", "awselb", "elb", "apache", "httpd", "varnish", "squid", "kong", "litespeed",
)  # fmt: skip
"""`Server` header values (their first word, lowercase, before any `/`) of proxies and load
balancers."""


def gateway_retries(headers: Mapping[str, str]) -> int | None:
    """Times a gateway retried the request upstream, from its headers: LiteLLM's
    `x-litellm-attempted-retries` plus `x-litellm-attempted-fallbacks`, Envoy's
    `x-envoy-attempt-count` minus one (the larger when both are there); None when no gateway
    said (or said nothing readable)."""
    litellm = [n for name in ("x-litellm-attempted-retries", "x-litellm-attempted-fallbacks")
               if (n := _count(headers.get(name))) is not None]  # fmt: skip
    envoy = _count(headers.get("x-envoy-attempt-count"))
    found = [sum(litellm)] if litellm else []
    if envoy is not None and envoy >= 1:
        found.append(envoy - 1)
    return max(found) if found else None


def proxy_page(server: bytes | None, content_type: bytes | None, body: bytes) -> str | None:
    """What made an error answer a proxy's own page (its `Server`, or an HTML page where an API
    answers JSON), or None when it may be the server's: a JSON body is the server's."""
    text = body.lstrip()[:1]
    if text in (b"{", b"["):
        return None
    name = (server or b"").decode("latin-1").strip()
    product = name.split("/", 1)[0].split(" ", 1)[0].lower()
    if product in PROXY_SERVERS:
        return f"Server: {name[:100]}"
    kind = (content_type or b"").split(b";", 1)[0].strip().lower()
    if kind == b"text/html" or text == b"<":
        return f"an HTML page{f' (Server: {name[:100]})' if name else ''}"
    return None


def _count(value: str | None) -> int | None:
    """A non-negative integer header value, or None."""
    if value is None:
        return None
    value = value.strip()
    return int(value) if value.isascii() and value.isdigit() and len(value) < 10 else None
