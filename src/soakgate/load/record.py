"""Turn one request's Outcome into a Generation row, and score it."""

from __future__ import annotations

from collections.abc import Sequence

from soakgate.detectors import CharRunSummary, DetectorConfig, char_runs_many, score_text
from soakgate.prompts import Prompt
from soakgate.records import Generation, failed_checks, sha256_text
from soakgate.targets import Outcome, RequestSpec
from soakgate.targets.gateway import gateway_retries

# Under `--store-text flagged`, also keep the text of one in this many clean generations.
TEXT_SAMPLE_EVERY = 100


def unscored_generation(
    outcome: Outcome,
    *,
    run_id: str,
    request_id: str,
    target: str,
    label: str,
    seq: int,
    prompt: Prompt,
    spec: RequestSpec,
    incarnation: int = 0,
) -> Generation:
    """The row of a completed request, before `score_generation` fills in the detectors."""
    generation = Generation(
        run_id=run_id, request_id=request_id, target=target, label=label, seq=seq,
        prompt_id=prompt.prompt_id, endpoint=spec.endpoint, stream=spec.stream,
        started_at=outcome.started_at, ended_at=outcome.ended_at, ttft_s=outcome.ttft_s,
        prompt_tokens=outcome.prompt_tokens, completion_tokens=outcome.completion_tokens,
        finish_reason=outcome.finish_reason, http_status=outcome.http_status,
        error_class=outcome.error_class, error_detail=outcome.error_detail,
        text=outcome.text, token_ids=outcome.token_ids, incarnation=incarnation,
        attempts=outcome.attempts,
    )  # fmt: skip
    if outcome.tool_calls:  # the answer is its tool calls: their arguments are the text scored
        generation.details["tool_calls"] = outcome.tool_calls
        if not generation.text:
            generation.text = "\n".join(call["arguments"] for call in outcome.tool_calls)
    if outcome.gateway:  # a gateway between us and the server said what it did
        generation.details["gateway"] = outcome.gateway
        generation.gateway_retries = gateway_retries(outcome.gateway)
    return generation


def batch_char_runs(
    generations: Sequence[Generation], detectors: DetectorConfig
) -> list[CharRunSummary | None]:
    """The character runs of a batch's clean rows, measured at once for `char_run`
    (`char_runs_many`), in the batch's order; None for a row that is not scored, and for every
    row when `char_run` is off, the batch is a single row, or measuring the batch failed (each
    row is then measured on its own, and a row that fails fails alone)."""
    measured: list[CharRunSummary | None] = [None] * len(generations)
    if "char_run" not in detectors.enabled or len(generations) < 2:
        return measured
    clean = [i for i, generation in enumerate(generations) if generation.error_class is None]
    try:
        runs = char_runs_many([generations[i].text or "" for i in clean],
                              detectors.char_run_threshold)  # fmt: skip
    except Exception:  # what the server sent is then judged row by row
        return measured
    for index, summary in zip(clean, runs, strict=True):
        measured[index] = summary
    return measured


def score_generation(
    generation: Generation,
    detectors: DetectorConfig,
    store_text: str,
    max_tokens: int | None = None,
    char_runs: CharRunSummary | None = None,
) -> None:
    """Score a row with every configured detector, fingerprint its text, and drop the text
    (and token ids) that `store_text` does not keep. `max_tokens` is the request's budget: the
    detectors judge an output that the budget cut by what share of it a run fills; `char_runs`,
    the text's runs when its batch measured them (`detectors.char_runs_many`)."""
    text = generation.text or ""
    generation.text_sha256 = sha256_text(text)
    if generation.error_class is None:
        scores, details, flags = generation.scores, generation.details, generation.flags
        for name, (score, flagged, evidence) in score_text(
            text, generation.token_ids, generation.completion_tokens, detectors,
            finish_reason=generation.finish_reason, max_tokens=max_tokens, char_runs=char_runs,
        ).items():  # fmt: skip
            scores[name] = score
            if evidence:
                details[name] = evidence
            if flagged:
                flags.append(name)
    failed = failed_checks(generation.checks)
    keep = store_text == "all" or generation.flags or failed or not generation.ok
    if not keep and not (store_text == "flagged" and generation.seq % TEXT_SAMPLE_EVERY == 0):
        generation.text = None
        generation.token_ids = None
