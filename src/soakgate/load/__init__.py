"""The load driver: closed-loop, fixed-concurrency soaks against one or more targets."""

from soakgate.load.driver import LoadSpec, SoakResult, TargetTally, soak

__all__ = ["LoadSpec", "SoakResult", "TargetTally", "soak"]
