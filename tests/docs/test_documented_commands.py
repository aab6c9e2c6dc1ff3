"""Every command README.md and docs/*.md show is exercised by a test (tests/docs/registry.py says
how): run here against the mock, collected, or run by a named test that needs an environment.
A command added to the docs without an entry fails `test_every_documented_command_has_an_entry`."""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.audit.conftest import KERNLIB
from tests.cli.helpers import soakgate
from tests.docs.extract import REPO, documented_commands
from tests.docs.registry import A_URL, B_URL, COMMANDS, Collect, Covered, Names, Run, Serve

from soakgate.mockserver.process import MockProcess

DOCUMENTED = documented_commands()
TEXTS = sorted({c.text for c in DOCUMENTED})


def _of(kind: type) -> list[str]:
    return sorted(text for text, entry in COMMANDS.items() if isinstance(entry, kind))


def test_every_documented_command_has_an_entry() -> None:
    missing = [f"{c.where}: {c.text}" for c in DOCUMENTED if c.text not in COMMANDS]
    assert not missing, "documented commands no test exercises:\n" + "\n".join(missing)


def test_every_entry_is_still_documented() -> None:
    stale = sorted(set(COMMANDS) - set(TEXTS))
    assert not stale, "entries of commands no document shows:\n" + "\n".join(stale)


def _marks(source: str, aliases: dict[str, str]) -> set[str]:
    found = set(re.findall(r"pytest\.mark\.(\w+)", source))
    return found | {mark for alias, mark in aliases.items() if re.search(rf"\b{alias}\b", source)}


def _test_functions(path: Path) -> dict[str, set[str]]:
    """Test function name -> the pytest marks on it or on its module (`pytestmark`), also
    through a module-level alias (`llamacpp_only = pytest.mark.llamacpp`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases: dict[str, str] = {}
    module_marks: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            value = ast.unparse(node.value)
            if node.targets[0].id == "pytestmark":
                module_marks |= _marks(value, aliases)
            elif match := re.fullmatch(r"pytest\.mark\.(\w+)", value):
                aliases[node.targets[0].id] = match.group(1)
    functions = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            decorators = " ".join(ast.unparse(d) for d in node.decorator_list)
            functions[node.name] = _marks(decorators, aliases) | module_marks
    return functions


@pytest.mark.parametrize("text", _of(Covered))
def test_a_covering_test_exists_and_carries_its_marker(text: str) -> None:
    entry = COMMANDS[text]
    assert isinstance(entry, Covered)
    file, _, name = entry.test.partition("::")
    path = REPO / file
    assert path.is_file(), f"{text}: no {file}"
    functions = _test_functions(path)
    assert name in functions, f"{text}: no {name} in {file}"
    if entry.marker is not None:
        assert entry.marker in functions[name], f"{entry.test} is not marked {entry.marker}"


@pytest.mark.parametrize("text", _of(Names))
def test_a_mentioned_command_is_documented_in_full(text: str) -> None:
    entry = COMMANDS[text]
    assert isinstance(entry, Names)
    full = [
        t for t in TEXTS if t.startswith(entry.covers) and not isinstance(COMMANDS.get(t), Names)
    ]
    assert full, f"{text!r} names a command no document shows in full"


@pytest.mark.parametrize("text", _of(Collect))
def test_a_documented_pytest_command_selects_tests(text: str) -> None:
    words = shlex.split(text)
    env = dict(os.environ)
    while "=" in words[0]:
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert words[:3] == ["python", "-m", "pytest"], text
    args = [a for a in words[3:] if a not in ("-s", "-q")]
    # collected once, in this process (-n 0): xdist's workers would each collect the suite again
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args,
         "-n", "0"],
        capture_output=True, text=True, timeout=600, cwd=REPO, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    counted = re.search(r"(\d+)(?:/\d+)? tests? (?:collected|selected)", done.stdout)
    assert counted and int(counted.group(1)) > 0, done.stdout[-1000:]


# ---- commands run here, against the mock ----


@pytest.fixture(scope="module")
def mocks() -> Iterator[tuple[str, str]]:
    """Stand-ins for http://127.0.0.1:8000 (clean) and :8001 (collapsing 30%)."""
    clean = MockProcess(["--seed", "1"]).start()
    collapsing = MockProcess(["--seed", "2", "--collapse-rate", "0.3"]).start()
    try:
        yield clean.url, collapsing.url
    finally:
        clean.close()
        collapsing.close()


@pytest.fixture(scope="module")
def template(mocks: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the documented commands expect to find: a database with eager, compiled and graph
    runs (as runs.sqlite, demo.sqlite, soakgate-demo.sqlite, diff.sqlite), the kernel
    fixture as `kernels/`, and the examples folder."""
    folder = tmp_path_factory.mktemp("docs-template")
    db = folder / "runs.sqlite"
    for label, url in (("eager", mocks[0]), ("compiled", mocks[1]), ("graph", mocks[1])):
        done = soakgate("run", "--target", f"gpu0={url}", "--label", label, "--requests", "40",
                        "--max-tokens", "128", "--db", str(db), "--quiet", cwd=folder)  # fmt: skip
        assert done.returncode == 0, done.stderr
    for name in ("demo.sqlite", "soakgate-demo.sqlite", "diff.sqlite"):
        shutil.copy(db, folder / name)
    shutil.copytree(KERNLIB, folder / "kernels")
    shutil.copytree(REPO / "examples", folder / "examples")
    return folder


def _prepared(text: str, replace: tuple[tuple[str, str], ...], mocks: tuple[str, str]) -> str:
    for old, new in replace:
        assert old in text, f"replacement {old!r} no longer matches {text!r}"
        text = text.replace(old, new)
    return text.replace(A_URL, mocks[0]).replace(B_URL, mocks[1])


def _argv(text: str) -> list[str]:
    words = shlex.split(text)
    assert words[0] == "soakgate", text
    return [sys.executable, "-m", "soakgate", *words[1:]]


@pytest.mark.slow
@pytest.mark.parametrize("text", _of(Run))
def test_a_documented_command_runs(
    text: str, mocks: tuple[str, str], template: Path, tmp_path: Path
) -> None:
    entry = COMMANDS[text]
    assert isinstance(entry, Run)
    cwd = tmp_path / "here"
    shutil.copytree(template, cwd)
    before = {p.name for p in cwd.iterdir()}
    (cwd / "out").mkdir()
    command = _prepared(text, entry.replace, mocks)
    if entry.shell:
        line = command.replace("soakgate ", f"{shlex.quote(sys.executable)} -m soakgate ")
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=300,
                              cwd=cwd)  # fmt: skip
    else:
        done = subprocess.run(_argv(command), capture_output=True, text=True, timeout=300,
                              cwd=cwd)  # fmt: skip
    assert done.returncode == entry.code, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr
    for name in entry.creates:
        assert (cwd / name).exists(), f"{command} did not write {name}"
    made = {p.name for p in cwd.iterdir()} - before - {"out"}
    made = {n for n in made if not n.endswith((".sqlite-wal", ".sqlite-shm"))}  # SQLite's own
    assert made <= {Path(n).parts[0] for n in entry.creates}, f"{command} also wrote {made}"


@pytest.mark.parametrize("text", _of(Serve))
def test_a_documented_server_starts_and_stops(text: str, tmp_path: Path) -> None:
    entry = COMMANDS[text]
    assert isinstance(entry, Serve)
    command = _prepared(text, entry.replace, ("", ""))
    if "--port" not in command:
        command += " --port 0"  # the documented port may be taken here
    server = subprocess.Popen(_argv(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              cwd=tmp_path, start_new_session=True)  # fmt: skip
    try:
        assert server.stdout is not None
        deadline = time.monotonic() + 60
        line = b""
        while time.monotonic() < deadline and server.poll() is None and b"\n" not in line:
            line += server.stdout.read1(4096)
        assert entry.ready.encode() in line, line
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        code = server.wait(30)
        for stream in (server.stdout, server.stderr):
            if stream is not None:
                stream.close()
    assert code == 0


# ---- what the other entries name ----


def test_documented_pip_extras_exist() -> None:
    """Every `pip install` the docs show names an extra or a package the project declares."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    declared = {re.split(r"[<>=\[ ]", d)[0].lower() for group in extras.values() for d in group}
    for text in (t for t in TEXTS if t.startswith("pip ")):
        for wanted in re.findall(r"\.\[([\w,]+)\]", text):
            assert set(wanted.split(",")) <= set(extras), text
        for word in shlex.split(text)[2:]:
            if not word.startswith(("-", ".")):
                assert word.lower() in declared, f"{text}: {word} is in no extra"


def test_ci_runs_the_suite() -> None:
    """`bash .ci/run` installs the README's extras and runs the README's test command."""
    script = (REPO / ".ci" / "run").read_text()
    assert "pip install -q -e '.[dev,torch,llamacpp,nvml,ray]'" in script
    assert re.search(r"^python -m pytest$", script, re.M)


def test_documented_bench_scripts_exist() -> None:
    """`python bench/X.py` in the docs: the script exists, and tests/bench runs it."""
    smoke = (REPO / "tests" / "bench" / "test_bench_smoke.py").read_text()
    for text in (t for t in TEXTS if t.startswith("python bench/")):
        script = shlex.split(text)[1]
        assert (REPO / script).is_file(), text
        assert Path(script).stem.removeprefix("bench_") in smoke, f"{text}: not in the bench smoke"


def test_documented_campaigns_keep_logs_beside_a_chosen_database() -> None:
    """A campaign writes its servers' logs next to its database: every documented campaign
    command names a database in a folder (made first where it is new), never a bare file name
    that would leave `NAME.logs/` in the repository root."""
    campaigns = [t for t in TEXTS if t.startswith("soakgate campaign ")]
    assert campaigns
    for text in campaigns:
        db = shlex.split(text)[shlex.split(text).index("--db") + 1]
        if db.startswith("~/"):
            folder = str(Path(db).parent)
            assert f"mkdir -p {folder}" in TEXTS, f"{text}: nothing makes {folder}"
        elif db != "runs.sqlite":  # docs/campaigns.md's generic example, in the user's folder
            assert Path(db).is_absolute(), text
