"""The paired verdict (issue 26, item 4): arms soaked side by side compared window by window —
by B's share of each window's failures wherever that share is binomial and uncorrelated, and
by the batches' t where the one-run check withholds and the arms' counts move together.

The figures of the rule on the whole battery are bench/bench_paired.py's (BENCHMARKS.md section
12); these tests pin its behaviour on data built to have, or lack, a shared drift: through the
library, and through `soakgate compare` and `soakgate report --format json` on a real SQLite
database."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from tests.report.synth import add_run

from soakgate.cli.main import main
from soakgate.stats.paired import PAIRED, PairedCheck, side_by_side
from soakgate.stats.verdict import INDETERMINATE, ONE_RUN, Outcomes, _unpaired_note, decide
from soakgate.store import open_store

N = 40_000
FAST_ARGS = ["--hmm-replicates", "0", "--gap-permutations", "49"]


def _phases(rng: np.random.Generator, n: int, mean: int) -> np.ndarray:
    """A rate multiplier that switches between quiet (0.25) and loud (4) in phases of ~mean."""
    out, loud, at = np.empty(n), False, 0
    while at < n:
        length = int(rng.exponential(mean)) + 1
        out[at : at + length] = 4.0 if loud else 0.25
        at, loud = at + length, not loud
    return out


def _arms(seed: int, shared: bool, ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """Two arms of N requests at 0.2% (B at `ratio` times), their rates moved by the same phases
    (a drift they share) or by phases of their own."""
    rng = np.random.default_rng(seed)
    first = _phases(rng, N, 4_000)
    second = first if shared else _phases(rng, N, 4_000)
    a = rng.random(N) < 0.002 * first / first.mean()
    b = rng.random(N) < 0.002 * ratio * second / second.mean()
    return a, b


def _verdict(a: np.ndarray, b: np.ndarray, offset: float = 0.0, seed: int = 0):  # type: ignore[no-untyped-def]
    clock = np.arange(N, dtype=np.float64)
    return decide(
        Outcomes(int(a.sum()), N, a, (), clock), Outcomes(int(b.sum()), N, b, (), clock + offset),
        0.05, seed,
    )  # fmt: skip


def test_side_by_side_needs_arms_that_ran_at_the_same_time() -> None:
    clock = np.arange(1_000, dtype=np.float64)
    assert side_by_side(clock, clock + 50.0) == (50.0, 999.0)  # 95% of each inside
    assert side_by_side(clock, clock + 500.0) is None  # half of each outside the common span
    assert side_by_side(clock, clock + 5_000.0) is None  # one after the other
    assert side_by_side(clock[:100], clock[:100]) is None  # fewer requests than windows


def test_a_shared_drift_is_decided_on_the_pairing() -> None:
    decided, by_share = [], 0
    for seed in range(12):
        a, b = _arms(seed, shared=True, ratio=2.0)
        verdict = _verdict(a, b, seed=seed)
        without = _verdict(a, b, offset=10 * N, seed=seed)  # same counts, not side by side
        assert without.design == ONE_RUN and without.paired is None
        if verdict.design == PAIRED:
            assert verdict.paired is not None and verdict.scope == "instances"
            assert "arms soaked side by side" in verdict.reason
            if verdict.test == "paired_share":
                assert verdict.paired.share_usable and "B's share" in verdict.reason
                by_share += 1
            else:  # the batches' t decides only where the one-run check withheld
                assert verdict.test == "paired_windows" and verdict.paired.usable
                assert without.verdict == INDETERMINATE and not verdict.paired.share_usable
            decided.append(verdict.verdict)
    # The share is binomial in most pairs; the pairing then decides, mostly DIFFER.
    assert by_share >= 6 and len(decided) >= 8 and decided.count("differ") >= 7


def test_a_real_difference_under_a_shared_drift_is_not_read_as_correlation() -> None:
    """About B's share at *equal* rates, B's excess in each window is its real surplus times
    the window's failures, which a shared drift makes rise and fall together: the share test's
    correlation check judged there kept the pairing out of exactly the pairs it is for. Judged
    about B's fitted share (as the dispersion check is), 40 seeded pairs at 2x under shared
    phases: the share test decides 30 and 34 are DIFFER (the check about equal rates: 13 and
    17)."""
    share, differ = 0, 0
    for seed in range(300, 340):
        a, b = _arms(seed, shared=True, ratio=2.0)
        verdict = _verdict(a, b, seed=seed)
        share += verdict.test == "paired_share"
        differ += verdict.differ
        if verdict.paired is not None and verdict.test == "paired_share":
            assert verdict.paired.share_residual_p > verdict.paired.level
            assert f"p={verdict.paired.share_residual_p:.3g}" in verdict.reason
            assert f"about {verdict.paired.share_centre}, not correlated" in verdict.reason
    assert share >= 24 and differ >= 27


def _independent(seed: int, n: int, ratio: float, clump: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Two arms failing independently at 0.2% (B at `ratio` times); with `clump` > 1, A's
    failures come `clump` at a time (its own bursts, the same rate)."""
    rng = np.random.default_rng(seed)
    a = rng.random(n) < 0.002 / clump
    if clump > 1:
        starts = np.flatnonzero(a)
        for step in range(1, clump):
            a[np.minimum(starts + step, n - 1)] = True
    return a, rng.random(n) < 0.002 * ratio


def test_the_share_test_decides_where_one_run_would_too_and_keeps_its_level() -> None:
    """Side by side, the share test decides pairs the one-run verdict would have decided as
    well (the code before this test decided them on the one-run t alone): seeded, 60 pairs of
    equal and of 1.5x arms at 40,000 requests each."""
    clock = np.arange(N, dtype=np.float64)
    share, differ = 0, {1.0: 0, 1.5: 0}
    for ratio in differ:
        for seed in range(60):
            a, b = _independent(1_000 + seed, N, ratio)
            verdict = decide(
                Outcomes(int(a.sum()), N, a, (), clock), Outcomes(int(b.sum()), N, b, (), clock),
                0.05, seed,
            )  # fmt: skip
            share += verdict.test == "paired_share"
            differ[ratio] += verdict.differ
    assert share >= 90  # the checks pass at ~0.8 x 0.9 on independent arms
    assert differ[1.0] <= 7  # 5% of 60 is 3; 7 or more has probability < 3% (binomial)
    assert differ[1.5] >= 30  # power ~75% (bench_paired); 30 or fewer of 60: < 0.1%


def test_one_arm_clumping_on_its_own_keeps_the_share_test_out() -> None:
    """A's failures five at a time (its own bursts, inside a stretch): B's share of each
    stretch's failures disperses beyond binomial, so the share test does not decide; the
    one-run verdict (whose batch means hold such bursts) does."""
    clock = np.arange(N, dtype=np.float64)
    for seed in range(12):
        a, b = _independent(2_000 + seed, N, 1.0, clump=5)
        verdict = decide(
            Outcomes(int(a.sum()), N, a, (), clock), Outcomes(int(b.sum()), N, b, (), clock),
            0.05, seed,
        )  # fmt: skip
        assert verdict.paired is not None and verdict.design == ONE_RUN
        assert verdict.paired.dispersion > 1.5 and verdict.paired.dispersion_p <= 0.1
        assert not verdict.paired.share_usable


def test_an_arm_without_failures_keeps_the_share_test_out() -> None:
    """B's 120 failures in one burst, A none: B's share is 1 in every window whatever the burst
    was, so the share test cannot check that it is binomial and does not decide."""
    clock = np.arange(N, dtype=np.float64)
    a = np.zeros(N, dtype=bool)
    b = np.zeros(N, dtype=bool)
    b[20_000:20_120] = True
    verdict = decide(
        Outcomes(0, N, a, (), clock), Outcomes(120, N, b, (), clock), 0.05, 0
    )  # fmt: skip
    assert verdict.paired is not None and verdict.paired.failures == 120
    assert not verdict.paired.share_usable and verdict.test != "paired_share"


def test_the_reason_says_which_check_kept_the_pairing_out() -> None:
    base = PairedCheck(0.6, 0.4, 0.05, (N, N), 100.0, 1.0, 200, 2.4, 0.001)
    assert "disperses beyond binomial (p=0.001 <= 0.1" in _unpaired_note(base)
    assert "do not move together (cross-correlation p=0.6 > 0.3)" in _unpaired_note(base)
    correlated = replace(base, residual_p=0.01)
    assert "differences are correlated between stretches too (p=0.01" in _unpaired_note(correlated)
    assert "too few" in _unpaired_note(replace(base, failures=40))
    # 81-120 failures: at 13,000 per arm mostly pairs one arm's clumps made (issue 26 item 4)
    sparse = replace(base, failures=110, dispersion_p=0.5)
    assert "110 failures in all are too few" in _unpaired_note(sparse)
    assert "(the pairing needs 121)" in _unpaired_note(sparse)
    assert not sparse.share_usable and replace(sparse, failures=121).share_usable
    # the share test's correlation check: about B's fitted share only from 160 failures on
    assert replace(sparse, failures=159).share_centre == "its share at equal rates"
    assert replace(sparse, failures=160).share_centre == "its fitted share"
    assert replace(base, dispersion_p=0.5).share_usable and not base.share_usable


def test_arms_that_cluster_each_on_their_own_are_not_paired() -> None:
    reasons, paired_differ = 0, 0
    for seed in range(12):
        a, b = _arms(100 + seed, shared=False, ratio=1.0)
        verdict = _verdict(a, b, seed=seed)
        paired_differ += verdict.design == PAIRED and verdict.differ
        if verdict.verdict == INDETERMINATE and verdict.paired is not None:
            assert verdict.paired.cross_p > 0 and verdict.design == ONE_RUN
            reasons += "The arms ran side by side" in verdict.reason
    assert reasons >= 6  # withheld, and it says why the pairing was not used
    assert paired_differ <= 1


@pytest.fixture(scope="module")
def side_by_side_dbs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two targets soaked at the same time with a drift they share (B at 2x); and a database
    with the same two arms' data stored one after the other (no pairing possible)."""
    a, b = _arms(0, shared=True, ratio=2.0)
    folder = tmp_path_factory.mktemp("paired")
    store = open_store(folder / "together.sqlite")
    add_run(store, "eager", "gpu0", list(a), step_s=0.05)
    add_run(store, "graph", "gpu1", list(b), step_s=0.05)
    store.close()
    store = open_store(folder / "apart.sqlite")
    add_run(store, "eager-then", "gpu0", list(a), step_s=0.05)
    add_run(store, "graph-then", "gpu1", list(b), step_s=0.05, start=1_700_000_000.0 + N)
    store.close()
    return folder / "together.sqlite", folder / "apart.sqlite"


def test_compare_names_the_paired_design_and_the_report_exports_it(
    side_by_side_dbs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    db, apart = (str(path) for path in side_by_side_dbs)
    assert main(["compare", db, "eager", "graph", "--fail-on-differ", *FAST_ARGS]) == 1
    out = capsys.readouterr().out
    assert "design: paired windows (1 + 1 run(s) of a target)" in out
    assert "verdict test: paired_windows" in out and "arms soaked side by side" in out
    assert main(["compare", apart, "eager-then", "graph-then", *FAST_ARGS]) == 0
    out = capsys.readouterr().out
    assert "design: one run per arm (1 + 1 run(s) of a target)" in out
    assert "paired windows" not in out and "INDETERMINATE" in out
    assert main(["report", db, "--format", "json", *FAST_ARGS]) == 0
    found = {c["b"]: c for c in json.loads(capsys.readouterr().out)["comparisons"]}
    assert found["graph@gpu1"]["design"] == "paired windows"
    assert (
        found["graph@gpu1"]["test"] == "paired_windows"
        and found["graph@gpu1"]["scope"] == "instances"
    )


def test_compare_and_the_report_name_the_share_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two targets soaked at the same time, failing independently, B at 2x: compare decides on
    B's share of each window's failures, and the JSON report says so."""
    a, b = _independent(7, N, 2.0)
    store = open_store(tmp_path / "together.sqlite")
    add_run(store, "eager", "gpu0", list(a), step_s=0.05)
    add_run(store, "graph", "gpu1", list(b), step_s=0.05)
    store.close()
    db = str(tmp_path / "together.sqlite")
    assert main(["compare", db, "eager", "graph", "--fail-on-differ", *FAST_ARGS]) == 1
    out = capsys.readouterr().out
    assert "design: paired windows (1 + 1 run(s) of a target)" in out
    assert "verdict test: paired_share" in out
    assert "B's share of the failures of each window of time" in out
    assert main(["report", db, "--format", "json", *FAST_ARGS]) == 0
    found = {c["b"]: c for c in json.loads(capsys.readouterr().out)["comparisons"]}
    assert found["graph@gpu1"]["design"] == "paired windows"
    assert found["graph@gpu1"]["test"] == "paired_share"
    assert found["graph@gpu1"]["verdict"] == "differ"


def test_with_few_failures_the_pairing_is_not_used_and_the_reason_says_why() -> None:
    """At ~60 failures in the pair the differences' own check is too blind: equal arms under
    resets every ~5,000 were DIFFER 7.3% of the time with the pairing (bench_paired)."""
    seen = 0
    for seed in range(12):
        a, b = (arm[:13_000] for arm in _arms(seed, shared=True, ratio=1.0))
        clock = np.arange(13_000, dtype=np.float64)
        verdict = decide(
            Outcomes(int(a.sum()), 13_000, a, (), clock),
            Outcomes(int(b.sum()), 13_000, b, (), clock), 0.05, seed,
        )  # fmt: skip
        if verdict.paired is not None and verdict.paired.failures < 81:
            assert verdict.design != PAIRED and not verdict.paired.usable
            assert "too few to check the window-by-window differences" in verdict.reason
            seen += 1
    assert seen >= 4
