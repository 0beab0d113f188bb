"""The cutover of docs/migration, played live on the example project with real Celery workers,
Redis and PostgreSQL, then rolled back and played again; every instant each schedule owed is
counted: zero missed, zero doubled.

django-celery-beat path: its DatabaseScheduler runs the rows -> rehearsal import while it runs
-> stop it -> (a clocked row's time passes, unrun; an interval's start_time is set) -> cutover
import -> two ``manage.py goatbeat scheduler`` replicas -> kill -9 of the leader -> stop ->
``export_last_runs`` + django-celery-beat again (rollback) -> stop -> cutover import -> goatbeat.

Stock beat path: ``celery beat`` runs CELERY_BEAT_SCHEDULE -> stop, dump its last runs (the
guide's one-liner) -> two ``celery beat -S goatbeat.compat:Scheduler`` replicas -> kill -9 of
the leader -> stop -> ``export_last_runs --to-json`` + the guide's one-liner into the schedule
file, stock beat again (rollback) -> stop, dump -> the drop-in again.

What is owed is derived from the schedulers' own last-run records, never from timing: celery's
``last_run_at`` (django-celery-beat's column, or beat's schedule file) when goatbeat takes over,
goatbeat's when celery does. Each run is recorded by the task on the worker with its task id:
goatbeat's is the idempotency key (``name:instant``), celery's a UUID. Checked per schedule:

* goatbeat runs exactly the instants its trigger gives after the handed-over last run, each once;
  an instant that fell while no scheduler could run (the cutover gap, the failover) is run once
  at the next instant's claim and counted in ``missed_count`` (celery's own catch-up does the
  same: one run for a stop), so every instant is either run or accounted for, never silently
  dropped; the first goatbeat instant after a celery era comes after celery's last run;
* after a rollback celery's first run comes one interval after goatbeat's last, never sooner,
  and its own run counter matches the runs the worker saw;
* a clocked row runs exactly once; an interval with a start_time starts there and keeps it;
* nothing runs twice, except an occurrence whose submission was in doubt when its scheduler
  was killed (the at-least-once guarantee), which the test lists.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from goatbeat.core.model import Schedule
from goatbeat.core.timeutil import parse_instant
from goatbeat.core.triggers import Trigger
from goatbeat.stores.postgres import PostgresStore
from tests.e2e.example_project import Project

pytest.importorskip("celery")
pytest.importorskip("django_celery_beat")

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(600)]

INTERVALS = {"every-2s": 2, "every-3s": 3, "every-20s": 20}

# docs/migration/celery-beat-schedule.md, "Interval phase" and "Rolling back"
DUMP = (
    "import json, shelve, sys; db = shelve.open(sys.argv[1], 'r'); "
    "print(json.dumps({n: e.last_run_at.isoformat() for n, e in db['entries'].items()}))"
)
LOAD = (
    "import json, shelve, sys; from datetime import datetime; "
    "runs = json.load(open(sys.argv[2])); db = shelve.open(sys.argv[1], writeback=True); "
    "[setattr(db['entries'][n], 'last_run_at', datetime.fromisoformat(t)) "
    "for n, t in runs.items() if n in db['entries']]; db.close()"
)


@dataclass
class Era:
    """One stretch during which one kind of scheduler ran the schedules."""

    who: str  # "celery" or "goatbeat"
    started: float  # wall clock, before its first process started
    handed: dict[str, datetime | None] = field(default_factory=dict)
    """Each schedule's last run when this era took over (the handover record)."""
    left: dict[str, datetime | None] = field(default_factory=dict)
    """goatbeat eras: each schedule's next_run_at when the era stopped (what it had not
    claimed yet): the era owed every instant of its trigger from ``handed`` up to there."""
    triggers: dict[str, Trigger] = field(default_factory=dict)
    """goatbeat eras: each schedule's trigger (the grid the era ran on)."""

    def stop(self, project: Project) -> None:
        rows = goatbeat_rows(project)
        self.left = {name: rows[name].next_run_at for name in INTERVALS}
        self.triggers = {name: rows[name].trigger for name in INTERVALS}

    def grid(self, name: str) -> list[datetime]:
        """The instants this goatbeat era owed: its trigger's after the handed-over last run,
        up to where it stopped."""
        instants: list[datetime] = []
        at, end = self.handed[name], self.left[name]
        assert at is not None and end is not None, (name, self)
        while (at := self.triggers[name].next_after(at)) is not None and at < end:
            instants.append(at)
        return instants


@dataclass
class Ledger:
    """The runs the worker recorded, split by era."""

    eras: list[Era] = field(default_factory=list)
    in_doubt: set[str] = field(default_factory=set)

    def era_of(self, run: dict[str, Any]) -> Era:
        """goatbeat's runs by their instant (after the last run handed to that era), celery's
        by when they ran."""
        instant = _instant(run)
        if instant is None:
            eras = [e for e in self.eras if e.who == "celery" and e.started <= run["at"]]
        else:
            eras = [
                e
                for e in self.eras
                if e.who == "goatbeat" and (e.handed[run["label"]] or instant) < instant
            ]
        assert eras, run
        return eras[-1]


def _instant(run: dict[str, Any]) -> datetime | None:
    """The scheduled instant of a goatbeat run: its task id is ``name:instant``."""
    task_id, prefix = str(run["id"]), f"{run['label']}:"
    if not task_id.startswith(prefix) or not task_id.endswith("Z"):
        return None
    return parse_instant(task_id[len(prefix) :], "id")


@pytest.fixture
def project(pg_dsn: str, redis_url: str, tmp_path: Path) -> Iterator[Project]:
    p = Project(pg_dsn, redis_url, tmp_path)
    try:
        yield p
    finally:
        for proc in p.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in p.procs:
            p.stop(proc)


def goatbeat_rows(project: Project) -> dict[str, Schedule]:
    store = PostgresStore(project.dsn)
    try:
        return {s.name: s for s in store.list_schedules()}
    finally:
        store.close()


def handed_over(
    project: Project, celery_last: dict[str, datetime | None]
) -> dict[str, datetime | None]:
    """What the import handed goatbeat: its rows' last runs, which are celery's where celery
    ran the schedule after goatbeat (else goatbeat's own)."""
    rows = goatbeat_rows(project)
    for name in INTERVALS:
        theirs = celery_last[name]
        if theirs is not None:
            assert rows[name].last_run_at is not None and rows[name].last_run_at >= theirs, name
    return {name: rows[name].last_run_at for name in INTERVALS}


def in_doubt(project: Project) -> set[str]:
    rows = project.sql("SELECT idempotency_key FROM goatbeat_execution WHERE status = 'claimed'")
    return {str(r[0]) for r in rows}


def kill_the_leader(project: Project, replicas: list[Any], ledger: Ledger, label: str) -> Any:
    """kill -9 the replica holding the lease, just after it dispatched (it then sleeps)."""
    project.wait_for(
        "a lease holder", lambda: project.lease_holder_pid() in {r.pid for r in replicas}
    )
    seen = project.count(label)
    project.wait_for(f"a {label} run", lambda: project.count(label) > seen)
    leader = next(r for r in replicas if r.pid == project.lease_holder_pid())
    project.kill9(leader)
    ledger.in_doubt |= in_doubt(project)
    return next(r for r in replicas if r is not leader)


def drain(project: Project, timeout: float = 60.0) -> None:
    """Wait until the worker ran every goatbeat execution; else say which it did not."""
    deadline = time.monotonic() + timeout
    while True:
        ran = {str(r["id"]) for r in project.runs() if _instant(r)}
        rows = project.sql(
            "SELECT idempotency_key, status, scheduler_id, claimed_at, submitted_at "
            "FROM goatbeat_execution ORDER BY scheduled_at"
        )
        missing = [r for r in rows if str(r[0]) not in ran]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the worker never ran {missing} within {timeout:g}s")
        time.sleep(0.2)


def check(project: Project, ledger: Ledger, *, clocked: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every check of the module docstring; returns the figures."""
    runs = [r for r in project.runs()]
    rows = goatbeat_rows(project)
    figures: dict[str, Any] = {}
    # Nothing ran twice (a key twice only if its submission was in doubt at a kill -9).
    keys = [str(r["id"]) for r in runs if _instant(r) is not None]
    doubled = {k for k in keys if keys.count(k) > 1}
    assert doubled <= ledger.in_doubt, doubled
    # Every goatbeat execution ran on the worker.
    executions = project.sql("SELECT idempotency_key FROM goatbeat_execution")
    assert {str(r[0]) for r in executions} == set(keys)
    for name in clocked:
        assert [r["label"] for r in runs].count(name) == 1, (name, runs)
    for name, every_s in INTERVALS.items():
        every = timedelta(seconds=every_s)
        mine = [r for r in runs if r["label"] == name]
        collapsed = 0
        owed = 0
        for era in ledger.eras:
            in_era = [r for r in mine if ledger.era_of(r) is era]
            handed = era.handed[name]
            if era.who == "celery":
                if in_era and handed is not None:
                    # Never sooner than one interval after goatbeat's last run.
                    first = min(r["at"] for r in in_era)
                    assert first >= (handed + every).timestamp(), (name, first, handed)
                owed += len(in_era)
                continue
            assert handed is not None, (name, era)
            assert era.left[name] is not None, (name, era)
            instants = sorted({i for r in in_era if (i := _instant(r)) is not None})
            grid = era.grid(name)
            # The trigger's instants after the handed-over last run: none before it (double),
            # none off the grid; the ones not run were collapsed into a later run. The grid is
            # celery's last run + k * every, or the one goatbeat handed over when celery ran
            # on from it (each run a little late: phase kept), but never sooner than celery
            # would run it, less its lateness (importers.entries.late_on_grid).
            assert set(instants) <= set(grid), (name, handed, instants[:3], grid[:3])
            lateness = min(every / 4, timedelta(seconds=1))
            assert not grid or grid[0] >= handed + every - lateness, (name, handed, grid[0])
            collapsed += len(grid) - len(instants)
            owed += len(grid)
        # ... and goatbeat counted every collapsed one as missed: none dropped silently.
        assert rows[name].missed_count == collapsed, (name, rows[name].missed_count, collapsed)
        figures[name] = {"owed": owed, "ran": len(mine), "collapsed": collapsed}
    figures["in_doubt"] = sorted(ledger.in_doubt)
    return figures


def test_django_celery_beat_cutover_rollback_and_recutover_live(project: Project) -> None:
    project.env["EXAMPLE_BEAT_SCHEDULE"] = "none"
    began = time.monotonic()
    worker = project.worker()
    project.run("manage.py", "migrate", "--verbosity", "0")
    project.run("manage.py", "seed_cutover_rows")
    ledger = Ledger()

    def dcb_last_runs() -> dict[str, datetime | None]:
        return dict(project.sql("SELECT name, last_run_at FROM django_celery_beat_periodictask"))

    def dcb_counts() -> dict[str, int]:
        rows = project.sql("SELECT name, total_run_count FROM django_celery_beat_periodictask")
        return {str(n): int(c) for n, c in rows}

    def dcb_beat(name: str) -> Any:
        return project.beat(name, "-S", "django_celery_beat.schedulers:DatabaseScheduler")

    # 1. django-celery-beat runs the rows; the rehearsal import happens meanwhile.
    ledger.eras.append(Era("celery", time.time(), dict.fromkeys(INTERVALS)))
    old = dcb_beat("dcb-1")
    project.wait_for("every-2s under django-celery-beat", lambda: project.count("every-2s") >= 2,
                     "dcb-1", "worker")  # fmt: skip
    rehearsal = project.run("manage.py", "goatbeat", "import_celery_beat")
    assert rehearsal.stdout.startswith("target: Django database 'default'"), rehearsal.stdout
    project.wait_for("every-2s under django-celery-beat", lambda: project.count("every-2s") >= 4,
                     "dcb-1", "worker")  # fmt: skip

    # 2. Stop it (it writes its last runs). Meanwhile a clocked row falls due unrun, and an
    #    interval gets a start_time a few seconds ahead.
    project.stop(old)
    counts = dcb_counts()
    project.wait_for("each django-celery-beat send to run once",  # its own counter says
                     lambda: all(counts[n] == project.count(n) for n in INTERVALS), "worker")  # fmt: skip
    project.sql(
        "UPDATE django_celery_beat_clockedschedule SET clocked_time = now() - interval '1 second'"
        " WHERE id = (SELECT clocked_id FROM django_celery_beat_periodictask"
        " WHERE name = 'clocked-gap')"
    )
    project.sql(  # edited after its time: django-celery-beat would still run it once
        "UPDATE django_celery_beat_periodictask SET date_changed = now() WHERE name = 'clocked-gap'"
    )
    project.sql(
        "UPDATE django_celery_beat_clockedschedule SET clocked_time = now() + interval '9 seconds'"
        " WHERE id = (SELECT clocked_id FROM django_celery_beat_periodictask"
        " WHERE name = 'clocked-later')"
    )
    # Far enough ahead that the cutover import, the diff and the replicas' start are over
    # before it, even on a loaded 2-core machine (8 s was not: the first run then came at a
    # later instant of the grid, and "starts at start_time" could not be seen).
    project.sql(
        "UPDATE django_celery_beat_periodictask SET start_time = date_trunc('second', now()) + "
        "interval '20 seconds', date_changed = now() WHERE name = 'from-start'"
    )

    # 3. The cutover import, then two goatbeat replicas; the leader is killed with -9.
    cutover = project.run("manage.py", "goatbeat", "import_celery_beat")
    assert "every-2s" in cutover.stdout, cutover.stdout
    assert "FAILED  " not in cutover.stdout and "conflict  " not in cutover.stdout
    ledger.eras.append(Era("goatbeat", time.time(), handed_over(project, dcb_last_runs())))
    # Step 4 of the guide: diff agrees, owed runs included (the gap's, the clocked row's).
    diff = project.run("manage.py", "goatbeat", "diff", "--horizon", "10m", check=False)
    assert diff.returncode == 0, diff.stdout + diff.stderr
    replicas = [project.start(f"gb-{i}", "manage.py", "goatbeat", "scheduler") for i in (1, 2)]
    standby = kill_the_leader(project, replicas, ledger, "every-2s")
    project.wait_for("clocked-later and from-start under goatbeat",
                     lambda: project.count("clocked-later") and project.count("from-start") >= 2,
                     "gb-1", "gb-2", "worker")  # fmt: skip
    project.stop(standby)
    ledger.eras[-1].stop(project)

    # 4. Rollback: goatbeat's last runs go back into django-celery-beat's rows, which runs again.
    rows = goatbeat_rows(project)
    handed = project.run(
        "manage.py", "goatbeat", "export_last_runs", "--to-django-celery-beat"
    ).stdout
    assert "set  every-2s" in handed, handed
    last = dcb_last_runs()
    for name in (*INTERVALS, "from-start"):
        assert last[name] == rows[name].last_run_at, name
    before = dcb_counts()
    ledger.eras.append(Era("celery", time.time(), {n: last[n] for n in INTERVALS}))
    old = dcb_beat("dcb-2")
    since = time.time()
    project.wait_for("every-2s under django-celery-beat again",
                     lambda: project.count("every-2s", since) >= 2, "dcb-2", "worker")  # fmt: skip
    project.stop(old)
    after = dcb_counts()
    era = ledger.eras[-1]

    def sent_in_era(name: str) -> int:
        return sum(
            1
            for r in project.runs()
            if r["label"] == name and _instant(r) is None and r["at"] >= era.started
        )

    project.wait_for("each django-celery-beat send to run once",
                     lambda: all(after[n] - before[n] == sent_in_era(n) for n in INTERVALS),
                     "worker")  # fmt: skip

    # 5. Cutover again: nothing celery ran during the rollback runs again.
    recutover = project.run("manage.py", "goatbeat", "import_celery_beat")
    assert "FAILED  " not in recutover.stdout, recutover.stdout
    ledger.eras.append(Era("goatbeat", time.time(), handed_over(project, dcb_last_runs())))
    again = project.start("gb-3", "manage.py", "goatbeat", "scheduler")
    since = time.time()
    project.wait_for("every-2s under goatbeat again",
                     lambda: project.count("every-2s", since) >= 3, "gb-3", "worker")  # fmt: skip
    project.stop(again)
    ledger.eras[-1].stop(project)
    drain(project)
    project.stop(worker)

    figures = check(project, ledger, clocked=("clocked-gap", "clocked-later"))
    runs = project.runs()
    gap = next(r for r in runs if r["label"] == "clocked-gap")
    assert _instant(gap) is not None  # goatbeat ran it, at the cutover
    starts = sorted(i for r in runs if r["label"] == "from-start" and (i := _instant(r)))
    start_time = project.sql(
        "SELECT start_time FROM django_celery_beat_periodictask WHERE name = 'from-start'"
    )[0][0]
    # Starts at start_time, or (the kill -9 of the leader, or a loaded machine, let the first
    # instants pass their 2.5 s grace) counts each one it did not run as missed.
    skipped = (starts[0] - start_time) // timedelta(seconds=5)
    history = project.sql(
        "SELECT scheduled_at, status, error FROM goatbeat_execution"
        " WHERE schedule_name = 'from-start' ORDER BY scheduled_at LIMIT 4"
    )
    assert starts[0] >= start_time, (starts, start_time)
    assert skipped == 0 or goatbeat_rows(project)["from-start"].missed_count >= skipped, (
        starts[:3], start_time, history)  # fmt: skip
    off = [s for s in starts if (s - start_time) % timedelta(seconds=5) != timedelta(0)]
    assert off == [], (start_time, starts, project.sql(  # ...keeps it
        "SELECT name, last_run_at, start_time FROM django_celery_beat_periodictask"
        " WHERE name = 'from-start'"), [r for r in runs if r["label"] == "from-start"])  # fmt: skip
    print(json.dumps({"seconds": round(time.monotonic() - began, 1), **figures}))


def test_stock_beat_to_the_drop_in_rollback_and_back_live(project: Project, tmp_path: Path) -> None:
    project.env["EXAMPLE_BEAT_SCHEDULE"] = "cutover"
    began = time.monotonic()
    worker = project.worker()
    project.run("manage.py", "migrate", "--verbosity", "0")
    ledger = Ledger()
    schedule_file = str(tmp_path / "celerybeat-schedule")
    dump = tmp_path / "last-runs.json"

    def dumped() -> dict[str, datetime]:
        text = project.run("-c", DUMP, schedule_file).stdout
        dump.write_text(text)
        return {n: datetime.fromisoformat(t).astimezone(UTC) for n, t in json.loads(text).items()}

    def drop_in(name: str) -> Any:
        return project.beat(name, "-S", "goatbeat.compat:Scheduler", EXAMPLE_LAST_RUNS=str(dump))

    # 1. Stock celery beat.
    ledger.eras.append(Era("celery", time.time(), dict.fromkeys(INTERVALS)))
    stock = project.beat("stock-1")
    project.wait_for("every-2s under stock beat", lambda: project.count("every-2s") >= 3,
                     "stock-1", "worker")  # fmt: skip
    project.stop(stock)

    # 2. Dump its last runs; two drop-in replicas; kill -9 of the leader.
    last = dumped()
    ledger.eras.append(Era("goatbeat", time.time(), {n: last[n] for n in INTERVALS}))
    replicas = [drop_in(f"compat-{i}") for i in (1, 2)]
    standby = kill_the_leader(project, replicas, ledger, "every-2s")
    since = time.time()
    project.wait_for("every-3s from the standby", lambda: project.count("every-3s", since) >= 2,
                     "compat-1", "compat-2", "worker")  # fmt: skip
    assert "occurrence.submitted schedule=every-" in project.log("compat-1") + project.log(
        "compat-2"
    )
    project.stop(standby)
    ledger.eras[-1].stop(project)

    # 3. Rollback: goatbeat's last runs into the schedule file, stock beat again.
    runs_back = tmp_path / "goatbeat-last-runs.json"
    project.run("manage.py", "goatbeat", "export_last_runs", "--to-json", str(runs_back))
    project.run("-c", LOAD, schedule_file, str(runs_back))
    rows = goatbeat_rows(project)
    ledger.eras.append(Era("celery", time.time(), {n: rows[n].last_run_at for n in INTERVALS}))
    stock = project.beat("stock-2")
    since = time.time()
    project.wait_for("every-2s under stock beat again",
                     lambda: project.count("every-2s", since) >= 2, "stock-2")  # fmt: skip
    project.stop(stock)

    # 4. A new dump, the drop-in again.
    last = dumped()
    ledger.eras.append(Era("goatbeat", time.time(), {n: last[n] for n in INTERVALS}))
    again = drop_in("compat-3")
    since = time.time()
    project.wait_for("every-2s under the drop-in again",
                     lambda: project.count("every-2s", since) >= 3, "compat-3")  # fmt: skip
    project.stop(again)
    ledger.eras[-1].stop(project)
    drain(project)
    project.stop(worker)

    figures = check(project, ledger)
    print(json.dumps({"seconds": round(time.monotonic() - began, 1), **figures}))
