"""The speculative-decoding watch reads real /metrics and flags an acceptance collapse."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from soakgate.load import LoadSpec
from soakgate.load.runner import SoakConfig, run_soak
from soakgate.mockserver.process import MockProcess
from soakgate.probes.soak import StandardProbes
from soakgate.probes.specwatch import Window, collapse_reason, counters, sample_of
from soakgate.store import open_store
from soakgate.targets import RequestSpec, TargetSpec

METRICS = """# HELP vllm:spec_decode_num_accepted_tokens_total Accepted.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 9.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 100.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0"} 500.0
"""


def test_counters_sum_label_sets() -> None:
    sample = sample_of(METRICS, at=1.0)
    assert sample is not None and (sample.accepted, sample.drafted) == (39.0, 100.0)
    assert counters("# TYPE x counter\nx_total 2\n") == {"x": 2.0}
    assert sample_of("# TYPE x counter\nx_total 2\n", at=1.0) is None


def test_collapse_is_relative_to_the_best_window() -> None:
    good = Window(0, 1, 0.39, 1000.0)
    assert collapse_reason([good], Window(1, 2, 0.35, 950.0)) is None
    assert "acceptance" in (collapse_reason([good], Window(1, 2, 0.10, 900.0)) or "")
    assert "throughput" in (collapse_reason([good], Window(1, 2, 0.38, 140.0)) or "")


def soak_levels(mock: MockProcess, db: Path, concurrency: int) -> list[dict[str, object]]:
    config = SoakConfig(
        probes=StandardProbes(),
        targets=[TargetSpec.parse(mock.url)], label=f"c{concurrency}",
        request=RequestSpec(max_tokens=64), load=LoadSpec(concurrency, duration_s=2.5), db=db,
        metrics_interval_s=0.5,
    )  # fmt: skip
    run_id = run_soak(config).run.run_id
    store = open_store(db)
    events = [{"kind": e.kind, **e.data} for e in store.events(run_id) if "spec" in e.kind]
    store.close()
    return events


def test_watch_records_acceptance_per_level_and_flags_the_fall(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--spec-decode", "--spec-collapse-at", "12", "--tokens-per-s", "400")
    low = soak_levels(mock, tmp_path / "s.sqlite", 2)
    high = soak_levels(mock, tmp_path / "s.sqlite", 24)
    low_rates = [e["acceptance"] for e in low if e["kind"] == "spec_decode" and e["acceptance"]]
    high_rates = [e["acceptance"] for e in high if e["kind"] == "spec_decode" and e["acceptance"]]
    assert low_rates and min(low_rates) > 0.3  # configured 0.39 below the collapse point
    assert high_rates and min(high_rates) < 0.15  # configured 0.10 at 24 in flight
    assert not any(e["kind"] == "spec_decode_collapse" for e in low)


def test_absent_counters_are_noted_once(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    events = soak_levels(start_mock(), tmp_path / "s.sqlite", 2)
    assert [e["kind"] for e in events] == ["spec_decode_absent"]


def test_a_sustained_fall_is_flagged_but_a_single_low_window_is_not() -> None:
    from soakgate.probes.specwatch import Sample, SpecDecodeWatch

    records: list[tuple[str, dict[str, object]]] = []
    watch = SpecDecodeWatch("u", lambda k, d: records.append((k, d)))
    accepted = drafted = 0.0
    for at, rate in enumerate([0.40, 0.40, 0.10, 0.40, 0.10, 0.10, 0.40], start=1):
        accepted, drafted = accepted + 100 * rate, drafted + 100
        assert watch.observe(Sample(at, accepted, drafted, at * 50))
    collapses = [d for k, d in records if k == "spec_decode_collapse"]
    assert len(collapses) == 1 and "acceptance 10%" in str(collapses[0]["reason"])


def test_the_server_load_is_recorded_on_every_scrape_beside_the_absent_spec_counters(
    start_mock: Callable[..., MockProcess], tmp_path: Path
) -> None:
    mock = start_mock("--tokens-per-s", "200")
    config = SoakConfig(
        probes=StandardProbes(),
        targets=[TargetSpec.parse(mock.url)], label="load", request=RequestSpec(max_tokens=64),
        load=LoadSpec(6, duration_s=2.0), db=tmp_path / "l.sqlite", metrics_interval_s=0.25,
    )  # fmt: skip
    run_id = run_soak(config).run.run_id
    store = open_store(config.db)
    events = store.events(run_id)
    store.close()
    kinds = [e.kind for e in events]
    assert kinds.count("spec_decode_absent") == 1 and "spec_decode" not in kinds
    loads = [e.data for e in events if e.kind == "server_load"]
    assert len(loads) >= 4, kinds
    assert max(float(d["running"]) for d in loads) == 6.0  # the mock's own in-flight gauge
    assert all(set(d) == {"running", "waiting", "kv_cache_usage", "process_start", "at"}
               for d in loads)  # fmt: skip
    assert all(float(d["process_start"]) < float(d["at"]) for d in loads)
