"""The whole-generation typicality score (issue 28): its entropy, its joint calibration with the
worst token (level by simulation at the shipped defaults), and rows flagged by it."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from soakgate.mockserver.process import MockProcess
from soakgate.reference.calibrate import calibrate
from soakgate.reference.score import (
    TokenScore,
    entropy_from_top,
    evidence,
    token_z,
    typical_surprisal,
)
from tests.command_line import soakgate


def _joint_draw(rng: np.random.Generator, n: int, rho: float) -> tuple[np.ndarray, np.ndarray]:
    """Worst token: tied (a discrete score, as a small vocabulary gives); typicality: continuous
    and correlated with it by `rho`."""
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    worst = np.round(np.exp(1.0 + 0.4 * a), 1)
    typical = rho * a + math.sqrt(1 - rho * rho) * b
    return worst, typical


def test_the_joint_calibration_holds_the_false_flag_rate_at_the_defaults() -> None:
    # 400 calibrations of the default size (5000) at the default rate (0.001), each judged on
    # 20,000 fresh draws: a sample is flagged when either score is above its threshold.
    rng = np.random.default_rng(23)
    for rho in (0.0, 0.6, 0.95):
        rates = []
        for _ in range(400):
            worst, typical = _joint_draw(rng, 5000, rho)
            made = calibrate(list(worst), 0.001, (), list(typical))
            assert made.typical_threshold is not None and made.flagged is not None
            fresh_worst, fresh_typical = _joint_draw(rng, 20_000, rho)
            flagged = (fresh_worst > made.threshold) | (fresh_typical > made.typical_threshold)
            rates.append(float(np.mean(flagged)))
        mean, se = float(np.mean(rates)), float(np.std(rates) / np.sqrt(len(rates)))
        assert mean <= 0.001 + 3 * se, (rho, mean, se)  # E[rate] <= a
        assert mean >= 0.0007, (rho, mean, se)  # the whole rate is spent, not half of it


def test_the_joint_rule_needs_its_samples_and_falls_back_to_the_worst_token() -> None:
    values = list(np.random.default_rng(3).exponential(1, 5000))
    alone = calibrate(values, 0.001)
    both = calibrate(values, 0.001, (), values)  # the same score twice: one rank stricter
    assert (both.rank, both.flagged) == (alone.rank + 1, 5000 - alone.rank - 1)
    assert both.typical_threshold == both.threshold
    assert calibrate(values, 0.001, (), [None] * 5000).typical_threshold is None
    # below 2 / rate - 1 samples no joint threshold keeps the bound: the worst token alone
    small = calibrate(values[:1998], 0.001, (), values[:1998])
    assert (
        small.typical_threshold is None
        and small.threshold == calibrate(values[:1998], 0.001).threshold
    )
    assert calibrate(values[:1999], 0.001, (), values[:1999]).typical_threshold is not None


def test_three_scores_calibrated_together_hold_the_false_flag_rate_at_the_defaults() -> None:
    # The worst standardized token joins the worst token and the soak z under a nucleus: 400
    # calibrations of the default size at the default rate, each judged on 20,000 fresh draws
    # (the third score heavy-tailed, as the token z is); flagged when any is above its threshold.
    rng = np.random.default_rng(29)
    for rho in (0.0, 0.6):
        rates = []
        for _ in range(400):
            worst, z = _joint_draw(rng, 25_000, rho)
            third = np.exp(rho * z + math.sqrt(1 - rho * rho) * rng.standard_normal(25_000))
            made = calibrate(list(worst[:5000]), 0.001, (), [], list(z[:5000]),
                             list(third[:5000]))  # fmt: skip
            assert made.token_z_threshold is not None and made.typical_threshold is not None
            flagged = ((worst[5000:] > made.threshold) | (z[5000:] > made.typical_threshold)
                       | (third[5000:] > made.token_z_threshold))  # fmt: skip
            rates.append(float(np.mean(flagged)))
        mean, se = float(np.mean(rates)), float(np.std(rates) / np.sqrt(len(rates)))
        assert mean <= 0.001 + 3 * se, (rho, mean, se)
        assert mean >= 0.0005, (rho, mean, se)


def test_the_third_score_needs_its_samples_and_the_two_judge_without_it() -> None:
    rng = np.random.default_rng(4)
    worst, z, third = (list(rng.exponential(1, 3000)) for _ in range(3))
    judged = calibrate(worst[:2999], 0.001, (), [], z[:2999], third[:2999])
    assert judged.token_z_threshold is not None
    assert "standardized" not in (judged.warning or "")
    short = calibrate(worst[:2998], 0.001, (), [], z[:2998], third[:2998])
    two = calibrate(worst[:2998], 0.001, (), [], z[:2998])
    assert short.token_z_threshold is None and short.typical_threshold == two.typical_threshold
    assert short.warning is not None and "needs 2999 samples" in short.warning
    # no token z for some sample (a greedy row): the two judge
    assert calibrate(worst, 0.001, (), [], z, [None, *third[1:]]).token_z_threshold is None


def test_a_token_unlikely_for_how_sharp_its_position_is_is_flagged_by_the_token_z() -> None:
    def tokens(odd: tuple[float, float, float]) -> list[TokenScore]:
        plain = [TokenScore(i, i, -1.0, 1, "x", 1.0, (1.0, 1.0, 0.5)) for i in range(30)]
        return [*plain, TokenScore(30, 30, -2.0, 2, "y", 1.0, odd)]

    # the odd token is no rarer than many (surprisal 2) but sits where the sampler is nearly
    # sure (variance 0.01): 10 standard deviations
    sharp = tokens((1.1, 0.1, 0.01))
    assert token_z(sharp) == pytest.approx(10.0)
    _, flagged, payload = evidence(sharp, 5.0, "token_ids", 4.0, whole_score="soak_z",
                                   token_z_threshold=6.0)  # fmt: skip
    assert flagged and payload["flagged_by"] == ["token_z"] and payload["token_z"] == 10.0
    assert payload["token_z_threshold"] == 6.0
    assert not evidence(sharp, 5.0, "token_ids", 4.0, whole_score="soak_z")[1]  # not judged
    flat = tokens((1.1, 0.1, 1.0))  # the same surprisal where the position is open: z = 1
    assert not evidence(flat, 5.0, "token_ids", 4.0, whole_score="soak_z",
                        token_z_threshold=6.0)[1]  # fmt: skip
    assert token_z([TokenScore(0, 0, -1.0, 1, "x")]) is None  # no soak values: none


def _scored_soak(
    tmp_path: Path, label: str, reference_argv: list[str], *args: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`soakgate run` of a mock scored by another mock (`reference_argv`): the stored
    calibration and every row's `details.reference`."""
    db = tmp_path / f"{label}.sqlite"
    with MockProcess(["--seed", "5"]) as candidate, MockProcess(reference_argv) as reference:
        result = soakgate(
            "run", "--target", candidate.url, "--score-reference", reference.url, *args,
            "--max-tokens", "16", "--db", str(db), "--quiet", "--no-watch-metrics",
            cwd=tmp_path, timeout=600,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(db) as connection:
        rows = [json.loads(d)["reference"] for (d,) in connection.execute(
            "SELECT details FROM generations")]  # fmt: skip
        (calibration,) = [json.loads(d) for (d,) in connection.execute(
            "SELECT data FROM events WHERE kind = 'reference_calibration'")]  # fmt: skip
    return calibration, rows


def test_a_soak_with_a_nucleus_calibrates_and_judges_the_worst_standardized_token(
    tmp_path: Path,
) -> None:
    """Through the CLI: with `--top-p 0.95` the stored calibration holds the third threshold and
    every scored row its token z against it; without a nucleus there is no such threshold."""
    found = {
        label: _scored_soak(tmp_path, label, ["--seed", "6"], "--requests", "30",
                            "--false-flag-rate", "0.01", "--calibration", "400", *extra)
        for label, extra in (("nucleus", ["--top-p", "0.95"]), ("plain", []))
    }  # fmt: skip
    calibration, rows = found["nucleus"]
    assert isinstance(calibration["token_z_threshold"], float), calibration
    assert len(rows) == 30 and all(r["status"] == "scored" for r in rows)
    assert all(r["token_z_threshold"] == round(calibration["token_z_threshold"], 6) for r in rows)
    assert all(isinstance(r["token_z"], float) for r in rows)
    calibration, rows = found["plain"]
    assert calibration["token_z_threshold"] is None
    assert all("token_z_threshold" not in r for r in rows)


def test_entropy_from_the_top_alternatives() -> None:
    probs = [0.5, 0.25, 0.125, 0.125]
    exact = -sum(p * math.log(p) for p in probs)
    assert math.isclose(entropy_from_top(math.log(p) for p in probs), exact)
    # the two least likely unknown: their mass counted as one outcome, a lower bound
    partial = entropy_from_top(math.log(p) for p in probs[:2])
    assert partial < exact and math.isclose(partial, exact - 0.25 * math.log(2))


def test_a_generation_each_token_a_little_unlikely_is_flagged_as_a_whole() -> None:
    def tokens(logprob: float) -> list[TokenScore]:
        return [TokenScore(i, i, logprob, 3, "x", 1.0) for i in range(40)]

    typical = typical_surprisal(tokens(-1.6))
    assert typical is not None and math.isclose(typical, 0.6)
    _, flagged, payload = evidence(tokens(-1.6), 5.0, "token_ids", typical_threshold=0.5)
    assert flagged and payload["flagged_by"] == ["whole"] and "first" not in payload
    assert not evidence(tokens(-1.4), 5.0, "token_ids", typical_threshold=0.5)[1]
    assert not evidence(tokens(-1.6), 5.0, "token_ids")[1]  # no typicality threshold: not judged
    no_entropy = [TokenScore(0, 0, -1.6, 1, "x")]
    assert typical_surprisal(no_entropy) is None


def test_a_reference_that_refuses_the_alternatives_is_scored_by_the_worst_token(
    tmp_path: Path,
) -> None:
    # a vLLM started with --max-logprobs 5 answers prompt_logprobs 20 with HTTP 400
    calibration, statuses = _scored_soak(
        tmp_path, "t", ["--max-logprobs", "5"], "--requests", "60", "--false-flag-rate", "0.05",
        "--calibration", "100",
    )  # fmt: skip
    assert len(statuses) == 60 and all(s["status"] == "scored" for s in statuses)
    assert all(s["typical"] is None for s in statuses)
    assert calibration["typical_threshold"] is None and calibration["n"] >= 90


def _scored_db(path: Path, label: str, means: np.ndarray, typicals: list[float | None],
               soak_zs: np.ndarray | None = None) -> None:  # fmt: skip
    """One calibrated, reference-scored run of `label` (rows given their mean surprisal,
    typicality and, with `soak_zs`, soak z, calibrated on standard normal soak z too; no row
    suspect), as `soakgate run --score-reference` stores it."""
    from soakgate.records import Generation, Run
    from soakgate.store import open_store

    rng = np.random.default_rng(5)
    calibration = calibrate(
        list(rng.exponential(5.0, 5000)), 0.001, list(rng.normal(3.0, 1.0, 5000)),
        list(rng.normal(0.0, 1.0, 5000)),
        [] if soak_zs is None else list(rng.normal(0.0, 1.0, 5000)),
    ).to_dict()  # fmt: skip
    zs = [None] * len(means) if soak_zs is None else [round(float(z), 4) for z in soak_zs]
    store = open_store(path)
    start = 1_700_000_000.0 + (1000.0 if label == "compiled" else 0.0)
    run_id = f"{label}-run"
    store.save_run(Run(run_id, label, ["gpu0"], start, detectors={"reference": calibration},
                       status="completed", ended_at=start + len(means)))  # fmt: skip
    store.add([
        Generation(run_id=run_id, request_id=f"{run_id}-{i}", target="gpu0", label=label, seq=i,
                   prompt_id="p0", endpoint="completions", stream=True, started_at=start + i,
                   ended_at=start + i + 0.5, completion_tokens=32, text="fine words",
                   reference_score=1.0, suspect=False,
                   details={"reference": {"mean": float(m), "typical": t, "soak_z": z}})
        for i, (m, t, z) in enumerate(zip(means, typicals, zs, strict=True))
    ])  # fmt: skip
    store.close()


def _shifts(folder: Path, db: str) -> dict[str, Any]:
    """Each unit's unit-level verdict as `report --format json` gives it."""
    made = soakgate("report", db, "--format", "json", cwd=folder)
    assert made.returncode == 0, made.stderr
    return {u["unit"]: u["shift"] for u in json.loads(made.stdout)["probes"]["reference"]}


def test_the_unit_verdict_judges_the_typicality_and_the_mean_where_a_row_has_none(
    tmp_path: Path,
) -> None:
    """A unit whose typicality is shifted on 1 row in 10 (one calibration SD and a half) while
    its mean surprisal, which the prompt's own uncertainty spreads, is not: SHIFTED by the
    typicality in `report` and `compare --outcome shifted`. The same rows with one typicality
    missing are judged on the mean surprisal, and are not."""
    rng = np.random.default_rng(11)
    means = rng.normal(3.0, 1.0, 2000)
    moved = rng.normal(0.0, 1.0, 2000) + (rng.random(2000) < 0.1) * 2.5
    typicals: list[float | None] = [float(t) for t in moved]
    _scored_db(tmp_path / "a.sqlite", "compiled", means, typicals)
    _scored_db(tmp_path / "b.sqlite", "compiled", means, [*typicals[:-1], None])
    _scored_db(tmp_path / "a.sqlite", "eager", rng.normal(3.0, 1.0, 2000),
               [float(t) for t in rng.normal(0.0, 1.0, 2000)])  # fmt: skip
    shifts = {name: _shifts(tmp_path, f"{name}.sqlite") for name in ("a", "b")}
    assert shifts["a"]["compiled@gpu0"]["score"] == "typicality"
    assert shifts["a"]["compiled@gpu0"]["verdict"] == "shifted"
    assert shifts["a"]["eager@gpu0"]["verdict"] == "like the reference"
    assert shifts["b"]["compiled@gpu0"]["score"] == "mean surprisal"
    assert shifts["b"]["compiled@gpu0"]["verdict"] == "like the reference"
    table = soakgate("report", "a.sqlite", cwd=tmp_path, env={"COLUMNS": "250"}).stdout
    assert "SHIFTED by typicality" in table
    gate = soakgate("compare", "a.sqlite", "eager", "compiled", "--outcome", "shifted",
                    "--fail-on-differ", cwd=tmp_path)  # fmt: skip
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "typicality in a greedy soak" in gate.stdout
    assert "verdict: DIFFER" in gate.stdout


def test_the_unit_verdict_judges_the_soak_z_by_its_mean_as_well_as_its_upper_tail(
    tmp_path: Path,
) -> None:
    """Issue 28: where rows and calibration hold the soak z, `report` judges it (not the
    typicality) by two tests: a unit whose soak z is higher on every row but no more often above
    the reference's 90th percentile (every token a little less likely; the tail even narrower)
    is SHIFTED by its mean, where the share test alone (and the typicality, unmoved) sees
    nothing. The same rows under a calibration stored before the soak z had moments are judged
    on the typicality, as before."""
    rng = np.random.default_rng(12)
    means = rng.normal(3.0, 1.0, 2000)
    typicals: list[float | None] = [float(t) for t in rng.normal(0.0, 1.0, 2000)]
    moved = 0.4 + 0.6 * rng.normal(0.0, 1.0, 2000)
    _scored_db(tmp_path / "a.sqlite", "compiled", means, typicals, moved)
    _scored_db(
        tmp_path / "a.sqlite",
        "eager",
        rng.normal(3.0, 1.0, 2000),
        [float(t) for t in rng.normal(0.0, 1.0, 2000)],
        rng.normal(0.0, 1.0, 2000),
    )
    # a sharper model: every row a little more predictable than the reference's own samples
    _scored_db(
        tmp_path / "a.sqlite",
        "sharp",
        rng.normal(3.0, 1.0, 2000),
        [float(t) for t in rng.normal(0.0, 1.0, 2000)],
        rng.normal(-0.15, 1.0, 2000),
    )
    _scored_db(tmp_path / "b.sqlite", "compiled", means, typicals)  # no soak z: older rows
    shifts = {name: _shifts(tmp_path, f"{name}.sqlite") for name in ("a", "b")}
    compiled, eager = shifts["a"]["compiled@gpu0"], shifts["a"]["eager@gpu0"]
    assert compiled["score"] == "soak z" and compiled["verdict"] == "shifted"
    assert compiled["mean"] == pytest.approx(0.4, abs=0.05) and compiled["mean_p_value"] < 1e-6
    assert compiled["share"] < 0.1 and compiled["share_p_value"] > 0.5
    assert compiled["p_value"] == pytest.approx(2 * compiled["mean_p_value"])
    assert eager["score"] == "soak z" and eager["verdict"] == "like the reference"
    sharp = shifts["a"]["sharp@gpu0"]
    assert sharp["verdict"] == "shifted" and sharp["mean_statistic"] < -3, sharp
    assert shifts["b"]["compiled@gpu0"]["score"] == "typicality"
    assert shifts["b"]["compiled@gpu0"]["verdict"] == "like the reference"
    table = soakgate("report", "a.sqlite", cwd=tmp_path, env={"COLUMNS": "300"}).stdout
    assert "SHIFTED by soak z" in table and "the smaller of two tests" in table
    # said of the sharper unit alone, not of a unit like the reference whose mean is a little low
    assert table.count("more predictable than the reference's own samples") == 1


def test_the_calibration_records_the_typicalitys_quantiles() -> None:
    values = list(np.random.default_rng(4).normal(size=5000))
    made = calibrate(values, 0.001, values, values)
    assert made.typical_quantiles == made.mean_quantiles and made.typical_quantiles["p90"] > 1
    assert calibrate(values, 0.001, values, [None] * 5000).typical_quantiles == {}
    assert made.soak_z_moments == {} and made.soak_z_quantiles == {}  # no soak z given
    with_z = calibrate(values, 0.001, values, values, values)
    assert with_z.soak_z_quantiles == with_z.typical_quantiles
    assert with_z.soak_z_moments["mean"] == pytest.approx(float(np.mean(values)))
    assert with_z.soak_z_moments["variance"] == pytest.approx(float(np.var(values, ddof=1)))


def test_reference_alternatives_sets_what_each_score_request_asks_for(tmp_path: Path) -> None:
    """`--reference-alternatives 0`: every scoring request asks for no alternatives (the worst
    token alone, at the old cost), no row has a typicality and the run records the setting;
    `--reference-alternatives 5` asks for 5 and the typicality is computed from them."""
    asked: dict[int, list[int | None]] = {}
    typicals: dict[int, list[float | None]] = {}
    for n in (0, 5):
        db, truth = tmp_path / f"a{n}.sqlite", tmp_path / f"truth{n}.jsonl"
        with MockProcess(["--seed", "5"]) as candidate, MockProcess(
            ["--seed", "6"], ground_truth_path=truth
        ) as reference:  # fmt: skip
            result = soakgate(
                "run", "--target", candidate.url, "--score-reference", reference.url,
                "--reference-alternatives", str(n), "--requests", "40", "--false-flag-rate",
                "0.05", "--calibration", "100", "--max-tokens", "16", "--db", str(db), "--quiet",
                "--no-watch-metrics", cwd=tmp_path, timeout=600,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            asked[n] = [r["prompt_logprobs"] for r in reference.ground_truth()]
        with sqlite3.connect(db) as connection:
            typicals[n] = [json.loads(d)["reference"]["typical"] for (d,) in connection.execute(
                "SELECT details FROM generations")]  # fmt: skip
            (calibration,) = [json.loads(d) for (d,) in connection.execute(
                "SELECT data FROM events WHERE kind = 'reference_calibration'")]  # fmt: skip
        assert calibration["reference"]["alternatives"] == n
    scoring = [a for a in asked[0] if a is not None]  # sampling requests ask none
    assert len(scoring) >= 140 and set(scoring) == {0}  # 100 calibration + 40 rows (+ probe)
    assert asked[5].count(5) >= 140 and set(a for a in asked[5] if a is not None) == {0, 5}
    assert len(typicals[0]) == 40 and all(t is None for t in typicals[0])
    assert len(typicals[5]) == 40 and all(t is not None for t in typicals[5])


def test_reference_flags_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    for argv, message in (
        (["--score-reference", "http://127.0.0.1:9", "--reference-alternatives", "-1"],
         "--reference-alternatives must be between 0 and 1000"),
        (["--reference-model", str(tmp_path), "--reference-alternatives", "5"],
         "--reference-alternatives is for --score-reference"),
        (["--reference-alternatives", "0"], "--reference-alternatives needs --score-reference"),
        (["--score-reference", "http://127.0.0.1:9", "--reference-threads", "2"],
         "--reference-threads is for --reference-model"),
        (["--reference-batch", "8"], "--reference-batch is for --reference-model"),
        (["--reference-model", str(tmp_path), "--reference-threads", "0"],
         "--reference-threads"),
    ):  # fmt: skip
        result = soakgate("run", "--target", "http://127.0.0.1:9", "--requests", "1", *argv,
                          "--db", str(tmp_path / "x.sqlite"), cwd=tmp_path)  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_the_in_process_reference_leaves_a_core_to_the_soak() -> None:
    import os

    from soakgate.reference.hf import HFReference, default_threads

    cores = len(os.sched_getaffinity(0))
    assert default_threads() == max(1, cores - 1)
    assert HFReference("/nonexistent").threads == default_threads()
    assert HFReference("/nonexistent").calibration_threads == cores  # before the soak starts
    assert HFReference("/nonexistent", 8, 3).threads == 3
    assert HFReference("/nonexistent", 8, 3).calibration_threads == 3
