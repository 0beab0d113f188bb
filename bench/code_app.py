"""An app with many schedules declared in code, as a large ``schedules.py`` declares them.

``goatbeat --app bench.code_app:make_beat scheduler`` with ``GOATBEAT_BENCH_DB`` (the
database), ``GOATBEAT_BENCH_SCHEDULES`` (how many, default 100,000), ``GOATBEAT_BENCH_BROKER``
(Celery over that broker; else the no-op submitter; ``GOATBEAT_BENCH_CONFIRM=1``: with
publisher confirms, ``confirm_publish``), ``GOATBEAT_BENCH_DUE`` (how many of them
are due at once: every-minute interval schedules anchored in the past, the rest hourly and
daily crons and intervals spread over the day) and ``GOATBEAT_BENCH_VARIANT`` (changes one
argument of every schedule: a publication that rewrites them all).

``celery_app()`` is the same declarations as a celery ``beat_schedule`` (celery beat's
equivalent), for ``celery -A bench.code_app:celery_app beat``.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

from bench._common import TASK, NoopSubmitter

_ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)


def _count() -> int:
    return int(os.environ.get("GOATBEAT_BENCH_SCHEDULES", "100000"))


def _due() -> int:
    return int(os.environ.get("GOATBEAT_BENCH_DUE", "0"))


def make_beat() -> Any:
    from goatbeat.beat import Beat

    broker: Any = os.environ.get("GOATBEAT_BENCH_BROKER")
    if broker and os.environ.get("GOATBEAT_BENCH_CONFIRM"):
        from bench._common import celery_app as bench_celery_app

        broker = bench_celery_app(broker)
        broker.conf.broker_transport_options = {"confirm_publish": True}
    beat = (
        Beat(os.environ["GOATBEAT_BENCH_DB"], submitter="celery", submitter_options={"app": broker})
        if broker
        else Beat(os.environ["GOATBEAT_BENCH_DB"], submitter=NoopSubmitter())
    )
    variant = os.environ.get("GOATBEAT_BENCH_VARIANT", "")
    total, due = _count(), _due()
    for i in range(total):
        name = f"code-{i}"
        args = [i, variant] if variant else [i]
        if i < due:
            # Due at the first iteration: every minute since an anchor long past.
            beat.schedule(
                name=name, task=TASK, every=60, anchor=_ANCHOR, args=args, misfire_grace="1h"
            )
        elif i % 2:
            beat.schedule(name=name, task=TASK, cron=f"{i % 60} {i % 24} * * *", args=args)
        else:
            beat.schedule(name=name, task=TASK, every=3600 + i % 600, args=args)
    return beat


def celery_app() -> Any:
    """The same schedules as a celery ``beat_schedule`` (for ``celery beat``)."""
    from celery import Celery
    from celery.schedules import crontab

    app = Celery("bench", broker=os.environ.get("GOATBEAT_BENCH_BROKER", "memory://"))
    schedule: dict[str, Any] = {}
    for i in range(_count()):
        entry: dict[str, Any] = {"task": TASK, "args": (i,)}
        if i % 2:
            entry["schedule"] = crontab(minute=str(i % 60), hour=str(i % 24))
        else:
            entry["schedule"] = timedelta(seconds=3600 + i % 600)
        schedule[f"code-{i}"] = entry
    app.conf.beat_schedule = schedule
    return app
