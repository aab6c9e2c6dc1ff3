"""Turn one request's Outcome into a scored Generation row."""

from __future__ import annotations

from soakgate.detectors import DetectorConfig, score_text
from soakgate.prompts import Prompt
from soakgate.records import Generation, sha256_text
from soakgate.targets import Outcome, RequestSpec

# Under `--store-text flagged`, also keep the text of one in this many clean generations.
TEXT_SAMPLE_EVERY = 100


def scored_generation(
    outcome: Outcome,
    *,
    run_id: str,
    request_id: str,
    target: str,
    label: str,
    seq: int,
    prompt: Prompt,
    spec: RequestSpec,
    detectors: DetectorConfig,
    store_text: str,
    incarnation: int = 0,
) -> Generation:
    """Score a completed request with every configured detector and build its row."""
    generation = Generation(
        run_id=run_id, request_id=request_id, target=target, label=label, seq=seq,
        prompt_id=prompt.prompt_id, endpoint=spec.endpoint, stream=spec.stream,
        started_at=outcome.started_at, ended_at=outcome.ended_at, ttft_s=outcome.ttft_s,
        prompt_tokens=outcome.prompt_tokens, completion_tokens=outcome.completion_tokens,
        finish_reason=outcome.finish_reason, http_status=outcome.http_status,
        error_class=outcome.error_class, error_detail=outcome.error_detail,
        text=outcome.text, text_sha256=sha256_text(outcome.text), token_ids=outcome.token_ids,
        incarnation=incarnation,
    )  # fmt: skip
    if outcome.error_class is None:
        for name, detection in score_text(
            outcome.text, outcome.token_ids, outcome.completion_tokens, detectors
        ).items():
            generation.scores[name] = detection.score
            if detection.evidence:
                generation.details[name] = detection.evidence
            if detection.flagged:
                generation.flags.append(name)
    keep = store_text == "all" or generation.flags or not generation.ok
    if not keep and not (store_text == "flagged" and seq % TEXT_SAMPLE_EVERY == 0):
        generation.text = None
        generation.token_ids = None
    return generation
