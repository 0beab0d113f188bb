"""Create the project's django-celery-beat rows through django-celery-beat's own models."""

from django.core.management.base import BaseCommand
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask


class Command(BaseCommand):
    help = "Create example django-celery-beat schedules (idempotent)."

    def handle(self, *args: object, **options: object) -> None:
        every3, _ = IntervalSchedule.objects.get_or_create(every=3, period=IntervalSchedule.SECONDS)
        monthly, _ = CrontabSchedule.objects.get_or_create(
            minute="0", hour="6", day_of_month="1", timezone="Europe/Paris"
        )
        PeriodicTask.objects.update_or_create(
            name="admin-poll-3s",
            defaults={"task": "shop.record", "interval": every3, "args": '["poll"]'},
        )
        PeriodicTask.objects.update_or_create(
            name="admin-monthly-invoices",
            defaults={
                "task": "shop.record",
                "crontab": monthly,
                "args": '["invoices"]',
                "queue": "celery",
                "expire_seconds": 600,
            },
        )
        self.stdout.write("seeded django-celery-beat rows")
