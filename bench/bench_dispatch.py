"""Dispatch: N schedules all due at once, sent to Celery over a real Redis broker.

Contenders, each in a fresh process, one after the other, same Redis (flushed before each):

- ``send_task``: the reference. A bare loop of ``app.send_task(TASK, args=[i], task_id=key)``, no
  scheduling at all (each call takes a producer from Celery's pool, as user code does).
- ``send_task (one producer)``: the same loop holding one producer, as goatbeat's Celery
  submitter does. The faster of the two bare loops is the reference of the target.
- ``send_task (batches of 50)``: the one-producer loop inside kombu's ``producer.batch()``
  (kombu >= 5.7), 50 messages a batch: on Redis each batch is one pipelined round trip. This
  is how goatbeat's Celery submitter publishes (``submit_many``), so it is the limit for
  goatbeat's way of sending; goatbeat is compared with it too.
- ``goatbeat``: N interval schedules in PostgreSQL, all due (``next_run_at`` one second ago);
  ``Scheduler.run_once()`` is called until N occurrences were submitted through
  ``CelerySubmitter`` (default settings: one submission thread, so a full batch is sent while
  the next is claimed; messages published in kombu batches of 50): lease, claim in batches of
  500 (one transaction each), submit, record the outcomes (one statement per batch).
  Everything a production iteration does is in the time.
- ``celery beat``: stock ``celery.beat.PersistentScheduler`` with N entries in
  ``beat_schedule`` whose ``last_run_at`` is two hours old (``schedule(timedelta(hours=1))``),
  driven the way ``celery beat``'s service drives it: ``tick()`` in a loop, sleeping when it
  asks to; its real ``apply_async`` publishes to Redis.
- ``django-celery-beat``: ``DatabaseScheduler`` over N ``PeriodicTask`` rows (one hourly
  ``IntervalSchedule``, ``last_run_at`` two hours old) in PostgreSQL, driven the same way.

Every contender first sends one warm-up message to another queue (transport loaded, connection
open), then freezes its start-up objects out of the garbage collector's full passes
(``gc.freeze``), as a long-running ``goatbeat scheduler`` has after its first iteration. The rate is messages that landed in Redis's ``celery`` list (``LLEN``) divided by the
wall time of the loop. The slow schedulers are stopped after a time cap; their rate is then
measured over the part they managed (their per-tick cost does not fall as entries go out).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench._common import (
    TASK,
    Row,
    Section,
    Servers,
    celery_app,
    child_main,
    fmt,
    insert_schedules,
    migrate,
    queue_length,
    reset_queue,
    run_child,
    warm_up,
)

CONTENDERS = {
    "send_task": "bare send_task",
    "send_task_producer": "bare send_task (one producer)",
    "send_task_batch": "bare send_task (batches of 50)",
    "goatbeat": "goatbeat",
    "celery_beat": "celery beat (PersistentScheduler)",
    "django_celery_beat": "django-celery-beat (DatabaseScheduler)",
}
FAST = ("send_task", "send_task_producer", "send_task_batch", "goatbeat")
BARE = ("send_task", "send_task_producer")
"""The issue's reference: a bare loop of send_task, the faster of the two."""
BATCH_SIZE = 50
TARGET_RATIO = 0.8
TARGET_BATCHED = 0.9
"""Issue #18: goatbeat >= 90 % of the batched bare loop (the limit of its way of sending)."""


# -- children -------------------------------------------------------------------------------


def _finish(redis_url: str, base: int, n: int, began: float, ended: float) -> dict[str, Any]:
    landed = queue_length(redis_url) - base
    seconds = ended - began
    return {
        "n": n,
        "landed": landed,
        "seconds": seconds,
        "rate": landed / seconds if seconds > 0 else None,
        "complete": landed >= n,
    }


def child_send_task(args: dict[str, Any]) -> dict[str, Any]:
    app = celery_app(args["redis"])
    warm_up(app)
    n = args["n"]
    send = app.send_task
    base = queue_length(args["redis"])
    began, cpu = time.perf_counter(), time.process_time()
    if args["contender"] == "send_task_producer":
        with app.producer_or_acquire() as producer:
            for i in range(n):
                send(TASK, args=[i], kwargs={}, task_id=f"bench-{i}:x", producer=producer)
    elif args["contender"] == "send_task_batch":
        with app.producer_or_acquire() as producer:
            for start in range(0, n, BATCH_SIZE):
                with producer.batch(max_size=10 * BATCH_SIZE):
                    for i in range(start, min(n, start + BATCH_SIZE)):
                        send(TASK, args=[i], kwargs={}, task_id=f"bench-{i}:x", producer=producer)
    else:
        for i in range(n):
            send(TASK, args=[i], kwargs={}, task_id=f"bench-{i}:x")
    ended = time.perf_counter()
    out = _finish(args["redis"], base, n, began, ended)
    out["cpu"] = time.process_time() - cpu
    return out


def child_goatbeat(args: dict[str, Any]) -> dict[str, Any]:
    from goatbeat.core.config import Settings
    from goatbeat.core.scheduler import Scheduler
    from goatbeat.stores.postgres import PostgresStore
    from goatbeat.submitters.celery import CelerySubmitter

    app = celery_app(args["redis"])
    warm_up(app)
    store = PostgresStore(args["dsn"])
    store.now()  # connect before the clock starts, as a running scheduler already has
    submitter = (
        CelerySubmitter(app, concurrency=args["concurrency"])
        if args.get("concurrency") is not None
        else CelerySubmitter(app)
    )
    settings = Settings(
        scheduler_id="bench-dispatch",
        lease_ttl=timedelta(minutes=10),
        lease_renew_interval=timedelta(minutes=5),
        batch_size=args.get("batch_size", 500),
    )
    scheduler = Scheduler(store, submitter, settings=settings)
    n, cap = args["n"], args["cap"]
    base = queue_length(args["redis"])
    profiler = None
    if args.get("profile"):
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005)
        profiler.start()
    began, cpu = time.perf_counter(), time.process_time()
    submitted = 0
    while submitted < n and time.perf_counter() - began < cap:
        result = scheduler.run_once()
        if result.error:
            raise RuntimeError(result.error)
        submitted += result.submitted
    ended = time.perf_counter()
    out = _finish(args["redis"], base, n, began, ended)
    out["cpu"] = time.process_time() - cpu
    if profiler is not None:
        profiler.stop()
        out["profile"] = profiler.output_text(unicode=False, color=False, show_all=False)
    submitter.close()
    store.close()
    return out


def _drive(scheduler: Any, redis_url: str, base: int, n: int, cap: float) -> tuple[float, float]:
    """``celery beat``'s service loop: tick, and sleep when the scheduler asks to."""
    began = time.perf_counter()
    while True:
        interval = scheduler.tick()
        now = time.perf_counter()
        if now - began > cap:
            break
        if interval and interval > 0:
            if queue_length(redis_url) - base >= n:
                break
            time.sleep(min(interval, 0.01))
    return began, time.perf_counter()


def child_celery_beat(args: dict[str, Any]) -> dict[str, Any]:
    from celery.beat import PersistentScheduler

    n = args["n"]
    app = celery_app(args["redis"])
    app.conf.beat_schedule = {
        f"bench-{i}": {"task": TASK, "schedule": timedelta(hours=1), "args": (i,)} for i in range(n)
    }
    warm_up(app)
    path = os.path.join(tempfile.mkdtemp(prefix="bench-beat-"), "celerybeat-schedule")
    scheduler = PersistentScheduler(app=app, schedule_filename=path)
    past = app.now() - timedelta(hours=2)
    for entry in scheduler.schedule.values():
        entry.last_run_at = past
    base = queue_length(args["redis"])
    began, ended = _drive(scheduler, args["redis"], base, n, args["cap"])
    out = _finish(args["redis"], base, n, began, ended)
    scheduler.close()
    return out


def child_django_celery_beat(args: dict[str, Any]) -> dict[str, Any]:
    from urllib.parse import urlparse

    import django
    from django.conf import settings

    url = urlparse(args["dsn"])
    settings.configure(
        INSTALLED_APPS=["django_celery_beat"],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": url.path.lstrip("/"),
                "USER": url.username or "postgres",
                "HOST": url.hostname,
                "PORT": url.port,
            }
        },
        USE_TZ=True,
        TIME_ZONE="UTC",
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks
    from django_celery_beat.schedulers import DatabaseScheduler

    n = args["n"]
    interval = IntervalSchedule.objects.create(every=1, period=IntervalSchedule.HOURS)
    past = datetime.now(UTC) - timedelta(hours=2)
    PeriodicTask.objects.bulk_create(
        [
            PeriodicTask(
                name=f"bench-{i}", task=TASK, interval=interval, args=f"[{i}]", last_run_at=past
            )
            for i in range(n)
        ],
        batch_size=2000,
    )
    PeriodicTasks.update_changed()
    app = celery_app(args["redis"])
    warm_up(app)
    scheduler = DatabaseScheduler(app=app)
    base = queue_length(args["redis"])
    began, ended = _drive(scheduler, args["redis"], base, n, args["cap"])
    out = _finish(args["redis"], base, n, began, ended)
    scheduler.close()
    return out


HANDLERS = {
    "send_task": child_send_task,
    "send_task_producer": child_send_task,
    "send_task_batch": child_send_task,
    "goatbeat": child_goatbeat,
    "celery_beat": child_celery_beat,
    "django_celery_beat": child_django_celery_beat,
}


# -- the parent -----------------------------------------------------------------------------


def _one(
    servers: Servers, contender: str, n: int, cap: float, profile: bool, **extra: Any
) -> dict[str, Any]:
    reset_queue(servers.redis_url)
    args: dict[str, Any] = {"contender": contender, "n": n, "cap": cap, "redis": servers.redis_url}
    args.update(extra)
    dsn = None
    if contender == "goatbeat":
        dsn = servers.new_database("dispatch")
        migrate(dsn)
        due = datetime.now(UTC) - timedelta(seconds=1)
        spec = {"kind": "interval", "every": 3600.0, "anchor": None}
        insert_schedules(dsn, [f"bench-{i}" for i in range(n)], [spec] * n, [due] * n)
        args["profile"] = profile
    elif contender == "django_celery_beat":
        dsn = servers.new_database("dcb")
    if dsn is not None:
        args["dsn"] = dsn
    try:
        return run_child("bench_dispatch", args, timeout=cap + 600)
    finally:
        if dsn is not None:
            servers.drop_database(dsn)


def run(servers: Servers, *, quick: bool, peers: bool = True, profile: bool = False) -> Section:
    sizes = [1_000, 10_000]
    repeats = 1 if quick else 3
    peer_cap = 20.0 if quick else 60.0
    results: dict[tuple[str, int], dict[str, Any]] = {}
    profiles: dict[int, str] = {}
    for n in sizes:
        # Fast contenders take turns, so a slow spell of the machine hits all of them alike.
        runs: dict[str, list[dict[str, Any]]] = {}
        order = [c for c in FAST] * repeats + [c for c in CONTENDERS if c not in FAST and peers]
        for contender in order:
            cap = 600.0 if contender in FAST else peer_cap
            out = _one(servers, contender, n, cap, profile=False)
            runs.setdefault(contender, []).append(out)
            print(
                f"  dispatch n={n} {contender}: {fmt(out['rate'])}/s "
                f"({out['landed']} in {out['seconds']:.2f}s)",
                file=sys.stderr,
            )
        for contender, outs in runs.items():
            best = statistics.median_low([r["rate"] or 0 for r in outs])
            chosen = next(r for r in outs if (r["rate"] or 0) == best)
            chosen["runs"] = [r["rate"] for r in outs]
            results[(contender, n)] = chosen
        if profile:
            out = _one(servers, "goatbeat", n, 600.0, profile=True)
            profiles[n] = out.get("profile", "")
    return _section(results, sizes, repeats, peer_cap, profiles)


def _section(
    results: dict[tuple[str, int], dict[str, Any]],
    sizes: list[int],
    repeats: int,
    peer_cap: float,
    profiles: dict[int, str],
) -> Section:
    section = Section("Dispatch to Celery over Redis")
    lines = [
        "| due at once | contender | occurrences/s | of bare send_task | dispatched | seconds |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    chart: dict[str, Any] = {"sizes": sizes, "series": {}}
    for n in sizes:
        bare = [results[(c, n)]["rate"] or 0.0 for c in BARE if (c, n) in results]
        limit = max(bare) if bare else None
        batched = results.get(("send_task_batch", n), {}).get("rate")
        for contender, label in CONTENDERS.items():
            res = results.get((contender, n))
            if res is None:
                continue
            rate = res["rate"]
            ratio = rate / limit if rate and limit else None
            chart["series"].setdefault(label, []).append(rate)
            done = f"{res['landed']:,}" + ("" if res["complete"] else f" of {n:,} (cap)")
            lines.append(
                f"| {n:,} | {label} | {fmt(rate)} | "
                f"{'n/a' if ratio is None else f'{ratio:.0%}'} | {done} | {res['seconds']:.2f} |"
            )
            if contender in BARE:
                if rate == limit:
                    section.rows.append(
                        Row(
                            section.name, f"{label}, {n:,} due", rate, "occ/s", note="the reference"
                        )
                    )
                continue
            target = f">= {TARGET_RATIO:.0%} of bare" if contender == "goatbeat" else ""
            met = None if contender != "goatbeat" or ratio is None else ratio >= TARGET_RATIO
            note = "kombu publish batches" if contender == "send_task_batch" else ""
            section.rows.append(
                Row(
                    section.name,
                    f"{label}, {n:,} due",
                    rate,
                    "occ/s",
                    reference="bare send_task",
                    ratio=ratio,
                    target=target,
                    met=met,
                    note=note if res["complete"] else f"stopped after {peer_cap:.0f} s",
                )
            )
            if contender == "goatbeat" and rate and batched:
                section.rows.append(
                    Row(
                        section.name,
                        f"{label}, {n:,} due, vs the batched loop",
                        rate,
                        "occ/s",
                        reference="bare send_task (batches of 50)",
                        ratio=rate / batched,
                        target=f">= {TARGET_BATCHED:.0%} of the batched loop",
                        met=rate / batched >= TARGET_BATCHED,
                    )
                )
    section.chart = chart
    section.details = (
        "\n".join(lines)
        + f"\n\nFast contenders: median of {repeats} run(s). Slow schedulers: one run, stopped "
        f"after {peer_cap:.0f} s when not finished; the rate is over what they dispatched.\n"
    )
    for n, text in profiles.items():
        section.details += (
            f"\n<details><summary>pyinstrument profile of goatbeat, {n:,} due</summary>\n\n"
            f"```\n{text.strip()}\n```\n</details>\n"
        )
    return section


if __name__ == "__main__":
    if not child_main(HANDLERS):
        sys.exit("usage: python -m bench (this module runs as its child)")
