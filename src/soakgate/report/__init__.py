"""Analysis and reports: a database read into units, tables, comparisons and the HTML report.

Modules: `model` (units, aggregates, clustering per target), `checks` (methodology warnings,
plan registration), `comparisons` (arm resolution, unit match, plans), `tables` and
`compare_text` (text/JSON/CSV/Markdown), `figures` and `html` (the HTML report), `export`,
`probes` and `probe_tables` (differential check, sweeps, spec-decode watch, sequential looks).
"""
