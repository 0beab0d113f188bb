"""goatbeat's side of tests/e2e/test_backend_failover.py for RQ, as a project writes it:
``goatbeat --app tests.e2e.backend_apps.beat_rq:beat --database ... scheduler``.

Each schedule fires every second between ``GOATBEAT_E2E_START`` and ``GOATBEAT_E2E_END`` (set
by the test, the same for every replica).
"""

from __future__ import annotations

import os

from goatbeat.beat import Beat
from tests.e2e.backend_apps import rq_jobs
from tests.e2e.backend_apps._record import URL_ENV

WINDOW = {
    "every": "1s",
    "start_at": os.environ["GOATBEAT_E2E_START"],
    "end_at": os.environ["GOATBEAT_E2E_END"],
    "misfire": "run_all",
}

beat = Beat(
    "memory://",  # the test gives --database
    submitter="rq",
    submitter_options={"connection": os.environ[URL_ENV]},
)
# A function object, with a job option RQ honours.
beat.schedule(
    name="object",
    task=rq_jobs.record_run,
    args=["object"],
    options={"job_timeout": "45s"},
    **WINDOW,
)
# A dotted path, to a custom queue.
beat.schedule(
    name="named",
    task="tests.e2e.backend_apps.rq_jobs.record_run",
    queue="custom",
    args=["named"],
    **WINDOW,
)
# A job that fails: the schedule's retry is honoured.
beat.schedule(name="failing", task=rq_jobs.fail_run, args=["failing"], options={"retry": 1},
              **WINDOW)  # fmt: skip
