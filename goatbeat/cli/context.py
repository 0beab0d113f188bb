"""Which app a command works on: :class:`CliContext`, the group's options and the app loaded
on first use.

The app is, in order: ``--app`` (or ``GOATBEAT_APP``), else, when ``DJANGO_SETTINGS_MODULE`` is
set, the Django project (:func:`goatbeat.django.cli_app`), else the command's own fallback (the
demo's example app), else a bare :class:`~goatbeat.beat.Beat` on ``--database``. Any object with
the :class:`BeatLike` surface will do. A command reaches it with :func:`open_app` (which closes
it when the command ends) or ``ctx.find_object(CliContext).app()``.

``manage.py goatbeat`` makes ``CliContext(django=True)``: the app is always the Django project,
and ``--app`` is refused (the group says why). ``--database`` is always the target, the Django
project's included (its declarations on that database instead of ``GOATBEAT['database']``). The Django project's
``LOGGING`` then owns goatbeat's log records (:func:`goatbeat.cli.logs.defer_to_project_logging`).
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
from goatbeat.cli.logs import defer_to_project_logging
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

    def publish(
        self, *, dry_run: bool = False, origin: str = "publish", rollback: bool = False
    ) -> PublishResult: ...

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
        listen_database: str | None = None,
        pooled: bool = False,
        log_format: str = "text",
        log_level: str = "INFO",
        django: bool = False,
        verbosity: int | None = None,
        traceback: bool = False,
    ) -> None:
        self.app_spec = app
        self.database = database
        self.listen_database = listen_database
        """``--listen-database``: LISTEN there, the database being pooled (PgBouncer)."""
        self.pooled = pooled
        """``--pooled``: the database goes through a transaction-pooling proxy."""
        self.log_format = log_format
        self.log_level = log_level
        self.django = django
        """The app is the Django project: ``manage.py goatbeat``, or ``DJANGO_SETTINGS_MODULE``
        without ``--app``, once loaded."""
        self.verbosity = verbosity
        """Django's ``-v``: 0 errors only, 1 the command's default, 2 INFO, 3 DEBUG."""
        self.traceback = traceback
        """Django's ``--traceback``: a goatbeat error keeps its traceback instead of one line."""
        self.log_level_explicit = False
        """Whether the level was asked for (``--log-level``, ``-v``), rather than defaulted."""
        self._app: BeatLike | None = app if isinstance(app, BeatLike) else None
        self.app_label = app if isinstance(app, str) else None
        self.bare = False
        """Whether the app is a bare Beat on ``--database``: it declares nothing, so it
        cannot tell which code schedules the code still declares."""

    def uses_django_project(self) -> bool:
        """Whether the app is (or, once loaded, will be) the Django project."""
        if self.django:
            return True
        if isinstance(self.app_spec, BeatLike):
            return False
        spec = self.app_spec or os.environ.get("GOATBEAT_APP")
        return not spec and bool(os.environ.get("DJANGO_SETTINGS_MODULE"))

    def app(self, *, fallback: str | None = None, allow_django: bool = True) -> BeatLike:
        """The app, loaded on first use. ``allow_django=False`` skips the Django project of
        ``DJANGO_SETTINGS_MODULE`` for the fallback (the demo never runs on a project)."""
        if self._app is None:
            self._app = self._load(fallback, allow_django=allow_django)
            if self.database:
                # An explicit --database is always the target, the Django project's included
                # (DjangoRegistry.use_database): never GOATBEAT['database'] behind its back.
                use = getattr(self._app, "use_database", None)
                if not callable(use):
                    raise UserError("--database cannot be used with this app")
                try:
                    use(self.database)
                except GoatbeatError as exc:
                    raise UserError(str(exc)) from None
            self._configure_pooling()
        return self._app

    def _configure_pooling(self) -> None:
        if not (self.listen_database or self.pooled):
            return
        if self.django:
            raise UserError(
                "--listen-database and --pooled cannot be used with the Django project: set "
                "GOATBEAT['listen_database'] / GOATBEAT['pooled'] instead"
            )
        configure = getattr(self._app, "configure", None)
        if not callable(configure):
            raise UserError("--listen-database and --pooled cannot be used with this app")
        options: dict[str, Any] = {"pooled": True}
        if self.listen_database:
            options["listen_database"] = self.listen_database
        try:
            configure(**options)
        except GoatbeatError as exc:
            raise UserError(str(exc)) from None

    def store(self) -> ScheduleStore:
        return self.app().store

    def close(self) -> None:
        if self._app is not None:
            self._app.close()

    def _load(self, fallback: str | None, *, allow_django: bool = True) -> BeatLike:
        if self.django:
            return self._load_django()
        spec = self.app_spec if isinstance(self.app_spec, str) else None
        spec = spec or os.environ.get("GOATBEAT_APP") or None
        if spec:
            self.app_label = spec
            return load_app(spec)
        if os.environ.get("DJANGO_SETTINGS_MODULE") and allow_django:
            self.django = True
            return self._load_django()
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

    def _load_django(self) -> BeatLike:
        app = _django_app()
        module = os.environ.get("DJANGO_SETTINGS_MODULE", "")
        self.app_label = f"Django project {module}".strip()
        # Django's setup ran the project's LOGGING just now: its handlers take goatbeat's
        # records, or goatbeat's own handler keeps them (never both: each line once).
        defer_to_project_logging(self.log_level if self.log_level_explicit else None)
        return app


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
    except GoatbeatError as exc:  # schedules.py declares something invalid: every problem
        raise UserError(str(exc)) from None
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
def open_app(
    ctx: click.Context, *, fallback: str | None = None, allow_django: bool = True
) -> Iterator[BeatLike]:
    """The command's app, closed when the command ends."""
    obj = cli_context(ctx)
    try:
        app = obj.app(fallback=fallback, allow_django=allow_django)
        release = os.environ.get("GOATBEAT_RELEASE")
        configure = getattr(app, "configure", None)
        if release and callable(configure):
            # Every command publishes in this deploy's order, not only publish and scheduler.
            configure(release=release)
        yield app
    finally:
        obj.close()
