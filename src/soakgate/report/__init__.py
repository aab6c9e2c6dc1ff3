"""Analysis and reports: a database read into columns, analysed, rendered.

Data flows one way (tests/report/test_layers.py holds it there):
load (`load`: columns per (label, target, run), exemplar rows) -> analyse (`model`, `checks`,
`probes`, `comparisons`, `bins`, `analyze`: results, no I/O) -> render (`tables`,
`probe_tables`, `compare_text`, `verdicts`, `figures`, `html`) -> entry points (`api`,
`export`, `parquet`, `live`). `formatting` is a leaf any stage may use.
"""
