"""The cutover from celery-redbeat (#27 item 9), played live on the example project: two real
``celery beat -S redbeat.RedBeatScheduler`` (one holds redbeat's Redis lock, the other waits
for it), a real Celery worker, the suite's Redis and PostgreSQL; then ``goatbeat import
redbeat`` and ``manage.py goatbeat scheduler``. Every instant each schedule owed is counted at
the worker: none twice, none lost (the checks of tests/e2e/test_cutover_live.py, its helpers).

redbeat path: redbeat runs the static entries (every-2s, every-20s, copied from the
beat_schedule into its keys) and one created at run time in its keys (every-3s) -> the holder
of the lock is stopped, the standby takes the lock over and runs on (what a team's rolling
restart does) -> rehearsal import while it runs (the lock is reported held) -> every redbeat
beat stopped (the lock is released) -> each send ran once (redbeat's own ``total_run_count``)
-> cutover import (the lock is free) -> diff exits 0 -> goatbeat runs from redbeat's
``meta.last_run_at`` -> stop -> ``export_last_runs --to-redbeat`` + redbeat again (rollback:
its first run one interval after goatbeat's last) -> stop -> import -> goatbeat again.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import pytest

pytest.importorskip("celery")
pytest.importorskip("redbeat")

import redis  # noqa: E402
from redbeat.decoder import RedBeatJSONDecoder  # noqa: E402

from goatbeat.core.timeutil import to_utc  # noqa: E402
from tests.e2e.example_project import Project  # noqa: E402
from tests.e2e.test_cutover_live import (  # noqa: E402
    INTERVALS,
    Era,
    Ledger,
    _instant,
    check,
    drain,
    goatbeat_rows,
    handed_over,
    project,  # noqa: F401 - the fixture
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(600)]

PREFIX = "shop:beat:"
DYNAMIC = (  # what a redbeat project does at run time (an API, an admin): a key of its own
    "from datetime import timedelta; from celery.schedules import schedule; "
    "from proj.celery import app; from redbeat import RedBeatSchedulerEntry; "
    "RedBeatSchedulerEntry('every-3s', 'shop.record', schedule(timedelta(seconds=3)), "
    "args=['every-3s'], app=app).save()"
)


def redbeat_meta(example: Project) -> dict[str, dict[str, Any]]:
    """redbeat's own record of each entry: its ``meta`` (``last_run_at``,
    ``total_run_count``), decoded as redbeat decodes it."""
    client = redis.Redis.from_url(example.redis_url, decode_responses=True)
    try:
        return {
            name: json.loads(client.hget(PREFIX + name, "meta") or "{}", cls=RedBeatJSONDecoder)
            for name in INTERVALS
        }
    finally:
        client.close()


def last_runs(example: Project) -> dict[str, datetime | None]:
    out: dict[str, datetime | None] = {}
    for name, meta in redbeat_meta(example).items():
        stamp = meta.get("last_run_at")
        out[name] = None if stamp is None else to_utc(stamp)
    return out


def sends(example: Project) -> dict[str, int]:
    return {n: int(m.get("total_run_count") or 0) for n, m in redbeat_meta(example).items()}


def lock_held(example: Project) -> bool:
    client = redis.Redis.from_url(example.redis_url)
    try:
        return bool(client.exists(PREFIX + ":lock"))
    finally:
        client.close()


def test_redbeat_to_goatbeat_cutover_live(project: Project) -> None:  # noqa: F811
    project.env["EXAMPLE_BEAT_SCHEDULE"] = "redbeat"
    project.env["EXAMPLE_REDBEAT_KEY_PREFIX"] = PREFIX
    began = time.monotonic()
    worker = project.worker()
    project.run("manage.py", "migrate", "--verbosity", "0")
    project.run("-c", DYNAMIC)
    ledger = Ledger()

    def redbeat(name: str) -> Any:
        return project.beat(name, "-S", "redbeat.RedBeatScheduler")

    # 1. Two redbeat beats: the first takes the lock and runs, the second waits for it.
    ledger.eras.append(Era("celery", time.time(), dict.fromkeys(INTERVALS)))
    holder = redbeat("rb-1")
    project.wait_for("every-2s under redbeat", lambda: project.count("every-2s") >= 2,
                     "rb-1", "worker")  # fmt: skip
    standby = redbeat("rb-2")
    project.wait_for("every-3s under redbeat", lambda: project.count("every-3s") >= 2,
                     "rb-1", "rb-2", "worker")  # fmt: skip
    assert "Acquired lock" not in project.log("rb-2")
    # 2. The holder stops (it releases the lock); the standby takes over and runs on.
    project.stop(holder)
    project.wait_for("the standby to take redbeat's lock",
                     lambda: "Acquired lock" in project.log("rb-2"), "rb-2")  # fmt: skip
    seen = project.count("every-2s")
    project.wait_for("every-2s from the standby", lambda: project.count("every-2s") >= seen + 2,
                     "rb-2", "worker")  # fmt: skip
    # 3. The rehearsal import while it runs: the lock is said to be held.
    rehearsal = project.run(
        "manage.py", "goatbeat", "import", "redbeat", "--app", "proj.celery:app"
    )
    assert f"read: the redbeat lock {PREFIX}:lock is held" in rehearsal.stdout, rehearsal.stdout
    assert "create  every-3s" in rehearsal.stdout, rehearsal.stdout
    rehearsed = goatbeat_rows(project)["every-2s"].last_run_at
    assert rehearsed is not None
    project.wait_for("a redbeat run the rehearsal did not see",  # redbeat's own record says
                     lambda: (last_runs(project)["every-2s"] or rehearsed) > rehearsed,
                     "rb-2", "worker")  # fmt: skip

    # 4. Stop every redbeat beat; each send ran once (redbeat's own counter says).
    project.stop(standby)
    assert not lock_held(project)
    counts = sends(project)
    project.wait_for("each redbeat send to run once",
                     lambda: all(counts[n] == project.count(n) for n in INTERVALS),
                     "worker")  # fmt: skip

    # 5. The cutover import (the lock is free), diff, then goatbeat.
    cutover = project.run("manage.py", "goatbeat", "import", "redbeat", "--app", "proj.celery:app")
    assert "lock" not in cutover.stdout, cutover.stdout
    assert "FAILED  " not in cutover.stdout and "conflict  " not in cutover.stdout, cutover.stdout
    # redbeat ran it since the rehearsal: its next run follows that run ("refresh"), or, when
    # redbeat's lateness (it counts each run from when it sent the last) moved the phase more
    # than min(every / 4, 1 s) off the rehearsal's grid, redbeat's new phase ("update").
    assert "refresh every-2s" in cutover.stdout or "update  every-2s" in cutover.stdout, (
        cutover.stdout
    )
    celery_last = last_runs(project)
    ledger.eras.append(Era("goatbeat", time.time(), handed_over(project, celery_last)))
    diff = project.run(
        "manage.py", "goatbeat", "diff", "--from-redbeat", project.redis_url,
        "--redbeat-key-prefix", PREFIX, "--from-app", "proj.celery:app", "--horizon", "10m",
        check=False,
    )  # fmt: skip
    assert diff.returncode == 0, diff.stdout + diff.stderr
    # The handed-over last runs are redbeat's, to the microsecond.
    assert ledger.eras[-1].handed == celery_last
    gb = project.start("gb-1", "manage.py", "goatbeat", "scheduler")
    since = time.time()
    project.wait_for("every-3s under goatbeat", lambda: project.count("every-3s", since) >= 3,
                     "gb-1", "worker")  # fmt: skip
    project.stop(gb)
    ledger.eras[-1].stop(project)

    # 6. Rollback: goatbeat's last runs go back into redbeat's meta, and redbeat runs again.
    rows = goatbeat_rows(project)
    handed = project.run(
        "manage.py", "goatbeat", "export_last_runs", "--to-redbeat", project.redis_url,
        "--redbeat-key-prefix", PREFIX, "--redbeat-timezone", "Europe/Paris",
    ).stdout  # fmt: skip
    assert "set  every-2s" in handed, handed
    back = last_runs(project)
    assert back == {n: rows[n].last_run_at for n in INTERVALS}, (back, rows)
    before = sends(project)
    ledger.eras.append(Era("celery", time.time(), back))
    again = redbeat("rb-3")
    since = time.time()
    project.wait_for("every-2s under redbeat again",
                     lambda: project.count("every-2s", since) >= 2, "rb-3", "worker")  # fmt: skip
    project.stop(again)
    era = ledger.eras[-1]

    def sent_in_era(name: str) -> int:
        return sum(
            1
            for r in project.runs()
            if r["label"] == name and _instant(r) is None and r["at"] >= era.started
        )

    after = sends(project)
    project.wait_for("each redbeat send to run once",
                     lambda: all(after[n] - before[n] == sent_in_era(n) for n in INTERVALS),
                     "worker")  # fmt: skip

    # 7. Cutover again: nothing redbeat ran during the rollback runs again.
    recutover = project.run(
        "manage.py", "goatbeat", "import", "redbeat", "--app", "proj.celery:app"
    )
    assert "FAILED  " not in recutover.stdout, recutover.stdout
    ledger.eras.append(Era("goatbeat", time.time(), handed_over(project, last_runs(project))))
    gb = project.start("gb-2", "manage.py", "goatbeat", "scheduler")
    since = time.time()
    project.wait_for("every-2s under goatbeat again",
                     lambda: project.count("every-2s", since) >= 3, "gb-2", "worker")  # fmt: skip
    project.stop(gb)
    ledger.eras[-1].stop(project)
    drain(project)
    project.stop(worker)

    figures = check(project, ledger)
    print(json.dumps({"seconds": round(time.monotonic() - began, 1), **figures}))
