"""Run the chaos harness and its checker from the command line.

::

    python -m tests.chaos.run --duration 600 --seed 1234 --schedulers 3
    python -m tests.chaos.run --shards 4    # every scheduler runs 4 shards
    ./dev soak                      # the same, 600 s by default; figures for docs/reliability.md
    ./dev soak --shards 4           # the sharded soak; figures for docs/scaling.md
    ./dev soak --standby sync       # a streaming standby, promoted among the faults
    ./dev soak --standby async --promote-at 20   # one promotion, 20 s in

Prints the seed first (replay a failure with ``--seed``), each fault as it is injected, then
the checker's figures and violations. Exit status 0 when no guarantee was broken, 1 otherwise.
The evidence stays in ``--workdir`` (a temporary directory by default, printed).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.chaos.checker import Report, check, load_evidence
from tests.chaos.harness import FAULTS, OPTIONAL_FAULTS, ChaosConfig, ChaosRun

__all__ = ["main", "run_chaos"]


def run_chaos(config: ChaosConfig, workdir: Path) -> tuple[ChaosRun, Report]:
    """Run, check, and stop the server whatever happens."""
    run = ChaosRun(config, workdir)
    try:
        run.run()
        report = check(load_evidence(workdir, run.dsn))
        # First in the list: a void run explains the violations after it.
        report.violations[:0] = [("harness-error", error) for error in run.errors]
    finally:
        run.stop_server()
    stats = run.stats
    report.figures = {
        "seed": config.seed,
        "duration_s": config.duration,
        "schedulers": config.schedulers,
        "shards": config.shards,
        "standby": config.standby,
        "faults_injected": sum(n for k, n in stats.faults.items() if k != "end"),
        "faults": {k: n for k, n in sorted(stats.faults.items()) if k != "end"},
        "process_restarts": stats.restarts,
        "unexpected_exits": dict(stats.unexpected_exits),
        "admin_edits": stats.edits,
        "edit_conflicts_retried": stats.edit_conflicts,
        "edit_store_errors": stats.edit_errors,
        "manual_runs_requested": stats.manual_runs,
        **report.figures,
    }
    return run, report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.run", description=__doc__)
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of faults")
    parser.add_argument("--seed", type=int, default=None, help="default: random, printed")
    parser.add_argument("--schedulers", type=int, default=3)
    parser.add_argument("--shards", type=int, default=1, help="--shards of every scheduler")
    parser.add_argument("--schedules", type=int, default=280, help="admin schedules")
    parser.add_argument("--faults", default=",".join(FAULTS), help="comma-separated subset")
    parser.add_argument(
        "--standby",
        choices=("sync", "async"),
        default=None,
        help="a streaming standby (synchronous or not) and the 'promote' fault",
    )
    parser.add_argument(
        "--promote-at",
        type=float,
        default=None,
        help="with --standby: one promotion this many seconds in, not a random fault",
    )
    parser.add_argument(
        "--walsender-freeze",
        type=float,
        default=None,
        help="seconds the walsender is SIGSTOPped before the crash (default: 2 async, 0 sync)",
    )
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--figures", type=Path, default=None, help="write the figures (JSON)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 2**31)
    faults = tuple(f for f in args.faults.split(",") if f)
    unknown = set(faults) - set(FAULTS) - set(OPTIONAL_FAULTS)
    if unknown:
        known = ", ".join((*FAULTS, *OPTIONAL_FAULTS))
        parser.error(f"unknown faults {sorted(unknown)}; known: {known}")
    if args.standby is None and ("promote" in faults or args.promote_at is not None):
        parser.error("--faults promote and --promote-at need --standby sync or async")
    if args.standby is not None and args.promote_at is None and "promote" not in faults:
        faults = (*faults, "promote")
    if args.promote_at is not None:
        faults = tuple(f for f in faults if f != "promote")
    if args.workdir is not None and args.workdir.exists() and any(args.workdir.iterdir()):
        # Evidence files are appended to and the broker reloads its data directory: an earlier
        # run's records would be checked as this run's.
        parser.error(f"--workdir {args.workdir} is not empty; give a new or empty directory")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"goatbeat-chaos-{seed}-"))
    config = ChaosConfig(
        seed=seed,
        duration=args.duration,
        schedulers=args.schedulers,
        shards=args.shards,
        admin_schedules=args.schedules,
        faults=faults,
        standby=args.standby,
        promote_at=args.promote_at,
        walsender_freeze=args.walsender_freeze,
        log=lambda line: print(line, flush=True),
    )
    started = time.monotonic()
    _, report = run_chaos(config, workdir)
    report.figures["wall_clock_s"] = round(time.monotonic() - started, 1)
    print(report.summary(limit=50), flush=True)
    if args.figures is not None:
        args.figures.write_text(json.dumps(report.figures, indent=2, default=str) + "\n")
    print(f"evidence in {workdir}; replay with --seed {seed}", flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
