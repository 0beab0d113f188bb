"""The closed choices of a schedule's fields: its misfire and overlap policies, and where its
definition lives (its source)."""

import enum

__all__ = ["MisfirePolicy", "OverlapPolicy", "Source"]


class MisfirePolicy(enum.StrEnum):
    """What to do with occurrences that are *late* (``now - scheduled_at > misfire_grace``)."""

    RUN_ONCE = "run_once"  # one run for everything missed, at the latest missed instant
    SKIP = "skip"  # none; resume at the next future occurrence
    RUN_ALL = "run_all"  # every missed occurrence in order, the latest catch_up_limit of them
    # Whatever the policy, one catch-up never claims more than catch_up_limit occurrences
    # (on-time ones included): see goatbeat.core.misfire.


class OverlapPolicy(enum.StrEnum):
    """What to do with an occurrence due while the schedule's previous run is still running
    (as the backend reports it; a run older than ``max_runtime`` no longer counts)."""

    ALLOW = "allow"  # start it anyway (default; celery beat's behaviour)
    SKIP = "skip"  # record it as skipped
    BUFFER_ONE = "buffer_one"  # at most one waits, and starts when the running one ends


class Source(enum.StrEnum):
    """Where a schedule's definition lives."""

    CODE = "code"  # declared in code (schedules.py, Beat.schedule); read-only but `enabled`
    ADMIN = "admin"  # created in the admin / API
    CELERY = "celery"  # imported from a beat_schedule, or published by the compat scheduler
    DJANGO_CELERY_BEAT = "django_celery_beat"  # imported from django-celery-beat's tables
