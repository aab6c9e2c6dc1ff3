"""A reference server that returns prompt log-probabilities: vLLM's `/v1/completions` with the
prompt as token ids and `prompt_logprobs` (the soakgate mock answers the same format).

The request sends the candidate's prompt ids followed by its generated ids, `max_tokens` 1,
`prompt_logprobs` TOP_ALTERNATIVES (vLLM then returns, per position, the prompt's own token with
its rank and the most likely alternatives, from which the position's entropy is estimated) and
`echo`; only the generated positions are read back. Without token ids (text
alignment) the prompt and the generated text are sent as one string, and the generated tokens
are those the reference's decoded tokens spell from the end back to the start of the generated
text: a token that straddles the boundary (merged across it by the reference's tokenizer) is
scored with the generated ones, and the row says `alignment: text`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from soakgate.errors import TargetError
from soakgate.reference.score import TokenScore, entropy_from_top
from soakgate.reference.soak import Sampling, soak_stats_top
from soakgate.targets.tls import SYSTEM, TlsOptions

TOP_ALTERNATIVES = 20
"""Top alternatives asked for at every position (vLLM's `prompt_logprobs`; its default
`--max-logprobs` is 20): the entropy behind the typicality score is estimated from them."""


class ReferenceFailed(Exception):
    """The reference did not score a generation (its row is stored unscored, with the reason)."""


@dataclass(frozen=True, slots=True)
class ScoreRequest:
    """What is scored: the candidate's prompt and generation, as ids when it returned them."""

    prompt_ids: list[int] | None
    """The prompt's token ids as the candidate tokenized it (None: not returned)."""
    token_ids: list[int] | None
    """The generated token ids (None: not returned)."""
    prompt_text: str | None
    """The completions prompt text (None for chat: its template is the server's)."""
    text: str
    """The generated text."""
    messages: list[dict[str, str]] | None = None
    """The chat messages (chat endpoint), for an in-process reference's chat template."""


def parse_prompt_logprobs(
    body: Any, ids: Sequence[int], first: int, sampling: Sampling | None = None
) -> list[TokenScore]:
    """The TokenScores of positions `first..` of a vLLM completions answer with prompt_logprobs,
    for the prompt `ids` that was sent (each also under `sampling`, from the alternatives).
    Raises ReferenceFailed when the shape is not vLLM's."""
    try:
        entries = body["choices"][0]["prompt_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise ReferenceFailed("the reference answered without choices[0].prompt_logprobs") from None
    if not isinstance(entries, list) or len(entries) != len(ids):
        raise ReferenceFailed(
            f"prompt_logprobs has {len(entries) if isinstance(entries, list) else 'no'} "
            f"entries for a prompt of {len(ids)} tokens"
        )
    return [_token(entries[i], ids[i], i - first, sampling) for i in range(max(first, 1), len(ids))]


def _token(
    entry: Any, token_id: int | None, position: int, sampling: Sampling | None = None
) -> TokenScore:
    """One position's entry: the token's own logprob (keyed by its id, or the only key)."""
    if not isinstance(entry, dict) or not entry:
        raise ReferenceFailed(f"prompt_logprobs position {position} is empty")
    value = entry.get(str(token_id)) if token_id is not None else None
    if value is None:
        if len(entry) != 1:
            raise ReferenceFailed(f"prompt_logprobs position {position} lacks its own token")
        key, value = next(iter(entry.items()))
        token_id = int(key) if str(key).lstrip("-").isdigit() else None
    try:
        logprob = float(value["logprob"])
    except (KeyError, TypeError, ValueError):
        raise ReferenceFailed(f"prompt_logprobs position {position} has no logprob") from None
    rank = value.get("rank")
    text = value.get("decoded_token")
    entropy = soak = None
    if len(entry) > 1:
        known = [v.get("logprob") if isinstance(v, dict) else None for v in entry.values()]
        if all(isinstance(x, int | float) for x in known):
            entropy = entropy_from_top(known)  # type: ignore[arg-type]
            if sampling is not None:
                soak = soak_stats_top(known, logprob, sampling)  # type: ignore[arg-type]
    return TokenScore(
        position, token_id, logprob, rank if isinstance(rank, int) else None,
        text if isinstance(text, str) else "", entropy, soak,
    )  # fmt: skip


def text_generated(tokens: list[TokenScore], generated: str) -> list[TokenScore]:
    """Text alignment: the trailing tokens whose decoded text covers `generated` (the boundary
    token included), renumbered from 0."""
    covered, start = 0, len(tokens)
    while start > 0 and covered < len(generated):
        start -= 1
        covered += len(tokens[start].text)
    tail = tokens[start:]
    return [dataclasses.replace(t, position=i) for i, t in enumerate(tail)]


class HttpReference:
    """Scores generations on a reference server (one aiohttp session, bounded connections)."""

    def __init__(
        self, url: str, model: str | None = None, api_key: str | None = None,
        timeout_s: float = 30.0, connections: int = 64, alternatives: int = TOP_ALTERNATIVES,
        tls: TlsOptions = SYSTEM,
    ) -> None:  # fmt: skip
        self.url = url.rstrip("/")
        self._tls = tls
        self._options: dict[str, Any] = {}
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None
        self.prefill_tokens = 0
        """Tokens sent to the reference for scoring (its prefill load)."""
        self.top = alternatives
        """Alternatives asked for per position; 0 once the server refused them (HTTP 400: a
        vLLM started with a smaller `--max-logprobs`): the worst token then judges alone."""
        self.alternatives = alternatives
        """Alternatives asked for at the start (`--reference-alternatives`)."""
        self.sampling: Sampling | None = None
        """The soak's sampling settings: each token is also scored under them, from the
        alternatives (`soak.soak_stats_top`)."""

    def describe(self) -> dict[str, Any]:
        """What is stored with the run about this reference."""
        return {"kind": "http", "url": self.url, "model": self.model,
                "alternatives": self.alternatives}  # fmt: skip

    async def start(self) -> None:
        """Open the session and learn the model (the first of /v1/models when not given)."""
        context = self._tls.for_url(self.url)
        connector = aiohttp.TCPConnector(limit=self._connections, ssl=context or True)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=self._timeout, headers=self._headers
        )
        self._options = self._tls.aiohttp(self.url)
        if self.model is None:
            try:
                async with self._session.get(f"{self.url}/v1/models", **self._options) as response:
                    body = await response.json(content_type=None)
                self.model = str(body["data"][0]["id"])
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                await self.close()
                raise TargetError(f"cannot reach reference {self.url}: {_short(exc)}") from None
            except (KeyError, IndexError, TypeError, ValueError):
                await self.close()
                raise TargetError(f"reference {self.url}: /v1/models lists no model") from None

    async def close(self) -> None:
        """Close the session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def score(self, request: ScoreRequest) -> tuple[list[TokenScore], str]:
        """The generated tokens as the reference scores them, and the alignment used."""
        if request.prompt_ids is not None and request.token_ids is not None:
            ids = [*request.prompt_ids, *request.token_ids]
            try:
                body = await self._post(ids, self.top)
            except ReferenceFailed as exc:
                if self.top == 0 or str(exc) != "reference_http_400":
                    raise
                body = await self._post(ids, 0)  # refused only for the alternatives?
                self.top = 0  # yes: ask for none from now on
            scored = parse_prompt_logprobs(body, ids, len(request.prompt_ids), self.sampling)
            return scored, "token_ids"
        if request.prompt_text is None:
            raise ReferenceFailed("no_token_ids: a chat generation needs the candidate's ids")
        body = await self._post(request.prompt_text + request.text)
        tokens = _text_tokens(body)
        return text_generated(tokens, request.text), "text"

    async def _post(self, prompt: list[int] | str, top: int = 0) -> Any:
        """Score `prompt` with `top` alternatives per position (the entropy). A text prompt asks
        for its own tokens alone, as their ids are not known to pick them out of the
        alternatives (no typicality for text-aligned rows: the worst token judges them)."""
        if self._session is None:
            raise ReferenceFailed("the reference client is closed")
        payload = {
            "model": self.model, "prompt": prompt, "max_tokens": 1, "temperature": 0,
            "prompt_logprobs": top,
        }  # fmt: skip
        if isinstance(prompt, list):
            self.prefill_tokens += len(prompt)
        try:
            async with self._session.post(
                f"{self.url}/v1/completions", json=payload, **self._options
            ) as response:
                if response.status != 200:
                    raise ReferenceFailed(f"reference_http_{response.status}")
                return orjson.loads(await response.read())  # C: 20 alternatives a position
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            raise ReferenceFailed(f"reference_error: {type(exc).__name__}") from None


def _text_tokens(body: Any) -> list[TokenScore]:
    """Every scored position of a text prompt's answer (ids taken from the entries' keys)."""
    try:
        entries = body["choices"][0]["prompt_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise ReferenceFailed("the reference answered without choices[0].prompt_logprobs") from None
    if not isinstance(entries, list):
        raise ReferenceFailed("prompt_logprobs is not a list")
    ids = body["choices"][0].get("prompt_token_ids")
    return [
        _token(entry, ids[i] if isinstance(ids, list) and i < len(ids) else None, i)
        for i, entry in enumerate(entries)
        if i > 0
    ]


def _short(exc: BaseException) -> str:
    """A failure to reach the reference in a few words (aiohttp's reprs run to 300 characters)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"connection failed ({exc.os_error.strerror or type(exc.os_error).__name__})"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:120] if text else type(exc).__name__
