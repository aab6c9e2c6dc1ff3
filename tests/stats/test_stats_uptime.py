"""The rate against uptime: a table per uptime bin and the fitted rise to a steady rate."""

from __future__ import annotations

import math

import numpy as np
from bench.processes import by_name, simulate

from soakgate.stats.uptime import fit_uptime, uptime_table


def test_a_rate_rising_with_uptime_is_found_with_its_scale() -> None:
    # hazard 0.2% x (1 - exp(-uptime / 4,000)): 90% of the steady rate after ~9,200 requests
    runs = simulate(by_name("uptime"), np.random.default_rng(5), 6, 40_000, 0.002, True)
    fit = fit_uptime(runs)
    assert fit.rising_p < 0.01
    assert 2_000 < fit.scale < 8_000 and fit.scale_high > 4_000
    assert fit.warmup >= 9_000  # at least the true 90% point
    assert math.isclose(fit.steady, 0.002, rel_tol=0.2)
    table = uptime_table(runs)
    assert sum(b.events for b in table) == sum(int(s.sum()) for s in runs)
    assert sum(b.n for b in table) == 6 * 40_000
    assert table[0].rate < table[-1].rate / 3 and table[-1].ci_low < 0.002 < table[-1].ci_high


def test_a_flat_rate_is_called_flat() -> None:
    runs = simulate(by_name("independent"), np.random.default_rng(6), 4, 20_000, 0.002, True)
    fit = fit_uptime(runs)
    assert fit.rising_p > 0.05 and fit.warmup < 10_000
    assert "rate against uptime" in fit.line()


def test_clustering_widens_what_the_runs_can_say() -> None:
    runs = simulate(by_name("uptime"), np.random.default_rng(7), 2, 20_000, 0.002, True)
    plain, clustered = fit_uptime(runs, 1.0), fit_uptime(runs, 6.0)
    assert clustered.scale_high >= plain.scale_high and clustered.rising_p > plain.rising_p
    wide = uptime_table(runs, 6.0)
    narrow = uptime_table(runs, 1.0)
    assert all(w.ci_high >= n.ci_high for w, n in zip(wide, narrow, strict=True))


def test_no_failures_is_no_rise() -> None:
    fit = fit_uptime([np.zeros(5_000, dtype=bool)])
    assert fit.scale == 0.0 and fit.rising_p == 1.0
    assert fit.line() == "rate does not change with uptime (no failure to fit)"
