"""A built-in varied prompt set: topics crossed with task templates of different lengths.

Written for this project. The mix (prose, code, lists, tables, long and short prompts)
matters more than the wording: degeneration can depend on prompt length and content type.
"""

from __future__ import annotations

from functools import cache

from soakgate.prompts.source import Prompt

TOPICS = (
    "the Python garbage collector", "TCP congestion control", "SQLite's write-ahead log",
    "the Debian package manager", "Unicode normalisation", "hash tables", "B-trees",
    "the Linux page cache", "floating-point rounding", "HTTP/1.1 keep-alive",
    "regular expression engines", "the asyncio event loop", "UTF-8 encoding",
    "public-key cryptography", "CPU branch prediction", "copy-on-write file systems",
    "the PageRank algorithm", "merge sort", "Bloom filters", "DNS resolution",
    "virtual memory", "the GIL in CPython", "JSON parsing", "cron jobs",
    "git's object model", "the OpenAI chat completions API", "GPU memory bandwidth",
    "mixed-precision training", "attention in transformers", "KV caches in LLM serving",
)  # fmt: skip

TEMPLATES = (
    ("explain", "Explain {topic} to a new engineer in two paragraphs."),
    ("list", "List five facts about {topic}, one per line."),
    ("code", "Write a short Python function that demonstrates {topic}, with a docstring."),
    ("table", "Make a markdown table with three rows comparing aspects of {topic}."),
    ("faq", "Write three questions a student might ask about {topic}, each with an answer."),
    ("story", "Tell a short story about an engineer debugging a problem with {topic}."),
    ("summary", "Summarise {topic} in one sentence."),
    (
        "long",
        "You are writing internal documentation. The reader knows programming but not "
        "{topic}. Start with the problem it solves, then describe how it works step by "
        "step, give one concrete example with numbers, list two common mistakes, and end "
        "with a short checklist. Use headings and keep the tone plain.",
    ),
    ("continue", "The most surprising thing about {topic} is"),
    ("review", "Review this claim and correct it if needed: '{topic} is never a bottleneck.'"),
)


@cache
def builtin_prompts() -> tuple[Prompt, ...]:
    """The built-in set: every template for every topic (300 prompts), in a fixed order."""
    return tuple(
        Prompt(f"builtin-{kind}-{index:02d}", template.format(topic=topic))
        for index, topic in enumerate(TOPICS)
        for kind, template in TEMPLATES
    )
