"""Which of several same-named C++ definitions a call reaches.

A kernel tree often holds more than one function of a name: the CUDA body and the CPU file's
body of one op (built into different extensions, or selected by the dispatch key), an unrelated
helper that happens to share a name with one in another folder, or `#if` alternatives of one
function in one file. Merging them all makes the writes of one the writes of the others
(high-confidence false writes, which `--fix` then annotates). A call is resolved as the
compiler and linker would see it:

1. definitions in the caller's own file (its `#if` alternatives are all kept: which one is
   compiled depends on the build, and the schema must cover each);
2. else definitions in the files it includes, directly or not (`#include "..."`, resolved
   against the including file's folder, then anywhere in the tree by path suffix);
3. else definitions elsewhere (the linker's): where they sit in several files, those built for
   the caller's device (a `.cu` caller or a CUDA/XPU dispatch key: GPU files; a CPU key or a
   `cpu/` caller: CPU files) when some are, else all of them.

Hand-written: no library resolves C++ names across a tree without compiling it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Protocol, TypeVar

_INCLUDE = re.compile(rb'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
_GPU_SUFFIXES = frozenset({".cu", ".cuh", ".hip", ".sycl"})
_GPU_PARTS = frozenset({"cuda", "gpu", "xpu", "rocm", "hip", "sycl", "esimd", "musa"})
_CPU_PARTS = frozenset({"cpu", "x86", "avx", "avx2", "avx512", "aarch64", "neon"})
_GPU_KEYS = frozenset({"CUDA", "XPU", "HIP", "MPS", "PrivateUse1", "MTIA"})
Reach = Callable[[str], frozenset[str]]


class _Located(Protocol):
    path: str


Located = TypeVar("Located", bound=_Located)


def device_of(path: str) -> str:
    """`gpu`, `cpu` or `` (either) for a source file, from its suffix and folders."""
    pure = PurePosixPath(path.replace("\\", "/"))
    if pure.suffix.lower() in _GPU_SUFFIXES:
        return "gpu"
    words = {w for part in pure.parts[:-1] for w in re.split(r"[_\-.]", part.lower())}
    words |= set(re.split(r"[_\-.]", pure.stem.lower()))
    if words & _CPU_PARTS:
        return "cpu"
    return "gpu" if words & _GPU_PARTS else ""


def key_device(key: str | None) -> str:
    """The device a dispatch key runs on (`` for keys that are not one device's)."""
    if key is None:
        return ""
    if key == "CPU":
        return "cpu"
    return "gpu" if key in _GPU_KEYS else ""


def pick(candidates: Sequence[Located], caller: str, reach: Reach | None,
         key: str | None = None) -> list[Located]:  # fmt: skip
    """The definitions among `candidates` a call from file `caller` reaches (see the module);
    `key`: the dispatch key of an op's binding (its device wins over the caller file's)."""
    if len({c.path for c in candidates}) <= 1:
        return list(candidates)
    same = [c for c in candidates if c.path == caller]
    if same:
        return same
    if reach is not None:
        included = reach(caller)
        reached = [c for c in candidates if c.path in included]
        if reached:
            return reached
    device = key_device(key) or device_of(caller)
    if device:
        matching = [c for c in candidates if device_of(c.path) == device]
        if matching:
            return matching
        others = [c for c in candidates if device_of(c.path) == ""]
        if others:
            return others
    return list(candidates)


def include_reach(contents: Mapping[str, bytes]) -> Reach:
    """For each file, the files it includes, directly or not, within `contents`."""
    by_suffix: dict[str, list[str]] = {}
    for path in contents:
        parts = PurePosixPath(path.replace("\\", "/")).parts
        for start in range(len(parts)):
            by_suffix.setdefault("/".join(parts[start:]), []).append(path)
    direct: dict[str, list[str]] = {}
    closure: dict[str, frozenset[str]] = {}

    def resolve(including: str, name: str) -> Iterable[str]:
        local = str(PurePosixPath(including).parent / name)
        if local in contents:
            return [local]
        normal = name.lstrip("./")
        found = by_suffix.get(normal, [])
        return found if len(found) <= 4 else []  # a name that common says nothing

    def includes(path: str) -> list[str]:
        if path not in direct:
            data = contents.get(path, b"")
            names = (m.group(1).decode("utf-8", "replace") for m in _INCLUDE.finditer(data))
            direct[path] = [f for n in names for f in resolve(path, n) if f != path]
        return direct[path]

    def reach(path: str) -> frozenset[str]:
        if path not in closure:
            seen: set[str] = set()
            stack = list(includes(path))
            while stack:
                current = stack.pop()
                if current not in seen:
                    seen.add(current)
                    stack.extend(includes(current))
            closure[path] = frozenset(seen)
        return closure[path]

    return reach
