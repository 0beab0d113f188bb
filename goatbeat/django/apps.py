"""The Django app ``goatbeat.django`` (label ``goatbeat``): startup validation and wiring."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class GoatbeatConfig(AppConfig):  # type: ignore[misc]
    name = "goatbeat.django"
    label = "goatbeat"
    verbose_name = "Goatbeat"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core.signals import setting_changed

        from goatbeat.django import conf, registry

        # Validate now, so a bad GOATBEAT stops the project at startup and not at 3 a.m.
        conf.reset()
        conf.get()
        setting_changed.connect(_settings_changed, dispatch_uid="goatbeat.settings_changed")

        from goatbeat.django import completions

        completions.connect()  # Django Tasks: task ids on the executions, completions back
        # Problems in schedules.py are collected, not raised: they fail the system checks and
        # every use of the declarations, but not the web process serving the project's pages.
        registry.autodiscover()
        from django.core import checks

        from goatbeat.django.checks import check_schedules

        checks.register(check_schedules, "goatbeat")


def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in {"GOATBEAT", "DATABASES", "TIME_ZONE"}:
        from goatbeat.django import conf, registry

        conf.reset()
        registry.reset_store()
