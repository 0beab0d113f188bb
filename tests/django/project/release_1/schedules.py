"""Release 1 of a project's schedules (tests/django/test_release_order.py)."""

from goatbeat.django import DjangoRegistry
from tests.django.project.reports.tasks import generate_report


def register(beat: DjangoRegistry) -> None:
    beat.schedule(name="daily-report", task=generate_report, cron="0 9 * * *")
    beat.schedule(name="ping", task=generate_report, every="10s")
