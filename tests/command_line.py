"""The real `soakgate` command line, run as a user runs it (a subprocess): one helper for the
whole suite, kept in `tests.cli.helpers` and named here for the tests that import it from here."""

from __future__ import annotations

from tests.cli.helpers import soakgate

__all__ = ["soakgate"]
