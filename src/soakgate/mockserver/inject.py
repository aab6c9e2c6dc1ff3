"""What goes wrong with each request: a two-state (clean/burst) Markov model of collapses,
faults, perturbations, and the ground-truth log that records every decision."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from soakgate.mockserver import lm
from soakgate.mockserver.config import MockConfig
from soakgate.mockserver.knobs import knob_rate
from soakgate.mockserver.text import (
    BANG_ID,
    EMPTY_ID,
    VOCAB,
    WORD_IDS,
    clean_tokens,
    continuation_offset,
    detokenize,
)
from soakgate.mockserver.vocab import PIECE_ID

DEGENERATE_MIN = 100
"""Degenerate tail length guaranteed when the output is >= 128 tokens."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The injection decided for one request; faults, collapses and perturbations are exclusive."""

    injected: str | None
    """Collapse kind, or None."""
    fault: str | None
    """Fault kind, or None."""
    perturb: bool
    """Whether a few ordinary tokens are to be replaced."""
    burst: bool
    """Whether the Markov model was in the burst state for this request."""
    fluent: bool = False
    """Whether a few tokens are to be replaced by words the mock's model finds unlikely."""
    corrupt: bool = False
    """The server's state is corrupt: the answer is garbage (a collapse, or every word wrong)."""
    crash: bool = False
    """The server dies of SIGSEGV on this request (its state was corrupt)."""
    shift: bool = False
    """Every token is drawn from a flattened distribution (`MockConfig.shift_rate`)."""
    crosstalk: bool = False
    """The answer carries another recent request's last prompt words (`crosstalk_rate`)."""
    invalid_structure: bool = False
    """The structured answer is to be made invalid (`invalid_structure_rate`)."""
    inconsistent: bool = False
    """One number beside the answer (a log-probability, the usage) is to be made impossible
    (`inconsistent_rate`)."""
    seed_drift: bool = False
    """The seeded answer is to drift from a drawn position on (`seed_drift_rate`)."""


CLEAN = Decision(None, None, False, False)


class Injector:
    """Draws a Decision per request from the server seed, in arrival order."""

    def __init__(self, config: MockConfig) -> None:
        self.rng = random.Random(config.seed)
        self._config = config
        self._burst = False
        self._faults = [(name, rate) for name, rate in config.fault_rates.items() if rate > 0]
        self._kinds = [(name, w) for name, w in config.collapse_kinds.items() if w > 0]
        self._kind_total = sum(w for _, w in self._kinds)
        self.knob_rate = knob_rate(config.knob_collapse, config.knobs)
        """The largest rate of the `knob_collapse` rules the knobs match (0: none matches)."""
        self._idle = not (
            self._faults
            or config.collapse_rate
            or self.knob_rate
            or config.burst_enter
            or config.perturb_rate
            or config.fluent_rate
            or config.shift_rate
            or config.crosstalk_rate
            or config.invalid_structure_rate
            or config.inconsistent_rate
            or config.seed_drift_rate
            or config.state_collapse
            or config.corrupt_at_in_flight
        )
        self._received = 0
        self.corrupt = False
        """The state is corrupt (until the process dies: a restart starts clean)."""

    def decide(
        self,
        in_flight: int = 1,
        structured: bool = False,
        numbers: bool = False,
        seeded: bool = False,
    ) -> Decision:
        """Advance the burst state, then draw fault, else collapse, else perturbation.
        `in_flight` counts the requests being served, this one included: below
        `burst_min_in_flight` the model is held in (or returned to) the clean state. A
        `structured` request's answer is its structure's, so instead of the corruptions of free
        text (perturbed, fluent, shifted, leaked) it may be made invalid. A free-text answer
        that carries `numbers` (log-probabilities or usage) may get an impossible one instead
        of those corruptions. A free-text answer to a `seeded` request may drift as well."""
        if self._idle:
            return CLEAN
        config, rng = self._config, self.rng
        self._received += 1
        if config.state_collapse is not None:  # the server's own count decides, nothing else
            width, period = config.state_collapse
            if (self._received - 1) % period < width:
                return Decision(self._pick_kind(), None, False, False)
            return CLEAN
        if config.corrupt_at_in_flight and (self.corrupt or self._corrupts(in_flight)):
            return self._corrupted()
        if self._burst:
            self._burst = rng.random() >= config.burst_exit
        else:
            self._burst = rng.random() < config.burst_enter
        if in_flight < config.burst_min_in_flight:
            self._burst = False
        draw = rng.random()
        for name, rate in self._faults:
            if draw < rate:
                return Decision(None, name, False, self._burst)
            draw -= rate
        collapse_rate = config.burst_collapse_rate if self._burst else config.collapse_rate
        if rng.random() < max(collapse_rate, self.knob_rate):
            return Decision(self._pick_kind(), None, False, self._burst)
        if structured:
            invalid = (
                config.invalid_structure_rate > 0
                and in_flight >= config.invalid_structure_after_in_flight
                and rng.random() < config.invalid_structure_rate
            )
            return Decision(None, None, False, self._burst, invalid_structure=invalid)
        # drawn only when asked for (and under the load asked for), as the draws below
        drift = (
            config.seed_drift_rate > 0
            and seeded
            and in_flight >= config.seed_drift_after_in_flight
            and rng.random() < config.seed_drift_rate
        )
        if numbers and config.inconsistent_rate > 0 and rng.random() < config.inconsistent_rate:
            return Decision(None, None, False, self._burst, inconsistent=True, seed_drift=drift)
        perturbed = rng.random() < config.perturb_rate
        # drawn only when asked for, so that seeds without it decide exactly as before
        fluent_draw = config.fluent_rate > 0 and rng.random() < config.fluent_rate
        shift_draw = config.shift_rate > 0 and rng.random() < config.shift_rate
        leak = config.crosstalk_rate > 0 and rng.random() < config.crosstalk_rate
        return Decision(None, None, perturbed, self._burst, fluent_draw, shift=shift_draw,
                        crosstalk=leak, seed_drift=drift)  # fmt: skip

    def _corrupts(self, in_flight: int) -> bool:
        """Whether this arrival corrupts the state (drawn only under the load that can)."""
        config = self._config
        if in_flight >= config.corrupt_at_in_flight and self.rng.random() < config.corrupt_rate:
            self.corrupt = True
        return self.corrupt

    def _corrupted(self) -> Decision:
        """An answer of a corrupt server: it crashes, or answers garbage (half of them a
        collapse, the rest fluent words that are all wrong)."""
        rng = self.rng
        if rng.random() < self._config.corrupt_crash_rate:
            return Decision(None, None, False, False, crash=True, corrupt=True)
        kind = self._pick_kind() if rng.random() < 0.5 else None
        return Decision(kind, None, False, False, corrupt=True)

    def _pick_kind(self) -> str:
        """A collapse kind drawn by weight."""
        draw = self.rng.random() * self._kind_total
        for name, weight in self._kinds:
            if draw < weight:
                return name
            draw -= weight
        return self._kinds[-1][0]


def degenerate(
    kind: str, clean: list[int], clean_text: str, rng: random.Random
) -> tuple[list[int], str]:
    """Turn a clean output into a collapse of `kind` with the same number of tokens."""
    count = len(clean)
    if kind == "empty":
        return [EMPTY_ID] * count, ""
    longest_prefix = count - DEGENERATE_MIN if count >= 128 else count // 2
    prefix = rng.randint(0, max(longest_prefix, 0))
    prefix_text = detokenize(clean[:prefix]) if prefix else ""
    tail = count - prefix
    if kind == "bang_run":
        return clean[:prefix] + [BANG_ID] * tail, prefix_text + VOCAB[BANG_ID] * tail
    phrase = rng.sample(WORD_IDS, rng.randint(1, 4))
    loop = (phrase * (tail // len(phrase) + 1))[:tail]
    ids = clean[:prefix] + loop
    return ids, prefix_text + detokenize(loop)


def garbage(clean: list[int], rng: random.Random) -> tuple[list[int], str]:
    """Every token of the answer replaced by another ordinary word: fluent, and wrong from the
    first token (what a corrupted KV cache answers)."""
    ids = []
    for token in clean:
        word = rng.choice(WORD_IDS)
        ids.append(word if word != token else WORD_IDS[(WORD_IDS.index(word) + 1) % len(WORD_IDS)])
    return ids, detokenize(ids)


def drift(seeded: list[int], context: int, rng: random.Random) -> tuple[list[int], str, int]:
    """The seeded answer `seeded` (after prompt token `context`) drifted from a drawn position p
    on, as a stack whose numbers change with the batch answers: the same tokens before p, then
    a fresh sample of the model, the same length. The token at p is another of its context's
    likely tokens whose text neither starts nor is the start of the seeded token's, so the
    texts differ within it. Returns ids, text and p."""
    at = rng.randrange(len(seeded))
    before = seeded[at - 1] if at else context
    seeded_piece = VOCAB[seeded[at]]
    likely = lm.CORES[before % len(lm.CORES)].ids
    start = likely.index(lm.sample_core(before, rng.random()))
    for step in range(len(likely)):  # the drawn token, else the next likely one that differs
        token = likely[(start + step) % len(likely)]
        if _apart(VOCAB[token], seeded_piece):
            break
    else:  # unreachable: every core holds ten or more distinct pieces; kept for safety
        token = next(w for w in WORD_IDS if _apart(VOCAB[w], seeded_piece))
    rest, _ = clean_tokens(continuation_offset(rng.getrandbits(128), token), len(seeded) - at - 1)
    ids = [*seeded[:at], token, *rest]
    return ids, detokenize(ids), at


def _apart(piece: str, other: str) -> bool:
    """Whether a text that has `piece` where another has `other` differs from it there: the
    pieces differ and neither starts the other (a token that decodes to nothing aside)."""
    if piece == other:
        return False
    return not (piece and other and (piece.startswith(other) or other.startswith(piece)))


def perturb(
    clean: list[int], most: int, rng: random.Random, start: int = 0
) -> tuple[list[int], str, int]:
    """Replace 1..most word tokens (at positions `start` and later) by other words (fluent, not
    degenerate); returns the count."""
    ids = list(clean)
    later = range(min(start, len(ids)), len(ids))
    candidates = [i for i in later if ids[i] in _WORD_SET] or list(later)
    if not candidates:
        return ids, detokenize(ids), 0
    positions = rng.sample(candidates, min(rng.randint(1, most), len(candidates)))
    for position in positions:
        neighbours = set(ids[max(position - 1, 0) : position + 2])
        replacement = rng.choice(WORD_IDS)
        while replacement in neighbours:
            replacement = rng.choice(WORD_IDS)
        ids[position] = replacement
    return ids, detokenize(ids), len(positions)


_WORD_SET = frozenset(WORD_IDS)


def fluent(
    clean: list[int], context: int, most: int, rng: random.Random
) -> tuple[list[int], str, list[int]]:
    """Fluent corruption: 1..most word tokens, never two side by side, replaced by ordinary words
    that the mock's model finds implausible where they stand (no run, no loop: each differs from
    its neighbours). `context` is the prompt's last token. Returns ids, text and positions."""
    ids = list(clean)
    candidates = [i for i, token in enumerate(ids) if token in _WORD_SET]
    want = rng.randint(1, most)
    positions: list[int] = []
    for position in rng.sample(candidates, len(candidates)):
        if len(positions) == want:
            break
        if all(abs(position - taken) >= 2 for taken in positions):
            positions.append(position)
    positions.sort()
    for position in positions:
        before = ids[position - 1] if position else context
        after = ids[position + 1] if position + 1 < len(ids) else None
        ids[position] = lm.unlikely_word(before, after, rng)
    return ids, detokenize(ids), positions


class GroundTruthLog:
    """Appends one JSON line per generation request and flushes it, so a crash loses nothing."""

    def __init__(self, path: Path | None, pid: int) -> None:
        self._file: IO[str] | None = path.open("a", encoding="utf-8") if path else None
        self._pid = pid

    def write(self, record: dict[str, object]) -> None:
        """Log one request's ground truth (no-op when no path was configured)."""
        if self._file is None:
            return
        record["pid"] = self._pid
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None


def shifted(
    count: int, context: int, temperature: float, rng: random.Random
) -> tuple[list[int], str]:
    """`count` tokens after `context`, each drawn from its context's likely tokens with their
    probabilities raised to 1/temperature (renormalised): fluent, no token outside the model's
    likely ones, every one a little less likely than the model would have it."""
    ids, before = [], context
    for _ in range(count):
        before = lm.sample_tempered(before, temperature, rng)
        ids.append(before)
    return ids, detokenize(ids)


LEAKED_WORDS = 24
"""How many of the source prompt's last words a leaked answer carries."""


def leak(ids: list[int], source: str) -> tuple[list[int], list[str]]:
    """An answer carrying the last LEAKED_WORDS words of another request's prompt in its middle
    (as many as fit): its token ids (a leaked word's id is the vocabulary's piece, else the
    empty token) and the text of each position."""
    words = source.split()[-LEAKED_WORDS:]
    pieces = [VOCAB[t] for t in ids]
    count = min(len(words), len(ids))
    start = (len(ids) - count) // 2
    leaked = [" " + w for w in words[len(words) - count :]]
    pieces[start : start + count] = leaked
    ids = list(ids)
    ids[start : start + count] = [PIECE_ID.get(p, EMPTY_ID) for p in leaked]
    return ids, pieces
