"""Django Tasks in the tasks package (imported by the Django tests only): one defined here,
and one re-exported from an installed app, which Django's worker runs under *its* own path."""

from __future__ import annotations

from django.tasks import task

from tests.django.project.reports.tasks import generate_report  # noqa: F401 - a re-export


@task()
def own_report() -> None:
    return None
