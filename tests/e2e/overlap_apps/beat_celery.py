"""goatbeat's side of tests/e2e/test_overlap_celery.py, as a project writes it:
``goatbeat --app tests.e2e.overlap_apps.beat_celery:beat --database ... scheduler``.

One schedule every 2 s whose task sleeps 3 s; its overlap policy comes from
``GOATBEAT_E2E_OVERLAP`` (the test sets it)."""

from __future__ import annotations

import os

from celery import Celery

from goatbeat.beat import Beat
from tests.e2e.backend_apps._record import URL_ENV

beat = Beat(
    "memory://",  # the test gives --database
    submitter="celery",
    submitter_options={"app": Celery("goatbeat_overlap", broker=os.environ[URL_ENV])},
)
beat.schedule(
    name="slow",
    task="overlap.slow",
    every="2s",
    args=[3],
    overlap=os.environ["GOATBEAT_E2E_OVERLAP"],
    max_runtime="5m",
)
