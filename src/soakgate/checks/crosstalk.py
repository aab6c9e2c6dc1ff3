"""Cross-request contamination (`crosstalk`): an answer that carries another request's canary,
or a long span of another request's prompt that its own prompt does not explain.

What leaks between requests in a serving stack (a prefix-cache block or a KV slot reused while
still in use, a stream's tokens delivered to another, a batch's rows mixed) shows up as an
answer that continues or repeats *another* user's request. Two tests, both over a bounded
window of the requests sent last (in flight or just answered, where a leak comes from):

- **canary** (`--canaries`): the answer holds a genuine canary (`checks.canary`) of another
  request: certain, whatever the prompts.
- **reference** (where the greedy differential runs, `run --reference`): a divergent greedy
  answer that follows the reference's answer to *another* prompt for at least 16 tokens, and
  further than its own (`probes.differential.Compared.cross_check`; prompts told apart by id, so
  one prompt's requests with different canaries are one prompt): the answer to another user's
  prompt, the leak no text test can see.
- **prompt span** (on by default; needs no change to the prompts): the answer holds a run of
  `span` words (lower-cased, `\\w+`) that stands in the prompt of another request of the window
  and in no other prompt of the window. A span two prompts of the window share is boilerplate
  (a template, a system message) and never evidence; a span of the answer's own prompt is
  explained by it. A leak between two requests that sent the same prompt is invisible here
  (only a canary tells them apart).
- **answer span** (`--crosstalk-answers`, off by default: a model that reproduces memorized text
  writes the same runs for different prompts at the same time; on the mock, whose answers are
  slices of one corpus, it flagged 0.8-1.1% of clean answers, BENCHMARKS.md): the answer
  shares a run of `answer_span` words with the answer of another request that was in flight at
  the same time and asked another prompt (a stream's tokens delivered to another), where no
  third answer of another prompt holds that run (a phrase the model writes for many prompts is
  not evidence) and the answer's own prompt does not explain it. The later of the two answers
  is flagged, the earlier named as its source: which of the two received the other's tokens
  cannot be told from the text.

The window index is keyed by prompt id: a prompt's spans are hashed once, when it enters the
window, and dropped when its last request leaves it, so a soak over a fixed prompt set costs
one set intersection per answer. Written by hand: no maintained library keeps an n-gram index
over a sliding window of requests.
"""

from __future__ import annotations

import dataclasses
import re
from collections import deque
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from soakgate.checks.canary import Canaries
from soakgate.prompts import Prompt
from soakgate.records import Generation, Run

CROSSTALK = "crosstalk"
FILTER_BELOW = 0.6
"""Answers' share of words in runs some prompt's words cover (a moving average) below which
only those runs are hashed: finding them costs about a third of hashing every span."""
SAMPLE_EVERY = 64
"""Above it, every this-many-th answer is sorted anyway, to see the coverage fall again."""
_WORD = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class CrosstalkSettings:
    """How the crosstalk check runs (stored in the run's detectors)."""

    canaries: bool = False
    """Mark every prompt with its request's canary (changes what is sent: off by default)."""
    spans: bool = True
    """Look for spans of other requests' prompts (changes nothing that is sent)."""
    span: int = 8
    """Words in a row an answer must share with another request's prompt."""
    window: int = 1024
    """Requests sent last whose prompts are looked at (in flight or just answered); answers
    are kept for between one and two windows."""
    answers: bool = False
    """Look for runs shared with the answers of requests in flight at the same time (off by
    default: see the module's docstring)."""
    answer_span: int = 16
    """Words in a row an answer must share with another request's answer."""

    def describe(self) -> dict[str, Any]:
        """As stored in the run record."""
        return dataclasses.asdict(self)


_ASCII_WORDS = bytes(
    ord(c.lower()) if _WORD.fullmatch(c) else ord(" ") for c in map(chr, range(128))
) + bytes(range(128, 256))  # fmt: skip
"""A byte table: ASCII characters outside `\\w` to a space, the rest lower-cased."""


def words_of(text: str) -> list[bytes]:
    """Lower-cased `\\w+` words as UTF-8 bytes (ASCII text split by `bytes.translate`: the same
    words as the regular expression, much faster; bytes, not str, because splitting bytes makes
    its words a fifth faster and no word is ever decoded but the evidence's)."""
    if text.isascii():
        return text.encode().translate(_ASCII_WORDS).split()
    return [word.encode() for word in _WORD.findall(text.lower())]


def hashes(words: list[bytes], width: int) -> list[int]:
    """Hashes of every run of `width` of `words`, in order."""
    return list(map(hash, zip(*(words[i:] for i in range(width)), strict=False)))


def known_runs(words: list[bytes], known: Container[bytes], width: int) -> list[tuple[int, int]]:
    """(start, end) of each maximal run of at least `width` words of `known`, in order: a span
    of `width` words can only be a prompt's where each of its words is in some prompt, so only
    these are hashed (most answers hold no such run).

    Only every `width`-th word is looked up first: any `width` words in a row hold exactly one
    of them, so a run can only be around a sampled word that is known, and is grown from there
    (a fraction of the lookups of testing every word, which cost as much as splitting the
    answer). A list, not a generator: most answers have none, and a generator costs more to
    make than to find that."""
    contains, n, runs = known.__contains__, len(words), []
    i = width - 1
    while i < n:
        if not contains(words[i]):
            i += width
            continue
        start, end = i, i + 1
        while start and contains(words[start - 1]):
            start -= 1
        while end < n and contains(words[end]):
            end += 1
        if end - start >= width:
            runs.append((start, end))
        i += width * ((end - i) // width + 1)  # the first sampled word past `end`
    return runs


@dataclass(frozen=True, slots=True)
class _Answer:
    """A clean answer kept for the answer-span test."""

    seq: int
    prompt_id: str
    started: float
    ended: float
    words: list[bytes]


class Crosstalk:
    """The crosstalk check of one soak: told of every request sent and every clean answer."""

    def __init__(self, settings: CrosstalkSettings, run_id: str) -> None:
        self.settings = settings
        self._run_id = run_id
        self._canaries = Canaries(run_id) if settings.canaries else None
        self._window: deque[str] = deque()  # prompt ids of the requests sent last, in order
        self._count: dict[str, int] = {}  # prompt id -> its requests in the window
        self._latest: dict[str, int] = {}  # prompt id -> the last request that sent it
        self._spans: dict[str, frozenset[int]] = {}  # prompt id (in the window) -> its spans
        self._owners: dict[int, set[str]] = {}  # span -> prompt ids of the window holding it
        self._vocabulary: dict[bytes, int] = {}  # word -> prompt ids of the window holding it
        self._answers, self._coverage, self._filtering = 0, 0.0, True  # see `_runs`
        # answers, in two generations of up to `window` each (dropped a generation at a time,
        # so that keeping them costs no loop per answer): span -> latest answer holding it
        self._held: list[dict[int, int]] = [{}, {}]
        self._kept: list[dict[int, _Answer]] = [{}, {}]
        self._common: list[set[int]] = [set(), set()]  # spans answers of two prompts hold
        self._texts: dict[str, bytes] = {}  # prompt id (in the window) -> its words, joined
        self._same: dict[int, int] = {}  # a twin's seq -> its first's (whose canary it sent)

    def request_id(self, seq: int) -> str:
        """The request id of request `seq` (as the driver names it)."""
        return f"{self._run_id}-{seq}"

    def sent(self, seq: int, prompt: Prompt, same_as: int | None = None) -> Prompt:
        """Enter a request into the window; the prompt as it is to be sent (its canary: a twin
        carries its first's, `same_as`, which is then its own, not another request's)."""
        if self.settings.spans or self.settings.answers:
            self._enter(seq, prompt)
        if self._canaries is None:
            return prompt
        if same_as is not None:
            self._same[seq] = same_as
        return self._canaries.mark(prompt, seq if same_as is None else same_as)

    def _enter(self, seq: int, prompt: Prompt) -> None:
        key = prompt.prompt_id
        if key not in self._count:
            words = words_of(f"{prompt.system}\n{prompt.text}" if prompt.system else prompt.text)
            mine = frozenset(hashes(words, self.settings.span))
            self._texts[key] = b" " + b" ".join(words) + b" "
            self._spans[key] = mine
            for span in mine:
                self._owners.setdefault(span, set()).add(key)
            vocabulary = self._vocabulary
            for word in set(words):
                vocabulary[word] = vocabulary.get(word, 0) + 1
            self._count[key] = 0
        self._count[key] += 1
        self._latest[key] = seq
        self._window.append(key)
        while len(self._window) > self.settings.window:
            old = self._window.popleft()
            self._count[old] -= 1
            if not self._count[old]:
                self._leave(old)

    def _leave(self, key: str) -> None:
        vocabulary = self._vocabulary
        for word in set(self._texts[key].split()):
            vocabulary[word] -= 1
            if not vocabulary[word]:
                del vocabulary[word]
        del self._count[key], self._latest[key], self._texts[key]
        for span in self._spans.pop(key):
            owners = self._owners[span]
            owners.discard(key)
            if not owners:
                del self._owners[span]

    def answered(self, generation: Generation, outcome: Any = None) -> None:
        """Judge a clean answer; a failed check is named in `generation.checks` with its
        evidence (the source request, how it was found, what was found) in its details."""
        text = generation.text
        same_as = self._same.pop(generation.seq, None)
        if not text or generation.error_class is not None:
            return
        evidence = None
        if self._canaries is not None:
            evidence = self._canary(generation.seq, text, same_as)
        evidence = evidence or _reference_match(generation)
        settings = self.settings
        words = words_of(text) if settings.spans or settings.answers else []
        if evidence is None and settings.spans:
            evidence = self._span(generation, words)
        if settings.answers:
            answer = _Answer(generation.seq, generation.prompt_id, generation.started_at,
                             generation.ended_at, words)  # fmt: skip
            found = self._answer_span(answer, evidence is None)
            evidence = evidence or found
        if evidence is not None:
            generation.checks.append(CROSSTALK)
            generation.details[CROSSTALK] = evidence

    def _canary(self, seq: int, text: str, same_as: int | None) -> dict[str, Any] | None:
        assert self._canaries is not None
        others = [s for s in self._canaries.found(text) if s not in (seq, same_as)]
        if not others:
            return None
        return {"by": "canary", "source": self.request_id(others[0]),
                "canary": self._canaries.tag(others[0]),
                "sources": [self.request_id(s) for s in others]}  # fmt: skip

    def _span(self, generation: Generation, words: list[bytes]) -> dict[str, Any] | None:
        width, own, owners_of = self.settings.span, generation.prompt_id, self._owners
        for start, end in self._runs(words, width):
            mine = hashes(words[start:end], width)
            found = owners_of.keys() & mine
            for index, span in enumerate(mine if found else (), start):
                owners = owners_of.get(span) if span in found else None
                if owners is None or len(owners) != 1 or own in owners:
                    continue  # no prompt's, boilerplate two prompts share, or its own prompt's
                (source,) = owners
                return {"by": "prompt_span", "source": self.request_id(self._latest[source]),
                        "source_prompt": source,
                        "span": b" ".join(words[index : index + width]).decode(),
                        "window": self.settings.window}  # fmt: skip
        return None

    def _runs(self, words: list[bytes], width: int) -> list[tuple[int, int]]:
        """The runs of the answer whose spans are hashed: those of words some prompt of the
        window holds (`known_runs`) while that leaves out enough to pay for finding them (a
        prompt set whose words cover most answers' gains nothing: then the whole answer, with
        every SAMPLE_EVERY-th answer still sorted to measure the coverage again)."""
        self._answers += 1
        if self._filtering or not self._answers % SAMPLE_EVERY:
            runs = known_runs(words, self._vocabulary, width)
            covered = sum(end - start for start, end in runs) / len(words) if runs else 0.0
            self._coverage += (covered - self._coverage) / 16
            self._filtering = self._coverage < FILTER_BELOW
            return runs
        return [(0, len(words))] if len(words) >= width else []

    def _answer_span(self, answer: _Answer, judge: bool) -> dict[str, Any] | None:
        """Judge the answer against the kept answers (when `judge`), then keep it."""
        width = self.settings.answer_span
        mine = hashes(answer.words, width)
        held, kept, common = self._held, self._kept, self._common
        shared = (held[0].keys() & mine) | (held[1].keys() & mine) if mine else set()
        evidence = None
        if shared and judge:
            evidence = self._shared(answer, mine, shared - common[0] - common[1])
        if shared:  # a run two prompts' answers hold is the model's, never evidence again
            other = {s for s in shared if self._owner(s).prompt_id != answer.prompt_id}
            common[0] |= other
        if evidence is None:
            held[0].update(dict.fromkeys(mine, answer.seq))
            kept[0][answer.seq] = answer
            if len(kept[0]) >= self.settings.window:  # a generation is full: drop the oldest
                self._held, self._kept = [{}, held[0]], [{}, kept[0]]
                self._common = [set(), common[0]]
        return evidence

    def _owner(self, span: int) -> _Answer:
        """The latest kept answer that holds `span` (one of them holds it)."""
        seq = self._held[0].get(span)
        if seq is not None:
            return self._kept[0][seq]
        return self._kept[1][self._held[1][span]]

    def _shared(self, answer: _Answer, mine: list[int], rare: set[int]) -> dict[str, Any] | None:
        """The first kept answer of another prompt, in flight with this one, that holds a run
        of this one that its own prompt does not explain."""
        own = self._texts.get(answer.prompt_id, b"")
        width = self.settings.answer_span
        for index, span in enumerate(mine):
            if span not in rare:
                continue
            source = self._owner(span)
            if source.prompt_id == answer.prompt_id or source.seq == answer.seq:
                continue
            if not (source.started < answer.ended and answer.started < source.ended):
                continue  # not in flight together
            run = b" ".join(answer.words[index : index + width])
            if b" " + run + b" " in own:
                continue
            return {"by": "answer_span", "source": self.request_id(source.seq),
                    "source_prompt": source.prompt_id, "span": run.decode()}  # fmt: skip
        return None


def _reference_match(generation: Generation) -> dict[str, Any] | None:
    """A greedy differential row whose answer is the reference's answer to another prompt
    (`probes.differential.Compared.cross_check` marks it)."""
    marks = generation.details.get("differential")
    match = marks.get("matches_other_prompt") if isinstance(marks, dict) else None
    if not isinstance(match, dict):
        return None
    evidence = {"by": "reference", "source": match.get("source"), "shared": match.get("shared"),
                "unit": match.get("unit")}  # fmt: skip
    if "at" in match:  # where in this answer the other's run starts
        evidence["at"] = match["at"]
    return evidence


def open_crosstalk(settings: CrosstalkSettings, run: Run, resumed: bool) -> Crosstalk:
    """The run's crosstalk check (a `load.spec.OpenAnswerCheck` once `settings` are bound):
    the settings the run stored (a resumed run; one stored before the check existed sends no
    canaries), else `settings`, stored in `run.detectors`."""
    stored = run.detectors.get(CROSSTALK)
    if isinstance(stored, dict):
        settings = CrosstalkSettings(**stored)
    elif resumed:
        settings = dataclasses.replace(settings, canaries=False)
    run.detectors[CROSSTALK] = settings.describe()
    return Crosstalk(settings, run.run_id)
