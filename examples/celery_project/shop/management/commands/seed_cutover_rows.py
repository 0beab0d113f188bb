"""django-celery-beat rows for the live cutover test (tests/e2e/test_cutover_live.py), created
through django-celery-beat's own models: short intervals, an interval that starts later, and
clocked one-off rows. The test moves the start and clocked times with SQL as its steps need."""

from datetime import UTC, datetime

from django.core.management.base import BaseCommand
from django_celery_beat.models import ClockedSchedule, IntervalSchedule, PeriodicTask

LATER = datetime(2099, 1, 1, tzinfo=UTC)


class Command(BaseCommand):
    help = "Create the cutover test's django-celery-beat rows (idempotent)."

    def handle(self, *args: object, **options: object) -> None:
        for seconds in (2, 3, 20):
            every, _ = IntervalSchedule.objects.get_or_create(
                every=seconds, period=IntervalSchedule.SECONDS
            )
            name = f"every-{seconds}s"
            PeriodicTask.objects.update_or_create(
                name=name,
                defaults={"task": "shop.record", "interval": every, "args": f'["{name}"]'},
            )
        every5, _ = IntervalSchedule.objects.get_or_create(every=5, period=IntervalSchedule.SECONDS)
        PeriodicTask.objects.update_or_create(
            name="from-start",
            defaults={
                "task": "shop.record",
                "interval": every5,
                "args": '["from-start"]',
                "start_time": LATER,
            },
        )
        for name in ("clocked-gap", "clocked-later"):
            clocked = ClockedSchedule.objects.create(clocked_time=LATER)
            PeriodicTask.objects.update_or_create(
                name=name,
                defaults={
                    "task": "shop.record",
                    "clocked": clocked,
                    "one_off": True,
                    "args": f'["{name}"]',
                },
            )
        self.stdout.write("seeded the cutover rows")
