"""Pure statistics over counts and time-ordered 0/1 sequences: rates, comparisons, power,
clustering, sequential stopping and pre-registered plans. No I/O except plan TOML files.

Modules: `rates` (exact CIs), `verdict` (the verdict and the design it rests on; the library
entry point `compare_outcomes`), `compare` (every figure of a two-arm comparison), `naive` and
`robust` (the tests), `dependence` (long-range correlation and design effect), `clustering`
(descriptive burst tests), `power` and `planning` (sample sizes and block designs),
`sequential` (group-sequential boundaries), `plan` and `decision` (pre-registration).
"""

from soakgate.stats.verdict import Verdict, compare_outcomes

__all__ = ["Verdict", "compare_outcomes"]
