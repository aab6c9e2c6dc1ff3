"""Fault-injecting OpenAI-compatible mock server: the clean control and the positive control.

`MockConfig` holds every knob; `MockProcess` runs one as a subprocess on loopback;
`mockserver.serve.serve` runs one in the current event loop. Importing this package imports only
the configuration (the CLI builds every command's options from it): the process, and aiohttp
with the server, load when first named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from soakgate.mockserver.config import MockConfig

if TYPE_CHECKING:
    from soakgate.mockserver.process import MockProcess

__all__ = ["MockConfig", "MockProcess"]


def __getattr__(name: str) -> Any:
    if name == "MockProcess":
        from soakgate.mockserver.process import MockProcess

        return MockProcess
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
