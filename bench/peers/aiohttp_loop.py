"""The bare client soakgate is held to: N aiohttp workers, JSON-decode each answer, nothing else.

Usage: python aiohttp_loop.py URL MODEL CONCURRENCY MAX_TOKENS SECONDS stream|nostream [uvloop]
"""

import asyncio
import json
import sys
import time

import aiohttp


async def worker(session, url, body, stream, deadline, counts):
    while time.monotonic() < deadline:
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
            text = []
            if stream:
                async for line in r.content:
                    if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]":
                        choices = json.loads(line[6:]).get("choices")
                        text.append(choices[0]["text"] if choices else "")
            else:
                text.append(json.loads(await r.read())["choices"][0]["text"])
        counts[0] += 1


async def main(url, model, concurrency, max_tokens, seconds, mode):
    stream = mode == "stream"
    body = json.dumps(
        {
            "model": model,
            "prompt": "Tell me a story.",
            "max_tokens": int(max_tokens),
            "stream": stream,
        }
    )
    counts, deadline = [0], time.monotonic() + float(seconds)
    connector = aiohttp.TCPConnector(limit=int(concurrency))
    async with aiohttp.ClientSession(connector=connector) as session:
        jobs = [
            worker(session, f"{url}/v1/completions", body, stream, deadline, counts)
            for _ in range(int(concurrency))
        ]
        await asyncio.gather(*jobs)
    print(f"requests {counts[0]}")


if sys.argv[7:] == ["uvloop"]:
    import uvloop

    uvloop.install()
asyncio.run(main(*sys.argv[1:7]))
