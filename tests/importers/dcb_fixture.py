"""Create django-celery-beat's real tables and rows, through its own migrations and models.

Run in a subprocess (``python -m tests.importers.dcb_fixture DATABASE_URL < rows.json``) so the
test process never configures Django. ``rows`` is a list of dicts: ``name``, ``task``, one of
``interval`` ({every, period}), ``crontab`` ({minute, hour, day_of_week, day_of_month,
month_of_year, timezone}), ``solar`` ({event, latitude, longitude}), ``clocked``
({clocked_time}), plus any PeriodicTask column. ``raw_sql`` statements run afterwards (to make
rows django-celery-beat's own validation would refuse, e.g. a dangling foreign key).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from urllib.parse import urlsplit


def configure(url: str) -> None:
    import django
    from django.conf import settings

    parts = urlsplit(url)
    if parts.scheme.startswith("postgres"):
        db = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": parts.path.lstrip("/"),
            "USER": parts.username or "",
            "PASSWORD": parts.password or "",
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
        }
    else:
        db = {"ENGINE": "django.db.backends.sqlite3", "NAME": url[len("sqlite:///") :]}
    settings.configure(
        INSTALLED_APPS=["django_celery_beat"],
        DATABASES={"default": db},
        USE_TZ=True,
        TIME_ZONE="UTC",
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
    )
    django.setup()


def main() -> None:
    url = sys.argv[1]
    spec = json.load(sys.stdin)
    configure(url)
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", "django_celery_beat", verbosity=0)
    from django_celery_beat.models import (
        ClockedSchedule,
        CrontabSchedule,
        IntervalSchedule,
        PeriodicTask,
        SolarSchedule,
    )

    for row in spec.get("rows", []):
        row = dict(row)
        fields: dict[str, object] = {}
        if "interval" in row:
            fields["interval"] = IntervalSchedule.objects.create(**row.pop("interval"))
        if "crontab" in row:
            fields["crontab"] = CrontabSchedule.objects.create(**row.pop("crontab"))
        if "solar" in row:
            fields["solar"] = SolarSchedule.objects.create(**row.pop("solar"))
        if "clocked" in row:
            c = row.pop("clocked")
            fields["clocked"] = ClockedSchedule.objects.create(
                clocked_time=datetime.fromisoformat(c["clocked_time"])
            )
        for key in ("last_run_at", "start_time", "expires"):
            if row.get(key):
                row[key] = datetime.fromisoformat(row[key])
        task = PeriodicTask(**fields, **row)
        last_run_at = task.last_run_at
        task.save()
        if last_run_at is not None and task.enabled:
            # save() keeps it; set it again the way the scheduler's own sync does.
            PeriodicTask.objects.filter(pk=task.pk).update(last_run_at=last_run_at)
    with connection.cursor() as cursor:
        for statement in spec.get("raw_sql", []):
            cursor.execute(statement)


if __name__ == "__main__":
    main()
