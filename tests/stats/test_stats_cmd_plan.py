"""The `soakgate plan` command: every power it prints is the power the verdict delivers (soaked
here at full length and judged as `compare` judges it), the designs it weighs and the one it
recommends, the written plan, and one-line errors."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from bench.processes import by_name, sequential_verdict, simulate, simulate_pair
from tests.stats.plan_output import Printed, designs, soak

from soakgate.cli.main import main
from soakgate.stats.plan import plan_sha256, read_plan

TOLERANCE = 0.03  # the bar: delivered within 3 points of the power printed


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["plan", *argv]) == 0
    return capsys.readouterr().out


def _within(printed: Printed, got: tuple[float, float], *, both_sides: bool = True) -> None:
    delivered, error = got
    slack = TOLERANCE + 2.0 * math.hypot(error, printed.error)
    assert delivered >= printed.power - slack, (printed, delivered)
    if both_sides:
        assert delivered <= printed.power + slack, (printed, delivered)


def test_every_power_printed_is_delivered(capsys: pytest.CaptureFixture[str]) -> None:
    # The issue: the one-run n printed for 1% vs 2% (2,842) delivered 63 +- 2%, not 80%.
    out = _plan(capsys, "--baseline-rate", "0.01", "--ratio", "2")
    found = {p.kind: p for p in designs(out)}
    assert set(found) == {"one run", "replicate blocks"}
    for printed in found.values():
        assert printed.power >= 0.8 - printed.error
        _within(printed, soak(printed, by_name("independent"), 0.01, 2.0, 400, seed=26))


def test_power_for_a_given_n_is_the_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    # The issue: `plan --n 13000` printed the z test's 36.5%; the verdict delivers about 25%.
    out = _plan(capsys, "--baseline-rate", "0.002", "--ratio", "1.5", "--n", "13000")
    found = {p.kind: p for p in designs(out)}
    one = found["one run"]
    assert one.length == 13_000
    _within(one, soak(one, by_name("independent"), 0.002, 1.5, 400, seed=27))
    blocks = found["replicate blocks"]
    assert blocks.blocks * blocks.length <= 13_000
    _within(blocks, soak(blocks, by_name("independent"), 0.002, 1.5, 400, seed=28))
    # the same budget as restarted blocks answers for the configurations, with more power
    assert blocks.power > one.power
    assert "recommended: replicate blocks" in out and f"--blocks {blocks.blocks}" in out


def test_design_effect_plans_for_short_bursts(capsys: pytest.CaptureFixture[str]) -> None:
    out = _plan(capsys, "--baseline-rate", "0.01", "--ratio", "2", "--design-effect", "5")
    assert "short bursts (design effect 5" in out
    for printed in designs(out):
        _within(printed, soak(printed, by_name("batch-5"), 0.01, 2.0, 300, seed=29))


@pytest.mark.slow
def test_sequential_plan_keeps_its_promise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The issue: n max sized for a z test, judged with a t and a dependence check: 73.9% for
    # a promised 80%, and a mean n 0.87 of the fixed design.
    path = tmp_path / "plan.toml"
    out = _plan(
        capsys, "--baseline-rate", "0.01", "--ratio", "2", "--sequential", "--looks", "5",
        "--write", str(path), "--arms", "eager", "graph", "--hypothesis", "graph is worse",
    )  # fmt: skip
    found = {p.kind: p for p in designs(out)}
    looks, fixed = found["looks"], found["one run"]
    plan = read_plan(path)
    assert plan.sequential is not None and plan.sequential.n_max_per_arm == looks.length
    rng = np.random.default_rng(30)
    hits, used = 0, 0
    for _ in range(300):
        (a,), (b,) = simulate_pair(by_name("independent"), rng, 1, looks.length, 0.01, 0.02)
        verdict, n = sequential_verdict(plan, a, b)  # the monitor's own looks
        hits += verdict == "differ"
        used += n
    _within(looks, (hits / 300, math.sqrt(hits / 300 * (1 - hits / 300) / 300)))
    assert used / 300 <= 0.75 * fixed.length
    assert looks.mean_n <= 0.75 * fixed.length


def _pilot_db(tmp_path: Path, name: str, seed: int, length: int = 20_000) -> Path:
    from tests.report.synth import add_run

    from soakgate.store import open_store

    db = tmp_path / "pilot.sqlite"
    store = open_store(db)
    rng = np.random.default_rng(seed)
    for i, seq in enumerate(simulate(by_name(name), rng, 2, length, 0.002, True)):
        add_run(store, "eager", f"gpu{i}", list(seq), start=1.7e9 + i * 1e5)
    add_run(store, "other", "gpu0", list(rng.random(5000) < 0.01), start=1.8e9)
    store.close()
    return db


@pytest.mark.slow
def test_pilot_blocks_deliver_what_is_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The issue: `plan --pilot DB --label L --ratio 1.5 --blocks 8` promised 80% and delivered
    # 55-64% on clustered processes (44% here on resets every ~2,000 requests, fresh blocks).
    db = _pilot_db(tmp_path, "reset-2000", 12)
    out = _plan(capsys, "--pilot", str(db), "--label", "eager", "--ratio", "1.5", "--blocks", "8")
    assert "one run per arm: not sized from a pilot" in out
    found = designs(out)  # every design printed with a power, reaching 80% or not
    assert found and all(p.blocks == 8 for p in found)
    for printed in found:
        got = soak(printed, by_name("reset-2000"), 0.002, 1.5, 100, seed=31)
        _within(printed, got, both_sides=False)  # conservative is allowed: the pilot is small


def test_pilot_line_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _pilot_db(tmp_path, "independent", 13, length=6_000)
    out = _plan(capsys, "--pilot", str(db), "--label", "eager", "--ratio", "2", "--n", "60000")
    assert "pilot pilot.sqlite label eager: 2 run(s)" in out
    assert "rate against uptime" in out
    assert "80% sure of each" in out
    for extra, message in ((["--design-effect", "2"], "not both"),
                           (["--label", "nope"], "no label 'nope'")):  # fmt: skip
        assert main(["plan", "--pilot", str(db), "--ratio", "1.5", *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    assert main(["plan", "--label", "eager", "--ratio", "1.5"]) == 2
    assert "--label needs --pilot" in capsys.readouterr().err
    assert main(["plan", "--pilot", str(tmp_path / "absent.sqlite"), "--ratio", "1.5"]) == 2
    argv = ["plan", "--pilot", str(db), "--ratio", "2", "--write", str(tmp_path / "p.toml")]
    assert main([*argv, "--arms", "a", "b", "--hypothesis", "h"]) == 2
    assert "a block design: add --blocks" in capsys.readouterr().err


def test_a_budget_holds_the_warm_ups_so_designs_are_weighed_at_equal_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 26 item 6: `plan --n N` weighs the designs for the same requests. The warm-up design
    # soaked its warm-ups on top of N (148,800 per arm for a budget of 60,000 here) and was
    # compared, and recommended, as if it cost the same.
    db = _pilot_db(tmp_path, "uptime", 12)
    out = _plan(capsys, "--pilot", str(db), "--label", "eager", "--ratio", "1.5", "--n", "60000")
    soaked = {line.split(":")[0].strip(): int(m.group(1).replace(",", ""))
              for line in out.splitlines()
              if (m := re.search(r"\(([\d,]+) soaked per arm\)", line))}  # fmt: skip
    assert set(soaked) == {"blocks from a fresh start", "blocks after a warm-up"}, out
    assert all(n <= 60_000 for n in soaked.values()), out
    assert "after a warm-up of 11,100 (60,000 soaked per arm)" in out, out


def test_writes_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plan.toml"
    argv = ["plan", "--baseline-rate", "0.05", "--ratio", "3", "--write", str(path)]
    argv += ["--arms", "eager", "graph", "--hypothesis", "graph is worse"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    plan = read_plan(path)
    one = {p.kind: p for p in designs(out)}["one run"]
    assert plan.sequential is None and plan.n_per_arm == one.length
    assert plan_sha256(plan) in out


@pytest.mark.parametrize(
    "extra",
    [
        ["--baseline-rate", "0", "--ratio", "1.5"],
        ["--baseline-rate", "0.002", "--ratio", "-1"],
        ["--baseline-rate", "0.002", "--ratio", "1.5", "--power", "1.2"],
        ["--baseline-rate", "0.002", "--ratio", "1.5", "--write", "x.toml"],
        ["--baseline-rate", "0.002", "--ratio", "1.5", "--n", "0"],
        ["--baseline-rate", "0.002", "--ratio", "1.5", "--blocks", "2"],
    ],
)
def test_bad_input_is_one_line_exit_2(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("soakgate: error:") and err.count("\n") == 1


def test_matched_targets_only_when_asked(tmp_path: Path) -> None:
    argv = ["plan", "--baseline-rate", "0.05", "--ratio", "3", "--write", str(tmp_path / "p")]
    argv += ["--arms", "eager", "graph", "--hypothesis", "graph is worse"]
    assert main(argv) == 0
    assert read_plan(tmp_path / "p").matched_targets is False
    assert main([*argv, "--matched-targets"]) == 0
    assert read_plan(tmp_path / "p").matched_targets is True


def test_block_design_is_written_as_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.toml"
    argv = ["plan", "--baseline-rate", "0.01", "--ratio", "2", "--design-effect", "4"]
    argv += ["--blocks", "10", "--write", str(path), "--arms", "eager", "graph"]
    assert main([*argv, "--hypothesis", "graph is worse"]) == 0
    out = capsys.readouterr().out
    printed = {p.kind: p for p in designs(out)}["replicate blocks"]
    plan = read_plan(path)
    assert (plan.blocks, plan.requests_per_block) == (10, printed.length) and printed.blocks == 10
    assert plan.n_per_arm == 10 * printed.length and plan.warmup_requests is None


@pytest.mark.slow
def test_pilot_with_uptime_offers_a_warm_up_and_says_which_question(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Hazard 0.2% x (1 - exp(-uptime / 4,000)): blocks from a fresh start see less than half
    # the steady rate. The plan fits the rise, offers blocks after a warm-up, and says which
    # question each design answers; the plan it writes records the warm-up.
    db = _pilot_db(tmp_path, "uptime", 3, length=60_000)
    path = tmp_path / "plan.toml"
    out = _plan(
        capsys, "--pilot", str(db), "--label", "eager", "--ratio", "1.5", "--blocks", "8",
        "--write", str(path), "--arms", "eager", "graph", "--hypothesis", "graph is worse",
    )  # fmt: skip
    assert "rate against uptime" in out and "flat in uptime: p=0.00" in out
    found = {p.kind: p for p in designs(out)}
    warm = found["blocks after a warm-up"]
    assert warm.warmup >= 9_000  # the true 90% point of the rise
    assert "on a fresh server over its first" in out
    assert f"on a server after {warm.warmup:,} requests" in out
    assert "recommended: blocks after a warm-up" in out
    plan = read_plan(path)
    assert (plan.blocks, plan.requests_per_block, plan.warmup_requests) == (
        8, warm.length, warm.warmup,
    )  # fmt: skip
    assert f"counted after a warm-up of {warm.warmup} requests" in plan.decision_rule


def test_side_by_side_arms_are_sized_as_compare_pairs_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 26 item 6: `plan --side-by-side` sizes both arms soaked at the same time in one
    run, judged as `compare` judges the targets of one run (window by window where the
    pairing's checks allow); the power printed is delivered by full-length soaks of arms with
    their completion times, and `--write` writes that design's n. Without the flag, plan says
    the design exists."""
    plain = _plan(capsys, "--baseline-rate", "0.01", "--ratio", "2")
    assert "--side-by-side sizes that design too" in plain
    assert "side by side in one run:" not in plain
    path = tmp_path / "plan.toml"
    out = _plan(capsys, "--baseline-rate", "0.01", "--ratio", "2", "--side-by-side",
                "--write", str(path), "--arms", "eager", "compiled", "--hypothesis", "h")  # fmt: skip
    found = {p.kind: p for p in designs(out)}
    assert set(found) == {"one run", "side by side", "replicate blocks"}
    paired = found["side by side"]
    assert paired.power >= 0.8 - paired.error
    assert "soaked at the same time" in out and "--side-by-side" not in out
    _within(paired, soak(paired, by_name("independent"), 0.01, 2.0, 400, seed=29))
    assert read_plan(path).n_per_arm == paired.length
    budget = _plan(capsys, "--baseline-rate", "0.01", "--ratio", "2", "--n", "2400",
                   "--side-by-side")  # fmt: skip
    at_budget = {p.kind: p for p in designs(budget)}["side by side"]
    assert at_budget.length == 2400
    _within(at_budget, soak(at_budget, by_name("independent"), 0.01, 2.0, 400, seed=30))
