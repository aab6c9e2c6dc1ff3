"""The audit corpus is built from pinned PyPI sdists, never from committed third-party code.

These tests need no network: the manifest is checked for form, the fetch step is run on a
small sdist written here (served from the cache, as a real one is after its first download),
and the accuracy bench is run where the corpus cannot be had, with downloads pointed at a
closed port on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import socket
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "audit" / "corpus"
BENCH = ROOT / "bench"


def _fetch_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fetch_audit_corpus", BENCH / "fetch_audit_corpus.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fetch_audit_corpus"] = module
    spec.loader.exec_module(module)
    return module


fetch = _fetch_module()


def test_the_committed_manifest_is_well_formed_and_large_enough() -> None:
    sdists, libraries = fetch.load_manifest(CORPUS)
    assert {lib.sdist for lib in libraries} <= set(sdists)
    ops = 0
    projects = set()
    for lib in libraries:
        projects.add(sdists[lib.sdist].project)
        truths = sorted((CORPUS / lib.name / "truth").glob("*.toml"))
        assert truths, lib.name
        for path in truths:
            data = tomllib.loads(path.read_text())
            assert "::" in data["op"], path
            assert data["set"] in {"development", "held-out"}, path
            assert set(data["written"]) <= set(data["why"]), path  # every write says why
            undecidable = set(data.get("undecidable", []))
            assert undecidable <= set(data["why"]), path  # and every undecidable parameter
            assert not undecidable & set(data["written"]), path
            assert all(data["why"].values()), path
            ops += 1
    # the acceptance of issue 16: at least 60 ops from at least 6 libraries
    assert ops >= 60 and len(projects) >= 6
    # nothing third-party is committed under the corpus: manifests and truth files only
    tracked = subprocess.run(
        ["git", "ls-files", str(CORPUS)], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.split()
    assert tracked and all(p.endswith((".toml", ".md")) for p in tracked), tracked


def test_a_malformed_manifest_is_refused(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "SOURCE.toml").write_text('sdist = "pkg-1.0"\ninclude = ["**"]\n')
    good = _sdist_entry("pkg-1.0", "0" * 64, 1)
    for broken, message in [
        (good.replace("0" * 64, "abc"), "sha256"),
        (good.replace("files.pythonhosted.org", "example.com"), "url"),
        (good.replace("size = 1\n", ""), "size"),
    ]:
        (tmp_path / "sdists.toml").write_text(broken)
        with pytest.raises(fetch.CorpusError, match=message):
            fetch.load_manifest(tmp_path)
    (tmp_path / "sdists.toml").write_text(good)
    (tmp_path / "lib" / "SOURCE.toml").write_text('sdist = "pkg-1.0"\ninclude = ["../x"]\n')
    with pytest.raises(fetch.CorpusError, match="not a relative path"):
        fetch.load_manifest(tmp_path)
    (tmp_path / "orphan" / "truth").mkdir(parents=True)  # truth without a source: named
    with pytest.raises(fetch.CorpusError, match="the code of orphan comes from"):
        fetch.load_manifest(tmp_path)


def _sdist_entry(key: str, sha: str, size: int) -> str:
    return (
        f'[sdist."{key}"]\nproject = "pkg"\nversion = "1.0"\n'
        f'url = "https://files.pythonhosted.org/packages/ab/cd/{key}.tar.gz"\n'
        f'sha256 = "{sha}"\nsize = {size}\nlicence = "MIT"\n'
    )


def _tarball(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _small_corpus(tmp_path: Path, archive: bytes, include: str, exclude: str = "") -> Path:
    corpus = tmp_path / "corpus"
    (corpus / "lib" / "truth").mkdir(parents=True)
    digest = hashlib.sha256(archive).hexdigest()
    (corpus / "sdists.toml").write_text(_sdist_entry("pkg-1.0", digest, len(archive)))
    (corpus / "lib" / "SOURCE.toml").write_text(
        f'sdist = "pkg-1.0"\ninclude = [{include}]\nexclude = [{exclude}]\n'
    )
    return corpus


def test_the_fetch_step_extracts_only_the_listed_files_from_a_verified_archive(
    tmp_path: Path,
) -> None:
    archive = _tarball(
        {
            "pkg-1.0/LICENSE": b"MIT\n",
            "pkg-1.0/csrc/ops.cu": b"// kernel\n",
            "pkg-1.0/csrc/core/reg.h": b"// header\n",
            "pkg-1.0/csrc/cpu/ops.cpp": b"// other build\n",
            "pkg-1.0/setup.py": b"# not wanted\n",
        }
    )
    corpus = _small_corpus(tmp_path, archive, '"LICENSE", "csrc/**"', '"csrc/cpu/**"')
    cache = tmp_path / "cache"
    (cache / "sdists").mkdir(parents=True)
    (cache / "sdists" / "pkg-1.0.tar.gz").write_bytes(archive)
    trees = fetch.ensure_corpus(corpus, cache, offline=True)
    tree = trees["lib"]
    files = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file())
    assert files == ["LICENSE", "csrc/core/reg.h", "csrc/ops.cu"]
    assert (tree / "csrc" / "ops.cu").read_bytes() == b"// kernel\n"  # whole and unedited
    # a second run reuses the tree; a changed manifest rebuilds it
    (tree / "marker").write_text("kept")
    assert (fetch.ensure_corpus(corpus, cache, offline=True)["lib"] / "marker").exists()
    source = corpus / "lib" / "SOURCE.toml"
    source.write_text(source.read_text().replace('"csrc/cpu/**"', ""))
    rebuilt = fetch.ensure_corpus(corpus, cache, offline=True)["lib"]
    assert not (rebuilt / "marker").exists() and (rebuilt / "csrc" / "cpu" / "ops.cpp").exists()


def test_a_member_escaping_the_tree_is_refused(tmp_path: Path) -> None:
    archive = _tarball({"pkg-1.0/../../evil.cu": b"x", "pkg-1.0/ok.cu": b"y"})
    corpus = _small_corpus(tmp_path, archive, '"**"')
    cache = tmp_path / "cache"
    (cache / "sdists").mkdir(parents=True)
    (cache / "sdists" / "pkg-1.0.tar.gz").write_bytes(archive)
    with pytest.raises(fetch.CorpusError, match="cannot extract"):
        fetch.ensure_corpus(corpus, cache, offline=True)
    assert not (tmp_path / "evil.cu").exists() and not (cache / "evil.cu").exists()


def _run(
    script: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_wrong_digest_is_one_line_and_exit_2(tmp_path: Path) -> None:
    archive = _tarball({"pkg-1.0/ok.cu": b"y"})
    corpus = _small_corpus(tmp_path, archive, '"**"')
    cache = tmp_path / "cache"
    (cache / "sdists").mkdir(parents=True)
    (cache / "sdists" / "pkg-1.0.tar.gz").write_bytes(archive + b"tampered")
    done = _run(
        "fetch_audit_corpus.py", "--corpus", str(corpus), "--cache", str(cache), "--offline"
    )
    assert done.returncode == 2
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert "not in" in done.stderr and "--offline" in done.stderr
    assert not (cache / "sdists" / "pkg-1.0.tar.gz").exists()  # the bad copy is not kept


def test_the_bench_without_the_corpus_fails_in_one_line(tmp_path: Path) -> None:
    offline = _run("bench_audit_accuracy.py", "--cache", str(tmp_path / "empty"), "--offline")
    assert offline.returncode == 2, offline.stdout + offline.stderr
    assert offline.stdout == "" and len(offline.stderr.splitlines()) == 1, offline.stderr
    assert offline.stderr.startswith("audit corpus:") and "--offline" in offline.stderr
    # no network: downloads go through a proxy on a closed loopback port and fail at once
    proxy = f"http://127.0.0.1:{_closed_port()}"
    env = {k: v for k, v in os.environ.items() if k.lower() not in {"no_proxy", "https_proxy"}}
    env.update(https_proxy=proxy, HTTPS_PROXY=proxy)
    unreachable = _run("bench_audit_accuracy.py", "--cache", str(tmp_path / "c2"), env=env)
    assert unreachable.returncode == 2, unreachable.stdout + unreachable.stderr
    assert unreachable.stdout == "" and len(unreachable.stderr.splitlines()) == 1
    assert "cannot download https://files.pythonhosted.org/" in unreachable.stderr
    assert "no network?" in unreachable.stderr
    assert not list((tmp_path / "c2").rglob("*.part"))


def test_a_parameter_the_truth_leaves_undecidable_is_scored_neither_way() -> None:
    """A truth's `undecidable` parameters (written, if at all, outside the tree) count as
    neither a hit, a miss nor a false claim; the audit's claims on them are listed apart."""
    from soakgate.audit.scan import audit_paths

    spec = importlib.util.spec_from_file_location(
        "bench_audit_accuracy", BENCH / "bench_audit_accuracy.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_audit_accuracy"] = bench  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    result = audit_paths([str(ROOT / "tests/audit/fixtures/patterns/p29_registration_wrappers")])
    truths = [
        bench.Truth("sglang::scale_inplace", set(), {}, "held-out", {"x"}),  # claimed: x
        bench.Truth("sglang::fill_out", {"out"}, {}, "held-out", {"x"}),  # x not claimed
    ]
    counts = bench.Counts()
    bench.score_inference(result, truths, counts)
    assert (counts.tp, counts.fp, counts.fn, counts.unjudged) == (1, 0, 0, 2)
    assert counts.unjudged_claims == ["sglang::scale_inplace:x"]
