"""Plain records the audit passes between extraction, inference, verdicts and output."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum

from soakgate.audit.schema import Schema


class Severity(IntEnum):
    """How bad a finding is; `--fail-on` compares against this order."""

    NOTE = 1
    WARNING = 2
    ERROR = 3
    CRITICAL = 4

    @classmethod
    def parse(cls, text: str) -> Severity:
        """The severity called `text` (case-insensitive)."""
        return cls[text.upper()]


class Confidence(IntEnum):
    """How sure write inference is about one piece of evidence."""

    LOW = 1
    MEDIUM = 2
    HIGH = 3


@dataclass(frozen=True, slots=True)
class Location:
    """A place in a file, 1-based line."""

    path: str
    """File path as given on the command line (or found under it)."""
    line: int
    """1-based line number."""

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class LiteralPiece:
    """One source string literal that holds part of a schema, for in-place fixes."""

    path: str
    """File holding the literal."""
    offset: int
    """Byte offset in the file where the literal's content (after the quote) starts."""
    text: str
    """The literal's content exactly as written (escape-free, else the op is not fixable)."""


@dataclass(slots=True)
class OpDef:
    """One operator definition found in a source or binary."""

    qualname: str
    """`namespace::name` or `namespace::name.overload`."""
    schema: Schema
    """Parsed schema (namespace filled from the library block when the string had none)."""
    location: Location
    """Where the definition is."""
    origin: str
    """`cpp`, `python`, `custom_op` or `binary`."""
    guard: str | None = None
    """Preprocessor condition the definition sits under (`#ifdef USE_ROCM`), if any."""
    pieces: tuple[LiteralPiece, ...] = ()
    """Literals spelling the schema, in order; empty when the schema cannot be fixed in place."""
    inline_impl: str | None = None
    """Function named in `m.def(schema, &fn)`, if any."""
    mutates: LiteralPiece | None = None
    """For a `custom_op`: its `mutates_args=` value as written (a literal tuple, list or set of
    names), which `--fix` rewrites; None when it is absent or not such a literal."""


@dataclass(frozen=True, slots=True)
class WriteEvidence:
    """Why write inference believes an implementation writes (or returns) a parameter."""

    param: str
    """Parameter name in the schema."""
    kind: str
    """`inplace-method`, `kernel-store`, `out-call`, `mutating-call`, `returns-param`, ..."""
    expression: str
    """The source expression that shows it (one line, shortened)."""
    location: Location
    """Where the expression is."""
    confidence: Confidence
    """How sure the inference is."""


@dataclass(frozen=True, slots=True)
class ExtensionCall:
    """A Python implementation handing its tensors to a compiled extension (`_ext.fwd(q, out)`)."""

    function: str
    """The attribute called on the imported module (`fwd`), a pybind11 binding's name."""
    args: tuple[str | None, ...]
    """Per positional argument, the implementation's parameter passed there (None otherwise)."""
    keywords: tuple[tuple[str, str], ...]
    """(keyword, parameter) for parameters passed by keyword."""
    location: Location
    expression: str
    target: str = ""
    """The C++ function the call reaches when the Python says so itself (a module compiled at
    run time from the tree's sources, exporting `Kernel::run` as `fn`); empty: by pybind11."""


@dataclass(frozen=True, slots=True)
class OpCall:
    """A Python implementation (or a function of the tree it calls) calling another op through
    `torch.ops` (`torch.ops._C.rms_norm(out, x, w, eps)`): what the called op writes, the
    caller writes through the tensors it hands it (`scan` binds them to the op's schema)."""

    op: str
    """The called op, `namespace::name` or `namespace::name.overload`."""
    args: tuple[frozenset[str], ...]
    """Per positional argument, the implementation's parameters it may be (or view)."""
    keywords: tuple[tuple[str, frozenset[str]], ...]
    """(keyword, the implementation's parameters it may be) for arguments passed by keyword."""
    location: Location
    """Where the op is called."""
    expression: str
    """The call (through the helpers that lead to it), shortened."""


@dataclass(slots=True)
class ImplInfo:
    """Writes inferred for one implementation of one op."""

    function: str
    """Implementing function name, or `<lambda>`."""
    dispatch_key: str | None
    """Dispatch key (`CUDA`, `CPU`, `Meta`) or None when registered for all."""
    location: Location
    """Where the implementation is defined."""
    writes: list[WriteEvidence] = field(default_factory=list)
    """Evidence of writes, one or more per written parameter."""
    returned_params: dict[int, str] = field(default_factory=dict)
    """Return position -> parameter the implementation returns there (an alias)."""
    fresh_returns: set[int] = field(default_factory=set)
    """Return positions where some path returns a value that is not a parameter."""
    alternatives: list[Location] = field(default_factory=list)
    """Other definitions of the same name analysed with it (an `#if` stub, a CPU fallback)."""
    extension_calls: list[ExtensionCall] = field(default_factory=list)
    """Calls into compiled extensions, followed into their C++ when the tree has it."""
    unused: frozenset[str] = frozenset()
    """Parameters the implementation's body never reads (known for Python implementations
    only): nothing it does can write them, whatever a caller hands it."""
    op_calls: list[OpCall] = field(default_factory=list)
    """Ops a Python implementation calls through `torch.ops`, followed by `scan`."""
    unseen: dict[str, str] = field(default_factory=dict)
    """Parameters handed to an op whose writes cannot be known here (not in the tree, or no
    evidence either way) -> that call: neither written nor shown unwritten."""


@dataclass(slots=True)
class Finding:
    """One verdict about one op."""

    op: str
    """Qualified op name."""
    verdict: str
    """`unannotated-write`, `void-op-unannotated`, `returns-alias-unannotated`, ..."""
    severity: Severity
    """How bad it is."""
    message: str
    """One line for humans."""
    location: Location
    """The schema definition the finding is about."""
    params: tuple[str, ...] = ()
    """Parameters involved."""
    evidence: tuple[WriteEvidence, ...] = ()
    """Evidence from the implementations."""


@dataclass(slots=True)
class OpReport:
    """Everything the audit knows about one op."""

    op: OpDef
    """The definition."""
    impls: list[ImplInfo]
    """Analysed implementations (fake/meta ones excluded)."""
    has_fake: bool
    """Whether a fake/meta/abstract impl is registered somewhere."""
    findings: list[Finding]
    """Verdicts other than ok; empty means ok."""
    callers: list[WriteEvidence] = field(default_factory=list)
    """What the tree's Python callers show (`py_callers`): a fresh buffer handed to the op."""

    def writes(self) -> list[WriteEvidence]:
        """Every piece of write evidence: the implementations', then the callers'."""
        return all_writes(self.impls, self.callers)

    @property
    def verdicts(self) -> list[str]:
        """Verdict names, `ok` when there are no findings."""
        return [f.verdict for f in self.findings] or ["ok"]


def all_writes(impls: Iterable[ImplInfo], callers: Iterable[WriteEvidence]) -> list[WriteEvidence]:
    """The write evidence of an op's implementations, then of its callers (`py_callers`)."""
    return [e for impl in impls for e in impl.writes] + list(callers)


@dataclass(slots=True)
class AuditResult:
    """The outcome of auditing some paths."""

    ops: list[OpReport]
    """One report per op definition, in file order."""
    files_scanned: int
    """Source files looked at (prefilter included)."""
    files_parsed: int
    """Files that passed the prefilter and were parsed."""
    call_sites: dict[str, list[Location]] = field(default_factory=dict)
    """Op qualname -> Python call sites that use the op's return value."""

    @property
    def findings(self) -> list[Finding]:
        """Every finding of every op."""
        return [f for report in self.ops for f in report.findings]
