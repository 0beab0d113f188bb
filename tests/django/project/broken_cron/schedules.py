"""A schedules.py with several mistakes at once (settings_broken_schedules installs it)."""

from goatbeat.django import DjangoRegistry
from tests.django.project.mail.tasks import send_email


def register(beat: DjangoRegistry) -> None:
    beat.schedule(name="bad-cron", task=send_email, cron="0 9 * * 8")
    beat.schedule(
        name="missing-task", task="tests.django.project.reports.tasks.heartbeet", every="1m"
    )
    beat.schedule(name="daily-report", task=send_email, every="1h")  # the reports app's name
    beat.schedule(name="fine", task=send_email, every="1h")
