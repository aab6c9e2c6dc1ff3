"""Numbers that cannot be right (`inconsistent`): log-probabilities and usage that no correct
server returns.

An overflowing or mis-fused kernel can leave the text plausible and the numbers beside it
impossible; where the run asks for log-probabilities (`--logprobs`, `--top-logprobs K`), every
answer's are checked, position by position, as they came (`Outcome.logprob_parts`):

- `not_finite`: a log-probability that is NaN or infinite;
- `positive`: a log-probability above 0 (a probability above 1), beyond rounding;
- `unsorted`: alternatives not in descending order (the sampled token's own entry, which vLLM
  puts first whatever its rank, is left out of the order);
- `sum_above_one`: the alternatives' probabilities summing above 1, beyond rounding;
- `sampled_above_top`: a sampled token not among the alternatives whose log-probability is
  above the least of them (it would have been one of them), or one among them whose two
  log-probabilities differ;
- `greedy_not_top`: at temperature 0 (the run's, or a greedy differential row's), a sampled
  token whose log-probability is below the best alternative's;
- `usage_mismatch`: `usage.completion_tokens` below the log-probability entries that came, or
  above them by more than the answer's non-ASCII bytes (llama.cpp leaves out the entries of
  tokens that end inside a UTF-8 character; ASCII text must match exactly), or, on an answer
  that ended on its budget (`finish_reason` `length`, usage not above `--max-tokens`), by 3
  more: the budget can end inside a character, whose tokens llama.cpp then drops from the
  text and the entries alike (up to 3 tokens of a 4-byte character; seen in 1 of 1,500 sampled
  answers of the shared model).

The first failure is the evidence (its kind, output position and value). Cheap: one pass over
numbers already parsed, only where log-probabilities were asked for. Token ids against the text
would need the model's tokenizer and are not checked here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from soakgate.records import Generation, Run

INCONSISTENT = "inconsistent"
UNFINISHED_CHARACTER = 3
"""Tokens an answer cut by its budget inside a UTF-8 character may have without entries."""
TOLERANCE = 1e-3
"""Rounding allowed on a log-probability (servers compute them in float32 and print them
rounded)."""

Key = int | str | None
Position = tuple[float, Key, list[tuple[Key, float]] | None]
"""One output position: the sampled token's log-probability, its key (its id where the server
gives one, else its text; None: neither), and its alternatives as (key, log-probability) in the
order they came (None: none asked)."""


class NumbersCheck:
    """Checks every answer's log-probabilities and usage (a `load.spec.AnswerCheck`)."""

    def __init__(self, temperature: float, budget: int | None = None) -> None:
        self.temperature = temperature
        self.budget = budget

    def sent(self, seq: int, prompt: Any, same_as: int | None = None) -> Any:
        return prompt

    def judge(self, generations: Sequence[Generation]) -> None:
        """Nothing: every answer was judged as it came (`answered`)."""

    def answered(self, generation: Generation, outcome: Any = None) -> None:
        """Judge a clean answer: the first impossible number is the evidence."""
        if generation.error_class is not None or outcome is None:
            return
        greedy = self.temperature == 0 or bool(generation.details.get("differential"))
        evidence = first_impossible(outcome, greedy, self.budget)
        if evidence is not None:
            generation.checks.append(INCONSISTENT)
            generation.details[INCONSISTENT] = evidence


def first_impossible(
    outcome: Any, greedy: bool, budget: int | None = None
) -> dict[str, Any] | None:
    """The first impossible number of an answer (None: none). A chat entry that is certainly
    possible is passed by `_fine` (a few builtins, no lists of tuples); the others, and every
    completions entry, are read into positions and judged by `_position`, which names what is
    wrong. `budget`: the request's `max_tokens` (None: not known)."""
    count = 0
    for part in outcome.logprob_parts or ():
        content = part.get("content") if isinstance(part, dict) else None
        if isinstance(content, list):  # None: a chat entry `_fine` passed without reading it
            doubtful: Iterable[Position | None] = (
                _chat_position(entry) if not _fine(entry, greedy) else None
                for entry in content
                if entry.__class__ is dict
            )
        else:
            doubtful = positions([part])
        for position in doubtful:
            found = None if position is None else _position(*position, greedy)
            if found is not None:
                kind, value = found
                return {"kind": kind, "at": count, "value": value}
            count += 1
    return _usage(outcome, count, budget)


def _fine(entry: dict[str, Any], greedy: bool) -> bool:
    """True when a chat entry certainly breaks no rule (False: look closer)."""
    lp = entry.get("logprob")
    if lp.__class__ is not float and lp.__class__ is not int:
        return False
    if not -math.inf < lp <= TOLERANCE:  # NaN fails every comparison
        return False
    tops = entry.get("top_logprobs")
    if not tops:
        return True
    try:
        values = [t["logprob"] for t in tops]
        total = sum(values)
    except (TypeError, KeyError):
        return False
    if not -math.inf < total or max(values) > TOLERANCE:
        return False
    if values != sorted(values, reverse=True) or sum(map(math.exp, values)) > 1 + TOLERANCE:
        return False
    name = "id" if "id" in entry else "token"
    key = entry.get(name)
    for top in tops:
        if top.get(name) == key:
            return abs(top["logprob"] - lp) <= TOLERANCE and (
                not greedy or lp >= values[0] - TOLERANCE
            )
    return lp <= values[-1] + TOLERANCE and not greedy


def _position(
    sampled: float, token: Key, alternatives: list[tuple[Key, float]] | None, greedy: bool,
) -> tuple[str, Any] | None:  # fmt: skip
    if not math.isfinite(sampled):
        return "not_finite", repr(sampled)
    if sampled > TOLERANCE:
        return "positive", sampled
    if not alternatives:
        return None
    values = [lp for _, lp in alternatives]
    for value in values:
        if not math.isfinite(value):
            return "not_finite", repr(value)
        if value > TOLERANCE:
            return "positive", value
    others = [lp for text, lp in alternatives if text is None or text != token]
    if any(b > a + TOLERANCE for a, b in itertools.pairwise(others)):
        return "unsorted", others
    total = math.fsum(math.exp(v) for v in values)
    if total > 1 + TOLERANCE:
        return "sum_above_one", total
    own = [lp for text, lp in alternatives if token is not None and text == token]
    if own and abs(own[0] - sampled) > TOLERANCE:
        return "sampled_above_top", {"sampled": sampled, "listed": own[0]}
    if not own and _comparable(token, alternatives) and sampled > min(values) + TOLERANCE:
        return "sampled_above_top", {"sampled": sampled, "least_listed": min(values)}
    if greedy and sampled < max(values) - TOLERANCE:
        return "greedy_not_top", {"sampled": sampled, "top": max(values)}
    return None


def _comparable(token: Key, alternatives: list[tuple[Key, float]]) -> bool:
    """Whether the sampled token can be told absent from its alternatives: by id, or by text
    where no text is a partial UTF-8 character (llama.cpp writes the sampled token's whole
    character, '┌', and the same token among the alternatives as its byte, '\ufffd')."""
    if token is None:
        return False
    keys = [token, *(key for key, _ in alternatives)]
    return all(isinstance(k, int) for k in keys) or not any(
        isinstance(k, str) and "\ufffd" in k for k in keys
    )


def _usage(outcome: Any, entries: int, budget: int | None) -> dict[str, Any] | None:
    """`usage_mismatch` when the usage reported cannot be the tokens whose entries came."""
    reported = outcome.completion_tokens
    if not entries or reported is None:
        return None
    allowance = len((outcome.text or "").encode("utf-8")) - len(outcome.text or "")
    if outcome.finish_reason == "length" and (budget is None or reported <= budget):
        allowance += UNFINISHED_CHARACTER
    if reported < entries or reported > entries + allowance:
        return {"kind": "usage_mismatch", "at": None,
                "value": {"usage": reported, "entries": entries}}  # fmt: skip
    return None


def positions(parts: Any) -> Iterator[Position]:
    """Every output position of the log-probability objects that came (chat's `content` list,
    completions' `tokens` / `token_logprobs` / `top_logprobs`), in order."""
    for part in parts:
        if not isinstance(part, dict):
            continue
        content = part.get("content")
        if isinstance(content, list):
            for entry in content:
                if isinstance(entry, dict):
                    yield _chat_position(entry)
            continue
        values = part.get("token_logprobs")
        if not isinstance(values, list):
            continue
        tokens = part.get("tokens") or []
        tops = part.get("top_logprobs") or []
        for n, value in enumerate(values):
            if value is None:  # the prompt's first token (echo)
                continue
            token = tokens[n] if n < len(tokens) else None
            top = tops[n] if n < len(tops) else None
            listed = list(top.items()) if isinstance(top, dict) else None
            yield _number(value), token, [(t, _number(v)) for t, v in listed or ()] or None


def _chat_position(entry: dict[str, Any]) -> Position:
    tops = entry.get("top_logprobs")
    items = [t for t in tops if isinstance(t, dict)] if isinstance(tops, list) else []
    by_id = all(isinstance(e.get("id"), int) for e in (entry, *items))
    listed = [(_key(t, by_id), _number(t.get("logprob"))) for t in items] or None
    return _number(entry.get("logprob")), _key(entry, by_id), listed


def _key(entry: dict[str, Any], by_id: bool) -> Key:
    """A token's id (llama.cpp gives one) when the whole position has ids, else its text."""
    key = entry.get("id") if by_id else entry.get("token")
    return key if isinstance(key, int | str) else None


def _number(value: Any) -> float:
    """A log-probability as a float (what is not a number: NaN, so it is flagged)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def open_numbers(temperature: float, run: Run, resumed: bool) -> NumbersCheck:
    """The run's numbers check (a `load.spec.OpenAnswerCheck` once `temperature` is bound),
    recorded in its detectors so the report judges its rows."""
    run.detectors[INCONSISTENT] = {"tolerance": TOLERANCE}
    budget = run.load.get("max_tokens")
    return NumbersCheck(temperature, budget if isinstance(budget, int) else None)
