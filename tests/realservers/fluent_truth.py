"""Ground truth for the fluent positive control (examples/vllm-dropped-op-plugin, mode
`fluent`), recomputed independently of soakgate's scorer.

The control corrupts a decoding step when the model's top-1 next token there has an id that
`soakgate_dropped_op.fluent.selected` picks. Which steps of a stored generation were corrupted
is therefore recomputed from the eager reference's top-1 id before each generated token
(`prompt_logprobs: 1` over prompt + generated ids: the rank-1 entry). The scorer reads a
different thing (the rank/logprob of the token that was actually generated), and never the
rule. Only loopback URLs are used.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soakgate.probes.differential import first_divergence
from soakgate.records import Generation
from soakgate.stats.rates import clopper_pearson
from tests.realservers.vllm_support import REPO

sys.path.insert(0, str(REPO / "examples" / "vllm-dropped-op-plugin"))
from soakgate_dropped_op.fluent import corrupted_steps


def post(url: str, path: str, body: dict[str, Any]) -> Any:
    """POST JSON to a loopback server; the parsed answer."""
    request = urllib.request.Request(
        url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.loads(answer.read())


def prompt_ids(url: str, model: str, text: str) -> list[int]:
    """The ids vLLM's completions endpoint uses for a text prompt (/tokenize, no template)."""
    tokens: list[int] = post(url, "/tokenize", {"model": model, "prompt": text})["tokens"]
    return tokens


def top1_before_each(url: str, model: str, prompt: list[int], generated: list[int]) -> list[int]:
    """The reference's top-1 token id at the position before each generated token."""
    body = {"model": model, "prompt": prompt + generated, "max_tokens": 1,
            "prompt_logprobs": 1, "temperature": 0}  # fmt: skip
    entries = post(url, "/v1/completions", body)["choices"][0]["prompt_logprobs"]
    tops = []
    for position in range(len(prompt), len(prompt) + len(generated)):
        ranked = {int(k): v["rank"] for k, v in entries[position].items()}
        tops.append(next(token for token, rank in ranked.items() if rank == 1))
    return tops


@dataclass(frozen=True)
class Truth:
    """One stored generation and the steps the control corrupted in it."""

    row: Generation
    steps: list[int]

    @property
    def corrupted(self) -> bool:
        return bool(self.steps)


def ground_truth(
    url: str, model: str, rows: list[Generation], texts: dict[str, str]
) -> list[Truth]:
    """Each row's corrupted steps, under the eager reference at `url`; `texts` maps prompt id
    to prompt text. Each row must hold its token ids, and the prompt must tokenize to the
    row's stored prompt_tokens (else the recomputation would be of another sequence)."""
    cache: dict[str, list[int]] = {}
    truths = []
    for row in rows:
        assert row.token_ids, (row.request_id, row.error_class)
        ids = cache.get(row.prompt_id) or prompt_ids(url, model, texts[row.prompt_id])
        cache[row.prompt_id] = ids
        assert len(ids) == row.prompt_tokens, (row.prompt_id, len(ids), row.prompt_tokens)
        truths.append(Truth(row, corrupted_steps(top1_before_each(url, model, ids, row.token_ids))))
    return truths


@dataclass(frozen=True)
class Tally:
    """What reference scoring and the degeneration detectors caught, against the truth."""

    target: str
    rows: int
    corrupted: int
    flagged_corrupted: int
    collapsed_corrupted: int
    clean: int
    flagged_clean: int
    unscored: int

    def lines(self) -> list[str]:
        """The tally in words, with exact 95% intervals."""
        out = [f"{self.target}: {self.rows} rows, {self.unscored} unscored, "
               f"{self.corrupted} corrupted by the control (ground truth)"]  # fmt: skip
        for what, k, n in (
            ("corrupted flagged suspect", self.flagged_corrupted, self.corrupted),
            ("corrupted flagged by degeneration detectors", self.collapsed_corrupted,
             self.corrupted),
            ("uncorrupted flagged suspect (false flags)", self.flagged_clean, self.clean),
        ):  # fmt: skip
            if n:
                low, high = clopper_pearson(k, n)
                out.append(f"  {what}: {k}/{n} = {k / n:.3f} [{low:.3f}, {high:.3f}]")
        return out


def tally(target: str, truths: list[Truth]) -> Tally:
    """Counts over scored rows of one target (unscored rows are counted apart)."""
    scored = [t for t in truths if t.row.suspect is not None]
    corrupted = [t for t in scored if t.corrupted]
    clean = [t for t in scored if not t.corrupted]
    return Tally(
        target, len(truths), len(corrupted), sum(bool(t.row.suspect) for t in corrupted),
        sum(t.row.collapsed for t in corrupted), len(clean),
        sum(bool(t.row.suspect) for t in clean), len(truths) - len(scored),
    )  # fmt: skip


def seeded(reference: str, other: str, model: str, count: int) -> dict[str, int]:
    """The first `count` builtin prompts, each with its own seed (1000 + i), 32 tokens at
    temperature 0.8, sent to both servers: where their token ids first differ, against the
    steps the control picks in `other`'s output (under `reference`)."""
    from soakgate.prompts import builtin_prompts

    hits = []
    for index, prompt in enumerate(builtin_prompts()[:count]):
        answers = []
        for url in (reference, other):
            body = {"model": model, "prompt": prompt.text, "max_tokens": 32,
                    "temperature": 0.8, "seed": 1000 + index, "return_token_ids": True}  # fmt: skip
            answers.append(post(url, "/v1/completions", body)["choices"][0])
        ids = answers[1]["prompt_token_ids"]
        steps = corrupted_steps(top1_before_each(reference, model, ids, answers[1]["token_ids"]))
        first = first_divergence(answers[0]["token_ids"], answers[1]["token_ids"])
        hits.append((None if first < 0 else first, steps))
    picked = [(first, steps[0]) for first, steps in hits if steps]
    unpicked = [first for first, steps in hits if not steps]
    return {
        "prompts": count, "identical": sum(first is None for first, _ in hits),
        "picked": len(picked), "picked_differing": sum(f is not None for f, _ in picked),
        "picked_first_difference_at_first_pick": sum(f == s for f, s in picked),
        "unpicked": len(unpicked), "unpicked_identical": sum(f is None for f in unpicked),
    }  # fmt: skip


def main(argv: list[str]) -> int:
    """`python -m tests.realservers.fluent_truth tally DB EAGER_URL MODEL [JSON]`: the tally per
    target (and, with JSON, the tallies and each row's picked steps written there);
    `... seeded EAGER_URL OTHER_URL MODEL COUNT`: the seeded comparison of two servers."""
    from soakgate.store import open_store

    if argv[:1] == ["seeded"]:
        print(json.dumps(seeded(argv[1], argv[2], argv[3], int(argv[4]))))
        return 0
    db, url, model = argv[1:4]
    store = open_store(db)
    try:
        rows = [g for g in store.generations() if g.ok]
        texts = {
            pid: p.text for run in store.runs() for pid, p in store.prompts(run.run_id).items()
        }
    finally:
        store.close()
    written: dict[str, Any] = {}
    for target in sorted({r.target for r in rows}):
        truths = ground_truth(url, model, [r for r in rows if r.target == target], texts)
        counts = tally(target, truths)
        print("\n".join(counts.lines()))
        for t in [t for t in truths if t.corrupted][:5]:
            print(f"    steps {t.steps} suspect={t.row.suspect}: {t.row.text!r}")
        steps = {t.row.request_id: t.steps for t in truths}
        written[target] = {"tally": dataclasses.asdict(counts), "steps": steps}
    if len(argv) > 4:
        Path(argv[4]).write_text(json.dumps(written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
