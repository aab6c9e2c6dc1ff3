"""Configuration search: from a clean and a failing configuration to the knobs the failure needs.

`load_search` reads a search file; `run_search` soaks its probes as campaign blocks (guarded,
stored, resumable); `search.plan` simulates a search's cost and error rates before it starts.
"""

from soakgate.search.model import Search, SearchSettings, load_search
from soakgate.search.runner import SearchResult, run_search
from soakgate.search.walk import Probe, Walked

__all__ = [
    "Probe", "Search", "SearchResult", "SearchSettings", "Walked", "load_search", "run_search",
]  # fmt: skip
