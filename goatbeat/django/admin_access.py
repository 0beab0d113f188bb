"""The admin's doors to goatbeat: the Django database alias, the store it reads through and the
registry every write goes through (the ``Beat`` the CLI and the Python API use, so the same
events are logged), and what the project's code declares."""

from __future__ import annotations

from typing import TYPE_CHECKING

from goatbeat.core.store import ScheduleStore

if TYPE_CHECKING:
    from goatbeat.django.registry import DjangoRegistry


def database_alias() -> str:
    from goatbeat.django import conf

    return conf.get().database


def store_for_reading() -> ScheduleStore:
    """The store, for reading only: every write goes through :func:`registry_for_writing`,
    which logs the same events as the CLI and the Python API."""
    from goatbeat.django.registry import get_store

    return get_store()


def declared_names() -> set[str]:
    """The names this project's code declares (its ``schedules.py`` files)."""
    from goatbeat.django.registry import get_registry

    return set(get_registry().names())


def declaration_problems() -> list[str]:
    """What discovery found wrong in the project's ``schedules.py`` files."""
    from goatbeat.django.registry import get_registry

    return list(get_registry().problems)


def registry_for_writing() -> DjangoRegistry:
    from goatbeat.django.registry import get_registry

    return get_registry()
