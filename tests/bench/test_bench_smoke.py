"""Each bench script runs at a tiny size, exits 0 and prints its figures' labels (no rot)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_bench(script: str, *args: str, timeout_s: float = 120) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=BENCH.parent,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_bench_detectors_prints_rates_and_the_char_run_verdict() -> None:
    out = run_bench("bench_detectors.py", "--size-mb", "0.01", "--min-seconds", "0.005")
    for label in ("realistic prose", "one char '!' x size", "MB/s per core", "char_run slowest"):
        assert label in out
    assert "us CPU per generation" in out


def test_bench_store_prints_write_rates_and_a_kill_window() -> None:
    out = run_bench("bench_store.py", "--generations", "300", "--kills", "1", "--concurrency", "8")
    assert "generations/s" in out and "bytes/generation" in out
    assert "loss window over 1 kills: max" in out
    assert "None through its adapter:" in out and "bound by sqlite3 itself:" in out


def test_bench_longrun_prints_rss_checkpoints_and_db_bytes() -> None:
    out = run_bench("bench_longrun.py", "--generations", "200", "--concurrency", "8")
    assert "RSS at        200 generations" in out
    assert "bytes per generation" in out


@pytest.mark.slow
def test_bench_client_prints_cpu_per_request_for_soakgate_the_bare_loop_and_h2load() -> None:
    # h2load (Debian nghttp2-client, installed by .ci/run) is the C floor beside the two
    # soakgate-before: the same client from another checkout (here this one), in the same run
    clients = ["soakgate", "soakgate-before", "aiohttp",
               *(["h2load"] if shutil.which("h2load") else [])]  # fmt: skip
    out = run_bench(
        "bench_client.py", "--seconds", "1", "--warmup", "0.2", "--clients", ",".join(clients),
        "--modes", "nostream", "--concurrency", "8", "--before", str(BENCH.parent),
    )  # fmt: skip
    assert "CPU-ms/req" in out and "in-flight" in out
    rows = [row for row in map(str.split, out.splitlines()) if row and row[0] in clients]
    assert [row[0] for row in rows] == clients
    assert all(float(row[1]) > 0 for row in rows)
    if "h2load" in clients:  # each client's cost over h2load's, round by round (the acceptance's)
        ratios = [line for line in out.splitlines() if "over h2load's in the same round" in line]
        assert [line.split(":")[0] for line in ratios] == clients[:-1]
        assert all(float(line.split("median ")[1].split("x")[0]) > 0 for line in ratios)


def test_bench_ab_prints_cpu_per_request_for_each_tree() -> None:
    out = run_bench(
        "bench_ab.py", "--tree", "a=.", "--tree", "b=.", "--rounds", "1", "--requests", "150",
        "--concurrency", "4",
    )  # fmt: skip
    rows = [line.split() for line in out.splitlines() if line.startswith(("a ", "b "))]
    assert [row[0] for row in rows] == ["a", "b"]
    assert all(float(row[1]) > 0 for row in rows)


def test_bench_ab_refuses_a_tree_that_is_not_a_checkout(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_ab.py"), "--tree", f"x={tmp_path}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "NAME=PATH of a soakgate checkout" in done.stderr


def test_bench_own_cost_prints_cpu_per_request() -> None:
    out = run_bench("bench_own_cost.py", "--requests", "300")
    assert "CPU per request over 300 requests" in out


def test_bench_audit_prints_the_scan_time_and_finds_every_op() -> None:
    out = run_bench("bench_audit.py", "--files", "50", "--repeat", "1")
    assert "ops: 12 (expected 12)" in out and "audit time (s): min" in out
    macros = run_bench("bench_audit.py", "--files", "50", "--repeat", "1", "--macros")
    assert "ops: 12 (expected 12)" in macros


def test_bench_audit_real_audits_whole_sdists_and_says_where_the_time_goes(
    tmp_path: Path,
) -> None:
    """`--real` over a cache holding two small "sdists" (fixture trees as archives)."""
    import tarfile

    fixtures = BENCH.parent / "tests" / "audit" / "fixtures" / "patterns"
    (tmp_path / "sdists").mkdir()
    for name in ("p12_which_body", "p13_names_and_views"):
        with tarfile.open(tmp_path / "sdists" / f"{name}-1.0.tar.gz", "w:gz") as tar:
            tar.add(fixtures / name, arcname=f"{name}-1.0")
    out = run_bench("bench_audit.py", "--real", "--cache", str(tmp_path), "--profile", "5")
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    assert rows["p12_which_body-1.0"][:3] == ["7", "7", "2"], out  # files, parsed, ops
    assert rows["p13_names_and_views-1.0"][2] == "2" and "all" in rows, out
    assert "where the time goes" in out and "tottime" in out


def test_bench_audit_real_without_sdists_says_so(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_audit.py"), "--real", "--cache", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "no sdists in" in done.stdout


def test_bench_audit_accuracy_without_its_corpus_says_so(tmp_path: Path) -> None:
    (tmp_path / "somelib" / "truth").mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_audit_accuracy.py"), "--corpus", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    output = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 2 and len(output) == 1 and "somelib" in output[0], output


def test_bench_calibration_prints_false_alarms_power_and_the_block_oracle() -> None:
    out = run_bench("bench_calibration.py", "--quick", "--processes", "reset-2000", "--jobs", "1")
    for label in (
        "one run per arm, 13,000 requests per arm",
        "one run per arm, 40,000 requests per arm",
        "8 replicate blocks per arm of 5,000 requests",
        "oracle z",
        "run --plan --until-verdict",
        "indeterminate",
    ):
        assert label in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("reset-2000")]
    assert len(rows) >= 4 and all("±" in row for row in rows[1:])


def test_bench_calibration_dense_prints_each_cell_with_the_episode_share() -> None:
    out = run_bench("bench_calibration.py", "--dense", "--reps", "4", "--processes",
                    "independent,reset-2000", "--jobs", "1")  # fmt: skip
    for label in ("2,000 requests per arm, rate 2%", "5,000 requests per arm, rate 2%",
                  "2,000 requests per arm, rate 10%", "[decided on episodes]"):  # fmt: skip
        assert label in out
    rows = [
        line for line in out.splitlines() if line.strip().startswith("reset-2000") and "±" in line
    ]
    assert len(rows) == 3 and all(row.count("±") == 5 and row.count("[") == 3 for row in rows)


def test_bench_drift_window_prints_how_far_apart_drifting_servers_are() -> None:
    out = run_bench("bench_drift_window.py", "--reps", "4", "--ratio-reps", "200")
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("drift")]
    assert [row[:2] for row in rows] == [
        ["drift", "13,000"], ["drift", "40,000"], ["drift-strong", "13,000"],
        ["drift-strong", "40,000"],
    ]  # fmt: skip
    for row in rows:
        beyond_12, beyond_15 = float(row[2]), float(row[3])
        assert 0.0 <= beyond_15 <= beyond_12 <= 100.0 and row[5] == "±"
    assert float(rows[3][2]) > float(rows[0][2])  # the stronger, longer drift is further apart


def test_bench_report_prints_every_command_the_html_size_and_the_floor() -> None:
    out = run_bench("bench_report.py", "--sizes", "1000", timeout_s=240)
    for label in ("report ", "report --html", "compare ", "export parquet", "HTML size"):
        assert label in out, out
    assert "x the floor" in out or "sqlite3 command line not found" in out
    assert "load average" in out


@pytest.mark.slow
def test_bench_capacity_prints_cpu_per_request_in_flight_and_memory_for_each_shape() -> None:
    out = run_bench(
        "bench_capacity.py", "--shapes", "2x4,3x2", "--mocks", "2", "--seconds", "2",
        "--warmup", "0.5", "--max-tokens", "16",
    )  # fmt: skip
    assert "CPU-ms/req" in out and "in-flight" in out and "load average" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("2x4 ", "3x2 "))]
    assert [row[0] for row in rows] == ["2x4", "3x2"], out
    for shape, mocks, asked, in_flight, lowest, rate, cpu, spread, client, rss, *rest in rows:
        mock_max, mock_total, stored, errors = rest
        assert int(mocks) == 2 and int(asked) == {"2x4": 8, "3x2": 6}[shape]
        assert [float(x) for x in spread.split("-")] == [float(cpu)] * 2  # one round
        assert 0 < float(in_flight) <= int(asked) and 0 <= int(lowest) <= float(in_flight)
        assert float(rate) > 0 and 0 < float(cpu) < 1000 and float(client.rstrip("%")) > 0
        assert float(rss) > 10 and float(mock_max.rstrip("%")) <= float(mock_total.rstrip("%"))
        assert int(stored) >= float(rate) and int(errors) == 0
    assert out.count("one core of client completes at most") == 2


def test_bench_reference_prints_the_scoring_cost_and_the_reference_load() -> None:
    out = run_bench("bench_reference.py", "--requests", "60", "--rounds", "1", "--concurrency",
                    "4", "--alternatives", "0", "20", timeout_s=300)  # fmt: skip
    for name in ("scored-a0", "scored-a20"):  # each value its own scored pair, side by side
        assert f"client CPU of scoring, {name}:" in out and "µs per generation" in out
        assert f"round 1, {name}: plain" in out
    assert "tokens sent per scored generation" in out and out.count("60 rows scored") == 2


def test_bench_reference_sharpness_reenacts_the_fluent_control_and_scores_it() -> None:
    pytest.importorskip("transformers")
    out = run_bench("bench_reference_sharpness.py", "--top-p", "0.95", "--calibration", "20",
                    "--rates", "0.05", "--holdout", "10", "--generations", "30",
                    timeout_s=300)  # fmt: skip
    (control,) = [line for line in out.splitlines() if line.startswith("control:")]
    corrupted = int(control.split()[1])
    assert 0 < corrupted < 30, out  # the control's rule hits some generations, not all
    rows = [line for line in out.splitlines() if line.startswith("| 0.05 |")]
    assert len(rows) == 2 and all(f"/{corrupted} = " in r and "/10 = " in r for r in rows), out


def test_bench_reference_typical_scores_a_real_control_with_both_scores() -> None:
    pytest.importorskip("transformers")
    out = run_bench("bench_reference_typical.py", "--top-p", "1.0", "--calibration", "49",
                    "--rate", "0.08", "--holdout", "128", "--generations", "8", "--controls",
                    "lost-mlp", "--batch", "8", "--max-tokens", "16", "--unit-reps", "5",
                    "--unit-size", "120", timeout_s=600)  # fmt: skip
    assert "typicality threshold" in out and "calibration samples flagged by either" in out
    lines = out.splitlines()
    rows = {line.split()[0]: line for line in lines if line.startswith("  ") and "% [" in line}
    assert rows["clean"].count("% [") == 3, out  # three rules, no likelihood ratio for clean
    assert rows["lost-mlp"].count("% [") == 4, out  # and the control's likelihood ratio
    # unit level: each row judged by both scores, as shares of 5 units with their MC error
    assert "unit level: 5 units of 120 scored generations" in out
    units = [line for line in lines[lines.index(next(x for x in lines if "unit level" in x)):]
             if line.startswith(("  clean holdout", "  lost-mlp"))]  # fmt: skip
    assert len(units) == 2 and all(line.count("%") == 2 for line in units), out


def test_bench_calibration_speed_prints_each_configuration() -> None:
    pytest.importorskip("transformers")
    out = run_bench("bench_calibration_speed.py", "--samples", "2", "--threads", "1", "2",
                    "--batch", "2", "--busy", "0", "1", "--max-tokens", "4", "--top-p", "1.0",
                    "0.9", timeout_s=300)  # fmt: skip
    lines = [line for line in out.splitlines() if line.startswith("busy ")]
    assert len(lines) == 16 and all("samples/s; 5,000 samples" in line for line in lines), out
    assert {line.split(",")[0] for line in lines} == {"busy 0", "busy 1"}
    assert {line.split(",")[4].split(":")[0].strip() for line in lines} == {"shipped", "generate"}


def test_bench_latency_prints_level_power_and_coverage_with_errors() -> None:
    out = run_bench("bench_latency.py", "--reps", "40", "--n", "200")
    lines = [line for line in out.splitlines() if "% ± " in line]
    assert len(lines) == 8, out
    assert sum(line.startswith("false alarms") for line in lines) == 3
    assert sum("covers" in line for line in lines) == 3


def test_bench_synthetic_prompts_prints_each_distributions_length_error() -> None:
    model = BENCH.parent.parent / "shared/models/tiny-llama-8k"
    if not (model / "tokenizer.json").exists():
        pytest.skip("no shared model")
    out = run_bench("bench_synthetic_prompts.py", "--count", "10")
    rows = [line for line in out.splitlines() if line.startswith("| ") and "%" in line]
    assert len(rows) == 5 and all(line.count("|") == 5 for line in rows), out


def test_bench_replay_prints_each_process_with_new_and_old_wrong_causes() -> None:
    out = run_bench("bench_replay.py", "--sessions", "5")
    assert out.count("sessions with a wrong cause: new") == 6
    for name in ("independent 2%", "input: 1 prompt", "load: 30%", "state: requests 6"):
        assert name in out


def test_bench_import_prints_the_peak_memory_of_an_import() -> None:
    out = run_bench("bench_import.py", "--rows", "300")
    assert "sidecar: 300 generations" in out
    assert "import (this checkout): peak RSS" in out and "exit 0, 300 rows stored" in out


def test_bench_startup_prints_the_cpu_to_the_first_request_of_each_configuration() -> None:
    out = run_bench("bench_startup.py", "--rounds", "1", "--requests", "2", timeout_s=300)
    rows = [line for line in out.splitlines() if "to the first request" in line]
    assert len(rows) == 3 and all(" s (range " in row and "in all" in row for row in rows), out


def test_bench_paired_prints_each_process_with_and_without_the_clock() -> None:
    out = run_bench(
        "bench_paired.py", "--reps", "4", "--jobs", "1", "--processes", "independent,drift-shared"
    )
    for length in ("13,000", "40,000"):
        assert f"side by side, {length} requests per arm, 4 pairs per cell, DIFFER %" in out
    assert "with pairing" in out and "without" in out and "decided paired" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("drift-shared")]
    assert len(rows) == 2 and all(len(row) == 20 for row in rows)  # name, 6 rates "x ± y", "|"


def test_bench_paired_runs_the_held_out_processes_on_their_own_clocks() -> None:
    out = run_bench("bench_paired.py", "--reps", "3", "--jobs", "1", "--held-out")
    assert "DIFFER %, each arm on its own jittered clock" in out
    names = ("shared-spikes", "shared-prompts", "lagged-drift", "drift+resets", "cross-exciting",
             "episodes+drift", "shared-period")  # fmt: skip
    for name in names:
        rows = [line.split() for line in out.splitlines() if line.strip().startswith(name + " ")]
        assert len(rows) == 2 and all(len(row) == 20 for row in rows), (name, out)


def test_bench_reference_tokens_and_soak_flag_a_control_before_and_after(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    run_bench("bench_reference_tokens.py", "--top-p", "1.0", "--calibration", "40", "--holdout",
              "8", "--generations", "4", "--controls", "lost-mlp", "--held-out", "wrong-norm",
              "--held-out-2", "lost-head", "kv-int4", "logit-sharp", "resid-noise", "--batch", "8",
              "--max-tokens", "8", "--ratios", "--out", str(tmp_path), timeout_s=600)  # fmt: skip
    assert {p.name for p in tmp_path.iterdir()} == {
        f"{kind}-p1.0-{part}.npz"
        for kind in ("tuning", "heldout", "heldout2", "heldout3", "heldout4", "heldout5")
        for part in ("ref", "soak")
    }  # fmt: skip
    import numpy as np

    third = ("rope-gap", "swapped-heads", "hardswish")
    fourth = ("stale-kv", "mlp-half", "softcap")
    fifth = ("embed-int4", "vocab-bias", "norm-ripple", "q-scale-late")
    for stem, names, unrated in (("heldout3", third, "flaky-attn"),
                                 ("heldout4", fourth, "repeat-penalty"),
                                 ("heldout5", fifth[:3], None)):  # fmt: skip
        with np.load(tmp_path / f"{stem}-p1.0-ref.npz") as stored:
            # each deterministic control of the set changes the model: its generations'
            # likelihood ratio to the clean model is not zero (a hook that never fires would be)
            for name in names:
                assert np.abs(stored[f"{name}/llr-{name}"]).max() > 1e-3, name
            if unrated:
                assert f"{unrated}/llr-{unrated}" not in stored.files  # no ratio for these
    with np.load(tmp_path / "tuning-p1.0-soak.npz") as stored:
        # the normal scores: a token's nv is its position's variance (in [0, 1]); nz finite
        # (a slice of mass 1e-300 would score ~37)
        nv, nz = stored["calibration/nv"], stored["calibration/nz"]
        assert nv.min() >= 0.0 and nv.max() <= 1.001 and np.isfinite(nz).all()
        assert np.abs(nz).max() <= 40.0
    # at 0.1 on 40 samples every rule has a common rank ((E + 3) / 41 <= 0.1 for three scores)
    out = run_bench("bench_reference_soak.py", str(tmp_path), "--rate", "0.1", "--unit-reps",
                    "3", "--unit-size", "20")  # fmt: skip
    assert "after: worst token >" in out and "soak z >" in out, out
    rows = {line.split()[0]: line for line in out.splitlines() if line.count("% [") >= 2}
    second = {"lost-head", "kv-int4", "logit-sharp", "resid-noise"}
    unrated = ("flaky-attn", "repeat-penalty")
    assert set(rows) == {
        "clean", "lost-mlp", "wrong-norm", *second, *third, *fourth, *fifth, *unrated
    }  # fmt: skip
    assert "held out" in rows["wrong-norm"] and "tuning" in rows["lost-mlp"], out
    assert all("held out 2" in rows[name] for name in second), out
    assert all("held out 3" in rows[name] for name in (*third, "flaky-attn")), out
    assert all("held out 4" in rows[name] for name in (*fourth, "repeat-penalty")), out
    assert all("held out 5" in rows[name] for name in fifth), out
    # four rules per row (before, after, the candidate, normal), and the held-out controls'
    # likelihood ratio (--ratios): the ceiling beside them
    for name in ("wrong-norm", *second, *third, *fourth, *fifth):
        assert rows[name].count("% [") == 5 and "likelihood ratio" in rows[name], out
    assert all(rows[name].count("% [") == 4 for name in unrated), out
    assert "normal: thresholds" in out and "normal z)" in out, out
    assert rows["clean"].count("% [") == 4, out  # the clean holdout judged by every rule
    assert "candidate: worst token >" in out and "token z > inf" in out, out  # no nucleus here
    assert "unit level: 3 units of 20 scored generations" in out, out
    units = [line for line in out.splitlines() if line.count(" ± ") == 3]
    assert len(units) == 19 and "SHIFTED: soak z (shipped)" in out, out
    only = run_bench("bench_reference_soak.py", str(tmp_path), "--rate", "0.05", "--unit-reps",
                     "2", "--unit-size", "20", "--groups", "held out 3")  # fmt: skip
    kept = {line.split()[0] for line in only.splitlines() if line.count("% [") >= 2}
    assert kept == {"clean", *third, "flaky-attn"}, only
    assert "us per generation without the soak values" in out, out


def test_bench_crosstalk_prints_found_leaks_per_prompt_set() -> None:
    out = run_bench("bench_crosstalk.py", "--skip-real", "--mock-requests", "60", timeout_s=600)
    for name in ("builtin", "system", "synthetic", "memorized"):
        assert f"  {name}" in out
    assert out.count("found with the right source") == 8 and "flagged clean rows" in out


def test_bench_crosstalk_prints_the_checks_cost_per_answer_both_ways() -> None:
    out = run_bench("bench_crosstalk.py", "--cost", timeout_s=600)
    lines = [line for line in out.splitlines() if "every span hashed" in line]
    assert len(lines) == 3 and all(" ratio " in line for line in lines), out


def test_bench_crosstalk_prints_the_checks_cost_per_request_inside_a_soak() -> None:
    out = run_bench("bench_crosstalk.py", "--cost-in-soak", "300", timeout_s=600)
    line = next(line for line in out.splitlines() if line.startswith("cost in a soak of 300"))
    assert "us per request" in line and "the check" in line and "% of it" in line, out
    calls = int(line.split("(")[1].split()[0].replace(",", ""))
    assert calls >= 600  # every request sent and every answer came into the check


def test_bench_overwhelming_prints_the_gate_before_and_after_the_not_cleared_rule() -> None:
    out = run_bench("bench_overwhelming.py", "--quick", "--jobs", "1", "--ratio", "3")
    assert "differ (before)" in out and "not cleared" in out and "gate fails now" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("13,000")]
    assert {(row[2], row[3]) for row in rows} == {
        (ratio, process) for ratio in ("1", "3") for process in ("independent", "reset-2000")
    }


def test_bench_gate_prints_false_alarms_and_power_per_process() -> None:
    out = run_bench("bench_gate.py", "--quick", "--jobs", "1")
    assert "500 requests per arm" in out and "5,000 requests per arm" in out
    assert "identical, no crashes" in out and "broken (power)" in out
    assert out.count("independent ") >= 2 and out.count("self-exciting ") >= 2
