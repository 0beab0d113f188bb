"""goatbeat's Django app (``INSTALLED_APPS += ["goatbeat.django"]``, app label ``goatbeat``).

Public API for ``schedules.py``: :class:`DjangoRegistry` and :func:`call`. :func:`cli_app`
gives the ``goatbeat`` command (and ``manage.py goatbeat``) the project's registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from goatbeat.django.registry import Call, DjangoRegistry

__all__ = ["DjangoRegistry", "call", "cli_app"]


def call(func: Any, /, *args: Any, **kwargs: Any) -> Call:
    """Bind ``args`` and ``kwargs`` to ``func``: ``beat.schedule(task=call(send_email, 42))``."""
    from goatbeat.django.registry import call as _call

    return _call(func, *args, **kwargs)


def cli_app() -> DjangoRegistry:
    """The Django project's registry for the ``goatbeat`` command: sets Django up (from
    ``DJANGO_SETTINGS_MODULE``) if needed, discovers every app's ``schedules.py``. Raises
    :class:`~goatbeat.django.registry.DeclarationError` listing every problem in them."""
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()
    from goatbeat.django.registry import get_registry

    registry = get_registry()
    registry.check()
    return registry


def __getattr__(name: str) -> Any:
    # Lazy, so "goatbeat.django" can be imported (INSTALLED_APPS, settings) before Django is set up.
    if name == "DjangoRegistry":
        from goatbeat.django.registry import DjangoRegistry

        return DjangoRegistry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
