"""The one exception root of soakgate.

    SoakgateError                 every error soakgate raises on purpose: exit 2
    ├── UsageError                bad input from the user (arguments, files, numbers)
    │   ├── ConfigError           a campaign/plan/prompt file that cannot be used
    │   └── UnitMismatchError     a comparison of different units of analysis
    ├── TargetError               a target cannot be used at all (unreachable before the soak)
    ├── StoreError                the database cannot be opened or written: exit 2
    │   ├── StoreLost             the database file was deleted, replaced or made immutable
    │   └── StoreFailedError      a soak stopped because its rows could not be stored
    ├── PlanError                 a pre-registration missing, altered or registered after the data
    ├── ServerError               a managed server failed to start or stay up (campaigns)
    ├── AuditError                a source or library cannot be audited
    └── BisectError               a model cannot be loaded, run eager or compiled for `bisect`

Every one of them means "the command could not do its job" and exits 2: exit code 1 is kept for
findings (a DIFFER verdict with --fail-on-differ, audit findings, a failed campaign block), which
are results, never exceptions (README, *Exit codes*).
Third-party errors (aiohttp, sqlite3, OSError) are translated at the boundary where they occur.
Failed *requests* during a soak are not raised: they are stored as records with an error class.
"""

from __future__ import annotations


class SoakgateError(Exception):
    """Root of every error soakgate raises on purpose; carries a one-line message for the CLI."""

    exit_code = 2


class UsageError(SoakgateError):
    """Bad input from the user: arguments, numbers, files."""


class ConfigError(UsageError):
    """A campaign, plan or prompt file that cannot be used."""


class UnitMismatchError(UsageError):
    """A comparison of different units of analysis (an aggregate against one target)."""


class TargetError(SoakgateError):
    """A target cannot be used at all (unreachable, not an OpenAI-compatible server)."""


class StoreError(SoakgateError):
    """The store cannot be opened or written."""

    exit_code = 2


class StoreLost(StoreError):
    """The database file is no longer the one opened (deleted, replaced) or can no longer be
    written safely (made immutable): no retry can help."""


class StoreFailedError(StoreError):
    """A soak was stopped because its rows could not be stored; the message says where the
    rows that were not stored went."""


class PlanError(SoakgateError):
    """A pre-registered plan is missing, altered, or registered after the data."""


class ServerError(SoakgateError):
    """A managed server process failed to start or to stay up."""


class AuditError(SoakgateError):
    """A source tree or library cannot be audited."""


class BisectError(SoakgateError):
    """A model cannot be loaded, run eagerly or compiled for `soakgate bisect`."""
