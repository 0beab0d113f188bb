"""Load every django-celery-beat row the way its own DatabaseScheduler does (``ModelEntry``).

Run in a subprocess (``python -m tests.importers.dcb_load DATABASE_URL``), so the test process
never configures Django. Prints kombu JSON: name -> the entry's schedule class, args, kwargs,
options (queue, exchange, routing_key, priority, expires, headers) and the row's flags, or the
error django-celery-beat's own models raise on it.
"""

from __future__ import annotations

import sys

from tests.importers.dcb_fixture import configure


def main() -> None:
    configure(sys.argv[1])
    from celery import Celery
    from django_celery_beat.models import PeriodicTask
    from django_celery_beat.schedulers import ModelEntry
    from kombu.utils.json import dumps

    app = Celery("dcb-load", set_as_current=False)
    out: dict[str, object] = {}
    for task in PeriodicTask.objects.all():
        entry = ModelEntry(task, app=app)
        sched = entry.schedule
        out[task.name] = {
            "schedule": type(sched).__name__,
            "tz": str(getattr(sched, "tz", "") or ""),
            "args": list(entry.args),
            "kwargs": dict(entry.kwargs),
            "options": dict(entry.options),
            "enabled": task.enabled,
            "one_off": task.one_off,
        }
    sys.stdout.write(dumps(out))


if __name__ == "__main__":
    main()
