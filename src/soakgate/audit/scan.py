"""Audit source trees and libraries: collect files, extract, infer writes, judge every op."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from soakgate.audit.build_names import MACRO, Extension, build_files, extension_name, extensions
from soakgate.audit.cpp_flow import strongest
from soakgate.audit.cpp_infer import infer_schema
from soakgate.audit.cpp_macros import Macro, collect_macros, expand, needed_macros
from soakgate.audit.cpp_reach import Reach, include_reach, pick
from soakgate.audit.cpp_unity import SOURCE_SUFFIXES, inline_sources, relocated
from soakgate.audit.cpp_vendor import VendorOp, vendor_ops
from soakgate.audit.extract_cpp import (
    CPP_SUFFIXES,
    ClassNode,
    CppFile,
    FunctionNode,
    RawImpl,
    extract_cpp,
)
from soakgate.audit.extract_py import PyFile, extract_python
from soakgate.audit.extract_so import BINARY_SUFFIXES, extract_binary
from soakgate.audit.model import (
    AuditResult,
    Confidence,
    ImplInfo,
    Location,
    OpCall,
    OpDef,
    OpReport,
    WriteEvidence,
    all_writes,
)
from soakgate.audit.py_callers import FreshBuffer
from soakgate.audit.py_fakes import added_python
from soakgate.audit.py_flow import PyTree
from soakgate.audit.schema import Argument, Schema
from soakgate.audit.verdicts import judge
from soakgate.audit.writes import infer_writes
from soakgate.errors import AuditError, UsageError

_SKIP_DIRS = frozenset({".git", "__pycache__", "node_modules", ".venv", "venv", ".tox", "build"})
_CALLABLE = re.compile(rb"\b([A-Za-z_]\w*)\s*[(<]")
_NAMING_DEFINE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+\w+[ \t]+([A-Za-z_]\w*)[ \t]*$", re.M)
_CPP_MARKERS = (b"TORCH_LIBRARY", b"RegisterOperators")  # STABLE_TORCH_LIBRARY too
_PY_MARKERS = (b"torch.library", b"Library(", b"torch.ops.", b"custom_op", b"register_fake")
FAKE_KEYS = frozenset({"Meta", "Fake", "FakeTensor"})
# Patches the build applies can add files (fake registrations) that exist nowhere else.
PATCH_SUFFIXES = frozenset({".patch", ".diff"})


def collect_files(paths: Iterable[str]) -> list[Path]:
    """Source and library files under the given paths, in a stable order."""
    wanted = CPP_SUFFIXES | BINARY_SUFFIXES | {".py"} | PATCH_SUFFIXES
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(
                p
                for p in sorted(path.rglob("*"))
                if p.suffix in wanted and p.is_file() and not _SKIP_DIRS.intersection(p.parts)
            )
        else:
            raise UsageError(f"no such file or directory: {raw}")
    return found


@dataclass(slots=True)
class _Index:
    """Lazily parsed C++ sources: a file is parsed only once something needs it."""

    contents: dict[str, bytes]
    parsed: dict[str, CppFile] = field(default_factory=dict)
    functions: dict[str, list[FunctionNode]] = field(default_factory=dict)
    classes: dict[str, list[ClassNode]] = field(default_factory=dict)
    searched: set[str] = field(default_factory=set)
    mentioned: dict[str, list[str]] | None = None
    macros: dict[str, str] = field(default_factory=dict)
    defines: dict[str, Macro] | None = None
    builds: list[Extension] = field(default_factory=list)
    """The extensions the tree's build files define (`build_names`)."""
    reach: Reach | None = None
    """The files each file includes (set by `audit_paths`)."""
    vendor: dict[str, VendorOp] | None = None

    def vendor_op(self, name: str) -> VendorOp | None:
        """A vendor framework's operator defined in the tree (`cpp_vendor`), by type."""
        if self.vendor is None:
            self.vendor = vendor_ops(self.contents)
        return self.vendor.get(name)

    def parse(self, path: str) -> CppFile:
        if path not in self.parsed:
            data = self.contents[path]
            unit = self._extract(path, data)
            self.parsed[path] = unit
            for fn in unit.functions + self._built_here(path, data):
                self.functions.setdefault(fn.name, []).append(fn)
            for cls in unit.classes:
                self.classes.setdefault(cls.name, []).append(cls)
        return self.parsed[path]

    def _extract(self, path: str, data: bytes) -> CppFile:
        needed = needed_macros(data, self.project_macros())
        expanded = expand(data, path, needed) if needed is not None else None
        return extract_cpp(data, path, expanded)

    def _built_here(self, path: str, data: bytes) -> list[FunctionNode]:
        """Functions a source file included by this one becomes only in this unit (its
        name or body made by this file's macros: `cpp_unity`), at their own lines."""
        unit, segments = inline_sources(path, data, self.contents)
        if not segments:
            return []
        own = {s.path: {f.name for f in self.parse(s.path).functions} for s in segments}
        found = []
        for fn in self._extract(path, unit).functions:
            moved = relocated(fn, segments)
            if moved is not None and moved.name not in own[moved.path]:
                found.append(moved)
        return found

    def project_macros(self) -> dict[str, Macro]:
        """Every `#define` in the scanned C++ files (one regex pass, on first need)."""
        if self.defines is None:
            cpp = {p: d for p, d in self.contents.items() if Path(p).suffix in CPP_SUFFIXES}
            self.defines = collect_macros(cpp)
        return self.defines

    def mentions(self) -> dict[str, list[str]]:
        """Name -> C++ files where `name(` or `name<` occurs, or that `#define X name` (a
        function named by a macro: `torch::Tensor X(...)`): one regex pass over every file."""
        if self.mentioned is None:
            self.mentioned = {}
            for path, data in self.contents.items():
                if Path(path).suffix in CPP_SUFFIXES | SOURCE_SUFFIXES:
                    words = set(_CALLABLE.findall(data)) | set(_NAMING_DEFINE.findall(data))
                    for word in words:
                        self.mentioned.setdefault(word.decode(), []).append(path)
        return self.mentioned

    def lookup(self, name: str) -> list[FunctionNode]:
        """Definitions of `name`, parsing the files that mention it on first request."""
        if name not in self.searched:
            self.searched.add(name)
            for path in self.mentions().get(name, []):
                if path not in self.parsed:
                    self.parse(path)
        return self.functions.get(name, [])

    def lookup_class(self, name: str) -> list[ClassNode]:
        """Functor classes called `name` (files that mention it are parsed by `lookup`)."""
        self.lookup(name)
        return self.classes.get(name, [])

    def macro(self, name: str) -> str:
        """Value of a `#define` (followed through chains), or the name itself."""
        # Hand-written because no library evaluates the preprocessor without compiling:
        # vLLM-style `CONCAT(TORCH_EXTENSION_NAME, _suffix)` names are pasted here.
        if name not in self.macros:
            self.macros[name] = self._macro(name)
        return self.macros[name]

    def library(self, name: str, path: str) -> str:
        """The namespace `TORCH_LIBRARY(name, m)` in file `path` registers: the build's
        TORCH_EXTENSION_NAME for that file where its build files say (`-D` on the command line
        wins over a fallback `#define` in the sources), else the `#define` chain."""
        resolved = self.macro(name)
        if name == MACRO or MACRO in resolved:
            built = extension_name(self.builds, path)
            if built is not None:
                return self.macro(name.replace(MACRO, built)).replace(MACRO, built)
        return resolved

    def _macro(self, name: str) -> str:
        pasted = re.fullmatch(r"\w*CONCAT\w*\(\s*(\w+)\s*,\s*(\w+)\s*\)", name)
        if pasted:
            return self.macro(pasted.group(1)) + self.macro(pasted.group(2))
        for _ in range(4):
            value = next((u.macros[name] for u in self.parsed.values() if name in u.macros), None)
            if value is None:
                pattern = re.compile(rb"#\s*define\s+" + re.escape(name.encode()) + rb"\s+(\w+)")
                match = next((m for d in self.contents.values() if (m := pattern.search(d))), None)
                value = match.group(1).decode() if match else None
            if value is None or not value.isidentifier():
                return name
            name = value
        return name


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise AuditError(f"cannot read {path}: {exc.strerror}") from exc


def _cpp_impl(index: _Index, raw: RawImpl, op: OpDef) -> ImplInfo | None:
    """Analyse the function or lambda an impl binding names; None if it cannot be found."""
    if raw.lambda_fn is not None:
        chosen = [raw.lambda_fn]
    else:
        # the definitions the binding's file reaches, for its dispatch key's device (`cpp_reach`)
        candidates = pick(
            index.lookup(raw.function or ""), raw.location.path, index.reach, raw.dispatch_key
        )
        arity = len(op.schema.arguments)
        # Every same-named definition of the right arity: a CUDA body and its `#if` stub or
        # CPU fallback are all implementations of the op; the schema must cover each.
        chosen = [c for c in candidates if len(c.params) == arity] or candidates[:1]
    if not chosen:
        return None
    names = [a.name or "" for a in op.schema.arguments]
    fn = chosen[0]
    info = ImplInfo(fn.name, raw.dispatch_key, Location(fn.path, fn.line(fn.body)))
    info.alternatives = [Location(c.path, c.line(c.body)) for c in chosen[1:]]
    for candidate in chosen:
        result = infer_writes(
            candidate, index.lookup, index.lookup_class, index.reach, index.vendor_op
        )
        for position, evidence in result.writes.items():
            if position < len(names):
                info.writes.extend(_rename(e, names[position]) for e in evidence)
        for ret_position, (position, proof) in result.returned.items():
            if position < len(names) and ret_position not in info.returned_params:
                info.returned_params[ret_position] = names[position]
                info.writes.append(_rename(proof, names[position]))
        info.fresh_returns.update(result.fresh_returns)
    info.unused = frozenset(
        name
        for position, name in enumerate(names)
        if all(
            position < len(c.params) and _metadata_only(c, c.params[position][0]) for c in chosen
        )
    )
    return info


_METADATA_USE = (
    r"\s*(?:\.|->)\s*(?:size|sizes|options|dim|ndimension|stride|strides|numel|dtype|"
    r"scalar_type|device|get_device|is_cuda|is_contiguous|defined|has_value|element_size|"
    r"layout|itemsize|nbytes)\s*\("
)


def _metadata_only(fn: FunctionNode, name: str) -> bool:
    """Whether a C++ body names parameter `name`, and only to ask its metadata (`out.size(0)`,
    `out.options()`): nothing it does can write the caller's tensor. A body that never names
    it says nothing (a `TORCH_CHECK(false, ...)` stub beside the `#if` body that works)."""
    if not name:
        return False
    text = (fn.body.text or b"").decode("utf-8", "replace")
    uses = list(re.finditer(rf"\b{re.escape(name)}\b", text))
    return bool(uses) and all(re.match(_METADATA_USE, text[u.end() :]) for u in uses)


def _rename(evidence: WriteEvidence, name: str) -> WriteEvidence:
    """Evidence named by the schema's argument rather than the C++ parameter."""
    return replace(evidence, param=name)


def _qualname(namespace: str, op: str) -> str:
    return op if "::" in op else f"{namespace}::{op}"


@dataclass(slots=True)
class _Collected:
    """Definitions and bindings gathered from every file, before judging."""

    defs: list[OpDef] = field(default_factory=list)
    cpp_impls: list[tuple[str, RawImpl]] = field(default_factory=list)
    py_impls: list[tuple[str, ImplInfo]] = field(default_factory=list)
    fakes: set[str] = field(default_factory=set)
    call_sites: dict[str, list[Location]] = field(default_factory=dict)
    buffers: dict[str, list[FreshBuffer]] = field(default_factory=dict)


def _collect(files: list[Path], index: _Index) -> tuple[_Collected, int]:
    collected = _Collected()
    parsed = 0
    flow = PyTree(index.contents)
    wrappers = flow.registrar_wrappers()
    direct = flow.direct_wrappers()
    markers = (
        *_PY_MARKERS,
        *(name.encode() + b"(" for name in sorted(wrappers)),
        *(name.encode() for name in sorted(direct)),
    )
    for path in files:
        key, data = str(path), index.contents.get(str(path), b"")
        if path.suffix in CPP_SUFFIXES and any(marker in data for marker in _CPP_MARKERS):
            unit = index.parse(key)
            for raw in unit.defs:
                namespace = raw.schema.namespace or index.library(raw.library, key)
                name = raw.schema.name + (f".{raw.schema.overload}" if raw.schema.overload else "")
                collected.defs.append(
                    OpDef(
                        f"{namespace}::{name}",
                        raw.schema,
                        raw.location,
                        "cpp",
                        raw.guard,
                        raw.pieces,
                        raw.inline_impl,
                    )
                )
            collected.defs.extend(_inferred_defs(index, unit, key))
            collected.cpp_impls.extend(
                (_qualname(index.library(i.library, key), i.op), i) for i in unit.impls
            )
        elif path.suffix == ".py" and any(marker in data for marker in markers):
            parsed += 1
            _merge_python(collected, extract_python(data, key, flow, wrappers, direct))
        elif path.suffix in PATCH_SUFFIXES and any(marker in data for marker in _PY_MARKERS):
            parsed += 1
            for inner, text in added_python(data.decode("utf-8", "replace")):
                collected.fakes.update(extract_python(text.encode(), f"{key}:{inner}").fakes)
        elif path.suffix in BINARY_SUFFIXES:
            parsed += 1
            collected.defs.extend(extract_binary(_read(path), key))
    return collected, parsed


def _inferred_defs(index: _Index, unit: CppFile, path: str) -> list[OpDef]:
    """Ops defined by `m.def("name", fn)`, with the schema torch infers from `fn`."""
    defs = []
    for raw in unit.inferred:
        # the definition the registering file reaches (`cpp_reach`): another file's function
        # of the same name (another extension's `forward`) must not lend its signature
        reached = pick(index.lookup(raw.function), path, index.reach)
        schema = next((s for fn in reached if (s := _infer(raw.name, fn)) is not None), None)
        if schema is None:
            continue  # no definition found, or a type torch would not accept
        defs.append(
            OpDef(
                f"{index.library(raw.library, path)}::{raw.name}",
                schema,
                raw.location,
                "cpp-inferred",
                raw.guard,
                (raw.piece,),
                raw.function,
            )
        )
    return defs


def _infer(name: str, fn: FunctionNode) -> Schema | None:
    op, _, overload = name.partition(".")
    schema = infer_schema(op, fn.params, fn.returns)
    return replace(schema, overload=overload) if schema is not None and overload else schema


def _merge_python(collected: _Collected, unit: PyFile) -> None:
    collected.defs.extend(unit.defs)
    collected.py_impls.extend(unit.impls)
    collected.fakes.update(unit.fakes)
    for op, sites in unit.call_sites.items():
        collected.call_sites.setdefault(op, []).extend(sites)
    for buffer in unit.buffers:
        collected.buffers.setdefault(buffer.op, []).append(buffer)


def _argument_at(op: OpDef, slot: int | str) -> Argument | None:
    """The schema argument a call's positional index or keyword binds to (None: no such)."""
    if isinstance(slot, str):
        return op.schema.argument(slot)
    positional = [a for a in op.schema.arguments if not a.kwarg_only]
    return positional[slot] if slot < len(positional) else None


def _caller_writes(
    op: OpDef, buffers: list[FreshBuffer], impls: list[ImplInfo]
) -> list[WriteEvidence]:
    """The op's tensor parameters that callers fill with fresh buffers (`py_callers`), but
    for one that every implementation found leaves unread (a caller's buffer for an output
    the op ignores: vLLM 0.34.0's `rocm_aiter_topk_gating` and `token_expert_indices`)."""
    evidence = []
    for buffer in buffers:
        arg = _argument_at(op, buffer.slot)
        if arg is None or not arg.name or not arg.type.is_tensor_like:
            continue
        if impls and all(arg.name in i.unused for i in impls):
            continue  # every implementation leaves it unread
        if buffer.allocated == "empty":
            kind, what = "caller-fresh-buffer", "an uninitialised buffer"
        else:
            kind, what = "caller-returned-buffer", "a new buffer it then returns"
        text = f"a caller hands it {what}: {buffer.expression}"
        evidence.append(WriteEvidence(arg.name, kind, text, buffer.location, Confidence.MEDIUM))
    return evidence


def _follow_extensions(index: _Index, impls: list[ImplInfo]) -> None:
    """Writes of the C++ functions Python impls reach through pybind11 (`_ext.fwd(q, out)`)."""
    calls = [(info, call) for info in impls for call in info.extension_calls]
    if not calls:
        return
    bindings: dict[str, str] = {}
    if any(not call.target for _, call in calls):
        for path, data in index.contents.items():
            if Path(path).suffix in CPP_SUFFIXES and b"PYBIND11_MODULE" in data:
                bindings.update(index.parse(path).pybind)
    for info, call in calls:
        target = call.target or bindings.get(call.function)
        for fn in _exported(index, target) if target else []:
            names = [name for name, _ in fn.params]
            passed = dict(enumerate(call.args))
            passed.update((names.index(k), p) for k, p in call.keywords if k in names)
            result = infer_writes(
                fn, index.lookup, index.lookup_class, index.reach, index.vendor_op
            )
            for position, proofs in result.writes.items():
                param = passed.get(position)
                if param is None:
                    continue
                proof = strongest(proofs)  # its surest proof of that argument
                text = f"{call.expression[:60]} -> {proof.expression}"
                info.writes.append(
                    WriteEvidence(param, "extension-call", text, call.location, proof.confidence)
                )


def _exported(index: _Index, target: str) -> list[FunctionNode]:
    """The C++ functions a name exported to Python runs: `fn`, or `Kernel::run` (a member of
    that class only, or of the classes an alias template `using Kernel = ...` picks from:
    `std::conditional_t<cta, KernelCTA<...>, KernelWarp<...>>`)."""
    owner, _, name = target.rpartition("::")
    found = index.lookup(name)
    if not owner:
        return found
    owner = owner.rpartition("::")[2]
    members = [fn for fn in found if fn.owner == owner]
    if members:
        return members
    aliased = re.compile(rf"\busing\s+{re.escape(owner)}\s*=\s*([^;]*);".encode())
    picked: set[str] = set()
    for path, data in index.contents.items():
        if Path(path).suffix not in CPP_SUFFIXES or owner.encode() not in data:
            continue
        for match in aliased.finditer(data):
            picked.update(w.decode() for w in re.findall(rb"[A-Za-z_]\w*", match.group(1)))
    return [fn for fn in found if fn.owner and fn.owner in picked]


_OP_CALL_ROUNDS = 4  # ops calling ops calling ops: evidence travels one call per round


def _follow_op_calls(
    found: list[tuple[OpDef, list[ImplInfo], bool]], callers: list[list[WriteEvidence]]
) -> None:
    """What the ops a Python implementation calls through `torch.ops` write, bound to the
    tensors it hands them (`OpCall`): the called op's evidence (its implementations, its
    callers) where the tree has its implementation, else its schema's own `(a!)`. A tensor
    handed to an op the tree does not define, or to one whose evidence about that parameter
    is only a pointer passed to code not found, is `unseen`: not written, not unwritten."""
    index: dict[str, int] = {}
    for position, (op, _, _) in enumerate(found):
        index.setdefault(op.qualname, position)
    calls = [(info, call) for _, impls, _ in found for info in impls for call in info.op_calls]
    seen: set[tuple[int, str, OpCall, str]] = set()
    for _ in range(_OP_CALL_ROUNDS):
        before = len(seen)
        for info, call in calls:
            _op_call_writes(info, call, index, found, callers, seen)
        if len(seen) == before:
            return


def _op_call_writes(
    info: ImplInfo,
    call: OpCall,
    index: dict[str, int],
    found: list[tuple[OpDef, list[ImplInfo], bool]],
    callers: list[list[WriteEvidence]],
    seen: set[tuple[int, str, OpCall, str]],
) -> None:
    """Add one call's evidence to `info` (once per parameter and argument: `seen`)."""
    position = index.get(call.op)
    if position is None:  # an op of another library: what it does is not in the tree
        for names in (*call.args, *(names for _, names in call.keywords)):
            for name in names:
                info.unseen.setdefault(name, f"{call.expression} (an op not in the tree)")
        return
    callee, impls, _ = found[position]
    evidence: dict[str, list[WriteEvidence]] = {}
    for proof in all_writes(impls, callers[position]):
        if proof.kind != "returns-param":
            evidence.setdefault(proof.param, []).append(proof)
    slots: list[tuple[int | str, frozenset[str]]] = [*enumerate(call.args), *call.keywords]
    for slot, names in slots:
        arg = _argument_at(callee, slot)
        if arg is None or not names or not arg.name or not arg.type.is_tensor_like:
            continue
        proofs = evidence.get(arg.name, [])
        strong = [p for p in proofs if p.confidence >= Confidence.MEDIUM]
        if strong:
            confidence = min(max(p.confidence for p in strong), Confidence.MEDIUM)
            first = strong[0].expression
            how = f"{call.expression} -> {callee.qualname} writes {arg.name}: {first}"
        elif not impls and arg.is_write:
            confidence, how = Confidence.MEDIUM, f"{call.expression} -> {callee.schema.text}"
        else:
            if proofs or not impls:  # only a pointer passed to code not found, or no code
                for name in names:
                    info.unseen.setdefault(name, f"{call.expression} ({callee.qualname})")
            continue
        for name in sorted(names):
            key = (id(info), name, call, arg.name)
            if key not in seen:
                seen.add(key)
                info.writes.append(
                    WriteEvidence(name, "op-call", how[:160], call.location, confidence)
                )


def audit_paths(paths: Iterable[str]) -> AuditResult:
    """Audit every op defined in the given files and directories (sources and `.so` files)."""
    paths_list = list(paths)
    files = collect_files(paths_list)
    readable = CPP_SUFFIXES | PATCH_SUFFIXES | {".py"}
    contents = {str(p): _read(p) for p in files if p.suffix in readable}
    index = _Index(contents)
    index.reach = include_reach(contents)
    index.builds = extensions(
        build_files([Path(p) for p in paths_list], [Path(p).parent for p in paths_list], _SKIP_DIRS)
    )
    collected, parsed = _collect(files, index)
    _follow_extensions(index, [info for _, info in collected.py_impls])
    found: list[tuple[OpDef, list[ImplInfo], bool]] = []
    for op in collected.defs:
        impls: list[ImplInfo] = []
        has_fake = op.qualname in collected.fakes
        for qualname, raw in collected.cpp_impls:
            if qualname != op.qualname:
                continue
            if raw.dispatch_key in FAKE_KEYS:
                has_fake = True
            elif (info := _cpp_impl(index, raw, op)) is not None:
                impls.append(info)
        for qualname, info in collected.py_impls:
            if qualname == op.qualname:
                impls.append(info)
        found.append((op, impls, has_fake))
    callers = [_caller_writes(op, collected.buffers.get(op.qualname, []), i) for op, i, _ in found]
    _follow_op_calls(found, callers)
    reports = [
        OpReport(op, impls, has_fake, judge(op, impls, by_callers), by_callers)
        for (op, impls, has_fake), by_callers in zip(found, callers, strict=True)
    ]
    return AuditResult(reports, len(files), len(index.parsed) + parsed, collected.call_sites)
