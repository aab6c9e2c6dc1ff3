"""`#if` alternatives inside parentheses read as their first one (issue 32, tuned after the
held-out run): only inside parentheses, offsets kept, an unbalanced line above forgotten."""

from __future__ import annotations

from soakgate.audit.extract_cpp import first_alternatives

SOURCE = b"""/* ( */ int x = f(1;
void g(
#ifdef A
    int a,
#else
    long a,
#endif
    int b) {}
#ifdef B
void h() {}
#else
void i() {}
#endif
"""


def test_only_alternatives_inside_parentheses_are_reduced_and_offsets_are_kept() -> None:
    out = first_alternatives(SOURCE)
    assert len(out) == len(SOURCE) and out.count(b"\n") == SOURCE.count(b"\n")
    assert b"int a," in out and b"long a," not in out and b"#ifdef A" not in out
    # the file-level alternatives stay for the grammar, both of them
    assert b"void h()" in out and b"void i()" in out and b"#ifdef B" in out


def test_a_source_without_alternatives_is_returned_as_is() -> None:
    text = b"void f(int a) { g(a); }\n"
    assert first_alternatives(text) is text
