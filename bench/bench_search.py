"""Bench (issue 33): what `soakgate search` costs and how often it names the wrong knobs, beside
the full factorial at the same error rates.

Simulated part: the search's own walk (`search.walk`, as `soakgate search` runs it) over
simulated blocks of independent failures, with the shipped `[search]` defaults, for failures
that need 1, 2 or 3 of K knobs, at the failing rate given and at the rates where its bounds are
tightest (every failing configuration at exactly reproduce x the failing rate, the clean ones at
the clean bound). It prints, with Monte Carlo standard errors: named exactly, named a knob that
does not matter (its bound: false_knob), left out a needed knob (bound: missed_knob), stopped
without an answer, requests per search; and the full factorial's requests (every one of the 2^K
configurations judged by the same sequential test, the bounds shared over the 2^K).

Clustered part: failures in bursts (mean length 2 and 5), as given and at the bounds, with the
default `design_effect` 1 and with 9 (what bursts of 5 inflate a block's variance by): how often
the search names a knob that does not matter, and how often it does so without the warning that
the block counts vary more than its model allows (which voids its bounds, exit 1).

Real part (`--real N`): N searches of `examples/mock-search.toml` (six knobs, the failure needs
two, 0.5% of answers) through the real CLI against real mock servers, each under its own name
(so its own seeds); it prints how many named exactly the two knobs, how many named a knob that
does not matter, and the generations each used.

Run: python bench/bench_search.py [--searches 2000] [--knobs 6] [--real 10]
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from soakgate.search.model import SearchSettings, design_for  # noqa: E402
from soakgate.search.plan import (  # noqa: E402
    Outcomes,
    Scenario,
    simulate_factorial,
    simulate_search,
)

EXAMPLE = REPO / "examples" / "mock-search.toml"
NEEDED = {"--knobs.mode=3", "--knobs.pass_config.fuse=true"}


def _pm(found: Outcomes, rate: float) -> str:
    return f"{rate:.2%}±{found.se(rate):.2%}"


HEADER = (f"{'needed':>6} {'failing':>8} {'clean':>7} {'burst':>5} {'effect':>6} {'exact':>14} "
          f"{'extra knob':>14} {'unwarned':>13} {'missed':>12} {'stopped':>14} {'warned':>14} "
          f"{'requests':>16} {'factorial':>18} {'ratio':>6}")  # fmt: skip


def _row(needed: int, scenario: Scenario, effect: float, found: Outcomes,
         factorial: tuple[float, float] | None) -> str:  # fmt: skip
    cost = "" if factorial is None else (f"{factorial[0]:>11,.0f}±{factorial[1]:<6,.0f} "
                                         f"{found.requests / factorial[0]:>6.3f}")  # fmt: skip
    return (f"{needed:>6} {scenario.failing_rate:>8.3%} {scenario.baseline_rate:>7.3%} "
            f"{scenario.burst:>5g} {effect:>6g} {_pm(found, found.exact):>14} "
            f"{_pm(found, found.extra):>14} {_pm(found, found.extra_unwarned):>13} "
            f"{_pm(found, found.missed):>12} {_pm(found, found.stopped):>14} "
            f"{_pm(found, found.warned):>14} "
            f"{found.requests:>9,.0f}±{found.requests_se:<6,.0f} {cost}")  # fmt: skip


def simulated(searches: int, knobs: int, failing_rate: float, block: int) -> None:
    settings = SearchSettings("clean", "failing", failing_rate)
    design = design_for(settings, knobs)
    print(f"simulated: {knobs} knobs, shipped defaults (false_knob {settings.false_knob}, "
          f"missed_knob {settings.missed_knob}, reproduce {settings.reproduce}), blocks of "
          f"{block}, {searches} searches per row; ± Monte Carlo standard error; `unwarned`: "
          "named a knob that does not matter without the clustering warning")  # fmt: skip
    print(HEADER)
    worlds = [(failing_rate, 0.0), (design.p_fail, design.p_clean)]
    for size in (1, 2, 3):
        needed = tuple(range(0, knobs, max(1, knobs // size)))[:size]
        for rate, baseline in worlds:
            scenario = Scenario(knobs, needed, rate, baseline, block)
            found = simulate_search(design, scenario, searches, seed=size)
            factorial, factorial_se, _ = simulate_factorial(
                scenario, settings.false_knob, settings.missed_knob, settings.reproduce, 1.0,
                max(20, searches // 20), seed=size,
            )  # fmt: skip
            print(_row(size, scenario, 1.0, found, (factorial, factorial_se)))


def clustered(searches: int, knobs: int, failing_rate: float, block: int) -> None:
    """Failures in bursts (mean length 2 and 5: a block's count overdispersed about 3- and
    9-fold), the failure needing 2 knobs, as given and at the bounds, with the default design
    effect 1 and with 9."""
    print("clustered: failures in bursts; the failure needing 2 knobs")
    print(HEADER)
    for burst, effect in ((2.0, 1.0), (5.0, 1.0), (5.0, 9.0)):
        settings = SearchSettings("clean", "failing", failing_rate, design_effect=effect)
        design = design_for(settings, knobs)
        for rate, baseline in ((failing_rate, 0.0), (design.p_fail, design.p_clean)):
            scenario = Scenario(knobs, (0, knobs - 1), rate, baseline, block, burst=burst)
            found = simulate_search(design, scenario, searches, seed=7)
            print(_row(2, scenario, effect, found, None))


def real(count: int) -> None:
    print(f"real: {count} searches of {EXAMPLE.name} through the CLI against mock servers")
    exact = extra = 0
    for i in range(count):
        with tempfile.TemporaryDirectory() as tmp:
            text = EXAMPLE.read_text().replace('name = "mock-search"', f'name = "bench-{i}"')
            path = Path(tmp) / "search.toml"
            path.write_text(text)
            db = Path(tmp) / "s.sqlite"
            start = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "soakgate", "search", str(path), "--db",
                                   str(db), "--quiet"], capture_output=True, text=True)  # fmt: skip
            wall = time.monotonic() - start
            named, generations = _stored(db, f"bench-{i}")
            exact += set(named or []) == NEEDED
            extra += bool(set(named or []) - NEEDED)
            answer = re.findall(r"^(the failure follows .*|no answer: .*)$", done.stdout, re.M)
            print(
                f"  search {i}: exit {done.returncode}, named {named}, {generations:,} "
                f"generations, {wall:.0f} s: {answer[0] if answer else done.stderr[-200:]}"
            )
    print(f"named exactly the two knobs in {exact}/{count}; named a knob that does not matter "
          f"in {extra}/{count}")  # fmt: skip


def _stored(db: Path, name: str) -> tuple[list[str] | None, int]:
    connection = sqlite3.connect(db)
    try:
        rows = connection.execute("SELECT data FROM events WHERE kind = 'search_finished'")
        finished = [json.loads(r[0]) for r in rows]
        generations = connection.execute("SELECT COUNT(*) FROM generations").fetchone()[0]
    finally:
        connection.close()
    return (finished[-1]["named"] if finished else None), int(generations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--searches", type=int, default=2000)
    parser.add_argument("--knobs", type=int, default=6)
    parser.add_argument("--failing-rate", type=float, default=0.005)
    parser.add_argument("--block", type=int, default=1000)
    parser.add_argument("--real", type=int, default=0, help="real searches against the mock")
    args = parser.parse_args()
    simulated(args.searches, args.knobs, args.failing_rate, args.block)
    clustered(args.searches, args.knobs, args.failing_rate, args.block)
    if args.real:
        real(args.real)


if __name__ == "__main__":
    main()
