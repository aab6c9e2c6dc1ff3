"""Issue 29 item 2: structured output under load. A prompt (or every prompt, from
`--response-format`, `--regex`, `--tools`) asks for a JSON schema, a regex or tool calls; the
constraint is sent in the field the server reads (`--structure-via`), every answer is validated,
and an invalid one is flagged `invalid_structure` with its first error, stored apart from
collapses and judged by `compare` and the report over the answers it judged (not the free
prompts' ones, not those the budget cut)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from soakgate.checks import AnswerChecks, Crosstalk, CrosstalkSettings, StructureCheck
from soakgate.errors import ConfigError, UsageError
from soakgate.mockserver.process import MockProcess
from soakgate.prompts import Prompt, Structure, load_prompts
from soakgate.records import Generation
from soakgate.targets import Outcome, RequestSpec
from soakgate.targets.parse import Answer, build_payload, fold_body, fold_event
from tests.cli.helpers import soakgate, stored_rows

SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "maxLength": 20},
        "score": {"type": "integer", "minimum": 0, "maximum": 100},
    },
    "required": ["answer", "score"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"], "additionalProperties": False}}},
]  # fmt: skip


def _row(prompt: Prompt, text: str, finish: str = "stop", **details: Any) -> Generation:
    row = Generation("run1", "run1-0", "t", "l", 0, prompt.prompt_id, "chat", False, 0.0, 0.0,
                     text=text, finish_reason=finish)  # fmt: skip
    row.details.update(details)
    return row


def _judge(prompt: Prompt, row: Generation) -> Generation:
    check = StructureCheck()
    check.sent(0, prompt)
    check.answered(row)
    return row


def test_a_json_answer_is_judged_strictly_against_its_schema() -> None:
    prompt = Prompt("p", "rate it", structure=Structure.of("json_schema", SCHEMA))
    cases = {
        '{"answer": "fine", "score": 7}': None,
        ' {"score": 0, "answer": ""}\n': None,
        '{"answer": "fine", "score": 7': "not JSON",
        '{"answer": "fine", "score": "7"}': 'is not of type "integer"',
        '{"answer": "fine"}': '"score" is a required property',
        '{"answer": "fine", "score": 7, "extra": 1}': "Additional properties",
        '{"answer": "fine", "score": NaN}': "not JSON",
        '{"answer": "fine", "score": 7} trailing': "not JSON",
        '{"answer": "this answer is far too long", "score": 7}': "is longer than 20",
    }
    for text, error in cases.items():
        row = _judge(prompt, _row(prompt, text))
        if error is None:
            assert row.checks == [], text
        else:
            assert row.checks == ["invalid_structure"], text
            evidence = row.details["invalid_structure"]
            assert evidence["kind"] == "json_schema" and error in evidence["error"], text
    # numbers past a double's range are JSON (a grammar's digit rule writes them)
    big = Prompt("b", "x", structure=Structure.of("json_schema", {"type": "array", "items": {
        "type": "number"}}))  # fmt: skip
    assert _judge(big, _row(big, "[1e999, -1e999, 1" + "0" * 400 + "]")).checks == []
    above = _row(prompt, '{"answer": "x", "score": 1' + "0" * 400 + "}")  # above its maximum
    assert _judge(prompt, above).checks == ["invalid_structure"]
    typed = _judge(prompt, _row(prompt, '{"answer": "fine", "score": "7"}'))
    assert typed.details["invalid_structure"]["at"] == "$.score"  # where, as a JSON path
    # the budget cut it: judged on whether it can still be completed, not on its schema
    for text in ('{"answer": "fi', "   \n  ", '{"score": 7, "answer"', ""):
        assert _judge(prompt, _row(prompt, text, finish="length")).checks == [], text
    for text in ("Sure! Here", '{"answer": "x",, ', '{"answer": "x"} and more', '{"a": NaN'):
        cut = _judge(prompt, _row(prompt, text, finish="length"))
        assert cut.checks == ["invalid_structure"], text
    whole = _judge(prompt, _row(prompt, '{"answer": 3, "score": 7}', finish="length"))
    assert whole.checks == ["invalid_structure"]  # whole: its schema is judged
    free = Prompt("q", "free text")
    assert _judge(free, _row(free, "anything")).checks == ["-invalid_structure"]


def test_a_regex_must_match_the_whole_answer() -> None:
    prompt = Prompt("p", "a date", structure=Structure.of("regex", r"\d{4}-\d{2}-\d{2}"))
    assert _judge(prompt, _row(prompt, "2026-12-05")).checks == []
    for text in ("2026-12-05 ", "on 2026-12-05", "2026-1-05"):
        row = _judge(prompt, _row(prompt, text))
        assert row.checks == ["invalid_structure"], text
        assert row.details["invalid_structure"]["kind"] == "regex"
    assert _judge(prompt, _row(prompt, "2026-1", finish="length")).checks == []  # may go on
    cut = _judge(prompt, _row(prompt, "2026-x", finish="length"))
    assert (
        cut.checks == ["invalid_structure"]
        and "starts so" in cut.details["invalid_structure"]["error"]
    )


def test_tool_calls_are_validated_against_the_tool_they_name() -> None:
    auto = Prompt("p", "weather?", structure=Structure.of("tools", TOOLS))
    named = Prompt("q", "add", structure=Structure.of(
        "tools", TOOLS, {"type": "function", "function": {"name": "add"}}))  # fmt: skip

    def calls(*made: tuple[str, str]) -> dict[str, Any]:
        return {"tool_calls": [{"id": f"c{n}", "name": name, "arguments": arguments}
                               for n, (name, arguments) in enumerate(made)]}  # fmt: skip

    ok = [(auto, calls(("get_weather", '{"city": "Oslo"}'))), (auto, {}),
          (named, calls(("add", '{"a": 1, "b": 2}')))]  # fmt: skip
    bad = [
        (auto, calls(("get_weather", '{"town": "Oslo"}')), '"city" is a required property'),
        (auto, calls(("get_weather", '{"city": "Oslo"')), "not JSON"),
        (auto, calls(("launch", "{}")), "not a tool asked for"),
        (named, calls(("get_weather", '{"city": "Oslo"}')), "not a tool asked for"),
        (named, {}, "no tool call"),
        (named, calls(("add", '{"a": 1, "b": 2}'), ("add", '{"a": "x", "b": 2}')), '"x"'),
    ]
    for prompt, details in ok:
        assert _judge(prompt, _row(prompt, "", **details)).checks == [], details
    for prompt, details, error in bad:
        row = _judge(prompt, _row(prompt, "", **details))
        assert row.checks == ["invalid_structure"], details
        assert error in row.details["invalid_structure"]["error"], details
    assert row.details["invalid_structure"]["call"] == 1


def test_structures_are_sent_in_the_field_each_server_reads() -> None:
    schema = Structure.of("json_schema", SCHEMA)
    prompt = Prompt("p", "x", structure=schema)
    fields = {
        via: {k: v for k, v in build_payload(RequestSpec(structure_via=via), prompt, "m").items()
              if k not in ("model", "max_tokens", "prompt", "temperature", "stream",
                           "stream_options")}
        for via in ("openai", "llamacpp", "vllm", "guided")
    }  # fmt: skip
    assert fields == {
        "openai": {"response_format": {"type": "json_schema", "json_schema": {
            "name": "soakgate", "schema": SCHEMA, "strict": True}}},
        "llamacpp": {"json_schema": SCHEMA},
        "vllm": {"structured_outputs": {"json": SCHEMA}},
        "guided": {"guided_json": SCHEMA},
    }  # fmt: skip
    regex = Prompt("r", "x", structure=Structure.of("regex", "[a-z]+"))
    body = build_payload(RequestSpec(structure_via="vllm"), regex, "m")
    assert body["structured_outputs"] == {"regex": "[a-z]+"}
    with pytest.raises(UsageError, match="--structure-via vllm or guided"):
        build_payload(RequestSpec(), regex, "m")
    tools = Prompt("t", "x", structure=Structure.of("tools", TOOLS, "required"))
    body = build_payload(RequestSpec(endpoint="chat"), tools, "m")
    assert body["tools"] == TOOLS and body["tool_choice"] == "required"
    with pytest.raises(UsageError, match="--endpoint chat"):
        build_payload(RequestSpec(), tools, "m")


def test_tool_calls_are_assembled_from_a_stream_and_from_a_body() -> None:
    streamed = Outcome(started_at=0.0)
    answer = Answer(streamed, chat=True)
    deltas = [
        {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                              "function": {"name": "add", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": '}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '1, "b": 2}'}}]},
        {"tool_calls": [{"index": 1, "id": "call_2", "function": {"name": "get_weather",
                                                                   "arguments": "{}"}}]},
    ]  # fmt: skip
    for delta in deltas:
        assert fold_event(answer, {"choices": [{"index": 0, "delta": delta}]})
    fold_event(answer, {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    assert streamed.tool_calls == [
        {"id": "call_1", "name": "add", "arguments": '{"a": 1, "b": 2}'},
        {"id": "call_2", "name": "get_weather", "arguments": "{}"},
    ]
    whole = Outcome(started_at=0.0)
    fold_body(Answer(whole, chat=True), {"choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function",
             "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]}}]})  # fmt: skip
    assert whole.tool_calls == [{"id": "c", "name": "add", "arguments": '{"a": 1, "b": 2}'}]


def test_checks_run_together_and_a_canary_leaves_the_structure_alone() -> None:
    structure = Structure.of("json_schema", SCHEMA)
    checks = AnswerChecks([Crosstalk(CrosstalkSettings(canaries=True), "run1"), StructureCheck()])
    sent = checks.sent(3, Prompt("p", "rate it", structure=structure))
    assert "SG-3-" in sent.text and sent.structure == structure
    row = _row(sent, '{"answer": 1}')
    checks.answered(row)
    assert row.checks == ["invalid_structure"]


def test_prompt_files_mix_structured_and_free_prompts(tmp_path: Path) -> None:
    lines = [
        {"id": "free", "prompt": "Say hi."},
        {"id": "json", "prompt": "Rate it.", "response_format": SCHEMA},
        {"id": "wrapped", "messages": [{"role": "user", "content": "Rate."}], "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}},
        {"id": "date", "prompt": "A date.", "regex": r"\d{4}"},
        {"id": "call", "messages": [{"role": "user", "content": "Add."}], "tools": TOOLS,
         "tool_choice": "required"},
    ]  # fmt: skip
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines))
    prompts = {p.prompt_id: p for p in load_prompts(path)}
    assert prompts["free"].structure is None
    assert prompts["json"].structure == prompts["wrapped"].structure
    assert prompts["date"].structure == Structure("regex", r"\d{4}")
    assert (
        prompts["call"].structure is not None and prompts["call"].structure.choice() == "required"
    )
    for bad, message in [
        ({"prompt": "x", "regex": "a", "tools": TOOLS}, "one structure per prompt"),
        ({"prompt": "x", "response_format": {"type": "objekt"}}, "not a valid JSON schema"),
        ({"prompt": "x", "regex": "(unclosed"}, "does not compile"),
        ({"prompt": "x", "tools": TOOLS, "tool_choice": {"type": "function",
                                                         "function": {"name": "nope"}}}, "names none"),
        ({"prompt": "x", "tool_choice": "required"}, "tool_choice needs tools"),
    ]:  # fmt: skip
        path.write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match=message):
            load_prompts(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--regex", "[a-z]+"), "--structure-via vllm or guided"),
        (("--tools", "tools.json"), "--endpoint chat"),
        (("--tool-choice", "required"), "--tool-choice needs --tools"),
        (("--response-format", "bad.json"), "not a valid JSON schema"),
        (("--response-format", "missing.json"), "cannot read"),
        (("--response-format", "schema.json", "--regex", "x"), "give one of"),
        (("--tools", "tools.json", "--endpoint", "chat", "--tool-choice", "nope"), "names none"),
    ],
)  # fmt: skip
def test_a_structure_that_cannot_be_sent_is_a_one_line_error(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "bad.json").write_text('{"type": 12}')
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
    result = soakgate("run", "--target", "http://127.0.0.1:9", "--requests", "1", "--db",
                      str(tmp_path / "x.sqlite"), *args, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.sqlite").exists()


REQUESTS = 240


def _soak(tmp_path: Path, url: str, db: Path, *extra: str) -> None:
    result = soakgate("run", "--target", url, "--requests", str(REQUESTS), "--concurrency", "8",
                      "--max-tokens", "256", "--db", str(db), "--quiet", "--no-watch-metrics",
                      *extra, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr


def _files(tmp_path: Path) -> dict[str, Path]:
    files = {"schema": tmp_path / "schema.json", "tools": tmp_path / "tools.json"}
    files["schema"].write_text(json.dumps(SCHEMA))
    files["tools"].write_text(json.dumps(TOOLS))
    return files


CASES = {
    "json, completions, streamed": ("--response-format", "{schema}"),  # str.format: {{ is {
    "json, chat, not streamed": ("--response-format", "{schema}", "--endpoint", "chat",
                                 "--no-stream"),
    "json via llamacpp, completions, not streamed": ("--response-format", "{schema}",
                                                     "--structure-via", "llamacpp", "--no-stream"),
    "regex via vllm, chat, streamed": ("--regex", r"[A-Z][a-z]{{2,8}}-\d{{3}}", "--structure-via",
                                       "vllm", "--endpoint", "chat"),
    "regex via guided, completions, streamed": ("--regex", r"[a-z]+( [a-z]+){{0,4}}",
                                                "--structure-via", "guided"),
    "tools, chat, streamed": ("--tools", "{tools}", "--tool-choice", "required", "--endpoint",
                              "chat"),
    "tools, chat, not streamed": ("--tools", "{tools}", "--endpoint", "chat", "--no-stream"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_every_injected_violation_is_flagged_and_no_clean_answer_is(
    tmp_path: Path, case: str
) -> None:
    files = _files(tmp_path)
    args = [a.format(**files) for a in CASES[case]]
    truth, db = tmp_path / "truth.jsonl", tmp_path / "s.sqlite"
    with MockProcess(["--invalid-structure-rate", "0.1", "--seed", "11"],
                     ground_truth_path=truth) as mock:  # fmt: skip
        _soak(tmp_path, mock.url, db, *args)
        records = mock.ground_truth()
    injected = {r["request_id"]: r["invalid_structure"] for r in records
                if r.get("invalid_structure")}  # fmt: skip
    assert all(r.get("structured") for r in records)  # the mock saw every structure
    rows = stored_rows(db)
    assert len(rows) == REQUESTS and all(g.ok for g in rows.values())
    assert 8 <= len(injected) <= 45
    flagged = {rid for rid, g in rows.items() if g.checks == ["invalid_structure"]}
    assert flagged == set(injected), {rid: injected.get(rid) for rid in flagged ^ set(injected)}
    for rid in flagged:
        assert rows[rid].details["invalid_structure"]["error"]
        assert not rows[rid].flags  # a broken structure is not a collapse
    clean = [g for rid, g in rows.items() if rid not in flagged]
    assert all(g.checks == [] for g in clean)
    if "tools" in case:
        assert all(g.details.get("tool_calls") for g in clean if g.finish_reason == "tool_calls")


def test_compare_and_report_judge_invalid_structure_over_the_answers_judged(
    tmp_path: Path,
) -> None:
    """Two arms on a prompt file that mixes structured and free prompts: the broken arm fails the
    gate on invalid_structure (and alone with --outcome), its rate counts only the structured
    prompts' answers, the live counter equals what is stored."""
    from tests.report.test_live_metrics import Soak, of, scrape

    lines = [{"id": f"free-{n}", "prompt": f"Tell me about topic {n}."} for n in range(2)]
    lines += [{"id": f"json-{n}", "prompt": f"Rate item {n}.", "response_format": SCHEMA}
              for n in range(2)]  # fmt: skip
    prompts = tmp_path / "mixed.jsonl"
    prompts.write_text("\n".join(json.dumps(line) for line in lines))
    db = tmp_path / "arms.sqlite"
    # a rate at which the one-run gate fails B on every draw (at a few per cent of answers an
    # INDETERMINATE at p > 0.001 passed it in ~3% of runs: simulated, 1,000 draws)
    with MockProcess(["--seed", "8"]) as good, MockProcess(
        ["--seed", "9", "--invalid-structure-rate", "0.4"]
    ) as bad:  # fmt: skip
        _soak(tmp_path, good.url, db, "--label", "good", "--prompts", str(prompts))
        soak = Soak(["run", "--target", bad.url, "--label", "bad", "--requests", str(REQUESTS),
                     "--concurrency", "8", "--max-tokens", "256", "--prompts", str(prompts),
                     "--db", str(db), "--quiet", "--no-watch-metrics", "--metrics-port", "0",
                     "--metrics-linger", "60"], tmp_path)  # fmt: skip
        try:
            soak.wait_for("soak ended")
            live = of(scrape(soak.url), "soakgate_check_failures_total")
        finally:
            assert soak.end() == 0
    with sqlite3.connect(db) as connection:
        (stored,) = connection.execute(
            "SELECT COUNT(*) FROM generations WHERE label = 'bad' AND checks = 'invalid_structure'"
        ).fetchone()
        (free,) = connection.execute(
            "SELECT COUNT(*) FROM generations WHERE checks = '-invalid_structure'"
        ).fetchone()
    assert stored > 0 and free == REQUESTS  # half of each arm's requests were free prompts
    counted = {dict(labels)["check"]: value for labels, value in live.items()}
    assert counted == {"crosstalk": 0, "invalid_structure": stored, "inconsistent": 0,
                       "twin_mismatch": 0}  # fmt: skip
    gate = soakgate("compare", str(db), "good", "bad", "--fail-on-differ", cwd=tmp_path)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "gate FAIL" in gate.stdout and "invalid structure" in gate.stdout.split("\n")[1]
    alone = soakgate("compare", str(db), "good", "bad", "--fail-on-differ", "--outcome",
                     "invalid_structure", cwd=tmp_path)  # fmt: skip
    assert alone.returncode == 1 and alone.stdout.startswith("outcome: invalid_structure")
    collapses = soakgate("compare", str(db), "good", "bad", "--fail-on-differ", "--outcome",
                         "collapse", cwd=tmp_path)  # fmt: skip
    assert collapses.returncode == 0, collapses.stdout
    document = json.loads(soakgate("report", str(db), "--format", "json", cwd=tmp_path).stdout)
    found = {o["unit"]: o["invalid_structure"] for o in document["outcomes"]}
    bad_unit = next(name for name in found if name.startswith("bad@"))
    good_unit = next(name for name in found if name.startswith("good@"))
    assert found[good_unit] == {**found[good_unit], "events": 0, "n": REQUESTS // 2}
    assert found[bad_unit]["events"] == stored and found[bad_unit]["n"] == REQUESTS // 2
    text = soakgate("report", str(db), cwd=tmp_path).stdout
    assert "invalid structure" in text


def test_a_campaign_sends_its_prompt_files_structures_the_way_it_is_told(tmp_path: Path) -> None:
    """A campaign's `[load] structure_via` names the field; its blocks run the check, and a
    configuration whose server breaks the structure is told by the stored rows."""
    from tests.campaign.helpers import write_campaign

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps(line) for line in [
        {"id": "json", "prompt": "Rate it.", "response_format": SCHEMA},
        {"id": "free", "prompt": "Say something."}]))  # fmt: skip
    path = write_campaign(
        tmp_path, {"good": "", "bad": "--invalid-structure-rate 0.5"},
        requests=16, max_tokens=128,
        load=f'prompts = "{prompts}"\nstructure_via = "llamacpp"\ncanaries = true',
    )  # fmt: skip
    db = tmp_path / "c.sqlite"
    result = soakgate("campaign", str(path), "--db", str(db), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(db) as connection:
        counts = dict(connection.execute(
            "SELECT label || ':' || checks, COUNT(*) FROM generations "
            "WHERE error_class IS NULL AND prompt_id = 'json' GROUP BY 1").fetchall())  # fmt: skip
        detectors = [json.loads(d) for (d,) in connection.execute("SELECT detectors FROM runs")]
    assert counts.get("good:invalid_structure", 0) == 0 and counts["good:"] > 0
    assert counts["bad:invalid_structure"] > 0
    assert all("invalid_structure" in d for d in detectors)
    assert all(d["crosstalk"]["canaries"] for d in detectors)  # [load] canaries = true
    wrong = write_campaign(tmp_path, {"good": ""}, requests=4, load='structure_via = "grpc"')
    refused = soakgate("campaign", str(wrong), "--db", str(tmp_path / "w.sqlite"), cwd=tmp_path)
    assert refused.returncode == 2 and "structure_via" in refused.stderr


def test_under_store_text_flagged_a_broken_structure_keeps_its_text_and_a_free_answer_does_not() -> (
    None
):
    from soakgate.detectors import DetectorConfig
    from soakgate.load.record import score_generation

    free, broken = Prompt("f", "x"), Prompt("j", "x")
    rows = {
        "free": _row(free, "some words here"),
        "broken": _row(broken, '{"answer": 1}'),
    }
    rows["free"].checks.append("-invalid_structure")
    rows["broken"].checks.append("invalid_structure")
    for row in rows.values():
        row.seq = 7  # not one of the 1-in-100 sampled texts
        score_generation(row, DetectorConfig(), "flagged")
    assert rows["free"].text is None and rows["broken"].text == '{"answer": 1}'


def test_a_cut_text_is_flagged_only_where_no_continuation_makes_it_json() -> None:
    """`checks.jsonprefix` against what a cut can leave and what no continuation repairs (the
    second list holds what jiter's partial mode, tried first, let through: `[4.5.1]` was a real
    llama.cpp answer with the schema lost)."""
    from soakgate.checks.jsonprefix import prefix_error

    completable = ["", "  ", "{", '{"a', '{"a"', '{"a":', '{"a": 4', '{"a": 4.', '{"a": 4.5e',
                   '{"a": -', "[tru", "[1, 2", '{"a": "x\\', '{"a": "x\\u00', '"abc', "-0.5e+",
                   '{"a": [1, {"b": null}], "c": fals', '{"a": 1}  \n']  # fmt: skip
    broken = ["\n\n[4.5.1]\n===", "[1 2]", '{"a" : "x" "b"', '{"a": 4x}', '{"a": 1} x',
              '{"a": NaN', "[trux]", "{a", '{"a" 1', "[1,]", "[01", '{"a": 1.e5', ".5",
              "hello", '{"a": "x\\q', '{"a": "\x01"}', "[1}", '{"a":1]', "[-]", "1.e", "{,"]  # fmt: skip
    assert [t for t in completable if prefix_error(t) is not None] == []
    assert [t for t in broken if prefix_error(t) is None] == []
    prompt = Prompt("p", "rate it", structure=Structure.of("json_schema", SCHEMA))
    cases = [
        ("  [4.5]", True),
        ('"answer', True),
        ('  {"answer"', False),
        ('{"count": 3', True),
        ('{"answer": "x", "sco', False),
        ('{"answer": "x", "s": ', True),
    ]
    for text, flagged in cases:
        row = _judge(prompt, _row(prompt, text, finish="length"))
        assert row.checks == (["invalid_structure"] if flagged else []), text
