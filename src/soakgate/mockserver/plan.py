"""Turn a request body into a Plan: what the mock will answer, decided before the first byte."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from soakgate.errors import UsageError
from soakgate.mockserver import structured
from soakgate.mockserver.config import MockConfig
from soakgate.mockserver.inject import (
    Decision,
    degenerate,
    drift,
    fluent,
    garbage,
    perturb,
    shifted,
)
from soakgate.mockserver.logprobs import Inconsistency, answer_logprobs, inconsistency
from soakgate.mockserver.structured import Structure, ToolCall
from soakgate.mockserver.text import (
    EMPTY_ID,
    VOCAB_SIZE,
    clean_tokens,
    continuation_offset,
    detokenize,
    last_prompt_token,
    prompt_token_count,
    request_hash,
)
from soakgate.mockserver.vocab import PIECE_ID

DEFAULT_MAX_TOKENS = 16
"""OpenAI's documented default for the completions endpoint; used for chat too."""
MAX_CHOICES = 16
"""The most choices (`n`) one request may ask for: bounds the mock's work per request."""


class BadRequest(UsageError):
    """The request body is not a valid completions/chat request (answered with HTTP 400)."""


@dataclass(slots=True)
class Sampling:
    """The parts of a request body the mock acts on."""

    endpoint: str
    """`completions` or `chat`."""
    prompt: str
    """The prompt text (chat messages rendered in ChatML)."""
    max_tokens: int
    temperature: float
    seed: int | None
    stream: bool
    include_usage: bool
    logprobs: int | None
    """Number of top logprobs asked for; None when logprobs were not requested."""
    ignore_eos: bool
    return_token_ids: bool
    prompt_ids: list[int] | None = None
    """The prompt as token ids, when it was sent so (vLLM's token prompts)."""
    prompt_logprobs: int | None = None
    """vLLM's `prompt_logprobs`: top alternatives asked for at every prompt position."""
    echo: bool = False
    """Whether the prompt's text is to be put before the completion's (completions `echo`)."""
    n: int = 1
    """How many choices to answer with (OpenAI's `n`), generated side by side."""
    structure: Structure | None = None
    """What the answer must be (a JSON schema, a regex, a tool call); None: free text."""
    top_p: float | None = None
    """The nucleus asked for; None when the body names none (the mock only keys on it)."""

    def prompt_token_count(self) -> int:
        """The prompt's length in mock tokens."""
        if self.prompt_ids is not None:
            return len(self.prompt_ids)
        return prompt_token_count(self.prompt)

    def last_prompt_token(self) -> int:
        """The prompt's last mock token: the context of the first output token."""
        if self.prompt_ids:
            return self.prompt_ids[-1]
        return last_prompt_token(self.prompt)


@dataclass(slots=True)
class Plan:
    """Everything one response will contain, and what was injected into it."""

    request_id: str
    sampling: Sampling
    decision: Decision
    prompt_tokens: int
    token_ids: list[int]
    text: str
    finish_reason: str | None
    perturbed: int
    fault_after: int
    """Number of stream chunks (or body fraction in percent) sent before a fault strikes."""
    fluent_positions: list[int]
    """Output positions whose tokens fluent corruption replaced (ground truth)."""
    index: int = 0
    """Which choice of the request this is (OpenAI's `n`)."""
    pieces: list[str] | None = None
    """The text of each output position, where it is not its token's piece (a leaked answer:
    `inject.leak`); None: the vocabulary's pieces."""
    leaked_from: str | None = None
    """The request whose prompt words the answer carries (ground truth of `crosstalk`)."""
    invalid_structure: str | None = None
    """How a structured answer was made invalid (ground truth of `invalid_structure`)."""
    tool_call: ToolCall | None = None
    """The tool call the answer makes; its arguments are `text`. None: a text answer."""
    inconsistency: Inconsistency | None = None
    """The impossible number sent beside the answer (ground truth of `inconsistent`)."""
    seed_drift: int | None = None
    """The output position from which a seeded answer drifted (ground truth of `seed_drift`)."""


def _integer(body: dict[str, Any], name: str, default: int | None) -> int | None:
    """An optional integer field; bools and floats are rejected like real servers do."""
    value = body.get(name, default)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise BadRequest(f"{name} must be an integer")


def _number(body: dict[str, Any], name: str) -> float | None:
    """An optional number field; bools and strings are rejected like real servers do."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise BadRequest(f"{name} must be a number")


def _render_chat(messages: Any) -> str:
    """Render chat messages as a ChatML prompt (text parts only)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    rendered = []
    for message in messages:
        if not isinstance(message, dict):
            raise BadRequest("each message must be an object")
        content = message.get("content") or ""
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        rendered.append(f"<|im_start|>{message.get('role', 'user')}\n{content}<|im_end|>\n")
    return "".join(rendered) + "<|im_start|>assistant\n"


def _completion_prompt(prompt: Any) -> tuple[str, list[int] | None]:
    """The prompt string, or its token ids and their text (a list holding one string or one
    list of ids is accepted, as OpenAI does)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt:
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise BadRequest("a token prompt must be a list of integers")
        if not all(0 <= t < VOCAB_SIZE for t in prompt):
            raise BadRequest(f"token ids must be in 0..{VOCAB_SIZE - 1}")
        return detokenize(prompt), list(prompt)
    if not isinstance(prompt, str):
        raise BadRequest("prompt must be a string")
    return prompt, None


def parse_sampling(endpoint: str, body: Any) -> Sampling:
    """Validate a completions/chat body; raises BadRequest with a one-line reason."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if endpoint == "chat":
        prompt, prompt_ids = _render_chat(body.get("messages")), None
        max_tokens = _integer(body, "max_completion_tokens", None)
        if max_tokens is None:
            max_tokens = _integer(body, "max_tokens", DEFAULT_MAX_TOKENS)
        top = _integer(body, "top_logprobs", 0)
        logprobs = (top or 0) if body.get("logprobs") else None
    else:
        prompt, prompt_ids = _completion_prompt(body.get("prompt"))
        max_tokens = _integer(body, "max_tokens", DEFAULT_MAX_TOKENS)
        logprobs = _integer(body, "logprobs", None)
    if max_tokens is None or max_tokens < 1:
        raise BadRequest("max_tokens must be >= 1")
    temperature = body.get("temperature", 1.0)
    if temperature is None:
        temperature = 1.0
    if not isinstance(temperature, int | float) or temperature < 0:
        raise BadRequest("temperature must be a number >= 0")
    n = _integer(body, "n", 1)
    if n is None or not 1 <= n <= MAX_CHOICES:
        raise BadRequest(f"n must be between 1 and {MAX_CHOICES}")
    options = body.get("stream_options") or {}
    structure = None
    if structured.asks_structure(body):
        try:
            structure = structured.parse_structure(endpoint, body)
        except structured.BadStructure as exc:
            raise BadRequest(str(exc)) from None
    return Sampling(
        endpoint=endpoint,
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=float(temperature),
        seed=_integer(body, "seed", None),
        stream=bool(body.get("stream", False)),
        include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
        logprobs=logprobs,
        ignore_eos=bool(body.get("ignore_eos", False)),
        return_token_ids=bool(body.get("return_token_ids", False)),
        prompt_ids=prompt_ids,
        prompt_logprobs=_integer(body, "prompt_logprobs", None) if endpoint != "chat" else None,
        echo=endpoint != "chat" and bool(body.get("echo", False)),
        n=n,
        structure=structure,
        top_p=_number(body, "top_p"),
    )


def check_limits(config: MockConfig, sampling: Sampling) -> None:
    """BadRequest (HTTP 400), worded as vLLM words it, when prompt + max_tokens exceeds the
    model length (the mock never builds an answer longer than the model it pretends to be), or
    more prompt log-probability alternatives are asked for than `--max-logprobs`."""
    asked = sampling.prompt_logprobs
    if asked is not None and asked > config.max_logprobs:
        raise BadRequest(
            f"Requested prompt logprobs of {asked}, which is greater than max allowed: "
            f"{config.max_logprobs}"
        )
    prompt_tokens = sampling.prompt_token_count()
    if prompt_tokens + sampling.max_tokens > config.max_model_len:
        raise BadRequest(
            f"'max_tokens' or 'max_completion_tokens' is too large: {sampling.max_tokens}. "
            f"This model's maximum context length is {config.max_model_len} tokens and your "
            f"request has {prompt_tokens} input tokens "
            f"({sampling.max_tokens} > {config.max_model_len} - {prompt_tokens})."
        )


def _length(config: MockConfig, sampling: Sampling, key: int) -> tuple[int, str]:
    """Output length and finish reason: --output-tokens, else max_tokens, maybe an early stop."""
    count, finish = sampling.max_tokens, "length"
    if config.output_tokens is not None and config.output_tokens < count:
        count, finish = config.output_tokens, "stop"
    if sampling.ignore_eos:
        return sampling.max_tokens, "length"
    if config.stop_rate and count > 1 and ((key >> 64) & 0xFFFFFFFF) < config.stop_rate * 2**32:
        count, finish = 1 + (key >> 96) % (count - 1), "stop"
    return count, finish


def make_plan(
    config: MockConfig,
    request_id: str,
    sampling: Sampling,
    decision: Decision,
    rng: random.Random,
    index: int = 0,
) -> Plan:
    """Decide the output of choice `index`: a corpus slice keyed by (prompt, seed) when greedy
    (so every choice of a greedy request is the same, as a greedy server's are), else by the
    request's sampling (`_sampled_key`), continuing the prompt's last token; then apply the
    decided seed drift (first choice only), collapse, perturbation or fluent corruption (one
    decision for the request's choices: they are generated side by side in the same state)."""
    if sampling.temperature == 0:
        key = request_hash("greedy", sampling.prompt, str(sampling.seed))
    else:
        key = _sampled_key(config, request_id, sampling, index)
    if sampling.structure is not None and decision.injected is None and not decision.corrupt:
        return _structured_plan(request_id, sampling, decision, key, rng, index)
    count, finish = _length(config, sampling, key)
    if decision.injected is not None:
        # A collapsed model never emits EOS: it runs to max_tokens.
        count, finish = sampling.max_tokens, "length"
    context = sampling.last_prompt_token()
    ids, text = clean_tokens(continuation_offset(key, context), count)
    drifted_at = None
    if decision.seed_drift and index == 0 and ids:  # never with a collapse (not decided so)
        ids, text, drifted_at = drift(ids, context, rng)
    perturbed, positions = 0, list[int]()
    if decision.injected is not None:
        ids, text = degenerate(decision.injected, ids, text, rng)
    elif decision.corrupt:
        ids, text = garbage(ids, rng)
    elif decision.perturb:
        ids, text, perturbed = perturb(ids, config.perturb_max_tokens, rng, config.perturb_from)
    if decision.shift and decision.injected is None:
        ids, text = shifted(len(ids), context, config.shift_temperature, rng)
    if decision.fluent and decision.injected is None:
        ids, text, positions = fluent(ids, context, config.fluent_max_tokens, rng)
    fault_after = rng.randint(2, 5) if decision.fault is not None else 0
    broken = None
    if decision.inconsistent and index == 0:  # the request's first choice carries it
        broken = _inconsistency(sampling, context, ids, rng)
    return Plan(
        request_id=request_id,
        sampling=sampling,
        decision=decision,
        prompt_tokens=sampling.prompt_token_count(),
        token_ids=ids,
        text=text,
        finish_reason=finish,
        perturbed=perturbed,
        fault_after=fault_after,
        fluent_positions=positions,
        index=index,
        inconsistency=broken,
        seed_drift=drifted_at,
    )


def _sampled_key(config: MockConfig, request_id: str, sampling: Sampling, index: int) -> int:
    """The random stream of a sampled choice: with the request's `seed`, its (prompt, seed,
    temperature, top_p, choice), so the same body gets the same answer, as a server with
    batch-invariant kernels gives (unless --ignore-seeds); else (server seed, request id,
    choice)."""
    if sampling.seed is not None and not config.ignore_seeds:
        top_p = "-" if sampling.top_p is None else repr(sampling.top_p)
        return request_hash("seeded", sampling.prompt, str(sampling.seed),
                            repr(sampling.temperature), top_p, str(index))  # fmt: skip
    if index == 0:
        return request_hash("sample", str(config.seed), request_id)
    return request_hash("sample", str(config.seed), request_id, str(index))


def _inconsistency(
    sampling: Sampling, context: int, ids: list[int], rng: random.Random
) -> Inconsistency | None:
    """An impossible number for an answer of tokens `ids` after `context`, of a kind that this
    request's answer can carry."""
    top_n, greedy = sampling.logprobs, sampling.temperature == 0
    entries = None if top_n is None else answer_logprobs(context, ids, top_n, greedy)
    usage = not sampling.stream or sampling.include_usage
    return inconsistency(entries, top_n or 0, greedy, usage, rng)


def _structured_plan(
    request_id: str,
    sampling: Sampling,
    decision: Decision,
    key: int,
    rng: random.Random,
    index: int,
) -> Plan:
    """A structured answer drawn from the request's own random stream (`key`): valid, or made
    invalid as decided. It ends where its structure ends (finish_reason `stop`, `tool_calls`),
    whatever --output-tokens, --stop-rate and ignore_eos say, unless max_tokens cuts it first
    (`length`); a cut answer is not made invalid (no client can judge it), so the ground truth
    names only violations a client can see."""
    assert sampling.structure is not None
    invalid = decision.invalid_structure
    answer = structured.answer(sampling.structure, random.Random(key), invalid)
    pieces = structured.pieces_of(answer.text)
    finish = "tool_calls" if answer.tool_call is not None else "stop"
    if len(pieces) > sampling.max_tokens:
        if answer.violation is not None:
            answer = structured.answer(sampling.structure, random.Random(key), False)
            pieces = structured.pieces_of(answer.text)
        pieces, finish = pieces[: sampling.max_tokens], "length"
    return Plan(
        request_id=request_id,
        sampling=sampling,
        decision=decision,
        prompt_tokens=sampling.prompt_token_count(),
        token_ids=[PIECE_ID.get(piece, EMPTY_ID) for piece in pieces],
        text="".join(pieces),
        finish_reason=finish,
        perturbed=0,
        fault_after=rng.randint(2, 5) if decision.fault is not None else 0,
        fluent_positions=[],
        index=index,
        pieces=pieces,
        invalid_structure=answer.violation,
        tool_call=answer.tool_call,
    )
