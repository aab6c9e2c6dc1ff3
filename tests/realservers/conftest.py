"""Real servers on loopback: the shared model converted to GGUF once, served by llama.cpp."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from soakgate.servers.llamacpp import LlamaCppProcess
from tests.realservers.helpers import cached_gguf, model_dir, skip_reason


def _skip_or_fail() -> None:
    """Skip with the reason; under SOAKGATE_REQUIRE_LLAMACPP=1 (CI) a missing server fails."""
    reason = skip_reason()
    if reason is None:
        return
    if os.environ.get("SOAKGATE_REQUIRE_LLAMACPP") == "1":
        pytest.fail(f"llama.cpp tests required but cannot run: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def tiny_gguf(request: pytest.FixtureRequest) -> Path:
    """The shared model as GGUF, cached across sessions by its files' sizes and mtimes."""
    _skip_or_fail()
    cache_plugin = getattr(request.config, "cache", None)
    if cache_plugin is not None:
        cache = Path(cache_plugin.mkdir("soakgate-gguf"))
    else:  # -p no:cacheprovider
        cache = Path(tempfile.gettempdir()) / "soakgate-gguf"
        cache.mkdir(exist_ok=True)
    return cached_gguf(model_dir(), cache)


@pytest.fixture(scope="session")
def llamacpp(
    tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaCppProcess]:
    """llama.cpp's server (xllamacpp) on 127.0.0.1, a free port, 8 slots; stopped at the end."""
    logs = tmp_path_factory.mktemp("llamacpp")
    # one compute thread: on a busy 2-core machine llama.cpp's spinning thread pool with 2
    # threads ran 20x slower (14 vs 280 tok/s at concurrency 8)
    server = LlamaCppProcess(tiny_gguf, parallel=8, threads=1, log_dir=logs).start()
    print(f"\nllama.cpp ready at {server.url} in {server.start_s:.2f} s")
    yield server
    code = server.stop()
    assert code == 0, f"llama.cpp exited {code}: {server.log_tail()}"
