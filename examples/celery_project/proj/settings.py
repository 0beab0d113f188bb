"""Settings of the example project. Databases and broker come from the environment."""

import os
from datetime import timedelta
from urllib.parse import urlsplit

from celery.schedules import crontab

SECRET_KEY = "example-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "Europe/Paris"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_celery_beat",
    "goatbeat.django",
    "shop",
]

_db = urlsplit(os.environ.get("EXAMPLE_DATABASE_URL", "postgresql://localhost/example"))
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.path.lstrip("/"),
        "USER": _db.username or "",
        "PASSWORD": _db.password or "",
        "HOST": _db.hostname or "",
        "PORT": str(_db.port or ""),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }
}

REDIS_URL = os.environ.get("EXAMPLE_REDIS_URL", "redis://localhost:6379/0")

CELERY_BROKER_URL = REDIS_URL
CELERY_TIMEZONE = TIME_ZONE
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_EXPIRES = None
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The drop-in scheduler keeps its schedules in the project's PostgreSQL database.
CELERY_GOATBEAT_DATABASE = os.environ.get("EXAMPLE_DATABASE_URL", "postgresql://localhost/example")
CELERY_GOATBEAT_LEASE_TTL = os.environ.get("EXAMPLE_LEASE_TTL", "30s")
CELERY_GOATBEAT_LEASE_RENEW_INTERVAL = os.environ.get("EXAMPLE_LEASE_RENEW", "10s")

# EXAMPLE_BEAT_SCHEDULE=none: a project whose schedules all live in django-celery-beat's tables.
CELERY_BEAT_SCHEDULE = (
    {}
    if os.environ.get("EXAMPLE_BEAT_SCHEDULE") == "none"
    else {
        "tick-every-2s": {
            "task": "shop.record",
            "schedule": timedelta(seconds=2),
            "args": ["tick"],
        },
        "nightly-report": {
            "task": "shop.record",
            "schedule": crontab(minute=0, hour=2),
            "args": ["nightly"],
            "options": {"queue": "celery", "expires": 3600},
        },
        "weekday-digest": {
            "task": "shop.record",
            "schedule": crontab(minute=30, hour=8, day_of_week="mon-fri"),
            "args": ["digest"],
            "kwargs": {"audience": "staff"},
        },
    }
)

# Variants for the tests: EXAMPLE_BEAT_SCHEDULE=none, every schedule lives in django-celery-beat's
# tables; =cutover, a few short intervals for the live cutover test (tests/e2e/test_cutover_live.py).
if os.environ.get("EXAMPLE_BEAT_SCHEDULE") == "none":
    CELERY_BEAT_SCHEDULE = {}
elif os.environ.get("EXAMPLE_BEAT_SCHEDULE") == "cutover":
    CELERY_BEAT_SCHEDULE = {
        f"every-{n}s": {
            "task": "shop.record",
            "schedule": timedelta(seconds=n),
            "args": [f"every-{n}s"],
        }
        for n in (2, 3, 20)
    }
elif os.environ.get("EXAMPLE_BEAT_SCHEDULE") == "redbeat":
    # tests/e2e/test_cutover_redbeat_live.py: every-3s is created at run time in redbeat's keys.
    CELERY_BEAT_SCHEDULE = {
        f"every-{n}s": {
            "task": "shop.record",
            "schedule": timedelta(seconds=n),
            "args": [f"every-{n}s"],
        }
        for n in (2, 20)
    }
# celery-redbeat (celery beat -S redbeat.RedBeatScheduler) keeps its entries in this Redis.
CELERY_REDBEAT_REDIS_URL = REDIS_URL
CELERY_REDBEAT_KEY_PREFIX = os.environ.get("EXAMPLE_REDBEAT_KEY_PREFIX", "redbeat:")
# The drop-in reads stock beat's last runs from this JSON at start (docs/migration).
if os.environ.get("EXAMPLE_LAST_RUNS"):
    CELERY_GOATBEAT_LAST_RUNS = os.environ["EXAMPLE_LAST_RUNS"]

GOATBEAT = {
    "database": "default",
    "submitter": "celery",
    "submitter_options": {"celery": {"app": "proj.celery:app"}},
    "lease_ttl": os.environ.get("EXAMPLE_LEASE_TTL", "30s"),
    "lease_renew_interval": os.environ.get("EXAMPLE_LEASE_RENEW", "10s"),
    "max_sleep": "1s",
}
