"""A project that added goatbeat.django but no GOATBEAT setting, on SQLite: what a new user
meets first."""

from tests.django.project.settings import *  # noqa: F403
from tests.django.project.settings import INSTALLED_APPS

del GOATBEAT  # noqa: F821
INSTALLED_APPS = [a for a in INSTALLED_APPS if a != "django_tasks_db"]
TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
