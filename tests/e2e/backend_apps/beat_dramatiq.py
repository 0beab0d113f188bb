"""goatbeat's side of tests/e2e/test_backend_failover.py for Dramatiq, as a project writes it:
``goatbeat --app tests.e2e.backend_apps.beat_dramatiq:beat --database ... scheduler``.

The broker is named as for the ``dramatiq`` command, so the scheduler knows the workers' actors
and queues and checks every declaration against them. Each schedule fires every second between
``GOATBEAT_E2E_START`` and ``GOATBEAT_E2E_END`` (set by the test, the same for every replica).
"""

from __future__ import annotations

import os

from goatbeat.beat import Beat
from tests.e2e.backend_apps import dramatiq_app

WINDOW = {
    "every": "1s",
    "start_at": os.environ["GOATBEAT_E2E_START"],
    "end_at": os.environ["GOATBEAT_E2E_END"],
    "misfire": "run_all",
}

beat = Beat(
    "memory://",  # the test gives --database
    submitter="dramatiq",
    submitter_options={"broker": "tests.e2e.backend_apps.dramatiq_app"},
)
# An actor object: sent under its actor_name to its own queue ("elsewhere").
beat.schedule(name="object", task=dramatiq_app.record_elsewhere, args=["object"], **WINDOW)
# An actor name, to a queue the workers' broker declares.
beat.schedule(name="named", task="goatbeat_e2e_record", queue="custom", args=["named"], **WINDOW)
# A task that fails: the schedule's max_retries (the actor's own is 0) is honoured per message.
beat.schedule(
    name="failing",
    task=dramatiq_app.fail_run,
    args=["failing"],
    options={"max_retries": 1, "min_backoff": 10, "max_backoff": 20},
    **WINDOW,
)
