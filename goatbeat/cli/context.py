"""Which app a command works on: :class:`CliContext`, the group's options and the app loaded
on first use.

The app is, in order: ``--app`` (or ``GOATBEAT_APP``), else, when ``DJANGO_SETTINGS_MODULE`` is
set, the Django project (:func:`goatbeat.django.cli_app`), else the command's own fallback (the
demo's example app), else a bare :class:`~goatbeat.beat.Beat` on ``--database``. Any object with
the :class:`BeatLike` surface will do. A command reaches it with :func:`open_app` (which closes
it when the command ends) or ``ctx.find_object(CliContext).app()``.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import click

from goatbeat.cli.errors import UserError
from goatbeat.core.errors import GoatbeatError
from goatbeat.core.model import Schedule
from goatbeat.core.scheduler import Scheduler
from goatbeat.core.store import PublishResult, ScheduleStore

__all__ = ["BeatLike", "CliContext", "cli_context", "describe_error", "load_app", "open_app"]


@runtime_checkable
class BeatLike(Protocol):
    """What the CLI needs from an app (``goatbeat.beat.Beat``; Django's ``cli_app()``)."""

    @property
    def store(self) -> ScheduleStore: ...

    @property
    def schedules(self) -> list[Schedule]: ...

    def migrate(self) -> None: ...

    def publish(self, *, dry_run: bool = False, origin: str = "publish") -> PublishResult: ...

    def publish_at_start(self) -> PublishResult: ...

    def prune(self) -> list[str]: ...

    def scheduler(self, **overrides: Any) -> Scheduler: ...

    def close(self) -> None: ...


class CliContext:
    """Options of the group, and the app loaded on first use."""

    def __init__(
        self,
        *,
        app: str | BeatLike | None = None,
        database: str | None = None,
        log_format: str = "text",
        log_level: str = "INFO",
    ) -> None:
        self.app_spec = app
        self.database = database
        self.log_format = log_format
        self.log_level = log_level
        self._app: BeatLike | None = app if isinstance(app, BeatLike) else None
        self.app_label = app if isinstance(app, str) else None
        self.bare = False
        """Whether the app is a bare Beat on ``--database``: it declares nothing, so it
        cannot tell which code schedules the code still declares."""

    def app(self, *, fallback: str | None = None) -> BeatLike:
        if self._app is None:
            self._app = self._load(fallback)
            if self.database:
                use = getattr(self._app, "use_database", None)
                if not callable(use):
                    raise UserError("--database cannot be used with this app")
                use(self.database)
        return self._app

    def store(self) -> ScheduleStore:
        return self.app().store

    def close(self) -> None:
        if self._app is not None:
            self._app.close()

    def _load(self, fallback: str | None) -> BeatLike:
        spec = self.app_spec if isinstance(self.app_spec, str) else None
        spec = spec or os.environ.get("GOATBEAT_APP") or None
        if spec:
            self.app_label = spec
            return load_app(spec)
        if os.environ.get("DJANGO_SETTINGS_MODULE"):
            self.app_label = f"Django project {os.environ['DJANGO_SETTINGS_MODULE']}"
            return _django_app()
        if fallback:
            self.app_label = fallback
            return load_app(fallback)
        if self.database:
            from goatbeat.beat import Beat

            self.app_label = self.database
            self.bare = True
            return Beat(self.database)
        raise UserError(
            "no app: pass --app module:attribute (or set GOATBEAT_APP), "
            "or --database URL to work on a database directly"
        )


def load_app(spec: str) -> BeatLike:
    """Import ``"package.module:attribute"`` (attribute defaults to ``beat``)."""
    module_name, _, attr = spec.partition(":")
    attr = attr or "beat"
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        raise UserError(f"--app {spec!r} is not 'package.module:attribute'")
    # As `celery -A` does: the project is where the command runs, even when the console
    # script's own directory (not the current one) heads sys.path.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == module_name or module_name.startswith(exc.name + ".")):
            raise UserError(f"--app {spec!r}: no module named {exc.name!r}") from None
        raise UserError(f"--app {spec!r}: importing {module_name!r} failed: {exc}") from None
    except GoatbeatError as exc:
        raise UserError(f"--app {spec!r}: {exc}") from None
    except Exception as exc:
        raise UserError(
            f"--app {spec!r}: importing {module_name!r} failed: {describe_error(exc)}"
        ) from None
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise UserError(
            f"--app {spec!r}: module {module_name!r} has no attribute {attr!r}"
        ) from None
    if not isinstance(obj, BeatLike) and callable(obj) and not isinstance(obj, type):
        try:
            obj = obj()  # a factory returning the app
        except Exception as exc:
            raise UserError(
                f"--app {spec!r}: calling {attr!r} failed: {describe_error(exc)}"
            ) from None
    if not isinstance(obj, BeatLike):
        raise UserError(f"--app {spec!r}: {repr(obj)[:80]} is not a goatbeat Beat")
    return obj


def _django_app() -> BeatLike:
    try:
        from goatbeat.django import cli_app
    except ImportError as exc:
        raise UserError(
            f"DJANGO_SETTINGS_MODULE is set but the Django app cannot be loaded ({exc}); "
            "install goatbeat[django] or pass --app"
        ) from None
    try:
        app: BeatLike = cli_app()
    except Exception as exc:  # ImproperlyConfigured, a schedules.py that fails...
        raise UserError(f"the Django project cannot be loaded: {describe_error(exc)}") from None
    return app


def describe_error(exc: BaseException) -> str:
    """``Type: message (file:line)``: where the user's code failed, in one line."""
    frames = traceback.extract_tb(exc.__traceback__)
    place = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{place}"


def cli_context(ctx: click.Context) -> CliContext:
    """The group's :class:`CliContext` (the group always makes one)."""
    obj = ctx.find_object(CliContext)
    assert obj is not None
    return obj


@contextmanager
def open_app(ctx: click.Context, *, fallback: str | None = None) -> Iterator[BeatLike]:
    """The command's app, closed when the command ends."""
    obj = cli_context(ctx)
    try:
        yield obj.app(fallback=fallback)
    finally:
        obj.close()
