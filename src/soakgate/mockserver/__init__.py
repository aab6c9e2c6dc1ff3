"""Fault-injecting OpenAI-compatible mock server: the clean control and the positive control.

`MockConfig` holds every knob; `MockProcess` runs one as a subprocess on loopback; `serve`
runs one in the current event loop. Importing this package does not import aiohttp.
"""

from soakgate.mockserver.config import MockConfig
from soakgate.mockserver.process import MockProcess
from soakgate.mockserver.serve import READY_PREFIX, run_server, serve

__all__ = ["READY_PREFIX", "MockConfig", "MockProcess", "run_server", "serve"]
