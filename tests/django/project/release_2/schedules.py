"""Release 2: daily-report moves to 8:30, ping is renamed ping-user, cleanup is new."""

from goatbeat.django import DjangoRegistry
from tests.django.project.reports.tasks import generate_report


def register(beat: DjangoRegistry) -> None:
    beat.schedule(name="daily-report", task=generate_report, cron="30 8 * * *")
    beat.schedule(name="ping-user", renamed_from="ping", task=generate_report, every="10s")
    beat.schedule(name="cleanup", task=generate_report, every="1h")
