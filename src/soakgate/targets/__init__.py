"""Clients for the servers under test: OpenAI-compatible completions and chat, streaming or not."""

from soakgate.targets.client import OpenAIClient, connect, discover_model
from soakgate.targets.spec import Outcome, RequestSpec, TargetSpec

__all__ = ["OpenAIClient", "Outcome", "RequestSpec", "TargetSpec", "connect", "discover_model"]
