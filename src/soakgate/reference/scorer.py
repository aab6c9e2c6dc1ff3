"""The soak's reference scorer: which rows are scored, scoring one row within its budget, and the
calibration run on the reference's own samples before the soak."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from soakgate.errors import TargetError
from soakgate.prompts import Prompt, PromptPicker
from soakgate.records import Generation
from soakgate.reference.calibrate import Calibration, calibrate
from soakgate.reference.http import ReferenceFailed, ScoreRequest
from soakgate.reference.score import (
    SCORE_NAME,
    SCORES,
    TokenScore,
    evidence,
    max_surprisal,
    mean_surprisal,
    token_z,
    typical_surprisal,
    unscored,
    whole_z,
)
from soakgate.reference.soak import Sampling
from soakgate.targets import Outcome, RequestSpec


class Reference(Protocol):
    """A trusted model that scores tokens (a server, or a model in this process)."""

    prefill_tokens: int
    sampling: Sampling | None
    """The soak's sampling settings, under which each token is also scored (`soak.py`)."""

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def score(self, request: ScoreRequest) -> tuple[list[TokenScore], str]: ...
    def describe(self) -> dict[str, Any]: ...


class Sampler(Protocol):
    """Draws the reference's own samples at the soak's settings (for calibration)."""

    async def sample(
        self, prompts: list[Prompt], spec: RequestSpec, concurrency: int, first: int = 0
    ) -> list[tuple[Prompt, Outcome]]: ...
    def calibrated(self) -> None:
        """The calibration is drawn; the soak comes next (a sampler in this process gives the
        soak back the core it used)."""


@dataclass(frozen=True, slots=True)
class ScoringSettings:
    """How reference scoring runs: what share is scored, the rate, the budget and backlog."""

    fraction: float = 1.0
    """Share of each target's generations scored (by sequence number)."""
    per_target: Mapping[str, float] = field(default_factory=dict)
    """Target name -> its own share."""
    false_flag_rate: float = 0.001
    """The calibrated false-flag rate per scored generation."""
    calibration: int = 5000
    """Reference samples drawn for the calibration."""
    budget_s: float = 30.0
    """Longest a row waits for its score before it is stored unscored."""
    backlog: int = 256
    """Rows waiting for the reference at most; a row beyond it is stored unscored at once."""
    recalibrate: bool = False
    """Draw a new calibration even where the database holds one with the same fingerprint."""


Progress = Callable[[int, int, float], None]
"""Told (samples drawn, samples asked, seconds so far) after every chunk of the calibration."""
CHUNK = 48
"""Calibration samples drawn and scored together, at least (progress is told between chunks):
one batch of the in-process reference's sampler (`hf.SAMPLE_BATCH`)."""
TRANSPORT = frozenset(
    {"stream", "timeout_s", "max_response_bytes", "logprobs", "top_logprobs", "return_token_ids"}
)
"""Request settings that change how answers travel, not what the reference samples: left out
of a calibration's fingerprint."""


UNTRUNCATED_NOTE = (
    "reference scoring: sampling without --top-p keeps the model's long tail in the clean "
    "samples, so the calibrated threshold is high and a single wrong token is caught less often "
    '(README: "Which detector for which corruption"); soak with the --top-p your traffic uses'
)


def sampling_note(spec: RequestSpec) -> str | None:
    """A note when the soak samples from the whole distribution (no nucleus): the threshold a
    clean long tail sets misses more single wrong tokens than one set under nucleus sampling."""
    untruncated = spec.top_p is None or spec.top_p >= 1.0
    return UNTRUNCATED_NOTE if spec.temperature > 0 and untruncated else None


def request_for(prompt: Prompt, outcome: Outcome, endpoint: str) -> ScoreRequest:
    """What the reference is asked to score for one answer."""
    chat = endpoint == "chat"
    return ScoreRequest(
        prompt_ids=outcome.prompt_token_ids, token_ids=outcome.token_ids,
        prompt_text=None if chat else prompt.text, text=outcome.text,
        messages=prompt.messages() if chat else None,
    )  # fmt: skip


class ReferenceScorer:
    """Scores chosen rows under a reference, flagging those above the calibrated threshold."""

    def __init__(self, reference: Reference, settings: ScoringSettings, sampler: Sampler) -> None:
        self.reference = reference
        self.settings = settings
        self.sampler = sampler
        self.budget_s = settings.budget_s
        self.backlog = settings.backlog
        self.calibration: Calibration | None = None
        self.scored = 0
        self.seconds = 0.0
        """Wall time spent waiting on the reference for soak rows (for the bench)."""
        self._checked = False

    def selects(self, target: str, seq: int) -> bool:
        """Whether row `seq` of `target` is scored (reproducible from seq)."""
        share = self.settings.per_target.get(target, self.settings.fraction)
        if share >= 1.0:
            return True
        return share > 0 and random.Random(f"reference:{seq}").random() < share

    async def score(self, generation: Generation, outcome: Outcome, prompt: Prompt) -> None:
        """Score one row in place; a reference failure leaves it unscored with the reason."""
        assert self.calibration is not None, "calibrate() first"
        began = time.perf_counter()
        try:
            tokens, alignment = await self.reference.score(
                request_for(prompt, outcome, generation.endpoint)
            )
        except ReferenceFailed as exc:
            self.unscored(generation, str(exc))
            return
        finally:
            self.seconds += time.perf_counter() - began
        calibration = self.calibration
        score, flagged, payload = evidence(
            tokens, calibration.threshold, alignment, calibration.typical_threshold,
            (calibration.soak_z_quantiles.get("p90"), calibration.typical_quantiles.get("p90"),
             calibration.mean_quantiles.get("p90")),
            calibration.whole_score, calibration.token_z_threshold,
        )  # fmt: skip
        payload["seconds"] = round(time.perf_counter() - began, 6)  # the reference's latency
        generation.reference_score, generation.suspect = score, flagged
        generation.details["reference"] = payload
        self.scored += 1

    def unscored(self, generation: Generation, reason: str) -> None:
        """Mark a row chosen for scoring that was not scored: never as clean-scored."""
        generation.reference_score = generation.suspect = None
        generation.details["reference"] = unscored(reason)

    def fingerprint(self, spec: RequestSpec, picker: PromptPicker) -> str:
        """SHA-256 of everything a calibration depends on: the score, the reference (and its
        model files), the exact calibration prompts, the sampling settings, the sample count and
        the false-flag rate. Two runs with the same fingerprint draw the same calibration.

        How the answers travel is not part of it (`TRANSPORT`: streamed or not, the timeout,
        the size cap, logprobs asked of the target): the reference's samples follow the same
        distribution either way, so a streamed soak and a non-streamed one share a calibration.
        """
        from soakgate.load.resume import prompts_digest

        settings = self.settings
        prompts = [picker.pick(seq) for seq in range(settings.calibration)]
        canonical = json.dumps({
            "score": list(SCORES), "reference": self.reference.describe(),
            "model_files": getattr(self.reference, "files_digest", lambda: None)(),
            "prompts": prompts_digest(prompts),
            "sampling": {k: v for k, v in spec.to_dict().items() if k not in TRANSPORT},
            "samples": settings.calibration, "false_flag_rate": settings.false_flag_rate,
        }, sort_keys=True, default=str)  # fmt: skip
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def reuse(self, stored: Mapping[str, Any]) -> None:
        """Take a stored calibration (a `reference_calibration` event's data) as this run's."""
        names = {f.name for f in dataclasses.fields(Calibration)}
        self.calibration = Calibration(**{k: v for k, v in stored.items() if k in names})

    async def prepare(
        self, spec: RequestSpec, picker: PromptPicker, concurrency: int,
        progress: Progress | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Start the reference and calibrate on its own samples at the soak's settings, drawn
        and scored in chunks (`progress` is told after each); the calibration as stored with
        the run. TargetError when too few samples scored."""
        await self.check()
        settings = self.settings
        sampled_spec = dataclasses.replace(spec, return_token_ids=True)
        prompts = [picker.pick(seq) for seq in range(settings.calibration)]
        began = time.perf_counter()
        scores: list[tuple[float, float, float | None, float | None, float | None]] = []
        failures = drawn = 0
        chunk = max(CHUNK, 2 * concurrency)
        for start in range(0, len(prompts), chunk):
            answers = await self.sampler.sample(
                prompts[start : start + chunk], sampled_spec, concurrency, start
            )
            got, failed = await self._calibration_scores(answers, spec.endpoint, concurrency)
            scores.extend(got)
            failures += failed
            drawn += len(answers)
            if progress is not None:
                progress(drawn, settings.calibration, time.perf_counter() - began)
        self.sampler.calibrated()
        if drawn - failures < 0.9 * settings.calibration:
            raise TargetError(
                f"reference calibration: only {drawn - failures} of "
                f"{settings.calibration} reference samples could be scored"
            )
        nucleus = spec.top_p is not None and spec.top_p < 1.0  # the token z is judged under one
        self.calibration = calibrate(
            [s[0] for s in scores], settings.false_flag_rate, [s[1] for s in scores],
            [s[2] for s in scores], [s[3] for s in scores],
            [s[4] for s in scores] if nucleus else (),
        )  # fmt: skip
        return {
            **self.calibration.to_dict(), "score": SCORE_NAME, "samples_failed": failures,
            "reference": self.reference.describe(), "fraction": settings.fraction,
            "per_target": dict(settings.per_target), "budget_s": settings.budget_s,
            "sampling": sampled_spec.to_dict(), "seconds": round(time.perf_counter() - began, 3),
            "sampling_note": sampling_note(spec),
        }  # fmt: skip

    async def check(self) -> None:
        """Start the reference and score one short text, before thousands of samples are drawn:
        a reference that cannot be reached or answers without prompt log-probabilities is a
        TargetError now, not after the calibration."""
        if self._checked:
            return
        await self.reference.start()
        probe = ScoreRequest(
            prompt_ids=None, token_ids=None, prompt_text="The capital of France is",
            text=" Paris.", messages=[{"role": "user", "content": "Name a capital."}],
        )  # fmt: skip
        try:
            await self.reference.score(probe)
        except ReferenceFailed as exc:
            await self.reference.close()
            described = self.reference.describe()
            where = described.get("url") or described.get("path") or "the reference"
            raise TargetError(f"reference {where} does not score generations: {exc}") from None
        self._checked = True

    async def _calibration_scores(
        self, answers: list[tuple[Prompt, Outcome]], endpoint: str, concurrency: int
    ) -> tuple[list[tuple[float, float, float | None, float | None, float | None]], int]:
        """Each clean sample's scores (worst token, mean, typicality, soak z, worst standardized
        token); the count of samples that failed or could not be scored."""
        gate = asyncio.Semaphore(concurrency)

        async def one(
            prompt: Prompt, outcome: Outcome
        ) -> tuple[float, float, float | None, float | None, float | None] | None:
            if outcome.error_class is not None:
                return None
            async with gate:
                try:
                    tokens, _ = await self.reference.score(request_for(prompt, outcome, endpoint))
                except ReferenceFailed:
                    return None
            return (max_surprisal(tokens), mean_surprisal(tokens), typical_surprisal(tokens),
                    whole_z(tokens), token_z(tokens))  # fmt: skip

        results = await asyncio.gather(*(one(p, o) for p, o in answers))
        scores = [s for s in results if s is not None]
        return scores, len(results) - len(scores)

    async def close(self) -> None:
        """Release the reference."""
        await self.reference.close()
