"""A schedules.py that cannot even be imported (settings_broken_schedules installs it)."""

from tests.django.project.no_such_module import something  # noqa: F401
