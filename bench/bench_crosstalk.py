"""Bench (issue 29): what the crosstalk check flags on clean servers and finds in leaky ones.

False flags: the real tiny model served by llama.cpp (`soakgate.servers.llamacpp`, the GGUF made
by `scripts/make_gguf.py`), soaked with `soakgate run` at temperature 0.8 on four prompt sets of
different kinds, each with the answer-span test switched on as well (`--crosstalk-answers`) so
that every test is measured:

- `builtin`: the built-in prompts (the set the check was written against);
- `system`: chat, one long system message shared by every request and a short question each
  (boilerplate every prompt holds);
- `synthetic`: `--prompt-tokens uniform:16,160`: slices of one running text, overlapping;
- `memorized`: consecutive 40-word chunks of the Python standard library's docstrings, text
  the model was trained on, so an answer may go on with the words of the next chunk: another
  prompt's text, written by the model from memory.

Found leaks: the mock (`--crosstalk-rate 0.02`: an answer carries the last 24 words of another
recent request's prompt) on the same four prompt sets, without and with `--canaries`.

Real leaks (`--real-leaks`): the real tiny model served in-process by `tests/hfserve.py`, whose
requests leak while two or more are in flight (30% of them): `context` answers a request from
another waiting request's prompt (a cache slot handed to the wrong request: the answer goes on
with another user's text), `output` puts the last answer served in the second half of its own
(an output buffer not cleared). Soaked with `--canaries --crosstalk-answers`, not streamed; and
both leaks again with a second, clean server as the greedy differential's reference, every
request compared (`--reference-fraction 1`, concurrency 8).

Every share with its Clopper-Pearson 95% interval. Run:

    python bench/bench_crosstalk.py [--requests 2500] [--out DIR]
    python bench/bench_crosstalk.py --cost   # the check's CPU per answer, in process
    python bench/bench_crosstalk.py --cost-in-soak 20000   # ... per request, inside a soak
    python bench/bench_crosstalk.py --skip-real --mock-requests 0 --real-leaks 120 \
        --leak-case "context, greedy differential"   # one real-leak case alone
"""

from __future__ import annotations

import argparse
import inspect
import json
import sqlite3
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from benchlib import share, soak_run  # noqa: E402

from soakgate.mockserver.process import MockProcess  # noqa: E402
from soakgate.servers.llamacpp import LlamaCppProcess  # noqa: E402

MODEL = REPO.parent / "shared" / "models" / "tiny-llama-8k"
SYSTEM = (
    "You are a careful assistant for the engineers of a Python shop. Answer in plain words, "
    "give one short example where it helps, never invent an API, and say so when you are not "
    "sure. Keep every answer under one hundred words and end it with a one-line summary."
)


def _docstrings() -> list[str]:
    """Docstrings of standard library modules and their public functions, in a fixed order."""
    import argparse as a
    import collections
    import json as j
    import os
    import re
    import shutil
    import string
    import textwrap

    texts = []
    for module in (a, collections, j, os, re, shutil, string, textwrap):
        for name in sorted(dir(module)):
            doc = inspect.getdoc(getattr(module, name))
            if doc and len(doc.split()) >= 80 and doc not in texts:
                texts.append(doc)
    return texts


def prompt_sets(folder: Path) -> dict[str, list[str]]:
    """Each control's extra `soakgate run` arguments (prompt files written to `folder`)."""
    questions = [f"What does {name} do, and when would I use it?"
                 for name in ("os.path.join", "json.dumps", "re.sub", "shutil.copytree",
                              "collections.Counter", "textwrap.dedent", "argparse.ArgumentParser",
                              "string.Template", "os.walk", "re.compile")]  # fmt: skip
    questions += [
        f"Explain the difference between {a} and {b}."
        for a, b in (
            ("a list", "a tuple"),
            ("is", "=="),
            ("a thread", "a process"),
            ("bytes", "str"),
            ("sort", "sorted"),
            ("a module", "a package"),
            ("repr", "str"),
            ("yield", "return"),
        )
    ]
    system = folder / "system.jsonl"
    system.write_text("".join(json.dumps({"id": f"q{i}", "messages": [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]}) + "\n"
        for i, q in enumerate(questions)))  # fmt: skip
    chunks = []
    for doc in _docstrings():
        words = doc.split()
        chunks += [" ".join(words[i : i + 40]) for i in range(0, len(words) - 39, 40)]
    memorized = folder / "memorized.jsonl"
    memorized.write_text("".join(json.dumps({"id": f"d{i}", "prompt": c}) + "\n"
                                 for i, c in enumerate(chunks[:400])))  # fmt: skip
    return {
        "builtin": [],
        "system": ["--prompts", str(system), "--endpoint", "chat"],
        "synthetic": ["--prompt-tokens", "uniform:16,160"],
        "memorized": ["--prompts", str(memorized)],
    }


def soak(url: str, db: Path, requests: int, extra: list[str]) -> None:
    soak_run(url, db, requests, "--max-tokens", "64", "--temperature", "0.8", *extra)


def flagged(db: Path) -> tuple[int, Counter[str], list[str]]:
    """Answered rows, flags by test, and a few flagged spans."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT checks, details FROM generations WHERE error_class IS NULL"
        ).fetchall()
    by: Counter[str] = Counter()
    spans = []
    for checks, details in rows:
        if checks:
            evidence = json.loads(details)["crosstalk"]
            by[evidence["by"]] += 1
            spans.append(evidence.get("span") or evidence.get("canary"))
    return len(rows), by, spans[:3]


def false_flags(folder: Path, requests: int, sets: dict[str, list[str]]) -> None:
    gguf = Path(tempfile.gettempdir()) / "soakgate-bench-tiny.gguf"
    if not gguf.is_file():
        subprocess.run([sys.executable, str(REPO / "scripts" / "make_gguf.py"), str(gguf),
                        "--model", str(MODEL)], check=True, capture_output=True)  # fmt: skip
    server = LlamaCppProcess(gguf, parallel=8, threads=2, log_dir=folder).start()
    total, total_flags = 0, 0
    try:
        print(f"false flags: real tiny model on llama.cpp, {requests} requests per prompt set")
        for name, extra in sets.items():
            db = folder / f"clean-{name}.sqlite"
            soak(server.url, db, requests, [*extra, "--crosstalk-answers"])
            n, by, spans = flagged(db)
            total, total_flags = total + n, total_flags + sum(by.values())
            prompt = share(by["prompt_span"], n)
            answer = share(by["answer_span"], n)
            print(f"  {name:10s} prompt spans {prompt}; answer spans {answer}; e.g. {spans}")
        print(f"  all         {share(total_flags, total)} (every test)")
    finally:
        server.stop()


def found(folder: Path, requests: int, sets: dict[str, list[str]]) -> None:
    print("found leaks: the mock, --crosstalk-rate 0.02 (ground truth: the leak's source)")
    for name, extra in sets.items():
        for canaries in ([], ["--canaries"]):
            truth = folder / f"truth-{name}-{len(canaries)}.jsonl"
            db = folder / f"leaky-{name}-{len(canaries)}.sqlite"
            with MockProcess(["--crosstalk-rate", "0.02", "--seed", "29"],
                             ground_truth_path=truth) as mock:  # fmt: skip
                soak(mock.url, db, requests, [*extra, *canaries])
                leaked = {r["request_id"]: r["crosstalk"] for r in mock.ground_truth()
                          if r["crosstalk"]}  # fmt: skip
            with sqlite3.connect(db) as connection:
                rows = connection.execute("SELECT request_id, checks, details FROM generations "
                                          "WHERE error_class IS NULL").fetchall()  # fmt: skip
            right = sum(1 for rid, checks, details in rows if checks and rid in leaked
                        and json.loads(details)["crosstalk"]["source"] == leaked[rid])  # fmt: skip
            wrong = sum(1 for rid, checks, _ in rows if checks and rid not in leaked)
            answered = {rid for rid, _, _ in rows}
            injected = sum(1 for rid in leaked if rid in answered)
            how = "canaries + spans" if canaries else "prompt spans    "
            print(
                f"  {name:10s} {how} found with the right source {share(right, injected)}; "
                f"flagged clean rows {share(wrong, len(rows) - injected)}"
            )


def _hfserve(*args: str) -> tuple[subprocess.Popen[str], str]:
    import os

    server = subprocess.Popen(
        [sys.executable, "-m", "tests.hfserve", str(MODEL), "--layers", "6", "--window", "128",
         *args], cwd=REPO, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert server.stdout is not None
    return server, server.stdout.readline().rsplit(" ", 1)[1].strip()


LEAK_CASES = {
    # name: (leak mode, soak arguments, with a clean reference and every request compared)
    "context": ("context", ["--concurrency", "4", "--canaries", "--crosstalk-answers"], False),
    "output": ("output", ["--concurrency", "4", "--canaries", "--crosstalk-answers"], False),
    "context, greedy differential": ("context", ["--concurrency", "8"], True),
    "output, greedy differential": ("output", ["--concurrency", "8"], True),
}


def _leak_run(
    folder: Path, name: str, seed: int, requests: int, max_tokens: int
) -> tuple[Counter[str], int, int, int, int]:
    """One soak of one leak case: leaks found with the right source (by test), leaks, leaks
    whose answer the leak changed (not the reference's answer to its own prompt anyway, where
    compared), clean rows flagged, clean rows."""
    mode, extra, with_reference = LEAK_CASES[name]
    slug = f"{name.replace(' ', '').replace(',', '-')}-{seed}"
    truth, db = folder / f"hf-{slug}.jsonl", folder / f"hf-{slug}.sqlite"
    servers = []
    try:
        server, url = _hfserve("--seed", str(seed), "--crosstalk-at-in-flight", "2",
                               "--crosstalk-rate", "0.3", "--crosstalk-mode", mode,
                               "--ground-truth", str(truth))  # fmt: skip
        servers.append(server)
        if with_reference:
            reference, reference_url = _hfserve()
            servers.append(reference)
            extra = [*extra, "--reference", reference_url, "--reference-fraction", "1"]
        soak(url, db, requests, ["--no-stream", "--max-tokens", str(max_tokens), *extra])
    finally:
        for server in servers:
            server.terminate()
            server.wait(30)
    leaked = {}
    for line in truth.read_text().splitlines():
        record = json.loads(line)
        if record.get("crosstalk"):
            leaked[record["request_id"]] = record["crosstalk"]
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT request_id, checks, details, reference_divergence FROM generations "
            "WHERE error_class IS NULL"
        ).fetchall()
    by: Counter[str] = Counter()
    for rid, checks, details, _ in rows:
        evidence = json.loads(details).get("crosstalk") if checks else None
        if evidence and leaked.get(rid) == evidence["source"]:
            by[evidence["by"]] += 1
    wrong = sum(1 for rid, checks, _, _ in rows if checks and rid not in leaked)
    injected = sum(1 for rid, _, _, _ in rows if rid in leaked)
    changed = sum(1 for rid, _, _, div in rows if rid in leaked and div != -1)
    return by, injected, changed, wrong, len(rows) - injected


def real_leaks(
    folder: Path, requests: int, max_tokens: int, cases: list[str], seeds: int = 1
) -> None:
    print(f"real leaks: the tiny model in tests/hfserve.py, {requests} requests, "
          f"{max_tokens} tokens, not streamed, {seeds} server seed(s)")  # fmt: skip
    for name in cases:
        by: Counter[str] = Counter()
        injected = changed = wrong = clean = 0
        for seed in range(3, 3 + seeds):
            found, leaks, moved, flagged_clean, rows = _leak_run(
                folder, name, seed, requests, max_tokens
            )
            by += found
            injected, changed = injected + leaks, changed + moved
            wrong, clean = wrong + flagged_clean, clean + rows
        found_all = sum(by.values())
        print(
            f"  {name:30s} found with the right source {share(found_all, injected)} "
            f"{dict(by)}; of those the leak changed {share(found_all, changed)}; "
            f"flagged clean rows {share(wrong, clean)}"
        )


def cost(passes: int = 7, answers: int = 2000) -> None:
    """The check's CPU per answer in process (`Crosstalk.answered` then `judge` on the mock's
    64-token answers, 1,024 requests in the window), as shipped and with every span of every answer
    hashed (the filter of e96c48b alone: words are split the same way), best of `passes`
    passes, interleaved."""
    import time

    import soakgate.checks.crosstalk as crosstalk
    from soakgate.mockserver.text import clean_tokens
    from soakgate.prompts import Prompt
    from soakgate.prompts.builtin import builtin_prompts
    from soakgate.records import Generation

    texts = [clean_tokens(1000 + n, 64)[1] for n in range(answers)]
    chunks = []
    for doc in _docstrings():
        words = doc.split()
        chunks += [" ".join(words[i : i + 40]) for i in range(0, len(words) - 39, 40)]
    sets = {
        "built-in prompts": builtin_prompts(),
        "stdlib docstrings (400 prompts)": [Prompt(f"d{n}", c) for n, c in enumerate(chunks[:400])],
        "the answers' own corpus (1,024 prompts)": [
            Prompt(f"c{n}", clean_tokens(90000 + n, 200)[1]) for n in range(1024)
        ],
    }
    shipped = crosstalk.known_runs

    def row_of(n: int, text: str, prompts: list[Prompt]) -> Generation:
        prompt = prompts[n % len(prompts)].prompt_id
        return Generation("run1", f"run1-{n}", "t", "l", 2000 + n, prompt, "completions", False,
                          0.0, 1.0, text=text)  # fmt: skip

    def whole(words: list[str], _known: object, _width: int) -> list[tuple[int, int]]:
        return [(0, len(words))]

    print(f"cost in process: us per answer, best of {passes} passes over {answers} answers")
    for name, prompts in sets.items():
        best = {"shipped": float("inf"), "every span": float("inf")}
        for _ in range(passes):
            for way, runs in (("shipped", shipped), ("every span", whole)):
                crosstalk.known_runs = runs  # type: ignore[assignment]
                check = crosstalk.Crosstalk(crosstalk.CrosstalkSettings(), "run1")
                for seq in range(1024):
                    check.sent(seq, prompts[seq % len(prompts)])
                check.judge([])  # the window filled (its prompts indexed) before the clock
                rows = [row_of(n, text, prompts) for n, text in enumerate(texts)]
                start = time.perf_counter()
                for row in rows:
                    check.answered(row)
                check.judge(rows)  # as the soak's writer hands them over: one batch
                best[way] = min(best[way], (time.perf_counter() - start) / answers * 1e6)
        crosstalk.known_runs = shipped
        ratio = best["shipped"] / best["every span"]
        print(f"  {name:42s} shipped {best['shipped']:5.1f}   every span hashed "
              f"{best['every span']:5.1f}   ratio {ratio:.2f}")  # fmt: skip


def cost_in_soak(requests: int) -> None:
    """The check's CPU per request inside a real soak (`soakgate run` in this process against
    the mock, concurrency 64, 64-token answers not streamed, built-in prompts): every call into
    the check (`sent`, `answered`, and `judge` where the code has it) timed, the timer's own
    cost measured and taken off, beside the process's CPU per request (startup included).
    In a soak the check runs among the network code's work, with colder caches than in the
    in-process figure of `--cost`. Run it against another checkout with PYTHONPATH=that/src."""
    import time

    import benchlib

    import soakgate.checks.crosstalk as crosstalk
    from soakgate.cli.main import main as soakgate_main

    spent, calls = [0.0], [0]

    def timed(name: str) -> None:
        inner = getattr(crosstalk.Crosstalk, name, None)
        if inner is None:
            return

        def wrapper(*args: object, **kwargs: object) -> object:
            began = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - began
                calls[0] += 1

        setattr(crosstalk.Crosstalk, name, wrapper)

    for name in ("sent", "answered", "judge"):
        timed(name)
    began = time.perf_counter()
    for _ in range(100_000):
        time.perf_counter(), time.perf_counter()
    timer = (time.perf_counter() - began) / 100_000
    mock = benchlib.start_mock(benchlib.cores()[0])
    try:
        with tempfile.TemporaryDirectory() as folder:
            argv = benchlib.soak_command(mock.url, Path(folder) / "soak.sqlite", 64, "--requests",
                                         str(requests))[3:]  # fmt: skip
            cpu = time.process_time()
            code = soakgate_main([*argv, "--no-watch-metrics"])
            cpu = time.process_time() - cpu
    finally:
        mock.stop()
    if code != 0:
        raise SystemExit(f"the soak exited {code}")
    check = (spent[0] - calls[0] * timer) / requests * 1e6
    process = cpu / requests * 1e6
    print(f"cost in a soak of {requests:,} requests: the check {check:.2f} us per request "
          f"({calls[0]:,} calls, timer {timer * 1e6:.2f} us each taken off); the process "
          f"{process:.1f} us per request; the check {check / process:.1%} of it")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2500, help="per prompt set (default 2500)")
    parser.add_argument("--mock-requests", type=int, default=2000, help="0: no mock part")
    parser.add_argument("--out", type=Path, default=None, help="keep the databases here")
    parser.add_argument("--skip-real", action="store_true", help="the mock part only")
    parser.add_argument("--cost", action="store_true", help="only the check's CPU per answer")
    parser.add_argument(
        "--cost-in-soak", type=int, default=0, metavar="N",
        help="only the check's CPU per request in a soak of N requests against the mock",
    )  # fmt: skip
    parser.add_argument(
        "--real-leaks",
        type=int,
        default=0,
        metavar="N",
        help="also N requests per leak mode to tests/hfserve.py (e.g. 120)",
    )
    parser.add_argument("--real-leak-tokens", type=int, default=48)
    parser.add_argument("--leak-seeds", type=int, default=1, help="soaks per case, one seed each")
    parser.add_argument(
        "--leak-case", action="append", choices=list(LEAK_CASES), help="only these (repeatable)"
    )
    args = parser.parse_args()
    if args.cost:
        cost()
        return
    if args.cost_in_soak:
        cost_in_soak(args.cost_in_soak)
        return
    folder = args.out or Path(tempfile.mkdtemp(prefix="soakgate-crosstalk-"))
    folder.mkdir(parents=True, exist_ok=True)
    sets = prompt_sets(folder)
    if not args.skip_real:
        false_flags(folder, args.requests, sets)
    if args.mock_requests:
        found(folder, args.mock_requests, sets)
    if args.real_leaks:
        cases = args.leak_case or list(LEAK_CASES)
        real_leaks(folder, args.real_leaks, args.real_leak_tokens, cases, args.leak_seeds)


if __name__ == "__main__":
    main()
