"""The name the build gives `TORCH_EXTENSION_NAME` in each translation unit, read from the
tree's build files rather than guessed from a `#define`.

A kernel library that registers its ops with `TORCH_LIBRARY(TORCH_EXTENSION_NAME, m)` leaves the
namespace to the build: torch's `cpp_extension` passes `-DTORCH_EXTENSION_NAME=<last part of the
extension's name>` (`CUDAExtension(name="vllm._C", ...)` gives `_C`), vLLM's CMake passes the
target's name (`define_gpu_extension_target(_moe_C ... SOURCES ${VLLM_MOE_EXT_SRC})`), and a
build may spell the flag itself (`-DTORCH_EXTENSION_NAME=foo`). One tree often builds several
extensions, so the name is a property of the file: the extension whose sources list it. Where
no extension lists the file and the build names exactly one, that one is taken; otherwise the
name stays unresolved (never guessed).

Hand-written: the build files are read, not run (running a package's `setup.py` or CMake is
not an option for an audit), and only the forms above are understood: `setup.py` through
Python's `ast` (literal names and source lists, module-level string constants), CMake through
`set`/`list(APPEND ...)` variables and the target calls named above.
"""

from __future__ import annotations

import ast
import contextlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from soakgate.audit.py_fakes import called_name, string_constants, strings

MACRO = "TORCH_EXTENSION_NAME"
_FLAG = re.compile(r"-D\s*TORCH_EXTENSION_NAME=([A-Za-z_]\w*)\b")
_CMAKE_FLAG = re.compile(r"\bTORCH_EXTENSION_NAME=([A-Za-z_]\w*)\b")
_SET = re.compile(r"\b(set|list)\s*\(([^()]*)\)", re.IGNORECASE)
_TARGET = re.compile(r"\bdefine_\w*extension_target\s*\(([^()]*)\)", re.IGNORECASE)
_VAR = re.compile(r"\$\{(\w+)\}")
_KEYWORD = re.compile(r"[A-Z][A-Z0-9_]+")
_SOURCE = re.compile(r"\.(c|cc|cpp|cxx|cu|cuh|h|hpp|hip|mm)$", re.IGNORECASE)
ANCESTORS = 4  # directories above an audited folder searched for its build files


@dataclass(frozen=True, slots=True)
class Extension:
    """One extension a build file defines: the value its units see for TORCH_EXTENSION_NAME
    and the sources it lists (relative to `root`; empty when the build file lists none it can
    read)."""

    name: str
    sources: tuple[str, ...]
    root: str


def setup_extensions(source: bytes, root: str) -> list[Extension]:
    """Extensions a `setup.py` defines: every `*Extension(...)` call with a literal name."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    env = string_constants(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and called_name(node).endswith("Extension")):
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        name_node = keywords.get("name", node.args[0] if node.args else None)
        names = strings(name_node, env)
        flags = [m.group(1) for n in ast.walk(node) if isinstance(n, ast.Constant)
                 and isinstance(n.value, str) for m in _FLAG.finditer(n.value)]  # fmt: skip
        if flags:
            names = [flags[-1]]
        elif len(names) == 1:
            names = [names[0].rsplit(".", 1)[-1]]
        if len(names) != 1 or not names[0].isidentifier():
            continue
        listed = keywords.get("sources", node.args[1] if len(node.args) > 1 else None)
        elements = listed.elts if isinstance(listed, ast.List | ast.Tuple) else []
        sources = tuple(s for e in elements for s in strings(e, env))
        found.append(Extension(names[0], sources, root))
    return found


def _tokens(text: str) -> list[str]:
    """CMake arguments (comments already removed): whitespace-separated, quotes dropped."""
    return [t.strip("\"'") for t in text.split() if t.strip("\"'")]


def cmake_extensions(text: str, root: str) -> list[Extension]:
    """Extensions a CMake file defines: `define_*_extension_target(NAME ... SOURCES ${VAR})`
    (vLLM's form, whose function passes `-DTORCH_EXTENSION_NAME=${NAME}`), and a literal
    `TORCH_EXTENSION_NAME=name` (a flag the file spells itself: its units unknown)."""
    text = re.sub(r"#[^\n]*", "", text)
    variables: dict[str, list[str]] = {}
    for match in _SET.finditer(text):
        words = _tokens(match.group(2))
        if match.group(1).lower() == "set" and words:
            variables[words[0]] = words[1:]
        elif len(words) >= 2 and words[0].upper() == "APPEND":
            variables.setdefault(words[1], []).extend(words[2:])

    def expand(word: str, depth: int = 0) -> list[str]:
        whole = _VAR.fullmatch(word)
        if whole and depth < 8:
            return [x for w in variables.get(whole.group(1), []) for x in expand(w, depth + 1)]
        return [word]

    found = []
    for match in _TARGET.finditer(text):
        words = _tokens(match.group(1))
        if not words or not words[0].isidentifier():
            continue
        sources: list[str] = []
        keyword = ""
        for word in words[1:]:
            if _KEYWORD.fullmatch(word):
                keyword = word
            elif keyword == "SOURCES":
                sources.extend(s for s in expand(word) if _SOURCE.search(s))
        found.append(Extension(words[0], tuple(sources), root))
    for name in dict.fromkeys(_CMAKE_FLAG.findall(text)):
        found.append(Extension(name, (), root))
    return found


def build_files(
    roots: Iterable[Path], shallow: Iterable[Path] = (), skip: frozenset[str] = frozenset()
) -> dict[str, bytes]:
    """`setup.py`, `CMakeLists.txt` and `*.cmake` under the audited folders `roots`, in the
    folders of audited files (`shallow`, not below them), and in up to `ANCESTORS` folders
    above each (a tree audited from its `csrc/` keeps its build files at the top), stopping at
    a repository's root; folders named in `skip` (the audit's own) are not searched."""
    seen: dict[str, bytes] = {}

    def add(path: Path) -> None:
        if str(path) not in seen and path.is_file():
            with contextlib.suppress(OSError):
                seen[str(path)] = path.read_bytes()

    deep = {str(r): r for r in roots if r.is_dir()}
    for root in [*deep.values(), *(r for r in shallow if r.is_dir() and str(r) not in deep)]:
        for pattern in ("setup.py", "CMakeLists.txt", "*.cmake"):
            found = root.rglob(pattern) if str(root) in deep else root.glob(pattern)
            for path in sorted(found):
                if not skip.intersection(path.relative_to(root).parts):
                    add(path)
        above = root.resolve()
        for _ in range(ANCESTORS):
            if (above / ".git").exists() or above.parent == above:
                break
            above = above.parent
            for name in ("setup.py", "CMakeLists.txt"):
                add(above / name)
            cmake = above / "cmake"
            for path in sorted(cmake.glob("*.cmake")) if cmake.is_dir() else []:
                add(path)
    return seen


def extensions(files: Mapping[str, bytes]) -> list[Extension]:
    """Every extension the build files define."""
    found: list[Extension] = []
    for path, data in files.items():
        root = Path(path).resolve().parent.as_posix()
        if Path(path).name == "setup.py":
            found.extend(setup_extensions(data, root))
        else:
            found.extend(cmake_extensions(data.decode("utf-8", "replace"), root))
    return found


def _lists(extension: Extension, unit: PurePosixPath) -> bool:
    """The extension's sources name this translation unit (paths relative to its build file's
    folder, as CMake and setuptools read them)."""
    for source in extension.sources:
        listed = Path(extension.root, source.replace("\\", "/"))
        if PurePosixPath(listed.resolve().as_posix()) == unit:
            return True
    return False


def extension_name(found: list[Extension], unit: str) -> str | None:
    """TORCH_EXTENSION_NAME in this translation unit, from the build files of folders above it:
    the name of the extension(s) listing it, else their only name; None when they leave it
    open (or none is above it)."""
    path = PurePosixPath(Path(unit).resolve().as_posix())
    above = [e for e in found if PurePosixPath(e.root) in path.parents]
    listing = {e.name for e in above if _lists(e, path)}
    if len(listing) == 1:
        return listing.pop()
    if listing:
        return None
    names = {e.name for e in above}
    return names.pop() if len(names) == 1 else None
