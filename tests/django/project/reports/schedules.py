from goatbeat.django import DjangoRegistry, call
from tests.django.project.reports.tasks import broken_report, generate_report


def register(beat: DjangoRegistry) -> None:
    beat.schedule(name="daily-report", task=generate_report, cron="0 9 * * *")
    beat.schedule(name="weekly-report", task=call(generate_report, "weekly"), cron="0 8 * * mon")
    beat.schedule(name="broken-report", task=broken_report, every="1h", queue="reports")
