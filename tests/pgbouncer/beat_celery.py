"""goatbeat's side of tests/pgbouncer/test_celery_failover.py, as a project writes it:
``goatbeat --app tests.pgbouncer.beat_celery:beat --database <PgBouncer> --listen-database
<PostgreSQL> scheduler``.

Each schedule fires every second between ``GOATBEAT_E2E_START`` and ``GOATBEAT_E2E_END`` (set
by the test, the same for every replica); the tasks record their runs in Redis.
"""

from __future__ import annotations

import os

from goatbeat.beat import Beat
from goatbeat.submitters.celery import CelerySubmitter
from tests.e2e.backend_apps import celery_app

WINDOW = {
    "every": "1s",
    "start_at": os.environ["GOATBEAT_E2E_START"],
    "end_at": os.environ["GOATBEAT_E2E_END"],
    "misfire": "run_all",
}

beat = Beat("memory://", submitter=CelerySubmitter(celery_app.app))  # the test gives --database
# A task object, on the default queue.
beat.schedule(name="object", task=celery_app.record_run, args=["object"], **WINDOW)
# A task name, on a queue of its own.
beat.schedule(
    name="named",
    task="tests.e2e.backend_apps.celery_app.record_run",
    queue="custom",
    args=["named"],
    **WINDOW,
)
