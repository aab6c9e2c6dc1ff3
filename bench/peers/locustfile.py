"""locust FastHttpUser closed loop for bench_client.py: each user posts back to back, no waits.

Streaming reads the body in chunks (iter_content; FastResponse has no line reader for a
chunked body), splits SSE lines and JSON-decodes each event, as a locust user would.
"""

import json

from locust import constant, events, task
from locust.contrib.fasthttp import FastHttpUser


@events.init_command_line_parser.add_listener
def _(parser):
    parser.add_argument("--stream", action="store_true", default=False)
    parser.add_argument("--no-stream", dest="stream", action="store_false")
    parser.add_argument("--max-tokens", type=int, default=64)


class Completions(FastHttpUser):
    wait_time = constant(0)
    concurrency = 1

    def on_start(self):
        options = self.environment.parsed_options
        self.stream = options.stream
        self.body = json.dumps(
            {
                "model": "soakgate-mock",
                "prompt": "Tell me a story.",
                "max_tokens": options.max_tokens,
                "stream": self.stream,
            }
        )

    @task
    def complete(self):
        headers = {"Content-Type": "application/json"}
        if not self.stream:
            response = self.client.post("/v1/completions", data=self.body, headers=headers)
            json.loads(response.content)["choices"][0]["text"]
            return
        response = self.client.post("/v1/completions", data=self.body, headers=headers, stream=True)
        text, partial = [], b""
        for chunk in response.iter_content(65536, decode_content=False):
            *lines, partial = (partial + chunk).split(b"\n")
            for line in lines:
                if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]":
                    choices = json.loads(line[6:]).get("choices")
                    text.append(choices[0]["text"] if choices else "")
        assert len(text) >= 64, len(text)
