"""Accuracy of `soakgate audit` on real kernel code: written parameters and `--fix`.

    python bench/bench_audit_accuracy.py [--corpus tests/audit/corpus] [--cache DIR] [--offline]
                                         [--lib NAME ...] [--verbose]

For every library under the corpus (one truth file per op in `<lib>/truth/`; `<lib>/SOURCE.toml`
names the pinned PyPI sdist and which of its files make up the library's tree, which
`fetch_audit_corpus.py` downloads, verifies and extracts into a cache outside the repository),
it prints:

- per (op, parameter) precision and recall of the written parameters the audit infers (medium
  or high confidence evidence; low-confidence evidence is counted apart), against the truth;
- `--fix` on a copy whose schemas have every write annotation stripped, and every custom_op's
  `mutates_args` emptied (the hazard as shipped by libraries that never annotated): the diff
  is applied with `git apply`, the copy is audited again, and an op counts as fixed completely
  when its new schema marks every truly written parameter and the re-audit reports no hazard
  for it and no `over-annotated` note on an annotation the fix added; destructive rewrites (a
  dropped fresh return, a removed annotation, a schema that no longer parses, an edit outside
  the schema) are counted.

Each truth file says whether its op was in the set the write inference was developed on
(`set = "development"`) or was added afterwards and held out (`set = "held-out"`); the figures
are printed for both sets as well as in total. Without the corpus (no network and nothing
cached, a digest that does not match) it prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fetch_audit_corpus import CORPUS, CorpusError, default_cache, ensure_corpus

from soakgate.audit.fix import plan_fixes, unified_diff
from soakgate.audit.model import AuditResult, Confidence, OpReport
from soakgate.audit.scan import audit_paths
from soakgate.audit.schema import Schema, try_parse_schema

HAZARDS = {"void-op-unannotated", "unannotated-write", "returns-alias-unannotated"}
_STRIP = re.compile(r"(Tensor(?:\[\])?)(?:\([a-z0-9]+!\)|!)")
# A custom_op declares its writes in `mutates_args=`: stripped to `()` like the annotations.
_MUTATES = re.compile(r"(mutates_args\s*=\s*)(?:\([^)]*\)|\[[^\]]*\]|\{[^}]*\})")


@dataclass(slots=True)
class Truth:
    """Which parameters of one op its implementation writes."""

    op: str
    written: set[str]
    why: dict[str, str]
    set: str = "held-out"
    undecidable: set[str] = field(default_factory=set)
    """Parameters whose write the code in the tree cannot settle (a call into a library outside
    it whose call site does not say): scored neither way, claims on them counted apart."""


@dataclass(slots=True)
class Counts:
    """Confusion counts over (op, parameter) pairs."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    low_only: int = 0
    unjudged: int = 0  # parameters the truth leaves undecidable
    unjudged_claims: list[str] = field(default_factory=list)  # audit claims on those
    misses: list[str] = field(default_factory=list)
    false: list[str] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)

    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0


def clopper_pearson(hits: int, total: int) -> tuple[float, float]:
    """Exact 95% binomial interval for hits/total (the corpus is small: say how sure we are)."""
    from scipy.stats import beta

    if total == 0:
        return 0.0, 1.0
    low = beta.ppf(0.025, hits, total - hits + 1) if hits else 0.0
    high = beta.ppf(0.975, hits + 1, total - hits) if hits < total else 1.0
    return float(low), float(high)


def load_truths(lib: Path) -> list[Truth]:
    """The truth files of one corpus library."""
    truths = []
    for path in sorted((lib / "truth").glob("*.toml")):
        data = tomllib.loads(path.read_text())
        truths.append(
            Truth(
                data["op"],
                set(data["written"]),
                dict(data.get("why", {})),
                str(data.get("set", "held-out")),
                set(data.get("undecidable", [])),
            )
        )
    return truths


def inferred(report: OpReport) -> tuple[set[str], set[str]]:
    """(params with medium/high write evidence, params with only low-confidence evidence)."""
    strong: set[str] = set()
    weak: set[str] = set()
    for evidence in report.writes():
        if evidence.kind == "returns-param":
            continue
        if evidence.confidence >= Confidence.MEDIUM:
            strong.add(evidence.param)
        else:
            weak.add(evidence.param)
    return strong, weak - strong


def tensor_params(schema: Schema) -> list[str]:
    return [a.name or "" for a in schema.arguments if a.type.is_tensor_like]


def score_inference(result: AuditResult, truths: list[Truth], counts: Counts) -> None:
    """Add the confusion counts of one library's audit to `counts`."""
    reports = {r.op.qualname: r for r in result.ops}
    for truth in truths:
        report = reports.get(truth.op)
        if report is None:
            counts.fn += len(truth.written)
            counts.misses.extend(f"{truth.op}:{p} (op not found)" for p in truth.written)
            continue
        strong, weak = inferred(report)
        for param in tensor_params(report.op.schema):
            if param in truth.undecidable:
                counts.unjudged += 1
                if param in strong:
                    counts.unjudged_claims.append(f"{truth.op}:{param}")
                continue
            written = param in truth.written
            said = param in strong
            counts.low_only += int(param in weak)
            outcome = {(True, True): "TP", (True, False): "FN", (False, True): "FP"}.get(
                (written, said), "TN"
            )
            counts.rows.append(f"{outcome}  {truth.op}:{param}")
            if written and said:
                counts.tp += 1
            elif written:
                counts.fn += 1
                counts.misses.append(f"{truth.op}:{param}")
            elif said:
                counts.fp += 1
                counts.false.append(f"{truth.op}:{param}")
            else:
                counts.tn += 1


@dataclass(slots=True)
class FixScore:
    """`--fix` outcomes over the hazardous ops of the stripped corpus."""

    hazardous: int = 0
    complete: int = 0
    incomplete: list[str] = field(default_factory=list)
    destructive: list[str] = field(default_factory=list)
    spurious: list[str] = field(default_factory=list)
    listed_incomplete: int = 0


def strip_annotations(tree: Path) -> None:
    """Remove every write annotation from the C++ and Python sources under `tree`."""
    for path in tree.rglob("*"):
        if path.is_file() and path.suffix in {".cpp", ".cc", ".cu", ".py", ".sycl"}:
            text = _STRIP.sub(r"\1", path.read_text(errors="surrogateescape"))
            if path.suffix == ".py":
                text = _MUTATES.sub(r"\1()", text)
            path.write_text(text, errors="surrogateescape")


def _git(tree: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-c", "user.name=b", "-c", "user.email=b@b", *args],
        cwd=tree,
        input=stdin,
        text=True,
        capture_output=True,
        check=False,
    )


def score_fix(name: str, source: Path, truths: list[Truth], scores: dict[str, FixScore]) -> None:
    """Strip annotations in a copy, apply `--fix` with git apply, audit again, judge each op."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "code"
        shutil.copytree(source, tree)
        strip_annotations(tree)
        _git(tree, "init", "-q")
        _git(tree, "add", "-A")
        _git(tree, "commit", "-qm", "stripped")
        with _inside(tree):
            before = audit_paths(["."])
            fixes = {f.op: f for f in plan_fixes(before)}
            diff = unified_diff(list(fixes.values()))
        if diff:
            applied = _git(tree, "apply", "-p1", "-", stdin=diff)
            if applied.returncode != 0:
                scores["all"].destructive.append(
                    f"{name}: git apply failed: {applied.stderr.strip()}"
                )
                return
        after = _audit_in(tree)
        for key, score in scores.items():
            chosen = [t for t in truths if key in ("all", t.set)]
            _judge_fixes(before, after, fixes, chosen, score)
        changed = _git(tree, "diff", "--stat").stdout
        _check_edits_only_in_schemas(tree, before, after, changed, scores["all"])


@contextlib.contextmanager
def _inside(tree: Path) -> Iterator[None]:
    """Work from the tree's root, the way a user runs the audit in a repository."""
    cwd = os.getcwd()
    os.chdir(tree)
    try:
        yield
    finally:
        os.chdir(cwd)


def _audit_in(tree: Path) -> AuditResult:
    with _inside(tree):
        return audit_paths(["."])


def _judge_fixes(
    before: AuditResult,
    after: AuditResult,
    fixes: Mapping[str, object],
    truths: list[Truth],
    score: FixScore,
) -> None:
    old = {r.op.qualname: r for r in before.ops}
    new = {r.op.qualname: r for r in after.ops}
    for truth in truths:
        if not truth.written:
            continue
        score.hazardous += 1
        if truth.op not in old:
            score.incomplete.append(f"{truth.op}: op not found")
            continue
        fix = fixes.get(truth.op)
        report = new.get(truth.op)
        if report is None:
            score.destructive.append(f"{truth.op}: op vanished after the fix")
            continue
        schema = report.op.schema
        declared = {a.name or "" for a in schema.arguments if a.is_write}
        missing = truth.written - declared
        left = HAZARDS & set(report.verdicts)
        over_added = [
            p
            for f in report.findings
            if f.verdict == "over-annotated"
            for p in f.params
            if p not in {a.name for a in old[truth.op].op.schema.arguments if a.is_write}
        ]
        if fix is not None and getattr(fix, "incomplete", False):
            score.listed_incomplete += 1
        if not missing and not left and not over_added:
            score.complete += 1
        else:
            score.incomplete.append(
                f"{truth.op}: missing {sorted(missing)} left {sorted(left)} over {over_added}"
            )
        spurious = declared - truth.written - truth.undecidable
        old_declared = {a.name or "" for a in old[truth.op].op.schema.arguments if a.is_write}
        score.spurious.extend(f"{truth.op}:{p}" for p in sorted(spurious - old_declared))
        old_schema = old[truth.op].op.schema
        if old_schema.returns and not schema.returns:
            aliased = any(r.type.alias is not None for r in old_schema.returns)
            returned = any(i.returned_params for i in old[truth.op].impls)
            if not aliased and not returned:
                score.destructive.append(f"{truth.op}: dropped a fresh return")
        if old_declared - declared:
            score.destructive.append(f"{truth.op}: removed annotations {old_declared - declared}")


def _check_edits_only_in_schemas(
    tree: Path, before: AuditResult, after: AuditResult, changed: str, score: FixScore
) -> None:
    """Every changed line must hold (part of) a schema that still parses."""
    diff = _git(tree, "diff", "-U0").stdout
    for line in diff.splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            literals = re.findall(r'"((?:[^"\\]|\\.)*)"', line)
            if not literals:
                score.destructive.append(f"edit outside a string literal: {line.strip()}")
    for report in after.ops:
        if try_parse_schema(report.op.schema.text) is None:
            score.destructive.append(f"{report.op.qualname}: schema no longer parses")


SETS = ("development", "held-out")


def _row(label: str, ops: int, counts: Counts) -> str:
    pairs = counts.tp + counts.fp + counts.fn + counts.tn
    return (
        f"{label:22} {ops:4} {pairs:6} {counts.tp:4} {counts.fp:4} {counts.fn:4} "
        f"{counts.precision():6.1%} {counts.recall():6.1%}"
    )


def _add(total: Counts, counts: Counts) -> None:
    for name in ("tp", "fp", "fn", "tn", "low_only", "unjudged"):
        setattr(total, name, getattr(total, name) + getattr(counts, name))
    total.unjudged_claims.extend(counts.unjudged_claims)
    total.misses.extend(counts.misses)
    total.rows.extend(counts.rows)
    total.false.extend(counts.false)


def _fix_line(fix: FixScore) -> str:
    share = fix.complete / fix.hazardous if fix.hazardous else 1.0
    low_f, high_f = clopper_pearson(fix.complete, fix.hazardous)
    return (
        f"{fix.complete}/{fix.hazardous} hazardous ops fixed completely ({share:.1%}, "
        f"95% {low_f:.1%}-{high_f:.1%})"
    )


def _intervals(counts: Counts) -> str:
    low_p, high_p = clopper_pearson(counts.tp, counts.tp + counts.fp)
    low_r, high_r = clopper_pearson(counts.tp, counts.tp + counts.fn)
    return (
        f"precision {low_p:.1%}-{high_p:.1%} ({counts.tp}/{counts.tp + counts.fp}), "
        f"recall {low_r:.1%}-{high_r:.1%} ({counts.tp}/{counts.tp + counts.fn})"
    )


def main() -> int:
    """Score every corpus library and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(CORPUS))
    parser.add_argument("--cache", default=None, help=f"default: {default_cache()}")
    parser.add_argument("--offline", action="store_true", help="never download an sdist")
    parser.add_argument("--lib", action="append", default=[], help="only this library")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    corpus = Path(args.corpus)
    cache = Path(args.cache).expanduser() if args.cache else default_cache()
    try:
        trees = ensure_corpus(corpus, cache, args.offline)
    except CorpusError as exc:
        print(f"audit corpus: {exc}", file=sys.stderr)
        return 2
    unknown = sorted(set(args.lib) - set(trees))
    if unknown:
        print(f"audit corpus: no library {', '.join(unknown)} in {corpus}", file=sys.stderr)
        return 2
    total = Counts()
    by_set = {key: Counts() for key in SETS}
    fixes = {key: FixScore() for key in ("all", *SETS)}
    ops = 0
    set_ops = dict.fromkeys(SETS, 0)
    print(
        f"{'library':22} {'ops':>4} {'pairs':>6} {'TP':>4} {'FP':>4} {'FN':>4} "
        f"{'prec':>6} {'recall':>6}"
    )
    for name, tree in trees.items():
        if args.lib and name not in args.lib:
            continue
        truths = load_truths(corpus / name)
        ops += len(truths)
        counts = Counts()
        result = _audit_in(tree)
        score_inference(result, truths, counts)
        for key in SETS:
            chosen = [t for t in truths if t.set == key]
            set_ops[key] += len(chosen)
            score_inference(result, chosen, by_set[key])
        score_fix(name, tree, truths, fixes)
        print(_row(name, len(truths), counts))
        _add(total, counts)
    print(_row("all", ops, total) + f"   (low-confidence only: {total.low_only})")
    if args.verbose:
        print("\n".join(total.rows))
    print(f"95% exact intervals: {_intervals(total)}")
    if total.misses:
        print(f"missed writes: {', '.join(total.misses)}")
    if total.false:
        print(f"false writes: {', '.join(total.false)}")
    if total.unjudged:
        claims = ", ".join(total.unjudged_claims) or "none"
        print(f"left undecidable by the truth, not scored: {total.unjudged} (claimed: {claims})")
    fix = fixes["all"]
    print(
        f"--fix on the stripped corpus: {_fix_line(fix)}; destructive rewrites: "
        f"{len(fix.destructive)}; annotations on parameters not written: {len(fix.spurious)}"
    )
    for line in fix.incomplete if args.verbose or fix.incomplete else []:
        print(f"  incomplete: {line}")
    for line in fix.destructive:
        print(f"  destructive: {line}")
    for line in fix.spurious:
        print(f"  spurious annotation: {line}")
    for key in SETS:
        print(f"set {_row(key, set_ops[key], by_set[key])}   --fix {_fix_line(fixes[key])}")
        print(f"    {key} 95% exact intervals: {_intervals(by_set[key])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
