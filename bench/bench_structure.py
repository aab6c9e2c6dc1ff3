"""Bench (issue 29 item 2): what the `invalid_structure` check flags on a healthy structured-output
server, what it finds in broken ones, and what it costs per answer.

False flags: the real tiny model served by llama.cpp (`soakgate.servers.llamacpp`, the GGUF made
by `scripts/make_gguf.py`), whose JSON-schema grammar constrains every answer, soaked with
`soakgate run` at temperature 0.8 under four controls of different kinds:

- `answer-schema`: `examples/answer-schema.json` (an enum and a bounded integer) on the built-in
  prompts, completions, streamed, sent as llama.cpp's `json_schema`;
- `chat-nested`: a nested schema (an object holding an array of short strings, a number, a
  boolean, an optional property) on chat, not streamed, sent as OpenAI's `response_format`;
- `mixed`: a prompt file mixing four one-property schemas with free prompts (the free ones are
  not judged);
- `cut`: the answer schema at `--max-tokens 24`, where most answers are cut by the budget and
  judged only on whether they can still be completed.

Found faults, real server: `swap`, a proxy (`tests/schema_swap.py`) that hands 20% of the
requests another request's schema, so the real grammar writes a valid document of the wrong
schema (recall over the swapped answers, and over those the server finished; precision);
`lost`, the schema sent in a field llama.cpp's completions endpoint ignores (OpenAI's
`response_format`), so every answer is free text.

Found faults, mock (`--mock`): `soakgate mock-server --invalid-structure-rate 0.05` on JSON
schema, regex and tool-call prompts, streamed and not: recall per kind against its ground truth,
false flags on its clean answers.

Cost: microseconds of the check per answer (JSON schema, regex, tool calls), in process.

Every share with its Clopper-Pearson 95% interval. Run:

    python bench/bench_structure.py [--requests 400] [--mock] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from benchlib import share, soak_run  # noqa: E402

from soakgate.servers.llamacpp import LlamaCppProcess  # noqa: E402

MODEL = REPO.parent / "shared" / "models" / "tiny-llama-8k"
ANSWER_SCHEMA = REPO / "examples" / "answer-schema.json"
NESTED = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 16},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
        "weight": {"type": "number"},
        "done": {"type": "boolean"},
        "note": {"type": "string", "maxLength": 12},
    },
    "required": ["title", "tags", "weight", "done"],
    "additionalProperties": False,
}
ONE_PROPERTY = {
    "verdict": {"enum": ["yes", "no", "unsure"]},
    "count": {"type": "integer", "minimum": 0, "maximum": 9},
    "flag": {"type": "boolean"},
    "color": {"enum": ["red", "green", "blue"]},
}


def one_property_prompts(path: Path, free: int = 0) -> Path:
    """Eight prompts of four one-property schemas, and `free` prompts without a structure."""
    lines: list[dict[str, Any]] = []
    for n in range(8):
        key = list(ONE_PROPERTY)[n % 4]
        schema = {"type": "object", "properties": {key: ONE_PROPERTY[key]}, "required": [key],
                  "additionalProperties": False}  # fmt: skip
        lines.append({"id": f"{key}-{n}", "prompt": f"Question {n}: give the {key}.",
                      "response_format": schema})  # fmt: skip
    lines += [{"id": f"free-{n}", "prompt": f"Tell me about topic {n}."} for n in range(free)]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def soak(url: str, db: Path, requests: int, extra: list[str]) -> float:
    return soak_run(url, db, requests, "--temperature", "0.8", *extra)


def rows(db: Path) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(request id, finish reason, checks, details) of every answered row."""
    with sqlite3.connect(db) as connection:
        found = connection.execute(
            "SELECT request_id, finish_reason, checks, details FROM generations "
            "WHERE error_class IS NULL"
        ).fetchall()
    return [(r, f or "", c, json.loads(d or "{}")) for r, f, c, d in found]


def healthy(folder: Path, url: str, requests: int) -> None:
    nested = folder / "nested.json"
    nested.write_text(json.dumps(NESTED))
    controls = {
        "answer-schema": ["--response-format", str(ANSWER_SCHEMA), "--structure-via",
                          "llamacpp", "--max-tokens", "160"],
        "chat-nested": ["--response-format", str(nested), "--endpoint", "chat", "--no-stream",
                        "--max-tokens", "200"],
        "mixed": ["--prompts", str(one_property_prompts(folder / "mixed.jsonl", free=4)),
                  "--structure-via", "llamacpp", "--max-tokens", "160"],
        "cut": ["--response-format", str(ANSWER_SCHEMA), "--structure-via", "llamacpp",
                "--max-tokens", "24"],
    }  # fmt: skip
    print(f"false flags: real tiny model on llama.cpp, grammar-constrained, {requests} requests "
          "per control")  # fmt: skip
    total = flags = 0
    for name, extra in controls.items():
        db = folder / f"healthy-{name}.sqlite"
        seconds = soak(url, db, requests, extra)
        found = rows(db)
        judged = [r for r in found if "-invalid_structure" not in r[2]]
        flagged = [r for r in judged if "invalid_structure" in r[2].split(",")]
        cut = sum(1 for r in judged if r[1] == "length")
        total, flags = total + len(judged), flags + len(flagged)
        print(f"  {name:14s} judged {len(judged):5d} (cut by the budget {cut:4d}), flagged "
              f"{share(len(flagged), len(judged))}  [{seconds:.0f} s]")  # fmt: skip
        for r in flagged[:3]:
            print(f"    e.g. {r[3].get('invalid_structure')}")
    print(f"  all            flagged {share(flags, total)}")


def faults(folder: Path, url: str, requests: int) -> None:
    from tests.schema_swap import SchemaSwapProcess

    print(f"found faults: real tiny model on llama.cpp, {requests} requests each")
    prompts = one_property_prompts(folder / "swap.jsonl")
    with SchemaSwapProcess(url, 0.2, 29, folder / "swap.log") as proxy:
        db = folder / "swap.sqlite"
        soak(proxy.url, db, requests, ["--prompts", str(prompts), "--structure-via", "llamacpp",
                                       "--max-tokens", "160"])  # fmt: skip
        swapped = {line["rid"] for line in proxy.seen() if line["swapped"]}
    found = rows(db)
    flagged = {r[0] for r in found if "invalid_structure" in r[2].split(",")}
    finished = {r[0] for r in found if r[1] != "length"}
    recall = share(len(flagged & swapped), len(swapped))
    done = share(len(flagged & swapped & finished), len(swapped & finished))
    own = share(len(flagged - swapped), len(found) - len(swapped))
    print(f"  swap (20% get another request's schema): recall {recall}; over answers finished "
          f"{done}; flags on answers of their own schema {own}")  # fmt: skip
    db = folder / "lost.sqlite"
    soak(url, db, requests, ["--response-format", str(ANSWER_SCHEMA), "--structure-via", "openai",
                             "--max-tokens", "160"])  # fmt: skip
    found = rows(db)
    flagged_n = sum(1 for r in found if "invalid_structure" in r[2].split(","))
    kinds = Counter(r[3].get("invalid_structure", {}).get("error", "")[:40] for r in found
                    if "invalid_structure" in r[2].split(","))  # fmt: skip
    print(
        f"  lost (the schema in a field the server ignores): flagged "
        f"{share(flagged_n, len(found))}; {kinds.most_common(2)}"
    )


def mock_faults(folder: Path, requests: int) -> None:
    from soakgate.mockserver.process import MockProcess

    schema = folder / "schema.json"
    schema.write_text(json.dumps(NESTED))
    tools = folder / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {
            "type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"],
        "additionalProperties": False}}}]))  # fmt: skip
    controls = {
        "json, completions, streamed": ["--response-format", str(schema)],
        "json, chat, not streamed": ["--response-format", str(schema), "--endpoint", "chat",
                                     "--no-stream"],
        "regex, completions, not streamed": ["--regex", r"[A-Z][a-z]{2,8}-\d{3}",
                                             "--structure-via", "vllm", "--no-stream"],
        "tools, chat, streamed": ["--tools", str(tools), "--tool-choice", "required",
                                  "--endpoint", "chat"],
    }  # fmt: skip
    print(f"found faults: mock --invalid-structure-rate 0.05, {requests} requests each")
    for name, extra in controls.items():
        truth = folder / f"truth-{len(name)}.jsonl"
        with MockProcess(["--invalid-structure-rate", "0.05", "--seed", "7"],
                         ground_truth_path=truth) as mock:  # fmt: skip
            db = folder / f"mock-{abs(hash(name))}.sqlite"
            soak(mock.url, db, requests, [*extra, "--max-tokens", "256"])
            injected = {r["request_id"]: r["invalid_structure"] for r in mock.ground_truth()
                        if r.get("invalid_structure")}  # fmt: skip
        found = rows(db)
        flagged = {r[0] for r in found if "invalid_structure" in r[2].split(",")}
        by_kind = Counter(injected.values())
        caught = Counter(kind for rid, kind in injected.items() if rid in flagged)
        per_kind = ", ".join(f"{k} {caught[k]}/{n}" for k, n in sorted(by_kind.items()))
        recall = share(len(flagged & set(injected)), len(injected))
        clean = share(len(flagged - set(injected)), len(found) - len(injected))
        print(f"  {name:34s} recall {recall} ({per_kind}); clean flagged {clean}")


def cost() -> None:
    from soakgate.checks import StructureCheck
    from soakgate.prompts import Prompt, Structure
    from soakgate.records import Generation

    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    cases = {
        "json schema (nested, valid)": (Structure.of("json_schema", NESTED),
            '{"title": "a note", "tags": ["x", "y"], "weight": 1.5, "done": true}', {}),
        "json schema (invalid)": (Structure.of("json_schema", NESTED), '{"title": 3}', {}),
        "regex": (Structure.of("regex", r"[A-Z][a-z]{2,8}-\d{3}"), "Alpha-123", {}),
        "tool call": (Structure.of("tools", tools, "required"), "", {"tool_calls": [
            {"id": "c", "name": "lookup", "arguments": '{"city": "Oslo"}'}]}),
        "free prompt (not judged)": (None, "some free text " * 20, {}),
    }  # fmt: skip
    print("cost of the check per answer, in process (best of 5 x 2,000)")
    for name, (structure, text, details) in cases.items():
        check = StructureCheck()
        prompt = Prompt("p", "x", structure=structure)
        check.sent(0, prompt)
        best = float("inf")
        for _ in range(5):
            made = [Generation("r", "r-0", "t", "l", 0, "p", "chat", False, 0.0, 0.0, text=text,
                               finish_reason="stop") for _ in range(2000)]  # fmt: skip
            for g in made:
                g.details.update(details)
            began = time.perf_counter()
            for g in made:
                check.answered(g)
            best = min(best, (time.perf_counter() - began) / len(made))
        print(f"  {name:28s} {best * 1e6:6.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--mock", action="store_true", help="only the mock's faults and the cost")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    folder = args.out or Path(tempfile.mkdtemp(prefix="bench-structure-"))
    folder.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    if not args.mock:
        gguf = Path(tempfile.gettempdir()) / "soakgate-bench-tiny.gguf"
        if not gguf.is_file():
            subprocess.run([sys.executable, str(REPO / "scripts" / "make_gguf.py"), str(gguf),
                            "--model", str(MODEL)], check=True, capture_output=True)  # fmt: skip
        server = LlamaCppProcess(gguf, parallel=8, threads=2, log_dir=folder).start()
        try:
            healthy(folder, server.url, args.requests)
            faults(folder, server.url, args.requests)
        finally:
            server.stop()
    mock_faults(folder, args.requests)
    cost()
    print(f"{time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
