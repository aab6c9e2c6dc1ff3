"""The reference's own samples for calibration, drawn from a server with soakgate's client."""

from __future__ import annotations

import asyncio

from soakgate.prompts import Prompt
from soakgate.targets import Outcome, RequestSpec, TargetSpec
from soakgate.targets.client import connect, make_session


class ServerSampler:
    """Samples a reference server at the soak's request settings (the same client the soak uses)."""

    def __init__(self, target: TargetSpec) -> None:
        self.target = target

    def calibrated(self) -> None:
        """Nothing to give back: the reference server runs elsewhere."""

    async def sample(
        self, prompts: list[Prompt], spec: RequestSpec, concurrency: int, first: int = 0
    ) -> list[tuple[Prompt, Outcome]]:
        """One answer per prompt, `concurrency` in flight; `first` numbers the first one."""
        gate = asyncio.Semaphore(concurrency)
        async with make_session() as session:
            client = await connect(session, self.target)

            async def one(index: int, prompt: Prompt) -> tuple[Prompt, Outcome]:
                async with gate:
                    request_id = f"calibration-{first + index}"
                    return prompt, await client.generate(prompt, spec, request_id)

            return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts))))
