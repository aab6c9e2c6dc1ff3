"""An in-process reference: a Hugging Face transformers model loaded by soakgate
(`--reference-model PATH`), for stacks where no server returns prompt log-probabilities
(llama.cpp's server cannot). It scores generations in batches (requests that arrive while a batch
runs form the next), and draws its own samples for the calibration with `generate`.

Token ids: the candidate's ids are scored as they are when it returned them (they must be this
model's tokenizer's); otherwise the text is tokenized here (chat: this tokenizer's chat template),
and the generated tokens are those after the prompt's (`alignment: text`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from soakgate.errors import UsageError
from soakgate.prompts import Prompt
from soakgate.reference.http import ReferenceFailed, ScoreRequest
from soakgate.reference.score import TokenScore
from soakgate.reference.soak import (
    Sampling,
    draw,
    soak_distribution,
    soak_stats_of,
    soak_stats_torch,
)
from soakgate.targets import Outcome, RequestSpec

BATCH = 16
"""Generations scored per forward pass during the soak."""
SAMPLE_BATCH = 48
"""Calibration samples drawn together (one forward pass per token for all of them): on two
CPU cores 48 drew 1.4x as many samples a second as 16 (BENCHMARKS.md section 17)."""


def usable_cores() -> int:
    """Cores this process may run on."""
    import os

    return max(1, len(os.sched_getaffinity(0)))


def default_threads() -> int:
    """torch threads for the in-process reference while the soak runs: every usable core but
    one (at least one). The soak's own client needs a core, and torch's threads spin: on a
    2-core machine beside one busy process, 2 threads drew samples 3.0x slower than 1 (2.57
    against 1.05 samples/s at batch 16; `bench/bench_calibration_speed.py`, BENCHMARKS.md
    section 17). The calibration, drawn before the soak starts, uses every core."""
    return max(1, usable_cores() - 1)


class HFReference:
    """A transformers causal LM on the CPU (or the device torch picks), scoring and sampling."""

    def __init__(
        self, path: str | Path, batch_size: int | None = None, threads: int | None = None
    ) -> None:
        self.path = Path(path)
        self.batch_size = batch_size or BATCH
        """Generations scored per forward pass during the soak."""
        self.sample_batch = batch_size or SAMPLE_BATCH
        """Calibration samples drawn per forward pass (`--reference-batch` sets both)."""
        self.threads = threads or default_threads()
        """torch's intra-op threads while the soak runs (default: every usable core but one)."""
        self.calibration_threads = threads or usable_cores()
        """torch's intra-op threads while the calibration is drawn, before the soak (default:
        every usable core)."""
        self._calibrating = False
        self.prefill_tokens = 0
        self.sampling: Sampling | None = None
        """The soak's sampling settings: each token is also scored under them (`soak.py`)."""
        self._model: Any = None
        self._tokenizer: Any = None
        self._pending: list[tuple[list[int], int, asyncio.Future[list[TokenScore]]]] = []
        self._runner: asyncio.Task[None] | None = None
        self._drawn: dict[tuple[int, ...], list[TokenScore]] = {}
        """The calibration's samples as scored while they were drawn (prompt and generated ids
        -> scores), until `score` is asked for them."""
        self._halt = threading.Event()
        """Set by close(): a sampling thread stops after its batch (a signal during the
        calibration does not wait for thousands of samples)."""

    def describe(self) -> dict[str, Any]:
        """What is stored with the run about this reference."""
        return {"kind": "transformers", "path": str(self.path)}

    def files_digest(self) -> str:
        """SHA-256 over the model folder's files (a calibration is reused only for the same
        files): each file's name and size, and its first and last MiB (reading whole weights
        of many GB would cost what the reuse saves)."""
        import hashlib

        digest = hashlib.sha256()
        files = sorted(p for p in self.path.rglob("*") if p.is_file()) if self.path.is_dir() else []
        for path in files:
            size = path.stat().st_size
            digest.update(f"{path.relative_to(self.path)}\0{size}\0".encode())
            with path.open("rb") as handle:
                digest.update(handle.read(1 << 20))
                if size > 2 << 20:
                    handle.seek(size - (1 << 20))
                    digest.update(handle.read())
        return digest.hexdigest()

    async def start(self) -> None:
        """Load the model (in a thread: it takes seconds)."""
        if self._model is None:
            await asyncio.to_thread(self._load)

    def _load(self) -> None:
        if not (self.path / "config.json").is_file():
            raise UsageError(f"--reference-model {self.path}: no config.json (not a model folder)")
        try:
            import torch
            import transformers
        except ImportError:
            raise UsageError(
                "--reference-model needs torch and transformers (pip install -e '.[torch]')"
            ) from None
        torch.set_num_threads(self._threads_now())
        transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
        transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        try:
            self._tokenizer = transformers.AutoTokenizer.from_pretrained(
                self.path, local_files_only=True
            )
            model = transformers.AutoModelForCausalLM.from_pretrained(
                self.path, dtype=torch.float32, local_files_only=True
            )
            self._model = model.eval()  # type: ignore[no-untyped-call]
        except (OSError, ValueError) as exc:
            raise UsageError(f"--reference-model {self.path}: cannot load it ({exc})") from None

    def _threads_now(self) -> int:
        return self.calibration_threads if self._calibrating else self.threads

    def _set_threads(self) -> None:
        """Apply the phase's thread count (torch's setting is process-wide)."""
        import torch

        if torch.get_num_threads() != self._threads_now():
            torch.set_num_threads(self._threads_now())

    def calibrated(self) -> None:
        """The calibration is drawn: from now on score with the soak's thread count."""
        self._calibrating = False
        self._drawn.clear()

    async def close(self) -> None:
        """Stop any sampling after its batch (the model goes with the process)."""
        self._halt.set()

    async def score(self, request: ScoreRequest) -> tuple[list[TokenScore], str]:
        """The generated tokens as this model scores them, and the alignment used (a sample of
        this reference's own calibration: as scored when it was drawn)."""
        ids, first, alignment = self._ids(request)
        drawn = self._drawn.pop(tuple(ids), None) if alignment == "token_ids" else None
        if drawn is not None and len(drawn) == len(ids) - first:
            return drawn, alignment
        if len(ids) > self._model.config.max_position_embeddings:
            raise ReferenceFailed("too_long: longer than the reference model's context")
        future: asyncio.Future[list[TokenScore]] = asyncio.get_running_loop().create_future()
        self._pending.append((ids, first, future))
        self.prefill_tokens += len(ids)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())
        return await future, alignment

    def _ids(self, request: ScoreRequest) -> tuple[list[int], int, str]:
        """Prompt + generated ids, where the generated ones start, and the alignment."""
        tokenizer = self._tokenizer
        if request.prompt_ids is not None and request.token_ids is not None:
            ids = [*request.prompt_ids, *request.token_ids]
            if any(not 0 <= i < len(tokenizer) for i in ids):
                raise ReferenceFailed("foreign_token_ids: ids outside the reference's vocabulary")
            return ids, len(request.prompt_ids), "token_ids"
        generated = tokenizer(request.text, add_special_tokens=False).input_ids
        if request.messages is not None:
            prompt = tokenizer.apply_chat_template(
                request.messages, add_generation_prompt=True, tokenize=True, return_dict=False
            )
            return [*prompt, *generated], len(prompt), "text"
        prompt = tokenizer(request.prompt_text or "").input_ids
        whole = tokenizer((request.prompt_text or "") + request.text).input_ids
        shared = next((i for i, (a, b) in enumerate(zip(prompt, whole, strict=False)) if a != b),
                      min(len(prompt), len(whole)))  # fmt: skip
        return whole, max(shared, 1), "text"

    async def _run(self) -> None:
        """Score the waiting generations, a batch at a time, until none wait."""
        while self._pending:
            batch, self._pending = (
                self._pending[: self.batch_size],
                self._pending[self.batch_size :],
            )
            try:
                results = await asyncio.to_thread(self._forward, [(i, f) for i, f, _ in batch])
            except Exception as exc:  # a model failure fails these rows' scoring, not the soak
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(ReferenceFailed(f"reference_error: {exc!r}"[:200]))
                continue
            for (_, _, future), tokens in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(tokens)

    def _forward(self, batch: list[tuple[list[int], int]]) -> list[list[TokenScore]]:
        """One padded forward pass: each sequence's generated tokens' logprobs and ranks."""
        import torch

        self._set_threads()
        longest = max(len(ids) for ids, _ in batch)
        pad = self._tokenizer.pad_token_id or 0
        inputs = torch.tensor([ids + [pad] * (longest - len(ids)) for ids, _ in batch])
        mask = torch.tensor([[1] * len(ids) + [0] * (longest - len(ids)) for ids, _ in batch])
        with torch.no_grad():
            logits = self._model(input_ids=inputs, attention_mask=mask, use_cache=False).logits
        logits = logits.float()
        logprobs = torch.log_softmax(logits, dim=-1)
        out = []
        for row, (ids, first) in enumerate(batch):
            start = max(first, 1)
            targets = torch.tensor(ids[start:])
            rows = logprobs[row, start - 1 : len(ids) - 1]
            chosen = rows.gather(1, targets[:, None])[:, 0]
            ranks = (rows > chosen[:, None]).sum(1) + 1
            entropies = -(rows.exp() * rows).nan_to_num().sum(1)  # exact: the whole vocabulary
            soak: list[tuple[float, float, float] | None] = [None] * len(targets)
            if self.sampling is not None:
                stats = soak_stats_torch(
                    torch, logits[row, start - 1 : len(ids) - 1], targets, self.sampling
                )
                soak = list(zip(*(x.tolist() for x in stats), strict=True))
            out.append([
                TokenScore(p - first, t, float(lp), int(r), self._tokenizer.decode([t]), float(h),
                           s)
                for p, t, lp, r, h, s in zip(range(start, len(ids)), ids[start:], chosen.tolist(),
                                             ranks.tolist(), entropies.tolist(), soak, strict=True)
            ])  # fmt: skip
        return out

    async def sample(
        self, prompts: list[Prompt], spec: RequestSpec, concurrency: int, first: int = 0
    ) -> list[tuple[Prompt, Outcome]]:
        """The model's own samples at the soak's settings (calibration), in batches; `first` is
        the number of the first sample (each chunk of a calibration draws from its own seed)."""
        self._calibrating = True  # until calibrated(): every core, the soak has not started
        await self.start()
        return await asyncio.to_thread(self._sample_all, prompts, spec, first)

    def _sample_all(
        self, prompts: list[Prompt], spec: RequestSpec, first: int = 0
    ) -> list[tuple[Prompt, Outcome]]:
        import torch

        self._set_threads()
        torch.manual_seed((spec.seed or 0) * 1_000_003 + first)
        answers: list[tuple[Prompt, Outcome]] = []
        batches = -(-len(prompts) // self.sample_batch)  # as even as they can be: 50 prompts at
        for index in range(batches):  # 48 are one batch of 25 twice, not 48 and 2 (a step of 2
            if self._halt.is_set():  # rows costs nearly what one of 48 does)
                break
            chunk = prompts[index * len(prompts) // batches : (index + 1) * len(prompts) // batches]
            answers += list(zip(chunk, self._sample(chunk, spec), strict=True))
        return answers

    def _sample(self, prompts: list[Prompt], spec: RequestSpec) -> list[Outcome]:
        """One batch of samples, left-padded, drawn a token at a time on the model's KV cache:
        what `generate` does at these settings (temperature, nucleus, `min_new_tokens` for
        `ignore_eos`, pad after a stop) without its per-step machinery, and with the nucleus and
        the draw of `soak.py` (BENCHMARKS.md section 17: 1.2-1.3x `generate`'s speed here).
        While calibrating, each sample's scores are taken from the logits that drew it and kept
        for `score` (`_drawn`): the second forward pass over every sample is not run."""
        import torch

        tokenizer = self._tokenizer
        if spec.endpoint == "chat":
            encoded = [tokenizer.apply_chat_template(p.messages(), add_generation_prompt=True,
                                                     tokenize=True, return_dict=False)
                       for p in prompts]  # fmt: skip
        else:
            encoded = [tokenizer(p.text).input_ids for p in prompts]
        longest, pad = max(map(len, encoded)), tokenizer.pad_token_id or 0
        inputs = torch.tensor([[pad] * (longest - len(e)) + e for e in encoded])
        mask = torch.tensor([[0] * (longest - len(e)) + [1] * len(e) for e in encoded])
        began = time.time()
        drawing = None
        if spec.temperature is None or spec.temperature > 0:
            drawing = Sampling(spec.temperature or 1.0, spec.top_p or 1.0)
        stops = self._stop_ids()
        rows = len(encoded)
        new: list[list[int]] = [[] for _ in encoded]
        scores: list[list[TokenScore]] = [[] for _ in encoded]
        finish = ["length"] * rows
        with torch.no_grad():
            positions = (mask.cumsum(-1) - 1).clamp_min(0)
            out = self._model(input_ids=inputs, attention_mask=mask, position_ids=positions,
                              use_cache=True, **self._last_logits_only())  # fmt: skip
            done = torch.zeros(rows, dtype=torch.bool)
            for step in range(spec.max_tokens):
                logits = out.logits[:, -1].float()
                barred = stops if spec.ignore_eos else []
                distribution = None
                if drawing is not None:
                    distribution = soak_distribution(torch, self._barred(logits, barred), drawing)
                    token = draw(torch, distribution[1])
                else:
                    token = self._barred(logits, barred).argmax(-1)
                stopped = torch.isin(token, torch.tensor(stops))
                if self._calibrating:
                    shared = distribution if not barred and drawing == self.sampling else None
                    step_scores = self._step_scores(torch, logits, token, step, shared)
                each = zip(token.tolist(), stopped.tolist(), done.tolist(), strict=True)
                for row, (tid, stop, ended) in enumerate(each):
                    if ended:
                        continue
                    if stop:
                        finish[row] = "stop"
                        continue
                    new[row].append(tid)
                    if self._calibrating:
                        scores[row].append(step_scores[row])
                done |= stopped
                if bool(done.all()) or step == spec.max_tokens - 1:
                    break
                mask = torch.cat([mask, torch.ones(rows, 1, dtype=mask.dtype)], dim=1)
                positions = positions[:, -1:] + 1
                out = self._model(input_ids=torch.where(done, pad, token)[:, None],
                                  attention_mask=mask, position_ids=positions,
                                  past_key_values=out.past_key_values, use_cache=True)  # fmt: skip
        outcomes = []
        for row, prompt_ids in enumerate(encoded):
            if self._calibrating and new[row]:
                self._drawn[(*prompt_ids, *new[row])] = scores[row]
            outcome = Outcome(started_at=began, ended_at=time.time(),
                              text=tokenizer.decode(new[row]), token_ids=new[row],
                              prompt_token_ids=prompt_ids, finish_reason=finish[row],
                              completion_tokens=len(new[row]))  # fmt: skip
            outcomes.append(outcome)
        return outcomes

    def _last_logits_only(self) -> dict[str, Any]:
        """The argument that makes the prompt's forward pass return the last position's logits
        only (as `generate` asks): all of them are a rows x prompt x vocabulary tensor, 1.6 GB
        for 48 prompts of 1,000 tokens of this small vocabulary."""
        import inspect

        accepted = inspect.signature(self._model.forward).parameters
        return {"logits_to_keep": 1} if "logits_to_keep" in accepted else {}

    def _stop_ids(self) -> list[int]:
        """The ids that end a generation: the model's generation config's and the tokenizer's
        end of sequence (what `generate` and servers stop on; never in the generated text)."""
        configured = self._model.generation_config.eos_token_id
        ids = configured if isinstance(configured, list) else [configured]
        return sorted({i for i in [*ids, self._tokenizer.eos_token_id] if i is not None})

    @staticmethod
    def _barred(logits: Any, barred: list[int]) -> Any:
        """`logits` with the `barred` ids given no probability (`min_new_tokens`)."""
        if not barred:
            return logits
        logits = logits.clone()
        logits[:, barred] = float("-inf")
        return logits

    def _step_scores(
        self, torch: Any, logits: Any, token: Any, step: int, shared: tuple[Any, Any] | None
    ) -> list[TokenScore]:
        """Each row's drawn token as `_forward` scores it, from the same logits (the model's,
        before any id is barred): log-probability, rank, entropy, soak values (from `shared`,
        the drawing's `soak_distribution`, where it is the scoring's too)."""
        logprobs = torch.log_softmax(logits, dim=-1)
        chosen = logprobs.gather(1, token[:, None])[:, 0]
        ranks = (logprobs > chosen[:, None]).sum(1) + 1
        entropies = -(logprobs.exp() * logprobs).nan_to_num().sum(1)
        soak: list[tuple[float, float, float] | None] = [None] * len(token)
        if self.sampling is not None:
            stats = (soak_stats_of(torch, *shared, token) if shared is not None
                     else soak_stats_torch(torch, logits, token, self.sampling))  # fmt: skip
            soak = list(zip(*(x.tolist() for x in stats), strict=True))
        return [TokenScore(step, t, lp, r, self._tokenizer.decode([t]), h, s)
                for t, lp, r, h, s in zip(token.tolist(), chosen.tolist(), ranks.tolist(),
                                          entropies.tolist(), soak, strict=True)]  # fmt: skip
