"""Pure statistics over counts and time-ordered 0/1 sequences: rates, comparisons, power,
clustering, sequential stopping and pre-registered plans. No I/O except plan TOML files.

Modules: `rates` (exact CIs), `compare` (two-arm tests and the verdict choice), `power`
(sample sizes), `clustering` (burst detection, design effect), `sequential` (group-sequential
boundaries), `plan` (pre-registration and applying its decision rule).
"""
