"""A stored generation turned back into its exact request: prompt, sampling, model, endpoint.

Pure functions over what the store holds: the run record (`load` keeps every request setting,
`software.models` the model each target served), the row (endpoint, stream, whether it was a
greedy differential request) and the run's prompts (schema 3 stores each distinct prompt once
per run). A run stored before schema 3 is replayable when its prompt set is recognised by its
stored digest: the built-in set, or a `--prompts FILE` given again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from soakgate.errors import UsageError
from soakgate.load.resume import prompts_digest
from soakgate.probes.differential import greedy
from soakgate.prompts import Prompt, builtin_prompts
from soakgate.records import Generation, Run
from soakgate.targets import RequestSpec

# Settings of a RequestSpec the run record keeps under another key.
_STORED_AS = {"seed": "sampling_seed"}


@dataclass(frozen=True, slots=True)
class StoredRequest:
    """Everything needed to send one stored generation's request again."""

    request_id: str
    """The original request's id."""
    run_id: str
    """The run it belongs to."""
    target: str
    """The target (unit) that served it."""
    label: str
    """The run's configuration label."""
    prompt: Prompt
    """The prompt (or chat messages) that was sent."""
    spec: RequestSpec
    """Endpoint, stream mode, max_tokens and every sampling parameter, as sent."""
    model: str | None
    """The model name sent (None: the run did not record it; discovered again)."""
    concurrency: int
    """Requests the original soak kept in flight per target."""

    @property
    def seeded(self) -> bool:
        """Whether the original request carried a seed (else the server chose its own)."""
        return self.spec.seed is not None

    def describe(self) -> str:
        """One line: endpoint, stream mode, max_tokens, temperature, seed."""
        spec = self.spec
        seed = "server's own seed" if spec.seed is None else f"seed {spec.seed}"
        mode = "stream" if spec.stream else "no stream"
        return (
            f"{spec.endpoint}, {mode}, max_tokens {spec.max_tokens}, "
            f"temperature {spec.temperature:g}, {seed}"
        )


def request_spec(load: Mapping[str, Any]) -> RequestSpec:
    """The RequestSpec a run sent, from its stored load record (defaults for what an older
    soakgate did not record)."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(RequestSpec):
        key = _STORED_AS.get(field.name, field.name)
        if key in load:
            values[field.name] = load[key]
    if "sampling_seed" not in load:
        values.pop("seed", None)  # an older record: "seed" there is the prompt-order seed
    return RequestSpec(**values)


def stored_request(
    run: Run, generation: Generation, prompts: Mapping[str, Prompt]
) -> StoredRequest:
    """The exact request of one stored row; UsageError when its prompt is not known."""
    prompt = prompts.get(generation.prompt_id)
    if prompt is None:
        raise UsageError(
            f"run {run.run_id} stored no prompt {generation.prompt_id!r}: a database written "
            "before schema 3 keeps only prompt ids (give the run's --prompts FILE to replay it)"
        )
    spec = request_spec(run.load)
    spec = dataclasses.replace(spec, endpoint=generation.endpoint, stream=generation.stream)
    differential = generation.details.get("differential")
    if isinstance(differential, dict) and differential.get("greedy"):
        spec = greedy(spec)  # a differential row was sent greedy and seeded
    models = run.software.get("models")
    model = models.get(generation.target) if isinstance(models, dict) else None
    return StoredRequest(
        generation.request_id, run.run_id, generation.target, run.label, prompt, spec,
        str(model) if model else None, int(run.load.get("concurrency", 1)),
    )  # fmt: skip


def known_prompts(
    run: Run, stored: Mapping[str, Prompt], given: Sequence[Prompt] | None = None
) -> dict[str, Prompt]:
    """The prompts a run sent: those stored with it (schema 3), else a set whose digest is the
    run's own (`given`, from --prompts FILE, or the built-in set). Empty when none is known."""
    if stored:
        return dict(stored)
    digest = run.load.get("prompts_sha256")
    for candidate in (given, builtin_prompts()):
        if candidate is not None and digest is not None and prompts_digest(candidate) == digest:
            return {p.prompt_id: p for p in candidate}
    if given is not None:
        raise UsageError(
            f"the prompts given are not the ones run {run.run_id} sent (their SHA-256 differs "
            "from the one stored with the run)"
        )
    return {}


def control_request(
    run: Run, rows: Iterable[Generation], prompts: Mapping[str, Prompt], avoid: set[str]
) -> StoredRequest:
    """The control prompt of a run's replays: the request of its first clean row whose prompt is
    none of the replayed rows' (`avoid`), else a prompt of the run it did not replay, else one
    of the built-in prompts, sent with the run's settings."""
    for row in rows:
        clean = not row.collapsed and row.error_class is None
        if clean and row.prompt_id not in avoid and row.prompt_id in prompts:
            return stored_request(run, row, prompts)
    replayed = {prompts[i].text for i in avoid if i in prompts}
    candidates = [*prompts.values(), *builtin_prompts()]
    spare = next(p for p in candidates if p.prompt_id not in avoid and p.text not in replayed)
    models = run.software.get("models")
    model = next(iter(models.values()), None) if isinstance(models, dict) and models else None
    return StoredRequest(
        f"control:{spare.prompt_id}", run.run_id, run.targets[0], run.label, spare,
        request_spec(run.load), str(model) if model else None,
        int(run.load.get("concurrency", 1)),
    )  # fmt: skip
