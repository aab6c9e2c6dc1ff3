"""Build the audit corpus from pinned PyPI sdists, in a cache outside the repository.

    python bench/fetch_audit_corpus.py [--corpus tests/audit/corpus] [--cache DIR] [--offline]

The corpus's manifests and truth files are committed (`tests/audit/corpus/`); the kernel code
they describe is not. `sdists.toml` pins each source distribution (URL on
files.pythonhosted.org, size and the sha256 the PyPI simple index publishes) and each
library's `SOURCE.toml` names the sdist and which of its files make up the library's tree
(`include` / `exclude` globs on paths inside the sdist, `**` crossing folders). This script
downloads each sdist once into `<cache>/sdists/`, refuses it unless size and sha256 match,
and extracts only the selected regular files into `<cache>/trees/<library>/`, whole and
unedited. A tree is rebuilt when its manifest entry changes.

The cache defaults to `$SOAKGATE_AUDIT_CORPUS_CACHE` or `~/.cache/soakgate/audit-corpus`.
With `--offline` nothing is downloaded: a missing sdist is an error. Any failure (no network,
a digest that does not match, a manifest that does not parse) is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "audit" / "corpus"
DOWNLOAD_TIMEOUT_S = 60
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_URL = re.compile(
    r"^https://files\.pythonhosted\.org/packages/[0-9a-f/]+/([A-Za-z0-9_.\-]+\.tar\.gz)$"
)


class CorpusError(Exception):
    """Why the corpus cannot be built, in one line."""


@dataclass(frozen=True, slots=True)
class Sdist:
    """One pinned source distribution."""

    key: str
    project: str
    version: str
    url: str
    sha256: str
    size: int
    licence: str

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass(frozen=True, slots=True)
class Library:
    """One corpus library: which files of which sdist make up its tree."""

    name: str
    sdist: str
    include: tuple[str, ...]
    exclude: tuple[str, ...]

    def stamp(self, sdist: Sdist) -> str:
        """What the tree was built from; a different stamp means rebuild."""
        return json.dumps([sdist.sha256, self.include, self.exclude])


def default_cache() -> Path:
    raw = os.environ.get("SOAKGATE_AUDIT_CORPUS_CACHE") or "~/.cache/soakgate/audit-corpus"
    return Path(raw).expanduser()


def _load_toml(path: Path) -> dict[str, object]:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CorpusError(f"cannot read {path}: {exc}") from exc


def load_manifest(corpus: Path) -> tuple[dict[str, Sdist], list[Library]]:
    """The pinned sdists and the corpus libraries, checked for form (no I/O beyond reading)."""
    unsourced = sorted(
        d.parent.name for d in corpus.glob("*/truth") if not (d.parent / "SOURCE.toml").is_file()
    )
    if unsourced:
        raise CorpusError(
            f"no SOURCE.toml naming where the code of {', '.join(unsourced)} comes from "
            f"(see {corpus / 'README.md'})"
        )
    raw = _load_toml(corpus / "sdists.toml").get("sdist")
    if not isinstance(raw, dict) or not raw:
        raise CorpusError(f'{corpus / "sdists.toml"}: no [sdist."name-version"] tables')
    sdists = {key: _sdist(key, entry) for key, entry in raw.items()}
    libraries = []
    for source in sorted(corpus.glob("*/SOURCE.toml")):
        libraries.append(_library(source, sdists))
    if not libraries:
        raise CorpusError(f"{corpus}: no <library>/SOURCE.toml")
    return sdists, libraries


def _sdist(key: str, entry: object) -> Sdist:
    if not isinstance(entry, dict):
        raise CorpusError(f"sdists.toml: [sdist.{key!r}] is not a table")
    try:
        sdist = Sdist(
            key,
            str(entry["project"]),
            str(entry["version"]),
            str(entry["url"]),
            str(entry["sha256"]),
            int(entry["size"]),
            str(entry["licence"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorpusError(f"sdists.toml: [sdist.{key!r}] lacks or mistypes {exc}") from exc
    match = _URL.match(sdist.url)
    if match is None or match.group(1) != f"{key}.tar.gz":
        raise CorpusError(
            f"sdists.toml: {key}: url must be https://files.pythonhosted.org/.../{key}.tar.gz"
        )
    if not _HEX64.match(sdist.sha256):
        raise CorpusError(f"sdists.toml: {key}: sha256 must be 64 lowercase hex digits")
    if sdist.version not in key:
        raise CorpusError(f"sdists.toml: {key}: version {sdist.version} is not in the name")
    return sdist


def _library(source: Path, sdists: dict[str, Sdist]) -> Library:
    data = _load_toml(source)
    name = source.parent.name
    sdist = data.get("sdist")
    if sdist not in sdists:
        raise CorpusError(f"{source}: sdist {sdist!r} is not pinned in sdists.toml")
    include = tuple(str(p) for p in data.get("include", []))  # type: ignore[attr-defined]
    exclude = tuple(str(p) for p in data.get("exclude", []))  # type: ignore[attr-defined]
    if not include:
        raise CorpusError(f"{source}: include names no files")
    for pattern in include + exclude:
        parts = PurePosixPath(pattern).parts
        if pattern.startswith("/") or ".." in parts or not parts:
            raise CorpusError(f"{source}: {pattern!r} is not a relative path inside the sdist")
    return Library(name, str(sdist), include, exclude)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A path glob as a regex: `**/` any folders (or none), `**` anything, `*`/`?` in a name.

    Written by hand because `PurePath.full_match` (which knows `**`) needs Python 3.13.
    """
    out = []
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            out.append(".*")
            index += 2
        elif pattern[index] == "*":
            out.append("[^/]*")
            index += 1
        elif pattern[index] == "?":
            out.append("[^/]")
            index += 1
        else:
            out.append(re.escape(pattern[index]))
            index += 1
    return re.compile("".join(out) + r"\Z")


def select(paths: list[str], library: Library) -> list[str]:
    """The sdist-relative paths that make up the library's tree."""
    include = [glob_regex(p) for p in library.include]
    exclude = [glob_regex(p) for p in library.exclude]
    return [
        p
        for p in paths
        if any(r.match(p) for r in include) and not any(r.match(p) for r in exclude)
    ]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(sdist: Sdist, cache: Path, offline: bool) -> Path:
    """The verified archive in `<cache>/sdists/`, downloaded first unless offline."""
    target = cache / "sdists" / sdist.filename
    if target.is_file() and target.stat().st_size == sdist.size and _sha256(target) == sdist.sha256:
        return target
    if target.exists():
        target.unlink()
    if offline:
        raise CorpusError(
            f"{sdist.filename} is not in {target.parent} and --offline forbids downloading it "
            f"(from {sdist.url})"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".part", delete=False) as part:
        partial = Path(part.name)
        try:
            with urllib.request.urlopen(sdist.url, timeout=DOWNLOAD_TIMEOUT_S) as response:
                shutil.copyfileobj(response, part)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            partial.unlink(missing_ok=True)
            reason = getattr(exc, "reason", exc)
            raise CorpusError(
                f"cannot download {sdist.url}: {reason} (no network? put {sdist.filename} in "
                f"{target.parent} by other means, or run where files.pythonhosted.org is reachable)"
            ) from exc
    actual = _sha256(partial)
    if actual != sdist.sha256 or partial.stat().st_size != sdist.size:
        partial.unlink()
        raise CorpusError(
            f"{sdist.filename} from {sdist.url} has sha256 {actual}, not the pinned {sdist.sha256}"
        )
    partial.replace(target)
    return target


def build_tree(library: Library, sdist: Sdist, archive: Path, cache: Path) -> Path:
    """Extract the library's files (first path component stripped) into `<cache>/trees/`."""
    tree = cache / "trees" / library.name
    stamp = cache / "trees" / f"{library.name}.stamp"
    if tree.is_dir() and stamp.is_file() and stamp.read_text() == library.stamp(sdist):
        return tree
    tree.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=tree.parent, prefix=f".{library.name}-"))
    try:
        _extract(library, archive, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if tree.exists():
        shutil.rmtree(tree)
    staging.replace(tree)
    stamp.write_text(library.stamp(sdist))
    return tree


def _extract(library: Library, archive: Path, staging: Path) -> None:
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = {_strip(m.name): m for m in tar.getmembers() if m.isfile()}
            wanted = select(sorted(k for k in members if k), library)
            if not wanted:
                raise CorpusError(f"{library.name}: no file of {archive.name} matches its include")
            for path in wanted:
                member = members[path]
                member.name = path
                tar.extract(member, staging, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise CorpusError(f"cannot extract {archive}: {exc}") from exc


def _strip(name: str) -> str:
    parts = PurePosixPath(name).parts
    return "/".join(parts[1:]) if len(parts) > 1 else ""


def ensure_corpus(corpus: Path, cache: Path, offline: bool = False) -> dict[str, Path]:
    """Library name -> its built tree, fetching and extracting what is missing."""
    sdists, libraries = load_manifest(corpus)
    (cache / "trees").mkdir(parents=True, exist_ok=True)
    archives: dict[str, Path] = {}
    trees = {}
    for library in libraries:
        sdist = sdists[library.sdist]
        if sdist.key not in archives:
            archives[sdist.key] = fetch(sdist, cache, offline)
        trees[library.name] = build_tree(library, sdist, archives[sdist.key], cache)
    return trees


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--corpus", default=str(CORPUS))
    parser.add_argument("--cache", default=None, help="default: " + str(default_cache()))
    parser.add_argument("--offline", action="store_true", help="never download")
    args = parser.parse_args()
    cache = Path(args.cache).expanduser() if args.cache else default_cache()
    try:
        trees = ensure_corpus(Path(args.corpus), cache, args.offline)
    except CorpusError as exc:
        print(f"audit corpus: {exc}", file=sys.stderr)
        return 2
    for name, tree in trees.items():
        files = sum(1 for p in tree.rglob("*") if p.is_file())
        print(f"{name:16} {files:6} files  {tree}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
