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
one set intersection per answer. An answer is only noted as it comes (with how many requests
had been sent by then) and judged with its batch, just before the batch is scored and stored:
the window is brought forward to each answer's moment, and an answer judged late (scored by
the reference first) is judged against the requests of its moment, which are kept until no
answer still to be judged can need them. Judged a batch at a time, away from the network code,
the check costs about 5-5.7 us per request in a soak instead of 7.2-7.8 (BENCHMARKS.md, section
22). Written by hand: no maintained library keeps an n-gram index over a sliding window of
requests.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Container, Sequence
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
LOG_LIMIT = 1 << 16
"""Requests kept for the answers still to be judged, at most: an answer noted and not judged
after this many more requests (none is, in a soak) is judged against what is left, and does not
hold the requests back for ever."""
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
    """The crosstalk check of one soak: told of every request sent and every clean answer, it
    judges the answers a batch at a time (`judge`), each against the window as it stood when
    the answer came."""

    def __init__(self, settings: CrosstalkSettings, run_id: str) -> None:
        self.settings = settings
        self._run_id = run_id
        self._canaries = Canaries(run_id) if settings.canaries else None
        self._indexing = settings.spans or settings.answers
        # the requests sent, (seq, prompt), the n-th (from 1) at `_sends[n - 1 - _base]`: those
        # the window may still need are kept (those entered less a window, and all after)
        self._sends: list[tuple[int, Prompt]] = []
        self._base = 0  # requests sent before `_sends[0]`
        self._entered = 0  # requests entered into the window so far (what `judge` replays)
        self._marks: dict[int, int] = {}  # seq of an answer not yet judged -> requests sent then
        self._sent = 0  # requests sent so far
        # the window, kept lazily: a prompt is in it while it was sent by one of the last
        # `window` requests; prompts that left it are dropped about every `window` requests
        self._last: dict[str, int] = {}  # prompt id (indexed) -> n of its last request entered
        self._next_drop = settings.window
        self._spans: dict[str, frozenset[int]] = {}  # prompt id (indexed) -> its spans
        self._owners: dict[int, set[str]] = {}  # span -> indexed prompt ids holding it
        self._vocabulary: dict[bytes, int] = {}  # word -> indexed prompt ids holding it
        self._answers, self._coverage, self._filtering = 0, 0.0, True  # see `_runs`
        # answers, in two generations of up to `window` each (dropped a generation at a time,
        # so that keeping them costs no loop per answer): span -> latest answer holding it
        self._held: list[dict[int, int]] = [{}, {}]
        self._kept: list[dict[int, _Answer]] = [{}, {}]
        self._common: list[set[int]] = [set(), set()]  # spans answers of two prompts hold
        self._texts: dict[str, bytes] = {}  # prompt id (indexed) -> its words, joined
        self._same: dict[int, int] = {}  # a twin's seq -> its first's (whose canary it sent)

    def request_id(self, seq: int) -> str:
        """The request id of request `seq` (as the driver names it)."""
        return f"{self._run_id}-{seq}"

    def sent(self, seq: int, prompt: Prompt, same_as: int | None = None) -> Prompt:
        """Note a request sent (it enters the window when an answer after it is judged); the
        prompt as it is to be sent (its canary: a twin carries its first's, `same_as`, which is
        then its own, not another request's)."""
        self._sent += 1
        if self._indexing:
            self._sends.append((seq, prompt))
        if self._canaries is None:
            return prompt
        if same_as is not None:
            self._same[seq] = same_as
        return self._canaries.mark(prompt, seq if same_as is None else same_as)

    def answered(self, generation: Generation, outcome: Any = None) -> None:
        """Note a clean answer and how many requests had been sent when it came: `judge` judges
        it against the window as it stood then (cheaper a batch at a time, away from the
        network code, than answer by answer)."""
        if generation.text and generation.error_class is None:
            self._marks[generation.seq] = self._sent
        else:
            self._same.pop(generation.seq, None)

    def judge(self, generations: Sequence[Generation]) -> None:
        """Judge the noted answers among `generations` (in the order they came); a failed check
        is named in `generation.checks` with its evidence (the source request, how it was found,
        what was found) in its details. The window is brought to each answer's moment first."""
        for generation in generations:
            mark = self._marks.pop(generation.seq, None)
            if mark is None:
                continue
            self._advance(mark)
            evidence = self._evidence(generation, mark)
            if evidence is not None:
                generation.checks.append(CROSSTALK)
                generation.details[CROSSTALK] = evidence
        # the answers still to be judged need the window no older than the oldest one's moment
        self._advance(max(self._oldest(), self._sent - LOG_LIMIT))

    def _evidence(self, generation: Generation, mark: int) -> dict[str, Any] | None:
        text = generation.text or ""
        same_as = self._same.pop(generation.seq, None)
        evidence = None
        if self._canaries is not None:
            evidence = self._canary(generation.seq, text, same_as)
        evidence = evidence or _reference_match(generation)
        settings = self.settings
        words = words_of(text) if self._indexing else []
        if evidence is None and settings.spans:
            evidence = self._span(generation, words, mark)
        if settings.answers:
            answer = _Answer(generation.seq, generation.prompt_id, generation.started_at,
                             generation.ended_at, words)  # fmt: skip
            found = self._answer_span(answer, evidence is None, mark)
            evidence = evidence or found
        return evidence

    def _advance(self, mark: int) -> None:
        """Enter the requests sent before the `mark`-th into the window (never backwards)."""
        start, base, last = self._entered, self._base, self._last
        if mark <= start or not self._indexing:
            return
        for n, (_, prompt) in enumerate(self._sends[start - base : mark - base], start + 1):
            key = prompt.prompt_id
            if key not in last:
                self._index(prompt)
            last[key] = n
        self._entered = mark
        if mark >= self._next_drop:  # what no answer still to be judged can need
            window = self.settings.window
            horizon = min(mark, max(self._oldest(), self._sent - LOG_LIMIT)) - window
            self._drop_left(horizon)
            del self._sends[: max(0, horizon - base)]
            self._base = max(base, horizon)
            self._next_drop = mark + window

    def _oldest(self) -> int:
        """The moment of the oldest answer still to be judged (requests sent by then)."""
        return min(self._marks.values(), default=self._sent)

    def _in_window(self, key: str, mark: int) -> int | None:
        """The seq of the last request before the `mark`-th that sent prompt `key`, if one of
        the `window` requests before it did (None: none). An answer judged late (its row scored
        by the reference first) may find the window past its moment: its requests are then
        looked for among those kept."""
        at = self._last.get(key)
        low = mark - self.settings.window + 1
        if at is None or at < low:
            return None
        sends, base = self._sends, self._base
        if at <= mark:
            return sends[at - 1 - base][0]
        if mark <= base:  # its moment is no longer kept (an answer judged very late)
            return None
        for seq, prompt in reversed(sends[max(low, base + 1) - 1 - base : mark - base]):
            if prompt.prompt_id == key:
                return seq
        return None

    def _index(self, prompt: Prompt) -> None:
        key = prompt.prompt_id
        words = words_of(f"{prompt.system}\n{prompt.text}" if prompt.system else prompt.text)
        mine = frozenset(hashes(words, self.settings.span))
        self._texts[key] = b" " + b" ".join(words) + b" "
        self._spans[key] = mine
        for span in mine:
            self._owners.setdefault(span, set()).add(key)
        vocabulary = self._vocabulary
        for word in set(words):
            vocabulary[word] = vocabulary.get(word, 0) + 1

    def _drop_left(self, horizon: int) -> None:
        """Drop the prompts last entered at or before `horizon` (they left the window)."""
        vocabulary = self._vocabulary
        for key in [k for k, at in self._last.items() if at <= horizon]:
            for word in set(self._texts[key].split()):
                vocabulary[word] -= 1
                if not vocabulary[word]:
                    del vocabulary[word]
            del self._last[key], self._texts[key]
            for span in self._spans.pop(key):
                owners = self._owners[span]
                owners.discard(key)
                if not owners:
                    del self._owners[span]

    def _canary(self, seq: int, text: str, same_as: int | None) -> dict[str, Any] | None:
        assert self._canaries is not None
        others = [s for s in self._canaries.found(text) if s not in (seq, same_as)]
        if not others:
            return None
        return {"by": "canary", "source": self.request_id(others[0]),
                "canary": self._canaries.tag(others[0]),
                "sources": [self.request_id(s) for s in others]}  # fmt: skip

    def _span(self, generation: Generation, words: list[bytes], mark: int) -> dict[str, Any] | None:
        width, owners_of = self.settings.span, self._owners
        for start, end in self._runs(words, width):
            mine = hashes(words[start:end], width)
            found = owners_of.keys() & mine
            for index, span in enumerate(mine if found else (), start):
                source = self._sole_owner(owners_of[span], generation.prompt_id, mark) if (
                    span in found) else None  # fmt: skip
                if source is not None:
                    key, sent = source
                    return {"by": "prompt_span", "source": self.request_id(sent),
                            "source_prompt": key,
                            "span": b" ".join(words[index : index + width]).decode(),
                            "window": self.settings.window}  # fmt: skip
        return None

    def _sole_owner(self, owners: set[str], own: str, mark: int) -> tuple[str, int] | None:
        """The one prompt of the window at the `mark`-th request that holds a span, and the
        seq of its last request then; None for a span of no prompt of that window, of two or
        more (boilerplate), or of the answer's own prompt (it explains it)."""
        if own in owners and self._in_window(own, mark) is not None:
            return None
        source = None
        for key in owners:
            sent = self._in_window(key, mark)
            if sent is None:
                continue
            if source is not None:
                return None  # a second one
            source = (key, sent)
        return source

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

    def _answer_span(self, answer: _Answer, judge: bool, mark: int) -> dict[str, Any] | None:
        """Judge the answer against the kept answers (when `judge`), then keep it."""
        width = self.settings.answer_span
        mine = hashes(answer.words, width)
        held, kept, common = self._held, self._kept, self._common
        shared = (held[0].keys() & mine) | (held[1].keys() & mine) if mine else set()
        evidence = None
        if shared and judge:
            evidence = self._shared(answer, mine, shared - common[0] - common[1], mark)
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

    def _shared(
        self, answer: _Answer, mine: list[int], rare: set[int], mark: int
    ) -> dict[str, Any] | None:
        """The first kept answer of another prompt, in flight with this one, that holds a run
        of this one that its own prompt (while in the window) does not explain."""
        in_window = self._in_window(answer.prompt_id, mark) is not None
        own = self._texts[answer.prompt_id] if in_window else b""
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
