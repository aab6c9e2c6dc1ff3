"""GET requests beside the generation traffic (model discovery, `/metrics` scrapes), on the
same lean HTTP/1.1 pool (`targets/pool.py`): TLS options, forward proxies, keep-alive and the
caps on an answer are the generation connections' own, and a soak imports no second HTTP
client (aiohttp alone cost more CPU at start-up than all the rest of a soak's imports).

Redirects are not followed (nor are they for generation requests): a 3xx is the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from soakgate import __version__
from soakgate.errors import UsageError
from soakgate.targets.encoding import Decoder
from soakgate.targets.pool import Pool

MAX_BODY = 16 * 1024 * 1024
"""Cap on a fetched page (vLLM's `/metrics` is ~0.1-1 MB; a gateway's model list ~0.1 MB)."""


def get_request(pool: Pool, path: str, headers: Mapping[str, str] | None = None) -> bytes:
    """The bytes of a GET of `path` (below the pool's base path) with `headers`."""
    fields = {
        "Host": pool.authority,
        "User-Agent": f"soakgate/{__version__}",
        "Accept": "*/*",
        "Accept-Encoding": "identity",
        **(headers or {}),
        **pool.head_fields,
    }
    if any(c in text for item in fields.items() for text in item for c in "\r\n\0"):
        raise UsageError("a request header (the API key?) contains a line break or a NUL character")
    lines = [f"GET {pool.target_prefix}{path} HTTP/1.1", *(f"{k}: {v}" for k, v in fields.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")


async def get(
    pool: Pool,
    path: str,
    headers: Mapping[str, str] | None = None,
    *,
    timeout_s: float,
    max_body: int = MAX_BODY,
) -> tuple[int, bytes]:
    """GET `path` through `pool` within `timeout_s`: the answer's status and its body, decoded
    when the server compressed it anyway.

    Raises what the pool and the connection raise (`http1.HttpError`: no connection, a reset,
    an answer over `max_body`; `TimeoutError`; `parse.ResponseFormatError` for a broken
    coding); the connection goes back to the pool only when the answer was read whole."""
    request = get_request(pool, path, headers)
    async with asyncio.timeout(timeout_s):
        connection = await pool.send(request, max_body)
        try:
            body = await connection.read()
        except BaseException:
            pool.discard(connection)
            raise
        status, encoding = connection.status, connection.encoding
        pool.release(connection)
    if encoding is not None and encoding.strip().lower() not in (b"", b"identity"):
        decoder = Decoder(encoding, max_body)
        body = decoder.feed(body)
        decoder.close()
    return status, body
