"""Probes beyond the plain soak: concurrency sweeps, determinism baselines, differential checks."""
