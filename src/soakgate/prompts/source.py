"""Prompt records, the JSONL loader and the round-robin / seeded-random picker."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from soakgate.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt, usable on both the completions and the chat endpoint."""

    prompt_id: str
    """Stable id stored with every generation that used it."""
    text: str
    """The prompt text (completions) and the user message (chat)."""
    system: str | None = None
    """Optional system message for the chat endpoint."""

    def messages(self) -> list[dict[str, str]]:
        """The chat messages for this prompt."""
        user = [{"role": "user", "content": self.text}]
        return [{"role": "system", "content": self.system}, *user] if self.system else user


def load_prompts(path: str | Path) -> list[Prompt]:
    """Read a JSONL file of {"prompt": ...} or {"messages": [...]} lines (optional "id")."""
    file = Path(path)
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read prompts file {file}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"prompts file {file} is not UTF-8") from exc
    prompts = [_parse_line(line, file, n) for n, line in enumerate(lines, 1) if line.strip()]
    if not prompts:
        raise ConfigError(f"prompts file {file} has no prompts")
    _check_unique_ids(prompts, file)
    return prompts


def _check_unique_ids(prompts: list[Prompt], file: Path) -> None:
    """A ConfigError when two different prompts share an id: each row stores only the id, so
    the prompt it was sent could not be told (`soakgate replay` sends it again)."""
    seen: dict[str, Prompt] = {}
    for prompt in prompts:
        first = seen.setdefault(prompt.prompt_id, prompt)
        if first != prompt:
            raise ConfigError(
                f"prompts file {file}: id {prompt.prompt_id!r} names two different prompts "
                "(give each prompt its own id)"
            )


def _parse_line(line: str, file: Path, number: int) -> Prompt:
    """One JSONL line as a Prompt; any problem names the file and line."""
    where = f"{file}:{number}"
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not JSON ({exc.msg})") from exc
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: expected an object")
    prompt_id = str(item.get("id", f"{file.stem}-{number}"))
    if isinstance(item.get("prompt"), str):
        return Prompt(prompt_id, item["prompt"])
    messages = item.get("messages")
    if isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages):
        system = next((m.get("content") for m in messages if m.get("role") == "system"), None)
        user = [str(m.get("content", "")) for m in messages if m.get("role") != "system"]
        return Prompt(prompt_id, "\n\n".join(user), str(system) if system else None)
    raise ConfigError(f"{where}: needs a string 'prompt' or a list of 'messages'")


class PromptPicker:
    """Assigns prompts to requests by sequence number: round-robin, or seeded random."""

    def __init__(self, prompts: list[Prompt], order: str = "round-robin", seed: int = 0) -> None:
        if not prompts:
            raise ConfigError("no prompts to send")
        if order not in ("round-robin", "random"):
            raise ConfigError(f"prompt order must be round-robin or random, not {order!r}")
        self.prompts = prompts
        self.order = order
        self.seed = seed

    def pick(self, seq: int) -> Prompt:
        """The prompt for request number `seq`: reproducible from (order, seed, seq) alone."""
        if self.order == "round-robin":
            return self.prompts[seq % len(self.prompts)]
        return self.prompts[random.Random(self.seed * 1_000_003 + seq).randrange(len(self.prompts))]
