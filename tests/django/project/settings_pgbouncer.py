"""The test project behind PgBouncer in transaction pooling mode.

``default`` goes through PgBouncer (port ``GOATBEAT_TEST_PGBOUNCER_PORT``) with
``DISABLE_SERVER_SIDE_CURSORS``, as Django asks for under transaction pooling (goatbeat takes it
as the hint that the alias is pooled); ``direct`` reaches PostgreSQL itself, and goatbeat
LISTENs there (``GOATBEAT['listen_database']``), unless ``GOATBEAT_TEST_POLL`` is set: then
the scheduler polls.
"""

import os

from tests.django.project.settings import *  # noqa: F403
from tests.django.project.settings import GOATBEAT as _GOATBEAT
from tests.django.project.settings import _database

DATABASES = {
    "default": {
        **_database,
        "PORT": os.environ.get("GOATBEAT_TEST_PGBOUNCER_PORT", "6432"),
        "DISABLE_SERVER_SIDE_CURSORS": True,
    },
    # application_name shows, in pg_stat_activity, which session LISTENs (the tests look).
    "direct": {**_database, "OPTIONS": {"application_name": "direct"}},
    "legacy": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
}

GOATBEAT = dict(_GOATBEAT)
if not os.environ.get("GOATBEAT_TEST_POLL"):
    GOATBEAT["listen_database"] = "direct"
