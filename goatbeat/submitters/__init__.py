"""Submitters: hand claimed occurrences to a task backend.

:func:`load_submitter` turns a name into a :class:`~goatbeat.core.submit.TaskSubmitter`,
importing the backend's module only then, so ``import goatbeat`` needs none of them:

========================  =====================================================
``"inline"``              :class:`~goatbeat.submitters.inline.InlineSubmitter` (in-process)
``"celery"``              ``goatbeat.submitters.celery``
``"dramatiq"``            ``goatbeat.submitters.dramatiq``
``"rq"``                  ``goatbeat.submitters.rq``
``"django_tasks"``        ``goatbeat.submitters.django_tasks``
``"pkg.module:attr"``     your own: a submitter instance, a class, or a factory
========================  =====================================================

A backend module exposes its submitter either as a module attribute ``SUBMITTER`` (a class or
factory) or as the one class in it whose name ends with ``Submitter``. Keyword options given
to :func:`load_submitter` go to that constructor.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from goatbeat.core.errors import InvalidValue
from goatbeat.core.submit import TaskSubmitter

__all__ = ["load_submitter", "BUILTIN_SUBMITTERS"]

BUILTIN_SUBMITTERS = ("inline", "celery", "dramatiq", "rq", "django_tasks")

_ALIASES = {"django-tasks": "django_tasks", "django": "django_tasks", "tasks": "django_tasks"}


def load_submitter(spec: str | TaskSubmitter, **options: Any) -> TaskSubmitter:
    """The submitter named by ``spec`` (or ``spec`` itself when it already is one).

    Raises :class:`~goatbeat.core.errors.InvalidValue` (field ``submitter``) for an unknown
    name, a module that cannot be imported (with the missing package named), or an object
    that is not a submitter."""
    if not isinstance(spec, str):
        if options:
            raise InvalidValue("submitter", spec, "options apply only to a submitter name")
        return _checked(spec, spec)
    name = spec.strip()
    name = _ALIASES.get(name, name)
    if ":" in name:
        module_name, _, attr = name.partition(":")
        module = _import(module_name, spec)
        try:
            target = getattr(module, attr)
        except AttributeError:
            raise InvalidValue(
                "submitter", spec, f"module {module_name!r} has no attribute {attr!r}"
            ) from None
        return _checked(_build(target, options, spec), spec)
    if name not in BUILTIN_SUBMITTERS:
        raise InvalidValue(
            "submitter",
            spec,
            f"{spec!r} is not a submitter: use one of {', '.join(BUILTIN_SUBMITTERS)} "
            "or 'package.module:attribute'",
        )
    module = _import(f"goatbeat.submitters.{name}", spec)
    target = getattr(module, "SUBMITTER", None) or _find_class(module, spec)
    return _checked(_build(target, options, spec), spec)


def _import(module_name: str, spec: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        if missing == module_name or module_name.startswith(f"{missing}."):
            reason = f"cannot import {module_name!r}"
        else:
            reason = (
                f"{spec!r} needs the package {missing!r}, which is not installed "
                f"(pip install 'goatbeat[{spec.split(':')[0].replace('_', '-')}]' or {missing})"
            )
        raise InvalidValue("submitter", spec, reason) from None


def _find_class(module: Any, spec: str) -> Any:
    found = [
        obj
        for attr, obj in vars(module).items()
        if attr.endswith("Submitter")
        and inspect.isclass(obj)
        and obj.__module__ == module.__name__
        and not attr.startswith("_")
    ]
    if len(found) != 1:
        raise InvalidValue(
            "submitter", spec, f"{module.__name__} defines no single *Submitter class"
        )
    return found[0]


def _build(target: Any, options: dict[str, Any], spec: str) -> Any:
    if inspect.isclass(target) or (callable(target) and not hasattr(target, "submit")):
        try:
            return target(**options)
        except TypeError as exc:
            raise InvalidValue("submitter", spec, f"cannot create it: {exc}") from None
    if options:
        raise InvalidValue("submitter", spec, "options apply only to a class or factory")
    return target


def _checked(obj: Any, spec: object) -> TaskSubmitter:
    if not callable(getattr(obj, "submit", None)) or not callable(getattr(obj, "validate", None)):
        raise InvalidValue(
            "submitter", spec, f"{obj!r} is not a submitter (it needs submit() and validate())"
        )
    result: TaskSubmitter = obj
    return result
