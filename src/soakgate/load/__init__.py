"""The load driver: closed-loop, fixed-concurrency soaks against one or more targets."""

from soakgate.load.driver import soak
from soakgate.load.spec import LoadSpec, SoakResult, TargetTally

__all__ = ["LoadSpec", "SoakResult", "TargetTally", "soak"]
