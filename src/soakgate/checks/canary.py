"""Canaries: a short, unique, verifiable marker in every request's prompt.

A canary names its request (the request's sequence number, in hex) and carries a keyed
checksum of it (BLAKE2b keyed with the run id), so any canary found in an answer is told from
text that merely looks like one and names the request it came from without any table of the
canaries sent: memory stays constant however long the soak. Written by hand: no library marks
prompts this way.

The marker is appended to the prompt (the last user message in chat), never put in front: a
prefix unique to every request would share no prefix-cache block between requests, and the
prefix cache's reuse of another request's blocks is one way answers leak between requests.
"""

from __future__ import annotations

import hashlib
import re

from soakgate.prompts import Prompt
from soakgate.prompts.source import MarkedPrompt

_TAG = re.compile(r"\bSG-([0-9A-F]{1,16})-([0-9A-F]{8})\b", re.IGNORECASE)


class Canaries:
    """The canaries of one run (keyed by its id)."""

    def __init__(self, run_id: str) -> None:
        seed = run_id.encode("utf-8", "surrogatepass")
        self._key = hashlib.blake2b(seed, digest_size=32).digest()

    def _mac(self, seq: int) -> str:
        digest = hashlib.blake2b(str(seq).encode(), key=self._key, digest_size=4)
        return digest.hexdigest().upper()

    def tag(self, seq: int) -> str:
        """The canary of request `seq`: `SG-<seq in hex>-<8 hex checksum>`."""
        return f"SG-{seq:X}-{self._mac(seq)}"

    def mark(self, prompt: Prompt, seq: int) -> Prompt:
        """The prompt as sent: its text with the canary on a line of its own at the end (the
        prompt id is kept: rows still group by the prompt they asked)."""
        base = (prompt.base if isinstance(prompt, MarkedPrompt) else None) or prompt
        return MarkedPrompt(prompt.prompt_id, f"{prompt.text}\n\n[{self.tag(seq)}]",
                            prompt.system, prompt.structure, base)  # fmt: skip

    def found(self, text: str) -> list[int]:
        """The requests (sequence numbers) whose genuine canaries stand in `text`, in order of
        first appearance; a marker whose checksum does not match is not one. Most answers hold
        no `SG-` in any case: one upper-casing and a substring test tell (a fifth of the
        expression's scan over an answer that holds none)."""
        seqs: list[int] = []
        if "SG-" not in text.upper():
            return seqs
        for match in _TAG.finditer(text):
            seq = int(match.group(1), 16)
            if match.group(2).upper() == self._mac(seq) and seq not in seqs:
                seqs.append(seq)
        return seqs
