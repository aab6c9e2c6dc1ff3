"""Integrity checks across requests: answers that carry what belongs to another request.

A check sees every request as it is sent (`sent`) and every clean answer as its row is made
(`answered`); a failed check names itself in `Generation.checks` (`records.CHECKS`), with its
evidence in `details[name]`. A failed check is an outcome of its own, never a collapse.
"""

from soakgate.checks.canary import Canaries
from soakgate.checks.crosstalk import CROSSTALK, Crosstalk, CrosstalkSettings, open_crosstalk

__all__ = ["CROSSTALK", "Canaries", "Crosstalk", "CrosstalkSettings", "open_crosstalk"]
