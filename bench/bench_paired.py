"""Paired benchmark: one tree against a base revision, alternating, in one session.

``python -m bench.bench_paired --base REV_OR_TREE [--new REV_OR_TREE] [--rounds N]
[--only claim|dispatch|startup]``

Each side is a tree: a directory as given, or a detached ``git worktree`` of a revision made
under ``/tmp`` (removed at the end); ``--new`` defaults to this checkout. The servers
(PostgreSQL with production durability, Redis) are started once, or reused when
``GOATBEAT_BENCH_PG_DSN`` / ``GOATBEAT_BENCH_REDIS_URL`` name them. Every measurement runs in
its own child process with ``cwd`` and ``PYTHONPATH`` set to that side's tree, with this
interpreter, on a fresh database migrated by that tree's own code, and calls that tree's own
bench functions (``bench_claim.child_goatbeat`` / ``child_store``, ``bench_dispatch.child_goatbeat``,
``bench_startup._end_to_end``, ``_common.SchedulerProcess``: all present, unchanged, in
f1ab9f3). Rounds alternate ABBA (base, new; new, base; ...), so a slow spell of the shared
machine falls on both sides alike; each round gives one ratio new / base per measure, and the
table shows the median of those ratios with their range.

Measures, each as wall time (or rate) and CPU time of the process doing the work:

- ``claim, Scheduler`` / ``claim, store only``: N interval schedules all due, batches of 500,
  ``Scheduler.run_once()`` with the no-op submitter / ``claim_due`` + ``record_outcomes``
  (bench_claim). CPU: the child's user + system time over the call (``getrusage``).
- ``dispatch``: 10,000 due to Celery over Redis (bench_dispatch's goatbeat contender). CPU:
  the child's ``process_time`` over the loop, as bench_dispatch reports it.
- ``first start`` / ``restart``: ``goatbeat --app bench.code_app:make_beat scheduler`` with
  ``count`` code schedules, from ``Popen`` to its ``lease.acquired`` line, first on a fresh
  database (publishes every declaration), then again on the same one (nothing changed). CPU:
  the scheduler process's user + system time at that line (``/proc/PID/stat``).
- ``end to end``: bench_startup's run, 10,000 code schedules due, exec to the first message
  in Redis and the rate to the 10,000th. CPU: its processes (publish, scheduler) over their
  whole life (``RUSAGE_CHILDREN``).

Load moves wall and even CPU time (a shared core's caches, frequency); it does not move the
work done. So each side is also run once under ``cProfile`` for a count of Python function
calls (``pstats.Stats.total_calls``, built-ins included) of the same work: the claim loops,
and for start-up the in-process ``make_beat()`` + ``beat.publish()`` of the code schedules
(first on a fresh database, then unchanged). The dispatch loop's count covers the main
thread only (the submission thread is not profiled) and depends on how often the loop waits.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
MEASURES: dict[str, list[str]] = {
    "claim": ["claim_scheduler", "claim_store"],
    "dispatch": ["dispatch"],
    "startup": ["first_start", "restart", "end_to_end"],
}
LABELS = {
    "claim_scheduler": "claim, goatbeat Scheduler (no-op submitter)",
    "claim_store": "claim, store only (claim_due + record_outcomes)",
    "dispatch": "dispatch to Celery over Redis, goatbeat Scheduler",
    "first_start": "first start (publishes all), until lease.acquired",
    "restart": "restart, nothing changed, until lease.acquired",
    "end_to_end": "end to end: exec -> first message",
    "end_to_end_rate": "end to end: first -> last message",
    "publish_first": "publish code schedules, fresh database (in-process)",
    "publish_again": "publish the same again, unchanged (in-process)",
}
TOLERANCE = 0.05


# -- arithmetic (unit-tested) ---------------------------------------------------------------


def abba(rounds: int) -> Iterator[tuple[int, str]]:
    """(round, side) in ABBA order: base first in even rounds, new first in odd ones."""
    for r in range(rounds):
        sides = ("base", "new") if r % 2 == 0 else ("new", "base")
        for side in sides:
            yield r, side


def ratios(base: Sequence[float | None], new: Sequence[float | None]) -> list[float]:
    """Per-pair ratios new / base; pairs with a missing or zero base are left out."""
    return [n / b for b, n in zip(base, new, strict=True) if b and n is not None]


def summarize(values: Sequence[float]) -> dict[str, float] | None:
    """Median and range of per-pair ratios."""
    if not values:
        return None
    return {"median": statistics.median(values), "low": min(values), "high": max(values)}


def within(summary: Mapping[str, float] | None, higher_is_better: bool) -> bool | None:
    """Whether the median ratio is no more than TOLERANCE worse than the base."""
    if summary is None:
        return None
    median = summary["median"]
    return median >= 1 - TOLERANCE if higher_is_better else median <= 1 + TOLERANCE


# -- the child: runs inside a side's tree, with that tree's code ---------------------------


def _cpu_self() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu_children() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _counted(fn: Callable[[], Any]) -> tuple[Any, int]:
    import cProfile
    import pstats

    profile = cProfile.Profile()
    profile.enable()
    try:
        result = fn()
    finally:
        profile.disable()
    return result, int(pstats.Stats(profile).total_calls)  # type: ignore[attr-defined]


def _due_rows(dsn: str, n: int) -> None:
    from datetime import UTC, datetime, timedelta

    from bench import _common as common

    due = datetime.now(UTC) - timedelta(seconds=1)
    spec = {"kind": "interval", "every": 3600.0, "anchor": None}
    common.insert_schedules(dsn, [f"bench-{i}" for i in range(n)], [spec] * n, [due] * n)


def child_claim(args: dict[str, Any]) -> dict[str, Any]:
    from bench import _common as common
    from bench import bench_claim

    fn = bench_claim.child_goatbeat if args["kind"] == "scheduler" else bench_claim.child_store
    common.migrate(args["dsn"])
    _due_rows(args["dsn"], args["n"])
    call = {"n": args["n"], "dsn": args["dsn"]}
    if args.get("calls"):
        out, calls = _counted(lambda: fn(call))
        return {"calls": calls, "claimed": out["claimed"]}
    cpu = _cpu_self()
    out = fn(call)
    cpu = _cpu_self() - cpu
    return {"seconds": out["seconds"], "rate": out["claimed"] / out["seconds"], "cpu": cpu,
            "claimed": out["claimed"]}  # fmt: skip


def child_dispatch(args: dict[str, Any]) -> dict[str, Any]:
    from bench import _common as common
    from bench import bench_dispatch

    common.reset_queue(args["redis"])
    common.migrate(args["dsn"])
    _due_rows(args["dsn"], args["n"])
    call = {"contender": "goatbeat", "n": args["n"], "cap": 600.0, "redis": args["redis"],
            "dsn": args["dsn"]}  # fmt: skip
    if args.get("calls"):
        out, calls = _counted(lambda: bench_dispatch.child_goatbeat(call))
        return {"calls": calls, "landed": out.get("landed")}
    out = bench_dispatch.child_goatbeat(call)
    return {"seconds": out["seconds"], "rate": out["rate"], "cpu": out["cpu"],
            "landed": out.get("landed")}  # fmt: skip


def _ready(dsn: str, count: int) -> dict[str, float]:
    from bench import _common as common

    proc = common.SchedulerProcess(
        dsn,
        app="bench.code_app:make_beat",
        scheduler_id="bench-startup",
        env={"GOATBEAT_BENCH_SCHEDULES": str(count)},
    )
    try:
        ready_at, _ = proc.wait_for("lease.acquired", 300)
        cpu = common.proc_cpu_seconds(proc.pid)
    finally:
        proc.stop()
    return {"seconds": ready_at - proc.started_at, "cpu": cpu}


def child_startup(args: dict[str, Any]) -> dict[str, Any]:
    from bench import _common as common

    dsn = args["dsn"]
    common.migrate(dsn)
    if args.get("calls"):
        os.environ["GOATBEAT_BENCH_DB"] = dsn
        os.environ["GOATBEAT_BENCH_SCHEDULES"] = str(args["count"])
        os.environ.pop("GOATBEAT_BENCH_BROKER", None)
        from bench.code_app import make_beat

        def publish() -> Any:
            beat = make_beat()
            try:
                return beat.publish()
            finally:
                close = getattr(beat, "close", None)
                if close is not None:
                    close()

        _, first = _counted(publish)
        _, again = _counted(publish)
        return {"publish_first": {"calls": first}, "publish_again": {"calls": again}}
    first = _ready(dsn, args["count"])
    restart = _ready(dsn, args["count"])
    from bench import bench_startup

    servers = common.Servers()
    servers.pg_dsn, servers.redis_url = args["pg"], args["redis"]
    cpu = _cpu_children()
    e2e = bench_startup._end_to_end(servers, args["e2e"])
    cpu = _cpu_children() - cpu
    return {
        "first_start": first,
        "restart": restart,
        "end_to_end": {"seconds": e2e["first_message"], "cpu": cpu},
        "end_to_end_rate": {"seconds": e2e["seconds"], "rate": e2e["rate"]},
    }


CHILDREN = {"claim": child_claim, "dispatch": child_dispatch, "startup": child_startup}


def _child(raw: str) -> None:
    args = json.loads(raw)
    import goatbeat

    out = CHILDREN[args["what"]](args)
    out["goatbeat"] = str(Path(goatbeat.__file__).resolve().parent.parent)
    print(json.dumps(out, default=str), flush=True)


# -- the parent -----------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


class Trees:
    """The trees of the sides: directories as given, or detached worktrees made here."""

    def __init__(self) -> None:
        self.made: list[Path] = []

    def get(self, spec: str | None) -> tuple[Path, str]:
        if spec is None:
            return ROOT, _git("rev-parse", "--short", "HEAD") + " (this checkout)"
        path = Path(spec)
        if path.is_dir():
            rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=path, check=True,
                                 capture_output=True, text=True).stdout.strip()  # fmt: skip
            return path.resolve(), rev
        rev = _git("rev-parse", "--short", spec)
        where = Path(tempfile.mkdtemp(prefix=f"goatbeat-pair-{rev}-"))
        where.rmdir()
        _git("worktree", "add", "--detach", str(where), rev)
        self.made.append(where)
        return where, rev

    def remove(self) -> None:
        for path in self.made:
            subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT,
                           check=False, capture_output=True)  # fmt: skip
        self.made.clear()


def _compile(tree: Path) -> None:
    # As bench/_common.compile_bytecode does for its own tree: PYTHONDONTWRITEBYTECODE=1 on
    # this machine would otherwise make every child compile goatbeat from source.
    import compileall

    for package in ("goatbeat", "bench"):
        compileall.compile_dir(str(tree / package), quiet=1)


def run_side(tree: Path, args: Mapping[str, Any], timeout: float = 900) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    # -P: the script's directory (this bench/) is not put on sys.path; the tree's bench is.
    proc = subprocess.run(
        [sys.executable, "-P", str(HERE), "--child", json.dumps(dict(args))],
        cwd=tree, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"{tree}: {args['what']} failed:\n{(proc.stderr or proc.stdout)[-3000:]}"
        )
    out: dict[str, Any] = json.loads(lines[-1])
    if Path(out["goatbeat"]) != tree:
        raise RuntimeError(f"{tree}: the child imported goatbeat from {out['goatbeat']}")
    return out


def _measure(servers: Any, tree: Path, what: str, opts: Mapping[str, Any], calls: bool = False
             ) -> dict[str, dict[str, Any]]:  # fmt: skip
    dsn = servers.new_database(f"pair_{what}")
    base = {"what": what, "dsn": dsn, "pg": servers.pg_dsn, "redis": servers.redis_url,
            "calls": calls}  # fmt: skip
    try:
        if what == "claim":
            out = {}
            for kind in ("scheduler", "store"):
                if kind != "scheduler":
                    servers.drop_database(dsn)
                    dsn = servers.new_database(f"pair_{what}")
                out[f"claim_{kind}"] = run_side(
                    tree, {**base, "dsn": dsn, "kind": kind, "n": opts["claim_n"]}
                )
            return out
        if what == "dispatch":
            return {"dispatch": run_side(tree, {**base, "n": opts["dispatch_n"]})}
        result = run_side(tree, {**base, "count": opts["count"], "e2e": opts["e2e_n"]})
        return {k: v for k, v in result.items() if isinstance(v, dict)}
    finally:
        servers.drop_database(dsn)


def _fmt_ratio(summary: Mapping[str, float] | None) -> str:
    if summary is None:
        return "n/a"
    return f"{summary['median']:.3f} ({summary['low']:.2f}-{summary['high']:.2f})"


def table(
    runs: Mapping[str, Mapping[str, list[dict[str, Any]]]],
    calls: Mapping[str, Mapping[str, dict[str, Any]]],
    base_rev: str,
    new_rev: str,
) -> str:
    """Markdown: per measure, base and new medians, and the median (range) of pair ratios."""
    lines = [
        f"| measure | {base_rev} | {new_rev} | new/base, median (range) | within 5 % |",
        "|---|---:|---:|---:|:---:|",
    ]

    def row(label: str, unit: str, b: list[float | None], n: list[float | None], hib: bool,
            digits: int) -> None:  # fmt: skip
        summary = summarize(ratios(b, n))
        ok = within(summary, hib)
        bm = statistics.median([x for x in b if x is not None]) if any(b) else None
        nm = statistics.median([x for x in n if x is not None]) if any(n) else None
        shown = "n/a" if bm is None else f"{bm:,.{digits}f}"
        shown_new = "n/a" if nm is None else f"{nm:,.{digits}f}"
        mark = {True: "yes", False: "**no**", None: ""}[ok]
        lines.append(
            f"| {label} ({unit}) | {shown} | {shown_new} | {_fmt_ratio(summary)} | {mark} |"
        )

    for key, sides in runs.items():
        base, new = sides.get("base", []), sides.get("new", [])
        label = LABELS.get(key, key)
        if any(r.get("rate") for r in base):
            row(label, "per s", [r.get("rate") for r in base], [r.get("rate") for r in new],
                True, 0)  # fmt: skip
        else:
            row(label, "wall s", [r.get("seconds") for r in base],
                [r.get("seconds") for r in new], False, 3)  # fmt: skip
        if any(r.get("cpu") for r in base):
            row(label, "CPU s", [r.get("cpu") for r in base], [r.get("cpu") for r in new],
                False, 3)  # fmt: skip
    for key, sides in calls.items():
        b, n = sides.get("base", {}).get("calls"), sides.get("new", {}).get("calls")
        row(LABELS.get(key, key), "Python calls, cProfile", [b], [n], False, 0)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_paired",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument("--base", required=True, help="revision or tree measured against")
    parser.add_argument("--new", default=None, help="revision or tree (default: this checkout)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", action="append", choices=list(MEASURES))
    parser.add_argument("--claim-n", type=int, default=10_000)
    parser.add_argument("--dispatch-n", type=int, default=10_000)
    parser.add_argument("--count", type=int, default=20_000, help="code schedules at start-up")
    parser.add_argument("--e2e-n", type=int, default=10_000)
    parser.add_argument("--no-calls", action="store_true", help="skip the cProfile counts")
    parser.add_argument("--json", type=Path, help="write every raw result here")
    args = parser.parse_args(argv)
    wanted = args.only or list(MEASURES)
    opts = {"claim_n": args.claim_n, "dispatch_n": args.dispatch_n, "count": args.count,
            "e2e_n": args.e2e_n}  # fmt: skip

    from bench._common import Servers

    trees = Trees()
    servers = None
    try:
        sides = {"base": trees.get(args.base), "new": trees.get(args.new)}
        for tree, _ in sides.values():
            _compile(tree)
        servers = Servers().start()
        load = [os.getloadavg()[0]]
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
        calls: dict[str, dict[str, dict[str, Any]]] = {}
        began = time.monotonic()
        for r, side in abba(args.rounds):
            tree = sides[side][0]
            for what in wanted:
                out = _measure(servers, tree, what, opts)
                for key, value in out.items():
                    runs.setdefault(key, {}).setdefault(side, []).append(value)
                brief = ", ".join(
                    f"{k} {v.get('rate') or v.get('seconds') or 0:.3g}/{v.get('cpu') or 0:.3g}cpu"
                    for k, v in out.items()
                )
                print(f"round {r} {side}: {brief}", file=sys.stderr, flush=True)
            load.append(os.getloadavg()[0])
        if not args.no_calls:
            for side in ("base", "new"):
                for what in wanted:
                    out = _measure(servers, sides[side][0], what, opts, calls=True)
                    for key, value in out.items():
                        if "calls" in value:
                            calls.setdefault(key, {})[side] = value
                    print(f"calls {side} {what}: { {k: v.get('calls') for k, v in out.items()} }",
                          file=sys.stderr, flush=True)  # fmt: skip
        elapsed = time.monotonic() - began
    finally:
        if servers is not None:
            servers.stop()
        trees.remove()
    text = table(runs, calls, sides["base"][1], sides["new"][1])
    print(text)
    print(
        f"\n{args.rounds} rounds ABBA in {elapsed / 60:.1f} min; 1-min load average after each side: "
        f"{', '.join(f'{x:.1f}' for x in load)}"
    )
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "calls": calls, "load": load}, indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
    else:
        sys.exit(main())
