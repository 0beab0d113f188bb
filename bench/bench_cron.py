"""Next-occurrence speed: goatbeat's cron engine against croniter and cronsim.

Same process, same expressions, zone Europe/Paris, start 2026-01-01: each engine computes a
long run of sequential next occurrences (goatbeat: ``next_after(previous)``; croniter and
cronsim: their iterators, their fastest sequential API). Prints a Markdown table of
occurrences per second and the geometric-mean speedup of goatbeat against each.

The goatbeat column is a cold start: every run first empties goatbeat's caches (parsed
expressions, matching days per month, zone offset tables), as croniter and cronsim keep
none. The "warm" column keeps them, as a long-running scheduler does.

    /tmp/gbvenv/bin/python bench/bench_cron.py [--calls N] [--repeat R]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from croniter import croniter  # noqa: E402
from cronsim import CronSim  # noqa: E402

from goatbeat.core import cron  # noqa: E402
from goatbeat.core.cron import CronTrigger  # noqa: E402

ZONE = "Europe/Paris"
START = datetime(2026, 1, 1, tzinfo=UTC)
EXPRESSIONS = [
    "* * * * *",
    "*/5 * * * *",
    "*/15 9-17 * * mon-fri",
    "0 9 * * *",
    "0 9 * * 1-5",
    "30 2 * * *",
    "0 0 1 * *",
    "0 0 L * *",
    "0 12 * * 5L",
    "15 10 * * 5#2",
    "0 0 29 2 *",
    "*/10 * * * * *",
]

Runner = Callable[[str, int], list[datetime]]


def clear_goatbeat_caches() -> None:
    """Forget parsed expressions, month tables and zone offset tables: a cold start."""
    cron._parse_text.cache_clear()
    cron._wall_matcher.cache_clear()
    cron._year_transitions.cache_clear()


def run_goatbeat_cold(expression: str, calls: int) -> list[datetime]:
    clear_goatbeat_caches()
    return run_goatbeat(expression, calls)


def run_goatbeat(expression: str, calls: int) -> list[datetime]:
    trigger = CronTrigger(expression, timezone=ZONE)
    out: list[datetime] = []
    current: datetime | None = START
    next_after = trigger.next_after
    for _ in range(calls):
        assert current is not None
        current = next_after(current)
        out.append(current)  # type: ignore[arg-type]
    return out


def run_cronsim(expression: str, calls: int) -> list[datetime]:
    iterator = CronSim(expression, START.astimezone(ZoneInfo(ZONE)))
    return [next(iterator) for _ in range(calls)]


def run_croniter(expression: str, calls: int) -> list[datetime]:
    iterator = croniter(
        expression,
        START.astimezone(ZoneInfo(ZONE)),
        implement_cron_bug=True,
        second_at_beginning=True,
    )
    return [iterator.get_next(datetime) for _ in range(calls)]


ENGINES: dict[str, Runner] = {
    "goatbeat": run_goatbeat_cold,
    "goatbeat warm": run_goatbeat,
    "croniter": run_croniter,
    "cronsim": run_cronsim,
}


def measure(
    runner: Runner, expression: str, calls: int, repeat: int
) -> tuple[float, list[datetime]]:
    """Best occurrences per second over ``repeat`` runs, and the occurrences themselves."""
    best = math.inf
    result: list[datetime] = []
    for _ in range(repeat):
        began = time.perf_counter()
        result = runner(expression, calls)
        best = min(best, time.perf_counter() - began)
    return calls / best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000, help="occurrences per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (best kept)")
    args = parser.parse_args()

    rows: list[tuple[str, dict[str, float | None], str]] = []
    for expression in EXPRESSIONS:
        # Rare expressions get fewer calls so the slow engines finish.
        calls = args.calls if expression != "0 0 29 2 *" else max(args.calls // 100, 5)
        rates: dict[str, float | None] = {}
        results: dict[str, list[datetime]] = {}
        for name, runner in ENGINES.items():
            try:
                rates[name], results[name] = measure(runner, expression, calls, args.repeat)
            except Exception as exc:  # an oracle that rejects the syntax
                rates[name] = None
                print(f"note: {name} fails on {expression!r}: {exc!r}", file=sys.stderr)
        ours = [d.timestamp() for d in results["goatbeat"]]
        disagree = [
            name
            for name in ("croniter", "cronsim")
            if name in results and [d.timestamp() for d in results[name]] != ours
        ]
        rows.append((expression, rates, ", ".join(disagree) or "-"))

    print(
        f"Zone {ZONE}, start {START.isoformat()}, {args.calls} sequential next() per run, "
        f"best of {args.repeat}; Python {sys.version.split()[0]}\n"
    )
    print(
        "| expression | goatbeat ops/s | warm ops/s | croniter ops/s | cronsim ops/s "
        "| x croniter | x cronsim | results differ from |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    speedups: dict[str, list[float]] = {"croniter": [], "cronsim": []}
    for expression, rates, disagree in rows:
        ours = rates["goatbeat"]
        assert ours is not None
        cells = [f"`{expression}`", f"{ours:,.0f}", f"{rates['goatbeat warm']:,.0f}"]
        ratios = []
        for name in ("croniter", "cronsim"):
            theirs = rates[name]
            cells.append("n/a" if theirs is None else f"{theirs:,.0f}")
        for name in ("croniter", "cronsim"):
            theirs = rates[name]
            if theirs is None:
                ratios.append("n/a")
            else:
                speedups[name].append(ours / theirs)
                ratios.append(f"{ours / theirs:.1f}")
        print("| " + " | ".join(cells + ratios + [disagree]) + " |")
    print()
    for name, values in speedups.items():
        geomean = math.exp(sum(math.log(v) for v in values) / len(values))
        print(f"geometric-mean speedup vs {name}: {geomean:.1f}x over {len(values)} expressions")


if __name__ == "__main__":
    main()
