"""The test project with two apps whose schedules.py are broken."""

from tests.django.project.settings import *  # noqa: F403
from tests.django.project.settings import INSTALLED_APPS

INSTALLED_APPS = [
    *INSTALLED_APPS,
    "tests.django.project.broken_cron",
    "tests.django.project.broken_import",
]
