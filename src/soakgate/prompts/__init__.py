"""Prompts: the built-in varied set, user JSONL files, and how they are assigned to requests."""

from soakgate.prompts.builtin import builtin_prompts
from soakgate.prompts.source import Prompt, PromptPicker, Structure, load_prompts

__all__ = ["Prompt", "PromptPicker", "Structure", "builtin_prompts", "load_prompts"]
