"""The guard: engine-fault watchers, device telemetry and recovery of campaign server instances.

Import from the submodules (`guard.watch`, `guard.telemetry`, ...): this package file stays empty
so `guard.telemetry` imports with the standard library only (the GPU probe script needs that).
"""
