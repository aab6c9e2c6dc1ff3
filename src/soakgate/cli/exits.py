"""The exit-code contract of every `soakgate` command (README, *Exit codes*).

0    done, no finding
1    a finding: a DIFFER verdict with --fail-on-differ, audit findings at or above --fail-on,
     a campaign block that failed
2    the command could not do its job: bad input, an unreadable database, an unreachable
     target, a bug
130  interrupted (Ctrl-C/SIGTERM); what was collected is stored, `--resume` continues
"""

from __future__ import annotations

OK = 0
FINDING = 1
FAILED = 2
INTERRUPTED = 130
