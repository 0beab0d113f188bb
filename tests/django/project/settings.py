"""Settings of the test Django project: a real PostgreSQL, django-tasks-db, the admin.

The database comes from ``GOATBEAT_TEST_PG_DSN`` (tests/django/conftest.py starts the server
and exports it before Django reads these settings); ``GOATBEAT_TEST_DB_NAME`` points a
subprocess (``manage.py db_worker``) at the test database pytest-django created.
"""

import os
from urllib.parse import urlsplit

import django

DJANGO_TASKS = django.VERSION >= (6, 0)
"""Django 5.2 has no django.tasks: the project's tasks are then plain functions, sent to RQ
(tasks_compat.py), and django-tasks-db is left out."""

_dsn = urlsplit(
    os.environ.get("GOATBEAT_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
)

SECRET_KEY = "goatbeat-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "Europe/Paris"
ROOT_URLCONF = "tests.django.project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    *(["django_tasks_db"] if DJANGO_TASKS else []),
    "goatbeat.django",
    "tests.django.project.reports",
    "tests.django.project.mail",
    "tests.django.project.plain",
]

_database = {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": os.environ.get("GOATBEAT_TEST_DB_NAME", "goatbeat_django"),
    "USER": _dsn.username or "postgres",
    "HOST": _dsn.hostname or "127.0.0.1",
    "PORT": str(_dsn.port or 5432),
    # The scheduler keeps its connection (the seed's advice for the scheduler process).
    "CONN_MAX_AGE": None,
    "CONN_HEALTH_CHECKS": True,
}
DATABASES = {
    "default": _database,
    "legacy": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
}

GOATBEAT = {
    "database": "default",
    "lease_ttl": "5s",
    "lease_renew_interval": "1s",
    "max_sleep": "1s",
    "scheduler_id": "test-scheduler",
}

if DJANGO_TASKS:
    TASKS = {
        "default": {
            "BACKEND": "django_tasks_db.DatabaseBackend",
            "QUEUES": ["default", "reports"],
        },
        "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"},
    }
else:
    GOATBEAT["submitter_options"] = {
        "rq": {"connection": os.environ.get("GOATBEAT_TEST_REDIS_URL", "redis://127.0.0.1:1/0")}
    }

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

STATIC_URL = "/static/"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "goatbeat.core.observability.JsonFormatter"}},
    "handlers": {"goatbeat": {"class": "logging.StreamHandler", "formatter": "json"}},
    "loggers": {"goatbeat": {"handlers": ["goatbeat"], "level": "WARNING", "propagate": True}},
}
