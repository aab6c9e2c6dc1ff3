"""Failure rates with exact (Clopper–Pearson) intervals, the figures every report row shows."""

from __future__ import annotations

from dataclasses import dataclass

from soakgate.errors import UsageError


@dataclass(frozen=True, slots=True)
class RateSummary:
    """A collapse rate with its exact two-sided CI and, for zero events, a one-sided bound."""

    events: int
    """Number of flagged generations (collapses)."""
    n: int
    """Number of generations scored."""
    rate: float
    """Point estimate events / n."""
    ci_low: float
    """Lower end of the exact two-sided interval."""
    ci_high: float
    """Upper end of the exact two-sided interval."""
    confidence: float
    """Confidence level of the interval (e.g. 0.95)."""
    upper_bound_one_sided: float | None
    """One-sided upper bound at `confidence` when events == 0 (the exact 'rule of three')."""


def check_counts(events: int, n: int) -> None:
    """Raise UsageError unless 0 <= events <= n and n > 0."""
    if n <= 0:
        raise UsageError(f"need at least one generation, got n={n}")
    if events < 0 or events > n:
        raise UsageError(f"events must be in [0, n], got events={events}, n={n}")


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise UsageError(f"confidence must be in (0, 1), got {confidence}")


def clopper_pearson(events: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided binomial CI (Clopper–Pearson, via statsmodels' beta method)."""
    from statsmodels.stats.proportion import proportion_confint

    check_counts(events, n)
    _check_confidence(confidence)
    low, high = proportion_confint(events, n, alpha=1.0 - confidence, method="beta")
    # statsmodels returns nan at the boundaries on some versions; the exact limits are 0 and 1.
    low_f = 0.0 if events == 0 else float(low)
    high_f = 1.0 if events == n else float(high)
    return low_f, high_f


def zero_event_upper_bound(n: int, confidence: float = 0.95) -> float:
    """Exact one-sided upper bound for a rate after 0 events in n: 1 - (1-confidence)**(1/n)."""
    check_counts(0, n)
    _check_confidence(confidence)
    return float(1.0 - (1.0 - confidence) ** (1.0 / n))


def summarize_rate(events: int, n: int, confidence: float = 0.95) -> RateSummary:
    """Rate, exact CI and (for zero events) the one-sided upper bound, in one record."""
    low, high = clopper_pearson(events, n, confidence)
    upper = zero_event_upper_bound(n, confidence) if events == 0 else None
    return RateSummary(events, n, events / n, low, high, confidence, upper)
